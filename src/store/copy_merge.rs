//! The copy's writing half (`migrate --from … --to …`, issue 41 item 4):
//! a SQLite file's runs merged into a PostgreSQL store that may already
//! hold other files' runs, so several laptops' files make one team store.
//!
//! Every table falls in one of three kinds ([`Kind`]): the benchmark's
//! content and the models, shared by content (the target's row with the
//! same natural key is reused, its id mapped); other shared rows keyed by
//! their own columns (inserted when missing); and the runs with every row
//! that names one. A run the target already holds (the same benchmark,
//! model, kind and start time to the millisecond: a copied run keeps
//! them) is left alone, so copying a file twice copies nothing the second
//! time; the others get new ids from the target's sequences (taken in
//! order, so the runs of a file keep their order) and their rows follow.
//! All of it is one transaction: a copy stopped half-way leaves nothing
//! behind, and a later one starts afresh. The count check compares, table
//! by table, the file's rows with those of its runs and content that the
//! target holds after the copy.

use std::collections::{HashMap, HashSet};

use futures_util::TryStreamExt;
use sqlx::postgres::PgPool;
use sqlx::{PgConnection, Postgres, QueryBuilder, Row, SqlitePool};

use super::backend::Pool;
use super::copy::{
    DERIVED, MAX_BATCH_ROWS, MAX_PARAMS, TableShape, Ty, Val, advance_identity,
    check_target_columns, column_list, count, integrity, open_source, open_target, order, quote,
    read_row, read_shapes,
};
use super::{MIGRATOR, PG_MIGRATOR, Store, StoreError};
use crate::domain::{CopyStep, TableCopy};

/// The migration's "rebuild the totals" marker: bookkeeping, not a table
/// of rows to copy.
const MARKER: &str = "totals_rebuild";
const RUNS: &str = "evaluation_run";

/// How a table's rows go into a target that may hold other files' runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// An `id` and a natural key (benchmark, pillar … perturbation, llm):
    /// the same content in the target is the same row.
    Content,
    /// Keyed by their own columns, once their references are mapped
    /// (prompt texts, a scenario's conditions, the pseudonym, budgets).
    Keyed,
    /// A run or a row that names one (directly or through a result or a
    /// batch): copied only with a run the target does not hold.
    Run,
}

/// Source id → target id, per table with ids. For run tables only the
/// rows this copy wrote are mapped: a row naming an unmapped run is not
/// copied.
type Ids = HashMap<String, HashMap<i64, i64>>;

fn kinds(shapes: &[TableShape]) -> HashMap<String, Kind> {
    let mut run: HashSet<&str> = HashSet::from([RUNS]);
    loop {
        let before = run.len();
        for s in shapes {
            if s.refs.iter().any(|(_, p)| run.contains(p.as_str())) {
                run.insert(&s.name);
            }
        }
        if run.len() == before {
            break;
        }
    }
    shapes
        .iter()
        .map(|s| {
            let kind = if run.contains(s.name.as_str()) {
                Kind::Run
            } else if has_id(s) && !s.natural.is_empty() {
                Kind::Content
            } else {
                Kind::Keyed
            };
            (s.name.clone(), kind)
        })
        .collect()
}

/// Whether the table's key is one integer `id` (an identity on PostgreSQL).
fn has_id(s: &TableShape) -> bool {
    s.key == ["id"] && s.columns.iter().any(|(c, t)| c == "id" && *t == Ty::Int)
}

fn index_of(s: &TableShape, col: &str) -> Option<usize> {
    s.columns.iter().position(|(c, _)| c == col)
}

fn index(s: &TableShape, col: &str) -> usize {
    s.columns
        .iter()
        .position(|(c, _)| c == col)
        .expect("a column of the table's own shape")
}

