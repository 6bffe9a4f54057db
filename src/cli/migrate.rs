//! `migrate`: upgrades an existing database to this version's schema, which
//! the read-only commands (`runs`, `report`, `costs`, `export`) never do.

use clap::Args;

use super::settings::{Settings, runtime};
use crate::ExitStatus;
use crate::Result;
use crate::store::Store;

#[derive(Debug, Args)]
pub struct MigrateArgs {}

pub fn run(s: &Settings, _args: &MigrateArgs) -> Result<ExitStatus> {
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
