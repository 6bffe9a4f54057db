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
use super::selection::SelectionArgs;
use super::settings::{Settings, runtime};
use crate::benchmark::Benchmark;
use crate::domain::{Api, Caller, ModelEntry};
use crate::openrouter::catalog::{CATALOG_TIMEOUT, CatalogClient, CatalogError, KeyInfo};
use crate::report::usd;
use crate::run::Selection;
use crate::run::estimate::{self, CompletionInput, ModelInputs, Prices};
use crate::run::preflight::{Priced, find, refusals, to_probe};
use crate::store::Store;
use crate::{Error, ExitStatus, Result};

#[derive(Debug, Args)]
pub struct EstimateArgs {
    #[command(flatten)]
    pub selection: SelectionArgs,
    /// Models (comma-separated), overriding models.yml.
    #[arg(long, value_delimiter = ',', value_parser = super::call::model_id)]
    pub models: Vec<String>,
    /// The model that simulates the user of persona conversations (as
    /// run-batch's --user-model): its calls are priced too. Needed when the
    /// selection has scenarios with personas.
    #[arg(long, value_name = "ID", value_parser = super::call::model_id)]
    pub user_model: Option<String>,
    #[arg(long, value_enum, default_value_t = DataFormat::Table)]
    pub format: DataFormat,
}

/// What an estimate covers: a batch's selection, its judge (or panel,
/// comma-joined: `--judges` or marking_model) and the model simulating the
/// users of persona conversations.
pub(super) struct Covered<'a> {
    pub(super) selection: &'a Selection,
    pub(super) judge: Option<String>,
    pub(super) user_model: Option<String>,
}

