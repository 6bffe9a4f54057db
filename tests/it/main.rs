//! Integration tests: the real binary against temp benchmarks (and, for the
//! runner, a mock OpenRouter server on 127.0.0.1).

mod batch;
mod bench_smoke;
mod compare;
mod content;
mod edges;
mod fidelity;
mod fuzz_regressions;
mod harness;
mod layout;
mod openrouter_realism;
mod pipes;
mod reliability;
mod report;
mod review;
mod rough_edges;
mod runner;
mod score;
mod spend;
mod store;
