//! `review`: human review of the judge (issue 20). `review export` writes a
//! labelling sheet of a run's judged items (all, or a seeded, optionally
//! stratified sample); `review import` checks a filled sheet row by row and
//! stores one rater's labels in one transaction, or refuses the whole sheet
//! (exit 2) naming each bad row. `report` then shows the judge calibration.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};

use super::output::{out, write_file};
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::review::{self, Stratify};
use crate::store::Store;
use crate::{Error, Result};

#[derive(Debug, Args)]
pub struct ReviewArgs {
    #[command(subcommand)]
    pub command: ReviewCommand,
}

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Write a labelling sheet of a run's judged items for human raters.
    Export(ReviewExportArgs),
    /// Store one rater's labels from a filled sheet (all or nothing).
    Import(ReviewImportArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SheetFormat {
    /// A spreadsheet-friendly CSV (one row per test case and criterion).
    Csv,
    /// One JSON object per line.
    Jsonl,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StratifyBy {
    /// Keep every judge verdict of every criterion represented.
    Verdict,
    /// Keep every behaviour represented.
    Behaviour,
}

#[derive(Debug, Args)]
pub struct ReviewExportArgs {
    /// The run whose judged items to label.
    #[arg(long, value_name = "ID")]
    pub run_id: i64,
    /// Only these criteria (CR1, CR2, criteria...), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "CR1,CR2")]
    pub criteria: Vec<String>,
    /// A random sample of this many items (default: all).
    #[arg(long, value_name = "K")]
    pub sample: Option<usize>,
    /// Keep every verdict (or behaviour) represented in the sample.
    #[arg(long, value_enum, requires = "sample")]
    pub stratify: Option<StratifyBy>,
    /// The sample's seed: the same seed gives the same sheet.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Add the judge's verdict (it anchors raters: leave it out for calibration).
    #[arg(long)]
    pub show_judge: bool,
    #[arg(long, value_enum, default_value_t = SheetFormat::Csv)]
    pub format: SheetFormat,
    /// Start the CSV with a UTF-8 byte order mark (for spreadsheets that need it).
    #[arg(long)]
    pub bom: bool,
    /// Write to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ReviewImportArgs {
    /// The filled sheet (CSV, or JSONL when it ends in .jsonl).
    pub sheet: PathBuf,
    /// Who labelled it; importing the same rater's sheet again replaces their labels.
    #[arg(long)]
    pub rater: String,
    /// Refuse the sheet unless it belongs to this run.
    #[arg(long, value_name = "ID")]
    pub run_id: Option<i64>,
    /// The sheet's format (default: from its extension).
    #[arg(long, value_enum)]
    pub format: Option<SheetFormat>,
}

pub fn run(s: &Settings, args: &ReviewArgs) -> Result<ExitStatus> {
    match &args.command {
        ReviewCommand::Export(a) => export(s, a),
        ReviewCommand::Import(a) => import(s, a),
    }
}

/// The benchmark folder's rubrics; the run's scenarios must be there.
fn benchmark(s: &Settings) -> Result<crate::benchmark::Benchmark> {
    if !s.benchmark_dir.is_dir() {
        return Err(Error::usage(format!(
            "benchmark folder {} not found: the sheet needs the rubrics (pass --benchmark-dir)",
            s.benchmark_dir.display()
        )));
    }
    let (b, _errors) = crate::content::load(&s.benchmark_dir);
    Ok(b)
}

fn export(s: &Settings, args: &ReviewExportArgs) -> Result<ExitStatus> {
    let url = s.existing_database()?;
    let mut benchmark = benchmark(s)?;
    let (run, items) = runtime()?.block_on(async {
        let store = Store::open_read_only(url).await?;
        let run = store.run(args.run_id).await?;
        let items = store.review_items(args.run_id).await?;
        Ok::<_, Error>((run, items))
    })?;
    remake_variants(&mut benchmark, &run.settings)?;
    if items.is_empty() {
        return Err(Error::usage(format!(
            "run {} has no judged criteria to label (only sqe and mcsqe scenarios are judged)",
            args.run_id
        )));
    }
    if run.benchmark_hash != benchmark.content_hash {
        eprintln!(
            "note: run {} used another version of the benchmark; the sheet shows the rubrics of {}",
            args.run_id,
            s.benchmark_dir.display()
        );
    }
    let known: std::collections::BTreeSet<&str> =
        items.iter().map(|i| i.criterion.as_str()).collect();
    if let Some(bad) = args.criteria.iter().find(|c| !known.contains(c.trim())) {
        return Err(Error::usage(format!(
            "--criteria {bad:?}: run {} has no such judged criterion (it has {})",
            args.run_id,
            known.into_iter().collect::<Vec<_>>().join(", ")
        )));
    }
    let criteria: Vec<String> = args.criteria.iter().map(|c| c.trim().to_string()).collect();
    let stratify = match args.stratify {
        None => Stratify::None,
        Some(StratifyBy::Verdict) => Stratify::Verdict,
        Some(StratifyBy::Behaviour) => Stratify::Behaviour,
    };
    let mut chosen = review::select(items, &criteria, args.sample, stratify, args.seed);
    runtime()?.block_on(async {
        let store = Store::open_read_only(url).await?;
        in_conversation(&store, args.run_id, &mut chosen).await
    })?;
    let rows = review::rows(&benchmark, run.run_id, &run.model, &chosen, args.show_judge)?;
    let write = |o: &mut dyn Write| -> Result<()> {
        match args.format {
            SheetFormat::Csv => review::write_csv(o, &rows, args.bom)?,
            SheetFormat::Jsonl => review::write_jsonl(o, &rows)?,
        }
        Ok(())
    };
    match &args.out {
        Some(path) => {
            write_file(path, write)?;
            eprintln!("wrote {} item(s) to {}", rows.len(), path.display());
        }
        None => write(&mut out())?,
    }
    Ok(ExitStatus::Success)
}

/// The variants the run made (issue 43), made again from its recorded
/// seed, so a varied item's rubric reads as its judge read it (a `names`
/// or `pronouns` variant's swaps applied) and the content hash compares
/// like the run's. Nothing for a run without variants.
fn remake_variants(b: &mut crate::benchmark::Benchmark, settings: &str) -> Result<()> {
    let Ok(st) = serde_json::from_str::<crate::run::RunSettings>(settings) else {
        return Ok(());
    };
    if st.variant_seed.is_none() {
        return Ok(());
    }
    let mut sel = crate::run::Selection {
        selectors: super::selection::parse_selectors(&st.selectors)?,
        include_no_context: st.include_no_context,
        limit: st.limit,
        variants: st.variants,
        variant_seed: st.variant_seed,
        ..crate::run::Selection::everything()
    };
    super::selection::make_variants(b, &mut sel, true)
}

/// A conversation's judged replies (issue 42) are labelled each with the
/// conversation before it, as its judge read it: the sheet shows that
/// turn's input and reply, not message 1's prompt and the last reply.
async fn in_conversation(
    store: &Store,
    run_id: i64,
    items: &mut [crate::domain::ReviewItem],
) -> Result<()> {
    use crate::judging::judge::{conversation_text, criterion_turn};
    let mut turns: std::collections::HashMap<(String, i64), Vec<crate::domain::TurnRecord>> =
        std::collections::HashMap::new();
    for it in items.iter_mut() {
        let key = (it.test_code.clone(), it.repeat_index);
        if !turns.contains_key(&key) {
            let t = store
                .turns_of(run_id, &it.test_code, it.repeat_index)
                .await?;
            turns.insert(key.clone(), t);
        }
        let of = &turns[&key];
        let want = criterion_turn(&it.criterion);
        let Some(pos) = of.iter().position(|t| t.turn_code.as_deref() == want) else {
            continue;
        };
        let t = &of[pos];
        if pos > 0 {
            let mut history: Vec<(&str, &str)> = Vec::with_capacity(2 * pos + 1);
            for e in &of[..pos] {
                history.push(("user", &e.user_message));
                history.push(("assistant", e.response.as_deref().unwrap_or_default()));
            }
            history.push(("user", &t.user_message));
            it.prompt = conversation_text(&history);
        }
        it.response = t.response.clone();
        // A structured reply's text is its `response` field, as judged.
        it.parsed = t
            .response
            .as_deref()
            .and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
            .filter(serde_json::Value::is_object)
            .map(|v| v.to_string());
    }
    Ok(())
}

fn import(s: &Settings, args: &ReviewImportArgs) -> Result<ExitStatus> {
    let rater = args.rater.trim();
    if rater.is_empty() {
        return Err(Error::usage(
            "--rater is empty (expected a name such as dr-lee)".into(),
        ));
    }
    // Labels are written: the database must exist, and is migrated if older.
    s.existing_database()?;
    let url = s.database_url.clone();
    let file = args.sheet.display().to_string();
    let bytes = std::fs::read(&args.sheet)
        .map_err(|e| Error::usage_caused_by(format!("cannot read {file}: {e}"), e))?;
    let jsonl = match args.format {
        Some(f) => f == SheetFormat::Jsonl,
        None => args
            .sheet
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("jsonl")),
    };
    let rows = review::read(&file, &bytes, jsonl)?;
    let Some(sheet_run) = review::sheet_run_id(&rows) else {
        return Err(Error::usage(format!(
            "{file} refused, nothing stored:\nrow 2: no run id (an empty sheet, or not one `review export` wrote)"
        )));
    };
    let run_id = args.run_id.unwrap_or(sheet_run);
    let benchmark = benchmark(s)?;
    let (checked, done) = runtime()?.block_on(async {
        let store = Store::open(&url).await?;
        let run = store.run(run_id).await?;
        let items = store.review_items(run_id).await?;
        let checked = review::check(&file, &rows, run_id, &run.model, &items, &benchmark)?;
        let done = store.import_labels(run_id, rater, &checked.labels).await?;
        store.close().await;
        Ok::<_, Error>((checked, done))
    })?;
    eprintln!(
        "stored {} label(s) of rater {rater} for run {} ({} replaced earlier labels of {rater}; {} blank verdict(s) skipped)",
        done.stored, checked.run_id, done.replaced, checked.blank
    );
    Ok(ExitStatus::Success)
}
