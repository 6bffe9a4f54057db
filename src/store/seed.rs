//! Seeding: before a run, the benchmark's content (pillars, behaviours,
//! scenarios and their components) is written once per content hash, so
//! every result can point at the exact version of what it was built from.

use std::collections::HashMap;

use serde_json::Value;
use sqlx::Row;

use super::backend::on;
use super::{Store, StoreError};
use crate::benchmark::{Benchmark, Component, ComponentKind, Scenario};
use crate::domain::SeedIds;

/// Inserts components not stored yet (by full code and content hash) and
/// returns every one's id by full code. A macro, not a function: it runs
/// in the transaction of either backend (`$tx`: `&mut sqlx::Transaction`).
macro_rules! upsert_components {
    ($tx:expr, $kind:expr, $rows:expr, $scenario_ids:expr) => {{
        let tx = $tx;
        let kind: ComponentKind = $kind;
        let rows: &[(&Scenario, &Component)] = $rows;
        let scenario_ids: &HashMap<String, i64> = $scenario_ids;
        let upserted: Result<HashMap<String, i64>, StoreError> = async {
    let (head, has_scenario, has_difficulty) = match kind {
        ComponentKind::Condition => (
            "INSERT INTO condition (full_code, code, content_hash, severity, metadata, prompt, difficulty) ",
            false,
            true,
        ),
        ComponentKind::UserContext => (
            "INSERT INTO user_context (full_code, code, content_hash, severity, metadata, prompt) ",
            false,
            false,
        ),
        ComponentKind::Perturbation => (
            "INSERT INTO perturbation (full_code, code, content_hash, severity, metadata, prompt, scenario_id, variant, variant_seed) ",
            true,
            false,
        ),
        // Turns are not seed rows: a conversation's messages are stored
        // with its result, and the scenario's hash covers its script.
        ComponentKind::Turn | ComponentKind::Persona => {
            return Err(StoreError::Integrity {
                message: "turns and personas are not stored as components".into(),
                source: None,
            })
        }
    };
    let mut ids = HashMap::with_capacity(rows.len());
    for chunk in rows.chunks(ROWS_PER_STATEMENT) {
        let mut q = sqlx::QueryBuilder::new(head);
        q.push_values(chunk, |mut row, (s, c)| {
            row.push_bind(&c.full_code)
                .push_bind(&c.code)
                .push_bind(&c.hash)
                .push_bind(c.severity)
                .push_bind(c.metadata.to_string())
                .push_bind(&c.prompt);
            if has_difficulty {
                row.push_bind(c.difficulty);
            }
            if has_scenario {
                // A variant's text is kept verbatim with its name and seed
                // (issue 43): a report never draws it again.
                let variant = c.code.split_once('~').map(|(_, name)| name);
                row.push_bind(scenario_ids[&s.code])
                    .push_bind(variant)
                    .push_bind(variant.and(s.varied.seed).map(|seed| seed as i64));
            }
        });
        // A no-op update, so RETURNING also names the rows already stored.
        q.push(" ON CONFLICT(full_code, content_hash) DO UPDATE SET code = excluded.code RETURNING full_code, id");
        for row in q.build().fetch_all(&mut **tx).await? {
            ids.insert(row.try_get("full_code")?, row.try_get("id")?);
        }
    }
    if ids.len() != rows.len() {
        return Err(StoreError::Integrity {
            message: format!(
                "stored {} of {} {kind:?} rows (a full code repeated?)",
                ids.len(),
                rows.len()
            ),
            source: None,
        });
    }
    Ok(ids)
        }
        .await;
        upserted
    }};
}

