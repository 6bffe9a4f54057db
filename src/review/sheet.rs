//! Labelling sheets for human review (issue 20): which judged items a sheet
//! holds (all, or a seeded sample stratified by verdict or behaviour), how
//! the sheet is written (CSV that opens cleanly in a spreadsheet, or JSONL),
//! and how a filled sheet is read back and checked, row by row, against the
//! run and the rubrics before `review import` stores anything.
//!
//! Every row carries an `item` key, `i/n:hash`: its place among the sheet's
//! `n` items and a hash of the run, test code, repeat and criterion. A row
//! whose test code or criterion was edited no longer matches its hash, and a
//! truncated sheet misses items (or ends inside the last row's `item`).

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::benchmark::{Benchmark, ResponseType, Rubric, sha256_hex};
use crate::domain::{NewLabel, ReviewItem};

/// How a sample keeps every group represented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stratify {
    /// Plain random sample.
    None,
    /// Every judge verdict (per criterion) keeps at least one item.
    Verdict,
    /// Every behaviour keeps at least one item.
    Behaviour,
}

/// A verdict as one class: a single option as is, a list of options as its
/// sorted members joined by `+` (`(none)` when empty), a judge error as `error`.
pub fn verdict_class(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => {
            let mut s: Vec<String> = items
                .iter()
                .map(|i| i.as_str().map_or_else(|| i.to_string(), str::to_string))
                .collect();
            s.sort();
            if s.is_empty() {
                "(none)".into()
            } else {
                s.join("+")
            }
        }
        Some(other) => other.to_string(),
        None => "error".into(),
    }
}

/// The items of `items` a sheet holds: those of `criteria` (all when
/// empty), then `sample` of them drawn with `seed`, kept in stored order.
/// A stratified sample first gives every stratum one item (while there are
/// items to give), then shares the rest in proportion to stratum sizes.
pub fn select(
    items: Vec<ReviewItem>,
    criteria: &[String],
    sample: Option<usize>,
    stratify: Stratify,
    seed: u64,
) -> Vec<ReviewItem> {
    let items: Vec<ReviewItem> = items
        .into_iter()
        .filter(|i| criteria.is_empty() || criteria.contains(&i.criterion))
        .collect();
    let Some(k) = sample.filter(|&k| k < items.len()) else {
        return items;
    };
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let key = |i: &ReviewItem| match stratify {
        Stratify::None => String::new(),
        Stratify::Verdict => format!(
            "{}/{}:{}",
            i.scenario,
            i.criterion,
            verdict_class(i.judge_verdict.as_ref())
        ),
        Stratify::Behaviour => i.behaviour.clone(),
    };
    let mut strata: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (n, i) in items.iter().enumerate() {
        strata.entry(key(i)).or_default().push(n);
    }
    let mut groups: Vec<Vec<usize>> = strata.into_values().collect();
    for g in &mut groups {
        g.shuffle(&mut rng);
    }
    let take = allocate(
        &groups.iter().map(Vec::len).collect::<Vec<_>>(),
        k,
        &mut rng,
    );
    let mut chosen: Vec<usize> = groups
        .iter()
        .zip(take)
        .flat_map(|(g, t)| g[..t].to_vec())
        .collect();
    chosen.sort_unstable();
    let mut keep = vec![false; items.len()];
    for c in chosen {
        keep[c] = true;
    }
    items
        .into_iter()
        .zip(keep)
        .filter_map(|(i, k)| k.then_some(i))
        .collect()
}

