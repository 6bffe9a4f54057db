//! The reads of `helmbench view`'s results matrix (issue 32): the rows
//! (test case and repeat) that pass a filter, a page at a time by keyset
//! (never OFFSET: a page deep in a 200,000-result run costs what the first
//! does), the cells of those rows across the chosen runs, the neighbours of
//! one row within the filter, and every matching result streamed for a
//! download. Every value a person typed is bound, never spliced: the SQL
//! text is assembled only from the fixed fragments below.

use futures_util::TryStreamExt;
use sqlx::Row;
use sqlx::sqlite::SqliteArguments;

use super::{Store, StoreError};
use crate::domain::{Cell, CellStatus, Direction, DownloadRow, ResultFilter, RowKey, StatusFilter};

/// The SQL condition of a status filter on result `r`: kept with the
/// store's other SQL, out of the domain's type.
trait StatusSql {
    fn sql(self) -> Option<&'static str>;
}

impl StatusSql for StatusFilter {
    fn sql(self) -> Option<&'static str> {
        Some(match self {
            StatusFilter::All => return None,
            StatusFilter::Passed => "r.passed = 1 AND r.error_kind IS NULL",
            StatusFilter::Failed => {
                "r.passed = 0 AND (r.error_kind IS NULL OR r.error_kind = 'format')"
            }
            StatusFilter::Errors => "r.error_kind IN ('provider', 'judge')",
            StatusFilter::Blocked => "r.error_kind IN ('blocked', 'refused')",
            StatusFilter::JudgesDisagree => {
                "EXISTS (SELECT 1 FROM judge_vote v1 JOIN judge_vote v2
                          ON v2.result_id = v1.result_id AND v2.criterion = v1.criterion
                         AND v2.id > v1.id AND COALESCE(v2.verdict, '') <> COALESCE(v1.verdict, '')
                        WHERE v1.result_id = r.id)"
            }
            StatusFilter::HumanVsJudge => {
                "EXISTS (SELECT 1 FROM human_label h JOIN judgement j
                          ON j.result_id = h.result_id AND j.criterion = h.criterion
                        WHERE h.result_id = r.id AND j.passed IS NOT h.passed)"
            }
            StatusFilter::Unlabelled => {
                "EXISTS (SELECT 1 FROM judgement j WHERE j.result_id = r.id)
                 AND NOT EXISTS (SELECT 1 FROM human_label h WHERE h.result_id = r.id)"
            }
        })
    }
}

/// `%text%` for LIKE, with `%`, `_` and the escape itself taken literally.
fn like_pattern(s: &str) -> String {
    let mut p = String::with_capacity(s.len() + 2);
    p.push('%');
    for c in s.chars() {
        if matches!(c, '%' | '_' | '\\') {
            p.push('\\');
        }
        p.push(c);
    }
    p.push('%');
    p
}

/// The joins every filtered read of results makes.
const FROM: &str = "FROM result r
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id
  JOIN pillar pl ON pl.id = b.pillar_id";

/// A statement under construction: fixed SQL fragments and bound values.
struct Sql {
    text: String,
    args: SqliteArguments,
}

impl Sql {
    fn new(text: &str) -> Sql {
        Sql {
            text: text.to_string(),
            args: SqliteArguments::default(),
        }
    }

    fn push(&mut self, fragment: &str) -> &mut Sql {
        self.text.push_str(fragment);
        self
    }

    fn bind<T>(&mut self, value: T) -> &mut Sql
    where
        T: 'static + Send + sqlx::Encode<'static, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
    {
        use sqlx::Arguments;
        // Encoding a value into SQLite arguments only fails for types that
        // cannot be encoded at all, none of which are bound here.
        self.args.add(value).expect("bindable value");
        self
    }

