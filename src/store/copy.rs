//! Copies a SQLite database into PostgreSQL (`helmbench migrate --from …
//! --to …`, issue 34), the reading half: the source opened read-only and
//! refused unless its migrations are exactly this version's, the target
//! migrated, and every table of the source described (columns, keys, the
//! rows it references) in an order parents first, the run totals last
//! (they are derived: PostgreSQL's trigger adds each discarded charge
//! copied to them, so they are made equal to the source's after every
//! other table). How the rows go into a target that may hold other files'
//! runs is copy_merge.rs's (issue 41).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqlitePool, TypeInfo, ValueRef};

use super::{PG_MIGRATOR, Store, StoreError};
use crate::domain::redact_password;

/// Tables the store keeps from other tables' rows: copied last and made
/// equal to the source's (see the module's comment). `totals_rebuild`, the
/// migration's marker, is last of all.
pub(super) const DERIVED: [&str; 5] = [
    "run_total",
    "run_served_total",
    "run_error_total",
    "run_judge_total",
    "totals_rebuild",
];

/// PostgreSQL takes at most 65,535 parameters a statement.
pub(super) const MAX_PARAMS: usize = 30_000;
pub(super) const MAX_BATCH_ROWS: usize = 1_000;

/// A column's declared type (the same on both backends, see migrations/postgres).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ty {
    Int,
    Real,
    Text,
}

/// One value read from SQLite, typed as its column is declared.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Val {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
}

#[derive(Debug)]
pub(super) struct TableShape {
    pub(super) name: String,
    pub(super) columns: Vec<(String, Ty)>,
    /// The primary key, else the first unique key; empty for none.
    pub(super) key: Vec<String>,
    /// The first unique key besides the primary key (a content row's
    /// natural key: a scenario's code and content hash); empty for none.
    pub(super) natural: Vec<String>,
    /// Its columns that name another table's row, with that table.
    pub(super) refs: Vec<(String, String)>,
    /// Tables its foreign keys name.
    parents: BTreeSet<String>,
}

/// Opens the source read-only, refusing one whose migrations are not
/// exactly this version's.
pub(super) async fn open_source(from: &str) -> Result<Store, StoreError> {
    let shown = redact_password(from);
    match Store::open_read_only(from).await {
        Ok(s) => Ok(s),
        Err(StoreError::OlderSchema { version, .. } | StoreError::BeingCreated { version, .. }) => {
            Err(StoreError::Refused(format!(
                "the source database {shown} lacks migration {version} of this helmbench (or its run totals are not filled yet); run `helmbench migrate --database-url {shown}` first, then copy it"
            )))
        }
        Err(StoreError::NewerSchema { version, .. }) => Err(StoreError::Refused(format!(
            "the source database {shown} was written by a newer helmbench (it has migration {version}, unknown to this version); copy it with that helmbench"
        ))),
        Err(StoreError::NotHelmbench { .. }) => Err(StoreError::Refused(format!(
            "the source database {shown} has no helmbench tables; pass the right --from"
        ))),
        Err(e) => Err(e),
    }
}

/// Connects to the target and applies PostgreSQL's migrations, refusing a
/// database with migrations this version does not know.
pub(super) async fn open_target(to: &str) -> Result<PgPool, StoreError> {
    let shown = redact_password(to);
    let pool = super::connect_postgres(to, 2).await?;
    let applied: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(&pool)
        .await
        .unwrap_or_default();
    let known: HashSet<i64> = PG_MIGRATOR.iter().map(|m| m.version).collect();
    if let Some(v) = applied.iter().find(|v| !known.contains(v)) {
        pool.close().await;
        return Err(StoreError::Refused(format!(
            "the target database {shown} was written by a newer helmbench (it has migration {v}, unknown to this version)"
        )));
    }
    super::migrate_postgres(&pool, &shown).await?;
    Ok(pool)
}

