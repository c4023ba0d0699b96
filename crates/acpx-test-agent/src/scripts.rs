//! The prompt scripts, picked by the first word of the prompt text (see the crate docs).

use std::sync::atomic::Ordering;
use std::time::Duration;

use agent_client_protocol::v1::schema as acp;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::{Client, Error, UntypedMessage};
use serde_json::{json, Value};

use crate::permission::{ask_permission, ask_permission_for};
use crate::sessions::{config_options, AgentState};
use crate::{chunk, invalid_params, parse, request, send};

fn prompt_text(req: &acp::PromptRequest) -> String {
    req.prompt
        .iter()
        .filter_map(|b| match b {
            acp::ContentBlock::Text(t) => Some(t.text.clone()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) async fn prompt(
    state: &AgentState,
    params: &Value,
    cx: &ConnectionTo<Client>,
) -> Result<Value, Error> {
    let req: acp::PromptRequest = parse(params)?;
    let sid = req.session_id.to_string();
    let Some(session) = state.session(&sid) else {
        return Err(invalid_params(format!("unknown session {sid}")));
    };
    // Reset by the dispatch loop before this task was spawned (see `serve`), so a cancel that
    // arrives before this task runs is not lost.
    let cancel = state.cancel_flag(&sid);
    let text = prompt_text(&req);
    let mut words = text.split_whitespace();
    let first = words.next().unwrap_or("");
    let rest: Vec<&str> = words.collect();
    let mut reply = String::new();
    let mut say = |cx: &ConnectionTo<Client>, t: &str| -> Result<(), Error> {
        reply.push_str(t);
        send(cx, &sid, chunk(t))
    };
    let mut stop = "end_turn";
    let mut usage: Option<Value> = None;
    match first {
        "echo" => say(cx, &rest.join(" "))?,
        // `stderr TEXT`: a line on the agent's stderr during the turn, then TEXT as reply.
        "stderr" => {
            eprintln!("acpx-test-agent stderr: {}", rest.join(" "));
            say(cx, &rest.join(" "))?;
        }
        "think" => {
            match rest.first().and_then(|s| s.parse::<u64>().ok()) {
                // `think N`: N 8-character thought chunks as fast as possible.
                Some(n) => {
                    for i in 0..n {
                        let text = format!("{:07} ", i % 10_000_000);
                        send(
                            cx,
                            &sid,
                            json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}}),
                        )?;
                    }
                }
                None => send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "Thinking it over."}}),
                )?,
            }
            say(cx, "Done thinking.")?;
        }
        "tools" => {
            let path = format!("{}/README.md", session.cwd);
            // `tools N [K]`: N more bytes in each read's input, result text and raw output; K
            // rounds of the two calls, each after a step of text (an agent working through a
            // task); tool call ids of their own (`call_read-<pid>-1`, …) as a real agent's are, for
            // runs of many turns.
            static TOOLS_ROUNDS: std::sync::atomic::AtomicU64 =
                std::sync::atomic::AtomicU64::new(0);
            let number = |i: usize| rest.get(i).and_then(|n| n.parse::<usize>().ok());
            let extra = number(0).unwrap_or(0);
            let rounds = number(1).unwrap_or(1).max(1);
            // `chained` (a word of its own anywhere after `tools`): no text at all, so every
            // call stays in one agent message.
            let chained = rest.contains(&"chained");
            let mut input = json!({"path": path});
            let mut text = "# README".to_owned();
            if extra > 0 {
                input["context"] = json!("c".repeat(extra));
                text.push_str(&"\nlorem ipsum".repeat(extra / 12 + 1)[..extra]);
            }
            let mut output = json!({"bytes": text.len()});
            if extra > 0 {
                output["text"] = json!(text);
            }
            for round in 0..rounds {
                if round > 0 && !chained {
                    say(cx, &format!("Step {round}. "))?;
                }
                let suffix = if extra > 0 || rounds > 1 {
                    let n = TOOLS_ROUNDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    // The process id too: a later agent process of the same session must not
                    // reuse an id.
                    format!("-{}-{n}", std::process::id())
                } else {
                    String::new()
                };
                let (read_id, grep_id) =
                    (format!("call_read{suffix}"), format!("call_grep{suffix}"));
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call", "toolCallId": read_id, "title": "Read README.md",
                                      "kind": "read", "status": "pending", "locations": [{"path": path}], "rawInput": input}),
                )?;
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": read_id, "status": "in_progress"}),
                )?;
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": read_id, "status": "completed",
                                      "content": [{"type": "content", "content": {"type": "text", "text": text}}],
                                      "rawOutput": output}),
                )?;
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call", "toolCallId": grep_id, "title": "Search TODO",
                                      "kind": "search", "status": "in_progress", "rawInput": {"pattern": "TODO"}}),
                )?;
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": grep_id, "status": "failed",
                                      "content": [{"type": "content", "content": {"type": "text", "text": "grep: no matches"}}]}),
                )?;
            }
            if !chained {
                say(cx, "Read the README; the search failed.")?;
            }
        }
        "write-file" => {
            let path = rest.first().copied().unwrap_or("");
            let content = rest.get(1..).map(|r| r.join(" ")).unwrap_or_default();
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_write", "title": format!("Write {path}"),
                                  "kind": "edit", "status": "pending", "rawInput": {"path": path, "content": content}}),
            )?;
            match ask_permission(cx, &sid, "call_write", &format!("Write {path}"), "edit").await? {
                Some(opt) if opt != "reject" => {
                    let r = request(
                        cx,
                        "fs/write_text_file",
                        json!({"sessionId": sid, "path": path, "content": content}),
                    )
                    .await;
                    match r {
                        Ok(_) => {
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_write", "status": "completed",
                                                  "content": [{"type": "diff", "path": path, "newText": content}]}),
                            )?;
                            say(cx, &format!("Wrote {path}."))?;
                        }
                        Err(e) => {
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_write", "status": "failed",
                                                  "content": [{"type": "content", "content": {"type": "text", "text": e.message}}]}),
                            )?;
                            say(cx, &format!("Write failed: {}", e.message))?;
                        }
                    }
                }
                Some(_) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_write", "status": "failed"}),
                    )?;
                    say(cx, "Permission denied.")?;
                }
                None => stop = "cancelled",
            }
        }
        "write-asked" => {
            // As qwen-code 0.24 does: the tool call is announced with an empty input, and its
            // title, path, input and diff come only in the permission request.
            let path = rest.first().copied().unwrap_or("");
            let content = rest.get(1..).map(|r| r.join(" ")).unwrap_or_default();
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_asked", "title": "WriteFile",
                       "kind": "edit", "status": "pending", "rawInput": {}}),
            )?;
            let tool_call = json!({
                "toolCallId": "call_asked",
                "title": format!("Writing to {path}"),
                "kind": "edit",
                "rawInput": {"file_path": path, "content": content},
                "locations": [{"path": path}],
                "content": [{"type": "diff", "path": path, "oldText": null, "newText": content}],
            });
            match ask_permission_for(cx, &sid, tool_call).await? {
                Some(opt) if opt != "reject" => {
                    request(
                        cx,
                        "fs/write_text_file",
                        json!({"sessionId": sid, "path": path, "content": content}),
                    )
                    .await?;
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_asked", "status": "completed",
                               "content": [{"type": "content", "content": {"type": "text", "text": format!("Wrote {path}")}}]}),
                    )?;
                    say(cx, &format!("Wrote {path}."))?;
                }
                Some(_) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_asked", "status": "failed"}),
                    )?;
                    say(cx, "Permission denied.")?;
                }
                None => stop = "cancelled",
            }
        }
        "read-file" => {
            let path = rest.first().copied().unwrap_or("");
            let mut params = json!({"sessionId": sid, "path": path});
            if let Some(line) = rest.get(1).and_then(|s| s.parse::<u64>().ok()) {
                params["line"] = json!(line);
            }
            if let Some(limit) = rest.get(2).and_then(|s| s.parse::<u64>().ok()) {
                params["limit"] = json!(limit);
            }
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_readf", "title": format!("Read {path}"),
                                  "kind": "read", "status": "in_progress", "rawInput": {"path": path}}),
            )?;
            match request(cx, "fs/read_text_file", params).await {
                Ok(v) => {
                    let typed: acp::ReadTextFileResponse = parse(&v)?;
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_readf", "status": "completed",
                                          "content": [{"type": "content", "content": {"type": "text", "text": typed.content}}]}),
                    )?;
                    say(cx, &format!("Content: {}", typed.content))?;
                }
                Err(e) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_readf", "status": "failed",
                                          "content": [{"type": "content", "content": {"type": "text", "text": e.message.clone()}}]}),
                    )?;
                    say(
                        cx,
                        &format!("Read failed ({}): {}", i32::from(e.code), e.message),
                    )?;
                }
            }
        }
        "terminal" => {
            let mut limit: Option<u64> = None;
            let mut kill_after: Option<u64> = None;
            // A leaky agent: never releases the terminal (`--keep`), nor waits for it
            // (`--detach`). `--no-output`: waits and releases without ever asking for the
            // output (the client still has it).
            let (mut keep, mut detach, mut no_output) = (false, false, false);
            let mut cmd_words = Vec::new();
            let mut it = rest.iter();
            while let Some(w) = it.next() {
                match *w {
                    "--limit" if cmd_words.is_empty() => {
                        limit = it.next().and_then(|s| s.parse().ok())
                    }
                    "--kill-after" if cmd_words.is_empty() => {
                        kill_after = it.next().and_then(|s| s.parse().ok())
                    }
                    "--keep" if cmd_words.is_empty() => keep = true,
                    "--detach" if cmd_words.is_empty() => detach = true,
                    "--no-output" if cmd_words.is_empty() => no_output = true,
                    other => cmd_words.push(other),
                }
            }
            let cmd = cmd_words.join(" ");
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_term", "title": format!("Run {cmd}"),
                                  "kind": "execute", "status": "pending", "rawInput": {"command": cmd}}),
            )?;
            match ask_permission(cx, &sid, "call_term", &format!("Run {cmd}"), "execute").await? {
                Some(opt) if opt != "reject" => {
                    let mut create =
                        json!({"sessionId": sid, "command": "sh", "args": ["-c", cmd]});
                    if let Some(l) = limit {
                        create["outputByteLimit"] = json!(l);
                    }
                    match request(cx, "terminal/create", create).await {
                        Ok(v) => {
                            let created: acp::CreateTerminalResponse = parse(&v)?;
                            let tid = created.terminal_id.to_string();
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "in_progress",
                                                  "content": [{"type": "terminal", "terminalId": tid}]}),
                            )?;
                            if detach {
                                send(
                                    cx,
                                    &sid,
                                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "completed"}),
                                )?;
                                say(cx, &format!("started {tid}"))?;
                            } else {
                                if let Some(ms) = kill_after {
                                    tokio::time::sleep(Duration::from_millis(ms)).await;
                                    request(
                                        cx,
                                        "terminal/kill",
                                        json!({"sessionId": sid, "terminalId": tid}),
                                    )
                                    .await?;
                                }
                                let exit = request(
                                    cx,
                                    "terminal/wait_for_exit",
                                    json!({"sessionId": sid, "terminalId": tid}),
                                )
                                .await?;
                                let exit: acp::TerminalExitStatus = parse(&exit)?;
                                let out = if no_output {
                                    None
                                } else {
                                    let out = request(
                                        cx,
                                        "terminal/output",
                                        json!({"sessionId": sid, "terminalId": tid}),
                                    )
                                    .await?;
                                    Some(parse::<acp::TerminalOutputResponse>(&out)?)
                                };
                                if !keep {
                                    request(
                                        cx,
                                        "terminal/release",
                                        json!({"sessionId": sid, "terminalId": tid}),
                                    )
                                    .await?;
                                }
                                match out {
                                    Some(out) => {
                                        send(
                                            cx,
                                            &sid,
                                            json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "completed",
                                                          "content": [{"type": "content", "content": {"type": "text", "text": out.output}}],
                                                          "rawOutput": {"exitCode": exit.exit_code, "signal": exit.signal, "truncated": out.truncated}}),
                                        )?;
                                        say(
                                            cx,
                                            &format!(
                                                "exit={:?} signal={:?} truncated={} output={}",
                                                exit.exit_code,
                                                exit.signal,
                                                out.truncated,
                                                out.output
                                            ),
                                        )?;
                                    }
                                    None => {
                                        send(
                                            cx,
                                            &sid,
                                            json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "completed"}),
                                        )?;
                                        say(
                                            cx,
                                            &format!(
                                                "exit={:?} signal={:?} (output not read)",
                                                exit.exit_code, exit.signal
                                            ),
                                        )?;
                                    }
                                }
                            }
                        }
                        Err(e) => {
                            send(
                                cx,
                                &sid,
                                json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "failed"}),
                            )?;
                            say(cx, &format!("terminal/create failed: {}", e.message))?;
                        }
                    }
                }
                Some(_) => {
                    send(
                        cx,
                        &sid,
                        json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_term", "status": "failed"}),
                    )?;
                    say(cx, "Permission denied.")?;
                }
                None => stop = "cancelled",
            }
        }
        "permission" => {
            let kind = rest.first().copied().unwrap_or("other");
            let title = rest
                .get(1..)
                .map(|r| r.join(" "))
                .filter(|t| !t.is_empty())
                .unwrap_or_else(|| format!("Do {kind}"));
            match ask_permission(cx, &sid, "call_perm", &title, kind).await? {
                Some(opt) if opt == "reject" && state.flags.cancel_on_deny => {
                    say(cx, "selected reject")?;
                    stop = "cancelled";
                }
                Some(opt) => say(cx, &format!("selected {opt}"))?,
                None => {
                    say(cx, "permission cancelled")?;
                    stop = "cancelled";
                }
            }
        }
        "wait-permission" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_wait", "title": "Dangerous thing",
                                  "kind": "execute", "status": "pending"}),
            )?;
            match ask_permission(cx, &sid, "call_wait", "Dangerous thing", "execute").await? {
                Some(opt) => say(cx, &format!("selected {opt}"))?,
                None => stop = "cancelled",
            }
        }
        // `elicit`: a form elicitation (a required name, an optional integer age); replies
        // with the action the client answered and the content it sent.
        // `elicit rich`: a form with a description, bounds, titled choices with a default
        // and a yes/no field.
        "elicit" => {
            let schema = if rest.first() == Some(&"rich") {
                json!({
                    "type": "object",
                    "title": "Profile",
                    "properties": {
                        "name": {"type": "string", "title": "Name",
                                 "description": "Your full name", "minLength": 1},
                        "age": {"type": "integer", "title": "Age", "minimum": 0, "maximum": 150},
                        "colour": {"type": "string", "title": "Colour", "default": "red",
                                   "oneOf": [{"const": "red", "title": "Red"},
                                             {"const": "blue", "title": "Blue"}]},
                        "subscribe": {"type": "boolean", "title": "Subscribe"}
                    },
                    "required": ["name", "age"]
                })
            } else {
                json!({
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "title": "Name"},
                        "age": {"type": "integer", "title": "Age", "minimum": 0}
                    },
                    "required": ["name"]
                })
            };
            let resp = request(
                cx,
                "elicitation/create",
                json!({
                    "sessionId": sid,
                    "mode": "form",
                    "message": "Who are you?",
                    "requestedSchema": schema
                }),
            )
            .await?;
            let action = resp.get("action").and_then(Value::as_str).unwrap_or("?");
            let content = resp.get("content").cloned().unwrap_or(Value::Null);
            say(cx, &format!("elicitation {action} {content}"))?;
        }
        // `elicit-url [URL] [complete]`: a URL elicitation (id `url-1`); with `complete`, the
        // agent sends `elicitation/complete` for it a second later, unanswered or not.
        "elicit-url" => {
            let url = rest
                .first()
                .filter(|u| **u != "complete")
                .copied()
                .unwrap_or("https://example.com/authorize?session=1");
            if rest.contains(&"complete") {
                let later = cx.clone();
                cx.spawn(async move {
                    tokio::time::sleep(Duration::from_millis(1000)).await;
                    later.send_notification(UntypedMessage::new(
                        "elicitation/complete",
                        json!({"elicitationId": "url-1"}),
                    )?)
                })?;
            }
            let resp = request(
                cx,
                "elicitation/create",
                json!({"sessionId": sid, "mode": "url", "message": "Sign in to continue",
                       "elicitationId": "url-1", "url": url}),
            )
            .await?;
            let action = resp.get("action").and_then(Value::as_str).unwrap_or("?");
            say(cx, &format!("elicitation {action}"))?;
        }
        "dirs" => say(cx, &format!("dirs={}", session.dirs.join(",")))?,
        "state" => say(
            cx,
            &format!(
                "mode={}; model={}; mcp={}",
                session.mode,
                session.model,
                session.mcp.join(",")
            ),
        )?,
        "recall" => {
            let heard: Vec<String> = state
                .load_history(&sid)
                .unwrap_or_default()
                .iter()
                .filter(|u| u["sessionUpdate"] == "user_message_chunk")
                .filter_map(|u| u["content"]["text"].as_str().map(str::to_owned))
                .collect();
            say(
                cx,
                &format!("remembered {}: {}", heard.len(), heard.join(" | ")),
            )?
        }
        "write-direct" => {
            let path = rest.first().copied().unwrap_or("");
            let content = rest.get(1..).map(|r| r.join(" ")).unwrap_or_default();
            match request(
                cx,
                "fs/write_text_file",
                json!({"sessionId": sid, "path": path, "content": content}),
            )
            .await
            {
                Ok(_) => say(cx, &format!("Wrote {path}."))?,
                Err(e) => say(cx, &format!("Write failed: {}", e.message))?,
            }
        }
        "showcase" => {
            let text = crate::showcase::showcase(cx, &sid, &session.cwd).await?;
            usage = Some(crate::showcase::showcase_usage());
            say(cx, &text)?;
        }
        "hostile" => {
            let text = crate::showcase::hostile(cx, &sid)?;
            say(cx, &text)?;
        }
        "plan" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "plan", "entries": [
                {"content": "Read the code", "priority": "high", "status": "completed"},
                {"content": "Fix the bug", "priority": "medium", "status": "in_progress"},
                {"content": "Write a test", "priority": "low", "status": "pending"}]}),
            )?;
            say(cx, "Planned.")?;
        }
        "mode" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "current_mode_update", "currentModeId": "plan"}),
            )?;
            say(cx, "Switched to plan mode.")?;
        }
        "config" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "config_option_update", "configOptions": config_options("large")}),
            )?;
            say(cx, "Model is now large.")?;
        }
        "commands" => {
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "available_commands_update", "availableCommands": [
                {"name": "create_plan", "description": "Make a plan"},
                {"name": "run", "description": "Run it", "input": {"hint": "what to run"}}]}),
            )?;
            say(cx, "Commands updated.")?;
        }
        "usage" => {
            // `usage [AMOUNT [CURRENCY]]`: the session's cumulative cost to report.
            let amount = rest
                .first()
                .and_then(|a| a.parse::<f64>().ok())
                .unwrap_or(0.01);
            let currency = rest.get(1).copied().unwrap_or("USD");
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "usage_update", "used": 1200, "size": 200000,
                                  "cost": {"amount": amount, "currency": currency}}),
            )?;
            say(cx, "Counted.")?;
            usage = Some(
                json!({"totalTokens": 150, "inputTokens": 100, "outputTokens": 50,
                                "cachedReadTokens": 20, "cachedWriteTokens": 5, "thoughtTokens": 7}),
            );
        }
        "title" => {
            let t = rest.join(" ");
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "session_info_update", "title": t, "updatedAt": "2030-01-02T03:04:05Z"}),
            )?;
            say(cx, "Titled.")?;
        }
        "slow" => {
            let n: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(20);
            send(
                cx,
                &sid,
                json!({"sessionUpdate": "tool_call", "toolCallId": "call_slow", "title": "Long task",
                                  "kind": "execute", "status": "in_progress"}),
            )?;
            for i in 0..n {
                if cancel.load(Ordering::SeqCst) {
                    stop = "cancelled";
                    break;
                }
                say(cx, &format!("chunk {i}. "))?;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if stop == "cancelled" {
                // What a well-behaved agent does: flush a final update, then answer.
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_slow", "status": "failed"}),
                )?;
            } else {
                send(
                    cx,
                    &sid,
                    json!({"sessionUpdate": "tool_call_update", "toolCallId": "call_slow", "status": "completed"}),
                )?;
            }
        }
        "stream" => {
            let n: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(100);
            for i in 0..n {
                say(cx, &format!("{:07} ", i % 10_000_000))?;
            }
        }
        "flaky" => {
            // Fails the first N `flaky` prompts of this agent process with -32603, before
            // any update (a transient failure `--prompt-retries` may retry), then answers.
            static FAILED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n: u64 = rest.first().and_then(|s| s.parse().ok()).unwrap_or(1);
            if FAILED.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                return Err(Error::new(-32603, "scripted transient failure"));
            }
            say(cx, "Steady now.")?;
        }
        "error" => {
            say(cx, "About to fail.")?;
            return Err(Error::new(-32603, "scripted failure")
                .data(json!({"details": "the test agent was asked to fail"})));
        }
        "die" => {
            say(cx, "Goodbye, cruel world.")?;
            // Give the writer a moment to flush the chunk, then die mid-turn.
            tokio::time::sleep(Duration::from_millis(200)).await;
            eprintln!("acpx-test-agent: dying mid-turn as scripted");
            std::process::exit(3);
        }
        "unknown-update" => {
            cx.send_notification(UntypedMessage::new(
                "session/update",
                json!({"sessionId": sid, "update": {"sessionUpdate": "hologram_update", "beam": {"color": "green"}, "intensity": 3},
                       "_meta": null, "futureTopLevel": [1, 2]}),
            )?)?;
            say(cx, "Sent a hologram.")?;
        }
        "late" => {
            say(cx, "Early.")?;
            let cx2 = cx.clone();
            let sid2 = sid.clone();
            cx.spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                send(&cx2, &sid2, chunk("Too late."))
            })?;
        }
        _ => say(cx, &format!("Hello! You said: {text}"))?,
    }
    if state.flags.load {
        let mut history = state.load_history(&sid).unwrap_or_default();
        history.push(json!({"sessionUpdate": "user_message_chunk", "content": {"type": "text", "text": text}}));
        if !reply.is_empty() {
            history.push(chunk(&reply));
        }
        state.save_history(&sid, &history);
        state.touch_meta(&sid, &session.cwd, Some(&text));
    }
    let mut resp = json!({"stopReason": stop});
    if let Some(u) = usage {
        resp["usage"] = u;
    }
    // The typed view must accept what is sent.
    let _: acp::PromptResponse = parse(&resp)?;
    Ok(resp)
}
