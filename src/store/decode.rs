//! Rows decoded into the domain's types by column name. The domain is a
//! leaf that knows no database crate, so it derives no `FromRow`: the
//! store implements it here for each domain type it reads, field by field,
//! for the rows of both backends (backend.rs).

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;

use crate::domain::{ErrorKind, RunStatus};

/// A Rust type read from a column of either backend.
pub(super) trait Column: Sized {
    fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error>;
    fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error>;
}

/// Types both drivers decode alike.
macro_rules! same_on_both {
    ($($t:ty),+) => {$(
        impl Column for $t {
            fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, name)
            }
            fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, name)
            }
        }
        impl Column for Option<$t> {
            fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, name)
            }
            fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
                sqlx::Row::try_get(row, name)
            }
        }
    )+};
}

same_on_both!(f64, String, RunStatus, ErrorKind);

/// An integer: PostgreSQL types a literal (`0 AS vote`) and a `CASE` of
/// literals as a 4-byte integer, SQLite has one integer type.
fn pg_int(row: &PgRow, name: &str) -> Result<Option<i64>, sqlx::Error> {
    use sqlx::{TypeInfo as _, ValueRef as _};
    let raw = sqlx::Row::try_get_raw(row, name)?;
    match raw.type_info().name() {
        "INT4" => Ok(sqlx::Row::try_get::<Option<i32>, _>(row, name)?.map(i64::from)),
        "INT2" => Ok(sqlx::Row::try_get::<Option<i16>, _>(row, name)?.map(i64::from)),
        "BOOL" => Ok(sqlx::Row::try_get::<Option<bool>, _>(row, name)?.map(i64::from)),
        _ => sqlx::Row::try_get(row, name),
    }
}

impl Column for Option<i64> {
    fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error> {
        sqlx::Row::try_get(row, name)
    }
    fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
        pg_int(row, name)
    }
}

impl Column for i64 {
    fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error> {
        sqlx::Row::try_get(row, name)
    }
    fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
        pg_int(row, name)?.ok_or_else(|| sqlx::Error::ColumnDecode {
            index: name.into(),
            source: "NULL in an integer column".into(),
        })
    }
}

/// A flag: both schemas store 0/1 integers (migrations/postgres keeps
/// SQLite's types); PostgreSQL's own booleans (`EXISTS`, a comparison)
/// are read as they are.
fn pg_flag(row: &PgRow, name: &str) -> Result<Option<bool>, sqlx::Error> {
    use sqlx::{TypeInfo as _, ValueRef as _};
    let raw = sqlx::Row::try_get_raw(row, name)?;
    if raw.type_info().name() == "BOOL" {
        sqlx::Row::try_get(row, name)
    } else {
        Ok(pg_int(row, name)?.map(|v| v != 0))
    }
}

impl Column for Option<bool> {
    fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error> {
        sqlx::Row::try_get(row, name)
    }
    fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
        pg_flag(row, name)
    }
}

impl Column for bool {
    fn from_sqlite(row: &SqliteRow, name: &str) -> Result<Self, sqlx::Error> {
        sqlx::Row::try_get(row, name)
    }
    fn from_pg(row: &PgRow, name: &str) -> Result<Self, sqlx::Error> {
        pg_flag(row, name)?.ok_or_else(|| sqlx::Error::ColumnDecode {
            index: name.into(),
            source: "NULL in a flag column".into(),
        })
    }
}

/// A row of either backend, read by column name.
pub(super) trait Row: sqlx::Row {
    fn col<T: Column>(&self, name: &str) -> Result<T, sqlx::Error>;

    /// [`Row::col`] of a column the statement selects, whose type is the
    /// schema's: a failure is this program's bug (as sqlx's `get`).
    fn val<T: Column>(&self, name: &str) -> T {
        self.col(name)
            .unwrap_or_else(|e| panic!("column {name} of a store statement: {e}"))
    }
}

impl Row for SqliteRow {
    fn col<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        T::from_sqlite(self, name)
    }
}

impl Row for PgRow {
    fn col<T: Column>(&self, name: &str) -> Result<T, sqlx::Error> {
        T::from_pg(self, name)
    }
}

/// `impl sqlx::FromRow` for a domain struct: each named field read from the
/// column of the same name; with a last `..expr`, the fields no column
/// carries taken from `expr` (as in a struct update).
macro_rules! from_columns {
    ($ty:ty { $($field:ident),+ $(, ..$rest:expr)? $(,)? }) => {
        impl<R: $crate::store::decode::Row> sqlx::FromRow<'_, R> for $ty {
            fn from_row(row: &R) -> Result<Self, sqlx::Error> {
                Ok(Self {
                    $($field: row.col(stringify!($field))?,)+
                    $(..$rest)?
                })
            }
        }
    };
}

pub(super) use from_columns;
