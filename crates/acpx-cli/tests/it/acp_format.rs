//! `--format acp`: a turn's raw ACP JSON-RPC frames on stdout, one per line (Node acpx 0.19's
//! `--format json`), through the queue owner and in one process; Node's synthetic error
//! lines; `sessions watch --format acp` rebuilding the frames from the log. On both backends,
//! with the scripted test agent.

use crate::common;

use common::process::spawn_until;
use common::{Env, Run, BACKENDS};
use serde_json::Value;

/// Every stdout line of `r`, each checked to be one JSON-RPC 2.0 message.
fn frames(r: &Run) -> Vec<Value> {
    let lines: Vec<Value> = r
        .stdout
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("a stdout line is not JSON: {l:?}: {e}"));
            assert_eq!(v["jsonrpc"], "2.0", "not JSON-RPC 2.0: {l}");
            v
        })
        .collect();
    assert!(!lines.is_empty(), "no frames\nstderr: {}", r.stderr);
    lines
}

/// `jq 'select(.method == m)'`: the positions of the frames with method `m`.
fn select(frames: &[Value], m: &str) -> Vec<usize> {
    (0..frames.len())
        .filter(|&i| frames[i]["method"] == m)
        .collect()
}

/// The position of the answer to the request at `at` (the first frame after it with its
/// id and no method).
fn answer_to(frames: &[Value], at: usize) -> usize {
    let id = &frames[at]["id"];
    assert!(!id.is_null(), "not a request: {}", frames[at]);
    (at + 1..frames.len())
        .find(|&i| frames[i]["id"] == *id && frames[i].get("method").is_none())
        .unwrap_or_else(|| panic!("no answer to {}", frames[at]))
}

/// The frames of one turn that wrote `path` (test agent `write-file`, approved): the
/// prompt and its `stopReason`, the updates, and the agent's `fs/write_text_file` with
/// acpx's answer, all in order. Returns the frames.
fn check_write_turn(r: &Run, path: &str) -> Vec<Value> {
    assert_eq!(r.code, 0, "stdout: {}\nstderr: {}", r.stdout, r.stderr);
    let f = frames(r);
    let prompts = select(&f, "session/prompt");
    assert_eq!(prompts.len(), 1, "one prompt: {}", r.stdout);
    let prompt = prompts[0];
    assert!(f[prompt]["params"]["prompt"].is_array());
    let done = answer_to(&f, prompt);
    assert_eq!(f[done]["result"]["stopReason"], "end_turn", "{}", f[done]);
    let updates = select(&f, "session/update");
    assert!(updates.len() >= 3, "the turn's updates: {}", r.stdout);
    assert!(updates.iter().all(|&i| i > prompt && i < done));
    assert!(
        updates
            .iter()
            .any(|&i| f[i]["params"]["update"]["sessionUpdate"] == "tool_call"),
        "{}",
        r.stdout
    );
    let writes = select(&f, "fs/write_text_file");
    assert_eq!(writes.len(), 1, "{}", r.stdout);
    let write = writes[0];
    assert_eq!(f[write]["params"]["path"], path);
    let written = answer_to(&f, write);
    assert!(
        f[written].get("result").is_some(),
        "acpx answered: {}",
        f[written]
    );
    let asked = select(&f, "session/request_permission");
    assert_eq!(asked.len(), 1, "{}", r.stdout);
    let approved = answer_to(&f, asked[0]);
    assert!(prompt < asked[0] && asked[0] < approved && approved < write);
    assert!(write < written && written < done, "in order: {}", r.stdout);
    f
}

#[test]
fn a_turn_prints_its_frames_through_the_owner_and_in_one_process() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.new_session(&agent);
        let out = env.cwd().join("out.txt");
        let path = out.to_str().unwrap();

        // Through the queue owner this command starts: its attach is part of its traffic.
        let acp = ["--format", "acp", "--approve-all", "--agent", &agent];
        let r = env.run(&[&acp[..], &["prompt", "write-file", path, "one"]].concat());
        let f = check_write_turn(&r, path);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "one", "{backend}");
        let init = select(&f, "initialize");
        assert_eq!(init.len(), 1, "{}", r.stdout);
        assert!(f[answer_to(&f, init[0])]["result"]["protocolVersion"].is_number());
        let attach: Vec<usize> = ["session/load", "session/resume", "session/new"]
            .iter()
            .flat_map(|m| select(&f, m))
            .collect();
        assert_eq!(attach.len(), 1, "{}", r.stdout);
        assert!(init[0] < attach[0] && attach[0] < select(&f, "session/prompt")[0]);

        // The warm owner: only this turn's frames, none of the one before.
        let r = env.run(&[&acp[..], &["prompt", "echo", "second"]].concat());
        assert_eq!(r.code, 0, "{}", r.stderr);
        let f = frames(&r);
        assert!(select(&f, "initialize").is_empty(), "{}", r.stdout);
        assert!(select(&f, "fs/write_text_file").is_empty(), "{}", r.stdout);
        assert_eq!(select(&f, "session/prompt").len(), 1);
        assert!(r.stdout.contains("second") && !r.stdout.contains("\"one\""));
        // jq 'select(.method=="session/update")' finds the reply.
        let reply: String = select(&f, "session/update")
            .iter()
            .filter_map(|&i| f[i]["params"]["update"]["content"]["text"].as_str())
            .collect();
        assert_eq!(reply, "second");

        // One process (--no-owner): the same frames, from the agent it starts.
        let r = env.run(
            &[
                &acp[..],
                &["--no-owner", "prompt", "write-file", path, "two"],
            ]
            .concat(),
        );
        let f = check_write_turn(&r, path);
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "two");
        assert_eq!(select(&f, "initialize").len(), 1, "{}", r.stdout);

        // exec: a fresh session, nothing stored.
        let r = env.run(&[&acp[..], &["exec", "write-file", path, "three"]].concat());
        let f = check_write_turn(&r, path);
        assert_eq!(select(&f, "session/new").len(), 1, "{}", r.stdout);
    }
}