/// Every table of the source (sqlx's bookkeeping aside): its columns, key
/// and parents.
pub(super) async fn read_shapes(lite: &SqlitePool) -> Result<Vec<TableShape>, StoreError> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table'
          AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%' ORDER BY name",
    )
    .fetch_all(lite)
    .await?;
    let mut shapes = Vec::new();
    for name in names {
        let cols = sqlx::query("SELECT name, type, pk FROM pragma_table_info(?) ORDER BY cid")
            .bind(&name)
            .fetch_all(lite)
            .await?;
        let mut columns = Vec::new();
        let mut pk: Vec<(i64, String)> = Vec::new();
        for c in &cols {
            let col: String = c.get("name");
            let declared: String = c.get("type");
            let ty = match declared.as_str() {
                "INTEGER" => Ty::Int,
                "REAL" => Ty::Real,
                "TEXT" => Ty::Text,
                other => {
                    return Err(integrity(format!(
                        "column {name}.{col} has type {other}, which has no PostgreSQL twin"
                    )));
                }
            };
            let pos: i64 = c.get("pk");
            if pos > 0 {
                pk.push((pos, col.clone()));
            }
            columns.push((col, ty));
        }
        pk.sort();
        let mut key: Vec<String> = pk.into_iter().map(|(_, c)| c).collect();
        let natural = unique_key(lite, &name).await?;
        if key.is_empty() {
            key = natural.clone();
        }
        let mut refs: Vec<(String, String)> =
            sqlx::query_as("SELECT \"from\", \"table\" FROM pragma_foreign_key_list(?)")
                .bind(&name)
                .fetch_all(lite)
                .await?;
        refs.retain(|(_, p)| *p != name);
        // A total's scenario (0: charges with no scenario) names no table
        // in the schema but is a scenario's id all the same.
        if name == "run_total" {
            refs.push(("scenario_id".into(), "scenario".into()));
        }
        let parents = refs.iter().map(|(_, p)| p.clone()).collect();
        shapes.push(TableShape {
            name,
            columns,
            key,
            natural,
            refs,
            parents,
        });
    }
    Ok(shapes)
}

/// The columns of `table`'s first unique index, if it has one.
async fn unique_key(lite: &SqlitePool, table: &str) -> Result<Vec<String>, StoreError> {
    let index: Option<String> = sqlx::query_scalar(
        "SELECT name FROM pragma_index_list(?) WHERE \"unique\" = 1 ORDER BY name LIMIT 1",
    )
    .bind(table)
    .fetch_optional(lite)
    .await?;
    let Some(index) = index else {
        return Ok(Vec::new());
    };
    Ok(
        sqlx::query_scalar("SELECT name FROM pragma_index_info(?) ORDER BY seqno")
            .bind(index)
            .fetch_all(lite)
            .await?,
    )
}

/// Parents before children (by name among equals); the derived tables
/// last, in [`DERIVED`]'s order.
pub(super) fn order(shapes: Vec<TableShape>) -> Result<Vec<TableShape>, StoreError> {
    let mut pending: BTreeMap<String, TableShape> =
        shapes.into_iter().map(|s| (s.name.clone(), s)).collect();
    let derived: Vec<TableShape> = DERIVED.iter().filter_map(|d| pending.remove(*d)).collect();
    // The derived tables name only evaluation_run, copied before them.
    let mut done: HashSet<String> = HashSet::new();
    let mut ordered = Vec::new();
    while !pending.is_empty() {
        let ready: Vec<String> = pending
            .values()
            .filter(|s| {
                s.parents
                    .iter()
                    .all(|p| done.contains(p) || !pending.contains_key(p))
            })
            .map(|s| s.name.clone())
            .collect();
        if ready.is_empty() {
            return Err(integrity(format!(
                "the tables {:?} name each other in a loop of foreign keys; no copy order exists",
                pending.keys().collect::<Vec<_>>()
            )));
        }
        for name in ready {
            let shape = pending.remove(&name).expect("listed above");
            done.insert(name);
            ordered.push(shape);
        }
    }
    ordered.extend(derived);
    Ok(ordered)
}

