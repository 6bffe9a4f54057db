//! The two databases the store speaks (issue 34): SQLite, embedded, the
//! default, and PostgreSQL, the team store. The SQL is written once for
//! both wherever the two dialects agree, which is almost everywhere:
//! placeholders are `$1`, `$2`… (sqlx's SQLite driver reads `$N` as the
//! N-th argument), upserts are `ON CONFLICT`, and PostgreSQL's database gets,
//! in its own schema `helmbench_sqlite`, the few SQLite functions the
//! statements use (`julianday`, `strftime`, `group_concat`, and a `sum` of
//! integers that stays an integer: migrations/postgres/20261128000001). What
//! differs (taking the write lock, JSON aggregates) is chosen with
//! [`Dialect`].
//!
//! A method runs its statements through [`on!`]: the body is compiled once
//! for each backend, so every statement is type-checked against both
//! drivers, with no generic bounds to spell out.

use sqlx::SqlitePool;
use sqlx::postgres::PgPool;

/// The connection pool of one database, SQLite or PostgreSQL.
#[derive(Clone, Debug)]
pub(super) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Pool {
    pub(super) async fn close(&self) {
        match self {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }
}

/// Which SQL a statement that differs between the two must be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// `sqlite` on SQLite, `postgres` on PostgreSQL.
    pub(super) fn pick<T>(self, sqlite: T, postgres: T) -> T {
        match self {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        }
    }

    /// The statement opening a transaction that writes. SQLite's IMMEDIATE
    /// takes the write lock at once, so two writers are serialised at the
    /// start instead of one failing at its first write (a deadlock SQLite
    /// answers with SQLITE_BUSY); PostgreSQL locks rows, not the database.
    pub(super) fn begin_write(self) -> &'static str {
        self.pick("BEGIN IMMEDIATE", "BEGIN")
    }
}

/// A value bound to a statement built at run time (a list of them binds
/// on either backend: [`bind_args!`]).
#[derive(Clone, Debug)]
pub(super) enum Arg {
    Int(Option<i64>),
    Real(Option<f64>),
    Text(Option<String>),
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(Some(v))
    }
}

impl From<f64> for Arg {
    fn from(v: f64) -> Arg {
        Arg::Real(Some(v))
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::Text(Some(v))
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(Some(v.to_string()))
    }
}

/// `$q` (a query of either backend) with every [`Arg`] of `$args` bound,
/// in order.
macro_rules! bind_args {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for a in $args {
            q = match a {
                $crate::store::backend::Arg::Int(v) => q.bind(v),
                $crate::store::backend::Arg::Real(v) => q.bind(v),
                $crate::store::backend::Arg::Text(v) => q.bind(v),
            };
        }
        q
    }};
}

/// A transaction of either backend (see [`on_tx!`]).
pub(super) enum Tx {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

impl Tx {
    /// A transaction that writes (see [`Dialect::begin_write`]).
    pub(super) async fn write(pool: &Pool) -> Result<Tx, sqlx::Error> {
        Ok(match pool {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin_with(Dialect::Sqlite.begin_write()).await?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// A transaction that reads, or writes only what it rolls back.
    pub(super) async fn read(pool: &Pool) -> Result<Tx, sqlx::Error> {
        Ok(match pool {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?),
            Pool::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    pub(super) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
    }

    pub(super) async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.rollback().await,
            Tx::Postgres(t) => t.rollback().await,
        }
    }

    pub(super) fn dialect(&self) -> Dialect {
        match self {
            Tx::Sqlite(_) => Dialect::Sqlite,
            Tx::Postgres(_) => Dialect::Postgres,
        }
    }
}

/// Runs `body` with `t` bound to the transaction inside `$tx` (a
/// `&mut Tx`), as `&mut sqlx::Transaction` of its backend: statements
/// execute on `&mut **t`. Expanded once per backend, as [`on!`].
macro_rules! on_tx {
    ($tx:expr, |$t:ident| $body:expr) => {
        match $tx {
            $crate::store::backend::Tx::Sqlite($t) => $body,
            $crate::store::backend::Tx::Postgres($t) => $body,
        }
    };
}

/// Runs `body` with `pool` bound to the SQLite or the PostgreSQL pool of
/// `$pool` (a [`Pool`]), and, in the second form, `d` to its [`Dialect`].
/// The body is expanded once per backend: helpers it calls must exist for
/// both (a macro, or a function generic enough).
macro_rules! on {
    ($pool:expr, |$p:ident| $body:expr) => {
        match $pool {
            $crate::store::backend::Pool::Sqlite($p) => $body,
            $crate::store::backend::Pool::Postgres($p) => $body,
        }
    };
    ($pool:expr, |$p:ident, $d:ident| $body:expr) => {
        match $pool {
            $crate::store::backend::Pool::Sqlite($p) => {
                #[allow(unused_variables)]
                let $d = $crate::store::backend::Dialect::Sqlite;
                $body
            }
            $crate::store::backend::Pool::Postgres($p) => {
                #[allow(unused_variables)]
                let $d = $crate::store::backend::Dialect::Postgres;
                $body
            }
        }
    };
}

pub(super) use {bind_args, on, on_tx};

/// A conversation turn waiting for the group commit (turns.rs), with its
/// endpoint (the handle that wrote it says) and who waits for it.
#[derive(Debug)]
pub(super) struct QueuedTurn {
    pub(super) turn: crate::domain::TurnRecord,
    pub(super) endpoint: Option<String>,
    pub(super) done: tokio::sync::oneshot::Sender<Result<(), sqlx::Error>>,
}

/// The queue of a store's turn writes, shared by its clones.
pub(super) type TurnQueue =
    std::sync::Arc<std::sync::OnceLock<tokio::sync::mpsc::UnboundedSender<QueuedTurn>>>;
