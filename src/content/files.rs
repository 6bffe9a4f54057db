//! Reading content files: size-capped, UTF-8 checked, a lone carriage
//! return refused with its line; finding a scenario's files by stem
//! whatever readability suffix they carry; naming them in errors.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::error::ContentError;
use super::markdown;
use crate::benchmark::codes::strip_suffix;

/// Largest content file read; anything bigger is an authoring accident.
pub const MAX_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// Reads a text file: size-capped, UTF-8 checked, errors naming the line.
pub fn read_text(path: &Path, errors: &mut Vec<ContentError>) -> Option<String> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            errors.push(ContentError::new(path, format!("cannot read file: {e}")));
            return None;
        }
    };
    if meta.len() > MAX_FILE_BYTES {
        errors.push(ContentError::new(
            path,
            format!(
                "file is {:.1} MB (expected at most {} MB of text)",
                meta.len() as f64 / 1e6,
                MAX_FILE_BYTES / 1024 / 1024
            ),
        ));
        return None;
    }
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            errors.push(ContentError::new(path, format!("cannot read file: {e}")));
            return None;
        }
    };
    match String::from_utf8(bytes) {
        Ok(s) => {
            if let Some(line) = markdown::lone_cr_line(&s) {
                errors.push(
                    ContentError::new(
                        path,
                        "line ends with a lone carriage return (classic Mac line endings; expected LF or CRLF)",
                    )
                    .at(line),
                );
                return None;
            }
            Some(s)
        }
        Err(e) => {
            let at = e.utf8_error().valid_up_to();
            let bytes = e.as_bytes();
            let line = bytes[..at].iter().filter(|&&b| b == b'\n').count() + 1;
            errors.push(
                ContentError::new(
                    path,
                    format!("not valid UTF-8 at byte {at} (expected UTF-8 text)"),
                )
                .at(line),
            );
            None
        }
    }
}

pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "mapping",
    }
}

/// Finds `S1.md` / `S1--suffix.md` (or `MCSQE.md`) and the matching `.json`.
pub fn find_file(dir: &Path, stem: &str, ext: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter(|p| {
            p.extension().and_then(|e| e.to_str()) == Some(ext)
                && p.file_stem()
                    .and_then(|s| s.to_str())
                    .is_some_and(|s| strip_suffix(s) == stem)
        })
        .collect();
    out.sort();
    out
}

/// `S1.json, MCSQE.json`: the files an error about several files names.
pub fn file_names<'a>(paths: impl IntoIterator<Item = &'a PathBuf>) -> String {
    let names: Vec<String> = paths.into_iter().map(|p| file_name(p)).collect();
    names.join(", ")
}

pub fn file_name(p: &Path) -> String {
    p.file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
}
