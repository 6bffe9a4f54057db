//! `helmbench view` (issue 32): the database as a local web app, to read
//! every reply, filter and search the results, and label the judge's
//! verdicts. Server-rendered pages (maud templates: every value escaped by
//! construction), a little JavaScript for keyboard shortcuts and a live
//! runs list, both embedded in the binary, and a security layer in front of
//! every route, because model replies are hostile text.
//!
//! Files, by concept: [`state`] (what the server holds), [`security`] (the
//! middleware: Host, token, CSRF, Origin, headers; the session), [`layout`]
//! (the page shell and shared bits), one file per page ([`runs`], [`run`],
//! [`results`], [`case`], [`label`], [`compare`]), and [`server`] (the
//! router, the bind, serving until Ctrl-C), with what keeps pages fast on a
//! large database: [`search`] (a text search index built and kept in the
//! background, in its own file) and [`reports`] (the Run page's numbers,
//! computed once per state of the run). Reads and the one write (a label)
//! go through [`crate::store`]; scores come from [`crate::report`].

mod case;
mod compare;
mod label;
mod layout;
mod reports;
mod results;
mod run;
mod runs;
mod search;
mod security;
mod server;
mod state;
mod transcript;
mod variants;

pub use server::{ViewConfig, serve};
