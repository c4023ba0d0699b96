//! Converting sessions written by the Node acpx 0.19 into the format of `docs/format.md`.
//!
//! Node keeps, per session, `<enc(id)>.json` (schema `acpx.session.v1` but snake_case, with the
//! conversation at the top level) and a journal `<enc(id)>.stream.ndjson` (plus rotated
//! `.stream.<N>.ndjson`, 1 the newest) of raw ACP JSON-RPC frames and
//! `{"schema":"acpx.session.journal.v1","type":"segment"|"turn_started"|"turn_result"}` markers.
//!
//! The journal becomes the event log:
//!
//! | journal line | event |
//! |---|---|
//! | `session/prompt` request | `prompt_started` (with `userMessageId` and the full `prompt`) |
//! | `session/update` notification | `session_update`, the `params` unchanged |
//! | response to `session/prompt` | `prompt_done` (`stopReason`, `usage`) or `prompt_error` |
//! | `turn_result` marker of a turn not ended yet | `prompt_done` / `prompt_error` |
//! | a turn that never got a result | `prompt_error` (`outcome: interrupted`) before the next turn |
//! | `fs/*`, `terminal/*`, `session/request_permission` requests | `client_operation` |
//! | any other frame (initialize, session/new, responses, …) | `node_journal` (`{"message": <frame>}`), kept verbatim |
//! | `segment` markers | nothing (anchors of Node's own reader) |
//!
//! Each event carries the ACP session id its frame names (`params.sessionId`, or the
//! `session/new` result's), so a journal spanning several ACP sessions (Node's load → new
//! fallback) keeps every turn. The journal's prompts take the ids of Node's `User` messages
//! (paired from the end, texts agreeing), so Node's token usage keyed by them still applies.
//! Only files Node itself would load are imported ([`loadable`]); a torn last journal line is
//! withheld and reported with its byte offset.
//!
//! Node trims the stored conversation (200 messages, long text cut with "..."), while the
//! journal holds every update. So the thread is rebuilt from the converted events with the
//! runtime's reducer, and used whenever it holds at least as many user turns as the record;
//! otherwise (older journal segments were rotated away) the record's own messages are kept.
//! Journal lines carry no timestamps: events take the time of the turn they belong to
//! (`turn_started` timestamps when present, else the record's), never going backwards.
//!
//! | module | job |
//! |---|---|
//! | [`record`] | the record document, [`ThreadSource`], [`Converted`] |
//! | [`journal`] | the journal lines → events |
//! | [`convert`] | one session: record + journal, id sanitising ([`safe_id`]) |
//! | [`scan`] | the home directory: record files, journal segments (torn tails), [`import_node`] |
//! | [`loadable`] | which files Node itself would load (the others are skipped, with the reason) |
//! | [`archive`] | Node's `sessions export` archive |

pub mod archive;
pub mod convert;
pub mod journal;
pub mod loadable;
pub mod record;
pub mod scan;

pub use convert::{convert_session, safe_id};
pub use journal::{convert_journal, JournalConversion};
pub use record::{
    convert_record, is_node_record, Converted, ThreadSource, JOURNAL_SCHEMA, NODE_FRAME_EVENT,
};
pub use scan::{
    import_node, import_node_home, NodeImportOptions, NodeImportReport, NodeImported, NodeSkipped,
    SkipKind,
};
