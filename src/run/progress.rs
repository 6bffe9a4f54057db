//! A batch's progress on stderr: on a terminal, one block that redraws in
//! place (indicatif's `MultiProgress`), a line per model (done/total,
//! errors, blocked, spend, rate, ETA) and a total line, each cut to the
//! terminal's width so that no line wraps (a wrapped line breaks the
//! redraw into a scroll); off a terminal, the same lines printed plainly
//! every so often, for a log; with `-q`, nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::domain::NewResult;

/// How a batch shows its progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// Nothing (`-q`, or a run that is not a batch).
    Off,
    /// A block redrawn in place, its lines at most `width - 1` columns.
    Drawn { width: u16 },
    /// Plain lines on stderr every `every` (stderr is not a terminal).
    Plain { every: Duration },
}

/// A model's line redraws at most this often (indicatif draws at most 20
/// times a second anyway; this spares formatting a line per reply).
const REDRAW: Duration = Duration::from_millis(100);

/// The progress of the batch: its mode, the block and every model's line.
#[derive(Debug)]
pub struct Progress {
    pub mode: ProgressMode,
    multi: MultiProgress,
    total: ProgressBar,
    models: Mutex<Vec<Arc<ModelProgress>>>,
    started: Instant,
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new(ProgressMode::Off)
    }
}

impl Progress {
    pub fn new(mode: ProgressMode) -> Self {
        let multi = match mode {
            ProgressMode::Drawn { .. } => {
                MultiProgress::with_draw_target(ProgressDrawTarget::stderr())
            }
            _ => MultiProgress::with_draw_target(ProgressDrawTarget::hidden()),
        };
        let total = line_bar();
        let total = match mode {
            ProgressMode::Drawn { .. } => multi.add(total),
            _ => total,
        };
        Progress {
            mode,
            multi,
            total,
            models: Mutex::default(),
            started: Instant::now(),
        }
    }

    fn width(&self) -> usize {
        match self.mode {
            ProgressMode::Drawn { width } => usize::from(width).saturating_sub(1).max(20),
            _ => 200,
        }
    }

    /// A line for run `run_id` of `model`, `planned` test cases of which
    /// `already_done` were stored by an earlier process.
    pub(super) fn add(
        &self,
        run_id: i64,
        model: &str,
        planned: usize,
        already_done: usize,
    ) -> Arc<ModelProgress> {
        let bar = match self.mode {
            ProgressMode::Drawn { .. } => self.multi.insert_before(&self.total, line_bar()),
            _ => ProgressBar::hidden(),
        };
        let m = Arc::new(ModelProgress {
            label: format!("{run_id} {model}"),
            planned: planned as u64,
            start_done: already_done as u64,
            done: AtomicU64::new(already_done as u64),
            errors: AtomicU64::new(0),
            blocked: AtomicU64::new(0),
            spend_nano: AtomicU64::new(0),
            last_drawn: Mutex::new(None),
            started: Instant::now(),
            bar,
            width: self.width(),
        });
        self.models
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(m.clone());
        m.redraw(true);
        self.redraw_total(true);
        m
    }

