//! Rows decoded into the domain's types by column name. The domain is a
//! leaf that knows no database crate, so it derives no `FromRow`: the
//! store implements it here for each domain type it reads, field by field.

/// `impl sqlx::FromRow` for a domain struct: each named field read from the
/// column of the same name; with a last `..expr`, the fields no column
/// carries taken from `expr` (as in a struct update).
macro_rules! from_columns {
    ($ty:ty { $($field:ident),+ $(, ..$rest:expr)? $(,)? }) => {
        impl sqlx::FromRow<'_, sqlx::sqlite::SqliteRow> for $ty {
            fn from_row(row: &sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
                use sqlx::Row as _;
                Ok(Self {
                    $($field: row.try_get(stringify!($field))?,)+
                    $(..$rest)?
                })
            }
        }
    };
}

pub(super) use from_columns;
