//! The queue owner end to end, with real processes (the `acpx` binary, its detached owner and
//! the scripted test agent) on both backends: warm prompts, status and close, FIFO order
//! across concurrent clients, `--no-wait`, cancel, overload, SIGKILL of the owner mid-turn,
//! an agent crash, TTL expiry and racing starters.

use crate::common;

use std::process::Child;
use std::time::{Duration, Instant};

use common::process::{alive, finish, kill, spawn, spawn_until, status, wait_for, STARTED};
use common::{Env, BACKENDS};
use serde_json::Value;

/// A stored session no owner holds yet (`--no-owner`): the first prompt starts the owner.
/// (`sessions new` without it starts the owner itself: tests/authority.rs.)
fn new_session(env: &Env, agent: &str) -> Value {
    env.run(&[
        "--format",
        "json",
        "--no-owner",
        "--agent",
        agent,
        "sessions",
        "new",
    ])
    .ok()
    .json()
}

fn events(env: &Env, agent: &str, kind: &str) -> Vec<Value> {
    env.run(&[
        "--format", "json", "--agent", agent, "sessions", "events", "--type", kind,
    ])
    .ok()
    .json_lines()
}

/// `sessions export <id> --as json`: the stored session document.
fn exported(env: &Env, id: &str) -> Value {
    let out = env
        .run(&["sessions", "export", id, "--as", "json"])
        .ok()
        .stdout;
    serde_json::from_str(&out).unwrap()
}

fn close(env: &Env, agent: &str) {
    env.run(&["--agent", agent, "sessions", "close"]).ok();
}

#[test]
fn warm_prompts_status_and_close() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        let st = status(&env, &agent);
        assert_eq!(
            st["status"], "idle",
            "no owner before the first prompt: {st}"
        );
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "one"])
            .ok();
        assert_eq!(r.stdout, "one\n");
        let st = status(&env, &agent);
        assert_eq!(st["status"], "alive", "{st}");
        let owner = st["pid"].as_u64().unwrap();
        let agent_pid = st["agentPid"].as_u64().unwrap();
        assert!(alive(owner) && alive(agent_pid));
        assert_eq!(st["queueDepth"], 0);
        // The second prompt reuses the warm agent: same owner, same agent process.
        let r = env
            .run(&["--format", "json", "--agent", &agent, "echo", "two"])
            .ok();
        let last = r.json_lines().pop().unwrap();
        assert_eq!(last["type"], "prompt_done", "{}", r.stdout);
        let st = status(&env, &agent);
        assert_eq!(st["pid"].as_u64(), Some(owner));
        assert_eq!(st["agentPid"].as_u64(), Some(agent_pid));
        // Each task went through the queue and says so in the log.
        let q: Vec<String> = events(&env, &agent, "queue_event")
            .iter()
            .map(|e| e["payload"]["phase"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            q,
            ["accepted", "started", "done", "accepted", "started", "done"]
        );
        // Controls go through the owner too.
        let m = env
            .run(&["--format", "json", "--agent", &agent, "set-mode", "plan"])
            .ok()
            .json();
        assert_eq!(m["action"], "mode_set");
        assert_eq!(status(&env, &agent)["mode"], "plan");
        // The owner socket is private.
        let sock = std::fs::read_dir(env.authority().join("owners"))
            .unwrap()
            .flatten()
            .find(|e| e.path().extension().is_some_and(|x| x == "sock"))
            .unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(sock.metadata().unwrap().permissions().mode() & 0o777, 0o600);
        // close stops the owner and its agent.
        let c = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "close"])
            .ok()
            .json();
        assert_eq!(c["action"], "session_closed");
        wait_for("the owner and the agent to end", || {
            !alive(owner) && !alive(agent_pid)
        });
    }
}