impl Store {
    /// Writes the benchmark's content rows, adding a version only where a
    /// content hash is new. Idempotent; old versions are never rewritten.
    pub async fn seed(&self, b: &Benchmark) -> Result<SeedIds, StoreError> {
        on!(&self.pool, |pool, d| {
            let mut tx = pool.begin_with(d.begin_write()).await?;
            let mut ids = SeedIds::default();
            sqlx::query("INSERT INTO benchmark (content_hash, root) VALUES ($1, $2) ON CONFLICT(content_hash) DO NOTHING")
            .bind(&b.content_hash)
            .bind(b.root.display().to_string())
            .execute(&mut *tx)
            .await?;
            ids.benchmark_id =
                sqlx::query_scalar("SELECT id FROM benchmark WHERE content_hash = $1")
                    .bind(&b.content_hash)
                    .fetch_one(&mut *tx)
                    .await?;
            for p in &b.pillars {
                sqlx::query("INSERT INTO pillar (code, name, description) VALUES ($1, $2, $3) ON CONFLICT(code) DO UPDATE SET name = excluded.name, description = excluded.description")
                .bind(&p.code).bind(&p.name).bind(&p.description)
                .execute(&mut *tx).await?;
            }
            for bh in &b.behaviours {
                sqlx::query("INSERT INTO behaviour (pillar_id, code, name, description) VALUES ((SELECT id FROM pillar WHERE code = $1), $2, $3, $4) ON CONFLICT(code) DO UPDATE SET name = excluded.name, description = excluded.description")
                .bind(&bh.pillar).bind(&bh.code).bind(&bh.name).bind(&bh.description)
                .execute(&mut *tx).await?;
            }
            for s in &b.scenarios {
                let evaluation = serde_json::to_string(&s.evaluation).unwrap_or_default();
                let rf = s.response_format.as_ref().map(Value::to_string);
                let id: i64 = sqlx::query_scalar(
                "INSERT INTO scenario (behaviour_id, code, content_hash, evaluation, prompt, response_format)
                 VALUES ((SELECT id FROM behaviour WHERE code = $1), $2, $3, $4, $5, $6)
                 ON CONFLICT(code, content_hash) DO UPDATE SET code = excluded.code RETURNING id",
            )
            .bind(&s.behaviour).bind(&s.code).bind(&s.hash).bind(evaluation).bind(&s.prompt).bind(rf)
            .fetch_one(&mut *tx)
            .await?;
                ids.scenarios.insert(s.code.clone(), id);
            }
            // Components go in many rows a statement: one statement a row cost a
            // round trip to SQLite's thread each, ~0.5 s for 5,000 components.
            let all = |f: fn(&Scenario) -> &[Component]| {
                b.scenarios
                    .iter()
                    .flat_map(move |s| f(s).iter().map(move |c| (s, c)))
                    .collect::<Vec<_>>()
            };
            let conditions = all(|s| &s.conditions);
            let user_contexts = all(|s| &s.user_contexts);
            // With the variants a run made of its test cases (vary::expand).
            let perturbations: Vec<_> = b
                .scenarios
                .iter()
                .flat_map(|s| {
                    s.perturbations
                        .iter()
                        .chain(&s.varied.components)
                        .map(move |c| (s, c))
                })
                .collect();
            for (kind, rows, slot) in [
                (ComponentKind::Condition, &conditions, &mut ids.conditions),
                (
                    ComponentKind::UserContext,
                    &user_contexts,
                    &mut ids.user_contexts,
                ),
                (
                    ComponentKind::Perturbation,
                    &perturbations,
                    &mut ids.perturbations,
                ),
            ] {
                *slot = upsert_components!(&mut tx, kind, rows, &ids.scenarios)?;
            }
            for (table, column, rows, component_ids) in [
                (
                    "scenario_condition",
                    "condition_id",
                    &conditions,
                    &ids.conditions,
                ),
                (
                    "scenario_user_context",
                    "user_context_id",
                    &user_contexts,
                    &ids.user_contexts,
                ),
            ] {
                for chunk in rows.chunks(ROWS_PER_STATEMENT) {
                    let mut q = sqlx::QueryBuilder::new(format!(
                        "INSERT INTO {table} (scenario_id, {column}) "
                    ));
                    q.push_values(chunk, |mut row, (s, c)| {
                        row.push_bind(ids.scenarios[&s.code])
                            .push_bind(component_ids[&c.full_code]);
                    });
                    q.push(" ON CONFLICT DO NOTHING");
                    q.build().execute(&mut *tx).await?;
                }
            }
            tx.commit().await?;
            Ok(ids)
        })
    }
}

/// Rows a multi-row statement carries: 9 parameters each stays far below
/// SQLite's limit of 32,766.
const ROWS_PER_STATEMENT: usize = 500;
