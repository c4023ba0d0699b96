//! An agent's elicitation asked at the terminal (README § Elicitations): a form field by
//! field, or a URL to visit. Questions go to stderr, answers are read from `/dev/tty` (as for
//! permission questions), so a prompt piped on stdin does not interfere.
//!
//! - Each field shows its title, name, type, whether it is required, its default, its bounds,
//!   its description and its numbered choices; a number picks a choice (comma-separated for a
//!   multi-select), `y`/`n` answer yes/no. A value that does not fit is named and asked again.
//!   Enter takes the default, or leaves an optional field out.
//! - `:decline` declines the form, `:cancel` or Ctrl-D cancels it.
//! - A URL is printed, never opened; Enter says the visit is done (accept), `d` declines,
//!   `c` or Ctrl-D cancels. The agent's `elicitation/complete` ends the wait.
//!
//! Reading stops as soon as the runtime no longer needs the answer (the `stop` flag: the
//! agent completed the URL visit, or the turn was cancelled), so no later question loses a
//! line typed for it.
//!
//! The front end hands [`ask`] its way of writing to stderr, so the dialog shares the
//! terminal with its other output (a spinner cleared first).

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use acpx_runtime::text::printable;
use acpx_runtime::{
    ElicitationAsk, ElicitationForm, ElicitationQuestion, ElicitationReply, FormField,
};
use serde_json::{Map, Value};

/// How the dialog writes to stderr (the front end's; it must not fail or panic).
pub type WriteStderr = fn(&[u8]);

/// One dialog at a time on the terminal.
static ASKING: Mutex<()> = Mutex::new(());

/// How often a waiting read looks for a line and at its `stop` flag.
const STOP_CHECK: std::time::Duration = std::time::Duration::from_millis(50);

/// What was typed: a line, or the end of input (Ctrl-D, the terminal gone), or nothing
/// because the answer is no longer needed.
enum Typed {
    Line(String),
    End,
    Stopped,
}

/// Asks `question` at the terminal, writing with `write`. `None` when `/dev/tty` cannot be
/// opened.
pub fn ask(
    question: &ElicitationQuestion,
    stop: &AtomicBool,
    write: WriteStderr,
) -> Option<ElicitationReply> {
    let err = Stderr(write);
    let _one = ASKING.lock().unwrap_or_else(|p| p.into_inner());
    // Its own open file description, non-blocking: a read that finds no line returns at
    // once, and acpx's stdin and stderr (the same terminal) are untouched.
    let tty = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/tty")
        .ok()?;
    err.line(&format!("\n[elicitation] {}", printable(&question.message)));
    let reply = match &question.ask {
        ElicitationAsk::Form(form) => ask_form(form, &tty, stop, &err),
        ElicitationAsk::Url { url, .. } => ask_url(url, &tty, stop, &err),
    };
    match &reply {
        Some(r) => err.line(&format!("[elicitation] {}", said(r))),
        // The prompt line is still open.
        None => err.line("\n[elicitation] no answer needed any more"),
    }
    // Stopped: the runtime answered already; what is returned here is not used.
    Some(reply.unwrap_or(ElicitationReply::Cancel))
}

fn said(r: &ElicitationReply) -> &'static str {
    match r {
        ElicitationReply::Accept(_) => "accepted",
        ElicitationReply::Decline => "declined",
        ElicitationReply::Cancel => "cancelled",
    }
}

/// `None`: stopped.
fn ask_form(
    form: &ElicitationForm,
    tty: &File,
    stop: &AtomicBool,
    err: &Stderr,
) -> Option<ElicitationReply> {
    if let Some(t) = &form.title {
        err.line(&format!("  {}", printable(t)));
    }
    if let Some(d) = &form.description {
        err.line(&format!("  {}", printable(d)));
    }
    err.line(
        "  Answer each field: Enter takes the default (or leaves an optional field out); \
         :decline declines the form, :cancel or Ctrl-D cancels it.",
    );
    let mut content = Map::new();
    for field in &form.fields {
        describe(field, err);
        loop {
            err.text("  > ");
            let typed = match read_line(tty, stop, err) {
                Typed::Stopped => return None,
                Typed::End => return Some(ElicitationReply::Cancel),
                Typed::Line(l) => l,
            };
            match typed.trim() {
                ":decline" => return Some(ElicitationReply::Decline),
                ":cancel" => return Some(ElicitationReply::Cancel),
                _ => {}
            }
            match field.answer(&typed) {
                Ok(Some(v)) => {
                    content.insert(field.name.clone(), v);
                    break;
                }
                Ok(None) => break,
                Err(why) => err.line(&format!("  ! {}; try again", printable(&why))),
            }
        }
    }
    Some(ElicitationReply::Accept(content))
}

