//! The replies of conversations (issue 42), one row a turn: written as each
//! arrives (before the next turn is sent, so a kill loses at most the turn
//! in flight), read back to rebuild a conversation's history on resume, and
//! found by request hash as a cache of every turn ever answered.

use tokio::sync::{mpsc, oneshot};

use super::backend::{Pool, QueuedTurn, Tx, on, on_tx};
use super::decode::from_columns;
use super::{Store, StoreError};
use crate::domain::{CachedReply, TurnRecord};

from_columns!(TurnRecord {
    run_id,
    test_code,
    repeat_index,
    turn_index,
    turn_code,
    pressure,
    user_message,
    prefilled,
    judged,
    request_hash,
    response,
    finish_reason,
    generation_id,
    prompt_tokens,
    completion_tokens,
    cost_usd,
    byok_cost_usd,
    latency_ms,
    attempts,
    cached,
    served_model,
    provider,
    reasoning_tokens,
    cached_prompt_tokens,
});

/// test code, repeat, passed, error kind, evaluation details.
type OutcomeRow = (String, i64, i64, Option<String>, Option<String>);

const COLUMNS: &str = "run_id, test_code, repeat_index, turn_index, turn_code, pressure, user_message, prefilled, judged, request_hash, response, finish_reason, generation_id, prompt_tokens, completion_tokens, cost_usd, byok_cost_usd, latency_ms, attempts, cached, served_model, provider, reasoning_tokens, cached_prompt_tokens";

/// Turns a commit takes at most: every turn waiting when it starts.
const GROUP: usize = 256;

impl Store {
    /// Stores one turn of a conversation, committed before this returns. A
    /// turn stored before under the same index (a resume that asks again
    /// from a changed turn) is replaced.
    ///
    /// Turns of many conversations arrive at once (one per reply, each
    /// waited for before the next request of its conversation is sent): a
    /// commit each cost a conversation 2.5 times the CPU a single-turn test
    /// case takes, most of it handing statements to SQLite's thread. So
    /// they are committed in groups: one task writes every turn waiting
    /// when it starts in one transaction, then answers each writer. Nothing
    /// waits for a group to fill: a turn alone is written at once.
    pub async fn write_turn(&self, t: &TurnRecord) -> Result<(), StoreError> {
        if let Some(queue) = self.turn_queue() {
            let (done, wait) = oneshot::channel();
            let queued = QueuedTurn {
                turn: t.clone(),
                endpoint: self.endpoint.clone(),
                done,
            };
            // A queue whose task is gone (its runtime ended) writes here;
            // a write lost with it is written again (the write replaces).
            if queue.send(queued).is_ok()
                && let Ok(written) = wait.await
            {
                return Ok(written?);
            }
        }
        Ok(write_turns(&self.pool, &[(t, self.endpoint.clone())]).await?)
    }

    /// The group commit's queue, its task started on this runtime the
    /// first time; None outside a runtime.
    fn turn_queue(&self) -> Option<&mpsc::UnboundedSender<QueuedTurn>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(self.turns.get_or_init(|| {
            let (queue, waiting) = mpsc::unbounded_channel();
            // The task holds the pool, not the store: it ends when the
            // last handle (and with it the queue) is dropped.
            runtime.spawn(group_commit(self.pool.clone(), waiting));
            queue
        }))
    }

    /// The stored turns of one conversation of a run, in order.
    pub async fn turns_of(
        &self,
        run_id: i64,
        test_code: &str,
        repeat: i64,
    ) -> Result<Vec<TurnRecord>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM turn WHERE run_id = $1 AND test_code = $2 AND repeat_index = $3 ORDER BY turn_index"
        );
        Ok(on!(&self.pool, |pool| sqlx::query_as(sqlx::AssertSqlSafe(
            sql.clone()
        ))
        .bind(run_id)
        .bind(test_code)
        .bind(repeat)
        .fetch_all(pool)
        .await?))
    }

    /// A reply to an identical turn request (the same history) sent to the
    /// same endpoint, stored by any run, if any; a reply the provider's
    /// content filter stopped is not reused.
    pub async fn cached_turn_reply(
        &self,
        request_hash: &str,
    ) -> Result<Option<CachedReply>, StoreError> {
        let Some(endpoint) = &self.endpoint else {
            return Ok(None);
        };
        Ok(on!(&self.pool, |pool| {
            sqlx::query_as(
                "SELECT response, finish_reason, generation_id, prompt_tokens, completion_tokens, served_model, provider FROM turn
                 WHERE request_hash = $1 AND endpoint = $2 AND response IS NOT NULL
                   AND (finish_reason IS NULL OR finish_reason <> 'content_filter')
                 LIMIT 1",
            )
            .bind(request_hash)
            .bind(endpoint)
            .fetch_optional(pool)
            .await?
        }))
    }
}

