//! How the domain's stored words ([`RunStatus`], [`ErrorKind`]) are
//! encoded in the database's columns, on both backends: as their one word,
//! through `as_str` and `FromStr`, so the database holds what the JSON
//! output prints.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgTypeInfo, PgValueRef, Postgres};
use sqlx::sqlite::{Sqlite, SqliteArgumentsBuffer, SqliteTypeInfo, SqliteValueRef};

use crate::domain::{ErrorKind, RunStatus};

macro_rules! sql_word {
    ($($name:ident),+) => {$(
        impl sqlx::Type<Sqlite> for $name {
            fn type_info() -> SqliteTypeInfo {
                <&str as sqlx::Type<Sqlite>>::type_info()
            }
            fn compatible(ty: &SqliteTypeInfo) -> bool {
                <&str as sqlx::Type<Sqlite>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, Sqlite> for $name {
            fn encode_by_ref(&self, args: &mut SqliteArgumentsBuffer) -> Result<IsNull, BoxDynError> {
                <&str as sqlx::Encode<'_, Sqlite>>::encode_by_ref(&self.as_str(), args)
            }
        }

        impl<'r> sqlx::Decode<'r, Sqlite> for $name {
            fn decode(value: SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(<&str as sqlx::Decode<'r, Sqlite>>::decode(value)?.parse::<$name>()?)
            }
        }

        impl sqlx::Type<Postgres> for $name {
            fn type_info() -> PgTypeInfo {
                <&str as sqlx::Type<Postgres>>::type_info()
            }
            fn compatible(ty: &PgTypeInfo) -> bool {
                <&str as sqlx::Type<Postgres>>::compatible(ty)
            }
        }

        impl sqlx::Encode<'_, Postgres> for $name {
            fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
                <&str as sqlx::Encode<'_, Postgres>>::encode_by_ref(&self.as_str(), buf)
            }
        }

        impl<'r> sqlx::Decode<'r, Postgres> for $name {
            fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
                Ok(<&str as sqlx::Decode<'r, Postgres>>::decode(value)?.parse::<$name>()?)
            }
        }
    )+};
}

sql_word!(RunStatus, ErrorKind);
