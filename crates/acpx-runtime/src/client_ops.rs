//! The client side of ACP: what the agent may ask of acpx.
//!
//! - `fs/read_text_file`, `fs/write_text_file`: confined to the session's cwd. Paths must be
//!   absolute; any `..` component is refused; symlinks are resolved and the resolved path must
//!   stay inside the (resolved) cwd. Reads support the 1-based `line` and `limit` window.
//! - `terminal/create|output|wait_for_exit|kill|release`: commands run in their own process
//!   group (so a kill reaches everything they started), their combined stdout and stderr are
//!   kept up to `outputByteLimit` bytes (default [`DEFAULT_TERMINAL_OUTPUT_LIMIT`], never
//!   more than the configured ceiling), dropping the oldest output first. A kill sends
//!   `SIGTERM` to the group, then `SIGKILL` after [`terminals::TERMINAL_KILL_GRACE`]. A session
//!   keeps at most [`terminals::MAX_TERMINALS`] terminals.
//! - `session/request_permission`: decided by the [`PermissionMode`] (see [`decide`]).
//!
//! Writes and terminals are gated by the same policy as permission requests: allowed under
//! `approve-all`, refused under `deny-all`, asked through the [`PermissionPrompter`] under
//! `approve-reads` (refused when there is none). Reads are refused only under `deny-all`.

mod terminals;

pub use terminals::signal_group;
pub(crate) use terminals::{
    signal_name, TerminalSpec, Terminals, DEFAULT_TERMINAL_OUTPUT_CEILING,
    DEFAULT_TERMINAL_OUTPUT_LIMIT,
};

use crate::elicitation_question::{ElicitationQuestion, ElicitationReply};
use crate::permission_rules::{tool_kind, PermissionRules, RuleAction};
use std::path::{Component, Path, PathBuf};

use agent_client_protocol::Error as SdkError;
use async_trait::async_trait;
use serde_json::{json, Value};

/// How permission requests (and writes and terminals) are decided. Serialized (and, with
/// the `clap` feature, parsed on a command line) in its CLI spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Allow everything.
    ApproveAll,
    /// Allow reads and searches; ask about everything else (deny without a prompter).
    #[default]
    ApproveReads,
    /// Refuse everything.
    DenyAll,
}

impl PermissionMode {
    /// The CLI spelling: `approve-all`, `approve-reads`, `deny-all`.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ApproveAll => "approve-all",
            PermissionMode::ApproveReads => "approve-reads",
            PermissionMode::DenyAll => "deny-all",
        }
    }
}

impl std::str::FromStr for PermissionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "approve-all" => Ok(PermissionMode::ApproveAll),
            "approve-reads" => Ok(PermissionMode::ApproveReads),
            "deny-all" => Ok(PermissionMode::DenyAll),
            other => Err(format!(
                "unknown permission mode {other:?}; use approve-all, approve-reads or deny-all"
            )),
        }
    }
}

/// What a [`PermissionPrompter`] is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct PermissionQuestion {
    /// The ACP method that needs the decision (`session/request_permission`,
    /// `fs/write_text_file`, `terminal/create`).
    pub method: String,
    /// A human-readable line, for example the tool call's title or `Write /repo/a.rs`.
    pub title: String,
    /// The tool kind (`read`, `edit`, `execute`, …) when known.
    pub kind: Option<String>,
    /// The request's params as the agent sent them.
    pub details: Value,
}

/// A human's answer: allow or refuse, and whether it holds for the rest of the session
/// ("always" / "never": remembered per tool kind, docs/format.md § One decision per action).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PermissionAnswer {
    /// `true` to allow.
    pub approved: bool,
    /// The same answer for every later question of this kind in the session.
    pub always: bool,
}

impl PermissionAnswer {
    /// An answer for this question only.
    pub fn once(approved: bool) -> Self {
        PermissionAnswer {
            approved,
            always: false,
        }
    }
}

/// Asks a human. The CLI supplies one when it runs on a TTY.
#[async_trait]
pub trait PermissionPrompter: Send + Sync {
    /// `true` to allow, `false` to refuse.
    async fn ask(&self, question: &PermissionQuestion) -> bool;

    /// [`PermissionPrompter::ask`], where the human may also answer for the rest of the
    /// session. By default every answer is for this question only.
    async fn answer(&self, question: &PermissionQuestion) -> PermissionAnswer {
        PermissionAnswer::once(self.ask(question).await)
    }

    /// Asks a human the agent's elicitation: a form field by field, or a visit to a URL.
    /// `None` when this prompter cannot (acpx then answers as when nobody can be asked; the
    /// default). The future may be dropped before it ends (the agent said the URL visit is
    /// complete, or the turn was cancelled): asking must stop then.
    async fn elicit(&self, question: &ElicitationQuestion) -> Option<ElicitationReply> {
        let _ = question;
        None
    }

