//! Shell integration (issue 44): completions for bash, zsh, fish,
//! PowerShell and elvish, and man pages, generated from the clap
//! definitions themselves so they never drift from the commands.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use super::output::out;
use crate::ExitStatus;
use crate::{Error, Result};

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete in. Bash: `source <(helmbench completions bash)`
    /// (or save it under ~/.local/share/bash-completion/completions/helmbench).
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct ManArgs {
    /// Write one page per command (helmbench.1, helmbench-run-batch.1, …)
    /// into this folder instead of printing helmbench(1).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

/// `cmd`: helmbench's whole command line definition (`Cli::command()`).
pub fn completions(args: &CompletionsArgs, mut cmd: clap::Command) -> Result<ExitStatus> {
    let mut o = out();
    clap_complete::generate(args.shell, &mut cmd, "helmbench", &mut o);
    o.flush()?;
    Ok(ExitStatus::Success)
}

/// `cmd`: helmbench's whole command line definition (`Cli::command()`).
pub fn man(args: &ManArgs, cmd: clap::Command) -> Result<ExitStatus> {
    let Some(dir) = &args.out_dir else {
        let mut o = out();
        clap_mangen::Man::new(cmd).render(&mut o)?;
        o.flush()?;
        return Ok(ExitStatus::Success);
    };
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::usage(format!(
            "--out-dir {}: cannot create the folder: {e}",
            dir.display()
        ))
    })?;
    let mut pages = vec![("helmbench".to_string(), cmd.clone())];
    for sub in cmd.get_subcommands() {
        let name = format!("helmbench-{}", sub.get_name());
        // clap names commands with &'static str (its `string` feature is
        // off); a few names, once per process.
        let page = sub.clone().name(&*name.clone().leak());
        pages.push((name, page));
    }
    for (name, page) in pages {
        let path = dir.join(format!("{name}.1"));
        let mut buf = Vec::new();
        clap_mangen::Man::new(page).render(&mut buf)?;
        std::fs::write(&path, buf)
            .map_err(|e| Error::usage(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(ExitStatus::Success)
}
