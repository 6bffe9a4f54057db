//! The reads of `helmbench view`'s results matrix (issue 32): the rows
//! (test case and repeat) that pass a filter, a page at a time by keyset
//! (never OFFSET: a page deep in a 200,000-result run costs what the first
//! does), the cells of those rows across the chosen runs, the neighbours of
//! one row within the filter, and every matching result streamed for a
//! download. Every value a person typed is bound, never spliced: the SQL
//! text is assembled only from the fixed fragments below.

use futures_util::TryStreamExt;

use super::backend::{Arg, Dialect, bind_args, on};
use super::decode::Row as _;
use super::view_pg_search::PgSearch;
use super::{Store, StoreError};
use crate::domain::query::FIRST_MESSAGE;
use crate::domain::{Cell, CellStatus, Direction, DownloadRow, ResultFilter, RowKey, StatusFilter};

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

/// What every filtered read of results reads: the result alone. Every
/// condition of a filter is on a column of `result_view`'s index (run,
/// test code, repeat, verdict, error kind, severity) or a probe of another
/// table by result id, so a page reads that index in row order and never a
/// result row it does not show (a result row holds the reply: reading
/// 100,000 of them to find 50 cost 0.3-0.5 s).
const FROM: &str = "FROM result r";

/// With the scenario and behaviour codes (the downloads list them).
const FROM_CODES: &str = "FROM result r
  JOIN scenario s ON s.id = r.scenario_id
  JOIN behaviour b ON b.id = s.behaviour_id";

/// `[code-, code.)`: the test codes under a pillar, behaviour or scenario
/// code. A test code is its scenario's code and more segments
/// (`P1-B1-S1-C1-PT2`, SPEC §3), and a scenario's code starts with its
/// behaviour's and pillar's; `.` is the byte after `-`.
fn code_range(code: &str) -> (String, String) {
    (format!("{code}-"), format!("{code}."))
}

/// The FTS5 query for a search text: its words as one phrase (in this
/// order, any case and accents), the last one also as the start of a word
/// when it has 3 characters or more (a search typed as far as `crisis
/// lin` finds `crisis line`). None when the text has no word (only
/// punctuation): then only the LIKE scan can answer. The text is one
/// quoted FTS5 string, its quotes doubled: no FTS5 syntax from the person
/// searching is ever read as syntax.
pub(super) fn fts_phrase(text: &str) -> Option<String> {
    let words: Vec<&str> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let last = words.last()?;
    let prefix = if last.chars().count() >= 3 { " *" } else { "" };
    Some(format!("\"{}\"{prefix}", words.join(" ")))
}

/// The index of a conversation's first failed exchange, read from its
/// result's details, in SQLite's words; `bound!` swaps in PostgreSQL's
/// (where the details are TEXT too).
const FIRST_FAILED: &str =
    "CAST(json_extract(r.evaluation_details, '$.conversation.first_failed_turn') AS INTEGER)";
const FIRST_FAILED_PG: &str =
    "CAST(CAST(r.evaluation_details AS jsonb) #>> '{conversation,first_failed_turn}' AS BIGINT)";

/// A statement under construction: fixed SQL fragments and bound values.
/// Fragments are written with `?`; each becomes the next `$N` as it is
/// pushed, the numbering both backends read (backend.rs).
struct Sql {
    text: String,
    args: Vec<Arg>,
    /// Placeholders written so far.
    marks: usize,
}

/// `sqlx::$f` (`query`, `query_as::<_, T>`, `query_scalar::<_, T>`) of a
/// [`Sql`], its values bound, for either backend (inside [`on!`], `$d` its
/// dialect). The fragments are written in SQLite's words; on PostgreSQL
/// its two that differ are swapped: SQLite's LIKE ignores ASCII case
/// (PostgreSQL's ILIKE), and a newline is `char(10)` (PostgreSQL's
/// `chr(10)`).
macro_rules! bound {
    ($f:ident $(::<$($t:ty),+>)?, $sql:expr, $d:expr) => {{
        let Sql { text, args, .. } = $sql;
        let text = match $d {
            Dialect::Sqlite => text,
            Dialect::Postgres => text
                .replace(" LIKE ", " ILIKE ")
                .replace("char(10)", "chr(10)")
                .replace(FIRST_FAILED, FIRST_FAILED_PG),
        };
        bind_args!(sqlx::$f $(::<_, $($t),+>)? (sqlx::AssertSqlSafe(text)), args)
    }};
}

