//! Writes what a killed `run-batch` left for a run (its result log, and a
//! pending file of results it could not write) without sending anything:
//! the first thing `run-batch --resume` does. `bench/faults.sh` uses it to
//! count the results a kill -9 kept.
//!
//! ```sh
//! cargo run --release --example write_kept -- DATABASE RUN_ID
//! ```
//!
//! Prints how many results it wrote.

use helmbench::store::Store;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, database, run_id] = args.as_slice() else {
        return Err("usage: write_kept DATABASE RUN_ID".into());
    };
    let store = Store::open(database).await?;
    let written = helmbench::run::write_kept(&store, run_id.parse()?).await?;
    println!("{written}");
    Ok(())
}
