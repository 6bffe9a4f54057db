//! The binary: everything lives in the library ([`helmbench::cli::main`]),
//! so tests can drive it in-process.

use std::process::ExitCode;

// mimalloc: a batch allocates and frees a few dozen buffers per request on
// every worker thread; glibc's allocator was a sixth of the CPU at high
// concurrency (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    helmbench::cli::main()
}
