//! A problem in the benchmark content, naming the file and, where known,
//! the line; and all the problems of one load, printed together.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in the benchmark content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContentError {
    pub path: PathBuf,
    pub line: Option<usize>,
    /// The consolidated-file section, e.g. `# C2`.
    pub section: Option<String>,
    pub message: String,
}

impl ContentError {
    pub fn new(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        ContentError {
            path: path.as_ref().to_path_buf(),
            line: None,
            section: None,
            message: message.into(),
        }
    }

    pub fn at(mut self, line: usize) -> Self {
        self.line = Some(line);
        self
    }

    pub fn in_section(mut self, section: impl Into<String>) -> Self {
        self.section = Some(section.into());
        self
    }
}

impl fmt::Display for ContentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        if let Some(section) = &self.section {
            write!(f, " [{section}]")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// All content problems of one load.
#[derive(Debug, Clone, Default, thiserror::Error)]
pub struct ContentErrors(pub Vec<ContentError>);

impl fmt::Display for ContentErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} content error(s) in the benchmark:", self.0.len())?;
        for e in &self.0 {
            writeln!(f, "  {e}")?;
        }
        Ok(())
    }
}
