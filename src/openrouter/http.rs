//! What the chat client and the catalog client share: the base URL checks
//! (scheme, no credentials, no query), the headers (the key marked
//! sensitive, attribution), one `reqwest` builder (rustls, no redirects: the
//! key must never reach another host), and reading a body up to a cap.

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use super::classify::{RetryableFailure, transport_failure};
use super::redact::redact_url;

/// The base URL trimmed of trailing slashes, if it is one requests may go
/// to; else why not (never showing credentials).
pub fn check_base_url(raw: &str) -> Result<String, String> {
    let base = raw.trim().trim_end_matches('/');
    // Every message below shows the URL without its userinfo: a
    // `user:pass@` (valid or not) is never printed.
    let shown = redact_url(base);
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(format!(
            "base URL (OPENROUTER_BASE_URL) must start with http:// or https://, got {shown:?}"
        ));
    }
    let parsed = reqwest::Url::parse(base)
        .map_err(|_| format!("base URL (OPENROUTER_BASE_URL) is not a valid URL: {shown:?}"))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!(
            "base URL (OPENROUTER_BASE_URL) must not carry credentials (user:password@): they would be sent to the server and stored with every cached reply; the key goes in OPENROUTER_API_KEY (got {shown:?})"
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "base URL (OPENROUTER_BASE_URL) must not have a ?query or #fragment (requests go to {{base}}/chat/completions), got {shown:?}"
        ));
    }
    Ok(base.to_string())
}

/// Default headers: the key as `Authorization: Bearer` (marked sensitive;
/// absent when there is none), JSON content, and the optional attribution
/// headers. Errors never echo the key.
pub fn headers(
    key: Option<&str>,
    referer: Option<&str>,
    title: Option<&str>,
) -> Result<HeaderMap, String> {
    let mut headers = HeaderMap::new();
    if let Some(k) = key.map(str::trim).filter(|k| !k.is_empty()) {
        let mut auth = HeaderValue::from_str(&format!("Bearer {k}")).map_err(|_| {
            "the API key contains characters not allowed in an HTTP header".to_string()
        })?;
        auth.set_sensitive(true);
        headers.insert(AUTHORIZATION, auth);
    }
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let Some(referer) = referer {
        let v = HeaderValue::from_str(referer)
            .map_err(|_| format!("HTTP-Referer is not a valid header: {referer:?}"))?;
        headers.insert("HTTP-Referer", v);
    }
    if let Some(title) = title {
        let v = HeaderValue::from_str(title)
            .map_err(|_| format!("X-Title must be printable ASCII, got {title:?}"))?;
        headers.insert("X-Title", v);
    }
    Ok(headers)
}

/// The one HTTP client builder: rustls, our user agent, `headers` on every
/// request, and redirects not followed at all (the Authorization header
/// must never reach another host, and the API has no reason to redirect: a
/// 3xx comes back as a non-retryable answer).
pub fn builder(headers: HeaderMap) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_backend_rustls()
        .default_headers(headers)
        .user_agent(concat!("helmbench/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
}

/// Reads a reply body chunk by chunk, giving up as soon as it passes
/// `limit` bytes (or announces more in Content-Length): a huge body is
/// never held in memory. Invalid UTF-8 is replaced, as `text()` would.
pub async fn read_capped(
    mut resp: reqwest::Response,
    limit: u64,
) -> Result<String, RetryableFailure> {
    let too_large = |what: String| RetryableFailure {
        reason: format!(
            "reply body {what} the {limit}-byte limit (HELMBENCH_MAX_REPLY_BYTES); not read further"
        ),
        ..Default::default()
    };
    if let Some(n) = resp.content_length().filter(|n| *n > limit) {
        return Err(too_large(format!("of {n} bytes is over")));
    }
    // The chunks are kept as they arrive and joined once, at the end: a
    // buffer grown by doubling is copied at each step and for a moment
    // holds the old and the new copy, 1.5 times the limit per request for
    // a body at the limit (471 MiB of RSS at 16 endless bodies in flight,
    // bench/faults.sh). A body cut at the limit is never joined, so the
    // bodies in flight hold at most the limit each.
    let mut chunks: Vec<bytes::Bytes> = Vec::new();
    let mut total: usize = 0;
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                total += chunk.len();
                if total as u64 > limit {
                    return Err(too_large("is over".into()));
                }
                chunks.push(chunk);
            }
            Ok(None) => break,
            Err(e) => return Err(transport_failure(&e)),
        }
    }
    let buf: Vec<u8> = match chunks.len() {
        1 => Vec::from(chunks.pop().expect("one chunk")),
        _ => {
            let mut buf = Vec::with_capacity(total);
            for c in chunks.drain(..) {
                buf.extend_from_slice(&c);
            }
            buf
        }
    };
    Ok(match String::from_utf8(buf) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}