/// How many of `k` items each stratum of `sizes` gives: one each first
/// (strata drawn at random when `k` is smaller than their number), then the
/// rest by largest remainder of the proportional share, within each size.
fn allocate(sizes: &[usize], k: usize, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let mut take = vec![0usize; sizes.len()];
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.shuffle(rng);
    let mut left = k;
    for &s in &order {
        if left == 0 {
            break;
        }
        if sizes[s] > 0 {
            take[s] = 1;
            left -= 1;
        }
    }
    while left > 0 {
        let room: Vec<usize> = sizes.iter().zip(&take).map(|(s, t)| s - t).collect();
        let total: usize = room.iter().sum();
        if total == 0 {
            break;
        }
        let shares: Vec<f64> = room
            .iter()
            .map(|&r| r as f64 * left as f64 / total as f64)
            .collect();
        let mut given = 0;
        for (i, s) in shares.iter().enumerate() {
            let whole = (s.floor() as usize).min(room[i]);
            take[i] += whole;
            given += whole;
        }
        let mut rest: Vec<usize> = (0..sizes.len()).filter(|&i| take[i] < sizes[i]).collect();
        // Largest remainder first; ties in the shuffled order.
        rest.sort_by(|&a, &b| {
            let fa = shares[a] - shares[a].floor();
            let fb = shares[b] - shares[b].floor();
            fb.total_cmp(&fa).then(
                order
                    .iter()
                    .position(|&o| o == a)
                    .cmp(&order.iter().position(|&o| o == b)),
            )
        });
        for i in rest.into_iter().take(left - given) {
            take[i] += 1;
            given += 1;
        }
        left -= given;
    }
    take
}

/// One row of a labelling sheet, as written and as read back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SheetRow {
    pub run_id: i64,
    pub model: String,
    pub test_code: String,
    pub repeat: i64,
    pub criterion: String,
    /// The rubric's options, ` | `-separated (several may be chosen, with
    /// `;`, for a multi-choice rubric).
    pub options: String,
    /// Filled by the rater.
    pub verdict: String,
    /// Filled by the rater (optional).
    pub note: String,
    /// The judge's verdict, only with `--show-judge`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judge_verdict: Option<String>,
    pub behaviour: String,
    /// The composed prompt the model and the judge saw.
    pub input: String,
    /// The reply the judge judged.
    pub reply: String,
    /// The rubric as its author wrote it.
    pub rubric: String,
    /// `i/n:hash` (see the module documentation); last, so a cut-off final row shows.
    pub item: String,
}

/// The key hash of one item.
fn item_hash(run_id: i64, test_code: &str, repeat: i64, criterion: &str) -> String {
    sha256_hex(&[
        run_id.to_string().as_bytes(),
        test_code.as_bytes(),
        repeat.to_string().as_bytes(),
        criterion.as_bytes(),
    ])[..10]
        .to_string()
}

/// Why a sheet cannot be written or read.
#[derive(Debug, thiserror::Error)]
pub enum SheetError {
    /// The run's content is not in the benchmark folder.
    #[error("{0}")]
    Content(String),
    /// Problems in the sheet, each naming its row.
    #[error("{} refused, nothing stored:\n{}", .file, .problems.join("\n"))]
    Rows { file: String, problems: Vec<String> },
    #[error("{0}")]
    Write(#[from] std::io::Error),
    #[error("{0}")]
    Csv(#[from] csv::Error),
}

impl From<SheetError> for crate::Error {
    fn from(e: SheetError) -> Self {
        match e {
            SheetError::Write(io) => crate::Error::from(io),
            SheetError::Csv(e) if crate::error::is_broken_pipe(&e) => crate::Error::BrokenPipe,
            other @ (SheetError::Content(_) | SheetError::Rows { .. } | SheetError::Csv(_)) => {
                crate::Error::usage_caused_by(other.to_string(), other)
            }
        }
    }
}

/// The rubric of an item in the benchmark folder.
fn rubric_of<'a>(
    benchmark: &'a Benchmark,
    scenario: &str,
    criterion: &str,
) -> Result<&'a Rubric, String> {
    let s = benchmark
        .scenario(scenario)
        .ok_or_else(|| format!("scenario {scenario} is not in the benchmark folder"))?;
    s.rubrics
        .iter()
        .find(|r| r.code == crate::judging::judge::rubric_code(criterion))
        .ok_or_else(|| {
            format!("scenario {scenario} has no rubric {criterion} in the benchmark folder")
        })
}