/// A task of the queue owner rewrites the snapshot once: its end and the queue event that
/// follows it are saved together, before the client hears the outcome, and the owner does
/// not save again once its events pause (it did: two full rewrites a task).
#[test]
fn an_owner_task_rewrites_the_snapshot_once() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = new_session(&env, &agent)["acpxRecordId"]
            .as_str()
            .unwrap()
            .to_owned();
        // The stored revision (one more each save) and the last seq the snapshot holds.
        let stored = || {
            let doc = exported(&env, &id);
            (
                doc["revision"].as_u64().unwrap(),
                doc["acpx"]["audit_seq"].as_u64().unwrap(),
            )
        };
        let last_seq = || {
            env.run(&["--format", "json", "--agent", &agent, "sessions", "events"])
                .ok()
                .json_lines()
                .last()
                .and_then(|e| e["seq"].as_u64())
                .unwrap()
        };
        let pause = Duration::from_millis(1500);
        env.run(&["--format", "quiet", "--agent", &agent, "echo", "one"])
            .ok();
        std::thread::sleep(pause);
        let (mut revision, seq) = stored();
        assert_eq!(
            seq,
            last_seq(),
            "{backend}: the snapshot holds the task's queue event"
        );
        for (task, args) in [
            ("prompt", &["echo", "two"][..]),
            ("set-mode", &["set-mode", "plan"][..]),
        ] {
            let mut command = vec!["--format", "quiet", "--agent", &agent];
            command.extend_from_slice(args);
            env.run(&command).ok();
            let (after, seq) = stored();
            // At least one save a task (a busy machine may pause a task's events long enough
            // for a save in its middle), and none once idle.
            assert!(
                after > revision,
                "{backend}: {task}: {after} after {revision}"
            );
            revision = after;
            assert_eq!(
                seq,
                last_seq(),
                "{backend}: {task}: saved with its queue event"
            );
            std::thread::sleep(pause);
            assert_eq!(
                stored().0,
                after,
                "{backend}: {task}: no second save once idle"
            );
        }
        close(&env, &agent);
    }
}

/// The queue owner holds its last turn only (the turns before settle into its temp files,
/// docs/format.md decision 17), yet every command sees the whole conversation: history,
/// export, search, `messageCount`; and after a SIGKILL of the owner the next one goes on
/// from the stored snapshot, whole.
#[test]
fn an_owner_that_settled_its_turns_keeps_the_whole_conversation() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = new_session(&env, &agent)["acpxRecordId"]
            .as_str()
            .unwrap()
            .to_owned();
        for prompt in [
            &["echo", "alpha"][..],
            &["tools", "1000"],
            &["echo", "beta"],
        ] {
            let mut args = vec!["--format", "quiet", "--agent", &agent];
            args.extend_from_slice(prompt);
            env.run(&args).ok();
        }
        let owner = status(&env, &agent)["pid"].as_u64().unwrap();
        let doc = exported(&env, &id);
        let messages = doc["thread"]["messages"].as_array().unwrap().len();
        assert!(messages >= 7, "three turns, one of tool calls: {doc}");
        let shown = env
            .run(&["--format", "json", "sessions", "show", &id])
            .ok()
            .json();
        assert_eq!(shown["thread"]["messageCount"], messages, "{shown}");
        let history = env.run(&["sessions", "history", &id]).ok().stdout;
        assert!(
            history.contains("alpha") && history.contains("beta"),
            "{history}"
        );
        let hits = env
            .run(&["--format", "json", "sessions", "search", "alpha"])
            .ok()
            .json();
        let indexes: Vec<_> = hits["hits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["messageIndex"].as_u64().unwrap())
            .collect();
        assert_eq!(indexes, [0, 1], "{hits}");
        let r = env.run(&["fsck"]);
        assert_eq!(r.code, 0, "{backend}: {} {}", r.stdout, r.stderr);
        // A SIGKILL loses nothing the owner answered: the next owner starts from the
        // snapshot, whole, and settles it again at its turn's end.
        kill(owner, libc::SIGKILL);
        wait_for("the owner to end", || !alive(owner));
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "gamma"])
            .ok();
        assert_eq!(r.stdout, "gamma\n");
        env.run(&["--format", "quiet", "--agent", &agent, "echo", "delta"])
            .ok();
        let doc = exported(&env, &id);
        let all = doc["thread"]["messages"].as_array().unwrap();
        assert_eq!(all.len(), messages + 4, "{doc}");
        assert_eq!(all[0]["User"]["content"][0]["Text"], "echo alpha");
        let history = env.run(&["sessions", "history", &id]).ok().stdout;
        for word in ["alpha", "beta", "gamma", "delta"] {
            assert!(history.contains(word), "{word}: {history}");
        }
        close(&env, &agent);
    }
}

