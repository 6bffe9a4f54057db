//! The viewer's text search on PostgreSQL (issue 45): word indexes of its
//! own, kept by PostgreSQL as results are written (GIN indexes on
//! `to_tsvector('simple', …)` of the replies, the composed prompts and the
//! judges' justifications: migration 20261129000302), where SQLite's view
//! keeps an FTS5 index beside the database (view_search.rs).
//!
//! The same words find the same results on both: the search text's words
//! as one phrase, in order, any case, the last also as the start of a word
//! when it has 3 characters or more (SQLite's `fts_phrase`, view.rs).
//!
//! A page reads a run's results in code order and stops at 51: a word in
//! most results is best looked up row by row, a rare one (or one in none)
//! best listed from the index first, or a page would read every result of
//! the run. Which one it is, the index says: each text's matches are
//! listed up to [`FEW`]; a list that stays under it is used as is (an
//! empty one drops that text), a longer one means "row by row".

use super::backend::Pool;
use super::{Store, StoreError};
use crate::domain::ResultFilter;

/// Up to this many matches of a text are listed; more are looked up row by
/// row (at least this many among a run's results: a page finds its 51
/// quickly).
const FEW: i64 = 1_000;

/// A search on PostgreSQL, its indexes asked: for each text, its matches
/// when few (`Some`), or `None` for "many: test each row".
#[derive(Debug, Clone)]
pub(super) struct PgSearch {
    /// The `to_tsquery('simple', …)` text: `'crisis' <-> 'lin':*`.
    pub(super) query: String,
    /// Results of the filter's runs whose reply matches.
    pub(super) replies: Option<Vec<i64>>,
    /// Composed prompts (their hashes) that match.
    pub(super) prompts: Option<Vec<String>>,
    /// Results one of whose judgements or judge votes matches.
    pub(super) judged: Option<Vec<i64>>,
}

/// The tsquery text for a search: its words (letters and digits) as one
/// phrase, the last also a prefix when it has 3 characters or more; None
/// when it has no word (only punctuation: the scan answers). Each word is
/// quoted; a word holds no quote or operator.
fn tsquery(text: &str) -> Option<String> {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(|w| format!("'{}'", w.to_lowercase()))
        .collect();
    let last = text
        .split(|c: char| !c.is_alphanumeric())
        .rfind(|w| !w.is_empty())?;
    let prefix = if last.chars().count() >= 3 { ":*" } else { "" };
    Some(format!("{}{prefix}", words.join(" <-> ")))
}

impl Store {
    /// The filter's search on PostgreSQL, its indexes asked (see the
    /// module's comment); None on SQLite, without a search, or for a
    /// search with no word.
    pub(super) async fn pg_search(
        &self,
        filter: &ResultFilter,
    ) -> Result<Option<PgSearch>, StoreError> {
        let Some(query) = filter
            .search
            .as_deref()
            .map(str::trim)
            .filter(|q| !q.is_empty())
            .and_then(tsquery)
        else {
            return Ok(None);
        };
        let Pool::Postgres(pool) = &self.pool else {
            return Ok(None);
        };
        {
            let runs: Vec<i64> = filter.runs.clone();
            let few = |mut v: Vec<i64>| {
                (v.len() as i64 <= FEW).then(|| {
                    v.sort_unstable();
                    v.dedup();
                    v
                })
            };
            let replies: Vec<i64> = sqlx::query_scalar(
                "SELECT x.id FROM result x WHERE x.run_id = ANY($1)
                    AND to_tsvector('simple', COALESCE(x.response, '')) @@ to_tsquery('simple', $2)
                  LIMIT $3",
            )
            .bind(&runs)
            .bind(&query)
            .bind(FEW + 1)
            .fetch_all(pool)
            .await?;
            let prompts: Vec<String> = sqlx::query_scalar(
                "SELECT pt.hash FROM prompt_text pt
                  WHERE to_tsvector('simple', pt.text) @@ to_tsquery('simple', $1) LIMIT $2",
            )
            .bind(&query)
            .bind(FEW + 1)
            .fetch_all(pool)
            .await?;
            let mut judged: Vec<i64> = Vec::new();
            for table in ["judgement", "judge_vote"] {
                let sql = format!(
                    "SELECT j.result_id FROM {table} j
                      WHERE to_tsvector('simple', COALESCE(j.justification, '')) @@ to_tsquery('simple', $1)
                      LIMIT $2"
                );
                judged.extend(
                    sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql))
                        .bind(&query)
                        .bind(FEW + 1)
                        .fetch_all(pool)
                        .await?,
                );
            }
            Ok(Some(PgSearch {
                replies: few(replies),
                prompts: (prompts.len() as i64 <= FEW).then_some(prompts),
                judged: few(judged),
                query,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_texts_become_one_quoted_phrase() {
        assert_eq!(
            tsquery("Crisis lin").as_deref(),
            Some("'crisis' <-> 'lin':*")
        );
        assert_eq!(tsquery("a b").as_deref(), Some("'a' <-> 'b'"));
        // Operators and quotes are never read as tsquery syntax.
        assert_eq!(
            tsquery("it's & !x | 'y' <-> z").as_deref(),
            Some("'it' <-> 's' <-> 'x' <-> 'y' <-> 'z'")
        );
        assert_eq!(tsquery(" -- ! "), None);
    }
}
