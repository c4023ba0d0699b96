//! End to end, every step a separate `acpx` process: sessions the scripted agent made for
//! another client (this test speaking raw ACP to it, no acpx involved) are listed with
//! `sessions list --from-agent` (cwd filter, every page, `--limit`, `--cursor`, `--all-cwds`),
//! adopted with `sessions adopt` (the replayed history recorded, so `sessions history` shows
//! it), and continued with a prompt as an ordinary session; an id that already has a record,
//! an id the agent does not know and an agent without `session/list` are refused. The same
//! with the real pydantic-acp peer, which keeps its sessions in its own files.
use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::{json, Value};

/// A client other than acpx: starts the agent, makes a session in `cwd` and sends it
/// `prompts`, speaking ACP's JSON-RPC lines itself. Returns the ACP session id.
fn session_made_elsewhere(agent_flags: &[&str], cwd: &Path, prompts: &[&str]) -> String {
    let mut child = Command::new(acpx_bin())
        .arg("__test-agent")
        .args(agent_flags)
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The client's end of the pipes lives in this block: the agent ends when stdin closes.
    let id = {
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut next_id = 0;
        let mut call = |method: &str, params: Value| -> Value {
            next_id += 1;
            let line = json!({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params});
            writeln!(stdin, "{line}").unwrap();
            loop {
                let mut l = String::new();
                assert!(stdout.read_line(&mut l).unwrap() > 0, "the agent closed");
                let v: Value = serde_json::from_str(&l).unwrap();
                if v["id"] == json!(next_id) {
                    assert!(v.get("error").is_none(), "{method}: {v}");
                    return v["result"].clone();
                }
            }
        };
        call(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        );
        let created = call("session/new", json!({"cwd": cwd, "mcpServers": []}));
        let id = created["sessionId"].as_str().unwrap().to_owned();
        for p in prompts {
            call(
                "session/prompt",
                json!({"sessionId": id, "prompt": [{"type": "text", "text": p}]}),
            );
        }
        id
    };
    child.wait().unwrap();
    id
}

fn ids(listing: &Value) -> Vec<String> {
    listing["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn sessions_made_elsewhere_are_listed_adopted_and_continued() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let state_s = state.display().to_string();
        let flags = [
            "--load",
            "--list",
            "--list-page-size",
            "1",
            "--state-dir",
            &state_s,
        ];
        let door = session_made_elsewhere(
            &flags,
            &env.cwd(),
            &["echo remember the blue door", "title Door talk"],
        );
        let other = session_made_elsewhere(&flags, &env.cwd(), &["echo something else"]);
        let elsewhere_dir = env.home().join("elsewhere");
        std::fs::create_dir_all(&elsewhere_dir).unwrap();
        let elsewhere_dir = std::fs::canonicalize(elsewhere_dir).unwrap();
        let far = session_made_elsewhere(&flags, &elsewhere_dir, &["echo far away"]);
        let agent = env.agent_cmd(&flags.join(" "));
        listing_follows_pages_and_filters(&env, &agent, [&door, &other, &far], &elsewhere_dir);
        let list = |extra: &[&str]| agent_list(&env, &agent, extra);

        // Adopted: the history the agent replays becomes the record's conversation.
        let adopted = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "adopt", &door, "--name", "door",
            ])
            .ok()
            .json();
        assert_eq!(adopted["action"], "session_adopted", "{adopted}");
        assert_eq!(adopted["acpxSessionId"], door.as_str(), "{adopted}");
        assert_eq!(adopted["method"], "session/load", "{adopted}");
        assert_eq!(adopted["replayedUpdates"], 4, "{adopted}");
        assert_eq!(adopted["messageCount"], 4, "{adopted}");
        let record = adopted["acpxRecordId"].as_str().unwrap().to_owned();
        assert_ne!(record, door, "a record id of its own");
        let history = env
            .run(&["--agent", &agent, "sessions", "history", "-s", "door"])
            .ok();
        for said in [
            "echo remember the blue door",
            "remember the blue door",
            "Titled.",
        ] {
            assert!(history.stdout.contains(said), "{said}: {history:?}");
        }
        let events = env
            .run(&["--format", "json", "sessions", "events", &record])
            .ok()
            .json_lines();
        let phases: Vec<&str> = events
            .iter()
            .filter_map(|e| e["payload"]["phase"].as_str())
            .collect();
        assert!(
            phases.contains(&"session_adopted") && phases.contains(&"adoption_replayed"),
            "{phases:?}"
        );
        let replayed = events
            .iter()
            .filter(|e| e["type"] == "session_update")
            .count();
        assert_eq!(replayed, 4, "the replay is in the log");

        // The listing names the record now; a second adoption is refused, naming it.
        let again = list(&[]);
        assert_eq!(
            again["sessions"][1]["acpxRecordId"],
            record.as_str(),
            "{again}"
        );
        let refused = env.run(&["--agent", &agent, "sessions", "adopt", &door]);
        assert_eq!(refused.code, 2, "{refused:?}");
        assert!(refused.stderr.contains(&record), "{}", refused.stderr);

        // An ordinary session now: a prompt reattaches (load) and has the context.
        let r = env
            .run(&[
                "--format", "quiet", "--agent", &agent, "-s", "door", "recall",
            ])
            .ok();
        assert_eq!(
            r.stdout.trim_end(),
            "remembered 2: echo remember the blue door | title Door talk",
            "{r:?}"
        );
        let history = env
            .run(&["--agent", &agent, "sessions", "history", "-s", "door"])
            .ok();
        assert_eq!(history.stdout.matches("## ").count(), 6, "{history:?}");

        // An id the agent does not know: nothing is stored.
        let before = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        let unknown = env.run(&["--agent", &agent, "sessions", "adopt", "sess-nope"]);
        assert_eq!(unknown.code, 4, "{unknown:?}");
        let after = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        assert_eq!(before["sessions"], after["sessions"]);
    }
}

