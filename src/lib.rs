//! helmbench: runs the HELMBench mental-health safety benchmark against LLMs
//! through OpenRouter, judges the replies, stores everything in SQLite and
//! reports costs and severity-weighted scores.
//!
//! The flow: [`loader`] reads the content ([`markdown`] for frontmatter and
//! H2-to-XML), [`discovery`] enumerates test cases, [`compose`] builds each
//! prompt, and [`cli`] drives it all.

pub mod benchmark;
pub mod cli;
pub mod content;
pub mod error;
pub mod judging;
pub mod openrouter;
pub mod report;
pub mod run;
pub mod scoring;
pub mod store;

pub use error::{Error, ExitStatus, Result};