/// The target's table has the source's columns with the same types (one
/// schema history; this catches a target changed by hand).
pub(super) async fn check_target_columns(
    pg: &PgPool,
    shape: &TableShape,
) -> Result<(), StoreError> {
    let cols: Vec<(String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text FROM information_schema.columns
          WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position",
    )
    .bind(&shape.name)
    .fetch_all(pg)
    .await?;
    let want: Vec<(String, String)> = shape
        .columns
        .iter()
        .map(|(c, ty)| {
            let pg_ty = match ty {
                Ty::Int => "bigint",
                Ty::Real => "double precision",
                Ty::Text => "text",
            };
            (c.clone(), pg_ty.to_string())
        })
        .collect();
    if cols != want {
        return Err(integrity(format!(
            "the target's table {} has columns {cols:?}, the source's {want:?}",
            shape.name
        )));
    }
    Ok(())
}

pub(super) async fn count(lite: &SqlitePool, table: &str) -> Result<u64, StoreError> {
    let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM {}",
        quote(table)
    )))
    .fetch_one(lite)
    .await?;
    Ok(n as u64)
}

/// Moves an identity column's sequence past the highest id in the target,
/// so rows inserted later on PostgreSQL get new ids.
pub(super) async fn advance_identity(
    pg: &mut sqlx::PgConnection,
    shape: &TableShape,
) -> Result<(), StoreError> {
    let [key] = shape.key.as_slice() else {
        return Ok(());
    };
    let sequence: Option<String> = sqlx::query_scalar("SELECT pg_get_serial_sequence($1, $2)")
        .bind(quote(&shape.name))
        .bind(key)
        .fetch_one(&mut *pg)
        .await?;
    let Some(sequence) = sequence else {
        return Ok(());
    };
    let max: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT MAX({}) FROM {}",
        quote(key),
        quote(&shape.name)
    )))
    .fetch_one(&mut *pg)
    .await?;
    if let Some(max) = max {
        // Never back: other writers may have taken ids past `max`.
        sqlx::query("SELECT setval($1::regclass, GREATEST($2, (SELECT last_value FROM pg_sequences WHERE (schemaname || '.' || sequencename)::regclass = $1::regclass)), true)")
            .bind(sequence)
            .bind(max)
            .execute(&mut *pg)
            .await?;
    }
    Ok(())
}

/// A SQLite row as its columns' declared types; a value stored as another
/// type is refused (an integer in a REAL column is that number).
pub(super) fn read_row(row: &SqliteRow, shape: &TableShape) -> Result<Vec<Val>, StoreError> {
    let mut vals = Vec::with_capacity(shape.columns.len());
    for (i, (col, ty)) in shape.columns.iter().enumerate() {
        let raw = row.try_get_raw(i)?;
        let null = raw.is_null();
        let stored = raw.type_info().name().to_string();
        let bad = || {
            integrity(format!(
                "{}.{col} holds a {stored} value where {ty:?} is declared; it cannot be copied as is",
                shape.name
            ))
        };
        vals.push(match (ty, null, stored.as_str()) {
            (Ty::Int, true, _) => Val::Int(None),
            (Ty::Real, true, _) => Val::Real(None),
            (Ty::Text, true, _) => Val::Text(None),
            (Ty::Int, false, "INTEGER") => Val::Int(Some(row.try_get_unchecked(i)?)),
            (Ty::Real, false, "REAL" | "INTEGER") => Val::Real(Some(row.try_get_unchecked(i)?)),
            (Ty::Text, false, "TEXT") => Val::Text(Some(row.try_get_unchecked(i)?)),
            _ => return Err(bad()),
        });
    }
    Ok(vals)
}

pub(super) fn column_list(shape: &TableShape) -> String {
    shape
        .columns
        .iter()
        .map(|(c, _)| quote(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// An identifier quoted for either backend (names come from the schema).
pub(super) fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

pub(super) fn integrity(message: String) -> StoreError {
    StoreError::Integrity {
        message,
        source: None,
    }
}
