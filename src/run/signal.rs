//! Ctrl-C and SIGTERM during a run: the first stops sending and gives the
//! requests in flight (already paid for) a grace period to be stored; a
//! second quits at once, which loses nothing stored (results are written
//! in committed transactions and the run stays resumable).

use super::Interrupt;
use crate::error::ExitStatus;

/// Fires on Ctrl-C (or SIGTERM, what CI runners and `kill` send): nothing
/// new is sent, the requests in flight get `grace` to finish and be stored
/// (they are paid for), then they are dropped. A second signal quits at
/// once, which loses nothing stored: results are written in committed
/// transactions and the run stays resumable.
pub fn interrupt_handler(grace: std::time::Duration) -> Interrupt {
    let interrupt = Interrupt::default();
    let i = interrupt.clone();
    tokio::spawn(async move {
        if let Some(name) = interrupt_signal().await {
            eprintln!(
                "{name} received — interrupted: saving what finished; requests in flight get up to {} s (interrupt again to quit at once)",
                grace.as_secs()
            );
            i.fire(name);
            if let Some(name) = interrupt_signal().await {
                eprintln!(
                    "{name} received again: quitting now; `helmbench runs` lists the run to --resume"
                );
                ExitStatus::Interrupted.exit_now();
            }
        }
    });
    interrupt
}

/// Waits for SIGINT or (on unix) SIGTERM and names it; None if no handler
/// could be set.
async fn interrupt_signal() -> Option<&'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            return tokio::select! {
                r = tokio::signal::ctrl_c() => r.ok().map(|()| "SIGINT"),
                r = term.recv() => r.map(|()| "SIGTERM"),
            };
        }
    }
    tokio::signal::ctrl_c().await.ok().map(|()| "SIGINT")
}