impl Store {
    /// The stored `evaluation_details` of one result (a conversation's
    /// per-turn verdicts), if the result exists.
    pub async fn evaluation_details(
        &self,
        run_id: i64,
        test_code: &str,
        repeat: i64,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        let text: Option<Option<String>> = on!(&self.pool, |pool| {
            sqlx::query_scalar(
            "SELECT evaluation_details FROM result WHERE run_id = $1 AND test_code = $2 AND repeat_index = $3"
        )
        .bind(run_id)
        .bind(test_code)
        .bind(repeat)
        .fetch_optional(pool)
        .await?
        });
        Ok(text.flatten().and_then(|t| serde_json::from_str(&t).ok()))
    }
}

impl Store {
    /// The conversations of a run with their verdicts and per-turn
    /// details; empty (after one probe of the turn table's key) for a run
    /// without conversations.
    pub async fn conversation_outcomes(
        &self,
        run_id: i64,
    ) -> Result<Vec<crate::domain::ConversationOutcome>, StoreError> {
        let any: Option<i64> = on!(&self.pool, |pool| sqlx::query_scalar(
            "SELECT turn_index FROM turn WHERE run_id = $1 LIMIT 1"
        )
        .bind(run_id)
        .fetch_optional(pool)
        .await?);
        if any.is_none() {
            return Ok(Vec::new());
        }
        let rows: Vec<OutcomeRow> = on!(&self.pool, |pool| {
            sqlx::query_as(
                "SELECT r.test_code, r.repeat_index, r.passed, r.error_kind, r.evaluation_details FROM result r
                 WHERE r.run_id = $1 AND EXISTS (SELECT 1 FROM turn t WHERE t.run_id = r.run_id
                   AND t.test_code = r.test_code AND t.repeat_index = r.repeat_index)
                 ORDER BY r.test_code, r.repeat_index"
            )
            .bind(run_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows
            .into_iter()
            .map(|(test_code, repeat_index, passed, kind, details)| {
                crate::domain::ConversationOutcome {
                    test_code,
                    repeat_index,
                    passed: passed != 0,
                    error_kind: kind.and_then(|k| k.parse().ok()),
                    details: details
                        .and_then(|d| serde_json::from_str(&d).ok())
                        .unwrap_or_default(),
                }
            })
            .collect())
    }
}

impl Store {
    /// Every stored turn of run `run_id` (of every run when None), in
    /// conversation and turn order.
    pub async fn all_turns(&self, run_id: Option<i64>) -> Result<Vec<TurnRecord>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM turn WHERE ($1 IS NULL OR run_id = $1) ORDER BY run_id, test_code, repeat_index, turn_index"
        );
        Ok(on!(&self.pool, |pool| sqlx::query_as(sqlx::AssertSqlSafe(
            sql.clone()
        ))
        .bind(run_id)
        .fetch_all(pool)
        .await?))
    }
}

impl Store {
    /// Per run (of `run_id`, or every run): the turns stored for
    /// conversations that have no result yet (a stop, a kill or the
    /// budget came between their turns), how many conversations, turns and
    /// what they cost. Paid, and not in the run's totals until a resume
    /// finishes the conversation and its result sums them.
    pub async fn unfinished_turns(
        &self,
        run_id: Option<i64>,
    ) -> Result<Vec<crate::domain::UnfinishedTurns>, StoreError> {
        let rows: Vec<(i64, i64, i64, f64)> = on!(&self.pool, |pool| {
            sqlx::query_as(
            // A simulated user's calls (issue 42) are paid like turns: in
            // the cost, not in the count of turns.
            "SELECT t.run_id, COUNT(DISTINCT t.test_code || '#' || t.repeat_index), SUM(t.live), COALESCE(SUM(t.cost_usd), 0.0)
             FROM (SELECT run_id, test_code, repeat_index, cost_usd, 1 AS live FROM turn WHERE prefilled = 0
                   UNION ALL
                   SELECT run_id, test_code, repeat_index, cost_usd, 0 AS live FROM simulated_turn) t
             WHERE ($1 IS NULL OR t.run_id = $1)
               AND NOT EXISTS (SELECT 1 FROM result r WHERE r.run_id = t.run_id
                   AND r.test_code = t.test_code AND r.repeat_index = t.repeat_index)
             GROUP BY t.run_id ORDER BY t.run_id"
        )
        .bind(run_id)
        .fetch_all(pool)
        .await?
        });
        Ok(rows
            .into_iter()
            .map(
                |(run_id, conversations, turns, cost_usd)| crate::domain::UnfinishedTurns {
                    run_id,
                    conversations,
                    turns,
                    cost_usd,
                },
            )
            .collect())
    }
}

