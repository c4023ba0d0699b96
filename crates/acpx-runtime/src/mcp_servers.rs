//! MCP servers handed to the agent on `session/new`, `session/load`, `session/resume` and
//! `session/fork`.
//!
//! Users write them in one of two shapes, both accepted by [`parse_mcp_servers`]:
//!
//! - the common MCP client file (Claude Desktop, Cursor, Node acpx's config `mcpServers`):
//!   `{"mcpServers": {"<name>": {"command", "args"?, "env"?: {"K": "V"}}}}`, with
//!   `{"type": "http" | "sse", "url", "headers"?: {"K": "V"}}` entries for remote servers (an
//!   entry with a `url` and no `type` is `http`); the bare inner object (without the
//!   `mcpServers` wrapper) is accepted too;
//! - ACP's own array: `[{"name", "command", "args", "env": [{"name", "value"}]},
//!   {"type": "http", "name", "url", "headers": [{"name", "value"}]}, …]`.
//!
//! Either way the result is ACP's array form ([`McpServers`]), in the order written, which is
//! what the session record keeps (`acpx.mcp_servers`, see `docs/format.md`, "Keys this crate
//! adds") and what goes on the wire. [`McpServers::for_agent`] leaves out the `http` and `sse`
//! entries an agent did not advertise in `mcpCapabilities`, since ACP forbids sending them.

use serde_json::{json, Map, Value};

/// Why an MCP server list was refused. The message names the entry and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct McpConfigError(pub String);

/// A validated list of MCP servers in ACP's wire form.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct McpServers(Vec<Value>);

impl McpServers {
    /// No servers (what acpx sends when none are configured).
    pub fn none() -> Self {
        McpServers(Vec::new())
    }

    /// The servers in ACP's array form, in the order written.
    pub fn as_slice(&self) -> &[Value] {
        &self.0
    }

    /// Whether there are no servers.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The array to send to an agent whose `initialize` answer advertised `capabilities`
    /// (the `agentCapabilities` object), and the names of the servers left out because the
    /// agent does not take their transport.
    pub fn for_agent(&self, capabilities: &Value) -> (Value, Vec<String>) {
        let mcp = capabilities.get("mcpCapabilities");
        let takes = |transport: &str| {
            mcp.and_then(|m| m.get(transport))
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let mut sent = Vec::new();
        let mut left_out = Vec::new();
        for server in &self.0 {
            match server.get("type").and_then(Value::as_str) {
                Some(t @ ("http" | "sse")) if !takes(t) => {
                    let name = server.get("name").and_then(Value::as_str).unwrap_or("");
                    left_out.push(format!("{name} ({t})"));
                }
                _ => sent.push(server.clone()),
            }
        }
        (Value::Array(sent), left_out)
    }

    /// Reads the list back from a record's `acpx.mcp_servers` (written by acpx, so already in
    /// ACP form); anything else there is refused like user input.
    pub fn from_stored(value: &Value) -> Result<Self, McpConfigError> {
        parse_mcp_servers(value)
    }

    /// The JSON array, for storing in the record.
    pub fn to_json(&self) -> Value {
        Value::Array(self.0.clone())
    }
}

/// Reads a file of MCP servers (acpx's `--mcp-config`) in either accepted shape; the error
/// says whether the file could not be read, is not JSON, or which entry is wrong.
pub fn read_mcp_servers_file(path: &std::path::Path) -> Result<McpServers, McpConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| McpConfigError(format!("cannot read it: {e}")))?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| McpConfigError(format!("invalid JSON: {e}")))?;
    parse_mcp_servers(&value)
}

/// Validates MCP servers in either accepted shape (see the module docs) and returns them in
/// ACP's array form.
pub fn parse_mcp_servers(value: &Value) -> Result<McpServers, McpConfigError> {
    let servers = match value {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| acp_entry(item, &format!("[{i}]")))
            .collect::<Result<Vec<_>, _>>()?,
        Value::Object(obj) => {
            let map = match obj.get("mcpServers") {
                Some(Value::Object(inner)) => inner,
                Some(other) => {
                    return Err(McpConfigError(format!(
                        "mcpServers: expected an object of servers by name, found {}",
                        kind(other)
                    )))
                }
                None => obj,
            };
            map.iter()
                .map(|(name, entry)| named_entry(name, entry))
                .collect::<Result<Vec<_>, _>>()?
        }
        other => {
            return Err(McpConfigError(format!(
                "expected {{\"mcpServers\": {{…}}}} or an array of servers, found {}",
                kind(other)
            )))
        }
    };
    let mut seen = std::collections::HashSet::new();
    for s in &servers {
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        if !seen.insert(name.to_owned()) {
            return Err(McpConfigError(format!(
                "two MCP servers are named {name:?}"
            )));
        }
    }
    Ok(McpServers(servers))
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn string_field(entry: &Map<String, Value>, at: &str, key: &str) -> Result<String, McpConfigError> {
    match entry.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.clone()),
        Some(Value::String(_)) => Err(McpConfigError(format!("{at}.{key}: must not be empty"))),
        Some(other) => Err(McpConfigError(format!(
            "{at}.{key}: expected a string, found {}",
            kind(other)
        ))),
        None => Err(McpConfigError(format!("{at}: missing \"{key}\""))),
    }
}