/// `sessions list --from-agent --format json` with `extra` arguments.
fn agent_list(env: &Env, agent: &str, extra: &[&str]) -> Value {
    let args = [
        &[
            "--format",
            "json",
            "--agent",
            agent,
            "sessions",
            "list",
            "--from-agent",
        ],
        extra,
    ]
    .concat();
    env.run(&args).ok().json()
}

/// The listing of three sessions (`door` and `other` in the project, `far` elsewhere), one a
/// page: this directory's by default, every page followed, `--limit` with the cursor that
/// continues, `--all-cwds`, `--filter-cwd`, and the text table.
fn listing_follows_pages_and_filters(
    env: &Env,
    agent: &str,
    [door, other, far]: [&String; 3],
    elsewhere_dir: &Path,
) {
    let list = |extra: &[&str]| agent_list(env, agent, extra);
    // This directory's sessions, every page (one session a page), newest first.
    let here = list(&[]);
    assert_eq!(here["action"], "agent_sessions_list", "{here}");
    assert_eq!(ids(&here), [other.clone(), door.clone()], "{here}");
    assert!(here.get("nextCursor").is_none(), "{here}");
    let listed_door = &here["sessions"][1];
    assert_eq!(listed_door["title"], "Door talk", "{here}");
    assert_eq!(listed_door["cwd"], env.cwd_str(), "{here}");
    assert!(listed_door["updatedAt"].is_string(), "{here}");
    // --limit stops at a page's end and gives the cursor that continues.
    let first = list(&["--limit", "1"]);
    assert_eq!(ids(&first), std::slice::from_ref(other), "{first}");
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    assert_eq!(
        ids(&list(&["--cursor", &cursor])),
        std::slice::from_ref(door)
    );
    // Every directory, and another directory.
    let all = ids(&list(&["--all-cwds"]));
    assert!(all.contains(far) && all.len() == 3, "{all:?}");
    let dir = elsewhere_dir.display().to_string();
    assert_eq!(
        ids(&list(&["--filter-cwd", &dir])),
        std::slice::from_ref(far)
    );
    // The text table names the sessions and their titles.
    let text = env
        .run(&["--agent", agent, "sessions", "list", "--from-agent"])
        .ok();
    assert!(
        text.stdout.contains(door.as_str()) && text.stdout.contains("Door talk"),
        "{text:?}"
    );
}

#[test]
fn adopt_without_load_resumes_and_an_agent_without_list_is_refused() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let state_s = state.display().to_string();
        let made = session_made_elsewhere(
            &["--load", "--state-dir", &state_s],
            &env.cwd(),
            &["echo hello"],
        );
        // Resume only: attached, but no history is replayed.
        let agent = env.agent_cmd(&format!("--resume --state-dir {state_s}"));
        let r = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "adopt", &made,
            ])
            .ok()
            .json();
        assert_eq!(r["method"], "session/resume", "{r}");
        assert_eq!(r["messageCount"], 0, "{r}");
        // No session/list advertised.
        let r = env.run(&["--agent", &agent, "sessions", "list", "--from-agent"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(
            r.stderr
                .contains("does not advertise sessionCapabilities.list"),
            "{}",
            r.stderr
        );
        // Neither load nor resume.
        let plain = env.agent_cmd("");
        let r = env.run(&["--agent", &plain, "sessions", "adopt", "sess-x", "-s", "x"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("neither session/load"), "{}", r.stderr);
        // --all-cwds needs --from-agent; --from-agent does not take --open.
        let r = env.run(&["sessions", "list", "--all-cwds"]);
        assert_eq!(r.code, 2, "{r:?}");
        let r = env.run(&["sessions", "list", "--from-agent", "--open"]);
        assert_eq!(r.code, 2, "{r:?}");
    }
}
