//! Integration tests: the real binary against temp benchmarks and, where it
//! talks to OpenRouter, a mock server on 127.0.0.1. One file per command or
//! concept; what they share is in `support`.

mod author_shapes;
mod batch_models;
mod bench_smoke;
mod bounded;
mod budget;
mod byok;
mod check;
mod compare;
mod compose;
mod content_errors;
mod costs;
mod database_locks;
mod estimate;
mod export;
mod fuzz_regressions;
mod judges;
mod judging;
mod kill_window;
mod layout;
mod litellm;
mod moderation;
mod openai_compat;
mod ownership;
mod paid_replies;
mod pipes;
mod preflight;
mod provider;
mod provider_faults;
mod pseudonym;
mod read_commands;
mod reading;
mod report;
mod resume;
mod review;
mod rough_edges;
mod run_batch;
mod score;
mod secrets;
mod selectors;
mod signals;
mod store;
mod support;
mod terminal;
mod totals;