    /// ` AND r.run_id IN (?, ?)` and the filter's conditions.
    fn filter(&mut self, f: &ResultFilter) -> &mut Sql {
        self.push(" WHERE r.run_id IN (");
        for (i, id) in f.runs.iter().enumerate() {
            self.push(if i == 0 { "?" } else { ", ?" }).bind(*id);
        }
        if f.runs.is_empty() {
            self.push("NULL");
        }
        self.push(")");
        if let Some(cond) = f.status.sql() {
            self.push(" AND (").push(cond).push(")");
        }
        if let Some(p) = &f.pillar {
            self.push(" AND pl.code = ?").bind(p.clone());
        }
        if let Some(b) = &f.behaviour {
            self.push(" AND b.code = ?").bind(b.clone());
        }
        if let Some(s) = &f.scenario {
            self.push(" AND s.code = ?").bind(s.clone());
        }
        if let Some(v) = f.min_severity {
            self.push(" AND r.base_severity >= ?").bind(v);
        }
        if let Some(v) = f.max_severity {
            self.push(" AND r.base_severity <= ?").bind(v);
        }
        if let Some(q) = f.search.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            let p = like_pattern(q);
            self.push(
                " AND (r.response LIKE ? ESCAPE '\\'
                   OR EXISTS (SELECT 1 FROM prompt_text pt WHERE pt.hash = r.prompt_hash AND pt.text LIKE ? ESCAPE '\\')
                   OR EXISTS (SELECT 1 FROM judgement j WHERE j.result_id = r.id AND j.justification LIKE ? ESCAPE '\\')
                   OR EXISTS (SELECT 1 FROM judge_vote v WHERE v.result_id = r.id AND v.justification LIKE ? ESCAPE '\\'))",
            );
            for _ in 0..4 {
                self.bind(p.clone());
            }
        }
        self
    }

    fn key(&mut self, op: &str, key: &RowKey) -> &mut Sql {
        self.push(" AND (r.test_code, r.repeat_index) ")
            .push(op)
            .push(" (?, ?)")
            .bind(key.test_code.clone())
            .bind(key.repeat_index);
        self
    }
}

impl Store {
    /// Up to `limit` row keys that pass `filter`, in test code order, after
    /// (or before) `from`; always returned in ascending order.
    pub async fn view_rows(
        &self,
        filter: &ResultFilter,
        from: Option<(Direction, &RowKey)>,
        limit: i64,
    ) -> Result<Vec<RowKey>, StoreError> {
        let mut q = Sql::new("SELECT DISTINCT r.test_code, r.repeat_index ");
        q.push(FROM).filter(filter);
        let descending = matches!(from, Some((Direction::Before, _)));
        match from {
            Some((Direction::After, k)) => {
                q.key(">", k);
            }
            Some((Direction::Before, k)) => {
                q.key("<", k);
            }
            None => {}
        }
        q.push(if descending {
            " ORDER BY r.test_code DESC, r.repeat_index DESC LIMIT ?"
        } else {
            " ORDER BY r.test_code, r.repeat_index LIMIT ?"
        })
        .bind(limit);
        let rows = sqlx::query_with(sqlx::AssertSqlSafe(q.text), q.args)
            .fetch_all(&self.pool)
            .await?;
        let mut keys: Vec<RowKey> = rows
            .iter()
            .map(|r| RowKey {
                test_code: r.get("test_code"),
                repeat_index: r.get("repeat_index"),
            })
            .collect();
        if descending {
            keys.reverse();
        }
        Ok(keys)
    }