    fn models(&self) -> Vec<Arc<ModelProgress>> {
        self.models
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The total line over every model: `spend` is the batch's.
    fn total_line(&self, spend: f64) -> String {
        let models = self.models();
        let sum = |f: fn(&ModelProgress) -> u64| models.iter().map(|m| f(m)).sum::<u64>();
        let counts = Counts {
            done: sum(|m| m.done.load(Ordering::Relaxed)),
            planned: sum(|m| m.planned),
            start_done: sum(|m| m.start_done),
            errors: sum(|m| m.errors.load(Ordering::Relaxed)),
            blocked: sum(|m| m.blocked.load(Ordering::Relaxed)),
            spend,
            elapsed: self.started.elapsed(),
        };
        let n = models.len();
        let label = format!("total ({n} model{})", if n == 1 { "" } else { "s" });
        counts.line(&label, self.width())
    }

    /// Redraws the total line (not more often than [`REDRAW`] unless `now`).
    pub(super) fn redraw_total(&self, now: bool) {
        if self.total.is_hidden() {
            return;
        }
        let spend = self.models().iter().map(|m| m.spend()).sum::<f64>();
        if now || self.total.elapsed() >= REDRAW {
            self.total.set_message(self.total_line(spend));
            self.total.reset_elapsed();
        }
    }

    /// Every model's line and the total, for a plain (not redrawn) report.
    pub fn plain_lines(&self) -> Vec<String> {
        let models = self.models();
        let mut out: Vec<String> = models.iter().map(|m| m.line()).collect();
        if models.len() > 1 {
            out.push(self.total_line(models.iter().map(|m| m.spend()).sum()));
        }
        out
    }

    /// Leaves the block on the screen with every model's final totals.
    pub fn finish(&self) {
        if self.total.is_hidden() {
            return;
        }
        self.redraw_total(true);
        self.total.finish();
    }
}

/// A bar that shows only its message (the whole line, fitted by us).
fn line_bar() -> ProgressBar {
    let b = ProgressBar::new(0);
    b.set_style(
        ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    b
}

/// One model's line.
#[derive(Debug)]
pub struct ModelProgress {
    label: String,
    planned: u64,
    start_done: u64,
    done: AtomicU64,
    /// Test cases without a reply (provider) or without a verdict (judge).
    errors: AtomicU64,
    /// Test cases the provider blocked or the model refused through an error.
    blocked: AtomicU64,
    spend_nano: AtomicU64,
    last_drawn: Mutex<Option<Instant>>,
    started: Instant,
    bar: ProgressBar,
    width: usize,
}

impl ModelProgress {
    /// Counts a stored result; `spend` is what the run has spent so far.
    pub(super) fn record(&self, r: &NewResult, spend: f64) {
        self.done.fetch_add(1, Ordering::Relaxed);
        match r.error_kind {
            Some(k) if k.is_fault() => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
            Some(k) if k.is_block() => {
                self.blocked.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
        self.set_spend(spend);
    }

    pub(super) fn set_spend(&self, spend: f64) {
        self.spend_nano
            .store((spend.max(0.0) * 1e9).round() as u64, Ordering::Relaxed);
    }

    fn spend(&self) -> f64 {
        self.spend_nano.load(Ordering::Relaxed) as f64 / 1e9
    }

    fn line(&self) -> String {
        Counts {
            done: self.done.load(Ordering::Relaxed),
            planned: self.planned,
            start_done: self.start_done,
            errors: self.errors.load(Ordering::Relaxed),
            blocked: self.blocked.load(Ordering::Relaxed),
            spend: self.spend(),
            elapsed: self.started.elapsed(),
        }
        .line(&self.label, self.width)
    }

    /// Redraws this line (not more often than [`REDRAW`] unless `now`).
    pub(super) fn redraw(&self, now: bool) {
        if self.bar.is_hidden() {
            return;
        }
        let mut last = self.last_drawn.lock().unwrap_or_else(|e| e.into_inner());
        if now || last.is_none_or(|t| t.elapsed() >= REDRAW) {
            *last = Some(Instant::now());
            drop(last);
            self.bar.set_message(self.line());
        }
    }

    /// The run is over: its line stays, with its final counts.
    pub(super) fn finish(&self) {
        self.redraw(true);
        self.bar.finish();
    }
}

/// What a line shows.
struct Counts {
    done: u64,
    planned: u64,
    start_done: u64,
    errors: u64,
    blocked: u64,
    spend: f64,
    elapsed: Duration,
}

impl Counts {
    /// `label  12/288 err 0 blk 1 $0.0123 4.1/s eta 1m10s`, the label cut
    /// (with `…`) so that the line holds in `width` columns.
    fn line(&self, label: &str, width: usize) -> String {
        let secs = self.elapsed.as_secs_f64();
        let rate = if secs > 0.0 {
            self.done.saturating_sub(self.start_done) as f64 / secs
        } else {
            0.0
        };
        let left = self.planned.saturating_sub(self.done);
        let eta = if left == 0 {
            "done".to_string()
        } else if rate > 0.0 {
            format!("eta {}", duration(left as f64 / rate))
        } else {
            "eta ?".to_string()
        };
        let rest = format!(
            " {}/{} err {} blk {} ${:.4} {:.1}/s {eta}",
            self.done, self.planned, self.errors, self.blocked, self.spend, rate
        );
        let room = width.saturating_sub(rest.chars().count()).max(1);
        let mut line = cut(label, room);
        line.push_str(&rest);
        cut(&line, width)
    }
}

/// `text` in at most `width` characters, cut with `…`.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let mut s: String = text.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// `45s`, `3m05s`, `2h07m`.
fn duration(secs: f64) -> String {
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_holds_in_its_width_whatever_the_label() {
        let c = Counts {
            done: 12,
            planned: 288,
            start_done: 0,
            errors: 1,
            blocked: 2,
            spend: 0.0123,
            elapsed: Duration::from_secs(4),
        };
        let line = c.line("7 anthropic/claude-3.5-sonnet-20241022:beta", 60);
        assert!(line.chars().count() <= 60, "{line}");
        assert!(
            line.ends_with(" 12/288 err 1 blk 2 $0.0123 3.0/s eta 1m32s"),
            "{line}"
        );
        assert!(line.starts_with("7 anthropic/"), "{line}");
        assert_eq!(duration(7300.0), "2h01m");
    }
}
