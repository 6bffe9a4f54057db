//! The width of the terminal a table goes to. Tables are fitted to it with
//! comfy-table's dynamic arrangement, a row cut (with `...`) rather than
//! wrapped onto a second line, and prose lines longer than it are wrapped
//! at word boundaries. Without a width (standard output is not a terminal
//! and neither `--width` nor `COLUMNS` was given) nothing is fitted: the
//! output of a pipe keeps every value whole, one row a line.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU16, Ordering};

use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};

/// The width tables and prose are fitted to; 0 when there is none. Set
/// once per process by the command line's edge, before anything is drawn.
static WIDTH: AtomicU16 = AtomicU16::new(0);

/// Narrower than this, a table of a dozen columns has no room for a
/// character per cell; the width asked for is raised to it.
pub const MIN_WIDTH: u16 = 40;

/// Fits what follows to `width` columns (`None`: nothing is fitted).
pub fn set_width(width: Option<u16>) {
    WIDTH.store(width.map_or(0, |w| w.max(MIN_WIDTH)), Ordering::Relaxed);
}

/// The width output is fitted to, if any.
pub fn width() -> Option<u16> {
    Some(WIDTH.load(Ordering::Relaxed)).filter(|&w| w > 0)
}

/// A table in the style of every terminal table here, fitted to [`width`].
pub fn table<I, S>(header: I) -> Table
where
    I: IntoIterator<Item = S>,
    S: Into<comfy_table::Cell>,
{
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED);
    // The decision is ours (from the width), not comfy-table's own look at
    // whether standard output is a terminal.
    t.force_no_tty();
    if let Some(w) = width() {
        t.set_content_arrangement(ContentArrangement::Dynamic);
        t.set_width(w);
    }
    t.set_header(header);
    t
}

/// `t` with every data row kept to one line: a value wider than its column
/// is cut with `...` instead of wrapping the row (the header may wrap).
pub fn fitted(mut t: Table) -> Table {
    if width().is_some() {
        for r in t.row_iter_mut() {
            r.max_height(1);
        }
    }
    t
}

/// A writer that wraps each line longer than [`width`] at word boundaries
/// (continuations indented by two spaces); lines that fit pass untouched.
pub struct Fit<W: Write> {
    inner: W,
    width: Option<usize>,
    line: Vec<u8>,
}

impl<W: Write> Fit<W> {
    pub fn new(inner: W) -> Self {
        Fit {
            inner,
            width: width().map(usize::from),
            line: Vec::new(),
        }
    }

    fn emit_line(&mut self, newline: bool) -> io::Result<()> {
        let text = String::from_utf8_lossy(&self.line);
        match self.width {
            Some(w) if textwrap::core::display_width(&text) > w => {
                let opts = textwrap::Options::new(w).subsequent_indent("  ");
                let wrapped = textwrap::wrap(&text, &opts);
                for (i, l) in wrapped.iter().enumerate() {
                    if i > 0 {
                        self.inner.write_all(b"\n")?;
                    }
                    self.inner.write_all(l.as_bytes())?;
                }
            }
            _ => self.inner.write_all(&self.line)?,
        }
        if newline {
            self.inner.write_all(b"\n")?;
        }
        self.line.clear();
        Ok(())
    }
}

impl<W: Write> Write for Fit<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.width.is_none() {
            return self.inner.write(buf);
        }
        for part in buf.split_inclusive(|&b| b == b'\n') {
            match part.strip_suffix(b"\n") {
                Some(line) => {
                    self.line.extend_from_slice(line);
                    self.emit_line(true)?;
                }
                None => self.line.extend_from_slice(part),
            }
        }
        Ok(buf.len())
    }

    /// Writes out a line still waiting for its newline, then flushes.
    fn flush(&mut self) -> io::Result<()> {
        if !self.line.is_empty() {
            self.emit_line(false)?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for Fit<W> {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fit(width: usize, text: &str) -> String {
        let mut out = Vec::new();
        let mut f = Fit {
            inner: &mut out,
            width: Some(width),
            line: Vec::new(),
        };
        f.write_all(text.as_bytes()).unwrap();
        f.flush().unwrap();
        drop(f);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn long_lines_wrap_and_short_ones_pass() {
        let out = fit(20, "short\none two three four five six seven\nend");
        assert_eq!(out, "short\none two three four\n  five six seven\nend");
        assert!(out.lines().all(|l| l.chars().count() <= 20));
    }
}
