//! The search index of `helmbench view` (issue 32): an SQLite FTS5 index of
//! each result's composed prompt, reply and judge justifications, so a text
//! search over 200,000 results reads the index instead of every row.
//!
//! The index is derived data kept by the `view` process, never by a run:
//! writing results costs nothing more. It lives in its own file beside the
//! database (`helmbench.db-view-search`, with its own `-wal`), which is
//! attached to the view's connections as `search`: the user's database is
//! only read. Deleting the file is always safe (the next `view` builds it
//! again). It is filled in the background, a chunk of results (by id) per
//! transaction, and kept up to date the same way: a result, its judgements
//! and their votes are written in one transaction and never changed, so the
//! results above the last one indexed are exactly what it lacks.
//!
//! One exception: SQLite may give a new result the id of a deleted one
//! (the highest ids, when a resume deletes the latest results and writes
//! again). The last result indexed is remembered by its creation time and
//! key; when it is gone or another, the index forgets everything above the
//! last result still as it was and indexes the rest again.
//!
//! Search conditions read it through [`ResultFilter::search_index`]
//! (see `view.rs`): the index answers for the results it holds, a LIKE
//! scan for the ones written since, so a search is right while the index
//! is being built or catching up, only slower.
//!
//! [`ResultFilter::search_index`]: super::ResultFilter::search_index

use std::path::{Path, PathBuf};
use std::time::Duration;

use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use super::backend::Pool;
use super::{Store, StoreError, connect_options};
use crate::domain::SearchProgress;

/// The index's layout; an index file of another version is built again.
const VERSION: i64 = 1;

/// What the index file holds: the replies and justifications of each
/// result (rowid: the result id), each distinct composed prompt once
/// (rowid: its `prompt_doc` id; a prompt is shared by every model's result
/// of a test case, and two thirds of the text), and which prompt each
/// result has. Words, not substrings (`unicode61`: any case, any accents):
/// a trigram index, which would find any substring as LIKE does, measured
/// 2.1 times the text it indexes (480 MB for the 110,000 prompts of the
/// 220,000-result benchmark database), this one 0.3 times. The texts are
/// not copied (`content = ''`: the database has them), and rows can still
/// be forgotten (`contentless_delete`).
const SCHEMA: [&str; 5] = [
    "CREATE TABLE IF NOT EXISTS search_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        version INTEGER NOT NULL,
        last_id INTEGER NOT NULL,
        last_created TEXT NOT NULL,
        last_key TEXT NOT NULL
     )",
    "CREATE TABLE IF NOT EXISTS prompt_doc (id INTEGER PRIMARY KEY, hash TEXT NOT NULL UNIQUE)",
    "CREATE TABLE IF NOT EXISTS result_doc (id INTEGER PRIMARY KEY, prompt INTEGER NOT NULL)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS prompt_words USING fts5(
        text, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
     )",
    "CREATE VIRTUAL TABLE IF NOT EXISTS reply_words USING fts5(
        reply, judges, content = '', contentless_delete = 1, tokenize = 'unicode61 remove_diacritics 2'
     )",
];

/// Every table of the index, dropped when its layout changes.
const TABLES: [&str; 5] = [
    "search_state",
    "prompt_doc",
    "result_doc",
    "prompt_words",
    "reply_words",
];

impl Store {
    /// The search index file of the database at `db` (a path).
    pub fn search_index_file(db: &Path) -> PathBuf {
        let mut name = db.as_os_str().to_owned();
        name.push("-view-search");
        PathBuf::from(name)
    }

    /// A handle on this database whose connections have the search index
    /// at `index` attached as `search` (created, or built again when it
    /// has another layout). Only the index file is ever written through
    /// the attachment; the index starts empty and [`Store::index_search`]
    /// fills it.
    pub async fn with_search_index(&self, index: &Path) -> Result<Store, StoreError> {
        let opts = SqliteConnectOptions::new()
            .filename(index)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(60));
        let setup = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .map_err(|e| StoreError::open(&index.display().to_string(), e))?;
        let version: Option<i64> = sqlx::query_scalar(
            "SELECT version FROM search_state WHERE EXISTS
               (SELECT 1 FROM sqlite_master WHERE name = 'search_state')",
        )
        .fetch_optional(&setup)
        .await
        .unwrap_or(None);
        if version.is_some_and(|v| v != VERSION) {
            for t in TABLES {
                sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {t}")))
                    .execute(&setup)
                    .await?;
            }
        }
        for sql in SCHEMA {
            sqlx::query(sql).execute(&setup).await?;
        }
        sqlx::query(
            "INSERT INTO search_state (id, version, last_id, last_created, last_key)
             VALUES (1, ?, 0, '', '') ON CONFLICT (id) DO NOTHING",
        )
        .bind(VERSION)
        .execute(&setup)
        .await?;
        setup.close().await;

