//! Parsing what the command line selects and bounds: selectors,
//! concurrency, budgets. Each value is checked here once; nothing
//! downstream re-checks it.

use clap::Args;

use crate::benchmark::Benchmark;
use crate::benchmark::cases::Selector;
use crate::run::Selection;
use crate::{Error, Result};

/// The flags that select a batch's test cases, shared by `run-batch` and
/// `estimate`.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Selection")]
pub struct SelectionArgs {
    /// Scenario codes, test codes or prefixes (P1, P1-B2, P1-B2-S1), comma-separated or repeated.
    #[arg(long = "scenario", num_args = 1.., value_name = "CODE")]
    pub scenarios: Vec<String>,
    /// Every scenario.
    #[arg(long, conflicts_with = "scenarios")]
    pub all_scenarios: bool,
    /// Leave out the test cases without a user context.
    #[arg(long)]
    pub skip_no_context: bool,
    /// At most this many test cases.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Each test case this many times (for consistency and intervals).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeats: u32,
    /// Budget in USD for the whole batch (every model together), from the
    /// provider-reported cost: every run stops cleanly once it is reached.
    /// With --resume: the new total budget of the resumed runs' batch, what
    /// every run of it spent counting (default: the one it was started with).
    #[arg(long, value_name = "USD", value_parser = parse_budget, help_heading = "Budget")]
    pub max_cost: Option<f64>,
    /// Also run each selected test case under these variants of the user's
    /// words (comma-separated, e.g. `lowercase,typos`), instead of the
    /// scenarios' own `variants:`; each variant is a test case of its own
    /// (`P1-B1-S1-C1-PT1~typos`) beside its original.
    #[arg(long, value_name = "A,B")]
    pub variants: Option<String>,
    /// The seed the variants draw from (recorded with the run) [default: 43].
    #[arg(long, value_name = "N")]
    pub variant_seed: Option<u64>,
}

impl SelectionArgs {
    /// The validated selection. With nothing selected, says what to pass:
    /// `alternatives` names the other ways in (`--resume` for run-batch).
    pub fn resolve(&self, alternatives: &str) -> Result<Selection> {
        if self.scenarios.is_empty() && !self.all_scenarios {
            return Err(Error::usage(format!(
                "nothing selected: pass --scenario CODE (a scenario, test code or prefix such as P1 or P1-B1-S1), --all-scenarios{alternatives}"
            )));
        }
        Ok(Selection {
            selectors: parse_selectors(&self.scenarios)?,
            include_no_context: !self.skip_no_context,
            limit: self.limit,
            repeats: self.repeats,
            max_cost: self.max_cost,
            variants: match &self.variants {
                Some(list) => {
                    crate::benchmark::variants::parse_names(list)
                        .map_err(|e| Error::usage(format!("--variants: {e}")))?;
                    Some(list.clone())
                }
                None => None,
            },
            variant_seed: self.variant_seed,
        })
    }
}

/// Makes the variants `selection` asks for of its test cases (issue 43;
/// [`vary::expand`](crate::benchmark::vary::expand)), says once on stderr
/// which variants changed nothing where (those are skipped), and records
/// the seed in `selection` when any variant applies (None otherwise, so a
/// run without variants records none).
pub fn make_variants(b: &mut Benchmark, selection: &mut Selection, quiet: bool) -> Result<()> {
    use crate::benchmark::{cases, variants, vary};
    let over = match &selection.variants {
        Some(list) => {
            let over = variants::parse_names(list)
                .map_err(|e| Error::usage(format!("--variants: {e}")))?;
            // Against this benchmark's lists, as `check` does the content's.
            for v in &over {
                v.check_against(&b.word_lists)
                    .map_err(|e| Error::usage(format!("--variants: {e}")))?;
            }
            Some(over)
        }
        None => None,
    };
    let mut selected = cases::select_indices(b, &selection.selectors, selection.include_no_context)
        .map_err(Error::usage)?;
    // Only what the plan runs (its limit counts originals) is varied and seeded.
    if let Some(limit) = selection.limit {
        selected.truncate(limit);
    }
    let seed = selection
        .variant_seed
        .unwrap_or(variants::DEFAULT_VARIANT_SEED);
    let counts = vary::expand(b, over.as_deref(), seed, &selected);
    selection.variant_seed = (!counts.is_empty()).then_some(seed);
    if !quiet && let Some(notice) = vary::skipped_notice(&counts) {
        eprintln!("{notice}");
    }
    Ok(())
}

/// `--concurrency`: 1 to [`crate::run::MAX_CONCURRENCY`], checked here once.
pub fn parse_concurrency(s: &str) -> std::result::Result<std::num::NonZeroUsize, String> {
    let max = crate::run::MAX_CONCURRENCY;
    s.trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=max).contains(n))
        .and_then(std::num::NonZeroUsize::new)
        .ok_or_else(|| format!("{s:?} is not a whole number from 1 to {max}"))
}

/// Selectors from the command line, comma-separated within an argument.
/// An empty or blank piece (`""`, `" "`, `","`, `"P1,"`) is a usage error:
/// dropping it could leave no selector at all, which means every test case.
pub fn parse_selectors(raw: &[String]) -> Result<Vec<Selector>> {
    raw.iter()
        .flat_map(|arg| arg.split(',').map(move |piece| (arg, piece)))
        .map(|(arg, piece)| {
            if piece.trim().is_empty() {
                return Err(Error::usage(format!(
                    "empty selector in {arg:?} (expected codes such as P1, P1-B2 or P1-B2-S1, comma-separated)"
                )));
            }
            Selector::parse(piece).map_err(Error::usage)
        })
        .collect()
}

/// A finite amount of USD above zero.
pub fn parse_budget(s: &str) -> std::result::Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of USD"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("{s:?} is not a finite amount of USD above 0"));
    }
    Ok(v)
}
