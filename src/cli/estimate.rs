//! `estimate`: what a batch would cost, before anything is paid, and the
//! preflight `run-batch` makes with the same numbers before its first
//! request (issue 22). Prices and supported parameters come from
//! OpenRouter's public `GET /models`, the key's remaining limit from
//! `GET /key`; the computation is `run::estimate`. The preflight refuses
//! (nothing sent) a model the catalog does not list, a model without
//! structured outputs for deterministic scenarios (the judge too), and,
//! unless `--yes`, a run it could not price or whose upper end passes
//! `--max-cost` or the key's remaining limit.

use std::io::Write;

use clap::Args;
use serde_json::json;

use super::output::{DataFormat, out};
use super::selection::parse_selectors;
use super::settings::{Settings, runtime};
use crate::benchmark::Benchmark;
use crate::domain::ModelEntry;
use crate::openrouter::catalog::{CATALOG_TIMEOUT, Catalog, CatalogClient, KeyInfo};
use crate::run::estimate::{self, CompletionInput, Estimate, ModelInputs, Prices};
use crate::store::Store;
use crate::{Error, ExitStatus, Result};

#[derive(Debug, Args)]
pub struct EstimateArgs {
    /// Scenario codes, test codes or prefixes, as for run-batch.
    #[arg(long = "scenario", num_args = 1.., required_unless_present = "all_scenarios")]
    pub scenarios: Vec<String>,
    /// Every scenario.
    #[arg(long, conflicts_with = "scenarios")]
    pub all_scenarios: bool,
    /// Models (comma-separated), overriding models.yml.
    #[arg(long, value_delimiter = ',')]
    pub models: Vec<String>,
    /// Leave out the test cases without a user context.
    #[arg(long)]
    pub skip_no_context: bool,
    /// At most this many test cases.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Each test case this many times.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeats: u32,
    /// A budget in USD to compare the estimate with (as run-batch would).
    #[arg(long, value_name = "USD", value_parser = super::selection::parse_budget)]
    pub max_cost: Option<f64>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

/// What the estimate covers: run-batch's selection flags.
#[derive(Debug, Clone)]
pub(super) struct Selection {
    pub selectors: Vec<String>,
    pub include_no_context: bool,
    pub limit: Option<usize>,
    pub repeats: u32,
    pub max_cost: Option<f64>,
    /// The judge, or a panel comma-joined (`--judges` or marking_model).
    pub judge: Option<String>,
}

/// An estimate with what it was priced from.
struct Priced {
    estimate: Estimate,
    /// The catalog, or why it could not be read.
    catalog: std::result::Result<Catalog, String>,
    /// The key's limit: None without a key; Err when `/key` failed.
    key: Option<std::result::Result<KeyInfo, String>>,
}

/// Why a run would not start; `overridable` ones start with `--yes`.
struct Refusal {
    message: String,
    overridable: bool,
}

pub fn run(s: &Settings, args: &EstimateArgs) -> Result<ExitStatus> {
    let selectors = parse_selectors(&args.scenarios)?;
    let b = s.load_strict()?;
    let models = super::call::models_of(&b, &args.models)?;
    let sel = Selection {
        selectors: selectors.iter().map(|s| s.as_str().to_string()).collect(),
        include_no_context: !args.skip_no_context,
        limit: args.limit,
        repeats: args.repeats,
        max_cost: args.max_cost,
        judge: super::call::judge_of(&b, &[]),
    };
    runtime()?.block_on(async {
        // Stored replies refine the completion estimate; an absent or
        // older database only means there are none.
        let url = s.database_url.clone();
        let store = if crate::store::database_exists(&url) {
            Store::open_read_only(&url).await.ok()
        } else {
            None
        };
        let priced = price(s, &b, &models, &sel, store.as_ref()).await?;
        let refusals = refusals(&priced, &sel);
        let mut o = out();
        match args.format {
            DataFormat::Json => {
                let v = json!({
                    "estimate": priced.estimate,
                    "priced": priced.catalog.is_ok() && priced.estimate.cost_usd.is_some(),
                    "catalog_error": priced.catalog.as_ref().err(),
                    "key_limit_remaining_usd": priced.key.as_ref().and_then(|k| k.as_ref().ok()).and_then(|k| k.limit_remaining),
                    "run_batch_would_refuse": refusals.iter().map(|r| &r.message).collect::<Vec<_>>(),
                });
                serde_json::to_writer_pretty(&mut o, &v)?;
                writeln!(o)?;
            }
            DataFormat::Table => {
                write_text(&mut o, &priced)?;
                for r in &refusals {
                    writeln!(
                        o,
                        "run-batch would refuse{}: {}",
                        if r.overridable { " without --yes" } else { "" },
                        r.message
                    )?;
                }
            }
        }
        Ok(ExitStatus::Success)
    })
}

/// Before `run-batch` sends anything: prints the estimate (to stderr, so a
/// JSON summary on stdout stays JSON) and refuses what the module docs say.
pub(super) async fn preflight(
    s: &Settings,
    b: &Benchmark,
    store: &Store,
    models: &[ModelEntry],
    sel: &Selection,
    yes: bool,
) -> Result<()> {
    let priced = price(s, b, models, sel, Some(store)).await?;
    if !s.quiet {
        let mut e = std::io::stderr().lock();
        write_text(&mut e, &priced)?;
    }
    let refusals = refusals(&priced, sel);
    if let Some(r) = refusals.iter().find(|r| !r.overridable) {
        return Err(Error::Usage(format!("{}; nothing was sent", r.message)));
    }
    let blocking: Vec<&str> = refusals.iter().map(|r| r.message.as_str()).collect();
    if blocking.is_empty() {
        return Ok(());
    }
    if yes {
        eprintln!("--yes: starting anyway: {}", blocking.join("; "));
        return Ok(());
    }
    Err(Error::tool(format!(
        "not started: {}. Nothing was sent; run again with --yes to start anyway",
        blocking.join("; ")
    )))
}

/// The catalog client of these settings: the base URL and the key when
/// there is one.
fn catalog_client(s: &Settings) -> Result<CatalogClient> {
    CatalogClient::new(&s.base_url, s.api_key(), CATALOG_TIMEOUT)
        .map_err(|e| Error::Usage(e.to_string()))
}

async fn price(
    s: &Settings,
    b: &Benchmark,
    models: &[ModelEntry],
    sel: &Selection,
    store: Option<&Store>,
) -> Result<Priced> {
    let client = catalog_client(s)?;
    let (catalog, key) = tokio::join!(client.models(), client.key());
    let catalog = catalog.map_err(|e| e.to_string());
    let key = key.map_err(|e| e.to_string()).transpose();
    let price_of = |id: &str| -> Option<Prices> {
        let m = catalog.as_ref().ok().and_then(|c| find(c, id))?;
        Some(Prices {
            prompt: m.prompt_price?,
            completion: m.completion_price?,
        })
    };
    let stored = |id: String, judge: bool| async move {
        match store {
            Some(s) => s.mean_completion_tokens(&id, judge).await.ok().flatten(),
            None => None,
        }
    };
    let judge_id = sel.judge.clone();
    let judge = ModelInputs {
        completion: CompletionInput {
            max_tokens: Some(crate::judging::judge::MAX_TOKENS),
            stored_mean: match &judge_id {
                Some(j) => stored(j.clone(), true).await,
                None => None,
            },
        },
        // A panel judges every criterion once per judge: its price per
        // token is the members' sum (None when one is unpriced).
        price: judge_id.as_deref().and_then(|j| {
            crate::judging::panel::judges(j)
                .into_iter()
                .map(price_of)
                .try_fold(
                    Prices {
                        prompt: 0.0,
                        completion: 0.0,
                    },
                    |acc, p| {
                        p.map(|p| Prices {
                            prompt: acc.prompt + p.prompt,
                            completion: acc.completion + p.completion,
                        })
                    },
                )
        }),
    };
    let mut estimates = Vec::with_capacity(models.len());
    for m in models {
        let inputs = ModelInputs {
            completion: CompletionInput {
                max_tokens: m.max_tokens,
                stored_mean: stored(m.id.clone(), false).await,
            },
            price: price_of(&m.id),
        };
        let settings = crate::run::RunSettings {
            model: m.clone(),
            judge_model: judge_id.clone(),
            judge_tie: Default::default(),
            batch: None,
            selectors: sel.selectors.clone(),
            include_no_context: sel.include_no_context,
            concurrency: std::num::NonZeroUsize::MIN,
            limit: sel.limit,
            repeats: sel.repeats,
            no_cache: false,
            max_cost: sel.max_cost,
            tool_version: String::new(),
            benchmark_hash: String::new(),
        };
        estimates.push(estimate::estimate_model(b, &settings, inputs, judge)?);
    }
    Ok(Priced {
        estimate: estimate::total(estimates, judge_id.as_deref(), judge),
        catalog,
        key,
    })
}

/// A model of the catalog by id; a routing suffix OpenRouter does not list
/// separately (`:nitro`, `:floor`, `:online`) is looked up without it.
fn find<'c>(c: &'c Catalog, id: &str) -> Option<&'c crate::openrouter::catalog::CatalogModel> {
    c.get(id)
        .or_else(|| id.split_once(':').and_then(|(base, _)| c.get(base)))
}