        let path = index.display().to_string();
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .after_connect(move |conn, _| {
                let path = path.clone();
                Box::pin(async move {
                    sqlx::query("ATTACH DATABASE ? AS search")
                        .bind(path)
                        .execute(&mut *conn)
                        .await?;
                    Ok(())
                })
            })
            .connect_with(connect_options(&self.url)?)
            .await
            .map_err(|e| StoreError::open(&self.url, e))?;
        Ok(Store {
            pool: Pool::Sqlite(pool),
            url: self.url.clone(),
            owner: self.owner.clone(),
            endpoint: None,
            turns: Default::default(),
        })
    }

    /// Indexes up to `chunk` results above the last one indexed, in one
    /// transaction of the index file (the database is only read), first
    /// forgetting what a reused id made wrong. Only on a handle from
    /// [`Store::with_search_index`].
    pub async fn index_search(&self, chunk: i64) -> Result<SearchProgress, StoreError> {
        // The word index is SQLite's FTS5, in a file beside a SQLite
        // database; a PostgreSQL store has none (`view` searches without it).
        let Pool::Sqlite(pool) = &self.pool else {
            return Err(StoreError::Refused(
                "the view's word index is kept for SQLite databases only".into(),
            ));
        };
        let mut tx = pool.begin().await?;
        // A write first: the index file's write lock is taken (waiting for
        // another view's indexer) before any read, so the transaction never
        // has to upgrade a read snapshot another writer made stale. Nothing
        // is written to the database itself.
        sqlx::query("UPDATE search.search_state SET version = version")
            .execute(&mut *tx)
            .await?;
        let state = sqlx::query(
            "SELECT last_id, last_created, last_key FROM search.search_state WHERE id = 1",
        )
        .fetch_one(&mut *tx)
        .await?;
        let mut last: i64 = state.get("last_id");
        let created: String = state.get("last_created");
        let key: String = state.get("last_key");
        let mut moved = false;
        if last > 0 {
            let now = stamp(&mut tx, last).await?;
            if now.as_ref() != Some(&(created.clone(), key)) {
                // Gone or another result: keep the index up to the last
                // result created before it (every one above was deleted,
                // or written later with a reused id).
                last = sqlx::query_scalar(
                    "SELECT COALESCE((SELECT id FROM main.result WHERE id < ?1 AND created_at <= ?2
                                      ORDER BY id DESC LIMIT 1), 0)",
                )
                .bind(last)
                .bind(&created)
                .fetch_one(&mut *tx)
                .await?;
                for sql in [
                    "DELETE FROM search.reply_words WHERE rowid > ?",
                    "DELETE FROM search.result_doc WHERE id > ?",
                ] {
                    sqlx::query(sql).bind(last).execute(&mut *tx).await?;
                }
                moved = true;
            }
        }
        let hi: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(id) FROM (SELECT id FROM main.result WHERE id > ? ORDER BY id LIMIT ?)",
        )
        .bind(last)
        .bind(chunk)
        .fetch_one(&mut *tx)
        .await?;
        if let Some(hi) = hi {
            let prompts: i64 =
                sqlx::query_scalar("SELECT COALESCE(MAX(id), 0) FROM search.prompt_doc")
                    .fetch_one(&mut *tx)
                    .await?;
            for sql in INDEX_CHUNK {
                sqlx::query(sql)
                    .bind(last)
                    .bind(hi)
                    .bind(prompts)
                    .execute(&mut *tx)
                    .await?;
            }
            last = hi;
            moved = true;
        }
        if moved {
            let (created, key) = stamp(&mut tx, last).await?.unwrap_or_default();
            sqlx::query(
                "UPDATE search.search_state SET last_id = ?, last_created = ?, last_key = ? WHERE id = 1",
            )
            .bind(last)
            .bind(created)
            .bind(key)
            .execute(&mut *tx)
            .await?;
        }
        let counts = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM main.result WHERE id > ?) AS pending,
                    (SELECT COALESCE(SUM(test_cases), 0) FROM main.run_total) AS results",
        )
        .bind(last)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(SearchProgress {
            last_id: last,
            pending: counts.get("pending"),
            results: counts.get("results"),
        })
    }
}

/// Indexes the results with ids in `(?1, ?2]`: their prompts not indexed
/// yet (each once: the prompts above `?3`, the highest indexed before),
/// which prompt each has, their replies and justifications.
const INDEX_CHUNK: [&str; 4] = [
    "INSERT INTO search.prompt_doc (hash)
     SELECT DISTINCT r.prompt_hash FROM main.result r
      WHERE r.id > ?1 AND r.id <= ?2 AND ?3 IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM search.prompt_doc p WHERE p.hash = r.prompt_hash)",
    "INSERT INTO search.prompt_words (rowid, text)
     SELECT p.id, pt.text FROM search.prompt_doc p JOIN main.prompt_text pt ON pt.hash = p.hash
      WHERE p.id > ?3 AND ?1 IS NOT NULL AND ?2 IS NOT NULL",
    "INSERT OR REPLACE INTO search.result_doc (id, prompt)
     SELECT r.id, p.id FROM main.result r JOIN search.prompt_doc p ON p.hash = r.prompt_hash
      WHERE r.id > ?1 AND r.id <= ?2 AND ?3 IS NOT NULL",
    "INSERT INTO search.reply_words (rowid, reply, judges)
     SELECT r.id, r.response,
            concat_ws(char(10),
              (SELECT group_concat(j.justification, char(10)) FROM main.judgement j
                WHERE j.result_id = r.id),
              (SELECT group_concat(v.justification, char(10)) FROM main.judge_vote v
                WHERE v.result_id = r.id))
       FROM main.result r
      WHERE r.id > ?1 AND r.id <= ?2 AND ?3 IS NOT NULL",
];

/// What identifies result `id` beyond its id: when it was written, and
/// where (run, test code, repeat); none when there is no such result.
async fn stamp(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    id: i64,
) -> Result<Option<(String, String)>, StoreError> {
    let row = sqlx::query(
        "SELECT created_at, run_id || '/' || test_code || '/' || repeat_index AS place
           FROM main.result WHERE id = ?",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    Ok(row.map(|r| (r.get("created_at"), r.get("place"))))
}
