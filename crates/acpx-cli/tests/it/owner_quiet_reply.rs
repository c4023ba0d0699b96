//! `--format quiet` through the queue owner prints the reply the owner sends in parts
//! (`reply_part` lines, issue 15): byte for byte what `--no-owner` prints and what the session
//! stores, for a reply long enough to live in the spill file and for short ones, with the same
//! trailing-newline rule; real processes (the `acpx` binary, its owner, the scripted agent) on
//! both backends.

use crate::common;

use std::io::Read;

use common::process::{alive, args, kill_child, last_turn, spawn, status, MODES};
use common::{Env, BACKENDS};
use serde_json::Value;

/// What `stream N` replies: N chunks of 8 bytes.
fn streamed(n: usize) -> String {
    (0..n).map(|i| format!("{i:07} ")).collect()
}

/// The text of the last agent message in `sessions export --as json`.
fn exported_reply(env: &Env, agent: &str) -> String {
    let doc: Value = serde_json::from_str(
        &env.run(&["--agent", agent, "sessions", "export", "--as", "json"])
            .ok()
            .stdout,
    )
    .unwrap();
    let last = doc["thread"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    last["Agent"]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["Text"].as_str())
        .collect()
}

/// The reply as the last turn's `agent_message_chunk` events carry it.
fn event_reply(env: &Env, agent: &str) -> String {
    last_turn(env, agent)
        .iter()
        .filter(|e| e["payload"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|e| e["payload"]["update"]["content"]["text"].as_str())
        .collect()
}

/// 40,000 chunks: 320,000 bytes, past the 256 KiB at which a reply moves to the spill file,
/// so the owner sends it in several parts read from that file.
#[test]
fn a_long_quiet_reply_is_the_same_through_the_owner_and_without() {
    let want = streamed(40_000);
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let mut outputs = Vec::new();
        for mode in MODES {
            let r = env
                .run(&args(
                    &agent,
                    mode,
                    &["--format", "quiet", "prompt", "stream 40000"],
                ))
                .ok();
            assert!(r.stderr.is_empty(), "{backend} {mode:?}: {}", r.stderr);
            // Printed exactly once, whole, with the newline a reply without one gets.
            assert_eq!(r.stdout.len(), want.len() + 1, "{backend} {mode:?}");
            assert!(r.stdout == format!("{want}\n"), "{backend} {mode:?}");
            assert_eq!(event_reply(&env, &agent), want, "{backend} {mode:?}");
            assert!(exported_reply(&env, &agent) == want, "{backend} {mode:?}");
            outputs.push(r.stdout);
        }
        assert!(
            outputs[0] == outputs[1],
            "{backend}: owner and --no-owner differ"
        );
    }
}

/// A short reply is one part: `echo` gets the newline added, a reply that ends with one (a
/// file read back) gets none, on both paths.
#[test]
fn a_short_quiet_reply_ends_as_it_did() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let file = env.cwd().join("notes.txt");
        std::fs::write(&file, "first line\nlast line\n").unwrap();
        let path = file.to_str().unwrap();
        for mode in MODES {
            let quiet = |rest: &[&str]| {
                let mut a = args(&agent, mode, &["--format", "quiet", "--approve-all"]);
                a.extend(rest);
                env.run(&a).ok().stdout
            };
            assert_eq!(quiet(&["echo", "hi", "there"]), "hi there\n", "{mode:?}");
            assert_eq!(
                quiet(&["read-file", path]),
                "Content: first line\nlast line\n",
                "{backend} {mode:?}"
            );
        }
    }
}

/// A client killed while its reply is coming (after its first bytes reached stdout): the owner
/// drops the rest, keeps running and serves the next prompt; the turn is recorded whole.
#[test]
fn a_client_killed_mid_reply_leaves_the_owner_serving() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    env.run(&["--agent", &agent, "--format", "quiet", "echo", "warm"])
        .ok();
    let owner = status(&env, &agent)["pid"].as_u64().unwrap();
    let mut child = spawn(
        &env,
        &[
            "--agent",
            &agent,
            "--format",
            "quiet",
            "prompt",
            "stream 40000",
        ],
    );
    let mut first = [0u8; 16];
    child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut first)
        .unwrap();
    assert_eq!(&first, b"0000000 0000001 ");
    kill_child(&child, libc::SIGKILL);
    child.wait().unwrap();
    assert_eq!(event_reply(&env, &agent), streamed(40_000));
    let r = env
        .run(&["--agent", &agent, "--format", "quiet", "echo", "next"])
        .ok();
    assert_eq!(r.stdout, "next\n");
    assert!(alive(owner));
    assert_eq!(
        status(&env, &agent)["pid"].as_u64(),
        Some(owner),
        "the same owner"
    );
}
