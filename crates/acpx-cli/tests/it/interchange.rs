//! `sessions export --as atif | --as otlp` and `prompt --otlp-endpoint`, end to end: a session
//! recorded by real `acpx` processes with the scripted test agent (thoughts, tool calls, a
//! diff, a terminal, permission questions, token usage and cost, a failed turn), exported
//! from the fs and SQLite stores, and read by the formats' own code: Harbor's
//! `TrajectoryValidator` and `Trajectory` model for ATIF, OpenTelemetry's protobuf schema
//! (`opentelemetry-proto`, `json_format.Parse` into `ExportTraceServiceRequest`) for OTLP
//! (`scripts/peers/check_interchange.py`, installed with its packages into `.venv-acp/` by
//! `scripts/install-interop-peer.sh`). The live export is received by a listener this test
//! runs on 127.0.0.1.
//!
//! Without the checkers the format checks are skipped with a message, and fail under
//! `CI=true`.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::mpsc;

use common::*;
use serde_json::Value;

/// The Python that has the checkers' packages, if installed.
fn checker_python() -> Option<PathBuf> {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = repo.join(".venv-acp/bin/python");
    let ok = python.exists()
        && std::process::Command::new(&python)
            .args([
                "-c",
                "import harbor.utils.trajectory_validator, \
                 opentelemetry.proto.collector.trace.v1.trace_service_pb2",
            ])
            .output()
            .is_ok_and(|o| o.status.success());
    ok.then_some(python)
}

fn require_checkers() -> Option<PathBuf> {
    match checker_python() {
        Some(p) => Some(p),
        None if std::env::var("CI").as_deref() == Ok("true") => panic!(
            "the interchange checkers (harbor, opentelemetry-proto) are missing; run \
             scripts/install-interop-peer.sh"
        ),
        None => {
            eprintln!(
                "SKIPPED: the interchange checkers are not installed; run \
                 scripts/install-interop-peer.sh to check the exports with Harbor's validator \
                 and the OpenTelemetry schema"
            );
            None
        }
    }
}

/// Runs the checker on `file`; its JSON summary (it fails the test when the file is invalid).
fn check(python: &std::path::Path, format: &str, file: &std::path::Path, extra: &[&str]) -> Value {
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/peers/check_interchange.py");
    let out = std::process::Command::new(python)
        .arg(script)
        .arg(format)
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{format} check of {} failed: {stdout}\n{}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap()
}

/// A session with every kind of event the exports map; returns the environment and its id.
fn recorded(backend: &'static str) -> (Env, String) {
    let env = Env::new(backend);
    let agent = test_agent();
    let id = env.new_session(&agent);
    let file = env.cwd().join("notes.txt");
    let write = format!("write-file {} hello", file.display());
    for (policy, prompt) in [
        ("--approve-all", "think 2"),
        ("--approve-all", "tools"),
        ("--approve-all", "usage"),
        ("--approve-all", write.as_str()),
        ("--approve-all", "terminal echo hi"),
        ("--deny-all", "permission execute Run rm"),
    ] {
        env.run(&["--agent", &agent, policy, "prompt", prompt]);
    }
    env.run(&["--agent", &agent, "set", "model", "large"]).ok();
    let failed = env.run(&["--agent", &agent, "prompt", "error"]);
    assert_ne!(failed.code, 0, "{failed:?}");
    (env, id)
}

