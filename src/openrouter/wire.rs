//! What both wire formats (OpenRouter's and the OpenAI-compatible one)
//! write alike: the messages, and the body as JSON text.

use serde::Serialize;

/// `body` as JSON text, sized for `prompt` plus some escaping, the schema
/// and the rest, so the buffer is not regrown while the prompt is written.
pub(super) fn write_body(prompt: &str, body: &impl Serialize) -> String {
    let mut out = Vec::with_capacity(prompt.len() * 9 / 8 + 2048);
    // Serialising borrowed strings, numbers and a `Value` cannot fail, and
    // serde_json writes UTF-8.
    match serde_json::to_writer(&mut out, body) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// One message of a request: the earlier messages of a conversation
/// (issue 42) and the user message the request is sent for.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    pub content: &'a str,
}

/// A request's `messages`: the history, then the user's message. With no
/// history it writes exactly what the one-message array wrote, so the
/// bodies and cache keys of single-turn test cases do not change.
pub(super) struct Messages<'a> {
    pub history: &'a [Message<'a>],
    pub prompt: &'a str,
}

impl Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = s.serialize_seq(Some(self.history.len() + 1))?;
        for m in self.history {
            seq.serialize_element(m)?;
        }
        seq.serialize_element(&Message {
            role: "user",
            content: self.prompt,
        })?;
        seq.end()
    }
}
