//! `session/list` (with `--list`): the sessions of `--state-dir`, whichever process made them,
//! newest first, filtered by `cwd`, in pages of `--list-page-size` (default 50) with an opaque
//! `nextCursor`; and the small record of each stored session it lists from
//! (`<id>.meta.json` beside the history: `sessionId`, `cwd`, `title`, `updatedAt`).
//!
//! The title is the one a `title <t>` prompt set, else the session's first prompt (its first
//! 40 characters). Without `--state-dir` the sessions of this process are listed, untitled.

use serde_json::{json, Value};

use crate::invalid_params;
use crate::sessions::AgentState;
use agent_client_protocol::Error;

/// Page size when `--list-page-size` is not given.
const DEFAULT_PAGE_SIZE: usize = 50;

/// The prefix of this agent's cursors: `page-<offset>`.
const CURSOR_PREFIX: &str = "page-";

impl AgentState {
    /// Where session `id`'s listing record is kept (beside its history).
    pub(crate) fn meta_path(&self, id: &str) -> Option<std::path::PathBuf> {
        let history = self.history_path(id)?;
        Some(history.with_extension("meta.json"))
    }

    /// Notes a turn of session `id` (in `cwd`) whose prompt was `text` in its stored record:
    /// the time, and the title when it has none yet or the prompt set one.
    pub(crate) fn touch_meta(&self, id: &str, cwd: &str, text: Option<&str>) {
        let Some(path) = self.meta_path(id) else {
            return;
        };
        let mut meta = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .unwrap_or_else(|| json!({"sessionId": id, "cwd": cwd}));
        if let Some(text) = text {
            let set = text.strip_prefix("title ").map(str::trim);
            if let Some(t) = set.filter(|t| !t.is_empty()) {
                meta["title"] = json!(t);
            } else if meta.get("title").is_none_or(Value::is_null) {
                meta["title"] = json!(text.chars().take(40).collect::<String>());
            }
        }
        meta["updatedAt"] =
            json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(&path, serde_json::to_vec(&meta).unwrap_or_default());
    }

    /// Every session this agent can list: the stored ones (with `--state-dir`), else this
    /// process's.
    fn listable(&self) -> Vec<Value> {
        let Some(dir) = self.flags.state_dir.as_ref() else {
            let sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
            return sessions
                .iter()
                .map(|(id, s)| json!({"sessionId": id, "cwd": s.cwd}))
                .collect();
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".meta.json"))
            .filter_map(|e| std::fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(|m| m.get("sessionId").is_some_and(Value::is_string))
            .collect()
    }
}

/// `session/list {cwd?, cursor?}`.
pub(crate) fn list_sessions(state: &AgentState, params: &Value) -> Result<Value, Error> {
    let cwd = params.get("cwd").and_then(Value::as_str);
    if cwd.is_some_and(|c| !c.starts_with('/')) {
        return Err(invalid_params("cwd must be an absolute path"));
    }
    let offset = match params.get("cursor").and_then(Value::as_str) {
        None => 0,
        Some(c) => c
            .strip_prefix(CURSOR_PREFIX)
            .and_then(|n| n.parse::<usize>().ok())
            .ok_or_else(|| invalid_params(format!("malformed cursor {c:?}")))?,
    };
    let mut sessions: Vec<Value> = state
        .listable()
        .into_iter()
        .filter(|s| cwd.is_none_or(|c| s.get("cwd").and_then(Value::as_str) == Some(c)))
        .collect();
    // Newest first; the id breaks ties so that pages never overlap.
    let key = |s: &Value| {
        (
            s.get("updatedAt")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            s.get("sessionId")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
        )
    };
    sessions.sort_by_key(|s| std::cmp::Reverse(key(s)));
    let size = state.flags.list_page_size.unwrap_or(DEFAULT_PAGE_SIZE);
    let page: Vec<Value> = sessions.iter().skip(offset).take(size).cloned().collect();
    let mut answer = json!({"sessions": page});
    if offset + size < sessions.len() {
        answer["nextCursor"] = json!(format!("{CURSOR_PREFIX}{}", offset + size));
    }
    Ok(answer)
}
