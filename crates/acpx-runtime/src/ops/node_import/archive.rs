//! Node's `sessions export` archive: one JSON document
//! `{format_version: 1, exported_at, exported_by, session: {record_id, name, agent, cwd_relative,
//! created_at, updated_at, state}, history: [<ACP frame>, ...]}`. `state` is the record as Node
//! stores it, with `cwd` relative to the exporting user's home; `history` the journal's ACP
//! frames (without Node's markers).

use std::path::Path;

use serde_json::Value;

/// The only archive format version Node 0.19 writes and reads.
pub const NODE_ARCHIVE_FORMAT_VERSION: u64 = 1;

/// An archive taken apart: the record document and the journal lines.
#[derive(Debug)]
pub struct NodeArchive {
    /// The Node record (`session.state`), its `cwd` made absolute.
    pub record: Value,
    /// The journal frames, one JSON text each.
    pub lines: Vec<String>,
}

/// Whether a parsed document looks like a Node export archive.
pub fn is_node_archive(doc: &Value) -> bool {
    doc.get("format_version").is_some() && doc.get("session").is_some_and(Value::is_object)
}

/// Reads an archive. A relative `cwd` is resolved against `home` (Node stores it relative to
/// the exporting user's home directory), as Node's own import does.
pub fn parse_node_archive(doc: &Value, home: Option<&Path>) -> Result<NodeArchive, String> {
    let version = doc.get("format_version").and_then(Value::as_u64);
    if version != Some(NODE_ARCHIVE_FORMAT_VERSION) {
        return Err(format!(
            "unsupported Node export format_version {}; supported version is {NODE_ARCHIVE_FORMAT_VERSION}",
            doc.get("format_version").unwrap_or(&Value::Null)
        ));
    }
    let session = doc
        .get("session")
        .ok_or("the archive has no `session` object")?;
    let mut record = session
        .get("state")
        .filter(|s| s.is_object())
        .cloned()
        .ok_or("the archive's `session.state` is not a session record")?;
    let history = doc
        .get("history")
        .and_then(Value::as_array)
        .ok_or("the archive's `history` is not an array")?;
    if let Some(cwd) = record.get("cwd").and_then(Value::as_str) {
        if !cwd.starts_with('/') {
            if let Some(home) = home {
                let abs = if cwd == "." {
                    home.to_path_buf()
                } else {
                    home.join(cwd)
                };
                record["cwd"] = Value::String(abs.to_string_lossy().into_owned());
            }
        }
    }
    Ok(NodeArchive {
        record,
        lines: history.iter().map(Value::to_string).collect(),
    })
}