impl Store {
    /// The values the viewer's conversation filters offer for `runs`
    /// (issue 42): the turn codes stored, in turn order (`message 1` first
    /// when there is any conversation), and the pressure labels, sorted.
    /// Both empty for runs without conversations.
    pub async fn turn_filter_options(
        &self,
        runs: &[i64],
    ) -> Result<(Vec<String>, Vec<String>), StoreError> {
        let mut codes: Vec<(i64, String)> = Vec::new();
        let mut pressures: Vec<String> = Vec::new();
        for run in runs {
            let rows: Vec<(i64, Option<String>, Option<String>)> = on!(&self.pool, |pool| {
                sqlx::query_as(
                    "SELECT DISTINCT turn_index, turn_code, pressure FROM turn WHERE run_id = $1",
                )
                .bind(*run)
                .fetch_all(pool)
                .await?
            });
            for (index, code, pressure) in rows {
                let code = match code {
                    Some(c) => c,
                    None if index == 0 => crate::domain::query::FIRST_MESSAGE.to_string(),
                    None => continue,
                };
                if !codes.iter().any(|(_, c)| *c == code) {
                    codes.push((index, code));
                }
                if let Some(p) = pressure.filter(|p| !pressures.contains(p)) {
                    pressures.push(p);
                }
            }
        }
        codes.sort();
        pressures.sort();
        Ok((codes.into_iter().map(|(_, c)| c).collect(), pressures))
    }
}

/// Writes the turns waiting in `waiting`, a group to a transaction. When a
/// group fails, each of its turns is written alone, so each writer gets
/// its own answer.
async fn group_commit(pool: Pool, mut waiting: mpsc::UnboundedReceiver<QueuedTurn>) {
    while let Some(first) = waiting.recv().await {
        let mut group = vec![first];
        while group.len() < GROUP {
            match waiting.try_recv() {
                Ok(q) => group.push(q),
                Err(_) => break,
            }
        }
        let rows: Vec<(&TurnRecord, Option<String>)> = group
            .iter()
            .map(|q| (&q.turn, q.endpoint.clone()))
            .collect();
        let written = write_turns(&pool, &rows).await;
        drop(rows);
        match written {
            Ok(()) => {
                for q in group {
                    let _ = q.done.send(Ok(()));
                }
            }
            Err(e) if group.len() == 1 => {
                let _ = group.remove(0).done.send(Err(e));
            }
            Err(_) => {
                for q in group {
                    let alone = write_turns(&pool, &[(&q.turn, q.endpoint.clone())]).await;
                    let _ = q.done.send(alone);
                }
            }
        }
    }
}

/// Writes `turns` (each with its endpoint) in one transaction.
async fn write_turns(
    pool: &Pool,
    turns: &[(&TurnRecord, Option<String>)],
) -> Result<(), sqlx::Error> {
    // Rows of their own: no lock on `result` is needed (results.rs).
    let mut tx = Tx::write(pool).await?;
    let sql = format!(
            "INSERT INTO turn ({COLUMNS}, endpoint) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25)
             ON CONFLICT (run_id, test_code, repeat_index, turn_index) DO UPDATE SET
               turn_code = excluded.turn_code, pressure = excluded.pressure, user_message = excluded.user_message,
               prefilled = excluded.prefilled, judged = excluded.judged, request_hash = excluded.request_hash,
               response = excluded.response, finish_reason = excluded.finish_reason, generation_id = excluded.generation_id,
               prompt_tokens = excluded.prompt_tokens, completion_tokens = excluded.completion_tokens,
               cost_usd = excluded.cost_usd, byok_cost_usd = excluded.byok_cost_usd, latency_ms = excluded.latency_ms,
               attempts = excluded.attempts, cached = excluded.cached, served_model = excluded.served_model,
               provider = excluded.provider, reasoning_tokens = excluded.reasoning_tokens,
               cached_prompt_tokens = excluded.cached_prompt_tokens, endpoint = excluded.endpoint"
        );
    for (t, endpoint) in turns {
        on_tx!(&mut tx, |t2| sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(t.run_id)
            .bind(t.test_code.clone())
            .bind(t.repeat_index)
            .bind(t.turn_index)
            .bind(t.turn_code.clone())
            .bind(t.pressure.clone())
            .bind(t.user_message.clone())
            .bind(i64::from(t.prefilled))
            .bind(i64::from(t.judged))
            .bind(t.request_hash.clone())
            .bind(t.response.clone())
            .bind(t.finish_reason.clone())
            .bind(t.generation_id.clone())
            .bind(t.prompt_tokens)
            .bind(t.completion_tokens)
            .bind(if t.cost_usd.is_finite() {
                t.cost_usd
            } else {
                0.0
            })
            .bind(if t.byok_cost_usd.is_finite() {
                t.byok_cost_usd
            } else {
                0.0
            })
            .bind(t.latency_ms)
            .bind(t.attempts)
            .bind(i64::from(t.cached))
            .bind(t.served_model.clone())
            .bind(t.provider.clone())
            .bind(t.reasoning_tokens)
            .bind(t.cached_prompt_tokens)
            .bind(endpoint.clone())
            .execute(&mut **t2)
            .await?
            .rows_affected());
    }
    tx.commit().await?;
    Ok(())
}