/// An owner settles the session it opens while it reads it (docs/format.md decision 17,
/// "Opening a long session"): the conversation written by one-process prompts comes back
/// whole in its snapshot, byte for byte, with the owner's turns after it.
#[test]
fn an_owner_opening_a_long_session_keeps_it_whole() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = new_session(&env, &agent)["acpxRecordId"]
            .as_str()
            .unwrap()
            .to_owned();
        for i in 0..6 {
            let word = format!("word{i}");
            let prompt: &[&str] = if i % 2 == 0 {
                &["tools", "1000"]
            } else {
                &["echo", &word]
            };
            let mut args = vec!["--no-owner", "--format", "quiet", "--agent", &agent];
            args.extend_from_slice(prompt);
            env.run(&args).ok();
        }
        let before = exported(&env, &id);
        let earlier = before["thread"]["messages"].as_array().unwrap().clone();
        assert!(earlier.len() >= 12, "six turns: {before}");
        for word in ["first", "second"] {
            let r = env
                .run(&["--format", "quiet", "--agent", &agent, "echo", word])
                .ok();
            assert_eq!(r.stdout, format!("{word}\n"));
        }
        let after = exported(&env, &id);
        let all = after["thread"]["messages"].as_array().unwrap();
        assert_eq!(all.len(), earlier.len() + 4, "{backend}: {after}");
        assert_eq!(all[..earlier.len()], earlier[..], "{backend}");
        assert_eq!(
            after["thread"]["request_token_usage"]
                .as_object()
                .unwrap()
                .iter()
                .take(
                    before["thread"]["request_token_usage"]
                        .as_object()
                        .unwrap()
                        .len()
                )
                .collect::<Vec<_>>(),
            before["thread"]["request_token_usage"]
                .as_object()
                .unwrap()
                .iter()
                .collect::<Vec<_>>(),
            "{backend}"
        );
        let hits = env
            .run(&["--format", "json", "sessions", "search", "word1"])
            .ok()
            .json();
        let asked = earlier
            .iter()
            .position(|m| m["User"]["content"][0]["Text"] == "echo word1")
            .unwrap();
        assert_eq!(hits["hits"][0]["messageIndex"], asked, "{backend}: {hits}");
        let history = env.run(&["sessions", "history", &id]).ok().stdout;
        for word in ["word1", "word5", "first", "second"] {
            assert!(history.contains(word), "{backend}: {word}: {history}");
        }
        let r = env.run(&["fsck"]);
        assert_eq!(r.code, 0, "{backend}: {} {}", r.stdout, r.stderr);
        close(&env, &agent);
    }
}

