//! What both wire formats (OpenRouter's and the OpenAI-compatible one)
//! write alike: the messages, and the body as JSON text.

use serde::Serialize;

/// The body: `{"model":…,"messages":[…]` and then `rest`, the other fields
/// as [`rest_text`] wrote them: byte for byte the text serde_json writes
/// for one struct of them all. The messages' contents (the composed prompt,
/// most of the body) are escaped by [`push_json_str`]: serde_json's
/// escaping, a byte at a time, was 2 % of a run's CPU (issue 45). Empty
/// when `rest` is.
pub(super) fn write_body(model: &str, messages: Messages<'_>, rest: &[u8]) -> String {
    if rest.is_empty() {
        return String::new();
    }
    let mut out = Vec::with_capacity(messages.prompt.len() * 9 / 8 + rest.len() + 256);
    out.extend_from_slice(b"{\"model\":");
    push_json_str(&mut out, model);
    out.extend_from_slice(b",\"messages\":[");
    let user = Message {
        role: "user",
        content: messages.prompt,
    };
    for (i, m) in messages.history.iter().chain([&user]).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"role\":");
        push_json_str(&mut out, m.role);
        out.extend_from_slice(b",\"content\":");
        push_json_str(&mut out, m.content);
        out.push(b'}');
    }
    out.push(b']');
    out.extend_from_slice(rest);
    // Only strings escaped as serde_json escapes them, and `rest_text`'s
    // UTF-8, were written.
    String::from_utf8(out).unwrap_or_default()
}

/// The fields of a body after its messages, `rest` (a struct serialising
/// as a JSON object), as they follow them: its `{` becomes the comma after
/// the messages and its `}` closes the body (`}` alone for no field).
/// Written once for every request that shares them: the response format's
/// schema was serialised again on every call (issue 45). Empty when `rest`
/// is not an object.
pub(super) fn rest_text(rest: &impl Serialize) -> Vec<u8> {
    let mut out = serde_json::to_vec(rest).unwrap_or_default();
    match out.as_slice() {
        b"{}" => out = b"}".to_vec(),
        [b'{', ..] => out[0] = b',',
        _ => out.clear(),
    }
    out
}

/// `s` as a JSON string, quotes included, exactly as serde_json writes it:
/// `"` and `\` escaped with a backslash, `\b \f \n \r \t` by name, the
/// other control characters as `\u00xx` (lower-case hex), everything else
/// as is. Eight bytes are tested at once for one that needs escaping.
pub(super) fn push_json_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        if let Some(word) = bytes.get(i..i + 8)
            && !needs_escape(u64::from_le_bytes(word.try_into().unwrap_or_default()))
        {
            i += 8;
            continue;
        }
        let b = bytes[i];
        let short: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x0c => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0..=0x1f => b"",
            _ => {
                i += 1;
                continue;
            }
        };
        out.extend_from_slice(&bytes[start..i]);
        if short.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(b >> 4)]);
            out.push(HEX[usize::from(b & 0xf)]);
        } else {
            out.extend_from_slice(short);
        }
        i += 1;
        start = i;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// Whether any byte of `w` is a control character, `"` or `\` (the classic
/// tests for a byte below a bound and for a zero byte; exact for whether
/// any byte is one, not for which).
fn needs_escape(w: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * u64::from(b'"'));
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let zero = |x: u64| x.wrapping_sub(ONES) & !x;
    (below_space | zero(quote) | zero(backslash)) & HIGH != 0
}

/// One message of a request: the earlier messages of a conversation
/// (issue 42) and the user message the request is sent for.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Message<'a> {
    pub role: &'static str,
    pub content: &'a str,
}

/// A request's `messages` ([`write_body`] writes them): the history, then
/// the user's message. With no history the array holds the one message
/// single-turn test cases always sent, so their bodies and cache keys do
/// not change.
pub(super) struct Messages<'a> {
    pub history: &'a [Message<'a>],
    pub prompt: &'a str,
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};

    use super::*;

    /// A body with a conversation's history and without, and with and
    /// without further fields: the text serde_json writes for the whole
    /// object in this field order.
    #[test]
    fn a_body_is_what_serde_json_writes_for_it() {
        #[derive(Serialize)]
        struct Rest {
            #[serde(skip_serializing_if = "Option::is_none")]
            seed: Option<i64>,
            temperature: f64,
        }
        #[derive(Serialize)]
        struct Empty {}
        let history = [
            Message {
                role: "user",
                content: "first \"message\"\n",
            },
            Message {
                role: "assistant",
                content: "a reply \\ </tag> \u{1}",
            },
        ];
        for history in [&history[..], &[]] {
            let messages = |h| Messages {
                history: h,
                prompt: "the prompt\tand é",
            };
            let mut want = serde_json::json!({"model": "a/b", "messages": history});
            want["messages"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"role": "user", "content": "the prompt\tand é"}));
            let written = write_body("a/b", messages(history), &rest_text(&Empty {}));
            assert_eq!(written, want.to_string());
            want["temperature"] = serde_json::json!(0.5);
            let rest = Rest {
                seed: None,
                temperature: 0.5,
            };
            assert_eq!(
                write_body("a/b", messages(history), &rest_text(&rest)),
                want.to_string()
            );
        }
    }

    /// Strings of every ASCII byte, quotes, backslashes and non-ASCII
    /// characters, at every alignment: what serde_json writes, byte for
    /// byte (the reply cache is keyed by these bytes).
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let pieces: Vec<String> = (0u8..0x80)
            .map(|b| (b as char).to_string())
            .chain(
                [
                    "é",
                    "\u{1F600}",
                    "\u{2028}",
                    "\u{85}",
                    "plain text ",
                    "\"\\",
                ]
                .map(String::from),
            )
            .collect();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(45);
        for n in 0..20_000 {
            let s: String = (0..rng.random_range(0..40))
                .map(|_| {
                    // Mostly plain text, so runs of eight clean bytes occur.
                    if rng.random_bool(0.7) {
                        "abcdefgh "[..rng.random_range(1..10)].to_string()
                    } else {
                        pieces[rng.random_range(0..pieces.len())].clone()
                    }
                })
                .collect();
            let mut out = Vec::new();
            push_json_str(&mut out, &s);
            assert_eq!(
                String::from_utf8(out).unwrap(),
                serde_json::to_string(&s).unwrap(),
                "string {n}: {s:?}"
            );
        }
    }
}