fn refusals(p: &Priced, sel: &Selection) -> Vec<Refusal> {
    let mut out = Vec::new();
    let e = &p.estimate;
    let hard = |message: String| Refusal {
        message,
        overridable: false,
    };
    let soft = |message: String| Refusal {
        message,
        overridable: true,
    };
    match &p.catalog {
        Ok(c) => {
            for m in &e.models {
                match find(c, &m.model) {
                    None => out.push(hard(format!(
                        "model `{}` is not in OpenRouter's model list (GET /models): check its id in models.yml or --models",
                        m.model
                    ))),
                    Some(cm) if m.structured && !cm.structured_outputs() => out.push(hard(format!(
                        "model `{}` does not support structured outputs (`structured_outputs` is not among its supported_parameters), which the deterministic scenarios of this selection need: choose another model or leave those scenarios out",
                        m.model
                    ))),
                    _ => {}
                }
            }
            for j in e
                .judge_model
                .as_deref()
                .map(crate::judging::panel::judges)
                .unwrap_or_default()
            {
                match find(c, j) {
                    None => out.push(hard(format!(
                        "judge `{j}` (marking_model of models.yml, or --judges) is not in OpenRouter's model list (GET /models)"
                    ))),
                    Some(cm) if !cm.structured_outputs() => out.push(hard(format!(
                        "judge `{j}` (marking_model of models.yml, or --judges) does not support structured outputs, which every judge request needs"
                    ))),
                    _ => {}
                }
            }
            let unpriced: Vec<&str> = e
                .models
                .iter()
                .filter(|m| m.price.is_none())
                .map(|m| m.model.as_str())
                .chain(
                    e.judge_model
                        .as_deref()
                        .filter(|_| e.judge_price.is_none()),
                )
                .collect();
            if !unpriced.is_empty() && out.is_empty() {
                out.push(soft(format!(
                    "could not price {} (no usable price in GET /models)",
                    unpriced.join(", ")
                )));
            }
        }
        Err(why) => out.push(soft(format!(
            "could not price the run ({why}): offline, or OPENROUTER_BASE_URL has no model list; models and the judge were not checked either"
        ))),
    }
    if let Some([_, high]) = e.cost_usd {
        if let Some(max) = sel.max_cost
            && high > max
        {
            out.push(soft(format!(
                "the estimate's upper end ${high:.4} exceeds --max-cost ${max:.4} (lower --limit or the selection, or raise --max-cost; the run would stop at --max-cost)"
            )));
        }
        if let Some(Ok(KeyInfo {
            limit_remaining: Some(left),
            ..
        })) = &p.key
            && high > *left
        {
            out.push(soft(format!(
                "the estimate's upper end ${high:.4} exceeds the key's remaining limit ${left:.4} (GET /key): the run would stop with openrouter_key_limit part-way"
            )));
        }
    }
    out
}