#[test]
fn fifo_order_across_concurrent_clients_and_overload() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        // Before `sessions new`: the owner it starts takes its queue depth from the config.
        std::fs::write(env.home().join("config.json"), r#"{"queueMaxDepth": 2}"#).unwrap();
        new_session(&env, &agent);
        let first = spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "slow", "30"],
            STARTED,
        );
        let mut waiting = Vec::new();
        for (i, word) in ["second", "third"].iter().enumerate() {
            waiting.push(spawn(
                &env,
                &["--format", "quiet", "--agent", &agent, "echo", word],
            ));
            wait_for("the task to be queued", || {
                status(&env, &agent)["queueDepth"] == i + 1
            });
        }
        // The queue is full: refused, nothing queued.
        let over = env.run(&["--format", "json", "--agent", &agent, "echo", "fourth"]);
        assert_eq!(over.code, 1, "{over:?}");
        assert!(over.stdout.contains("QUEUE_OWNER_OVERLOADED"), "{over:?}");
        let (code, lines, stderr) = first.finish();
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(lines.last().unwrap()["type"], "prompt_done");
        for (child, word) in waiting.into_iter().zip(["second", "third"]) {
            let r = finish(child);
            assert_eq!(r.code, 0, "{r:?}");
            assert_eq!(r.stdout, format!("{word}\n"));
        }
        let order: Vec<String> = events(&env, &agent, "prompt_started")
            .iter()
            .map(|e| e["payload"]["message_preview"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(order, ["slow 30", "echo second", "echo third"]);
        close(&env, &agent);
    }
}

#[test]
fn no_wait_and_cancel_through_the_owner() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let s = new_session(&env, &agent);
        let q = env
            .run(&[
                "--format",
                "json",
                "--agent",
                &agent,
                "prompt",
                "--no-wait",
                "slow",
                "400",
            ])
            .ok()
            .json();
        assert_eq!(q["action"], "prompt_queued");
        assert_eq!(q["acpxRecordId"], s["acpxRecordId"]);
        let rid = q["requestId"].as_str().unwrap().to_owned();
        wait_for("the queued turn to start", || {
            status(&env, &agent)["requestId"] == rid.as_str()
        });
        let c = env
            .run(&["--format", "json", "--agent", &agent, "cancel"])
            .ok()
            .json();
        assert_eq!(c["cancelled"], true, "{c}");
        assert_eq!(c["requestId"], rid.as_str());
        wait_for("the cancelled turn to end", || {
            events(&env, &agent, "prompt_done")
                .iter()
                .any(|e| e["requestId"] == rid.as_str())
        });
        let done = events(&env, &agent, "prompt_done");
        assert_eq!(done.last().unwrap()["payload"]["stopReason"], "cancelled");
        // A waiting client's turn cancelled from another terminal ends with exit 0.
        let run = spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "slow", "400"],
            STARTED,
        );
        env.run(&["--agent", &agent, "cancel"]).ok();
        let (code, lines, stderr) = run.finish();
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(lines.last().unwrap()["payload"]["stopReason"], "cancelled");
        // --no-wait needs the owner.
        let r = env.run(&["--no-owner", "--agent", &agent, "prompt", "--no-wait", "hi"]);
        assert_eq!(r.code, 2, "{r:?}");
        close(&env, &agent);
    }
}

#[test]
fn owner_killed_mid_turn_then_recovered_by_the_next_owner() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        let run = spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "slow", "400"],
            "chunk 3",
        );
        let st = status(&env, &agent);
        let owner = st["pid"].as_u64().unwrap();
        let agent_pid = st["agentPid"].as_u64().unwrap();
        let rid = st["requestId"].as_str().unwrap().to_owned();
        kill(owner, libc::SIGKILL);
        let started = Instant::now();
        let (code, lines, stderr) = run.finish();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert_eq!(code, 1, "{stderr}");
        let err = lines.last().unwrap();
        assert_eq!(
            err["error"]["message"],
            "queue owner disconnected; outcome unknown"
        );
        assert_eq!(err["error"]["data"]["acpxCode"], "RUNTIME");
        assert_eq!(
            err["error"]["data"]["detailCode"],
            "QUEUE_RUNTIME_PROMPT_FAILED"
        );
        assert_eq!(err["error"]["data"]["retryable"], true);
        // Every event the client was shown is in the log.
        let shown: Vec<u64> = lines.iter().filter_map(|l| l["seq"].as_u64()).collect();
        let logged: Vec<u64> = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "events"])
            .ok()
            .json_lines()
            .iter()
            .map(|e| e["seq"].as_u64().unwrap())
            .collect();
        assert!(shown.iter().all(|s| logged.contains(s)), "{shown:?}");
        // The next command starts a new owner, which records the lost turn as interrupted.
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "after"])
            .ok();
        assert_eq!(r.stdout, "after\n");
        let errors = events(&env, &agent, "prompt_error");
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0]["requestId"], rid.as_str());
        assert_eq!(errors[0]["payload"]["outcome"], "interrupted");
        assert_ne!(status(&env, &agent)["pid"].as_u64(), Some(owner));
        wait_for("the dead owner's agent to end", || !alive(agent_pid));
        close(&env, &agent);
    }
}

