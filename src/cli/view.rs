//! `view`: the database as a local web app (issue 32) until Ctrl-C. The
//! scoring (weights, floors, behaviour names) is resolved here as `report`
//! resolves it, and the benchmark folder's rubrics, which labels are
//! checked against, are loaded once; [`crate::view`] serves the rest.

use clap::Args;

use super::report::report_content;
use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::Result;

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// Address to listen on. Any address but loopback needs an access token
    /// (--token, or a random one printed once).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// Port to listen on (0: any free port; the URL printed says which).
    #[arg(long, default_value_t = 8750)]
    pub port: u16,
    /// Access token every request must carry (at least 16 letters, digits,
    /// - or _). Prefer the environment: a flag shows in the process list.
    #[arg(
        long,
        env = "HELMBENCH_VIEW_TOKEN",
        hide_env_values = true,
        value_name = "T"
    )]
    pub token: Option<String>,
    /// Open the URL in the desktop's browser.
    #[arg(long)]
    pub open: bool,
}

pub fn run(s: &Settings, args: &ViewArgs) -> Result<ExitStatus> {
    let url = s.existing_database()?.to_string();
    let (scoring, scoring_source, _hash, behaviour_names) = report_content(s)?;
    let benchmark = s
        .benchmark_dir
        .is_dir()
        .then(|| crate::content::load(&s.benchmark_dir).0);
    if benchmark.is_none() {
        eprintln!(
            "note: benchmark folder {} not found: pages work, labelling needs its rubrics (pass --benchmark-dir)",
            s.benchmark_dir.display()
        );
    }
    runtime()?.block_on(crate::view::serve(crate::view::ViewConfig {
        host: args.host.clone(),
        port: args.port,
        token: args.token.clone(),
        open: args.open,
        database_url: url,
        scoring,
        scoring_source,
        behaviour_names,
        benchmark,
    }))?;
    Ok(ExitStatus::Success)
}
