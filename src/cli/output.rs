//! Where a command's output goes: standard output, or a file written
//! through a temporary sibling and a rename so a failed write never leaves
//! a truncated file under the requested name.

use std::io::Write;
use std::path::Path;

use clap::ValueEnum;

use crate::{Error, Result};

/// A data command's output: a table for people, JSON for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DataFormat {
    Table,
    Json,
}

pub fn out() -> std::io::StdoutLock<'static> {
    std::io::stdout().lock()
}

/// Standard output for a table: fitted to the settings' width (tables
/// narrowed, long lines wrapped), as it is when there is none.
pub fn table_out(width: Option<u16>) -> crate::report::terminal::Fit<std::io::StdoutLock<'static>> {
    crate::report::terminal::set_width(width);
    crate::report::terminal::Fit::new(out())
}

/// [`emit`] of a table: to `--out` whole, to standard output fitted to `width`.
pub fn emit_table(
    width: Option<u16>,
    path: Option<&Path>,
    render: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    match path {
        Some(_) => {
            // A file keeps every value whole, whatever the terminal.
            crate::report::terminal::set_width(None);
            emit(path, render)
        }
        None => render(&mut table_out(width)),
    }
}

/// Writes a command's output to `--out` (through [`write_file`], then says
/// so on stderr) or to standard output.
pub fn emit(path: Option<&Path>, render: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    match path {
        Some(path) => {
            write_file(path, render)?;
            eprintln!("wrote {}", path.display());
            Ok(())
        }
        None => render(&mut out()),
    }
}

/// Writes to `path` through a temporary sibling and a rename.
pub fn write_file(path: &Path, write: impl FnOnce(&mut dyn Write) -> Result<()>) -> Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::usage(format!("--out {} is not a file name", path.display())))?;
    let tmp = path.with_file_name(format!(
        ".{}.partial-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let file = std::fs::File::create(&tmp)
        .map_err(|e| Error::usage_caused_by(format!("cannot write {}: {e}", path.display()), e))?;
    let mut w = std::io::BufWriter::new(file);
    let result = write(&mut w).and_then(|()| w.flush().map_err(Error::from));
    drop(w);
    match result.and_then(|()| std::fs::rename(&tmp, path).map_err(Error::from)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
