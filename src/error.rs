//! The library's error type and [`ExitStatus`], the one place exit codes are
//! decided (SPEC §7): 0 success, 1 failure of the tool or provider, 2 bad
//! usage or bad content, 130 a run quit by a second Ctrl-C.

use std::sync::Arc;

use crate::content::ContentErrors;
use crate::openrouter::catalog::CatalogError;
use crate::openrouter::{FailureClass, ProviderError};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad flags or arguments the parser could not catch (an unreadable
    /// file named by one, a bad setting), with its cause when there is one.
    #[error("{message}")]
    Usage {
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    /// Problems in the benchmark files.
    #[error("{0}")]
    Content(ContentErrors),
    /// The provider refused in a way that stops the work (a refused key).
    #[error("{0}")]
    Provider(#[source] Arc<ProviderError>),
    /// The database could not be opened, migrated, read or written.
    #[error("database: {0}")]
    Store(#[source] BoxError),
    /// Any other failure of the tool (I/O, output), with its cause when
    /// there is one.
    #[error("{message}")]
    Tool {
        message: String,
        #[source]
        source: Option<BoxError>,
    },
    /// The reader of our output went away (`helmbench prompts | head`):
    /// not a failure, just stop.
    #[error("broken pipe")]
    BrokenPipe,
}

/// How a command ended, as its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// 0: done.
    Success,
    /// 1: a failure of the tool or the provider, or work left undone (a run
    /// stopped, test cases unanswered).
    Failure,
    /// 2: bad usage or bad benchmark content.
    BadInput,
    /// 130 (128 + SIGINT, as shells report it): a run quit at once by a
    /// second Ctrl-C or SIGTERM.
    Interrupted,
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::BadInput => 2,
            ExitStatus::Interrupted => 130,
        }
    }

    /// Ends the process now with this status, without unwinding: for a
    /// quit that cannot wait for the command to return (nothing stored is
    /// lost: results are written in committed transactions).
    pub fn exit_now(self) -> ! {
        std::process::exit(i32::from(self.code()))
    }

    /// Success unless content errors were found (a dry-run, `list`, `prompts`).
    pub fn unless_content_errors(errors: usize) -> Self {
        if errors == 0 {
            ExitStatus::Success
        } else {
            ExitStatus::BadInput
        }
    }
}

impl Error {
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            Error::Usage { .. } | Error::Content(_) => ExitStatus::BadInput,
            Error::Provider(_) | Error::Store(_) | Error::Tool { .. } => ExitStatus::Failure,
            Error::BrokenPipe => ExitStatus::Success,
        }
    }
}

impl Error {
    /// Bad usage with no cause beyond its message.
    pub fn usage(message: String) -> Error {
        Error::Usage {
            message,
            source: None,
        }
    }

    /// Bad usage caused by `source` (a file the arguments name that cannot
    /// be read, a setting refused).
    pub fn usage_caused_by<E>(message: String, source: E) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Usage {
            message,
            source: Some(Box::new(source)),
        }
    }

    /// A failure of the tool with no cause beyond its message.
    pub fn tool(message: impl Into<String>) -> Error {
        Error::Tool {
            message: message.into(),
            source: None,
        }
    }

    /// A failure of the tool described by `message`, caused by `source`
    /// (kept for callers that look).
    pub fn tool_caused_by<E>(message: String, source: E) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        Error::Tool {
            message,
            source: Some(Box::new(source)),
        }
    }

    /// A failure of the tool caused by `source` (kept, for `-v` and for
    /// callers that look), or a quiet stop when the cause, at any depth,
    /// is a reader that went away (`helmbench export | head`).
    pub fn caused_by<E>(source: E) -> Error
    where
        E: std::error::Error + Send + Sync + 'static,
    {
        if is_broken_pipe(&source) {
            return Error::BrokenPipe;
        }
        Error::Tool {
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }
}