    /// Who answers through this prompter, as an elicitation's record names it
    /// (`answeredBy`, docs/format.md § Elicitations).
    fn answerer(&self) -> &'static str {
        "terminal"
    }
}

/// `--elicitation-answers`: answers to the agent's form elicitations (`elicitation/create`),
/// by field name, checked against each form's schema before they are sent.
pub type ElicitationAnswers = std::sync::Arc<serde_json::Map<String, Value>>;

/// Answers permission questions from a recording before the rules and the mode: `acpx replay`
/// answers a tool call as the source session's user did when the same call comes up.
pub trait RecordedPermissions: Send + Sync {
    /// The recorded decision for this `session/request_permission` (its params as the agent
    /// sent them), mapped onto this request's options; `None` leaves the question to the
    /// usual policy.
    fn answer(&self, params: &Value) -> Option<PermissionDecision>;
}

/// The answer to a `session/request_permission`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionDecision {
    /// An option of an `allow_*` kind (or the first option) was selected.
    Approved(String),
    /// An option of a `reject_*` kind was selected.
    Denied(String),
    /// Answered `cancelled` (no options, no reject option, or the turn was cancelled).
    Cancelled,
}

impl PermissionDecision {
    /// The `outcome` object of the response.
    pub fn outcome(&self) -> Value {
        match self {
            PermissionDecision::Approved(id) | PermissionDecision::Denied(id) => {
                json!({"outcome": "selected", "optionId": id})
            }
            PermissionDecision::Cancelled => json!({"outcome": "cancelled"}),
        }
    }
}

/// Decides a `session/request_permission` (params as sent by the agent).
///
/// The allow option is the first `allow_once`, else `allow_always`; the reject option the
/// first `reject_once`, else `reject_always`. With no options the answer is `cancelled`.
/// `approve-all` allows (or takes the first option when none is an allow option);
/// `deny-all` rejects (or cancels when no reject option exists); `approve-reads` allows
/// `read` and `search` kinds and asks the prompter about the rest, rejecting when there is
/// no prompter.
pub async fn decide(
    mode: PermissionMode,
    prompter: Option<&dyn PermissionPrompter>,
    params: &Value,
) -> PermissionDecision {
    let options: Vec<&Value> = params
        .get("options")
        .and_then(Value::as_array)
        .map(|o| o.iter().collect())
        .unwrap_or_default();
    if options.is_empty() {
        return PermissionDecision::Cancelled;
    }
    let id_of = |o: &Value| {
        o.get("optionId")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let find = |kinds: &[&str]| {
        kinds.iter().find_map(|k| {
            options
                .iter()
                .find(|o| o.get("kind").and_then(Value::as_str) == Some(k))
                .map(|o| id_of(o))
        })
    };
    let allow = find(&["allow_once", "allow_always"]);
    let reject = find(&["reject_once", "reject_always"]);
    let approve =
        || PermissionDecision::Approved(allow.clone().unwrap_or_else(|| id_of(options[0])));
    let refuse = || match &reject {
        Some(id) => PermissionDecision::Denied(id.clone()),
        None => PermissionDecision::Cancelled,
    };
    let tool_call = params.get("toolCall").cloned().unwrap_or(Value::Null);
    let kind = tool_kind(&tool_call);
    match mode {
        PermissionMode::ApproveAll => approve(),
        PermissionMode::DenyAll => refuse(),
        PermissionMode::ApproveReads => {
            if matches!(kind.as_deref(), Some("read" | "search")) {
                return approve();
            }
            let Some(prompter) = prompter else {
                return refuse();
            };
            let question = PermissionQuestion {
                method: "session/request_permission".into(),
                title: tool_call
                    .get("title")
                    .and_then(Value::as_str)
                    .unwrap_or("(untitled tool call)")
                    .to_owned(),
                kind,
                details: params.clone(),
            };
            if prompter.ask(&question).await {
                approve()
            } else {
                refuse()
            }
        }
    }
}

/// [`decide`] with `--permission-policy` rules first ([`crate::permission_rules`]): a rule that
/// approves or denies decides as `approve-all` / `deny-all` would; `escalate` asks the
/// prompter (even about reads) and rejects without one; no matching rule leaves it to `mode`.
pub async fn decide_with_rules(
    mode: PermissionMode,
    rules: Option<&PermissionRules>,
    prompter: Option<&dyn PermissionPrompter>,
    params: &Value,
) -> PermissionDecision {
    let tool_call = params.get("toolCall").cloned().unwrap_or(Value::Null);
    let forced = match rules.and_then(|r| r.decide(&tool_call)) {
        None => return decide(mode, prompter, params).await,
        Some(RuleAction::Approve) => PermissionMode::ApproveAll,
        Some(RuleAction::Deny) => PermissionMode::DenyAll,
        Some(RuleAction::Escalate) => {
            let has_options = params
                .get("options")
                .and_then(Value::as_array)
                .is_some_and(|o| !o.is_empty());
            let question = PermissionQuestion {
                method: "session/request_permission".into(),
                title: tool_call
                    .get("title")
                    .and_then(Value::as_str)
                    .unwrap_or("(untitled tool call)")
                    .to_owned(),
                kind: tool_kind(&tool_call),
                details: params.clone(),
            };
            match prompter {
                Some(p) if has_options && p.ask(&question).await => PermissionMode::ApproveAll,
                _ => PermissionMode::DenyAll,
            }
        }
    };
    decide(forced, None, params).await
}

/// Whether a write or terminal may proceed under `mode` (asking when the mode says so).
pub(crate) async fn gate(
    mode: PermissionMode,
    prompter: Option<&dyn PermissionPrompter>,
    question: PermissionQuestion,
) -> bool {
    match mode {
        PermissionMode::ApproveAll => true,
        PermissionMode::DenyAll => false,
        PermissionMode::ApproveReads => match prompter {
            Some(p) => p.ask(&question).await,
            None => false,
        },
    }
}

/// A JSON-RPC error for a refused operation.
pub(crate) fn permission_denied(what: &str, mode: PermissionMode) -> SdkError {
    SdkError::new(
        -32603,
        format!(
            "acpx refused {what}: not allowed by the permission mode {}",
            mode.as_str()
        ),
    )
    .data(json!({"acpxCode": "PERMISSION_DENIED"}))
}

/// A JSON-RPC `Invalid params` error (-32602) that says why in its message, not only in
/// `data.reason`: an agent (and the person reading its log) sees the reason wherever it
/// shows errors, as with permission-mode refusals.
pub(crate) fn refusal(reason: &str) -> SdkError {
    SdkError::new(-32602, format!("Invalid params: {reason}")).data(json!({"reason": reason}))
}

/// A JSON-RPC `Method not found` error (-32601) for a client method acpx did not offer this
/// agent, saying so.
pub(crate) fn not_offered(method: &str) -> SdkError {
    SdkError::new(
        -32601,
        format!(
            "Method not found: acpx does not offer `{method}` to this agent (its client \
             capabilities in `initialize` say what it offers)"
        ),
    )
    .data(json!({"method": method}))
}

// ---------------------------------------------------------------------------------------------
// Filesystem
// ---------------------------------------------------------------------------------------------

/// Why a path was refused or could not be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FsError {
    /// The path is relative, contains `..`, or resolves outside the session's cwd.
    Refused(String),
    /// The file does not exist.
    NotFound(String),
    /// Any other I/O error.
    Io(String),
}