fn export(env: &Env, id: &str, kind: &str) -> PathBuf {
    let out = env.home().join(format!("export.{kind}.json"));
    env.run(&[
        "--agent",
        &test_agent(),
        "sessions",
        "export",
        id,
        "--as",
        kind,
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    out
}

fn exports_a_session_both_ways(backend: &'static str) {
    let Some(python) = require_checkers() else {
        return;
    };
    let (env, id) = recorded(backend);
    atif_is_valid_and_complete(&python, &env, &id);
    otlp_is_valid_and_complete(&python, &env, &id);
}

/// ATIF, read by Harbor's own validator and model.
fn atif_is_valid_and_complete(python: &std::path::Path, env: &Env, id: &str) {
    let atif = check(python, "atif", &export(env, id, "atif"), &[]);
    assert_eq!(atif["schema_version"], "ATIF-v1.8");
    assert_eq!(atif["session_id"], id);
    assert_eq!(atif["agent"]["name"], "acpx-test-agent");
    assert_eq!(atif["agent"]["model_name"], "large");
    let steps = atif["steps"].as_array().unwrap();
    let users: Vec<&str> = steps
        .iter()
        .filter(|s| s["source"] == "user")
        .map(|s| s["message"].as_str().unwrap())
        .collect();
    assert_eq!(users.len(), 7, "{users:?}");
    assert_eq!(users[0], "think 2");
    assert!(steps.iter().any(|s| s["reasoning"]
        .as_str()
        .is_some_and(|r| r.contains("0000001"))));
    let calls: Vec<(&str, &str)> = steps
        .iter()
        .flat_map(|s| s["tool_calls"].as_array().unwrap())
        .map(|c| (c["id"].as_str().unwrap(), c["name"].as_str().unwrap()))
        .collect();
    for expected in [
        ("call_read", "read"),
        ("call_grep", "search"),
        ("call_write", "edit"),
        ("call_term", "execute"),
    ] {
        assert!(calls.contains(&expected), "{expected:?} not in {calls:?}");
    }
    let read = steps
        .iter()
        .flat_map(|s| s["tool_calls"].as_array().unwrap())
        .find(|c| c["id"] == "call_read")
        .unwrap();
    assert!(read["arguments"]["path"]
        .as_str()
        .unwrap()
        .ends_with("README.md"));
    let results: Vec<&Value> = steps
        .iter()
        .flat_map(|s| s["results"].as_array().unwrap())
        .collect();
    let result = |call: &str| {
        results
            .iter()
            .find(|r| r["call"] == call)
            .and_then(|r| r["content"].as_str())
            .unwrap_or_else(|| panic!("no result of {call}: {results:?}"))
    };
    assert_eq!(result("call_read"), "# README");
    assert!(
        result("call_write").contains("+hello"),
        "{}",
        result("call_write")
    );
    assert!(
        result("call_term").contains("hi"),
        "{}",
        result("call_term")
    );
    let metrics: Vec<&Value> = steps
        .iter()
        .filter(|s| !s["metrics"].is_null())
        .map(|s| &s["metrics"])
        .collect();
    assert_eq!(metrics.len(), 1, "{metrics:?}");
    assert_eq!(metrics[0]["prompt_tokens"], 100);
    assert_eq!(metrics[0]["completion_tokens"], 50);
    assert_eq!(metrics[0]["cached_tokens"], 20);
    assert_eq!(metrics[0]["cost_usd"], 0.01);
    assert_eq!(atif["final_metrics"]["total_prompt_tokens"], 100);
    assert_eq!(atif["final_metrics"]["total_cost_usd"], 0.01);
    assert_eq!(atif["final_metrics"]["total_steps"], steps.len());
    // The model changed before the last turn.
    let last_agent = steps.iter().rev().find(|s| s["source"] == "agent").unwrap();
    assert_eq!(last_agent["model"], "large");
}

/// OTLP, read by the OpenTelemetry protobuf schema.
fn otlp_is_valid_and_complete(python: &std::path::Path, env: &Env, id: &str) {
    let otlp = check(python, "otlp", &export(env, id, "otlp"), &[]);
    assert_eq!(otlp["trace_id"], id.replace('-', ""));
    let spans = otlp["spans"].as_array().unwrap();
    let named = |prefix: &str| -> Vec<&Value> {
        spans
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with(prefix))
            .collect()
    };
    let turns = named("invoke_agent acpx-test-agent");
    assert_eq!(turns.len(), 7);
    assert_eq!(named("session ").len(), 1);
    for t in &turns {
        assert_eq!(t["parent"].as_str().unwrap(), format!("session {id}"));
        assert_eq!(t["attributes"]["gen_ai.operation.name"], "invoke_agent");
        assert_eq!(t["kind"], 3);
    }
    let usage = turns
        .iter()
        .find(|t| t["attributes"]["gen_ai.usage.input_tokens"] == 100)
        .expect("the usage turn");
    assert_eq!(usage["attributes"]["gen_ai.usage.output_tokens"], 50);
    assert_eq!(
        usage["attributes"]["gen_ai.usage.cache_read.input_tokens"],
        20
    );
    assert_eq!(
        usage["attributes"]["gen_ai.usage.cache_creation.input_tokens"],
        5
    );
    assert_eq!(usage["attributes"]["gen_ai.cost.amount"], 0.01);
    assert_eq!(usage["attributes"]["gen_ai.cost.currency"], "USD");
    assert_eq!(usage["attributes"]["gen_ai.request.model"], "small");
    assert_eq!(usage["status"], 1);
    let last = turns.last().unwrap();
    assert_eq!(last["status"], 2, "the failed turn: {last}");
    assert_eq!(last["attributes"]["gen_ai.request.model"], "large");
    let tools = named("execute_tool ");
    assert!(tools.len() >= 4, "{tools:?}");
    let grep = tools
        .iter()
        .find(|t| t["attributes"]["gen_ai.tool.call.id"] == "call_grep")
        .unwrap();
    assert_eq!(grep["status"], 2);
    assert_eq!(grep["attributes"]["gen_ai.operation.name"], "execute_tool");
    let questions = named("request_permission");
    assert_eq!(questions.len(), 3, "{questions:?}");
    assert!(questions
        .iter()
        .any(|q| q["attributes"]["acpx.permission.decision"] == "denied"));
    assert!(questions.iter().any(|q| q["parent"] == "execute_tool edit"));
    let write = named("fs/write_text_file");
    assert_eq!(write.len(), 1);
    assert_eq!(write[0]["parent"], "execute_tool edit");
    assert_eq!(write[0]["attributes"]["acpx.fs.bytes"], 5);
    let output = named("terminal/output");
    assert_eq!(output[0]["parent"], "execute_tool execute");
    assert_eq!(output[0]["attributes"]["acpx.terminal.exit_code"], 0);
    // No conversation content in the trace.
    let text = std::fs::read_to_string(env.home().join("export.otlp.json")).unwrap();
    assert!(!text.contains("# README") && !text.contains("Counted."));
    // Nor the agent command, which may hold keys (the agent is named from initialize).
    assert!(!text.contains("acpx.agent.command"), "{text}");
}

#[test]
fn exports_a_session_both_ways_fs() {
    exports_a_session_both_ways("fs");
}

#[test]
fn exports_a_session_both_ways_sqlite() {
    exports_a_session_both_ways("sqlite");
}

#[test]
fn an_atif_export_needs_a_turn() {
    let env = Env::new("fs");
    let id = env.new_session(&test_agent());
    let r = env.run(&[
        "--agent",
        &test_agent(),
        "sessions",
        "export",
        &id,
        "--as",
        "atif",
    ]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("no prompt turn yet"), "{}", r.stderr);
    // A trace of it is the session's root span alone.
    let r = env
        .run(&[
            "--agent",
            &test_agent(),
            "sessions",
            "export",
            &id,
            "--as",
            "otlp",
        ])
        .ok();
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

/// One HTTP request as the receiver saw it.
struct Received {
    request_line: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A one-request OTLP receiver on 127.0.0.1 answering `status`; its URL and what it got.
fn receiver(status: &'static str) -> (String, mpsc::Receiver<Received>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let Ok((stream, _)) = listener.accept() else {
            return;
        };
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut request_line = String::new();
        reader.read_line(&mut request_line).unwrap();
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').unwrap();
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_owned()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .map(|(_, v)| v.parse().unwrap())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body).unwrap();
        let mut stream = stream;
        let _ = stream.write_all(
            format!("HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}").as_bytes(),
        );
        let _ = tx.send(Received {
            request_line: request_line.trim_end().to_owned(),
            headers,
            body,
        });
    });
    (url, rx)
}

