//! The keeper of the search index (see [`crate::domain::SearchProgress`] and
//! `src/store/view_search.rs`): a background task that fills the index when
//! `view` starts and then, every second, indexes what runs wrote since. It
//! writes only the index file beside the database, never the database: a
//! GET still changes no user data. Pages read its progress to say whether
//! a search went through the index or is still partly a scan.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::SearchProgress;
use crate::store::Store;

/// Results indexed per transaction: big enough that a 200,000-result
/// database is indexed in about a hundred transactions, small enough that
/// each holds the index file's write lock for a fraction of a second.
const CHUNK: i64 = 2_000;

/// How often a caught-up index looks for new results.
const POLL: Duration = Duration::from_secs(1);

/// The index, as pages see it.
pub struct SearchIndex {
    /// The index file (shown on the page, so a person knows what to delete).
    pub file: PathBuf,
    progress: Mutex<Option<SearchProgress>>,
}

/// Where the index stands, for a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SearchState {
    /// Not one chunk indexed yet.
    Starting,
    /// Indexing: the percentage of results indexed.
    Building(u8),
    /// Every result written before its last look is indexed.
    Ready,
}

impl SearchIndex {
    pub fn new(file: PathBuf) -> SearchIndex {
        SearchIndex {
            file,
            progress: Mutex::new(None),
        }
    }

    pub fn state(&self) -> SearchState {
        let p = *self.progress.lock().unwrap_or_else(|e| e.into_inner());
        match p {
            None => SearchState::Starting,
            // A few results written since the last look are scanned, which
            // costs nothing: the index is ready.
            Some(p) if p.pending <= CHUNK => SearchState::Ready,
            Some(p) => {
                let done = (p.results - p.pending).max(0) as f64 / p.results.max(1) as f64;
                SearchState::Building((done * 100.0).floor().min(99.0) as u8)
            }
        }
    }

    /// Fills the index, then keeps it up to date, until the task is
    /// dropped. Says once on standard output when it has caught up (the
    /// benchmark waits for that line).
    pub async fn keep(&self, store: Store) {
        let started = Instant::now();
        let mut announced = false;
        loop {
            match store.index_search(CHUNK).await {
                Ok(p) => {
                    *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = Some(p);
                    if p.pending > 0 {
                        // Let page requests have the cores between chunks.
                        tokio::task::yield_now().await;
                        continue;
                    }
                    if !announced {
                        announced = true;
                        let mut out = std::io::stdout().lock();
                        // Standard output may be gone (piped into `head`):
                        // the line is only a note.
                        let _ = writeln!(
                            out,
                            "helmbench view: search index ready ({} results, {:.1} s; {})",
                            p.results,
                            started.elapsed().as_secs_f64(),
                            self.file.display()
                        );
                        let _ = out.flush();
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "view: the search index could not be brought up to date");
                    tokio::time::sleep(POLL * 5).await;
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }
}