#[test]
fn agent_crash_is_recorded_and_the_next_task_gets_a_new_agent() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        let r = env.run(&["--format", "json", "--agent", &agent, "die"]);
        assert_eq!(r.code, 1, "{r:?}");
        let before = status(&env, &agent);
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "revived"])
            .ok();
        assert_eq!(r.stdout, "revived\n");
        let after = status(&env, &agent);
        assert_eq!(after["pid"], before["pid"], "the same owner");
        let exits: Vec<Value> = events(&env, &agent, "lifecycle_event")
            .into_iter()
            .filter(|e| e["payload"]["phase"] == "agent_exit")
            .collect();
        assert!(
            exits
                .iter()
                .any(|e| e["payload"]["reason"] == "process_exit"),
            "{exits:?}"
        );
        close(&env, &agent);
    }
}

/// An agent killed while its owner is idle: `status` says so instead of showing the dead
/// process as the agent, and the next prompt gets a new one.
#[test]
fn status_tells_an_agent_killed_while_the_owner_is_idle() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        env.run(&["--agent", &agent, "echo", "warm"]).ok();
        let st = status(&env, &agent);
        let agent_pid = st["agentPid"].as_u64().unwrap();
        assert!(st.get("agentExited").is_none(), "{st}");
        let pid = i32::try_from(agent_pid).unwrap();
        // SAFETY: kill(2) on the agent process this test's owner started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let st = loop {
            let st = status(&env, &agent);
            if st.get("agentExited").is_some() || std::time::Instant::now() > deadline {
                break st;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        assert_eq!(st["status"], "alive", "{st}");
        assert_eq!(st["agentExited"], true, "{st}");
        assert!(st.get("agentPid").is_none(), "{st}");
        assert!(
            st["summary"].as_str().unwrap().contains("agent exited"),
            "{st}"
        );
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "again"])
            .ok();
        assert_eq!(r.stdout, "again\n");
        let st = status(&env, &agent);
        assert!(st.get("agentExited").is_none(), "{st}");
        assert_ne!(st["agentPid"].as_u64().unwrap(), agent_pid, "{st}");
        close(&env, &agent);
    }
}

#[test]
fn ttl_expiry_ends_owner_and_agent() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        env.run(&["--ttl", "1", "--agent", &agent, "echo", "short"])
            .ok();
        let st = status(&env, &agent);
        let (owner, agent_pid) = (
            st["pid"].as_u64().unwrap(),
            st["agentPid"].as_u64().unwrap(),
        );
        assert_eq!(st["ttl"], 1);
        wait_for("the idle owner to exit", || {
            !alive(owner) && !alive(agent_pid)
        });
        assert_eq!(status(&env, &agent)["status"], "idle");
        let show = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        assert_eq!(show["closed"], false, "TTL expiry keeps the session open");
    }
}

#[test]
fn racing_starters_share_one_owner() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        let children: Vec<Child> = (0..4)
            .map(|i| {
                spawn(
                    &env,
                    &[
                        "--format",
                        "quiet",
                        "--agent",
                        &agent,
                        "echo",
                        &format!("r{i}"),
                    ],
                )
            })
            .collect();
        for (i, c) in children.into_iter().enumerate() {
            let r = finish(c);
            assert_eq!(r.code, 0, "{r:?}");
            assert_eq!(r.stdout, format!("r{i}\n"));
        }
        let owners: std::collections::BTreeSet<u64> = events(&env, &agent, "queue_event")
            .iter()
            .filter_map(|e| e["payload"]["ownerPid"].as_u64())
            .collect();
        assert_eq!(owners.len(), 1, "{owners:?}");
        close(&env, &agent);
    }
}