fn sends_each_turn_live(backend: &'static str) {
    let env = Env::new(backend);
    let agent = test_agent();
    let id = env.new_session(&agent);

    // The flag, through the queue owner: the client exports after the turn.
    let (url, got) = receiver("200 OK");
    let r = env
        .run(&[
            "--agent",
            &agent,
            "--approve-all",
            "prompt",
            "--otlp-endpoint",
            &url,
            "tools",
        ])
        .ok();
    assert!(
        !r.stderr.contains("OpenTelemetry export failed"),
        "{}",
        r.stderr
    );
    let req = got
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("a request");
    assert_eq!(req.request_line, "POST /v1/traces HTTP/1.1");
    assert!(req
        .headers
        .contains(&("content-type".into(), "application/json".into())));
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    let spans = body["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .unwrap();
    let names: Vec<&str> = spans.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "invoke_agent acpx-test-agent",
            "execute_tool read",
            "execute_tool search"
        ]
    );
    assert_eq!(spans[0]["traceId"], id.replace('-', ""));
    if let Some(python) = require_checkers() {
        let f = env.home().join("live.json");
        std::fs::write(&f, &req.body).unwrap();
        let summary = check(&python, "otlp", &f, &["--turn"]);
        assert_eq!(summary["spans"][0]["parent"], "<outside>");
        // The whole export's root span is the live turn's parent: the same ids.
        let whole: Value =
            serde_json::from_str(&std::fs::read_to_string(export(&env, &id, "otlp")).unwrap())
                .unwrap();
        let all = whole["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array()
            .unwrap();
        let root = all
            .iter()
            .find(|s| s.get("parentSpanId").is_none())
            .unwrap();
        assert_eq!(spans[0]["parentSpanId"], root["spanId"]);
        assert!(all.contains(&spans[1]));
    }

    live_through_the_variables(&env, &agent);
    live_failures_only_warn(&env, &agent);
}