pub fn run(s: &Settings, args: &EstimateArgs) -> Result<ExitStatus> {
    let mut selection = args.selection.resolve("")?;
    let mut b = s.load_strict()?;
    super::selection::make_variants(&mut b, &mut selection, s.quiet)?;
    let models = super::call::models_of(&b, &args.models)?;
    super::call::require_user_model(&b, &selection, args.user_model.as_deref())?;
    let sel = Covered {
        selection: &selection,
        judge: super::call::judge_of(&b, &[]),
        user_model: args.user_model.clone(),
    };
    runtime()?.block_on(async {
        // Stored replies refine the completion estimate; an absent or
        // older database only means there are none.
        let url = s.database_url.clone();
        let store = if Store::database_exists(&url) {
            Store::open_read_only(&url).await.ok()
        } else {
            None
        };
        let priced = price(s, &b, &models, &sel, store.as_ref()).await?;
        let refusals = refusals(&priced, sel.selection.max_cost, &entries(&b, &models));
        match args.format {
            DataFormat::Json => {
                let mut o = out();
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
                let mut o = super::output::table_out(s.width);
                write_text(&mut o, &priced)?;
                for e in to_probe(&priced, &entries(&b, &models)) {
                    writeln!(
                        o,
                        "run-batch would first ask `{}` once whether it answers in a JSON schema (no `structured_outputs:` in its entry)",
                        e.id
                    )?;
                }
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
    ctx: &crate::run::RunContext,
    models: &[ModelEntry],
    sel: &Covered<'_>,
    yes: bool,
    discount: Option<f64>,
) -> Result<Preflighted> {
    let (b, client) = (&*ctx.benchmark, &*ctx.client);
    let mut priced = price(s, b, models, sel, Some(&ctx.store)).await?;
    let per_case = per_request(&mut priced, discount);
    let refusals = refusals(&priced, sel.selection.max_cost, &entries(b, models));
    // A wrong id or an unsupported parameter is refused before the estimate
    // is shown: every one of them, each on its line.
    let hard: Vec<&str> = refusals
        .iter()
        .filter(|r| !r.overridable)
        .map(|r| r.message.as_str())
        .collect();
    if !hard.is_empty() {
        return Err(Error::usage(format!(
            "{}\nnothing was sent",
            hard.join("\n")
        )));
    }
    if !s.quiet {
        // Fitted to stderr's terminal, then back to stdout's for what follows.
        crate::report::terminal::set_width(s.stderr_width());
        let mut e = crate::report::terminal::Fit::new(std::io::stderr().lock());
        write_text(&mut e, &priced)?;
        if let Some(d) = discount {
            writeln!(
                e,
                "batch API: priced at {:.0} % of the per-token price, an estimate (OpenRouter bills batches \"typically\" at 50 %; each batch's usage.cost is what is charged)",
                d * 100.0
            )?;
        }
        drop(e);
        crate::report::terminal::set_width(s.width);
    }
    let blocking: Vec<&str> = refusals.iter().map(|r| r.message.as_str()).collect();
    if !blocking.is_empty() {
        if !yes {
            return Err(Error::tool(format!(
                "not started: {}. Nothing was sent; run again with --yes to start anyway",
                blocking.join("; ")
            )));
        }
        eprintln!("--yes: starting anyway: {}", blocking.join("; "));
    }
    let probes = probe(s, client, &priced, &entries(b, models)).await?;
    Ok(Preflighted { per_case, probes })
}

/// Scales `priced` to the Batch API's share of the per-token price (the
/// estimate, and the budget refusal read from it, use that share), and
/// returns per model the high end of one test case's model request and of
/// one judge request: what a model batch and a judge batch in flight are
/// counted at against --max-cost. The same for a fresh run and a resume.
fn per_request(priced: &mut Priced, discount: Option<f64>) -> Vec<PerRequest> {
    // OpenRouter bills batches "typically" a share of the per-token price.
    if let Some(d) = discount {
        let scale = |c: &mut Option<[f64; 2]>| {
            if let Some(c) = c {
                *c = c.map(|v| v * d);
            }
        };
        for m in &mut priced.estimate.models {
            scale(&mut m.cost_usd);
        }
        scale(&mut priced.estimate.cost_usd);
    }
    let (judge_price, user_price) = (priced.estimate.judge_price, priced.estimate.user_price);
    priced
        .estimate
        .models
        .iter()
        .map(|m| {
            let judge = m
                .judge_cost_high(judge_price)
                .map(|j| j * discount.unwrap_or(1.0));
            // The simulated user's calls are synchronous, never in a batch.
            let simulator = m
                .simulator_cost_high(user_price)
                .map(|u| u * discount.unwrap_or(1.0));
            PerRequest {
                model: m.model.clone(),
                model_usd: m.cost_usd.map(|[_, hi]| {
                    (hi - judge.unwrap_or(0.0) - simulator.unwrap_or(0.0)).max(0.0)
                        / m.requests.max(1) as f64
                }),
                judge_usd: judge.map(|j| j / m.judge_requests[1].max(1) as f64),
            }
        })
        .collect()
}

/// One model's estimated high end per request (None: not priced).
pub(super) struct PerRequest {
    pub(super) model: String,
    /// One test case's model request.
    pub(super) model_usd: Option<f64>,
    /// One judge request for this model's replies.
    pub(super) judge_usd: Option<f64>,
}

/// What a passed preflight hands the run: per model, the high end of one
/// test case's cost (what a Batch API batch in flight counts against
/// `--max-cost`), and what the structured-output probes cost.
pub(super) struct Preflighted {
    pub(super) per_case: Vec<PerRequest>,
    pub(super) probes: Vec<crate::run::PreflightCharge>,
}

/// A resume's preflight: the checks that refuse (a model or judge gone
/// from the catalog, a parameter its endpoints no longer take), for what
/// each resumed run recorded. No estimate shown and no confirmation: the run
/// was estimated when it began, and its budget carries over. Returns, for
/// the runs that go on through the Batch API (`discount` of each), what
/// each batch in flight is counted at, as for a fresh run.
pub(super) async fn resume_preflight(
    s: &Settings,
    ctx: &crate::run::RunContext,
    runs: &[(Option<i64>, crate::run::RunSettings)],
    discount: &[Option<f64>],
) -> Result<Vec<PerRequest>> {
    let b = &*ctx.benchmark;
    let mut hard = Vec::new();
    let mut per_case = Vec::new();
    for ((id, settings), discount) in runs.iter().zip(discount) {
        let selectors = settings
            .selectors
            .iter()
            .map(|x| crate::benchmark::cases::Selector::parse(x).map_err(Error::usage))
            .collect::<Result<Vec<_>>>()?;
        let selection = Selection {
            selectors,
            include_no_context: settings.include_no_context,
            limit: settings.limit,
            repeats: settings.repeats,
            max_cost: None,
            variants: settings.variants.clone(),
            variant_seed: settings.variant_seed,
        };
        let sel = Covered {
            selection: &selection,
            judge: settings.judge_model.clone(),
            user_model: settings.user_model.as_ref().map(|u| u.id.clone()),
        };
        let models = [settings.model.clone()];
        let mut priced = price(s, b, &models, &sel, None).await?;
        if discount.is_some() {
            per_case.extend(per_request(&mut priced, *discount));
        }
        // Not a reason to refuse a resume (the run was checked when it
        // began), but never silent: what was not checked is said.
        if let Err(why) = &priced.catalog
            && !s.quiet
        {
            let run = id.map_or_else(String::new, |id| format!("run {id}: "));
            eprintln!(
                "warning: {run}the resume's preflight could not read the model list ({why}): `{}` and its judge were not checked against the catalog before sending",
                settings.model.id
            );
        }
        for r in refusals(&priced, None, &entries(b, &models)) {
            if !r.overridable {
                hard.push(match id {
                    Some(id) => format!("run {id}: {}", r.message),
                    None => r.message,
                });
            }
        }
    }
    if hard.is_empty() {
        return Ok(per_case);
    }
    Err(Error::usage(format!(
        "{}\nnothing was sent",
        hard.join("\n")
    )))
}

/// The structured-output probe of every OpenAI-compatible model or judge
/// whose entry does not say (see [`to_probe`]): the last check, after
/// every refusal, as it is a paid request. A failed probe stops the run
/// with nothing else sent.
async fn probe(
    s: &Settings,
    client: &crate::openrouter::Client,
    priced: &Priced,
    entries: &[ModelEntry],
) -> Result<Vec<crate::run::PreflightCharge>> {
    let mut paid = Vec::new();
    for entry in to_probe(priced, entries) {
        if !s.quiet {
            eprintln!(
                "asking `{}` once whether it answers in a JSON schema (its models.yml entry has no `structured_outputs:`)",
                entry.id
            );
        }
        match client.probe_structured(&entry).await {
            Ok(cost_usd) => paid.push(crate::run::PreflightCharge {
                model: entry.id.clone(),
                cost_usd,
            }),
            Err((why, cost)) => {
                // No run exists to keep its charge: said here instead.
                let spent = (cost > 0.0 || cost.is_nan()).then(|| {
                    format!(
                        " (the probe cost {})",
                        crate::report::dollars_known(
                            if cost.is_nan() { 0.0 } else { cost },
                            i64::from(cost.is_nan()),
                            6
                        )
                    )
                });
                return Err(Error::usage(format!(
                    "`{}` cannot be used as it is: its requests need a JSON-schema answer (a judge, or the deterministic scenarios of this selection), and {why}. Set `structured_outputs: true` on its entry in models.yml if the server does honour response_format, or choose another model (or leave those scenarios out); nothing else was sent{}",
                    entry.id,
                    spent.unwrap_or_default()
                )));
            }
        }
    }
    Ok(paid)
}

/// The catalog client of these settings: the base URL and the key when
/// there is one.
fn catalog_client(s: &Settings) -> Result<CatalogClient> {
    CatalogClient::new(&s.base_url, s.api_key(), CATALOG_TIMEOUT).map_err(Error::from)
}

async fn price(
    s: &Settings,
    b: &Benchmark,
    models: &[ModelEntry],
    sel: &Covered<'_>,
    store: Option<&Store>,
) -> Result<Priced> {
    let client = catalog_client(s)?;
    let all = entries(b, models);
    // A model's or judge's entry (a judge's defaults without one).
    let entry_of = |id: &str| crate::judging::judge::settings(id, &all);
    let judge_ids = sel
        .judge
        .as_deref()
        .map(crate::judging::panel::judges)
        .unwrap_or_default();
    // Only OpenRouter has `/key`: a run all sent elsewhere never asks it.
    let any_openrouter = models
        .iter()
        .map(|m| m.api_or(s.api))
        .chain(judge_ids.iter().map(|j| entry_of(j).api_or(s.api)))
        .any(|a| a == Api::OpenRouter);
    let key_of = async {
        if any_openrouter {
            client.key().await
        } else {
            Ok(None)
        }
    };
    let (catalog, key) = tokio::join!(client.models(), key_of);
    // A model list without OpenRouter's fields, or a list with no `/key`
    // beside it: the server is not OpenRouter, whatever --api says.
    let not_openrouter = match (&catalog, &key) {
        (Ok(c), _) if c.is_plain() => {
            Some("its GET /models lists no `supported_parameters` and no prices".to_string())
        }
        (Ok(_), Err(CatalogError::Status { status: 404, .. })) => {
            Some("it has no GET /key (404)".to_string())
        }
        _ => None,
    };
    let catalog = catalog.map_err(|e| e.to_string());
    let key = key.map_err(|e| e.to_string()).transpose();
    let price_of = |id: &str| -> Option<Prices> {
        let e = entry_of(id);
        if e.api_or(s.api) == Api::OpenaiCompatible {
            // An OpenAI-compatible server lists no prices: models.yml's.
            return e.price.map(|p| Prices {
                prompt: p.prompt_per_mtok / 1e6,
                completion: p.completion_per_mtok / 1e6,
                request: 0.0,
                internal_reasoning: 0.0,
            });
        }
        let m = catalog.as_ref().ok().and_then(|c| find(c, id))?;
        Some(Prices {
            prompt: m.prompt_price?,
            completion: m.completion_price?,
            request: m.request_price.unwrap_or(0.0),
            internal_reasoning: m.internal_reasoning_price.unwrap_or(0.0),
        })
    };
    let stored = |id: String, as_: Caller| async move {
        match store {
            // A store that cannot answer is said, not silently priced
            // as if it held no replies.
            Some(s) => match s.mean_completion_tokens(&id, as_).await {
                Ok(mean) => mean,
                Err(e) => {
                    eprintln!(
                        "warning: the stored replies of {id} could not be read ({e}); estimated without them"
                    );
                    None
                }
            },
            None => None,
        }
    };
    let judge_id = sel.judge.clone();
    let judge = ModelInputs {
        completion: CompletionInput {
            // The judge's own max_tokens (a reasoning judge's is larger);
            // a panel's largest.
            max_tokens: judge_id
                .as_deref()
                .map(crate::judging::panel::judges)
                .unwrap_or_default()
                .into_iter()
                .filter_map(|j| {
                    let entries = b.models.as_ref().map_or(&[][..], |m| &m.models[..]);
                    crate::judging::judge::settings(j, entries).max_tokens
                })
                .max()
                .or(Some(crate::judging::judge::MAX_TOKENS)),
            stored_mean: match &judge_id {
                Some(j) => stored(j.clone(), Caller::Judge).await,
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
                        request: 0.0,
                        internal_reasoning: 0.0,
                    },
                    |acc, p| {
                        p.map(|p| Prices {
                            prompt: acc.prompt + p.prompt,
                            completion: acc.completion + p.completion,
                            request: acc.request + p.request,
                            // A panel's members each price their own: the
                            // sum at the high end, like completion.
                            internal_reasoning: acc.internal_reasoning
                                + p.internal_reasoning.max(p.completion),
                        })
                    },
                )
        }),
    };
    // The user simulator is sent its models.yml entry as is (no judge's
    // defaults).
    let user = match &sel.user_model {
        Some(id) => ModelInputs {
            completion: CompletionInput {
                max_tokens: all.iter().find(|e| &e.id == id).and_then(|e| e.max_tokens),
                stored_mean: stored(id.clone(), Caller::UserModel).await,
            },
            price: price_of(id),
        },
        None => ModelInputs::default(),
    };
    let mut estimates = Vec::with_capacity(models.len());
    for m in models {
        let inputs = ModelInputs {
            completion: CompletionInput {
                max_tokens: m.max_tokens,
                stored_mean: stored(m.id.clone(), Caller::Model).await,
            },
            price: price_of(&m.id),
        };
        let settings =
            sel.selection
                .settings(m.clone(), judge_id.clone(), Default::default(), false, "");
        estimates.push(estimate::estimate_model(b, &settings, inputs, judge, user)?);
    }
    Ok(Priced {
        estimate: estimate::total(
            estimates,
            judge_id.as_deref(),
            judge,
            sel.user_model.as_deref(),
            user,
        ),
        catalog,
        key,
        api: s.api,
        not_openrouter,
    })
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
        |[lo, hi]| format!("{}–{}", usd(lo, 4), usd(hi, 4)),
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
    writeln!(o, "{}", crate::report::terminal::fitted(t))?;
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
    if let Some(u) = &e.user_model {
        writeln!(
            o,
            "  simulated users {u}: USD per M tokens {}; completion per message: {}",
            per_million(e.user_price),
            e.user_completion_basis.as_deref().unwrap_or("")
        )?;
        for m in e.models.iter().filter(|m| m.simulator_requests > 0) {
            writeln!(
                o,
                "  {}: up to {} simulated-user requests, {} prompt + {} completion tokens",
                m.model,
                m.simulator_requests,
                range_u(m.simulator_prompt_tokens),
                range_u(m.simulator_completion_tokens)
            )?;
        }
    }
    match (&p.catalog, e.cost_usd) {
        (Ok(_), Some([lo, hi])) => writeln!(o, "total: ${} to ${}", usd(lo, 4), usd(hi, 4))?,
        (Ok(_), None) => writeln!(
            o,
            "total: not priced (a model has no price: in GET /models for OpenRouter, `price:` in models.yml for an OpenAI-compatible server, whose cost is unknown without one)"
        )?,
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

/// The request settings refusals check: the models of the run, and
/// models.yml's entries (a judge's own among them).
fn entries(b: &Benchmark, models: &[ModelEntry]) -> Vec<ModelEntry> {
    let mut out = models.to_vec();
    if let Some(m) = &b.models {
        out.extend(
            m.models
                .iter()
                .filter(|e| !models.iter().any(|x| x.id == e.id))
                .cloned(),
        );
    }
    out
}