impl Sql {
    fn new(text: &str) -> Sql {
        let mut sql = Sql {
            text: String::new(),
            args: Vec::new(),
            marks: 0,
        };
        sql.push(text);
        sql
    }

    fn push(&mut self, fragment: &str) -> &mut Sql {
        for (i, piece) in fragment.split('?').enumerate() {
            if i > 0 {
                self.marks += 1;
                self.text.push_str(&format!("${}", self.marks));
            }
            self.text.push_str(piece);
        }
        self
    }

    fn bind(&mut self, value: impl Into<Arg>) -> &mut Sql {
        self.args.push(value.into());
        self
    }

    /// `(?, ?)`: the runs, bound.
    fn run_list(&mut self, runs: &[i64]) -> &mut Sql {
        self.push("(");
        for (i, id) in runs.iter().enumerate() {
            self.push(if i == 0 { "?" } else { ", ?" }).bind(*id);
        }
        if runs.is_empty() {
            self.push("NULL");
        }
        self.push(")")
    }

    /// ` WHERE r.run_id IN (?, ?)` and the filter's conditions (the run
    /// condition first and always: it is what lets SQLite use
    /// `result_view`, see its migration).
    fn filter(&mut self, f: &ResultFilter, pg: Option<&PgSearch>) -> &mut Sql {
        self.push(" WHERE r.run_id IN ").run_list(&f.runs);
        match f.status {
            StatusFilter::All => {}
            StatusFilter::Passed => {
                self.push(" AND r.passed = 1 AND r.error_kind IS NULL");
            }
            StatusFilter::Failed => {
                self.push(
                    " AND r.passed = 0 AND (r.error_kind IS NULL OR r.error_kind = 'format')",
                );
            }
            StatusFilter::Errors => {
                self.push(" AND r.error_kind IN ('provider', 'judge')");
            }
            StatusFilter::Blocked => {
                self.push(" AND r.error_kind IN ('blocked', 'refused')");
            }
            StatusFilter::JudgesDisagree => {
                // A probe of the votes of each row's result (their unique
                // key starts with the result id).
                self.push(
                    " AND EXISTS (SELECT 1 FROM judge_vote v1 JOIN judge_vote v2
                                   ON v2.result_id = v1.result_id AND v2.criterion = v1.criterion
                                  AND v2.id > v1.id AND COALESCE(v2.verdict, '') <> COALESCE(v1.verdict, '')
                                 WHERE v1.result_id = r.id)",
                );
            }
            StatusFilter::HumanVsJudge => {
                // The runs' labels are few: listed once, then each row is
                // looked up in that list.
                self.push(
                    " AND r.id IN (SELECT h.result_id FROM human_label h JOIN judgement j
                                    ON j.result_id = h.result_id AND j.criterion = h.criterion
                                 WHERE h.run_id IN ",
                )
                .run_list(&f.runs)
                .push(" AND j.passed IS NOT h.passed)");
            }
            StatusFilter::Unlabelled => {
                self.push(
                    " AND EXISTS (SELECT 1 FROM judgement j WHERE j.result_id = r.id)
                   AND r.id NOT IN (SELECT h.result_id FROM human_label h WHERE h.run_id IN ",
                )
                .run_list(&f.runs)
                .push(")");
            }
        }
        for code in [&f.pillar, &f.behaviour, &f.scenario].into_iter().flatten() {
            let (lo, hi) = code_range(code);
            self.push(" AND r.test_code >= ? AND r.test_code < ?")
                .bind(lo)
                .bind(hi);
        }
        if let Some(v) = f.min_severity {
            self.push(" AND r.base_severity >= ?").bind(v);
        }
        if let Some(v) = f.max_severity {
            self.push(" AND r.base_severity <= ?").bind(v);
        }
        match f.variant.as_deref() {
            None => {}
            Some("none") => {
                self.push(" AND r.test_code NOT LIKE '%~%'");
            }
            // `…~name` at the end of the code; `_` in a name taken literally.
            Some(name) => {
                let p = like_pattern(&format!("~{name}"));
                self.push(" AND r.test_code LIKE ? ESCAPE '\\'")
                    .bind(p[..p.len() - 1].to_string());
            }
        }
        self.conversation(f);
        if let Some(s) = pg {
            self.push(" AND ").pg_search(s);
        } else if let Some(q) = f.search.as_deref().map(str::trim).filter(|q| !q.is_empty()) {
            match fts_phrase(q).filter(|_| f.search_index) {
                Some(phrase) => {
                    // The index answers for the results it holds; those
                    // written since it last caught up are scanned. Each
                    // match list is made once, and each row of the run,
                    // read in order from an index, looked up in them
                    // (`+r.id`: never fetch every match by id and sort them,
                    // which a common word would make 200,000 row reads). A
                    // text in no prompt (asked once) skips looking up each
                    // row's prompt.
                    self.push(
                        " AND (+r.id IN (SELECT rowid FROM search.reply_words WHERE reply_words MATCH ?)
                           OR (EXISTS (SELECT 1 FROM search.prompt_words WHERE prompt_words MATCH ?)
                               AND (SELECT d.prompt FROM search.result_doc d WHERE d.id = r.id)
                                   IN (SELECT rowid FROM search.prompt_words WHERE prompt_words MATCH ?))
                           OR (r.id > (SELECT last_id FROM search.search_state) AND ",
                    )
                    .bind(phrase.clone())
                    .bind(phrase.clone())
                    .bind(phrase)
                    .like(q)
                    .push("))");
                }
                None => {
                    self.push(" AND ").like(q);
                }
            }
        }
        self
    }

    /// The conversation filters (issue 42): the turn where a conversation
    /// first failed, as its result's details record it (the exchange index
    /// is the turn row's index), and the pressure label of that turn, or of
    /// any of its turns when no failed turn is asked for. A probe of `turn`
    /// by its primary key per row, like the other probes.
    fn conversation(&mut self, f: &ResultFilter) -> &mut Sql {
        const OF_ROW: &str = "SELECT 1 FROM turn t WHERE t.run_id = r.run_id
                 AND t.test_code = r.test_code AND t.repeat_index = r.repeat_index";
        if let Some(at) = f.failed_at.as_deref() {
            self.push(" AND EXISTS (")
                .push(OF_ROW)
                .push(&format!(" AND t.turn_index = {FIRST_FAILED}"));
            match at {
                "any" => {}
                FIRST_MESSAGE => {
                    self.push(" AND t.turn_index = 0");
                }
                code => {
                    self.push(" AND t.turn_code = ?").bind(code.to_string());
                }
            }
            if let Some(p) = f.pressure.as_deref() {
                self.push(" AND t.pressure = ?").bind(p.to_string());
            }
            self.push(")");
        } else if let Some(p) = f.pressure.as_deref() {
            self.push(" AND EXISTS (")
                .push(OF_ROW)
                .push(" AND t.pressure = ?)")
                .bind(p.to_string());
        }
        self
    }

    /// The text condition on PostgreSQL, through its word indexes (see
    /// view_pg_search.rs): each text's matches listed when they are few,
    /// looked up row by row when they are many.
    fn pg_search(&mut self, s: &PgSearch) -> &mut Sql {
        self.push("(1 = 0");
        if let Some(ids) = &s.replies {
            self.id_list("r.id", ids);
        } else {
            self.push(
                " OR to_tsvector('simple', COALESCE(r.response, '')) @@ to_tsquery('simple', ?)",
            )
            .bind(s.query.clone());
        }
        match &s.prompts {
            Some(hashes) if !hashes.is_empty() => {
                self.push(" OR r.prompt_hash IN (");
                for (i, h) in hashes.iter().enumerate() {
                    self.push(if i == 0 { "?" } else { ", ?" }).bind(h.clone());
                }
                self.push(")");
            }
            Some(_) => {}
            None => {
                self.push(
                    " OR EXISTS (SELECT 1 FROM prompt_text pt WHERE pt.hash = r.prompt_hash
                                  AND to_tsvector('simple', pt.text) @@ to_tsquery('simple', ?))",
                )
                .bind(s.query.clone());
            }
        }
        if let Some(ids) = &s.judged {
            self.id_list("r.id", ids);
        } else {
            self.push(
                " OR EXISTS (SELECT 1 FROM judgement j WHERE j.result_id = r.id
                              AND to_tsvector('simple', COALESCE(j.justification, '')) @@ to_tsquery('simple', ?))
                  OR EXISTS (SELECT 1 FROM judge_vote v WHERE v.result_id = r.id
                              AND to_tsvector('simple', COALESCE(v.justification, '')) @@ to_tsquery('simple', ?))",
            )
            .bind(s.query.clone())
            .bind(s.query.clone());
        }
        self.push(")")
    }

    /// ` OR col IN (ids)`, the ids written out (they are the database's
    /// own integers); nothing for none.
    fn id_list(&mut self, col: &str, ids: &[i64]) -> &mut Sql {
        if !ids.is_empty() {
            let list: Vec<String> = ids.iter().map(i64::to_string).collect();
            self.push(&format!(" OR {col} IN ({})", list.join(", ")));
        }
        self
    }

    /// The text condition as a scan: `q` anywhere in the composed prompt,
    /// the reply or a justification.
    fn like(&mut self, q: &str) -> &mut Sql {
        let p = like_pattern(q);
        self.push(
            "(r.response LIKE ? ESCAPE '\\'
               OR EXISTS (SELECT 1 FROM prompt_text pt WHERE pt.hash = r.prompt_hash AND pt.text LIKE ? ESCAPE '\\')
               OR EXISTS (SELECT 1 FROM judgement j WHERE j.result_id = r.id AND j.justification LIKE ? ESCAPE '\\')
               OR EXISTS (SELECT 1 FROM judge_vote v WHERE v.result_id = r.id AND v.justification LIKE ? ESCAPE '\\'))",
        );
        for _ in 0..4 {
            self.bind(p.clone());
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

/// The results of `run` under the filter's codes, from `run_total`.
fn totals_count(filter: &ResultFilter, run: i64) -> Sql {
    let mut q = Sql::new(
        "SELECT COALESCE(SUM(t.test_cases), 0) FROM run_total t
           JOIN scenario s ON s.id = t.scenario_id WHERE t.run_id = ?",
    );
    q.bind(run);
    for code in [&filter.pillar, &filter.behaviour, &filter.scenario]
        .into_iter()
        .flatten()
    {
        let (lo, hi) = code_range(code);
        q.push(" AND (s.code = ? OR (s.code >= ? AND s.code < ?))")
            .bind(code.clone())
            .bind(lo)
            .bind(hi);
    }
    q
}

impl Store {
    /// Up to `limit` row keys that pass `filter`, in test code order, after
    /// (or before) `from`; always returned in ascending order. Each run is
    /// read on its own (one range of an index, in row order) and the runs'
    /// keys merged here: a row is kept when one of its results passes.
    pub async fn view_rows(
        &self,
        filter: &ResultFilter,
        from: Option<(Direction, &RowKey)>,
        limit: i64,
    ) -> Result<Vec<RowKey>, StoreError> {
        let mut keys = std::collections::BTreeSet::new();
        let pg = self.pg_search(filter).await?;
        for run in &filter.runs {
            let one = ResultFilter {
                runs: vec![*run],
                ..filter.clone()
            };
            keys.extend(self.run_rows(&one, &pg, from, limit).await?);
        }
        let mut keys: Vec<RowKey> = keys.into_iter().collect();
        let n = keys.len().min(usize::try_from(limit).unwrap_or(0));
        Ok(match from {
            Some((Direction::Before, _)) => keys.split_off(keys.len() - n),
            _ => {
                keys.truncate(n);
                keys
            }
        })
    }

    /// [`Store::view_rows`] of a filter over one run.
    async fn run_rows(
        &self,
        filter: &ResultFilter,
        pg: &Option<PgSearch>,
        from: Option<(Direction, &RowKey)>,
        limit: i64,
    ) -> Result<Vec<RowKey>, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut q = Sql::new("SELECT r.test_code, r.repeat_index ");
            q.push(FROM).filter(filter, pg.as_ref());
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
            let rows = bound!(query, q, d).fetch_all(pool).await?;
            let mut keys: Vec<RowKey> = rows
                .iter()
                .map(|r| RowKey {
                    test_code: r.val("test_code"),
                    repeat_index: r.val("repeat_index"),
                })
                .collect();
            if descending {
                keys.reverse();
            }
            Ok(keys)
        })
    }

    /// The results of `runs` at `keys` (every one, filtered or not: a row
    /// shows each model's cell once one of them passed the filter).
    pub async fn view_cells(&self, runs: &[i64], keys: &[RowKey]) -> Result<Vec<Cell>, StoreError> {
        on!(&self.pool, |pool, d| {
            if runs.is_empty() || keys.is_empty() {
                return Ok(Vec::new());
            }
            let mut q = Sql::new(
            "SELECT r.id AS result_id, r.run_id, r.test_code, r.repeat_index, r.passed, r.error_kind,
                    r.base_severity, (SELECT COUNT(*) FROM human_label h WHERE h.result_id = r.id) AS labels,
                    r.response, r.parsed
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
            let rows = bound!(query, q, d).fetch_all(pool).await?;
            Ok(rows
                .iter()
                .map(|r| Cell {
                    result_id: r.val("result_id"),
                    run_id: r.val("run_id"),
                    test_code: r.val("test_code"),
                    repeat_index: r.val("repeat_index"),
                    status: CellStatus::of(
                        r.val("passed"),
                        r.val::<Option<String>>("error_kind").as_deref(),
                    ),
                    base_severity: r.val("base_severity"),
                    labels: r.val("labels"),
                    response: r.val("response"),
                    parsed: r.val("parsed"),
                })
                .collect())
        })
    }

    /// How many results of each run pass `filter`, counting at most `cap`
    /// when one is given (past it, `cap + 1`).
    ///
    /// A filter on codes alone reads the totals kept per run and scenario
    /// (a few rows); any other reads the run's range of `result_view`
    /// (index entries only, about 40 bytes a result) with the probes its
    /// conditions make.
    pub async fn view_counts(
        &self,
        filter: &ResultFilter,
        cap: Option<i64>,
    ) -> Result<Vec<(i64, i64)>, StoreError> {
        let pg = self.pg_search(filter).await?;
        on!(&self.pool, |pool, d| {
            let by_totals = filter.status == StatusFilter::All
                && filter.min_severity.is_none()
                && filter.max_severity.is_none()
                && filter.variant.is_none()
                && filter.failed_at.is_none()
                && filter.pressure.is_none()
                && filter.search.as_deref().is_none_or(|q| q.trim().is_empty());
            let mut out: Vec<(i64, i64)> = filter.runs.iter().map(|r| (*r, 0)).collect();
            if by_totals || cap.is_some() {
                for (run, n) in out.iter_mut() {
                    let q = if by_totals {
                        totals_count(filter, *run)
                    } else {
                        let one = ResultFilter {
                            runs: vec![*run],
                            ..filter.clone()
                        };
                        let mut q = Sql::new("SELECT COUNT(*) FROM (SELECT 1 ");
                        q.push(FROM).filter(&one, pg.as_ref());
                        if let Some(cap) = cap {
                            q.push(" LIMIT ?").bind(cap + 1);
                        }
                        q.push(") n");
                        q
                    };
                    *n = bound!(query_scalar, q, d).fetch_one(pool).await?;
                }
            } else {
                // Every run in one statement: each run's range of the index in
                // turn (already grouped by run), and a search's match lists made
                // once, not once per run.
                let mut q = Sql::new("SELECT r.run_id, COUNT(*) AS n ");
                q.push(FROM)
                    .filter(filter, pg.as_ref())
                    .push(" GROUP BY r.run_id");
                for row in bound!(query, q, d).fetch_all(pool).await? {
                    let run: i64 = row.val("run_id");
                    if let Some(slot) = out.iter_mut().find(|(r, _)| *r == run) {
                        slot.1 = row.val("n");
                    }
                }
            }
            Ok(out)
        })
    }

    /// The result of `run_id` at the row before and after `key` within `filter`.
    pub async fn view_neighbours(
        &self,
        filter: &ResultFilter,
        run_id: i64,
        key: &RowKey,
    ) -> Result<(Option<i64>, Option<i64>), StoreError> {
        let pg = self.pg_search(filter).await?;
        on!(&self.pool, |pool, d| {
            let one = |dir: Direction| {
                let mut f = filter.clone();
                f.runs = vec![run_id];
                let mut q = Sql::new("SELECT r.id ");
                q.push(FROM).filter(&f, pg.as_ref());
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
                out[i] = bound!(query_scalar, q, d).fetch_optional(pool).await?;
            }
            Ok((out[0], out[1]))
        })
    }

    /// Every result that passes `filter`, in row order, sent one by one to
    /// `tx` as it is read (memory stays flat however many match); stops
    /// early when the receiver is gone.
    pub async fn stream_view_rows(
        &self,
        filter: &ResultFilter,
        tx: tokio::sync::mpsc::Sender<Result<DownloadRow, StoreError>>,
    ) {
        let pg = match self.pg_search(filter).await {
            Ok(pg) => pg,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        on!(&self.pool, |pool, d| {
            let mut q = Sql::new(
            "SELECT r.id AS result_id, r.run_id, l.model_id AS model, r.test_code, r.repeat_index,
                    s.code AS scenario, b.code AS behaviour,
                    r.passed, r.error_kind, r.base_severity, r.difficulty, r.error, r.response,
                    (SELECT group_concat(j.criterion || ': ' || COALESCE(j.verdict, 'error') || ': '
                                         || COALESCE(j.justification, j.error, ''), char(10))
                       FROM judgement j WHERE j.result_id = r.id) AS judgements,
                    (SELECT COUNT(*) FROM human_label h WHERE h.result_id = r.id) AS human_labels ",
        );
            q.push(FROM_CODES)
                .push(
                    " JOIN evaluation_run er ON er.id = r.run_id
                  JOIN llm l ON l.id = er.llm_id",
                )
                .filter(filter, pg.as_ref())
                .push(" ORDER BY r.test_code, r.repeat_index, r.run_id");
            let mut rows = bound!(query, q, d).fetch(pool);
            loop {
                let next = match rows.try_next().await {
                    Ok(Some(r)) => Ok(DownloadRow {
                        result_id: r.val("result_id"),
                        run_id: r.val("run_id"),
                        model: r.val("model"),
                        test_code: r.val("test_code"),
                        repeat_index: r.val("repeat_index"),
                        scenario: r.val("scenario"),
                        behaviour: r.val("behaviour"),
                        status: CellStatus::of(
                            r.val("passed"),
                            r.val::<Option<String>>("error_kind").as_deref(),
                        ),
                        error_kind: r.val("error_kind"),
                        base_severity: r.val("base_severity"),
                        difficulty: r.val("difficulty"),
                        error: r.val("error"),
                        response: r.val("response"),
                        judgements: r.val::<Option<String>>("judgements").unwrap_or_default(),
                        human_labels: r.val("human_labels"),
                    }),
                    Ok(None) => return,
                    Err(e) => Err(StoreError::from(e)),
                };
                let failed = next.is_err();
                if tx.send(next).await.is_err() || failed {
                    return;
                }
            }
        })
    }
}

/// The tables a results page must never read whole, by the aliases the
/// statements above give them.
const LARGE: [&str; 10] = [
    "r",
    "result",
    "j",
    "judgement",
    "v",
    "v1",
    "v2",
    "judge_vote",
    "h",
    "human_label",
];

impl Store {
    /// The plans (SQLite's `EXPLAIN QUERY PLAN` lines) of the statements a
    /// results page of `filter` runs for its first run: the first page,
    /// a next page, the count and a case's neighbours, with the values
    /// bound; `scans` lists the lines that read a large table whole. The
    /// statements are the ones the pages run, built by the same code.
    pub async fn view_plans(
        &self,
        filter: &ResultFilter,
    ) -> Result<Vec<crate::domain::ReadPlan>, StoreError> {
        let pg = self.pg_search(filter).await?;
        on!(&self.pool, |pool, d| {
            let run = filter.runs.first().copied().unwrap_or(0);
            let one = ResultFilter {
                runs: vec![run],
                ..filter.clone()
            };
            let key = RowKey {
                test_code: "P1-B1-S1-C1-PT1".into(),
                repeat_index: 0,
            };
            let page = |from: Option<(Direction, &RowKey)>| {
                let mut q = Sql::new("SELECT r.test_code, r.repeat_index ");
                q.push(FROM).filter(&one, pg.as_ref());
                if let Some((_, k)) = from {
                    q.key(">", k);
                }
                q.push(" ORDER BY r.test_code, r.repeat_index LIMIT ?")
                    .bind(51i64);
                q
            };
            let mut count = Sql::new("SELECT r.run_id, COUNT(*) AS n ");
            count
                .push(FROM)
                .filter(&one, pg.as_ref())
                .push(" GROUP BY r.run_id");
            let mut before = Sql::new("SELECT r.id ");
            before
                .push(FROM)
                .filter(&one, pg.as_ref())
                .key("<", &key)
                .push(" ORDER BY r.test_code DESC, r.repeat_index DESC LIMIT 1");
            let statements = [
                ("first page", page(None)),
                ("next page", page(Some((Direction::After, &key)))),
                ("count", count),
                ("previous case", before),
            ];
            let mut out = Vec::with_capacity(statements.len());
            for (name, q) in statements {
                let q = Sql {
                    text: d.pick(
                        format!("EXPLAIN QUERY PLAN {}", q.text),
                        format!("EXPLAIN {}", q.text),
                    ),
                    ..q
                };
                let rows = bound!(query, q, d).fetch_all(pool).await?;
                let column = d.pick("detail", "QUERY PLAN");
                let plan: Vec<String> = rows.iter().map(|r| r.val::<String>(column)).collect();
                out.push(super::plans::plan_of(name, plan, &LARGE));
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_texts_become_one_quoted_fts_phrase() {
        assert_eq!(
            fts_phrase("crisis lin").as_deref(),
            Some("\"crisis lin\" *")
        );
        // FTS5 syntax typed is only words: no operator, column or quote survives.
        assert_eq!(
            fts_phrase("a\" OR reply:x NEAR(b)").as_deref(),
            Some("\"a OR reply x NEAR b\"")
        );
        assert_eq!(fts_phrase("Élan, ok").as_deref(), Some("\"Élan ok\""));
        assert_eq!(fts_phrase(" ;-- "), None);
    }

    #[test]
    fn code_ranges_hold_exactly_the_codes_below() {
        let (lo, hi) = code_range("P1-B1");
        for (code, inside) in [
            ("P1-B1-S1-C1-PT1", true),
            ("P1-B1-S10-C2-U1-PT3", true),
            ("P1-B10-S1-C1-PT1", false),
            ("P1-B2-S1-C1-PT1", false),
            ("P1-B1", false),
        ] {
            assert_eq!(code >= lo.as_str() && code < hi.as_str(), inside, "{code}");
        }
    }

    #[test]
    fn like_patterns_take_wildcards_literally() {
        assert_eq!(like_pattern("50%_off\\"), "%50\\%\\_off\\\\%");
    }
}