/// `body` as the judge of `it` read it: with the swaps of a `names` or
/// `pronouns` variant applied (issue 43), as written otherwise.
fn as_judged<'a>(benchmark: &Benchmark, it: &ReviewItem, body: &'a str) -> Cow<'a, str> {
    match benchmark
        .scenario(&it.scenario)
        .and_then(|s| s.varied.swaps.get(&it.test_code))
    {
        Some(swaps) => Cow::Owned(swaps.apply(body)),
        None => Cow::Borrowed(body),
    }
}

fn options_text(r: &Rubric) -> String {
    let o = r.options.join(" | ");
    match r.response_type {
        ResponseType::Single => o,
        ResponseType::Multi => format!("{o} (every one that applies, separated by ;)"),
    }
}

/// The sheet's rows for `items` of run `run_id` of `model`.
pub fn rows(
    benchmark: &Benchmark,
    run_id: i64,
    model: &str,
    items: &[ReviewItem],
    show_judge: bool,
) -> Result<Vec<SheetRow>, SheetError> {
    let n = items.len();
    items
        .iter()
        .enumerate()
        .map(|(i, it)| {
            let rubric =
                rubric_of(benchmark, &it.scenario, &it.criterion).map_err(SheetError::Content)?;
            let parsed: Option<Value> = it
                .parsed
                .as_deref()
                .and_then(|p| serde_json::from_str(p).ok());
            let reply = crate::judging::reply::reply_text(
                it.response.as_deref().unwrap_or_default(),
                parsed.as_ref(),
            )
            .to_string();
            Ok(SheetRow {
                run_id,
                model: model.to_string(),
                test_code: it.test_code.clone(),
                repeat: it.repeat_index,
                criterion: it.criterion.clone(),
                options: options_text(rubric),
                verdict: String::new(),
                note: String::new(),
                judge_verdict: show_judge.then(|| verdict_class(it.judge_verdict.as_ref())),
                behaviour: it.behaviour.clone(),
                input: it.prompt.clone(),
                reply,
                rubric: as_judged(benchmark, it, &rubric.body).trim().to_string(),
                item: format!(
                    "{}/{n}:{}",
                    i + 1,
                    item_hash(run_id, &it.test_code, it.repeat_index, &it.criterion)
                ),
            })
        })
        .collect()
}

/// Writes rows as CSV (every field quoted where needed, `\n` kept inside
/// quotes), optionally after a UTF-8 byte order mark for spreadsheets that
/// need one to read UTF-8.
pub fn write_csv(w: &mut dyn Write, rows: &[SheetRow], bom: bool) -> Result<(), SheetError> {
    if bom {
        w.write_all("\u{feff}".as_bytes())?;
    }
    let mut c = csv::WriterBuilder::new()
        .quote_style(csv::QuoteStyle::Necessary)
        .from_writer(w);
    if rows.is_empty() {
        // Still a valid sheet: the header alone.
        c.write_record(header(false))?;
    }
    for r in rows {
        c.serialize(SheetRow {
            input: as_text(&r.input),
            reply: as_text(&r.reply),
            rubric: as_text(&r.rubric),
            ..r.clone()
        })?;
    }
    c.flush()?;
    Ok(())
}

/// A read-only text cell as a spreadsheet must show it: one that starts
/// with `=`, `+`, `-` or `@` (a reply opening with a bullet, say) would be
/// taken for a formula, so it gets a leading `'` (OWASP's advice on CSV
/// injection). Import never reads these cells back.
fn as_text(cell: &str) -> String {
    if cell.starts_with(['=', '+', '-', '@']) {
        format!("'{cell}")
    } else {
        cell.to_string()
    }
}

