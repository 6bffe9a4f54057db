//! The words a run's status and a result's error kind are stored, printed
//! and serialised as: enums here, and this is the one place that maps them
//! to and from their strings. The store encodes them in its columns
//! (`store::kinds`); everything else names them by variant.

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
        /// The provider would not pass the prompt (or the reply) to or from
        /// the model: a moderation flag, a guardrail, a content filter.
        /// Not the model's behaviour: never retried, counted apart.
        Blocked = "blocked",
        /// The model itself refused explicitly, reported by the provider as
        /// an error (`error_type: refusal`): the model's behaviour, kept
        /// apart from blocks.
        Refused = "refused",
    }
}

impl ErrorKind {
    /// The provider blocked the test case or the model refused it through
    /// an error: an answer with nothing to judge, counted apart.
    pub fn is_block(self) -> bool {
        matches!(self, ErrorKind::Blocked | ErrorKind::Refused)
    }

    /// The model call or the judge failed: no verdict, a fault of the run
    /// that `--resume` retries.
    pub fn is_fault(self) -> bool {
        matches!(self, ErrorKind::Provider | ErrorKind::Judge)
    }

    /// Whether a result of this kind enters scoring: only a format failure
    /// does (a miss); faults and blocks have no judged reply.
    pub fn is_scored(self) -> bool {
        !self.is_fault() && !self.is_block()
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
        for k in [
            ErrorKind::Format,
            ErrorKind::Provider,
            ErrorKind::Judge,
            ErrorKind::Blocked,
            ErrorKind::Refused,
        ] {
            assert_eq!(k.as_str().parse::<ErrorKind>(), Ok(k));
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(serde_json::from_str::<ErrorKind>(&json).unwrap(), k);
        }
        assert!("Running".parse::<RunStatus>().is_err());
    }

    #[test]
    fn each_kind_is_scored_a_fault_or_a_block() {
        use ErrorKind::*;
        let scored: Vec<ErrorKind> = [Format, Provider, Judge, Blocked, Refused]
            .into_iter()
            .filter(|k| k.is_scored())
            .collect();
        assert_eq!(scored, [Format]);
        for k in [Provider, Judge] {
            assert!(k.is_fault() && !k.is_block(), "{k}");
        }
        for k in [Blocked, Refused] {
            assert!(k.is_block() && !k.is_fault(), "{k}");
        }
    }
}