fn string_list(
    entry: &Map<String, Value>,
    at: &str,
    key: &str,
) -> Result<Vec<Value>, McpConfigError> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(_) => Ok(v.clone()),
                other => Err(McpConfigError(format!(
                    "{at}.{key}[{i}]: expected a string, found {}",
                    kind(other)
                ))),
            })
            .collect(),
        Some(other) => Err(McpConfigError(format!(
            "{at}.{key}: expected an array of strings, found {}",
            kind(other)
        ))),
    }
}

/// `{"K": "V"}` (MCP client files) or `[{"name": "K", "value": "V"}]` (ACP) → ACP pairs.
fn pairs(entry: &Map<String, Value>, at: &str, key: &str) -> Result<Vec<Value>, McpConfigError> {
    match entry.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                // The array shape refuses an empty name; so does this one, or a list accepted
                // here would not read back from its stored (array) form.
                _ if k.trim().is_empty() => Err(McpConfigError(format!(
                    "{at}.{key}: a name must not be empty"
                ))),
                Value::String(s) => Ok(json!({"name": k, "value": s})),
                other => Err(McpConfigError(format!(
                    "{at}.{key}.{k}: expected a string, found {}",
                    kind(other)
                ))),
            })
            .collect(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let here = format!("{at}.{key}[{i}]");
                let obj = item.as_object().ok_or_else(|| {
                    McpConfigError(format!(
                        "{here}: expected {{\"name\", \"value\"}}, found {}",
                        kind(item)
                    ))
                })?;
                let name = string_field(obj, &here, "name")?;
                let value = match obj.get("value") {
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => {
                        return Err(McpConfigError(format!(
                            "{here}.value: expected a string, found {}",
                            kind(other)
                        )))
                    }
                    None => return Err(McpConfigError(format!("{here}: missing \"value\""))),
                };
                Ok(json!({"name": name, "value": value}))
            })
            .collect(),
        Some(other) => Err(McpConfigError(format!(
            "{at}.{key}: expected an object or an array of {{\"name\", \"value\"}}, found {}",
            kind(other)
        ))),
    }
}

fn build(name: String, entry: &Map<String, Value>, at: &str) -> Result<Value, McpConfigError> {
    let transport = match entry.get("type") {
        None | Some(Value::Null) => {
            if entry.contains_key("url") && !entry.contains_key("command") {
                "http"
            } else {
                "stdio"
            }
        }
        Some(Value::String(t)) => match t.as_str() {
            "stdio" => "stdio",
            "http" | "streamable-http" | "streamableHttp" => "http",
            "sse" => "sse",
            other => {
                return Err(McpConfigError(format!(
                    "{at}.type: unknown transport {other:?} (expected stdio, http or sse)"
                )))
            }
        },
        Some(other) => {
            return Err(McpConfigError(format!(
                "{at}.type: expected a string, found {}",
                kind(other)
            )))
        }
    };
    if transport == "stdio" {
        let command = string_field(entry, at, "command")?;
        Ok(json!({
            "name": name,
            "command": command,
            "args": string_list(entry, at, "args")?,
            "env": pairs(entry, at, "env")?,
        }))
    } else {
        let url = string_field(entry, at, "url")?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(McpConfigError(format!(
                "{at}.url: {url:?} is not an http:// or https:// URL"
            )));
        }
        Ok(json!({
            "type": transport,
            "name": name,
            "url": url,
            "headers": pairs(entry, at, "headers")?,
        }))
    }
}

fn named_entry(name: &str, entry: &Value) -> Result<Value, McpConfigError> {
    let at = format!("mcpServers.{name}");
    if name.trim().is_empty() {
        return Err(McpConfigError("mcpServers: a server name is empty".into()));
    }
    let obj = entry.as_object().ok_or_else(|| {
        McpConfigError(format!("{at}: expected an object, found {}", kind(entry)))
    })?;
    build(name.to_owned(), obj, &at)
}