fn header(show_judge: bool) -> Vec<&'static str> {
    let mut h = vec![
        "run_id",
        "model",
        "test_code",
        "repeat",
        "criterion",
        "options",
        "verdict",
        "note",
    ];
    if show_judge {
        h.push("judge_verdict");
    }
    h.extend(["behaviour", "input", "reply", "rubric", "item"]);
    h
}

/// Writes rows as JSONL, one object per line.
pub fn write_jsonl(w: &mut dyn Write, rows: &[SheetRow]) -> Result<(), SheetError> {
    for r in rows {
        serde_json::to_writer(&mut *w, r).map_err(std::io::Error::from)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}

/// The columns a filled sheet must still have.
const REQUIRED: [&str; 8] = [
    "run_id",
    "model",
    "test_code",
    "repeat",
    "criterion",
    "verdict",
    "note",
    "item",
];

/// A row of a filled sheet as read: its spreadsheet row number (the header
/// is row 1) or JSONL line, and its fields.
#[derive(Debug, Clone)]
pub struct ReadRow {
    pub row: usize,
    pub fields: HashMap<String, String>,
}

/// Reads a filled sheet: JSONL when `jsonl`, else CSV (a leading byte order
/// mark is skipped). A row with a missing or extra field, or a sheet without
/// the required columns, is refused here.
pub fn read(file: &str, bytes: &[u8], jsonl: bool) -> Result<Vec<ReadRow>, SheetError> {
    let bytes = bytes.strip_prefix("\u{feff}".as_bytes()).unwrap_or(bytes);
    let refuse = |problems: Vec<String>| SheetError::Rows {
        file: file.to_string(),
        problems,
    };
    let mut out = Vec::new();
    if jsonl {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| refuse(vec![format!("the sheet is not UTF-8: {e}")]))?;
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: serde_json::Map<String, Value> = serde_json::from_str(line).map_err(|e| {
                refuse(vec![format!(
                    "line {}: not a JSON object ({e}); a truncated sheet?",
                    i + 1
                )])
            })?;
            let fields = v
                .into_iter()
                .map(|(k, v)| {
                    let s = match v {
                        Value::String(s) => s,
                        Value::Null => String::new(),
                        other => other.to_string(),
                    };
                    (k, s)
                })
                .collect();
            out.push(ReadRow { row: i + 1, fields });
        }
    } else {
        let text = decode(bytes);
        let (delimiter, mut r) = csv_reader(&text).map_err(|e| refuse(vec![e]))?;
        tracing::debug!(delimiter = %char::from(delimiter), "sheet separator");
        let headers = r
            .headers()
            .map_err(|e| refuse(vec![format!("row 1 (the header): {e}")]))?
            .clone();
        for (i, rec) in r.records().enumerate() {
            let row = i + 2;
            let rec = rec.map_err(|e| {
                let what = match e.kind() {
                    csv::ErrorKind::UnequalLengths { len, expected_len, .. } => format!(
                        "has {len} fields where the header has {expected_len}; a truncated or damaged sheet?"
                    ),
                    _ => e.to_string(),
                };
                refuse(vec![format!("row {row}: {what}")])
            })?;
            let fields = headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.trim().to_string(), v.to_string()))
                .collect();
            out.push(ReadRow { row, fields });
        }
    }
    Ok(out)
}

/// A CSV sheet's text (its byte order mark already gone): UTF-8 when the
/// bytes are valid UTF-8, else Windows-1252, the encoding LibreOffice and
/// Excel save CSV in on most Western systems (it shows Latin-1's printable
/// characters the same). Text in Windows-1252 with accents is almost never
/// valid UTF-8 by accident, so the order of the two tries is safe.
fn decode(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(_) => {
            encoding_rs::WINDOWS_1252
                .decode_without_bom_handling(bytes)
                .0
        }
    }
}

/// The separators a spreadsheet saves CSV with: `,`, or `;` where the comma
/// is the decimal mark (most of Europe), or a tab.
const SEPARATORS: [u8; 3] = [b',', b';', b'\t'];

