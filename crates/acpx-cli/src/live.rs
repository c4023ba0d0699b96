//! Live output of a turn, fed by the runtime's event observer, and the terminal permission
//! prompt.
//!
//! - `text`: the agent's reply streams to stdout as it arrives; thoughts, tool calls, plans,
//!   mode changes, client operations and permission decisions go to stderr as short lines.
//! - `json`: every recorded event envelope, one per line, exactly as in the log, up to and
//!   including the turn's `prompt_done` / `prompt_error`.
//! - `quiet`: nothing while streaming (the caller prints the final text).

use std::collections::HashMap;
use std::io::{BufRead, IsTerminal};
use std::sync::{Arc, Mutex};

use acpx_model::{EventEnvelope, EventType};
use acpx_runtime::{Observer, PermissionPrompter, PermissionQuestion};
use serde_json::Value;

use crate::output::{stderr_line, stderr_text, Out, Style};
use crate::render::clip;

/// What was printed last, to place newlines between stdout text and stderr notes.
#[derive(Debug, Default, PartialEq, Eq, Clone, Copy)]
enum Last {
    #[default]
    Nothing,
    Reply,
    Thought,
    Note,
}

#[derive(Debug, Default)]
struct State {
    last: Last,
    /// Whether the reply text on stdout ends without a newline.
    reply_open: bool,
    tool_titles: HashMap<String, String>,
    /// The request id of this invocation's turn, from its `prompt_started`. Events recorded
    /// before it (attaching, recovering an earlier interrupted turn) are not the turn's.
    turn: Option<String>,
    /// Set once the turn's terminal event was shown: later events (shutdown) are not turn
    /// output.
    done: bool,
    /// The turn ended with `prompt_error`: a `prompt_started` after it is a retry
    /// (`--prompt-retries`), shown as this invocation's turn.
    failed: bool,
}

/// Renders recorded events as they arrive.
#[derive(Debug, Clone)]
pub struct LiveOutput {
    out: Out,
    state: Arc<Mutex<State>>,
}