impl FsError {
    pub(crate) fn to_sdk(&self) -> SdkError {
        match self {
            FsError::Refused(m) => refusal(m),
            FsError::NotFound(m) => SdkError::new(-32002, format!("Resource not found: {m}")),
            FsError::Io(m) => SdkError::new(-32603, m.clone()),
        }
    }

    /// The message, for logs.
    pub fn message(&self) -> &str {
        match self {
            FsError::Refused(m) | FsError::NotFound(m) | FsError::Io(m) => m,
        }
    }
}

/// A session's cwd, resolved once, that agent paths are confined to.
#[derive(Debug, Clone)]
pub struct FsRoot {
    root: PathBuf,
    /// The session's additional workspace roots (`--add-dir`), canonical: paths inside them
    /// are admitted as paths inside `root` are.
    additional: Vec<PathBuf>,
}

impl FsRoot {
    /// Resolves `cwd` (which must exist).
    pub fn new(cwd: &Path) -> std::io::Result<Self> {
        Ok(FsRoot {
            root: std::fs::canonicalize(cwd)?,
            additional: Vec::new(),
        })
    }

    /// `self` also admitting paths inside each of `dirs` (which must exist).
    pub fn with_additional(mut self, dirs: &[PathBuf]) -> std::io::Result<Self> {
        for d in dirs {
            self.additional.push(std::fs::canonicalize(d)?);
        }
        Ok(self)
    }

    /// The additional workspace roots, canonical, in the order given.
    pub fn additional(&self) -> &[PathBuf] {
        &self.additional
    }