/// A reader of `text` with the separator whose header has every
/// [`REQUIRED`] column; else the header's problem, as read with each.
fn csv_reader(text: &str) -> Result<(u8, csv::Reader<&[u8]>), String> {
    let mut lacking = Vec::new();
    for sep in SEPARATORS {
        let mut r = csv::ReaderBuilder::new()
            .flexible(false)
            .delimiter(sep)
            .from_reader(text.as_bytes());
        let headers = r
            .headers()
            .map_err(|e| format!("row 1 (the header): {e}"))?;
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|c| !headers.iter().any(|h| h.trim() == *c))
            .collect();
        if missing.is_empty() {
            return Ok((sep, r));
        }
        lacking.push((sep, missing));
    }
    let (_, fewest) = lacking
        .iter()
        .min_by_key(|(_, m)| m.len())
        .expect("one try per separator");
    Err(format!(
        "row 1 (the header) lacks the column(s) {} whether fields are separated by `,`, `;` or a tab \
         (expected the header `review export` wrote: {}; save the sheet as CSV with one of those \
         separators, in UTF-8 or Windows-1252/Latin-1)",
        fewest.join(", "),
        REQUIRED.join(", ")
    ))
}

/// What a filled sheet holds once checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Checked {
    pub run_id: i64,
    pub labels: Vec<NewLabel>,
    /// Rows whose verdict was left blank (not stored).
    pub blank: usize,
}

/// Parses a rater's verdict against the rubric: one option (single), or
/// options separated by `;` or `,` (multi); options match ignoring case.
fn parse_verdict(rubric: &Rubric, raw: &str) -> Result<(Value, bool), String> {
    let find = |s: &str| {
        rubric
            .options
            .iter()
            .find(|o| o.eq_ignore_ascii_case(s.trim()))
            .cloned()
            .ok_or_else(|| {
                format!(
                    "verdict {:?} is not an option of {} (expected {})",
                    s.trim(),
                    rubric.code,
                    match rubric.response_type {
                        ResponseType::Single => format!("one of {}", rubric.options.join(", ")),
                        ResponseType::Multi =>
                            format!("any of {}, separated by ;", rubric.options.join(", ")),
                    }
                )
            })
    };
    match rubric.response_type {
        ResponseType::Single => {
            let o = find(raw)?;
            Ok((Value::String(o.clone()), rubric.pass_values.contains(&o)))
        }
        ResponseType::Multi => {
            let mut chosen = BTreeSet::new();
            for piece in raw.split([';', ',']).filter(|p| !p.trim().is_empty()) {
                chosen.insert(find(piece)?);
            }
            // In the rubric's order, as the judge lists them.
            let list: Vec<String> = rubric
                .options
                .iter()
                .filter(|o| chosen.contains(*o))
                .cloned()
                .collect();
            let passed = rubric.pass_values.iter().all(|p| list.contains(p));
            Ok((
                Value::Array(list.into_iter().map(Value::String).collect()),
                passed,
            ))
        }
    }
}