/// The field's heading, description and choices.
fn describe(field: &FormField, err: &Stderr) {
    let kind = match field.kind.as_str() {
        "array" => "several of the choices, comma-separated",
        "boolean" => "yes/no",
        _ if !field.choices.is_empty() => "one of the choices",
        k => k,
    };
    let mut head = match &field.title {
        Some(t) => format!("{} (`{}`, {kind}", printable(t), printable(&field.name)),
        None => format!("`{}` ({kind}", printable(&field.name)),
    };
    head.push_str(if field.required {
        ", required"
    } else {
        ", optional"
    });
    if let Some(b) = field.bounds() {
        head.push_str(&format!(", {b}"));
    }
    if let Some(d) = &field.default {
        head.push_str(&format!(", default {}", printable(&shown(d))));
    }
    err.line(&format!("  ? {head})"));
    if let Some(d) = &field.description {
        err.line(&format!("    {}", printable(d)));
    }
    for (i, (value, title)) in field.choices.iter().enumerate() {
        let title = title
            .as_deref()
            .map(|t| format!(" ({})", printable(t)))
            .unwrap_or_default();
        err.line(&format!("    {}) {}{title}", i + 1, printable(value)));
    }
}

fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(true) => "yes".into(),
        Value::Bool(false) => "no".into(),
        other => other.to_string(),
    }
}

/// `None`: stopped.
fn ask_url(url: &str, tty: &File, stop: &AtomicBool, err: &Stderr) -> Option<ElicitationReply> {
    err.line("  Open this URL in your browser (acpx does not open it):");
    err.line(&format!("    {url}"));
    err.line("  Press Enter when you are done; d declines, c or Ctrl-D cancels.");
    loop {
        err.text("  > ");
        let typed = match read_line(tty, stop, err) {
            Typed::Stopped => return None,
            Typed::End => return Some(ElicitationReply::Cancel),
            Typed::Line(l) => l,
        };
        match typed.trim().to_ascii_lowercase().as_str() {
            "" | "y" | "yes" | "done" => return Some(ElicitationReply::Accept(Map::new())),
            "d" | "decline" | ":decline" => return Some(ElicitationReply::Decline),
            "c" | "cancel" | ":cancel" => return Some(ElicitationReply::Cancel),
            _ => err.line("  ! Enter (done), d (decline) or c (cancel)"),
        }
    }
}

/// One line typed at the terminal (`tty` is non-blocking), looked for every
/// [`STOP_CHECK`] so that `stop` is seen.
fn read_line(tty: &File, stop: &AtomicBool, err: &Stderr) -> Typed {
    let mut line = Vec::new();
    loop {
        if stop.load(Ordering::SeqCst) {
            return Typed::Stopped;
        }
        let mut buf = [0u8; 1024];
        match (&*tty).read(&mut buf) {
            // Ctrl-D on an empty line, or the terminal went away (the prompt line is open).
            Ok(0) if line.is_empty() => {
                err.line("");
                return Typed::End;
            }
            Ok(0) => return Typed::Line(String::from_utf8_lossy(&line).into_owned()),
            Ok(n) => {
                line.extend_from_slice(&buf[..n]);
                if line.ends_with(b"\n") {
                    line.pop();
                    return Typed::Line(String::from_utf8_lossy(&line).into_owned());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(STOP_CHECK);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Typed::End,
        }
    }
}

/// The front end's stderr, by lines or pieces of one.
struct Stderr(WriteStderr);

impl Stderr {
    /// A piece of a line (a prompt the answer follows).
    fn text(&self, s: &str) {
        (self.0)(s.as_bytes());
    }

    /// A whole line.
    fn line(&self, s: &str) {
        self.text(&format!("{s}\n"));
    }
}
