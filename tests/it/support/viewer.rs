//! `helmbench view` as a child process for the HTTP and browser tests: it
//! listens on a free port (`--port 0`) and the test learns the URL from the
//! line it prints; the server is killed when the handle is dropped.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

use super::{Bench, db_path};

pub struct Viewer {
    child: Child,
    /// The URL printed, token and all.
    pub url: String,
    /// The whole line that printed it.
    pub printed: String,
    /// `http://127.0.0.1:PORT`
    pub base: String,
    pub port: u16,
    pub token: Option<String>,
}

impl Viewer {
    /// `helmbench view --port 0 EXTRA…` on `b`'s benchmark and database.
    pub fn start(b: &Bench, extra: &[&str]) -> Viewer {
        Viewer::start_at(b, &db_path(b).display().to_string(), extra)
    }

    /// `helmbench view --port 0 EXTRA…` on `b`'s benchmark and the
    /// database at `url`.
    pub fn start_at(b: &Bench, url: &str, extra: &[&str]) -> Viewer {
        let mut c = b.helmbench().database(url).std();
        c.args(["view", "--port", "0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = c.spawn().expect("helmbench view starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let (url, printed) = loop {
            let line = lines
                .next()
                .expect("helmbench view printed its URL before exiting")
                .unwrap();
            if let Some((_, rest)) = line.split_once(" at http://") {
                break (format!("http://{}", rest.trim()), line.clone());
            }
        };
        // Keep draining what it prints, so a full pipe never blocks it.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let after = url.trim_start_matches("http://");
        let hostport = after.split('/').next().unwrap();
        let port: u16 = hostport.rsplit(':').next().unwrap().parse().unwrap();
        let token = url.split_once("token=").map(|(_, t)| t.to_string());
        Viewer {
            child,
            base: format!("http://127.0.0.1:{port}"),
            url,
            printed,
            port,
            token,
        }
    }

    /// A client that shows redirects instead of following them.
    pub fn client() -> reqwest::Client {
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