impl LiveOutput {
    pub fn new(out: Out) -> Self {
        LiveOutput {
            out,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// The observer to give the runtime.
    pub fn observer(&self) -> Observer {
        let me = self.clone();
        Arc::new(move |e: &EventEnvelope| me.on_event(e))
    }

    /// Ends the reply line on stdout if it is open (text format).
    pub fn finish(&self) {
        let mut st = self.lock();
        if st.reply_open {
            self.out.raw("\n");
            st.reply_open = false;
        }
    }

    /// Whether the turn's terminal event was printed.
    pub fn saw_end(&self) -> bool {
        self.lock().done
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Renders one recorded event (as the observer does).
    pub fn on_event(&self, e: &EventEnvelope) {
        let mut st = self.lock();
        if st.done && st.failed && e.kind() == EventType::PromptStarted {
            st.done = false;
            st.turn = None;
        }
        if st.done {
            return;
        }
        if st.turn.is_none() && e.kind() == EventType::PromptStarted {
            st.turn = Some(e.request_id.clone().unwrap_or_default());
        }
        let in_turn = st.turn.is_some();
        let terminal = in_turn
            && matches!(e.kind(), EventType::PromptDone | EventType::PromptError)
            && e.request_id.as_deref().unwrap_or_default()
                == st.turn.as_deref().unwrap_or_default();
        match self.out.format {
            crate::config::Format::Json => self.out.raw(&format!("{}\n", e.to_ndjson())),
            crate::config::Format::Quiet => {}
            // Before the turn only lifecycle notes (with --verbose) are of interest.
            crate::config::Format::Text if in_turn || e.kind() == EventType::LifecycleEvent => {
                self.text(&mut st, e)
            }
            crate::config::Format::Text => {}
        }
        if terminal {
            st.done = true;
            st.failed = e.kind() == EventType::PromptError;
        }
    }

    fn note(&self, st: &mut State, line: String) {
        if st.reply_open {
            self.out.raw("\n");
            st.reply_open = false;
        }
        if st.last == Last::Thought {
            stderr_line("");
        }
        stderr_line(&line);
        st.last = Last::Note;
    }

    fn text(&self, st: &mut State, e: &EventEnvelope) {
        let o = &self.out;
        let p = &e.payload;
        let s = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match e.kind() {
            EventType::SessionUpdate => {
                let u = p.get("update").cloned().unwrap_or(Value::Null);
                let kind = s(&u, "sessionUpdate");
                match kind.as_str() {
                    "agent_message_chunk" => {
                        if let Some(t) = u
                            .get("content")
                            .and_then(|c| c.get("text"))
                            .and_then(Value::as_str)
                        {
                            if st.last == Last::Thought {
                                stderr_line("");
                            }
                            o.raw(t);
                            st.reply_open = !t.ends_with('\n');
                            st.last = Last::Reply;
                        }
                    }
                    "agent_thought_chunk" => {
                        if let Some(t) = u
                            .get("content")
                            .and_then(|c| c.get("text"))
                            .and_then(Value::as_str)
                        {
                            if st.last != Last::Thought {
                                if st.reply_open {
                                    o.raw("\n");
                                    st.reply_open = false;
                                }
                                stderr_text(&format!(
                                    "{} ",
                                    o.paint_err(Style::Magenta, "[thinking]")
                                ));
                            }
                            stderr_text(&o.paint_err(Style::Dim, t));
                            st.last = Last::Thought;
                        }
                    }
                    "tool_call" | "tool_call_update" => {
                        let id = s(&u, "toolCallId");
                        let title = u.get("title").and_then(Value::as_str).map(str::to_owned);
                        if let Some(t) = &title {
                            st.tool_titles.insert(id.clone(), t.clone());
                        }
                        let status = s(&u, "status");
                        // Updates without a status change (streamed content) stay quiet.
                        if kind == "tool_call" || !status.is_empty() {
                            let name = title
                                .or_else(|| st.tool_titles.get(&id).cloned())
                                .unwrap_or_else(|| id.clone());
                            let status = if status.is_empty() {
                                "pending".to_owned()
                            } else {
                                status
                            };
                            let colour = match status.as_str() {
                                "completed" => Style::Green,
                                "failed" => Style::Red,
                                _ => Style::Cyan,
                            };
                            let line = format!(
                                "{} {} ({})",
                                o.paint_err(Style::Cyan, "[tool]"),
                                clip(&name, 100),
                                o.paint_err(colour, &status)
                            );
                            self.note(st, line);
                        }
                    }
                    "plan" => {
                        let entries = u
                            .get("entries")
                            .and_then(Value::as_array)
                            .cloned()
                            .unwrap_or_default();
                        let mut line = format!(
                            "{} {} step(s)",
                            o.paint_err(Style::Blue, "[plan]"),
                            entries.len()
                        );
                        for en in entries.iter().take(10) {
                            line.push_str(&format!(
                                "\n  - {} ({})",
                                clip(&s(en, "content"), 100),
                                s(en, "status")
                            ));
                        }
                        self.note(st, line);
                    }
                    "current_mode_update" => {
                        let line = format!(
                            "{} {}",
                            o.paint_err(Style::Blue, "[mode]"),
                            s(&u, "currentModeId")
                        );
                        self.note(st, line);
                    }
                    "session_info_update" => {
                        if let Some(t) = u.get("title").and_then(Value::as_str) {
                            let line =
                                format!("{} {}", o.paint_err(Style::Blue, "[title]"), clip(t, 100));
                            self.note(st, line);
                        }
                    }
                    _ if o.verbose => {
                        let line = format!("{} {kind}", o.paint_err(Style::Dim, "[update]"));
                        self.note(st, line);
                    }
                    _ => {}
                }
            }
            EventType::ClientOperation => {
                let method = s(p, "method");
                let status = s(p, "status");
                let summary = s(p, "summary");
                let line = if method == "session/request_permission" {
                    format!(
                        "{} {}",
                        o.paint_err(Style::Yellow, "[permission]"),
                        clip(&summary, 120)
                    )
                } else {
                    let colour = if status == "failed" {
                        Style::Red
                    } else {
                        Style::Dim
                    };
                    format!(
                        "{} {} ({})",
                        o.paint_err(Style::Dim, "[client]"),
                        clip(&summary, 120),
                        o.paint_err(colour, &status)
                    )
                };
                self.note(st, line);
            }
            EventType::PromptDone => {
                let line = format!(
                    "{} {}",
                    o.paint_err(Style::Green, "[done]"),
                    s(p, "stopReason")
                );
                self.note(st, line);
            }
            EventType::PromptError => {
                let line = format!("{} {}", o.paint_err(Style::Red, "[error]"), s(p, "message"));
                self.note(st, line);
            }
            EventType::ControlDone | EventType::ControlError | EventType::ControlStarted
                if o.verbose =>
            {
                let line = format!(
                    "{} {} {}",
                    o.paint_err(Style::Dim, "[control]"),
                    s(p, "action"),
                    e.event_type
                );
                self.note(st, line);
            }
            EventType::LifecycleEvent if o.verbose => {
                let reason = s(p, "reason");
                let line = format!(
                    "{} {}{}",
                    o.paint_err(Style::Dim, "[acpx]"),
                    s(p, "phase"),
                    if reason.is_empty() {
                        String::new()
                    } else {
                        format!(" ({reason})")
                    }
                );
                self.note(st, line);
            }
            _ => {}
        }
    }
}

/// Asks on the terminal under `--approve-reads`: `[permission] Allow <title> [<kind>]? (y/N)`.
/// The answer is read from `/dev/tty`, so a prompt piped on stdin does not interfere.
#[derive(Debug)]
pub struct TtyPrompter;

impl TtyPrompter {
    /// A prompter when stderr is a terminal and `/dev/tty` can be opened; otherwise none (and
    /// the runtime denies what it would have asked).
    pub fn available() -> Option<Arc<dyn PermissionPrompter>> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        std::fs::File::open("/dev/tty").ok()?;
        Some(Arc::new(TtyPrompter))
    }
}

#[async_trait::async_trait]
impl PermissionPrompter for TtyPrompter {
    async fn ask(&self, q: &PermissionQuestion) -> bool {
        let title = q.title.clone();
        let kind = q
            .kind
            .clone()
            .map(|k| format!(" [{k}]"))
            .unwrap_or_default();
        tokio::task::spawn_blocking(move || {
            stderr_text(&format!("\n[permission] Allow {title}{kind}? (y/N) "));
            let Ok(tty) = std::fs::File::open("/dev/tty") else {
                return false;
            };
            let mut line = String::new();
            if std::io::BufReader::new(tty).read_line(&mut line).is_err() {
                return false;
            }
            matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
        })
        .await
        .unwrap_or(false)
    }
}
