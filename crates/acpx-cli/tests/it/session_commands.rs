//! End-to-end tests of the session commands that start an agent (`sessions new`, `ensure`,
//! `fork`, `--resume-session`, `close`), of session lookup, and of `fsck` after a killed
//! turn, with the workspace's scripted test agent (see `common::test_agent`), on both backends.

use crate::common;

use std::process::Child;

use common::process::{finish, kill_child, spawn, spawn_until, STARTED};
use common::{Env, BACKENDS};
use serde_json::Value;

fn new_session(env: &Env, agent: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--format", "json", "--agent", agent, "sessions", "new"];
    args.extend(extra);
    env.run(&args).ok().json()
}

#[test]
fn new_and_ensure_emit_canonical_identity() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let created = new_session(&env, &agent, &[]);
        assert_eq!(created["action"], "session_ensured");
        assert_eq!(created["created"], true);
        assert!(created["acpxRecordId"].is_string());
        assert!(created["acpxSessionId"]
            .as_str()
            .unwrap()
            .starts_with("sess-"));
        assert!(created.get("agentSessionId").is_none(), "{created}");
        assert!(created.get("replacedSessionId").is_none());

        let ensured = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "ensure"])
            .ok()
            .json();
        assert_eq!(ensured["created"], false);
        assert_eq!(ensured["acpxRecordId"], created["acpxRecordId"]);

        // `sessions new` again replaces (closes) the open one.
        let second = new_session(&env, &agent, &[]);
        assert_eq!(second["replacedSessionId"], created["acpxRecordId"]);
        let old = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "show",
                created["acpxRecordId"].as_str().unwrap(),
            ])
            .ok()
            .json();
        assert_eq!(old["closed"], true);

        // An agent that reports its own id: agentSessionId appears, and status shows it too.
        let native = env.agent_cmd("--agent-session-id");
        let n = new_session(&env, &native, &["--name", "native"]);
        assert!(
            n["agentSessionId"].as_str().is_some_and(|s| !s.is_empty()),
            "{n}"
        );
        assert_eq!(n["name"], "native");
        let st = env
            .run(&[
                "--format", "json", "--agent", &native, "status", "-s", "native",
            ])
            .ok()
            .json();
        // `sessions new` left the session's owner warm.
        assert_eq!(st["status"], "alive");
        assert_eq!(st["acpxRecordId"], n["acpxRecordId"]);
        assert_eq!(st["agentSessionId"], n["agentSessionId"]);
        // Text mode says where it is stored.
        let text = env
            .run(&["--agent", &agent, "sessions", "new", "--name", "t"])
            .ok()
            .stdout;
        assert!(text.contains("stored in"), "{text}");
    }
}

#[test]
fn concurrent_ensure_creates_one_session() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let children: Vec<Child> = (0..4)
            .map(|_| {
                spawn(
                    &env,
                    &[
                        "--format", "json", "--agent", &agent, "sessions", "ensure", "--name",
                        "race",
                    ],
                )
            })
            .collect();
        let results: Vec<Value> = children
            .into_iter()
            .map(|c| finish(c).ok().json())
            .collect();
        let ids: std::collections::HashSet<&str> = results
            .iter()
            .map(|r| r["acpxRecordId"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 1, "{results:?}");
        assert_eq!(results.iter().filter(|r| r["created"] == true).count(), 1);
        let list = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        assert_eq!(list["sessions"].as_array().unwrap().len(), 1);
    }
}

#[test]
fn prompt_without_session_exits_4_and_says_how_to_create_one() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let r = env.run(&["--agent", &agent, "prompt", "hi"]);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(r.stderr.contains("sessions new"), "{}", r.stderr);
        let r = env.run(&["--format", "json", "--agent", &agent, "hi"]);
        assert_eq!(r.code, 4);
        let e = r.json();
        assert_eq!(e["error"]["code"], -32002);
        assert_eq!(e["error"]["data"]["acpxCode"], "NO_SESSION");
        // A named agent that is not installed still finds no session first.
        let r = env.run(&["codex", "hello"]);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(r.stderr.contains("acpx codex sessions new"), "{}", r.stderr);
    }
}

