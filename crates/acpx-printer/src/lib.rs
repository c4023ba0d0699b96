//! # acpx-printer
//!
//! What a command prints, kept apart from what it does (ripgrep's grep-printer beside
//! grep-searcher): the session engine (`acpx-runtime`) and the owner (`acpx-owner`) produce
//! values and events; this crate turns them into text, JSON and files for a person or a
//! program. The pure page and diff renderers it uses are `acpx-render`; the interchange
//! formats are `acpx-interchange`.
//!
//! | module | job |
//! |---|---|
//! | [`ask`] | the permission question asked on a terminal, and what its answer means |
//! | [`failure`] | a failed turn as its user is told it: message, hint, details |
//! | [`live`] | a turn's live output as text pieces (reply, notes, JSON lines), for any writer |
//! | [`transcript`] | the conversation as readable text and Markdown (`sessions history`, the Markdown export), one line per event (`sessions events`), `sessions show` |
//! | [`error_line`] | a failure as the JSON error line of `--format json` and `--format acp` |
//! | [`reports`] | what a command prints once done, in every format at once ([`reports::Printed`]), and its tables |
//! | [`results`] | the JSON results of session commands (`--format json`) |
//! | [`live_output`] | a turn's live output written as it happens to the front end's terminal |
//! | [`notices`] | what the runtime reports beside a turn (a fallback, a recovery) as text and JSON |
//! | [`export`] | `sessions export`: archive, JSON, NDJSON, Markdown, HTML, ATIF, OTLP |
//! | [`table`] | aligned text tables for people, fitted to the terminal's width |
//! | [`usage`] | the tokens and cost of `sessions usage` as a table |
//! | [`settings`] | `config show`: the settings with their sources as a table, the config files, the agents |
//! | [`viewer`] | the HTML page of a stored session, its log read page by page |
//!
//! ```no_run
//! # async fn demo(store: &dyn acpx_model::Store, record: &acpx_model::SessionRecord) -> Result<(), Box<dyn std::error::Error>> {
//! let mut page = std::fs::File::create("session.html")?;
//! acpx_printer::export::write_export(store, record, acpx_printer::export::ExportFormat::Html, &mut page).await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

pub mod ask;
pub mod error_line;
pub mod export;
pub mod failure;
pub mod live;
pub mod live_output;
pub mod notices;
pub mod reports;
pub mod results;
pub mod settings;
pub mod table;
pub mod transcript;
pub mod usage;
pub mod viewer;

/// The README's examples, compiled and run as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
