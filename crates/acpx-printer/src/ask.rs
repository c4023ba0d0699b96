//! The permission question asked on a terminal under `--approve-reads`, and how its answer
//! reads: `[permission] Allow <title> [<kind>]? (y/N; a = always, v = never: …)`. `a` and `v`
//! answer for the rest of the session (docs/format.md § One decision per action). The
//! [`TtyPrompter`] asks it, and runs elicitation dialogs, on the terminal (`/dev/tty`, so a
//! prompt piped on stdin does not interfere); the front end writes and draws
//! ([`TtyHooks`]).

use std::io::{BufRead, IsTerminal};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use acpx_runtime::text::printable;
use acpx_runtime::{
    ElicitationQuestion, ElicitationReply, PermissionAnswer, PermissionPrompter, PermissionQuestion,
};

/// What the terminal prompter needs from its front end.
pub trait TtyHooks: Send + Sync + std::fmt::Debug + 'static {
    /// Writes the question to stderr (no newline after it: the answer is typed there).
    fn write_question(&self, text: &str);
    /// Stops (`true`) or resumes (`false`) drawing the activity line while a question waits.
    fn pause_activity(&self, paused: bool);
    /// Runs an elicitation dialog on the terminal until it is answered or `stop` is set.
    fn elicit(&self, q: &ElicitationQuestion, stop: &AtomicBool) -> Option<ElicitationReply>;
}

/// Asks on the terminal ([`permission_question`], [`permission_answer`]), the answer read
/// from `/dev/tty`.
#[derive(Debug)]
pub struct TtyPrompter(Arc<dyn TtyHooks>);

impl TtyPrompter {
    /// A prompter when stderr is a terminal and `/dev/tty` can be opened; otherwise none (and
    /// the runtime denies what it would have asked).
    pub fn available(hooks: Arc<dyn TtyHooks>) -> Option<Arc<dyn PermissionPrompter>> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        std::fs::File::open("/dev/tty").ok()?;
        Some(Arc::new(TtyPrompter(hooks)))
    }
}

#[async_trait::async_trait]
impl PermissionPrompter for TtyPrompter {
    async fn ask(&self, q: &PermissionQuestion) -> bool {
        self.answer(q).await.approved
    }

    async fn answer(&self, q: &PermissionQuestion) -> PermissionAnswer {
        let question = permission_question(q);
        // Nothing drawn over the question while it waits for its answer.
        self.0.pause_activity(true);
        let hooks = self.0.clone();
        let answer = tokio::task::spawn_blocking(move || {
            hooks.write_question(&question);
            let Ok(tty) = std::fs::File::open("/dev/tty") else {
                return PermissionAnswer::once(false);
            };
            let mut line = String::new();
            if std::io::BufReader::new(tty).read_line(&mut line).is_err() {
                return PermissionAnswer::once(false);
            }
            permission_answer(&line)
        })
        .await
        .unwrap_or(PermissionAnswer::once(false));
        self.0.pause_activity(false);
        answer
    }

    async fn elicit(&self, q: &ElicitationQuestion) -> Option<ElicitationReply> {
        /// Stops the dialog, and brings the activity line back, when the answer is no longer
        /// needed (this future dropped) or given. A stopped dialog is given a moment to say
        /// so before what ended it is shown.
        struct Done(
            Arc<AtomicBool>,
            std::sync::mpsc::Receiver<()>,
            Arc<dyn TtyHooks>,
        );
        impl Drop for Done {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
                let _ = self.1.recv_timeout(Duration::from_millis(500));
                self.2.pause_activity(false);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (ended, ended_rx) = std::sync::mpsc::channel();
        let _done = Done(stop.clone(), ended_rx, self.0.clone());
        self.0.pause_activity(true);
        let q = q.clone();
        let hooks = self.0.clone();
        tokio::task::spawn_blocking(move || {
            let reply = hooks.elicit(&q, &stop);
            let _ = ended.send(());
            reply
        })
        .await
        .ok()
        .flatten()
    }
}

/// The question for `q`, on a line of its own, the cursor left after it. The agent's words
/// are shown with no control character reaching the terminal (a `\r` or an escape sequence
/// could rewrite the question).
pub fn permission_question(q: &PermissionQuestion) -> String {
    let title = printable(&q.title).into_owned();
    let kind = q
        .kind
        .as_deref()
        .map(|k| format!(" [{}]", printable(k)))
        .unwrap_or_default();
    // What "always" covers: every call of this kind (or with this title) in the session.
    let scope = match q.kind.as_deref() {
        Some(k) => format!("every [{}] call", printable(k)),
        None => "this title".to_owned(),
    };
    format!(
        "\n[permission] Allow {title}{kind}? (y/N; a = always, v = never: {scope} \
         for the rest of this session) "
    )
}

/// What a typed line answers: `y`/`yes` once, `a`/`always` for the session, `v`/`never`
/// refused for the session; anything else refuses once.
pub fn permission_answer(line: &str) -> PermissionAnswer {
    match line.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => PermissionAnswer::once(true),
        "a" | "always" => PermissionAnswer {
            approved: true,
            always: true,
        },
        "v" | "never" => PermissionAnswer {
            approved: false,
            always: true,
        },
        _ => PermissionAnswer::once(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_read_case_and_space_blind() {
        assert_eq!(permission_answer(" Y\n"), PermissionAnswer::once(true));
        assert_eq!(
            permission_answer("always"),
            PermissionAnswer {
                approved: true,
                always: true
            }
        );
        assert_eq!(
            permission_answer("V"),
            PermissionAnswer {
                approved: false,
                always: true
            }
        );
        assert_eq!(permission_answer(""), PermissionAnswer::once(false));
        assert_eq!(permission_answer("sure"), PermissionAnswer::once(false));
    }

    #[test]
    fn the_question_names_the_kind_and_escapes_the_title() {
        let q = PermissionQuestion {
            method: "session/request_permission".into(),
            title: "Edit a.rs\u{1b}[2K".into(),
            kind: Some("edit".into()),
            details: serde_json::Value::Null,
        };
        let text = permission_question(&q);
        assert!(text.starts_with("\n[permission] Allow Edit a.rs"));
        assert!(!text.contains('\u{1b}'));
        assert!(text.contains(" [edit]? (y/N; a = always, v = never: every [edit] call"));
    }
}