/// Whether `e` or any error in its source chain is a closed pipe.
pub fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::BrokenPipe
        {
            return true;
        }
        if let Some(json) = err.downcast_ref::<serde_json::Error>()
            && json.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe)
        {
            return true;
        }
        if let Some(csv) = err.downcast_ref::<csv::Error>()
            && let csv::ErrorKind::Io(io) = csv.kind()
            && io.kind() == std::io::ErrorKind::BrokenPipe
        {
            return true;
        }
        cur = err.source();
    }
    false
}

impl From<ProviderError> for Error {
    /// A bad client setting is bad usage (refused before anything is sent
    /// or written); any other provider failure is the provider's.
    fn from(e: ProviderError) -> Self {
        match e.class() {
            FailureClass::Config => Error::usage_caused_by(e.to_string(), e),
            _ => Error::Provider(Arc::new(e)),
        }
    }
}

impl From<CatalogError> for Error {
    /// A catalog client that cannot be set up (a bad base URL or key, no
    /// HTTP client) is bad usage, refused before anything is asked; a
    /// catalog that cannot be read is a failure of the tool.
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::Config(_) | CatalogError::Client(_) => {
                Error::usage_caused_by(e.to_string(), e)
            }
            _ => Error::caused_by(e),
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::caused_by(e)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        if e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe) {
            return Error::BrokenPipe;
        }
        Error::caused_by(e)
    }
}

impl From<csv::Error> for Error {
    fn from(e: csv::Error) -> Self {
        Error::caused_by(e)
    }
}

