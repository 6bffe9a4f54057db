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
//! router, the bind, serving until Ctrl-C). Reads and the one write (a
//! label) go through [`crate::store`]; scores come from [`crate::report`].

mod case;
mod compare;
mod label;
mod layout;
mod results;
mod run;
mod runs;
mod security;
mod server;
mod state;

pub use server::{ViewConfig, serve};
