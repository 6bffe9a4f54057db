//! `prompts`: the exact composed prompt and response format of test cases.

use std::io::Write;

use clap::{Args, ValueEnum};
use serde_json::json;

use super::output::out;
use super::selection::parse_selectors;
use super::settings::Settings;
use crate::ExitStatus;
use crate::benchmark::cases;
use crate::benchmark::compose;
use crate::benchmark::conversation::{self, Exchange, Reply};
use crate::benchmark::variants;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PromptFormat {
    Text,
    Jsonl,
}

#[derive(Debug, Args)]
pub struct PromptsArgs {
    /// Scenario codes, test codes or prefixes (P1, P1-B2); all when none.
    pub selectors: Vec<String>,
    #[arg(long, value_enum, default_value_t = PromptFormat::Text)]
    pub format: PromptFormat,
    /// Leave out the test cases without a user context.
    #[arg(long)]
    pub skip_no_context: bool,
    /// Also show these variants of the user's words (comma-separated,
    /// e.g. `lowercase,typos`) instead of the scenarios' own `variants:`.
    #[arg(long, value_name = "A,B", value_parser = variant_list)]
    pub variants: Option<VariantList>,
    /// The seed the variants draw from.
    #[arg(long, value_name = "N", default_value_t = variants::DEFAULT_VARIANT_SEED)]
    pub variant_seed: u64,
}

/// `--variants`: names checked when the arguments are read.
#[derive(Debug, Clone)]
pub struct VariantList(Vec<variants::Variant>);

fn variant_list(s: &str) -> std::result::Result<VariantList, String> {
    variants::parse_names(s).map(VariantList)
}

pub fn run(s: &Settings, args: &PromptsArgs) -> Result<ExitStatus> {
    let selectors = parse_selectors(&args.selectors)?;
    let (b, errors) = s.load_reporting();
    let cases = cases::select(&b, &selectors, !args.skip_no_context).map_err(Error::usage)?;
    let mut o = std::io::BufWriter::new(out());
    let mut prompt = String::new();
    for case in &cases {
        let conversation = !case.scenario.turns.is_empty();
        let script = conversation.then(|| conversation::script(case));
        match &script {
            // A conversation's message 1 (with a perturbation marker, it
            // is not the single-turn composition).
            Some(script) => {
                prompt.clear();
                prompt.push_str(&script[0].user);
            }
            None => compose::compose_into(case, &mut prompt),
        }
        let rf = compose::response_format(case);
        let evaluation = case.evaluation();
        match args.format {
            PromptFormat::Jsonl => {
                let mut line = json!({"test_code": case.code(), "prompt": prompt, "response_format": rf,
                            "evaluation": &*evaluation, "base_severity": case.base_severity()});
                if let Some(script) = &script {
                    line["messages"] = messages_json(script);
                }
                serde_json::to_writer(&mut o, &line)?;
                writeln!(o)?;
            }
            PromptFormat::Text => {
                writeln!(o, "=== {} ===", case.code())?;
                match &script {
                    Some(script) => write_script(&mut o, script)?,
                    None => writeln!(o, "{prompt}")?,
                }
                writeln!(
                    o,
                    "--- evaluation (base severity {:+}) ---\n{}",
                    case.base_severity(),
                    serde_json::to_string(&*evaluation)?
                )?;
                match rf {
                    Some(rf) => writeln!(
                        o,
                        "--- response_format ---\n{}",
                        serde_json::to_string_pretty(rf)?
                    )?,
                    None => writeln!(o, "--- response_format ---\n(none: free-text reply)")?,
                }
                writeln!(o)?;
            }
        }
        write_variants(&mut o, &b, case, args)?;
    }
    o.flush()?;
    Ok(ExitStatus::unless_content_errors(errors.len()))
}