    /// The results of `runs` at `keys` (every one, filtered or not: a row
    /// shows each model's cell once one of them passed the filter).
    pub async fn view_cells(&self, runs: &[i64], keys: &[RowKey]) -> Result<Vec<Cell>, StoreError> {
        if runs.is_empty() || keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut q = Sql::new(
            "SELECT r.id AS result_id, r.run_id, r.test_code, r.repeat_index, r.passed, r.error_kind,
                    r.base_severity, (SELECT COUNT(*) FROM human_label h WHERE h.result_id = r.id) AS labels
               FROM result r WHERE r.run_id IN (",
        );
        for (i, id) in runs.iter().enumerate() {
            q.push(if i == 0 { "?" } else { ", ?" }).bind(*id);
        }
        q.push(") AND (r.test_code, r.repeat_index) IN (VALUES ");
        for (i, k) in keys.iter().enumerate() {
            q.push(if i == 0 { "(?, ?)" } else { ", (?, ?)" })
                .bind(k.test_code.clone())
                .bind(k.repeat_index);
        }
        q.push(")");
        let rows = sqlx::query_with(sqlx::AssertSqlSafe(q.text), q.args)
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|r| Cell {
                result_id: r.get("result_id"),
                run_id: r.get("run_id"),
                test_code: r.get("test_code"),
                repeat_index: r.get("repeat_index"),
                status: CellStatus::of(
                    r.get("passed"),
                    r.get::<Option<String>, _>("error_kind").as_deref(),
                ),
                base_severity: r.get("base_severity"),
                labels: r.get("labels"),
            })
            .collect())
    }

    /// How many rows pass `filter` (shown above the matrix), counting at
    /// most `cap` (a count of every row of a huge run would cost what the
    /// page is meant to save).
    pub async fn view_row_count(&self, filter: &ResultFilter, cap: i64) -> Result<i64, StoreError> {
        let mut q =
            Sql::new("SELECT COUNT(*) AS n FROM (SELECT DISTINCT r.test_code, r.repeat_index ");
        q.push(FROM).filter(filter).push(" LIMIT ?)").bind(cap);
        Ok(sqlx::query_with(sqlx::AssertSqlSafe(q.text), q.args)
            .fetch_one(&self.pool)
            .await?
            .get("n"))
    }

    /// The result of `run_id` at the row before and after `key` within `filter`.
    pub async fn view_neighbours(
        &self,
        filter: &ResultFilter,
        run_id: i64,
        key: &RowKey,
    ) -> Result<(Option<i64>, Option<i64>), StoreError> {
        let one = |dir: Direction| {
            let mut f = filter.clone();
            f.runs = vec![run_id];
            let mut q = Sql::new("SELECT r.id ");
            q.push(FROM).filter(&f);
            match dir {
                Direction::Before => q
                    .key("<", key)
                    .push(" ORDER BY r.test_code DESC, r.repeat_index DESC LIMIT 1"),
                Direction::After => q
                    .key(">", key)
                    .push(" ORDER BY r.test_code, r.repeat_index LIMIT 1"),
            };
            q
        };
        let mut out = [None, None];
        for (i, dir) in [Direction::Before, Direction::After]
            .into_iter()
            .enumerate()
        {
            let q = one(dir);
            out[i] = sqlx::query_scalar_with(sqlx::AssertSqlSafe(q.text), q.args)
                .fetch_optional(&self.pool)
                .await?;
        }
        Ok((out[0], out[1]))
    }

    /// Every result that passes `filter`, in row order, sent one by one to
    /// `tx` as it is read (memory stays flat however many match); stops
    /// early when the receiver is gone.
    pub async fn stream_view_rows(
        &self,
        filter: &ResultFilter,
        tx: tokio::sync::mpsc::Sender<Result<DownloadRow, StoreError>>,
    ) {
        let mut q = Sql::new(
            "SELECT r.id AS result_id, r.run_id, l.model_id AS model, r.test_code, r.repeat_index,
                    s.code AS scenario, b.code AS behaviour,
                    r.passed, r.error_kind, r.base_severity, r.difficulty, r.error, r.response,
                    (SELECT group_concat(j.criterion || ': ' || COALESCE(j.verdict, 'error') || ': '
                                         || COALESCE(j.justification, j.error, ''), char(10))
                       FROM judgement j WHERE j.result_id = r.id) AS judgements,
                    (SELECT COUNT(*) FROM human_label h WHERE h.result_id = r.id) AS human_labels ",
        );
        q.push(FROM)
            .push(
                " JOIN evaluation_run er ON er.id = r.run_id
                  JOIN llm l ON l.id = er.llm_id",
            )
            .filter(filter)
            .push(" ORDER BY r.test_code, r.repeat_index, r.run_id");
        let mut rows = sqlx::query_with(sqlx::AssertSqlSafe(q.text), q.args).fetch(&self.pool);
        loop {
            let next = match rows.try_next().await {
                Ok(Some(r)) => Ok(DownloadRow {
                    result_id: r.get("result_id"),
                    run_id: r.get("run_id"),
                    model: r.get("model"),
                    test_code: r.get("test_code"),
                    repeat_index: r.get("repeat_index"),
                    scenario: r.get("scenario"),
                    behaviour: r.get("behaviour"),
                    status: CellStatus::of(
                        r.get("passed"),
                        r.get::<Option<String>, _>("error_kind").as_deref(),
                    ),
                    error_kind: r.get("error_kind"),
                    base_severity: r.get("base_severity"),
                    difficulty: r.get("difficulty"),
                    error: r.get("error"),
                    response: r.get("response"),
                    judgements: r.get::<Option<String>, _>("judgements").unwrap_or_default(),
                    human_labels: r.get("human_labels"),
                }),
                Ok(None) => return,
                Err(e) => Err(StoreError::from(e)),
            };
            let failed = next.is_err();
            if tx.send(next).await.is_err() || failed {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_take_wildcards_literally() {
        assert_eq!(like_pattern("50%_off\\"), "%50\\%\\_off\\\\%");
    }
}