    fn check_syntax(&self, raw: &str) -> Result<PathBuf, FsError> {
        let p = Path::new(raw);
        if !p.is_absolute() {
            return Err(FsError::Refused(format!(
                "{raw:?} is not an absolute path; ACP paths must be absolute"
            )));
        }
        if p.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(FsError::Refused(format!(
                "{raw:?} contains `..`; paths must not climb out of the session directory"
            )));
        }
        Ok(p.to_path_buf())
    }

    fn check_inside(&self, raw: &str, resolved: &Path) -> Result<(), FsError> {
        if resolved.starts_with(&self.root)
            || self.additional.iter().any(|d| resolved.starts_with(d))
        {
            Ok(())
        } else if self.additional.is_empty() {
            Err(FsError::Refused(format!(
                "{raw:?} resolves to {} which is outside the session directory {}",
                resolved.display(),
                self.root.display()
            )))
        } else {
            Err(FsError::Refused(format!(
                "{raw:?} resolves to {} which is outside the session directory {} and its \
                 additional directories ({})",
                resolved.display(),
                self.root.display(),
                self.additional
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
        }
    }

    /// The real path to read for `raw`.
    pub fn resolve_existing(&self, raw: &str) -> Result<PathBuf, FsError> {
        let p = self.check_syntax(raw)?;
        let resolved = std::fs::canonicalize(&p).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FsError::NotFound(raw.to_owned()),
            _ => FsError::Io(format!("cannot resolve {raw:?}: {e}")),
        })?;
        self.check_inside(raw, &resolved)?;
        Ok(resolved)
    }

    /// The real path to write for `raw`: an existing file is resolved through its symlinks; a
    /// new file's nearest existing ancestor is resolved and must be inside the root (missing
    /// directories below it are created by the write).
    pub fn resolve_for_write(&self, raw: &str) -> Result<PathBuf, FsError> {
        let p = self.check_syntax(raw)?;
        if std::fs::symlink_metadata(&p).is_ok() {
            let resolved = std::fs::canonicalize(&p).map_err(|e| {
                FsError::Refused(format!(
                    "{raw:?} is a link that cannot be resolved ({e}); refusing to write through it"
                ))
            })?;
            self.check_inside(raw, &resolved)?;
            // A hard link inside the directory may name a file outside it: writing through
            // it would change that file.
            if let Ok(meta) = std::fs::metadata(&resolved) {
                use std::os::unix::fs::MetadataExt;
                if meta.is_file() && meta.nlink() > 1 {
                    return Err(FsError::Refused(format!(
                        "{raw:?} has {} hard links; writing it would change the same file under \
                         its other names, which may be outside the session directory",
                        meta.nlink()
                    )));
                }
            }
            return Ok(resolved);
        }
        let mut ancestor = p.as_path();
        let mut rest = Vec::new();
        loop {
            if std::fs::symlink_metadata(ancestor).is_ok() {
                break;
            }
            let (Some(parent), Some(name)) = (ancestor.parent(), ancestor.file_name()) else {
                return Err(FsError::Refused(format!(
                    "{raw:?} has no existing ancestor"
                )));
            };
            rest.push(name.to_owned());
            ancestor = parent;
        }
        let mut resolved = std::fs::canonicalize(ancestor)
            .map_err(|e| FsError::Io(format!("cannot resolve {}: {e}", ancestor.display())))?;
        self.check_inside(raw, &resolved)?;
        for name in rest.into_iter().rev() {
            resolved.push(name);
        }
        Ok(resolved)
    }

    /// `fs/read_text_file`: the file's text, or the `limit` lines starting at 1-based `line`.
    pub async fn read(
        &self,
        raw: &str,
        line: Option<u64>,
        limit: Option<u64>,
    ) -> Result<String, FsError> {
        let path = self.resolve_existing(raw)?;
        let bytes = tokio::fs::read(&path)
            .await
            .map_err(|e| FsError::Io(format!("cannot read {raw:?}: {e}")))?;
        let text = String::from_utf8(bytes)
            .map_err(|_| FsError::Io(format!("{raw:?} is not UTF-8 text")))?;
        if line.is_none() && limit.is_none() {
            return Ok(text);
        }
        let start = usize::try_from(line.unwrap_or(1).max(1) - 1).unwrap_or(usize::MAX);
        let take = limit
            .map(|l| usize::try_from(l).unwrap_or(usize::MAX))
            .unwrap_or(usize::MAX);
        Ok(text.split_inclusive('\n').skip(start).take(take).collect())
    }

    /// `fs/write_text_file`: creates or replaces the file (and missing parent directories).
    pub async fn write(&self, raw: &str, content: &str) -> Result<PathBuf, FsError> {
        let path = self.resolve_for_write(raw)?;
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| FsError::Io(format!("cannot create {}: {e}", parent.display())))?;
        }
        tokio::fs::write(&path, content)
            .await
            .map_err(|e| FsError::Io(format!("cannot write {raw:?}: {e}")))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests;