/// The standard variables, one process (--no-owner), headers sent.
fn live_through_the_variables(env: &Env, agent: &str) {
    let (url, got) = receiver("200 OK");
    let mut cmd = env.cmd();
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", &url)
        .env("OTEL_EXPORTER_OTLP_HEADERS", "api-key=secret%20one");
    let out = cmd
        .args(["--agent", agent, "--no-owner", "prompt", "usage"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let req = got
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("a request");
    assert_eq!(req.request_line, "POST /v1/traces HTTP/1.1");
    assert!(req
        .headers
        .contains(&("api-key".into(), "secret one".into())));
    let body: Value = serde_json::from_slice(&req.body).unwrap();
    let turn = &body["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    let attr = |k: &str| {
        turn["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == k)
            .map(|a| a["value"].clone())
    };
    assert_eq!(
        attr("gen_ai.usage.input_tokens").unwrap()["intValue"],
        "100"
    );
}

/// A receiver that refuses, and none at all: a warning; the turn's result unchanged.
fn live_failures_only_warn(env: &Env, agent: &str) {
    let (url, _got) = receiver("500 Internal Server Error");
    let r = env
        .run(&[
            "--agent",
            agent,
            "prompt",
            "--otlp-endpoint",
            &url,
            "echo one",
        ])
        .ok();
    assert_eq!(r.stdout.trim(), "one");
    assert!(
        r.stderr.contains("the turn's OpenTelemetry export failed") && r.stderr.contains("500"),
        "{}",
        r.stderr
    );
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let r = env
        .run(&[
            "--agent",
            agent,
            "prompt",
            "--otlp-endpoint",
            &format!("http://{closed}"),
            "echo two",
        ])
        .ok();
    assert!(r.stderr.contains("cannot connect"), "{}", r.stderr);

    // https is refused before the turn, clearly.
    let r = env.run(&[
        "--agent",
        agent,
        "prompt",
        "--otlp-endpoint",
        "https://collector:4318",
        "echo three",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("https is not supported"), "{}", r.stderr);

    // A CR LF in the URL would add a header: refused, naming the flag.
    let r = env.run(&[
        "--agent",
        agent,
        "prompt",
        "--otlp-endpoint",
        "http://127.0.0.1:4318/x\r\nX-Injected: 1",
        "echo four",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("--otlp-endpoint") && r.stderr.contains("control character"),
        "{}",
        r.stderr
    );

    // An https variable: the turn runs; one warning that names it and says how to silence it.
    let out = env
        .cmd()
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318")
        .args(["--agent", agent, "prompt", "echo five"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "five");
    assert_eq!(
        stderr.matches("https is not supported").count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT: ")
            && stderr.contains("unset OTEL_EXPORTER_OTLP_ENDPOINT")
            && stderr.contains("to silence this warning"),
        "{stderr}"
    );
}

#[test]
fn sends_each_turn_live_fs() {
    sends_each_turn_live("fs");
}

#[test]
fn sends_each_turn_live_sqlite() {
    sends_each_turn_live("sqlite");
}