/// Any error with its causes, for [`Error`]'s sources.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::domain::{Block, BlockKind, ErrorKind};

    fn block(kind: BlockKind) -> ProviderError {
        ProviderError::Blocked {
            status: 403,
            block: Box::new(Block {
                kind,
                message: "no".into(),
                reasons: Vec::new(),
                flagged_input: None,
                provider: None,
                model_slug: None,
            }),
        }
    }

    #[test]
    fn each_provider_failure_has_one_class_and_exit_code() {
        let rejected = ProviderError::Rejected {
            status: 400,
            code: None,
            message: "bad".into(),
            meta: Default::default(),
        };
        let cases = [
            (
                ProviderError::Unauthorized {
                    message: "key".into(),
                },
                FailureClass::KeyRefused,
                1,
            ),
            (
                ProviderError::PaymentRequired {
                    limit: crate::openrouter::CreditLimit::Credits,
                    message: "spent".into(),
                },
                FailureClass::OutOfCredits,
                1,
            ),
            (
                ProviderError::NotSent("budget".into()),
                FailureClass::NotSent,
                1,
            ),
            (
                block(BlockKind::Moderation),
                FailureClass::Answered(ErrorKind::Blocked),
                1,
            ),
            (
                block(BlockKind::Refusal),
                FailureClass::Answered(ErrorKind::Refused),
                1,
            ),
            (rejected, FailureClass::Failed, 1),
            (
                ProviderError::Config("bad base URL".into()),
                FailureClass::Config,
                2,
            ),
            (
                ProviderError::WrongApi {
                    field: "provider".into(),
                    status: 400,
                    message: "Unrecognized request argument supplied: provider".into(),
                },
                FailureClass::WrongApi,
                1,
            ),
        ];
        for (e, class, code) in cases {
            assert_eq!(e.class(), class, "{e}");
            assert_eq!(
                e.is_fatal_for_run(),
                matches!(
                    class,
                    FailureClass::KeyRefused | FailureClass::OutOfCredits | FailureClass::WrongApi
                )
            );
            let message = e.to_string();
            let err = Error::from(e);
            // The message is unchanged and the provider's error kept as the cause.
            assert_eq!(err.to_string(), message);
            assert_eq!(err.exit_status().code(), code, "{message}");
            let source = err.source().expect("the cause is kept");
            let kept = source
                .downcast_ref::<Arc<ProviderError>>()
                .map(|a| &**a)
                .or_else(|| source.downcast_ref::<ProviderError>());
            assert_eq!(kept.map(ProviderError::class), Some(class), "{message}");
        }
    }

    /// Where a failure is found through another error, the message stays
    /// word for word what it was and the error that caused it is kept.
    #[test]
    fn errors_found_through_another_keep_their_words_and_their_cause() {
        use std::io;
        // Whether `e`'s causes, at any depth, hold an error of type `T`.
        fn caused_by<T: std::error::Error + 'static>(
            e: &(dyn std::error::Error + 'static),
        ) -> bool {
            let mut cur = e.source();
            while let Some(s) = cur {
                if s.is::<T>() {
                    return true;
                }
                cur = s.source();
            }
            false
        }
        let not_json = || serde_json::from_str::<serde_json::Value>("{").unwrap_err();

        // The provider's client: a local error, bad usage (2).
        let spool = io::Error::from(io::ErrorKind::PermissionDenied);
        let words = format!("invalid client configuration: cannot spool a batch: {spool}");
        let e = ProviderError::ConfigCaused {
            what: "cannot spool a batch",
            source: Box::new(spool),
        };
        assert_eq!(e.to_string(), words);
        assert_eq!((e.class(), e.kind()), (FailureClass::Config, "config"));
        let err = Error::from(e);
        assert_eq!((err.to_string(), err.exit_status().code()), (words, 2));
        assert!(caused_by::<io::Error>(&err));

        // The catalog: a client that cannot be built is bad usage (2), an
        // answer that is not JSON a failure (1).
        let builder = reqwest::Client::builder()
            .user_agent("bad\nagent")
            .build()
            .unwrap_err();
        let words = format!("invalid configuration: cannot build HTTP client: {builder}");
        let err = Error::from(CatalogError::Client(builder));
        assert_eq!((err.to_string(), err.exit_status().code()), (words, 2));
        assert!(caused_by::<reqwest::Error>(&err));
        let json = not_json();
        let words = format!("https://openrouter.ai/api/v1/models did not answer JSON: {json}");
        let e = CatalogError::NotJson {
            url: "https://openrouter.ai/api/v1/models".into(),
            source: json,
        };
        assert_eq!(e.to_string(), words);
        let err = Error::from(e);
        assert_eq!((err.to_string(), err.exit_status().code()), (words, 1));
        assert!(caused_by::<serde_json::Error>(&err));
        let err = Error::from(CatalogError::Config("no key".into()));
        assert_eq!(err.exit_status().code(), 2);

        // Stored content this version cannot read: a database failure (1).
        let json = not_json();
        let words = format!(
            "database: database content is inconsistent: a human label's verdict is not JSON: {json}"
        );
        let err = Error::from(crate::store::StoreError::Integrity {
            message: format!("a human label's verdict is not JSON: {json}"),
            source: Some(Box::new(json)),
        });
        assert_eq!((err.to_string(), err.exit_status().code()), (words, 1));
        assert!(caused_by::<serde_json::Error>(&err));

        // A failure of the tool with its own words and a cause (1).
        let json = not_json();
        let words = format!("run 3 has unreadable settings: {json}");
        let err = Error::tool_caused_by(words.clone(), json);
        assert_eq!((err.to_string(), err.exit_status().code()), (words, 1));
        assert!(caused_by::<serde_json::Error>(&err));
    }

    #[test]
    fn a_second_interrupt_exits_130_and_a_closed_pipe_0() {
        assert_eq!(ExitStatus::Interrupted.code(), 130);
        assert_eq!(Error::BrokenPipe.exit_status(), ExitStatus::Success);
        let usage = Error::usage_caused_by(
            "cannot read x".into(),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        );
        assert_eq!(usage.exit_status(), ExitStatus::BadInput);
        assert!(usage.source().is_some());
    }
}