#[test]
fn lookup_walks_up_to_the_git_root_and_names_separate_sessions() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let root = new_session(&env, &agent, &[]);
        let named = new_session(&env, &agent, &["--name", "api"]);
        let sub = env.project.path().join("a/b");
        std::fs::create_dir_all(&sub).unwrap();
        let sub_s = sub.to_str().unwrap();
        // From a subdirectory, the root's session is found.
        let st = env
            .run(&[
                "--format", "json", "--cwd", sub_s, "--agent", &agent, "status",
            ])
            .ok()
            .json();
        assert_eq!(st["acpxRecordId"], root["acpxRecordId"]);
        let st = env
            .run(&[
                "--format", "json", "--cwd", sub_s, "--agent", &agent, "status", "-s", "api",
            ])
            .ok()
            .json();
        assert_eq!(st["acpxRecordId"], named["acpxRecordId"]);
        let r = env
            .run(&[
                "--format", "quiet", "--cwd", sub_s, "--agent", &agent, "prompt", "-s", "api",
                "echo", "named",
            ])
            .ok();
        assert_eq!(r.stdout, "named\n");
        // A session in the nearer directory wins over the root's.
        let near = env
            .run(&[
                "--format", "json", "--cwd", sub_s, "--agent", &agent, "sessions", "new",
            ])
            .ok()
            .json();
        let st = env
            .run(&[
                "--format", "json", "--cwd", sub_s, "--agent", &agent, "status",
            ])
            .ok()
            .json();
        assert_eq!(st["acpxRecordId"], near["acpxRecordId"]);
        // Another agent command is another scope.
        let other = env.agent_cmd("--close");
        let st = env
            .run(&["--format", "json", "--agent", &other, "status"])
            .ok()
            .json();
        assert_eq!(st["status"], "no-session");
        // Quiet: the state word alone, for scripts.
        let r = env
            .run(&["--format", "quiet", "--agent", &other, "status"])
            .ok();
        assert_eq!(r.stdout, "no-session\n");
        let r = env
            .run(&[
                "--format", "quiet", "--cwd", sub_s, "--agent", &agent, "status", "-s", "api",
            ])
            .ok();
        assert!(["alive\n", "idle\n"].contains(&r.stdout.as_str()), "{r:?}");
        // Named session history shows only its own turns.
        let hist = env
            .run(&["--agent", &agent, "sessions", "history", "-s", "api"])
            .ok()
            .stdout;
        assert!(hist.contains("echo named"), "{hist}");
    }
}

