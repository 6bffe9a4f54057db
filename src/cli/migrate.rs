//! `migrate`: upgrades an existing database to this version's schema, which
//! the read-only commands (`runs`, `report`, `costs`, `export`) never do;
//! with `--to postgres://…`, copies a SQLite database (`--from`, else
//! `--database-url`) into PostgreSQL instead (issue 34; the copy itself is
//! the store's).

use std::io::IsTerminal;

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::settings::{Settings, runtime};
use crate::domain::{CopyStep, TableCopy, redact_password};
use crate::store::Store;
use crate::{Error, ExitStatus, Result};

#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Copy this SQLite database (`sqlite://results.db` or a path) into
    /// `--to` [default: --database-url].
    #[arg(long, value_name = "URL", requires = "to")]
    pub from: Option<String>,
    /// A PostgreSQL database (`postgres://user:password@host:port/db`) to
    /// copy into: its schema is migrated first; runs it already holds
    /// (other files', or this file's from an earlier copy) are kept, so
    /// several files make one store and a second copy writes nothing.
    #[arg(long, value_name = "URL")]
    pub to: Option<String>,
}

pub fn run(s: &Settings, args: &MigrateArgs) -> Result<ExitStatus> {
    if let Some(to) = &args.to {
        let from = args.from.as_deref().unwrap_or(&s.database_url);
        return copy(s, from, to);
    }
    let url = s.existing_database()?;
    runtime()?.block_on(async {
        let applied = Store::pending_migrations(url).await;
        let store = Store::open(url).await?;
        let after = store.applied_migrations().await?;
        store.close().await;
        if applied == 0 {
            eprintln!("database {url} is up to date ({} migrations)", after.len());
        } else {
            eprintln!(
                "database {url} upgraded: {applied} migration{} applied, {} in all",
                if applied == 1 { "" } else { "s" },
                after.len()
            );
        }
        Ok(ExitStatus::Success)
    })
}

/// `migrate --from FROM --to TO`: the copy, its progress on stderr, then
/// the counts per table on stdout; exit 1 when a table's counts differ.
fn copy(s: &Settings, from: &str, to: &str) -> Result<ExitStatus> {
    let (shown_from, shown_to) = (redact_password(from), redact_password(to));
    if !Store::is_team_url(to) {
        return Err(Error::usage(format!(
            "--to {shown_to}: expected a PostgreSQL URL (postgres://user@host:port/database)"
        )));
    }
    if Store::is_team_url(from) {
        return Err(Error::usage(format!(
            "--from {shown_from}: expected a SQLite database (sqlite://file.db or a path); the copy goes from SQLite into PostgreSQL"
        )));
    }
    if !Store::database_exists(from) {
        return Err(Error::usage(format!(
            "--from {shown_from}: no database there (pass the SQLite file to copy)"
        )));
    }
    if !s.quiet {
        eprintln!("copying {shown_from} into {shown_to}");
    }
    let mut progress = Progress::new(s.quiet);
    let tables = runtime()?.block_on(Store::copy_to_postgres(from, to, &mut |step| {
        progress.step(step)
    }))?;
    let mut t =
        crate::report::terminal::table(["table", "source rows", "written", "in the target", ""]);
    for c in &tables {
        t.add_row([
            c.table.clone(),
            c.source.to_string(),
            c.written.to_string(),
            c.target.to_string(),
            if c.matches() { "ok" } else { "MISMATCH" }.to_string(),
        ]);
    }
    println!("{t}");
    let written: u64 = tables.iter().map(|c| c.written).sum();
    let rows: u64 = tables.iter().map(|c| c.source).sum();
    let wrong: Vec<&TableCopy> = tables.iter().filter(|c| !c.matches()).collect();
    if !wrong.is_empty() {
        let names: Vec<String> = wrong
            .iter()
            .map(|c| {
                format!(
                    "{} ({} in the source, {} of them in the target)",
                    c.table, c.source, c.target
                )
            })
            .collect();
        return Err(Error::Tool {
            message: format!(
                "the copy into {shown_to} does not match the source: {}",
                names.join(", ")
            ),
            source: None,
        });
    }
    if !s.quiet {
        if written == 0 {
            eprintln!("nothing to copy: {rows} rows already there");
        } else {
            eprintln!(
                "wrote {written} rows into {shown_to}; {rows} rows in {} tables, counts match",
                tables.len()
            );
        }
    }
    Ok(ExitStatus::Success)
}

/// A bar per table on a terminal; elsewhere a line per table (none with -q).
struct Progress {
    quiet: bool,
    terminal: bool,
    bar: Option<ProgressBar>,
    table: String,
    rows: u64,
}

impl Progress {
    fn new(quiet: bool) -> Progress {
        Progress {
            quiet,
            terminal: std::io::stderr().is_terminal(),
            bar: None,
            table: String::new(),
            rows: 0,
        }
    }

    fn step(&mut self, step: CopyStep<'_>) {
        if self.quiet {
            return;
        }
        match step {
            CopyStep::Table { table, rows } => {
                self.table = table.to_string();
                self.rows = rows;
                if self.terminal {
                    let bar =
                        ProgressBar::with_draw_target(Some(rows), ProgressDrawTarget::stderr());
                    if let Ok(style) =
                        ProgressStyle::with_template("{msg:>18} [{bar:30}] {pos}/{len} rows")
                    {
                        bar.set_style(style.progress_chars("=> "));
                    }
                    bar.set_message(table.to_string());
                    self.bar = Some(bar);
                }
            }
            CopyStep::Rows(n) => {
                if let Some(bar) = &self.bar {
                    bar.inc(n);
                }
            }
            CopyStep::TableDone => match self.bar.take() {
                Some(bar) => bar.finish(),
                None => eprintln!("{}: {} rows", self.table, self.rows),
            },
        }
    }
}
