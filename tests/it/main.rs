//! Integration tests: the real binary against temp benchmarks (and, for the
//! runner, a mock OpenRouter server on 127.0.0.1).

mod batch;
mod bench_smoke;
mod byok;
mod compare;
mod content;
mod edges;
mod fidelity;
mod fuzz_regressions;
mod harness;
mod judges;
mod layout;
mod moderation;
mod openrouter_realism;
mod pipes;
mod preflight;
mod reliability;
mod report;
mod review;
mod runner;
mod score;
mod spend;
mod store;