fn acp_entry(entry: &Value, at: &str) -> Result<Value, McpConfigError> {
    let obj = entry.as_object().ok_or_else(|| {
        McpConfigError(format!("{at}: expected an object, found {}", kind(entry)))
    })?;
    let name = string_field(obj, at, "name")?;
    build(name, obj, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_in_either_shape() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("mcp.json");
        std::fs::write(&file, r#"{"mcpServers": {"fs": {"command": "npx"}}}"#).unwrap();
        let servers = read_mcp_servers_file(&file).unwrap();
        assert_eq!(servers.as_slice()[0]["name"], "fs");
        let e = read_mcp_servers_file(&dir.path().join("missing.json")).unwrap_err();
        assert!(e.0.starts_with("cannot read it: "), "{e}");
        std::fs::write(&file, "{").unwrap();
        let e = read_mcp_servers_file(&file).unwrap_err();
        assert!(e.0.starts_with("invalid JSON: "), "{e}");
    }

    #[test]
    fn the_common_file_shape_becomes_acp_form() {
        let v = json!({"mcpServers": {
            "fs": {"command": "npx", "args": ["-y", "server-fs", "/repo"], "env": {"DEBUG": "1"}},
            "docs": {"url": "https://example.test/mcp", "headers": {"Authorization": "Bearer x"}},
            "events": {"type": "sse", "url": "http://127.0.0.1:9/sse"}
        }});
        let s = parse_mcp_servers(&v).unwrap();
        assert_eq!(
            s.to_json(),
            json!([
                {"name": "fs", "command": "npx", "args": ["-y", "server-fs", "/repo"],
                 "env": [{"name": "DEBUG", "value": "1"}]},
                {"type": "http", "name": "docs", "url": "https://example.test/mcp",
                 "headers": [{"name": "Authorization", "value": "Bearer x"}]},
                {"type": "sse", "name": "events", "url": "http://127.0.0.1:9/sse", "headers": []}
            ])
        );
        // The bare inner object is the same thing.
        let inner = parse_mcp_servers(&v["mcpServers"]).unwrap();
        assert_eq!(inner, s);
    }

    #[test]
    fn acp_array_form_round_trips() {
        let v = json!([
            {"name": "fs", "command": "/bin/srv", "args": [], "env": [{"name": "A", "value": "b"}]},
            {"type": "http", "name": "web", "url": "http://127.0.0.1:1/", "headers": []}
        ]);
        let s = parse_mcp_servers(&v).unwrap();
        assert_eq!(s.to_json(), v);
        assert_eq!(McpServers::from_stored(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn remote_servers_go_only_to_agents_that_take_them() {
        let s = parse_mcp_servers(&json!({"mcpServers": {
            "a": {"command": "x"},
            "b": {"url": "http://127.0.0.1:1/"},
            "c": {"type": "sse", "url": "http://127.0.0.1:2/"}
        }}))
        .unwrap();
        let (sent, left) = s.for_agent(&json!({"mcpCapabilities": {"http": true}}));
        assert_eq!(sent.as_array().unwrap().len(), 2);
        assert_eq!(left, vec!["c (sse)".to_owned()]);
        let (sent, left) = s.for_agent(&json!({}));
        assert_eq!(sent.as_array().unwrap().len(), 1);
        assert_eq!(left.len(), 2);
    }

    /// Found by `fuzz_mcp_servers`: an empty (or blank) header name was accepted in the
    /// object shape, and the stored array form then refused it.
    #[test]
    fn an_empty_env_or_header_name_is_refused_in_both_shapes() {
        for v in [
            json!({"mcpServers": {"w": {"url": "http://127.0.0.1:1/", "headers": {"": "x"}}}}),
            json!({"mcpServers": {"a": {"command": "x", "env": {"": "1"}}}}),
            json!({"mcpServers": {"a": {"command": "x", "env": {" \t": "1"}}}}),
            json!([{"type": "http", "name": "w", "url": "http://127.0.0.1:1/",
                    "headers": [{"name": "", "value": "x"}]}]),
        ] {
            let e = parse_mcp_servers(&v).expect_err("an empty name is refused");
            assert!(e.to_string().contains("must not be empty"), "{e}");
        }
    }

    #[test]
    fn bad_input_names_the_entry_and_field() {
        let cases = [
            (json!("x"), "expected {\"mcpServers\""),
            (json!({"mcpServers": []}), "mcpServers: expected an object"),
            (
                json!({"mcpServers": {"a": {}}}),
                "mcpServers.a: missing \"command\"",
            ),
            (
                json!({"mcpServers": {"a": {"command": 3}}}),
                "mcpServers.a.command: expected a string",
            ),
            (
                json!({"mcpServers": {"a": {"command": "x", "args": "y"}}}),
                "mcpServers.a.args",
            ),
            (
                json!({"mcpServers": {"a": {"command": "x", "env": {"K": 1}}}}),
                "mcpServers.a.env.K",
            ),
            (
                json!({"mcpServers": {"a": {"type": "ws", "url": "x"}}}),
                "unknown transport",
            ),
            (
                json!({"mcpServers": {"a": {"url": "ftp://x"}}}),
                "not an http",
            ),
            (json!([{"command": "x"}]), "[0]: missing \"name\""),
            (
                json!([{"name": "a", "command": "x"}, {"name": "a", "command": "y"}]),
                "two MCP servers",
            ),
        ];
        for (input, want) in cases {
            let err = parse_mcp_servers(&input).unwrap_err().0;
            assert!(err.contains(want), "{input}: {err} lacks {want}");
        }
    }
}
