//! The stored words: a run's status and a result's error kind are enums
//! here, and this is the one place that maps them to and from the strings
//! the database, the JSON output and the pending file hold. Everything
//! else in the flow (the runner, the reports, the CLI) names them by
//! variant.

use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::sqlite::{Sqlite, SqliteArgumentsBuffer, SqliteTypeInfo, SqliteValueRef};

/// An enum stored (and serialised) as one lower-case word per variant.
macro_rules! stored_words {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $word:literal,)+ }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant,)+
        }

        impl $name {
            /// The word as stored.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $word,)+
                }
            }
        }

        impl std::str::FromStr for $name {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                match s {
                    $($word => Ok($name::$variant),)+
                    other => Err(format!(concat!("unknown ", stringify!($name), " {:?}"), other)),
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }

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
    };
}

stored_words! {
    /// Where a run stands (`evaluation_run.status`).
    RunStatus {
        Running = "running",
        Completed = "completed",
        /// Stopped before every test case was stored (a signal, a budget,
        /// a fatal error, or a process that went away).
        Interrupted = "interrupted",
        Failed = "failed",
    }
}

stored_words! {
    /// Why a result did not get a normal verdict (`result.error_kind`).
    ErrorKind {
        /// The reply did not have the required format.
        Format = "format",
        /// The model call failed.
        Provider = "provider",
        /// The judge could not give a verdict.
        Judge = "judge",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_round_trip_through_str_and_json() {
        for s in [
            RunStatus::Running,
            RunStatus::Completed,
            RunStatus::Interrupted,
            RunStatus::Failed,
        ] {
            assert_eq!(s.as_str().parse::<RunStatus>(), Ok(s));
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{s}\""));
        }
        for k in [ErrorKind::Format, ErrorKind::Provider, ErrorKind::Judge] {
            assert_eq!(k.as_str().parse::<ErrorKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), k);
        }
        assert!("Running".parse::<RunStatus>().is_err());
    }
}