fn range_u(v: [u64; 2]) -> String {
    if v[0] == v[1] {
        v[0].to_string()
    } else {
        format!("{}–{}", v[0], v[1])
    }
}

fn per_million(p: Option<Prices>) -> String {
    p.map_or_else(
        || "unknown".into(),
        |p| format!("{:.2} / {:.2}", p.prompt * 1e6, p.completion * 1e6),
    )
}

fn usd_range(c: Option<[f64; 2]>) -> String {
    c.map_or_else(
        || "not priced".into(),
        |[lo, hi]| format!("{lo:.4}–{hi:.4}"),
    )
}

fn write_text(o: &mut dyn Write, p: &Priced) -> std::io::Result<()> {
    let e = &p.estimate;
    writeln!(o, "cost estimate (before anything is sent):")?;
    let mut t = crate::report::text::table([
        "model",
        "requests",
        "judge requests",
        "prompt tokens",
        "completion tokens",
        "judge tokens (in + out)",
        "USD per M tokens (in / out)",
        "cost USD",
    ]);
    for m in &e.models {
        t.add_row([
            m.model.clone(),
            m.requests.to_string(),
            range_u(m.judge_requests),
            range_u(m.prompt_tokens),
            range_u(m.completion_tokens),
            format!(
                "{} + {}",
                range_u(m.judge_prompt_tokens),
                range_u(m.judge_completion_tokens)
            ),
            per_million(m.price),
            usd_range(m.cost_usd),
        ]);
    }
    writeln!(o, "{t}")?;
    for m in &e.models {
        writeln!(
            o,
            "  {} completion per request: {}",
            m.model, m.completion_basis
        )?;
    }
    if let Some(j) = &e.judge_model {
        writeln!(
            o,
            "  judge {j}: USD per M tokens {}; completion per request: {}",
            per_million(e.judge_price),
            e.judge_completion_basis.as_deref().unwrap_or("")
        )?;
    }
    match (&p.catalog, e.cost_usd) {
        (Ok(_), Some([lo, hi])) => writeln!(o, "total: ${lo:.4} to ${hi:.4}")?,
        (Ok(_), None) => writeln!(o, "total: not priced (a model has no price in GET /models)")?,
        (Err(why), _) => writeln!(o, "total: could not price ({why})")?,
    }
    match &p.key {
        Some(Ok(KeyInfo {
            limit_remaining: Some(left),
            limit,
            ..
        })) => writeln!(
            o,
            "key: ${left:.4} left of its ${:.4} limit (GET /key)",
            limit.unwrap_or(f64::NAN)
        )?,
        Some(Ok(_)) => writeln!(o, "key: no credit limit of its own (GET /key)")?,
        Some(Err(why)) => writeln!(o, "key: limit unknown ({why})")?,
        None => {}
    }
    writeln!(o, "how: {}", e.method)
}
