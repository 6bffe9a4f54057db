//! What an abandoned attempt was billed. An attempt given up on a timeout,
//! or cut at the size limit, after its reply had started may still have
//! been paid for. OpenRouter names every generation in the
//! `X-Generation-Id` response header (its API reference, "Streaming":
//! "returned ... for all endpoints"), and `GET /generation?id=` gives its
//! `total_cost`: the attempt is counted at that figure. Where no id was
//! seen (no header arrived, or a server that does not send one) or the
//! lookup fails, the charge is of unknown amount (NaN), never $0.

use std::time::Duration;

use reqwest::header::HeaderMap;
use serde_json::Value;

use super::classify::reply_cost;

/// The response header that names a generation.
const GENERATION_HEADER: &str = "x-generation-id";

/// How often a generation not found yet is asked again: its record is
/// written a moment after the reply.
const LOOKUPS: u32 = 3;
const LOOKUP_DELAY: Duration = Duration::from_millis(500);
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// The generation id a reply's headers carry, when one looks like an id
/// (printable, short: it goes into a query string).
pub(super) fn generation_id(headers: &HeaderMap) -> Option<String> {
    let id = headers.get(GENERATION_HEADER)?.to_str().ok()?.trim();
    let plausible = !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    plausible.then(|| id.to_string())
}

/// `total_cost` of generation `id` from `GET {url}?id=`, asked a few
/// times while it is not found yet; NaN (a charge of unknown amount) when
/// it cannot be had.
pub(super) async fn billed(http: &reqwest::Client, url: &reqwest::Url, id: &str) -> f64 {
    for n in 0..LOOKUPS {
        if n > 0 {
            tokio::time::sleep(LOOKUP_DELAY * n).await;
        }
        let mut url = url.clone();
        url.query_pairs_mut().append_pair("id", id);
        let sent = http.get(url).timeout(LOOKUP_TIMEOUT).send().await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) => {
                tracing::debug!(error = %e, "generation lookup failed");
                continue;
            }
        };
        let status = resp.status();
        if !status.is_success() {
            // 404 until the record is written; anything else will not change.
            if status.as_u16() == 404 {
                continue;
            }
            break;
        }
        let Ok(v) = resp.json::<Value>().await else {
            break;
        };
        if let Some(cost) = reply_cost(v.pointer("/data/total_cost"), "total_cost") {
            tracing::info!(
                generation = id,
                cost,
                "an abandoned attempt was billed; counted from /generation"
            );
            return cost;
        }
        break;
    }
    tracing::warn!(
        generation = id,
        "an abandoned attempt may have been billed and its cost could not be looked up: counted as a charge of unknown amount"
    );
    f64::NAN
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn only_a_plausible_id_is_taken() {
        let mut h = HeaderMap::new();
        assert_eq!(generation_id(&h), None);
        h.insert(
            GENERATION_HEADER,
            HeaderValue::from_static("gen-1732-abc_D"),
        );
        assert_eq!(generation_id(&h).as_deref(), Some("gen-1732-abc_D"));
        h.insert(GENERATION_HEADER, HeaderValue::from_static("a b&c=d"));
        assert_eq!(generation_id(&h), None);
        h.insert(GENERATION_HEADER, HeaderValue::from_static(""));
        assert_eq!(generation_id(&h), None);
    }
}
