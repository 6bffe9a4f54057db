//! The binary: everything lives in the library ([`helmbench::cli::main`]),
//! so tests can drive it in-process.

use std::process::ExitCode;

// mimalloc: a batch allocates and frees a few dozen buffers per request on
// every worker thread; glibc's allocator was a sixth of the CPU at high
// concurrency (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    no_transparent_huge_pages();
    helmbench::cli::main()
}

/// mimalloc's arenas were backed by transparent huge pages: every fresh
/// page it touched was a 2 MB page the kernel zeroed, and a page it had
/// given back (purged) was zeroed again when reused, 17 % of a run's CPU in
/// `clear_page` (BENCHMARKS.md, "CPU per call, third sitting"). This
/// process's memory uses ordinary pages: 10 % less CPU a call and a third
/// less memory. (mimalloc's `MIMALLOC_ALLOW_THP=0` does the same, but it is
/// read before `main`.)
#[cfg(target_os = "linux")]
fn no_transparent_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integers only and changes a flag of
    // the process, no memory Rust knows of; a kernel without it says EINVAL,
    // which leaves things as they were.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn no_transparent_huge_pages() {}
