//! The library's error type and [`ExitStatus`], the one place exit codes are
//! decided (SPEC §7): 0 success, 1 failure of the tool or provider, 2 bad
//! usage or bad content.

use crate::content::ContentErrors;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad flags or arguments the parser could not catch.
    #[error("{0}")]
    Usage(String),
    /// Problems in the benchmark files.
    #[error("{0}")]
    Content(ContentErrors),
    /// The provider refused or failed in a way that stops the work.
    #[error("{0}")]
    Provider(String),
    /// The database could not be opened, migrated, read or written.
    #[error("database: {0}")]
    Store(String),
    /// Any other failure of the tool (I/O, output).
    #[error("{0}")]
    Tool(String),
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
}

impl ExitStatus {
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Success => 0,
            ExitStatus::Failure => 1,
            ExitStatus::BadInput => 2,
        }
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
            Error::Usage(_) | Error::Content(_) => ExitStatus::BadInput,
            Error::Provider(_) | Error::Store(_) | Error::Tool(_) => ExitStatus::Failure,
            Error::BrokenPipe => ExitStatus::Success,
        }
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            return Error::BrokenPipe;
        }
        Error::Tool(e.to_string())
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        if e.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe) {
            return Error::BrokenPipe;
        }
        Error::Tool(e.to_string())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