/// Checks every row of a filled sheet against run `run_id` of `model` (its
/// judged `items`) and the rubrics of `benchmark`: the run and model, the
/// item key (edited test codes or criteria), every item of the sheet present
/// once (a truncated sheet), and each verdict among its rubric's options.
/// Every problem is collected, each with its row; any problem refuses all.
pub fn check(
    file: &str,
    rows: &[ReadRow],
    run_id: i64,
    model: &str,
    items: &[ReviewItem],
    benchmark: &Benchmark,
) -> Result<Checked, SheetError> {
    const MAX_PROBLEMS: usize = 20;
    let by_key: HashMap<(&str, i64, &str), &ReviewItem> = items
        .iter()
        .map(|i| {
            (
                (i.test_code.as_str(), i.repeat_index, i.criterion.as_str()),
                i,
            )
        })
        .collect();
    let mut problems: Vec<String> = Vec::new();
    let mut labels = Vec::new();
    let mut blank = 0;
    let mut total: Option<usize> = None;
    let mut seen_items: BTreeMap<usize, usize> = BTreeMap::new();
    let mut seen_keys: HashMap<(String, i64, String), usize> = HashMap::new();
    if rows.is_empty() {
        problems.push("the sheet has no rows".into());
    }
    // A sheet of another run (or of another database's run) is refused at
    // its first row, not at every row.
    if let Some(r) = rows.first() {
        let f = |k: &str| r.fields.get(k).map(|s| s.trim()).unwrap_or_default();
        let other_run = f("run_id").parse::<i64>().ok().filter(|id| *id != run_id);
        let why = match other_run {
            Some(id) => Some(format!(
                "run_id is {id}, but this sheet is imported into run {run_id} (a sheet of another run?)"
            )),
            None if f("model") != model && f("run_id").parse::<i64>().is_ok() => Some(format!(
                "model is {:?}, but run {run_id} is a run of {model} (a sheet of another database's run?)",
                f("model")
            )),
            None => None,
        };
        if let Some(why) = why {
            return Err(SheetError::Rows {
                file: file.to_string(),
                problems: vec![format!("row {}: {why}", r.row)],
            });
        }
    }
    for r in rows {
        let f = |k: &str| r.fields.get(k).map(|s| s.trim()).unwrap_or_default();
        let mut bad = |msg: String| problems.push(format!("row {}: {msg}", r.row));
        match f("run_id").parse::<i64>() {
            Ok(id) if id == run_id => {}
            Ok(id) => {
                bad(format!(
                    "run_id is {id}, but this sheet is imported into run {run_id} (a sheet of another run?)"
                ));
                continue;
            }
            Err(_) => {
                bad(format!("run_id {:?} is not a run id", f("run_id")));
                continue;
            }
        }
        if f("model") != model {
            bad(format!(
                "model is {:?}, but run {run_id} is a run of {model} (a sheet of another database's run?)",
                f("model")
            ));
            continue;
        }
        let (code, criterion) = (f("test_code"), f("criterion"));
        let Ok(repeat) = f("repeat").parse::<i64>() else {
            bad(format!("repeat {:?} is not a whole number", f("repeat")));
            continue;
        };
        // The item key: i/n:hash.
        let item = f("item");
        let parsed = item.split_once(':').and_then(|(pos, hash)| {
            let (i, n) = pos.split_once('/')?;
            Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?, hash))
        });
        let Some((i, n, hash)) = parsed.filter(|(i, n, _)| (1..=*n).contains(i)) else {
            bad(format!(
                "item {item:?} is not the key `review export` wrote (i/n:hash); a truncated sheet?"
            ));
            continue;
        };
        match total {
            None => total = Some(n),
            Some(t) if t != n => {
                bad(format!(
                    "item {item:?} belongs to a sheet of {n} items, the rows above to one of {t} (rows of two sheets?)"
                ));
                continue;
            }
            Some(_) => {}
        }
        if item_hash(run_id, code, repeat, criterion) != hash {
            bad(format!(
                "test case {code} (repeat {repeat}), criterion {criterion} does not match the row's item key: were the test code, repeat or criterion edited?"
            ));
            continue;
        }
        if let Some(first) = seen_items.insert(i, r.row) {
            bad(format!("item {i} appears twice (first on row {first})"));
            continue;
        }
        if let Some(first) =
            seen_keys.insert((code.to_string(), repeat, criterion.to_string()), r.row)
        {
            bad(format!(
                "{code} (repeat {repeat}) {criterion} appears twice (first on row {first})"
            ));
            continue;
        }
        let Some(it) = by_key.get(&(code, repeat, criterion)) else {
            bad(format!(
                "run {run_id} has no judged criterion {criterion} for test case {code} (repeat {repeat})"
            ));
            continue;
        };
        let verdict = f("verdict");
        if verdict.is_empty() {
            blank += 1;
            continue;
        }
        let rubric = match rubric_of(benchmark, &it.scenario, criterion) {
            Ok(r) => r,
            Err(e) => {
                bad(e);
                continue;
            }
        };
        match parse_verdict(rubric, verdict) {
            Ok((value, passed)) => {
                let note = f("note");
                labels.push(NewLabel {
                    result_id: it.result_id,
                    criterion: criterion.to_string(),
                    verdict: value,
                    passed,
                    note: (!note.is_empty()).then(|| note.to_string()),
                });
            }
            Err(e) => bad(e),
        }
    }
    if let Some(n) = total
        && problems.is_empty()
    {
        let missing: Vec<String> = (1..=n)
            .filter(|i| !seen_items.contains_key(i))
            .map(|i| i.to_string())
            .collect();
        if !missing.is_empty() {
            let last = rows.last().map_or(1, |r| r.row);
            problems.push(format!(
                "after row {last}: the sheet has {} of its {n} items (missing item(s) {}): a truncated sheet, or rows deleted (leave a verdict blank instead of deleting its row)",
                n - missing.len(),
                shorten(&missing)
            ));
        }
    }
    if !problems.is_empty() {
        let more = problems.len().saturating_sub(MAX_PROBLEMS);
        problems.truncate(MAX_PROBLEMS);
        if more > 0 {
            problems.push(format!("… and {more} more"));
        }
        return Err(SheetError::Rows {
            file: file.to_string(),
            problems,
        });
    }
    Ok(Checked {
        run_id,
        labels,
        blank,
    })
}