#[test]
fn fork_with_session_fork_and_with_a_copy() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let agent = env.agent_cmd(&format!("--fork --load --state-dir {}", state.display()));
        let parent = new_session(&env, &agent, &[]);
        let pid = parent["acpxRecordId"].as_str().unwrap().to_owned();
        env.run(&["--agent", &agent, "echo", "before", "the", "fork"])
            .ok();
        let before = env
            .run(&["--format", "json", "sessions", "show", &pid])
            .ok()
            .json();

        let f = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "fork", "--name", "branch",
            ])
            .ok()
            .json();
        assert_eq!(f["action"], "session_forked");
        assert_eq!(f["method"], "session/fork");
        assert_eq!(f["parentAcpxRecordId"], pid.as_str());
        assert_eq!(f["name"], "branch");
        assert_ne!(f["acpxRecordId"], pid.as_str());
        assert_ne!(f["acpxSessionId"], before["acpxSessionId"]);
        assert_eq!(f["forkMessageCount"], 2);
        let child = f["acpxRecordId"].as_str().unwrap().to_owned();
        let show = env
            .run(&["--format", "json", "sessions", "show", &child])
            .ok()
            .json();
        assert_eq!(show["acpx"]["forked_from"]["acpxRecordId"], pid.as_str());
        assert!(show["acpx"]["forked_from"]["seq"].as_u64().unwrap() > 0);
        let hist = env.run(&["sessions", "history", &child]).ok().stdout;
        assert!(hist.contains("echo before the fork"), "{hist}");
        let ev = env
            .run(&["--format", "json", "sessions", "events", &child])
            .ok()
            .json_lines();
        assert_eq!(ev[0]["payload"]["phase"], "session_forked");
        // The fork is a session of its own; the parent is unchanged.
        let r = env
            .run(&[
                "--format", "quiet", "--agent", &agent, "-s", "branch", "echo", "on", "the",
                "branch",
            ])
            .ok();
        assert_eq!(r.stdout, "on the branch\n");
        let after = env
            .run(&["--format", "json", "sessions", "show", &pid])
            .ok()
            .json();
        assert_eq!(
            after["thread"]["messageCount"],
            before["thread"]["messageCount"]
        );
        assert_eq!(after["acpxRecordId"], before["acpxRecordId"]);

        // An agent without session/fork: a copy of the conversation, said plainly.
        let plain = env.agent_cmd("");
        new_session(&env, &plain, &[]);
        env.run(&["--agent", &plain, "echo", "copied"]).ok();
        let r = env
            .run(&["--format", "json", "--agent", &plain, "sessions", "fork"])
            .ok();
        assert!(
            r.stderr.contains("does not support session/fork"),
            "{}",
            r.stderr
        );
        let f = r.json();
        assert_eq!(f["method"], "copy");
        let hist = env
            .run(&["sessions", "history", f["acpxRecordId"].as_str().unwrap()])
            .ok()
            .stdout;
        assert!(hist.contains("echo copied"), "{hist}");

        // An agent that advertises session/fork but answers it with -32601 (pydantic-acp):
        // the same copy, not a failed fork.
        let refusing = env.agent_cmd("--fork-unsupported");
        new_session(&env, &refusing, &[]);
        env.run(&["--agent", &refusing, "echo", "refused"]).ok();
        let r = env
            .run(&["--format", "json", "--agent", &refusing, "sessions", "fork"])
            .ok();
        assert!(
            r.stderr.contains("does not support session/fork"),
            "{}",
            r.stderr
        );
        let f = r.json();
        assert_eq!(f["method"], "copy", "{f}");
        let hist = env
            .run(&["sessions", "history", f["acpxRecordId"].as_str().unwrap()])
            .ok()
            .stdout;
        assert!(hist.contains("echo refused"), "{hist}");
    }
}

