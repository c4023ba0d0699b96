//! An ACP content block as a `User` message's content: what a prompt sent, or a user chunk an
//! agent replays when a session is adopted (text, images, resource links and mentions).

use acpx_model::{Image, Mention, UserContent};
use serde_json::{json, Map, Value};

use super::tool_calls::png_size;

/// Converts ACP prompt ContentBlocks to thread user content (`docs/format.md`, § `session.json`).
pub fn user_content_from_acp(blocks: &[Value]) -> Vec<UserContent> {
    blocks.iter().map(user_content_from_block).collect()
}

pub(super) fn user_content_from_block(block: &Value) -> UserContent {
    let s = |k: &str| block.get(k).and_then(Value::as_str);
    match s("type").unwrap_or("") {
        "text" => UserContent::Text(s("text").unwrap_or("").to_owned()),
        "image" => UserContent::Image(Image {
            source: s("data").unwrap_or("").to_owned(),
            size: s("data").and_then(png_size),
            extra: Map::new(),
        }),
        "audio" => UserContent::Text("[audio]".into()),
        "resource_link" => {
            let uri = s("uri").unwrap_or("");
            match mention_uri(uri) {
                Some(m) => UserContent::Mention(Mention {
                    uri: m,
                    content: String::new(),
                }),
                None => UserContent::Text(format!("[{}]({uri})", s("name").unwrap_or(uri))),
            }
        }
        "resource" => {
            let res = block.get("resource");
            let uri = res
                .and_then(|r| r.get("uri"))
                .and_then(Value::as_str)
                .unwrap_or("");
            match res.and_then(|r| r.get("text")).and_then(Value::as_str) {
                Some(text) => match mention_uri(uri) {
                    Some(m) => UserContent::Mention(Mention {
                        uri: m,
                        content: text.to_owned(),
                    }),
                    None => UserContent::Text(format!("{uri}\n```\n{text}\n```")),
                },
                None => UserContent::Text("[blob]".into()),
            }
        }
        _ => UserContent::Text("[unknown]".into()),
    }
}

/// Zed's `MentionUri` for the URIs that map to a stable variant: `file://` (File, or Directory
/// for a trailing `/`) and `http(s)://` (Fetch).
pub(super) fn mention_uri(uri: &str) -> Option<Value> {
    if let Some(path) = uri.strip_prefix("file://") {
        let path = percent_decode(path)?;
        if !path.starts_with('/') {
            return None;
        }
        return Some(if path.len() > 1 && path.ends_with('/') {
            json!({"Directory": {"abs_path": path.trim_end_matches('/')}})
        } else {
            json!({"File": {"abs_path": path}})
        });
    }
    if uri.starts_with("http://") || uri.starts_with("https://") {
        return Some(json!({"Fetch": {"url": uri}}));
    }
    None
}

pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