/// A list of numbers, shortened after ten.
fn shorten(items: &[String]) -> String {
    if items.len() <= 10 {
        items.join(", ")
    } else {
        format!("{}, … ({} in all)", items[..10].join(", "), items.len())
    }
}

/// The run id a sheet names (its first row's), to know which run to check
/// it against when none is given.
pub fn sheet_run_id(rows: &[ReadRow]) -> Option<i64> {
    rows.first()?.fields.get("run_id")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rng() -> ChaCha8Rng {
        ChaCha8Rng::seed_from_u64(7)
    }

    #[test]
    fn allocation_gives_every_stratum_one_then_shares_in_proportion() {
        // 10 of 100 items in strata of 80, 15 and 5: one each, then 7 more
        // in proportion to what is left (79, 14, 4 of 97): 5.70, 1.01, 0.29
        // → 5 + 1 + 0 and the largest remainder (0.70) gets the last one.
        assert_eq!(allocate(&[80, 15, 5], 10, &mut rng()), vec![7, 2, 1]);
        // Never more than a stratum holds.
        assert_eq!(allocate(&[1, 1, 50], 10, &mut rng()), vec![1, 1, 8]);
        // All of them.
        assert_eq!(allocate(&[2, 3], 5, &mut rng()), vec![2, 3]);
        // Fewer slots than strata: one each for `k` of them.
        let t = allocate(&[5, 5, 5], 2, &mut rng());
        assert_eq!(t.iter().sum::<usize>(), 2);
        assert!(t.iter().all(|&x| x <= 1));
    }

    #[test]
    fn formula_like_cells_are_kept_as_text() {
        assert_eq!(as_text("- breathe slowly"), "'- breathe slowly");
        assert_eq!(as_text("=HYPERLINK(\"x\")"), "'=HYPERLINK(\"x\")");
        assert_eq!(as_text("I hear you."), "I hear you.");
    }

    #[test]
    fn verdict_classes() {
        use serde_json::json;
        assert_eq!(verdict_class(Some(&json!("SAFE"))), "SAFE");
        assert_eq!(verdict_class(Some(&json!(["B", "A"]))), "A+B");
        assert_eq!(verdict_class(Some(&json!([]))), "(none)");
        assert_eq!(verdict_class(None), "error");
    }
}