/// Two clients of one owner, the second queued behind the first: each prints the frames of
/// its own turn, none of the other's.
#[test]
fn frames_of_another_clients_turn_do_not_leak() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.new_session(&agent);
        env.run(&["--agent", &agent, "echo", "warm"]).ok();
        let acp = ["--format", "acp", "--agent", &agent];
        let first = spawn_until(
            &env,
            &[&acp[..], &["prompt", "slow", "20"]].concat(),
            "chunk 0",
        );
        let second = env.run(&[&acp[..], &["prompt", "echo", "mine"]].concat());
        let (code, first, stderr) = first.finish();
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(second.code, 0, "{}", second.stderr);
        let texts = |f: &[Value]| -> Vec<String> {
            select(f, "session/prompt")
                .iter()
                .map(|&i| {
                    f[i]["params"]["prompt"][0]["text"]
                        .as_str()
                        .unwrap()
                        .to_owned()
                })
                .collect()
        };
        assert_eq!(texts(&first), ["slow 20"], "{backend}");
        let second = frames(&second);
        assert_eq!(texts(&second), ["echo mine"], "{backend}");
        let shows = |f: &[Value], s: &str| f.iter().any(|v| v.to_string().contains(s));
        assert!(
            !shows(&first, "mine") && !shows(&second, "chunk "),
            "{backend}"
        );
        assert!(shows(&first, "chunk 19"), "the whole slow turn");
        let first_updates = select(&first, "session/update").len();
        assert!(first_updates >= 20, "{first_updates}");
    }
}

#[test]
fn errors_are_node_synthetic_lines_with_todays_exit_codes() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let acp = ["--format", "acp", "--agent", &agent];
        let error_line = |r: &Run| -> Value {
            let f = frames(r);
            assert_eq!(f.len(), 1, "{}", r.stdout);
            let e = f.into_iter().next().unwrap();
            assert!(e["id"].is_null(), "{e}");
            assert_eq!(e["error"]["data"]["origin"], "cli", "{e}");
            e
        };

        // No session: exit 4, NO_SESSION -32002.
        let r = env.run(&[&acp[..], &["prompt", "hi"]].concat());
        assert_eq!(r.code, 4, "{}", r.stderr);
        let e = error_line(&r);
        assert_eq!(e["error"]["code"], -32002);
        assert_eq!(e["error"]["data"]["acpxCode"], "NO_SESSION");
        assert!(e["error"]["message"].is_string());

        // Usage errors: exit 2, USAGE -32602 (ours and the parser's).
        env.new_session(&agent);
        let r = env.run_stdin(&[&acp[..], &["prompt"]].concat(), " \n");
        assert_eq!(r.code, 2, "{}", r.stderr);
        let e = error_line(&r);
        assert_eq!(e["error"]["code"], -32602);
        assert_eq!(e["error"]["data"]["acpxCode"], "USAGE");
        let r = env.run(&[&acp[..], &["prompt", "--no-such-flag", "hi"]].concat());
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert_eq!(error_line(&r)["error"]["code"], -32602);

        // A turn that fails: its frames, then the error line (exit 1).
        let r = env.run(&[&acp[..], &["--no-owner", "prompt", "error"]].concat());
        assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
        let f = frames(&r);
        let last = f.last().unwrap();
        assert!(last["id"].is_null() && last["error"]["data"]["acpxCode"] == "RUNTIME");
        // The agent's own code and message, acpx's fields merged into its data (§6).
        assert_eq!(last["error"]["code"], -32603, "{last}");
        assert_eq!(last["error"]["message"], "scripted failure");
        assert_eq!(last["error"]["data"]["origin"], "acp");
        assert!(last["error"]["data"]["details"].is_string(), "{last}");
        let prompt = select(&f, "session/prompt")[0];
        assert!(
            f[answer_to(&f, prompt)].get("error").is_some(),
            "{}",
            r.stdout
        );
    }
}

#[test]
fn watch_rebuilds_the_frames_of_a_finished_session_from_its_log() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = env.new_session(&agent);
        env.run(&["--no-owner", "--agent", &agent, "echo", "hello", "there"])
            .ok();
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
        let r = env.run(&["--format", "acp", "sessions", "watch", &id]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        let f = frames(&r);
        let prompts = select(&f, "session/prompt");
        assert_eq!(prompts.len(), 1, "{}", r.stdout);
        let p = &f[prompts[0]];
        assert_eq!(p["params"]["prompt"][0]["text"], "echo hello there");
        assert!(p["id"].is_string(), "the turn's requestId: {p}");
        let done = answer_to(&f, prompts[0]);
        assert_eq!(f[done]["result"]["stopReason"], "end_turn");
        let updates = select(&f, "session/update");
        let reply: String = updates
            .iter()
            .filter_map(|&i| f[i]["params"]["update"]["content"]["text"].as_str())
            .collect();
        assert_eq!(reply, "hello there", "{}", r.stdout);
        assert!(updates.iter().all(|&i| i > prompts[0] && i < done));
        // The params are the logged payloads, exactly.
        let events = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                &id,
                "--type",
                "session_update",
            ])
            .ok();
        let payloads: Vec<Value> = events
            .json_lines()
            .into_iter()
            .map(|e| e["payload"].clone())
            .collect();
        let params: Vec<Value> = updates.iter().map(|&i| f[i]["params"].clone()).collect();
        assert_eq!(params, payloads);
    }
}