/// An agent that keeps a fork only in the process that made it until the fork's first turn
/// (`--lazy-fork`; issue 52): `sessions fork` hands that process to the fork's queue owner,
/// so the fork's first prompt runs where the fork exists and remembers the parent's turns,
/// and later processes load it. With `--no-owner` the fork's process stops, the agent never
/// stores the fork, and the fallback says so; the record keeps the conversation either way.
#[test]
fn a_fork_keeps_the_agent_that_made_it() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let agent = env.agent_cmd(&format!(
            "--lazy-fork --load --state-dir {}",
            state.display()
        ));
        let parent = new_session(&env, &agent, &[]);
        let pid = parent["acpxRecordId"].as_str().unwrap().to_owned();
        env.run(&["--agent", &agent, "echo", "one"]).ok();
        env.run(&["--agent", &agent, "echo", "two"]).ok();
        let f = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "fork", "--name", "kept",
            ])
            .ok()
            .json();
        assert_eq!(f["method"], "session/fork", "{f}");
        let child = f["acpxRecordId"].as_str().unwrap().to_owned();
        // The fork's owner runs the agent that made the fork.
        let st = env
            .run(&[
                "--format", "json", "--agent", &agent, "-s", "kept", "status",
            ])
            .ok()
            .json();
        assert_eq!(st["status"], "alive", "{st}");
        let r = env
            .run(&[
                "--format", "quiet", "--agent", &agent, "-s", "kept", "recall",
            ])
            .ok();
        assert_eq!(r.stdout, "remembered 2: echo one | echo two\n", "{r:?}");
        let ev = env
            .run(&["--format", "json", "sessions", "events", &child])
            .ok()
            .json_lines();
        assert!(ev
            .iter()
            .all(|e| e["payload"]["phase"] != "session_fallback"));
        let started = ev
            .iter()
            .find(|e| e["payload"]["phase"] == "agent_started")
            .expect("the child records the agent it got");
        assert_eq!(started["payload"]["handedOverFrom"], pid.as_str());
        let parent_ev = env
            .run(&["--format", "json", "sessions", "events", &pid])
            .ok()
            .json_lines();
        let handed = parent_ev
            .iter()
            .find(|e| e["payload"]["phase"] == "agent_handed_over")
            .expect("the parent records that its agent went to the fork");
        assert_eq!(handed["payload"]["toRecordId"], child.as_str());
        let shown = env
            .run(&["--format", "json", "sessions", "show", &pid])
            .ok()
            .json();
        assert!(shown.get("pid").is_none_or(Value::is_null), "{shown}");
        // A later process: the fork was stored by its first turn, and loads.
        let r = env
            .run(&[
                "--format",
                "quiet",
                "--no-owner",
                "--agent",
                &agent,
                "-s",
                "kept",
                "recall",
            ])
            .ok();
        assert_eq!(
            r.stdout, "remembered 3: echo one | echo two | recall\n",
            "{r:?}"
        );

        // `--no-owner`: the process that made the fork stops; the agent never stored it.
        let f = env
            .run(&[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                &agent,
                "sessions",
                "fork",
                &pid,
                "--name",
                "lost",
            ])
            .ok()
            .json();
        let lost = f["acpxRecordId"].as_str().unwrap().to_owned();
        let r = env.run(&["--agent", &agent, "-s", "lost", "recall"]).ok();
        assert_eq!(r.stdout.trim(), "remembered 0:", "{r:?}");
        assert!(
            r.stderr.contains("was never stored by the agent"),
            "{}",
            r.stderr
        );
        let hist = env.run(&["sessions", "history", &lost]).ok().stdout;
        assert!(
            hist.contains("echo two"),
            "the record keeps the conversation: {hist}"
        );
    }
}

#[test]
fn resume_session_attaches_a_new_record_to_an_existing_acp_session() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let state = env.home().join("agent-state");
        let agent = env.agent_cmd(&format!("--load --state-dir {}", state.display()));
        let first = new_session(&env, &agent, &[]);
        env.run(&["--agent", &agent, "echo", "remember", "me"]).ok();
        let show = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "show",
                first["acpxRecordId"].as_str().unwrap(),
            ])
            .ok()
            .json();
        let acp = show["acpxSessionId"].as_str().unwrap().to_owned();
        let r = new_session(&env, &agent, &["--name", "again", "--resume-session", &acp]);
        assert_eq!(r["created"], true);
        assert_eq!(r["acpxSessionId"], acp.as_str());
        assert_eq!(
            r["acpxRecordId"],
            acp.as_str(),
            "the record id is the resumed id when free"
        );
        // An id the agent does not know: exit 4, nothing created.
        let bad = env.run(&[
            "--agent",
            &agent,
            "sessions",
            "new",
            "--name",
            "x",
            "--resume-session",
            "sess-unknown",
        ]);
        assert_eq!(bad.code, 4, "{bad:?}");
        assert!(
            bad.stderr.contains("no session was created"),
            "{}",
            bad.stderr
        );
        let list = env
            .run(&["--format", "json", "sessions", "list", "--name", "x"])
            .ok()
            .json();
        assert!(list["sessions"].as_array().unwrap().is_empty());
    }
}

#[test]
fn close_cancels_a_running_prompt_first() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let s = new_session(&env, &agent, &[]);
        let id = s["acpxRecordId"].as_str().unwrap().to_owned();
        let run = spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "slow", "400"],
            STARTED,
        );
        let show = env.run(&["sessions", "show", &id]).ok().stdout;
        assert!(show.contains("prompt running"), "{show}");
        let closed = env
            .run(&["--format", "json", "sessions", "close", &id])
            .ok()
            .json();
        assert_eq!(closed["action"], "session_closed");
        let (code, lines, stderr) = run.finish();
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(lines.last().unwrap()["payload"]["stopReason"], "cancelled");
        let show = env
            .run(&["--format", "json", "sessions", "show", &id])
            .ok()
            .json();
        assert_eq!(show["closed"], true);
        let r = env.run(&["--agent", &agent, "echo", "x"]);
        assert_eq!(r.code, 4, "a closed session is not found by prompt: {r:?}");
    }
}

