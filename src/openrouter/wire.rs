//! What both wire formats (OpenRouter's and the OpenAI-compatible one)
//! write alike: the one user message, and the body as JSON text.

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

/// The one user message of a request.
#[derive(Serialize)]
pub(super) struct Message<'a> {
    pub role: &'static str,
    pub content: &'a str,
}
