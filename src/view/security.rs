//! The layer in front of every route (issue 32's security list), because
//! model replies and judge justifications are attacker-controlled text and
//! a browser holds the page:
//!
//! - bound to loopback, a `Host` other than `localhost`, `127.0.0.1` or
//!   `[::1]` with the port is refused (DNS rebinding);
//! - with an access token (any non-loopback bind has one), every request
//!   must carry it: the `token` query parameter once (then a cookie), the
//!   cookie, or `Authorization: Bearer`;
//! - state changes only by POST, each checked for a same-origin `Origin`
//!   (or, without one, `Referer`) and the session's CSRF token;
//! - every response carries a CSP without inline scripts, `frame-ancestors
//!   'none'`, `X-Frame-Options: DENY`, `nosniff` and `no-store`.
//!
//! It also gives each browser a session (a random id in a cookie) and reads
//! the reviewer's preferences from cookies.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::state::App;

/// The policy every page is served with: nothing from any other origin, no
/// inline or evaluated script, no framing. Inline styles are allowed (the
/// report's colour swatches and heat cells carry their colour in `style`);
/// a style cannot run code.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; \
img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; object-src 'none'; \
frame-ancestors 'none'";

/// The largest form body read (a label's reason is capped well below it).
const MAX_FORM_BYTES: usize = 64 * 1024;

const SESSION_COOKIE: &str = "hb_session";
const TOKEN_COOKIE: &str = "hb_token";
pub const REVIEWER_COOKIE: &str = "hb_reviewer";
pub const COLLAPSE_COOKIE: &str = "hb_collapse";
pub const NOTE_COOKIE: &str = "hb_note_seen";

/// A browser's session and preferences, for the handlers.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: String,
    /// The token every form of this session sends back.
    pub csrf: String,
    /// The reviewer name remembered from the last label.
    pub reviewer: Option<String>,
    /// Keep prompt and reply texts collapsed until clicked.
    pub collapse: bool,
    /// The content note was dismissed.
    pub note_seen: bool,
}

/// The value of cookie `name` in the request's `Cookie` headers.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// A `Set-Cookie` value: never readable by script, never sent cross-site.
pub fn set_cookie(name: &str, value: &str) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "{name}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age=31536000"
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("hb_invalid=1; Path=/"))
}

