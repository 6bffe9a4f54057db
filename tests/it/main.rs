//! Integration tests: the real binary against temp benchmarks (and, for the
//! runner, a mock OpenRouter server on 127.0.0.1).

mod author_shapes;
mod batch_models;
mod bench_smoke;
mod budget;
mod compare;
mod compose;
mod content_errors;
mod fuzz_regressions;
mod layout;
mod pipes;
mod provider;
mod report;
mod review;
mod run_batch;
mod score;
mod secrets;
mod store;
mod support;