#[test]
fn a_client_killed_while_it_waits_leaves_its_task_to_complete() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        let run = spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "slow", "10"],
            STARTED,
        );
        kill(u64::from(run.child.id()), libc::SIGKILL);
        let (code, _, _) = run.finish();
        assert_eq!(code, 128 + libc::SIGKILL, "killed by the signal");
        // The owner runs the turn to its end and records it.
        wait_for("the turn's end in the log", || {
            !events(&env, &agent, "prompt_done").is_empty()
        });
        let done = events(&env, &agent, "prompt_done");
        assert_eq!(done[0]["payload"]["stopReason"], "end_turn", "{done:?}");
        // The queue's `done` is appended right after the turn's `prompt_done`, so it may
        // not be in the log yet when `prompt_done` is first seen.
        let queue_done = || {
            events(&env, &agent, "queue_event")
                .iter()
                .any(|e| e["payload"]["phase"] == "done" && e["payload"]["outcome"] == "completed")
        };
        wait_for("the queue's done event in the log", queue_done);
        // And the owner serves the next command.
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "next"])
            .ok();
        assert_eq!(r.stdout, "next\n");
        close(&env, &agent);
    }
}

#[test]
fn the_task_timeout_bounds_an_agent_that_never_answers_initialize() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        // The agent hangs before speaking ACP once the flag file exists.
        let flag = env.home.path().with_extension("hang");
        let agent = format!(
            "sh -c 'if [ -e {} ]; then exec sleep 1000; fi; exec {}'",
            flag.display(),
            env.agent_cmd("")
        );
        env.run(&["--no-owner", "--agent", &agent, "sessions", "new"])
            .ok();
        std::fs::write(&flag, b"").unwrap();
        let start = Instant::now();
        let r = env.run(&["--agent", &agent, "--timeout", "2", "prompt", "echo hi"]);
        let waited = start.elapsed();
        let _ = std::fs::remove_file(&flag);
        assert_eq!(r.code, 3, "{backend}: {}", r.stderr);
        assert!(
            waited < Duration::from_secs(30),
            "{backend}: the client waited {waited:?}"
        );
        close(&env, &agent);
    }
}

#[test]
fn fsck_leaves_a_session_held_by_its_queue_owner_alone() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent);
        env.run(&["--format", "quiet", "--agent", &agent, "echo", "hi"])
            .ok();
        // The warm owner runs the agent the record names and saves its snapshot when due:
        // neither is a problem while it lives.
        let r = env.run(&["fsck"]);
        assert_eq!(r.code, 0, "{backend}: {} {}", r.stdout, r.stderr);
        assert!(r.stderr.contains("queue owner"), "{backend}: {}", r.stderr);
        close(&env, &agent);
        let r = env.run(&["fsck"]);
        assert_eq!(r.code, 0, "{backend}: {} {}", r.stdout, r.stderr);
    }
}

