//! The server: the bind (loopback by default; any other address gets an
//! access token, given or random, printed once), the router behind the
//! security layer, the embedded assets, and serving until Ctrl-C.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tower_http::compression::CompressionLayer;

use super::search::SearchIndex;
use super::security::guard;
use super::state::{App, PageError};
use super::{case, compare, label, results, run, runs};
use crate::benchmark::{Benchmark, ScoringConfig};
use crate::store::Store;
use crate::{Error, Result};

/// The shared page style, then the view's own.
static CSS: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    [
        crate::report::html::parts::BASE_CSS,
        include_str!("assets/view.css"),
    ]
    .concat()
});
const JS: &str = include_str!("assets/view.js");

/// What `helmbench view` serves, resolved by the command line.
pub struct ViewConfig {
    pub host: String,
    pub port: u16,
    pub token: Option<String>,
    /// Open the URL in the desktop's browser.
    pub open: bool,
    pub database_url: String,
    pub scoring: ScoringConfig,
    pub scoring_source: String,
    pub behaviour_names: BTreeMap<String, String>,
    pub benchmark: Option<Benchmark>,
}

/// `--host`: an IP address, or `localhost`.
fn parse_host(host: &str) -> Result<IpAddr> {
    let h = host.trim();
    if h.eq_ignore_ascii_case("localhost") {
        return Ok(IpAddr::V4(Ipv4Addr::LOCALHOST));
    }
    let ip: IpAddr = h
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .map_err(|_| {
            Error::usage(format!(
                "--host {host:?} is not an IP address (expected 127.0.0.1, ::1, 0.0.0.0 or this machine's address)"
            ))
        })?;
    // On loopback the Host check answers only to localhost, 127.0.0.1 and
    // [::1] (a DNS-rebinding guard): another 127.x address would print a
    // URL the server itself refuses.
    if ip.is_loopback()
        && ip != IpAddr::V4(Ipv4Addr::LOCALHOST)
        && ip != IpAddr::V6(Ipv6Addr::LOCALHOST)
    {
        return Err(Error::usage(format!(
            "--host {host:?}: of the loopback addresses only 127.0.0.1, ::1 and localhost are served (the server answers only to those names)"
        )));
    }
    Ok(ip)
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(runs::runs_page))
        .route("/api/runs", get(runs::runs_json))
        .route("/runs/{id}", get(run::run_page))
        .route("/results", get(results::results_page))
        .route("/results.csv", get(results::download_csv))
        .route("/results.jsonl", get(results::download_jsonl))
        .route("/case/{id}", get(case::case_page))
        .route("/compare", get(compare::compare_page))
        .route("/label", post(label::post_label))
        .route("/prefs", post(label::post_prefs))
        .route(
            "/assets/view.css",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
                    CSS.as_str(),
                )
            }),
        )
        .route(
            "/assets/view.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    JS,
                )
            }),
        )
        .fallback(not_found)
        .layer(CompressionLayer::new())
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

async fn not_found() -> impl IntoResponse {
    PageError::new(StatusCode::NOT_FOUND, "no such page")
}

/// The URL a person opens: the address bound (a wildcard bind is reached
/// on loopback here), the token in it when there is one.
fn url(ip: IpAddr, port: u16, token: Option<&str>) -> String {
    let host = match ip {
        IpAddr::V4(v) if v.is_unspecified() => "127.0.0.1".to_string(),
        IpAddr::V6(v) if v.is_unspecified() => "[::1]".to_string(),
        IpAddr::V6(v) => format!("[{v}]"),
        IpAddr::V4(v) => v.to_string(),
    };
    match token {
        Some(t) => format!("http://{host}:{port}/?token={t}"),
        None => format!("http://{host}:{port}/"),
    }
}

/// Serves the database until Ctrl-C.
pub async fn serve(cfg: ViewConfig) -> Result<()> {
    let ip = parse_host(&cfg.host)?;
    let loopback = ip.is_loopback();
    let given = cfg
        .token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    if let Some(t) = &given
        && (t.len() < 16
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'))
    {
        return Err(Error::usage(
            "--token must be at least 16 characters of letters, digits, - or _ (it travels in a URL and a cookie)".into(),
        ));
    }
    // Off loopback, every request needs the token: the one given, or a
    // random one printed once below.
    let token = match given {
        Some(t) => Some(t),
        None if !loopback => Some(super::security::hex(&rand::random::<[u8; 20]>())),
        None => None,
    };
    let opened = Store::open(&cfg.database_url).await?;
    let (store, search) = with_search_index(opened).await;
    let listener = tokio::net::TcpListener::bind(SocketAddr::new(ip, cfg.port))
        .await
        .map_err(|e| {
            Error::usage(format!(
                "cannot listen on {}:{}: {e} (pass another --port, or 0 for any free one)",
                cfg.host, cfg.port
            ))
        })?;
    let port = listener.local_addr()?.port();
    let app = Arc::new(App {
        store: store.clone(),
        search: search.clone(),
        reports: Default::default(),
        scoring: cfg.scoring,
        scoring_source: cfg.scoring_source,
        behaviour_names: cfg.behaviour_names,
        benchmark: cfg.benchmark,
        secret: rand::random(),
        token: token.clone(),
        loopback,
        port,
        sittings: Mutex::new(HashMap::new()),
    });
    let link = url(ip, port, token.as_deref());
    {
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "helmbench view: serving {} at {link}",
            crate::domain::redact_password(&cfg.database_url)
        )?;
        if !loopback {
            writeln!(
                out,
                "bound to {ip}, not loopback: every request needs the token in this URL (it is printed only here)"
            )?;
        }
        writeln!(out, "press Ctrl-C to stop")?;
        out.flush()?;
    }
    if cfg.open {
        open_browser(&link);
    }
    let keeper = search.map(|index| {
        let store = store.clone();
        tokio::spawn(async move { index.keep(store).await })
    });
    axum::serve(listener, router(app))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    if let Some(k) = keeper {
        k.abort();
        let _ = k.await;
    }
    store.close().await;
    Ok(())
}

/// The database with the search index beside it attached, and the index's
/// keeper; the database alone (searches scan) when it has no file (in
/// memory), is not SQLite, or the index file cannot be opened.
async fn with_search_index(store: Store) -> (Store, Option<Arc<SearchIndex>>) {
    let Some(db) = store.database_file() else {
        return (store, None);
    };
    let file = Store::search_index_file(&db);
    match store.with_search_index(&file).await {
        Ok(indexed) => {
            store.close().await;
            (indexed, Some(Arc::new(SearchIndex::new(file))))
        }
        Err(e) => {
            eprintln!(
                "note: no search index ({e}); a text search reads every result (slow on a large database)"
            );
            (store, None)
        }
    }
}

/// `--open`: the desktop's opener, if there is one; failing is only a note.
fn open_browser(link: &str) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    if let Err(e) = std::process::Command::new(opener)
        .arg(link)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        eprintln!("note: could not open a browser ({opener}: {e}); open the URL above");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_urls() {
        assert!(parse_host("localhost").unwrap().is_loopback());
        assert!(parse_host("::1").unwrap().is_loopback());
        assert!(!parse_host("0.0.0.0").unwrap().is_loopback());
        assert!(parse_host("example.org").is_err());
        let wildcard = parse_host("0.0.0.0").unwrap();
        assert_eq!(
            url(wildcard, 8750, Some("t")),
            "http://127.0.0.1:8750/?token=t"
        );
        assert_eq!(url(parse_host("::1").unwrap(), 1, None), "http://[::1]:1/");
    }
}