impl Store {
    /// Copies the SQLite database `from` into the PostgreSQL database `to`
    /// (see the module's comment), reporting each step to `progress`; the
    /// tables in the order copied, with their counts on both sides after.
    ///
    /// `from` must have exactly this version's migrations (else
    /// [`StoreError::Refused`], naming the fix); `to` gets PostgreSQL's.
    pub async fn copy_to_postgres(
        from: &str,
        to: &str,
        progress: &mut dyn FnMut(CopyStep<'_>),
    ) -> Result<Vec<TableCopy>, StoreError> {
        let source = open_source(from).await?;
        let result = match &source.pool {
            Pool::Sqlite(pool) => copy(pool, to, progress).await,
            Pool::Postgres(_) => Err(StoreError::Refused(
                "the source of a copy is a SQLite database (--from sqlite://…)".into(),
            )),
        };
        source.close().await;
        result
    }
}

async fn copy(
    lite: &SqlitePool,
    to: &str,
    progress: &mut dyn FnMut(CopyStep<'_>),
) -> Result<Vec<TableCopy>, StoreError> {
    // Both histories are one (tests/it/postgres.rs): the same versions.
    debug_assert_eq!(
        MIGRATOR.iter().map(|m| m.version).collect::<Vec<_>>(),
        PG_MIGRATOR.iter().map(|m| m.version).collect::<Vec<_>>()
    );
    let shapes = order(read_shapes(lite).await?)?;
    let pg = open_target(to).await?;
    let result = copy_tables(lite, &pg, &shapes, progress).await;
    pg.close().await;
    result
}

async fn copy_tables(
    lite: &SqlitePool,
    pg: &PgPool,
    shapes: &[TableShape],
    progress: &mut dyn FnMut(CopyStep<'_>),
) -> Result<Vec<TableCopy>, StoreError> {
    let kinds = kinds(shapes);
    let mut tx = pg.begin().await?;
    // Sequences past every id there (a target an older copy filled with
    // the source's ids set them; this makes sure).
    for shape in shapes {
        advance_identity(&mut tx, shape).await?;
    }
    let had_runs: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM evaluation_run)")
        .fetch_one(&mut *tx)
        .await?;
    let mut ids: Ids = HashMap::new();
    // Target ids of every run of the file: copied now or already there.
    let mut file_runs: Vec<i64> = Vec::new();
    let mut report = Vec::new();
    for shape in shapes.iter().filter(|s| s.name != MARKER) {
        check_target_columns(pg, shape).await?;
        let rows = count(lite, &shape.name).await?;
        progress(CopyStep::Table {
            table: &shape.name,
            rows,
        });
        let mut copy = TableCopy {
            table: shape.name.clone(),
            source: rows,
            written: 0,
            target: 0,
            derived: DERIVED.contains(&shape.name.as_str()),
        };
        match kinds[&shape.name] {
            Kind::Content | Kind::Keyed => {
                let (written, found) =
                    copy_shared(lite, &mut tx, shape, &kinds, &mut ids, progress).await?;
                copy.written = written;
                copy.target = found;
            }
            Kind::Run => {
                let held = if shape.name == RUNS {
                    held_runs(lite, &mut tx, &ids).await?
                } else {
                    HashMap::new()
                };
                copy.written =
                    copy_run_rows(lite, &mut tx, shape, &kinds, &held, &mut ids, progress).await?;
                if shape.name == RUNS {
                    file_runs.extend(held.values());
                    file_runs.extend(ids.get(RUNS).into_iter().flat_map(|m| m.values()));
                }
            }
        }
        progress(CopyStep::TableDone);
        report.push(copy);
    }
    // A target created by this copy: the migration's marker goes, its
    // totals being the file's (as in the source). A store that held runs
    // keeps its marker if it had one: its next open rebuilds them.
    let source_marker = count(lite, MARKER).await? > 0;
    if !had_runs && !source_marker {
        sqlx::query("DELETE FROM totals_rebuild")
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    for (copy, shape) in report
        .iter_mut()
        .zip(shapes.iter().filter(|s| s.name != MARKER))
    {
        if kinds[&shape.name] == Kind::Run {
            copy.target = count_of_runs(pg, shapes, shape, &file_runs).await?;
        }
    }
    Ok(report)
}

/// The runs of the file the target already holds: source id → the
/// target's run. A run's identity: benchmark, model, kind and start time
/// (to the millisecond), which a copy keeps and two runs never share.
async fn held_runs(
    lite: &SqlitePool,
    pg: &mut PgConnection,
    ids: &Ids,
) -> Result<HashMap<i64, i64>, StoreError> {
    let identity = "SELECT id, benchmark_id, llm_id, kind, started_at FROM evaluation_run";
    let there: HashMap<(i64, i64, String, String), i64> = sqlx::query(identity)
        .fetch_all(&mut *pg)
        .await?
        .iter()
        .map(|r| {
            let key = (
                r.get("benchmark_id"),
                r.get("llm_id"),
                r.get("kind"),
                r.get("started_at"),
            );
            (key, r.get::<i64, _>("id"))
        })
        .collect();
    let mut held = HashMap::new();
    for r in sqlx::query(identity).fetch_all(lite).await? {
        let id: i64 = r.get("id");
        let at = |t: &str, v: i64| {
            ids.get(t)
                .and_then(|m| m.get(&v))
                .copied()
                .ok_or_else(|| integrity(format!("run {id} names {t} {v}, which the source lacks")))
        };
        let key = (
            at("benchmark", r.get("benchmark_id"))?,
            at("llm", r.get("llm_id"))?,
            r.get("kind"),
            r.get("started_at"),
        );
        if let Some(t) = there.get(&key) {
            held.insert(id, *t);
        }
    }
    Ok(held)
}

/// Writes a shared table's rows the target lacks; returns the rows written
/// and how many of the file's rows the target holds after (by key).
async fn copy_shared(
    lite: &SqlitePool,
    pg: &mut PgConnection,
    shape: &TableShape,
    kinds: &HashMap<String, Kind>,
    ids: &mut Ids,
    progress: &mut dyn FnMut(CopyStep<'_>),
) -> Result<(u64, u64), StoreError> {
    let content = kinds[&shape.name] == Kind::Content;
    // Content rows get the target's ids: the natural key decides.
    let key: &[String] = if content { &shape.natural } else { &shape.key };
    let written_cols: Vec<usize> = (0..shape.columns.len())
        .filter(|&i| !(content && shape.columns[i].0 == "id"))
        .collect();
    let key_cols: Vec<usize> = key.iter().map(|k| index(shape, k)).collect();
    let names = |cols: &[usize]| {
        cols.iter()
            .map(|&i| quote(&shape.columns[i].0))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let conflict = if key.is_empty() {
        " ON CONFLICT DO NOTHING".to_string()
    } else {
        format!(" ON CONFLICT ({}) DO NOTHING", names(&key_cols))
    };
    let on = key
        .iter()
        .map(|k| format!("t.{0} = v.{0}", quote(k)))
        .collect::<Vec<_>>()
        .join(" AND ");
    let (mut written, mut found) = (0u64, 0u64);
    let mut map = HashMap::new();
    let mut batches = Batches::new(lite, shape);
    while let Some(batch) = batches.next().await? {
        let mut rows = Vec::with_capacity(batch.len());
        for row in batch {
            rows.push(
                remap(shape, row, kinds, ids)?
                    .ok_or_else(|| integrity(format!("a shared {} row names a run", shape.name)))?,
            );
        }
        // Content already there first: an insert that finds its row there
        // would still take an id from the sequence.
        let n = rows.len() as u64;
        let mut missing = rows;
        if content {
            let pairs = lookup(pg, shape, &missing, &key_cols, &on).await?;
            found += pairs.len() as u64;
            missing.retain(|r| !pairs.contains_key(&int(&r[index(shape, "id")])));
            map.extend(pairs);
        }
        if !missing.is_empty() {
            let mut q = QueryBuilder::<Postgres>::new(format!(
                "INSERT INTO {} ({}) ",
                quote(&shape.name),
                names(&written_cols)
            ));
            q.push_values(missing.iter(), |mut b, row| {
                for &i in &written_cols {
                    bind(&mut b, &row[i]);
                }
            });
            q.push(&conflict);
            written += q.build().execute(&mut *pg).await?.rows_affected();
            if key.is_empty() {
                found += missing.len() as u64;
            } else {
                let pairs = lookup(pg, shape, &missing, &key_cols, &on).await?;
                found += pairs.len() as u64;
                map.extend(pairs);
            }
        }
        progress(CopyStep::Rows(n));
    }
    if content {
        ids.insert(shape.name.clone(), map);
    }
    Ok((written, found))
}

/// The target's rows with the keys of `rows` (a batch of one table): for
/// a content table, source id → target id; for the others, each found
/// row under id 0 … n (only their number matters).
async fn lookup(
    pg: &mut PgConnection,
    shape: &TableShape,
    rows: &[Vec<Val>],
    key_cols: &[usize],
    on: &str,
) -> Result<HashMap<i64, i64>, StoreError> {
    let content = has_id(shape) && !shape.natural.is_empty() && shape.key != shape.natural;
    let id = index_of(shape, "id");
    let mut q = QueryBuilder::<Postgres>::new(format!(
        "SELECT v.src, {} FROM {} AS t JOIN (",
        if content { "t.id" } else { "0::bigint" },
        quote(&shape.name)
    ));
    q.push_values(rows.iter().enumerate(), |mut b, (n, row)| {
        match (content, id) {
            (true, Some(i)) => bind(&mut b, &row[i]),
            _ => bind(&mut b, &Val::Int(Some(n as i64))),
        }
        for &i in key_cols {
            bind(&mut b, &row[i]);
        }
    });
    let mut alias: Vec<String> = key_cols
        .iter()
        .map(|&i| quote(&shape.columns[i].0))
        .collect();
    alias.insert(0, "src".into());
    q.push(format!(") AS v ({}) ON {on}", alias.join(", ")));
    let pairs: Vec<(i64, i64)> = q.build_query_as().fetch_all(&mut *pg).await?;
    Ok(pairs.into_iter().collect())
}

/// Copies the rows of the runs the target does not hold (`held`: the
/// file's runs it does hold, for the runs' own table), under new ids
/// where the table has them; returns the rows written. A derived table's
/// rows (run totals) are made the source's: PostgreSQL's trigger adds
/// every copied discarded charge to them first.
async fn copy_run_rows(
    lite: &SqlitePool,
    pg: &mut PgConnection,
    shape: &TableShape,
    kinds: &HashMap<String, Kind>,
    held: &HashMap<i64, i64>,
    ids: &mut Ids,
    progress: &mut dyn FnMut(CopyStep<'_>),
) -> Result<u64, StoreError> {
    let id_col = has_id(shape).then(|| index(shape, "id"));
    let conflict = derived_conflict(shape);
    let mut map = HashMap::new();
    let mut written = 0u64;
    let mut batches = Batches::new(lite, shape);
    while let Some(batch) = batches.next().await? {
        let n = batch.len() as u64;
        let mut rows = Vec::with_capacity(batch.len());
        for row in batch {
            let own = id_col.map(|i| int(&row[i]));
            if own.is_some_and(|id| held.contains_key(&id)) {
                continue;
            }
            if let Some(row) = remap(shape, row, kinds, ids)? {
                rows.push(row);
            }
        }
        if let Some(i) = id_col
            && !rows.is_empty()
        {
            // New ids, in the source's order (the batch is in id order).
            let mut fresh: Vec<i64> = sqlx::query_scalar(
                "SELECT nextval(pg_get_serial_sequence($1, 'id')) FROM generate_series(1, $2)",
            )
            .bind(quote(&shape.name))
            .bind(rows.len() as i64)
            .fetch_all(&mut *pg)
            .await?;
            fresh.sort_unstable();
            for (row, id) in rows.iter_mut().zip(fresh) {
                map.insert(int(&row[i]), id);
                row[i] = Val::Int(Some(id));
            }
        }
        if !rows.is_empty() {
            let mut q = QueryBuilder::<Postgres>::new(format!(
                "INSERT INTO {} ({}) ",
                quote(&shape.name),
                column_list(shape)
            ));
            q.push_values(rows.iter(), |mut b, row| {
                for v in row {
                    bind(&mut b, v);
                }
            });
            q.push(&conflict);
            written += q.build().execute(&mut *pg).await?.rows_affected();
        }
        progress(CopyStep::Rows(n));
    }
    if id_col.is_some() {
        ids.insert(shape.name.clone(), map);
    }
    Ok(written)
}

/// For a derived table, `ON CONFLICT … DO UPDATE` to the source's values
/// where they differ; nothing for the others (their rows are new).
fn derived_conflict(shape: &TableShape) -> String {
    let rest: Vec<String> = shape
        .columns
        .iter()
        .map(|(c, _)| c)
        .filter(|c| !shape.key.contains(c))
        .map(|c| quote(c))
        .collect();
    if !DERIVED.contains(&shape.name.as_str()) || rest.is_empty() || shape.key.is_empty() {
        return String::new();
    }
    let key: Vec<String> = shape.key.iter().map(|k| quote(k)).collect();
    let table = quote(&shape.name);
    let set: Vec<String> = rest.iter().map(|c| format!("{c} = excluded.{c}")).collect();
    let mine: Vec<String> = rest.iter().map(|c| format!("{table}.{c}")).collect();
    let theirs: Vec<String> = rest.iter().map(|c| format!("excluded.{c}")).collect();
    format!(
        " ON CONFLICT ({}) DO UPDATE SET {} WHERE ({}) IS DISTINCT FROM ({})",
        key.join(", "),
        set.join(", "),
        mine.join(", "),
        theirs.join(", ")
    )
}

/// The row with the ids it names mapped to the target's; `None` for a row
/// of a run this copy does not write. A content id the copy has not mapped
/// is an error (content is copied before what names it).
fn remap(
    shape: &TableShape,
    mut row: Vec<Val>,
    kinds: &HashMap<String, Kind>,
    ids: &Ids,
) -> Result<Option<Vec<Val>>, StoreError> {
    for (col, parent) in &shape.refs {
        let Some(map) = ids.get(parent) else {
            continue;
        };
        let i = index(shape, col);
        let Val::Int(Some(v)) = row[i] else {
            continue;
        };
        // A total with no scenario.
        if shape.name == "run_total" && col == "scenario_id" && v == 0 {
            continue;
        }
        match map.get(&v) {
            Some(t) => row[i] = Val::Int(Some(*t)),
            None if kinds.get(parent) == Some(&Kind::Run) => return Ok(None),
            None => {
                return Err(integrity(format!(
                    "{}.{col} names {parent} {v}, which the source lacks",
                    shape.name
                )));
            }
        }
    }
    Ok(Some(row))
}

fn int(v: &Val) -> i64 {
    match v {
        Val::Int(Some(x)) => *x,
        _ => 0,
    }
}

fn bind(b: &mut sqlx::query_builder::Separated<'_, Postgres, &'static str>, v: &Val) {
    match v {
        Val::Int(x) => b.push_bind(*x),
        Val::Real(x) => b.push_bind(*x),
        Val::Text(x) => b.push_bind(x.clone()),
    };
}

/// How many of the target's rows of `shape` belong to `runs` (the file's
/// runs there), following its references up to the run.
async fn count_of_runs(
    pg: &PgPool,
    shapes: &[TableShape],
    shape: &TableShape,
    runs: &[i64],
) -> Result<u64, StoreError> {
    let sql = format!(
        "SELECT COUNT(*) FROM {} WHERE {}",
        quote(&shape.name),
        belongs(shapes, shape)
    );
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .bind(runs)
        .fetch_one(pg)
        .await?;
    Ok(n as u64)
}

/// The condition "this row belongs to one of the runs `$1`".
fn belongs(shapes: &[TableShape], shape: &TableShape) -> String {
    if shape.name == RUNS {
        return "id = ANY($1)".into();
    }
    let direct = shape.refs.iter().find(|(_, p)| p == RUNS);
    let (col, parent) = direct
        .or_else(|| {
            shape
                .refs
                .iter()
                .find(|(_, p)| shapes.iter().any(|s| &s.name == p && s.name != shape.name))
        })
        .expect("a run table names a run, a result or a batch");
    if parent == RUNS {
        return format!("{} = ANY($1)", quote(col));
    }
    let p = shapes.iter().find(|s| &s.name == parent).expect("listed");
    format!(
        "{} IN (SELECT id FROM {} WHERE {})",
        quote(col),
        quote(parent),
        belongs(shapes, p)
    )
}

/// The source's rows of a table in key order, a batch at a time.
struct Batches<'a> {
    rows: futures_util::stream::BoxStream<'a, Result<sqlx::sqlite::SqliteRow, sqlx::Error>>,
    shape: &'a TableShape,
    per_batch: usize,
}

impl<'a> Batches<'a> {
    fn new(lite: &'a SqlitePool, shape: &'a TableShape) -> Batches<'a> {
        let order = if shape.key.is_empty() {
            "1".to_string()
        } else {
            shape
                .key
                .iter()
                .map(|k| quote(k))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let select = format!(
            "SELECT {} FROM {} ORDER BY {order}",
            column_list(shape),
            quote(&shape.name)
        );
        // +2: a content lookup binds its source id besides the row.
        let per_batch = (MAX_PARAMS / (shape.columns.len() + 2)).clamp(1, MAX_BATCH_ROWS);
        Batches {
            rows: sqlx::query(sqlx::AssertSqlSafe(select)).fetch(lite),
            shape,
            per_batch,
        }
    }

    async fn next(&mut self) -> Result<Option<Vec<Vec<Val>>>, StoreError> {
        let mut batch = Vec::new();
        while batch.len() < self.per_batch {
            match self.rows.try_next().await? {
                Some(row) => batch.push(read_row(&row, self.shape)?),
                None => break,
            }
        }
        Ok((!batch.is_empty()).then_some(batch))
    }
}