/// A cancel reaches a prompt whose agent is still starting (issue 52): `status` says
/// `starting`, `cancel` withdraws the prompt, its client exits 130 saying so at once, and the
/// prompt never reaches the agent; with `--no-owner` the same, once the agent is up.
#[test]
fn a_cancel_while_the_agent_starts_withdraws_the_prompt() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("--start-delay-ms 3000");
        new_session(&env, &agent);
        let started = Instant::now();
        let prompt = spawn(&env, &["--agent", &agent, "prompt", "slow", "100"]);
        wait_for("the owner to say its agent is starting", || {
            status(&env, &agent)["status"] == "starting"
        });
        let st = status(&env, &agent);
        let rid = st["startingRequestId"].as_str().unwrap().to_owned();
        assert!(st.get("requestId").is_none(), "{st}");
        let c = env
            .run(&["--format", "json", "--agent", &agent, "cancel"])
            .ok()
            .json();
        assert_eq!(c["cancelled"], true, "{c}");
        assert_eq!(c["withdrawn"], true, "{c}");
        assert_eq!(c["requestId"], rid.as_str(), "{c}");
        let r = finish(prompt);
        assert_eq!(r.code, 130, "{r:?}");
        assert!(
            r.stderr.contains("withdrawn before its turn started"),
            "{r:?}"
        );
        // Told at once, not after the agent started.
        assert!(started.elapsed() < Duration::from_millis(2900), "{r:?}");
        wait_for("the owner to be idle with its agent up", || {
            let s = status(&env, &agent);
            s["status"] == "alive" && s.get("agentPid").is_some()
        });
        assert!(events(&env, &agent, "prompt_started").is_empty());
        let withdrawn = events(&env, &agent, "queue_event");
        assert!(
            withdrawn.iter().any(|e| e["requestId"] == rid.as_str()
                && e["payload"]["detailCode"] == "QUEUE_TASK_WITHDRAWN"),
            "{withdrawn:?}"
        );
        // The warm agent serves the next prompt.
        let r = env.run(&["--agent", &agent, "echo", "after"]).ok();
        assert_eq!(r.stdout.trim(), "after");
        close(&env, &agent);

        // One process (`--no-owner`): withdrawn too, the agent stopped without a turn.
        let prompt = spawn(&env, &["--no-owner", "--agent", &agent, "sessions", "new"]);
        assert_eq!(finish(prompt).code, 0);
        let prompt = spawn(
            &env,
            &["--no-owner", "--agent", &agent, "prompt", "slow", "100"],
        );
        wait_for("the one-process prompt to take its run", || {
            env.run(&["--format", "json", "--agent", &agent, "status"])
                .json()["status"]
                == "running"
        });
        let c = env.run(&["--agent", &agent, "cancel"]).ok();
        assert!(c.stdout.contains("cancel requested"), "{c:?}");
        let r = finish(prompt);
        assert_eq!(r.code, 130, "{r:?}");
        assert!(
            r.stderr.contains("withdrawn before its turn started"),
            "{r:?}"
        );
        assert!(events(&env, &agent, "prompt_started").is_empty());
    }
}

/// A stopped agent (`kill -STOP`) is replaced (issue 45): the turn that times out and whose
/// cancel the agent never answers marks the agent stuck, and the next prompt gets a new agent
/// process (the session reattached), instead of timing out the same way forever.
#[test]
fn a_stuck_agent_is_replaced_before_the_next_task() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("--load --state-dir agent-state");
        new_session(&env, &agent);
        env.run(&["--agent", &agent, "echo", "first"]).ok();
        let stuck = status(&env, &agent)["agentPid"].as_u64().unwrap();
        kill(stuck, libc::SIGSTOP);
        let r = env.run(&["--timeout", "1", "--agent", &agent, "echo", "lost"]);
        assert_eq!(r.code, 3, "{r:?}");
        assert!(r.stderr.contains("it is stuck"), "{}", r.stderr);
        let r = env
            .run(&["--timeout", "30", "--agent", &agent, "echo", "next"])
            .ok();
        assert_eq!(r.stdout.trim(), "next", "{r:?}");
        let now = status(&env, &agent)["agentPid"].as_u64().unwrap();
        assert_ne!(now, stuck, "a new agent process serves the session");
        // The stuck one was stopped for good (a stopped process still dies of SIGKILL).
        wait_for("the stuck agent to be gone", || !alive(stuck));
        let errors = events(&env, &agent, "prompt_error");
        assert_eq!(
            errors.last().unwrap()["payload"]["detailCode"],
            "CANCEL_UNANSWERED"
        );
        close(&env, &agent);
    }
}
