//! What a command prints once it is done, in every format at once: the commands that read or
//! change the store, and those that drive a session to a result (`sessions new`, `fork`,
//! `cancel`, `set`, …), hand their result to a function here, and the front end writes the
//! part of the [`Printed`] its format asks for. The JSON shapes are [`crate::results`]'s;
//! this adds the lines a person reads and the bare ids of `--format quiet`.
//!
//! | module | commands |
//! |---|---|
//! | [`replay`] | `replay` (its progress too) and `compare` |
//! | [`sessions`] | `sessions list` (table), `search`, `close`, `delete`, `prune`, `new`, `ensure`, `fork`, `adopt`, `list --from-agent` |
//! | [`controls`] | `cancel`, `set-mode`, `set`, a queued `prompt` |
//! | [`events`] | what `sessions events` and `watch` say beside the events |
//! | [`maintenance`] | `migrate`, `fsck`, `sessions import --from-node-acpx`, `sessions usage` |
//! | [`transfer`] | `sessions export`, `sessions import`, `sessions trust` |

pub mod controls;
pub mod events;
pub mod maintenance;
pub mod replay;
pub mod sessions;
pub mod transfer;

use serde_json::Value;

use crate::live::Tone;

/// Colours a piece of text for stdout (the front end knows whether stdout takes colour);
/// [`plain`] when it does not.
pub type Paint<'a> = &'a dyn Fn(Tone, &str) -> String;

/// A [`Paint`] that adds no colour.
pub fn plain(_: Tone, text: &str) -> String {
    text.to_owned()
}

/// A line for stderr and who hears it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    /// A warning: every format but quiet.
    Warning(String),
    /// A note: the text format.
    Note(String),
    /// With `--verbose` only.
    Verbose(String),
}

/// What one command prints, for each format. The front end writes [`Printed::warnings`]
/// (stderr, every format but quiet), then the part of its format on stdout, then
/// [`Printed::notes`] (stderr, text only).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Printed {
    /// Warnings, before the result.
    pub warnings: Vec<String>,
    /// The one JSON value of `--format json` (none: nothing on stdout).
    pub json: Option<Value>,
    /// The lines of `--format text`.
    pub text: Vec<String>,
    /// The lines of `--format quiet` (ids, mostly).
    pub quiet: Vec<String>,
    /// Notes for a person, after the result.
    pub notes: Vec<String>,
}

impl Printed {
    /// A result that is `json` in JSON and the lines `text` for a person, its `quiet` lines
    /// for a script.
    pub fn new(json: Value, text: Vec<String>, quiet: Vec<String>) -> Printed {
        Printed {
            json: Some(json),
            text,
            quiet,
            ..Printed::default()
        }
    }

    /// The same, with a warning before it.
    pub fn warn(mut self, warning: impl Into<String>) -> Printed {
        self.warnings.push(warning.into());
        self
    }

    /// The same, with a note after it.
    pub fn note(mut self, note: impl Into<String>) -> Printed {
        self.notes.push(note.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warnings_and_notes_keep_their_order() {
        let p = Printed::new(Value::Null, vec![], vec![])
            .warn("a")
            .note("b")
            .warn("c")
            .note("d");
        assert_eq!(p.warnings, ["a", "c"]);
        assert_eq!(p.notes, ["b", "d"]);
        assert_eq!(plain(Tone::Bold, "x"), "x");
    }
}