/// Each variant of `case` (the `--variants` asked for, else its
/// scenario's own), after the original: its code, the varied message and
/// the seed, or a line saying it changes nothing and is skipped.
fn write_variants(
    o: &mut impl Write,
    b: &crate::benchmark::Benchmark,
    case: &cases::TestCase<'_>,
    args: &PromptsArgs,
) -> Result<()> {
    let list = match &args.variants {
        Some(VariantList(l)) => l.as_slice(),
        None => case.scenario.variants.as_slice(),
    };
    for v in list {
        if let Err(why) = v.check_against(&b.word_lists) {
            return Err(Error::usage(why));
        }
        let code = crate::benchmark::vary::variant_code(&case.code(), v);
        let varied = crate::benchmark::vary::vary_case(case, v, &b.word_lists, args.variant_seed);
        let prompt = varied.as_ref().map(|c| {
            compose::compose(&cases::TestCase {
                perturbation: &c.perturbation,
                ..*case
            })
        });
        // What `names`/`pronouns` swapped, which the rubrics and expected
        // values of this variant take too.
        let swaps = varied.as_ref().map(|c| &c.swaps).filter(|s| !s.is_empty());
        match (args.format, prompt) {
            (PromptFormat::Jsonl, prompt) => {
                let line = match prompt {
                    Some(p) => {
                        let mut line = json!({"test_code": code, "variant": v, "variant_seed": args.variant_seed,
                                      "prompt": p, "response_format": compose::response_format(case)});
                        if let Some(s) = swaps {
                            line["swaps"] = s.to_json();
                        }
                        line
                    }
                    None => {
                        json!({"test_code": code, "variant": v, "variant_seed": args.variant_seed,
                                   "skipped": "the variant changes nothing in this message"})
                    }
                };
                serde_json::to_writer(&mut *o, &line)?;
                writeln!(o)?;
            }
            (PromptFormat::Text, Some(p)) => {
                writeln!(
                    o,
                    "=== {code} (variant {}, seed {}) ===",
                    v.name(),
                    args.variant_seed
                )?;
                writeln!(o, "{p}")?;
                if let Some(s) = swaps {
                    writeln!(
                        o,
                        "--- swapped in its rubrics and expected values too: {} ---",
                        s.summary()
                    )?;
                }
                writeln!(o)?;
            }
            (PromptFormat::Text, None) => {
                writeln!(
                    o,
                    "=== {code}: the variant changes nothing in this message; skipped ===\n"
                )?;
            }
        }
    }
    Ok(())
}

/// Where a message comes from: message 1, or its turn with its role and
/// pressure label.
fn origin(e: &Exchange<'_>, index: usize) -> String {
    match e.turn {
        None => "message 1".to_string(),
        Some(t) if index == 0 => format!("message 1, with {}", t.component.code),
        Some(t) => {
            let role = match t.role {
                crate::benchmark::TurnRole::Perturbation => "the perturbation",
                _ => "user",
            };
            match &t.pressure {
                Some(p) => format!("{} ({role}, pressure: {p})", t.component.code),
                None => format!("{} ({role})", t.component.code),
            }
        }
    }
}

/// A conversation's script as an author reads it: each user message, then
/// the model's live reply (a placeholder: it is not known before the run)
/// or the prefilled assistant turn, as written.
fn write_script(o: &mut impl Write, script: &[Exchange<'_>]) -> std::io::Result<()> {
    for (i, e) in script.iter().enumerate() {
        writeln!(o, "--- {} ---", origin(e, i))?;
        writeln!(o, "{}", e.user)?;
        match e.reply {
            Reply::Live { judged } => {
                let judged = if judged { "judged" } else { "not judged" };
                let overrides = e
                    .turn
                    .and_then(|t| t.component.overrides.as_ref())
                    .map(|o| format!(", evaluation override {}", json!(o)))
                    .unwrap_or_default();
                writeln!(o, "--- [the model's live reply: {judged}{overrides}] ---")?;
            }
            Reply::Fixed(t) => {
                writeln!(o, "--- {} (assistant, prefilled) ---", t.component.code)?;
                writeln!(o, "{}", t.component.prompt)?;
            }
        }
    }
    Ok(())
}

/// A conversation's messages for `prompts --format jsonl`: a live reply is
/// `{"role": "assistant", "live": true, "judged": …}` with no content.
fn messages_json(script: &[Exchange<'_>]) -> serde_json::Value {
    let mut out = Vec::with_capacity(script.len() * 2);
    for e in script {
        out.push(
            json!({"role": "user", "content": e.user, "turn": e.turn.map(|t| &t.component.code),
                        "pressure": e.turn.and_then(|t| t.pressure.as_ref())}),
        );
        out.push(match e.reply {
            Reply::Live { judged } => json!({"role": "assistant", "live": true, "judged": judged,
                "evaluation_override": e.turn.and_then(|t| t.component.overrides.as_ref())}),
            Reply::Fixed(t) => json!({"role": "assistant", "content": t.component.prompt,
                                      "turn": t.component.code, "live": false}),
        });
    }
    serde_json::Value::Array(out)
}
