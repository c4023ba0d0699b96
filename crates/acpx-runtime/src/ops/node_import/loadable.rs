//! Which record files Node acpx 0.19.1 itself would load: the importer takes exactly those, so
//! it never turns a file Node ignored into a phantom session.
//!
//! Node's loader (`parseSessionRecord` and the directory scan) drops a file when it is not
//! JSON, when its `schema` is not `acpx.session.v1`, when a required field is missing or of the
//! wrong type (`acpx_record_id`, `acp_session_id`, `agent_command`, `cwd`, `created_at`,
//! `last_used_at` strings; `last_seq` a non-negative integer), when `messages` is not an array,
//! and when the file name is not `encodeURIComponent(acpx_record_id) + ".json"`.

use serde_json::Value;

/// The schema string Node writes and loads.
pub const NODE_RECORD_SCHEMA: &str = "acpx.session.v1";

/// JavaScript's `encodeURIComponent`: Node's file name of a record id.
pub fn encode_uri_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "-_.!~*'()".contains(c) {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// Why Node would not load this parsed record document from a file named `file_name`, or
/// `None` when it would.
pub fn node_would_not_load(doc: &Value, file_name: &str) -> Option<String> {
    let schema = doc.get("schema").and_then(Value::as_str);
    if schema != Some(NODE_RECORD_SCHEMA) {
        return Some(format!(
            "schema is {}, Node loads only {NODE_RECORD_SCHEMA:?}",
            schema.map_or_else(|| "missing".to_owned(), |s| format!("{s:?}"))
        ));
    }
    for key in [
        "acpx_record_id",
        "acp_session_id",
        "agent_command",
        "cwd",
        "created_at",
        "last_used_at",
    ] {
        if !doc.get(key).is_some_and(Value::is_string) {
            return Some(format!("`{key}` is missing or not a string"));
        }
    }
    if !doc.get("last_seq").is_some_and(Value::is_u64) {
        return Some("`last_seq` is missing or not a non-negative integer".into());
    }
    if doc.get("messages").is_some_and(|m| !m.is_array()) {
        return Some("`messages` is not an array".into());
    }
    let id = doc
        .get("acpx_record_id")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let expected = format!("{}.json", encode_uri_component(id));
    if file_name != expected {
        return Some(format!(
            "the file name {file_name:?} does not match its record id {id:?} (Node reads it only as {expected:?})"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc() -> Value {
        json!({"schema": "acpx.session.v1", "acpx_record_id": "a b/c", "acp_session_id": "s",
               "agent_command": "x", "cwd": "/", "created_at": "t", "last_used_at": "t",
               "last_seq": 0, "messages": []})
    }

    #[test]
    fn encodes_like_javascript() {
        assert_eq!(encode_uri_component("a b/c~(x)é"), "a%20b%2Fc~(x)%C3%A9");
    }

    #[test]
    fn names_what_node_would_refuse() {
        assert_eq!(node_would_not_load(&doc(), "a%20b%2Fc.json"), None);
        let mut d = doc();
        d["schema"] = json!("acpx.session.v0");
        assert!(node_would_not_load(&d, "a%20b%2Fc.json")
            .unwrap()
            .contains("schema"));
        let mut d = doc();
        d["last_seq"] = json!(-1);
        assert!(node_would_not_load(&d, "a%20b%2Fc.json")
            .unwrap()
            .contains("last_seq"));
        assert!(node_would_not_load(&doc(), "copy.json")
            .unwrap()
            .contains("does not match"));
    }
}