/// Hex of bytes (cookie values stay within the cookie alphabet).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The reviewer name kept in its cookie as hex of its UTF-8.
pub fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) || s.len() > 400 {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

/// Equal strings, compared in time that does not depend on where they differ.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

fn csrf_of(app: &App, session: &str) -> String {
    crate::benchmark::sha256_hex(&[&app.secret, b"csrf", session.as_bytes()])
}

/// A session id as this server makes them: 32 hex digits.
fn valid_session(s: &str) -> bool {
    s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn refuse(status: StatusCode, why: &str) -> Response {
    let mut r = (status, format!("{why}\n")).into_response();
    add_headers(r.headers_mut());
    r
}

fn add_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // Same-origin requests keep their Referer (the POST check's fallback);
    // a link followed elsewhere carries none.
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// Whether `host` (the Host header) names this loopback server.
fn loopback_host(host: &str, port: u16) -> bool {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .any(|h| host == format!("{h}:{port}"))
}

/// The token a request carries, and whether it came in the query (to be
/// kept in a cookie from then on).
fn carried_token(req: &Request) -> Option<(String, bool)> {
    if let Some(t) = req.uri().query().and_then(|q| {
        serde_urlencoded::from_str::<Vec<(String, String)>>(q)
            .ok()?
            .into_iter()
            .find(|(k, _)| k == "token")
            .map(|(_, v)| v)
    }) {
        return Some((t, true));
    }
    if let Some(t) = cookie(req.headers(), TOKEN_COOKIE) {
        return Some((t.to_string(), false));
    }
    req.headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(|t| (t.trim().to_string(), false))
}

/// Whether a state-changing request comes from a page of this server: its
/// `Origin` is this origin, or (a browser that sent none) its `Referer` is
/// a page of it. Neither header: refused.
fn same_origin(headers: &HeaderMap, host: &str) -> bool {
    let origin = format!("http://{host}");
    if let Some(o) = headers.get(header::ORIGIN) {
        return o.to_str().is_ok_and(|o| o == origin);
    }
    headers
        .get(header::REFERER)
        .and_then(|r| r.to_str().ok())
        .is_some_and(|r| r.starts_with(&format!("{origin}/")) || r == origin)
}

/// The middleware: checks, session, headers.
pub async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    if app.loopback && !loopback_host(&host, app.port) {
        return refuse(
            StatusCode::BAD_REQUEST,
            "refused: this server answers only to localhost, 127.0.0.1 or [::1] with its port (Host header)",
        );
    }
    let mut token_cookie = None;
    if let Some(expected) = &app.token {
        match carried_token(&req) {
            Some((t, from_query)) if same(&t, expected) => {
                if from_query {
                    token_cookie = Some(set_cookie(TOKEN_COOKIE, expected));
                }
            }
            _ => {
                return refuse(
                    StatusCode::UNAUTHORIZED,
                    "refused: this server needs its access token (open the URL `helmbench view` printed)",
                );
            }
        }
    }
    let existing = cookie(req.headers(), SESSION_COOKIE)
        .filter(|s| valid_session(s))
        .map(str::to_string);
    let is_write = !matches!(*req.method(), Method::GET | Method::HEAD);
    let (parts, body) = req.into_parts();
    let mut req = if is_write {
        if !same_origin(&parts.headers, &host) {
            return refuse(
                StatusCode::FORBIDDEN,
                "refused: a change must come from a page of this server (Origin or Referer of another site, or none)",
            );
        }
        let Some(session) = &existing else {
            return refuse(
                StatusCode::FORBIDDEN,
                "refused: no session (reload the page and try again)",
            );
        };
        let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
            return refuse(StatusCode::PAYLOAD_TOO_LARGE, "refused: form too large");
        };
        let fields: Vec<(String, String)> =
            serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
        let sent = fields.iter().find(|(k, _)| k == "csrf").map(|(_, v)| v);
        if !sent.is_some_and(|t| same(t, &csrf_of(&app, session))) {
            return refuse(
                StatusCode::FORBIDDEN,
                "refused: the form's CSRF token is missing or wrong (reload the page and try again)",
            );
        }
        Request::from_parts(parts, Body::from(bytes))
    } else {
        Request::from_parts(parts, body)
    };
    let new_session = existing.is_none();
    let id = existing.unwrap_or_else(|| hex(&rand::random::<[u8; 16]>()));
    let headers = req.headers();
    let session = Session {
        csrf: csrf_of(&app, &id),
        reviewer: cookie(headers, REVIEWER_COOKIE)
            .and_then(unhex)
            .filter(|r| !r.trim().is_empty()),
        collapse: cookie(headers, COLLAPSE_COOKIE) == Some("1"),
        note_seen: cookie(headers, NOTE_COOKIE) == Some("1"),
        id: id.clone(),
    };
    req.extensions_mut().insert(session);
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    add_headers(h);
    if new_session {
        h.append(header::SET_COOKIE, set_cookie(SESSION_COOKIE, &id));
    }
    if let Some(c) = token_cookie {
        h.append(header::SET_COOKIE, c);
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_need_the_port() {
        assert!(loopback_host("127.0.0.1:8750", 8750));
        assert!(loopback_host("localhost:8750", 8750));
        assert!(loopback_host("[::1]:8750", 8750));
        assert!(!loopback_host("127.0.0.1", 8750));
        assert!(!loopback_host("evil.example:8750", 8750));
        assert!(!loopback_host("localhost:8751", 8750));
    }

    #[test]
    fn reviewer_names_round_trip_through_hex() {
        assert_eq!(unhex(&hex("dr-lée".as_bytes())).as_deref(), Some("dr-lée"));
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex("abc"), None);
    }

    #[test]
    fn same_origin_needs_origin_or_referer_of_this_host() {
        let mut h = HeaderMap::new();
        assert!(!same_origin(&h, "127.0.0.1:1"));
        h.insert(
            header::REFERER,
            HeaderValue::from_static("http://127.0.0.1:1/case/3"),
        );
        assert!(same_origin(&h, "127.0.0.1:1"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(!same_origin(&h, "127.0.0.1:1"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:1"),
        );
        assert!(same_origin(&h, "127.0.0.1:1"));
    }
}