#[test]
fn fsck_repairs_a_turn_left_running_by_a_killed_process() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        // The process running the turn is killed: a one-process prompt (--no-owner) here; the
        // queue owner killed mid-turn is tests/owner.rs's.
        let run = spawn_until(
            &env,
            &[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                &agent,
                "slow",
                "400",
            ],
            "chunk 3",
        );
        kill_child(&run.child, libc::SIGKILL);
        let _ = run.finish();
        let r = env.run(&["--format", "json", "fsck"]);
        assert_eq!(r.code, 1, "{r:?}");
        let report = r.json();
        let kinds: Vec<&str> = report["problems"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["kind"].as_str().unwrap())
            .collect();
        assert!(kinds.contains(&"turn_interrupted"), "{report}");
        assert!(kinds.contains(&"stale_agent_pid"), "{report}");
        let fixed = env
            .run(&["--format", "json", "fsck", "--repair"])
            .ok()
            .json();
        assert!(
            fixed["problems"]
                .as_array()
                .unwrap()
                .iter()
                .all(|p| p["repaired"] == true),
            "{fixed}"
        );
        env.run(&["fsck"]).ok();
        let show = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        assert_eq!(show["acpx"]["last_turn"]["outcome"], "interrupted");
        assert!(show.get("pid").is_none_or(Value::is_null), "{show}");
        // Everything the killed turn streamed before it died is in the thread.
        let hist = env
            .run(&["--agent", &agent, "sessions", "history"])
            .ok()
            .stdout;
        assert!(hist.contains("chunk 3."), "{hist}");
    }
}

/// The README's quickstart: the built-in `demo` agent needs no path, no API key and no other
/// binary; the session is stored on the default backend and a second prompt reattaches to it.
#[test]
fn demo_agent_quickstart_records_a_real_prompt() {
    let env = Env::new("fs");
    let ensure = env.run(&["demo", "sessions", "ensure"]);
    assert_eq!(ensure.code, 0, "{ensure:?}");
    assert!(ensure.stdout.contains("stored in"), "{ensure:?}");
    let first = env.run(&["demo", "hello from the readme"]);
    assert_eq!(first.code, 0, "{first:?}");
    assert!(first.stdout.contains("hello from the readme"), "{first:?}");
    let second = env.run(&["demo", "echo again"]);
    assert_eq!(second.code, 0, "{second:?}");
    let events = env.run(&[
        "demo",
        "--format",
        "json",
        "sessions",
        "events",
        "--type",
        "lifecycle_event",
    ]);
    assert_eq!(events.code, 0, "{events:?}");
    let phases: Vec<String> = events
        .stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|e| e["payload"]["phase"].as_str().map(str::to_owned))
        .collect();
    assert!(phases.contains(&"session_created".to_owned()), "{phases:?}");
    // `sessions ensure` created the session in its queue owner, which served both prompts
    // with the agent that made it; a reattach, when one happens, loads the session.
    let started = phases.iter().filter(|p| *p == "agent_started").count();
    assert!(
        started == 1 || phases.contains(&"session_attached".to_owned()),
        "the prompts must run in the creating agent or reattach with session/load, not fall back: {phases:?}"
    );
    assert!(
        !phases.contains(&"session_fallback".to_owned()),
        "{phases:?}"
    );
    let sessions = env.home.path().join("sessions");
    let snapshots: Vec<_> = std::fs::read_dir(&sessions)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name().to_string_lossy().ends_with(".json")
                && !e.file_name().to_string_lossy().starts_with('.')
        })
        .collect();
    assert_eq!(
        snapshots.len(),
        1,
        "one session stored under {}",
        sessions.display()
    );
}
