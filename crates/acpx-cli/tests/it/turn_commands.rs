//! End-to-end tests of the commands that run a turn (`prompt`, `exec`, `cancel`, Ctrl-C,
//! `set-mode`, `set`, `--timeout`, `sessions events --follow`), with the workspace's scripted
//! test agent (see `common::test_agent`), on both backends.

use crate::common;

use std::io::{BufRead, BufReader};

use common::process::{finish, kill_child, spawn, spawn_until, status, wait_for, Running, STARTED};
use common::{Env, BACKENDS};
use serde_json::Value;

fn new_session(env: &Env, agent: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--format", "json", "--agent", agent, "sessions", "new"];
    args.extend(extra);
    env.run(&args).ok().json()
}

#[test]
fn prompt_formats_and_inputs() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let s = new_session(&env, &agent, &[]);
        let id = s["acpxRecordId"].as_str().unwrap().to_owned();

        // text: the reply on stdout, notes on stderr.
        let r = env
            .run(&["--agent", &agent, "prompt", "echo", "hello", "world"])
            .ok();
        assert_eq!(r.stdout, "hello world\n");
        assert!(r.stderr.contains("[done] end_turn"), "{}", r.stderr);
        let r = env.run(&["--agent", &agent, "think"]).ok();
        assert!(r.stderr.contains("[thinking]"), "{}", r.stderr);
        assert!(!r.stdout.contains("[thinking]"));
        let r = env.run(&["--agent", &agent, "tools"]).ok();
        assert!(
            r.stderr.contains("[tool] Read README.md (completed)"),
            "{}",
            r.stderr
        );
        assert!(r.stderr.contains("(failed)"), "{}", r.stderr);

        // quiet: only the final text.
        let r = env
            .run(&[
                "--format", "quiet", "--agent", &agent, "echo", "just", "this",
            ])
            .ok();
        assert_eq!(r.stdout, "just this\n");
        assert!(r.stderr.is_empty(), "{}", r.stderr);

        // stdin and --file.
        let r = env.run_stdin(
            &["--format", "quiet", "--agent", &agent, "prompt"],
            "echo from stdin\n",
        );
        assert_eq!(r.ok().stdout, "from stdin\n");
        let f = env.home().join("p.txt");
        std::fs::write(&f, "echo from a file").unwrap();
        let r = env
            .run(&[
                "--format",
                "quiet",
                "--agent",
                &agent,
                "prompt",
                "-f",
                f.to_str().unwrap(),
            ])
            .ok();
        assert_eq!(r.stdout, "from a file\n");
        let r = env.run_stdin(
            &["--format", "quiet", "--agent", &agent, "prompt", "-f", "-"],
            "echo dash",
        );
        assert_eq!(r.ok().stdout, "dash\n");
        assert_eq!(
            env.run_stdin(&["--agent", &agent, "prompt"], "  \n").code,
            2
        );

        // json: every event as recorded, the same objects as the log, prompt_done last.
        let r = env
            .run(&["--format", "json", "--agent", &agent, "prompt", "tools"])
            .ok();
        let lines = r.json_lines();
        assert_eq!(lines.last().unwrap()["type"], "prompt_done");
        assert!(lines.iter().any(|e| e["type"] == "prompt_started"));
        let log = env
            .run(&["--format", "json", "sessions", "events", &id])
            .ok()
            .json_lines();
        for e in &lines {
            assert!(log.contains(e), "printed event not in the log: {e}");
        }
        let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");

        // The conversation was stored.
        let hist = env.run(&["sessions", "history", &id]).ok().stdout;
        assert!(
            hist.contains("## user\necho hello world") && hist.contains("from a file"),
            "{hist}"
        );
    }
}

#[test]
fn exec_stores_nothing() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let r = env
            .run(&["--agent", &agent, "exec", "echo", "one", "shot"])
            .ok();
        assert_eq!(r.stdout, "one shot\n");
        let r = env
            .run(&["--format", "json", "--agent", &agent, "exec", "echo", "x"])
            .ok();
        assert_eq!(r.json_lines().last().unwrap()["type"], "prompt_done");
        let list = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        assert!(list["sessions"].as_array().unwrap().is_empty());
        let sessions_dir = env.home().join("sessions");
        let files: Vec<_> = std::fs::read_dir(&sessions_dir)
            .map(|d| {
                d.flatten()
                    .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        assert!(files.is_empty(), "{files:?}");
        // exec can be disabled in the config.
        std::fs::write(env.home().join("config.json"), r#"{"disableExec": true}"#).unwrap();
        let r = env.run(&["--agent", &agent, "exec", "echo", "x"]);
        assert_eq!(r.code, 2, "{r:?}");
    }
}

#[test]
fn cancel_from_another_process() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        // Idle: nothing to cancel, exit 0.
        let r = env.run(&["--agent", &agent, "cancel"]).ok();
        assert!(r.stdout.contains("nothing to cancel"), "{}", r.stdout);
        // The one-process path (--no-owner): the prompting process itself takes the cancel
        // through its run file (the queue owner's cancel is tested in tests/owner.rs).
        let run = spawn_until(
            &env,
            &[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                &agent,
                "prompt",
                "slow",
                "400",
            ],
            STARTED,
        );
        let st = status(&env, &agent);
        assert_eq!(st["status"], "running");
        assert_eq!(st["pid"], run.child.id());
        let c = env
            .run(&["--format", "json", "--agent", &agent, "cancel"])
            .ok()
            .json();
        assert_eq!(c["action"], "cancel_result");
        assert_eq!(c["cancelled"], true);
        let (code, lines, stderr) = run.finish();
        assert_eq!(code, 0, "{stderr}");
        let last = lines.last().unwrap();
        assert_eq!(last["type"], "prompt_done", "{last}");
        assert_eq!(last["payload"]["stopReason"], "cancelled");
        assert_eq!(status(&env, &agent)["status"], "idle");
        // The next turn works.
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "after"])
            .ok();
        assert_eq!(r.stdout, "after\n");
    }
}

#[test]
fn ctrl_c_cancels_then_interrupts() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        // One process holds the agent (`--no-owner`), so the second Ctrl-C below has an
        // agent of its own to stop; through a queue owner the turn belongs to the owner.
        // One Ctrl-C: the turn is cancelled through ACP and recorded, exit 130 (Node's
        // INTERRUPTED).
        let run = slow_no_owner_prompt(&env, &agent);
        kill_child(&run.child, libc::SIGINT);
        let (code, lines, stderr) = run.finish();
        assert_eq!(code, 130, "{stderr}");
        let last = lines.last().unwrap();
        assert_eq!(
            last["payload"]["stopReason"], "cancelled",
            "{last}\n{stderr}"
        );

        // A turn that does not end on cancel (the agent waits for a terminal command): the
        // second Ctrl-C stops the agent and exits 130.
        let run = spawn_until(
            &env,
            &[
                "--no-owner",
                "--format",
                "json",
                "--approve-all",
                "--agent",
                &agent,
                "terminal",
                "sleep",
                "30",
            ],
            "terminal/create",
        );
        kill_child(&run.child, libc::SIGINT);
        wait_for("the cancel to be recorded", || {
            env.run(&[
                "--format",
                "json",
                "--agent",
                &agent,
                "sessions",
                "events",
                "--type",
                "control_done",
            ])
            .json_lines()
            .iter()
            .any(|e| e["payload"]["action"] == "cancel")
        });
        kill_child(&run.child, libc::SIGINT);
        let (code, _, stderr) = run.finish();
        assert_eq!(code, 130, "{stderr}");
        // The next prompt records the unfinished turn and works.
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "echo", "again"])
            .ok();
        assert_eq!(r.stdout, "again\n");
    }
}

#[test]
fn killed_prompt_leaves_a_dead_status_that_never_cancels_others() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        // A one-process prompt (--no-owner) dies with its turn; a client of the queue owner
        // does not take the turn with it (tests/owner.rs).
        let run = slow_no_owner_prompt(&env, &agent);
        kill_child(&run.child, libc::SIGKILL);
        let _ = run.finish();
        let st = status(&env, &agent);
        assert_eq!(st["status"], "dead", "{st}");
        // The stale run file cannot reach anyone.
        let c = env
            .run(&["--format", "json", "--agent", &agent, "cancel"])
            .ok()
            .json();
        assert_eq!(c["cancelled"], false);
        let r = env
            .run(&[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                &agent,
                "echo",
                "recovered",
            ])
            .ok();
        assert_eq!(r.json_lines().last().unwrap()["type"], "prompt_done");
        let show = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        assert_eq!(show["acpx"]["last_turn"]["outcome"], "completed");
        let ev = env
            .run(&[
                "--format",
                "json",
                "--agent",
                &agent,
                "sessions",
                "events",
                "--type",
                "prompt_error",
            ])
            .ok()
            .json_lines();
        assert_eq!(ev.len(), 1, "the killed turn is recorded as interrupted");
        assert_eq!(ev[0]["payload"]["outcome"], "interrupted");
        assert_eq!(status(&env, &agent)["status"], "idle");
    }
}

#[test]
fn set_mode_and_config_option() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        let m = env
            .run(&["--format", "json", "--agent", &agent, "set-mode", "plan"])
            .ok()
            .json();
        assert_eq!(m["action"], "mode_set");
        assert_eq!(m["modeId"], "plan");
        assert!(m["acpxRecordId"].is_string() && m["acpxSessionId"].is_string());
        let c = env
            .run(&[
                "--format", "json", "--agent", &agent, "set", "model", "large",
            ])
            .ok()
            .json();
        assert_eq!(c["action"], "config_set");
        assert_eq!(c["configId"], "model");
        assert_eq!(c["value"], "large");
        assert!(c["configOptions"].is_array());
        let show = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        assert_eq!(
            show["acpx"]["last_control_update"]["action"],
            "set_config_option"
        );
        let ev = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "events", "--stream", "control",
            ])
            .ok()
            .json_lines();
        assert!(ev
            .iter()
            .any(|e| e["type"] == "control_done" && e["payload"]["action"] == "set_mode"));
        // A mode the agent does not list is a usage error naming the modes it offers,
        // refused before the agent is asked; nothing about it is stored.
        let r = env.run(&["--agent", &agent, "set-mode", "warp"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(
            r.stderr.contains("\"warp\"") && r.stderr.contains("default, plan, code"),
            "{}",
            r.stderr
        );
        let j = env.run(&["--format", "json", "--agent", &agent, "set-mode", "warp"]);
        assert_eq!(j.code, 2, "{j:?}");
        assert_eq!(j.json()["error"]["data"]["detailCode"], "UNKNOWN_MODE");
        let show = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        assert_eq!(show["acpx"]["current_mode_id"], "plan");
        // No session: exit 4.
        let r = env.run(&["--agent", &agent, "set-mode", "-s", "nope", "plan"]);
        assert_eq!(r.code, 4);
    }
}

#[test]
fn timeout_permission_and_agent_errors_map_to_exit_codes() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        let r = env.run(&[
            "--format",
            "json",
            "--timeout",
            "0.5",
            "--agent",
            &agent,
            "slow",
            "400",
        ]);
        assert_eq!(r.code, 3, "{r:?}");
        let last = r.json_lines().pop().unwrap();
        assert_eq!(last["type"], "prompt_error");
        assert_eq!(last["payload"]["outcome"], "timeout");

        let r = env.run(&["--timeout", "0.5", "--agent", &agent, "slow", "400"]);
        assert_eq!(r.code, 3, "{r:?}");
        assert!(
            r.stderr.contains("[error]") && r.stderr.contains("hint: raise --timeout"),
            "{}",
            r.stderr
        );

        let r = env.run(&["--deny-all", "--agent", &agent, "permission", "edit"]);
        assert_eq!(r.code, 5, "{r:?}");
        assert!(r.stderr.contains("[permission]"), "{}", r.stderr);
        assert!(r.stderr.contains("refused"), "{}", r.stderr);
        // --approve-reads would refuse the edit again: the hint names the flag that helps.
        assert!(
            r.stderr
                .contains("re-run with --approve-all (--approve-reads approves reads"),
            "{}",
            r.stderr
        );
        let r = env.run(&[
            "--format",
            "json",
            "--deny-all",
            "--agent",
            &agent,
            "permission",
            "edit",
        ]);
        assert_eq!(r.code, 5, "{r:?}");
        let last = r.json_lines().pop().unwrap();
        assert_eq!(
            last["type"], "prompt_done",
            "no error line after the turn's last event"
        );
        assert_eq!(last["payload"]["permissionStats"]["denied"], 1);
        let r = env.run(&["--agent", &agent, "permission", "edit"]);
        assert_eq!(
            r.code, 5,
            "approve-reads without a terminal denies an edit: {r:?}"
        );
        env.run(&["--agent", &agent, "permission", "read"]).ok();
        env.run(&["--approve-all", "--agent", &agent, "permission", "edit"])
            .ok();

        let r = env.run(&["--format", "json", "--agent", &agent, "error"]);
        assert_eq!(r.code, 1, "{r:?}");
        let last = r.json_lines().pop().unwrap();
        assert_eq!(
            last["type"], "prompt_error",
            "JSON mode ends with prompt_error, no extra line"
        );
        let r = env.run(&["--agent", &agent, "die"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("[error]"), "{}", r.stderr);
        // A missing agent command is a runtime error naming it.
        let r = env.run(&["--agent", "/nonexistent/agent", "sessions", "new"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("/nonexistent/agent"), "{}", r.stderr);
    }
}

#[test]
fn follow_prints_each_event_once_across_rotation() {
    for backend in BACKENDS {
        let mut env = Env::new(backend);
        env.extra_env
            .push(("ACPX_MAX_SEGMENT_BYTES".into(), "4096".into()));
        env.extra_env
            .push(("ACPX_MAX_SEGMENTS".into(), "1000".into()));
        let agent = env.agent_cmd("");
        let s = new_session(&env, &agent, &[]);
        let id = s["acpxRecordId"].as_str().unwrap().to_owned();
        let mut follower = spawn(
            &env,
            &["--format", "json", "sessions", "events", &id, "--follow"],
        );
        let stdout = follower.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map(|l| serde_json::from_str::<Value>(&l.unwrap()).unwrap())
                .collect::<Vec<_>>()
        });
        env.run(&["--format", "quiet", "--agent", &agent, "stream", "300"])
            .ok();
        env.run(&["--format", "quiet", "--agent", &agent, "stream", "300"])
            .ok();
        env.run(&["sessions", "close", &id]).ok();
        let r = finish(follower);
        assert_eq!(r.code, 0, "{r:?}");
        let seen = reader.join().unwrap();
        let seqs: Vec<u64> = seen.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
        assert_eq!(seqs, expected, "every event exactly once, in order");
        let log = env
            .run(&["--format", "json", "sessions", "events", &id])
            .ok()
            .json_lines();
        assert_eq!(seen, log);
        assert!(seqs.len() > 600);
        if backend == "fs" {
            // Closed segments are kept compressed (docs/format.md § Compressed segments).
            let rotated = env
                .home()
                .join(format!("sessions/{id}.events.1.ndjson.zst"));
            assert!(rotated.exists(), "the log rotated");
        } else {
            let show = env
                .run(&["--format", "json", "sessions", "show", &id])
                .ok()
                .json();
            assert!(
                show["acpx"]["event_log"]["segment_count"].as_u64().unwrap() > 1,
                "{show}"
            );
        }
    }
}

/// A turn whose end finds the active segment past `ACPX_TURN_END_ROTATE_BYTES` leaves it
/// closed and compressed; `sessions events` reads every event, and the next turn appends after
/// it. `0` turns it off; a bad value is named.
#[test]
fn a_long_turn_is_compressed_at_its_end() {
    let mut env = Env::new("fs");
    env.extra_env
        .push(("ACPX_TURN_END_ROTATE_BYTES".into(), "20000".into()));
    let agent = env.agent_cmd("");
    let s = new_session(&env, &agent, &[]);
    let id = s["acpxRecordId"].as_str().unwrap().to_owned();
    let compressed = |env: &Env| {
        std::fs::read_dir(env.home().join("sessions"))
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name().into_string().unwrap();
                name.starts_with(&id) && name.ends_with(".ndjson.zst")
            })
            .count()
    };
    env.run(&["--format", "quiet", "--agent", &agent, "stream", "300"])
        .ok();
    assert_eq!(compressed(&env), 1);
    let active = env
        .home()
        .join("sessions")
        .join(format!("{id}.events.ndjson"));
    // What follows the turn's end (the agent's shutdown) is all the active segment holds.
    assert!(std::fs::metadata(&active).unwrap().len() < 2_000);
    env.run(&["--format", "quiet", "--agent", &agent, "hello again"])
        .ok();
    let log = env
        .run(&["--format", "json", "sessions", "events", &id])
        .ok()
        .json_lines();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() > 300);
    env.run(&["fsck"]).ok();

    env.extra_env.pop();
    env.extra_env
        .push(("ACPX_TURN_END_ROTATE_BYTES".into(), "0".into()));
    // Without the warm owner, which opened the store with the earlier setting.
    env.run(&[
        "--format",
        "quiet",
        "--no-owner",
        "--agent",
        &agent,
        "stream",
        "300",
    ])
    .ok();
    assert_eq!(compressed(&env), 1);
    assert!(std::fs::metadata(&active).unwrap().len() > 20_000);

    env.extra_env.pop();
    env.extra_env
        .push(("ACPX_TURN_END_ROTATE_BYTES".into(), "lots".into()));
    let r = env.run(&["sessions", "events", &id]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("ACPX_TURN_END_ROTATE_BYTES"),
        "{}",
        r.stderr
    );
}

/// `ACPX_KEEP_ROTATED_SEGMENTS=1`: the file store deletes no rotated segment, keeps them
/// compressed, and `sessions events` still reads every event from seq 1.
#[test]
fn keep_rotated_segments_keeps_the_whole_log_readable() {
    let mut env = Env::new("fs");
    for (k, v) in [
        ("ACPX_MAX_SEGMENT_BYTES", "4096"),
        ("ACPX_MAX_SEGMENTS", "2"),
        ("ACPX_KEEP_ROTATED_SEGMENTS", "1"),
    ] {
        env.extra_env.push((k.into(), v.into()));
    }
    let agent = env.agent_cmd("");
    let s = new_session(&env, &agent, &[]);
    let id = s["acpxRecordId"].as_str().unwrap().to_owned();
    env.run(&["--format", "quiet", "--agent", &agent, "stream", "300"])
        .ok();
    let log = env
        .run(&["--format", "json", "sessions", "events", &id])
        .ok()
        .json_lines();
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(seqs.len() > 300);
    let kept = std::fs::read_dir(env.home().join("sessions"))
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name().into_string().unwrap();
            name.starts_with(&id) && name.ends_with(".ndjson.zst")
        })
        .count();
    assert!(kept > 2, "only {kept} compressed segments kept");

    env.extra_env
        .push(("ACPX_KEEP_ROTATED_SEGMENTS".into(), "maybe".into()));
    let r = env.run(&["sessions", "events", &id]);
    assert_ne!(r.code, 0);
    assert!(
        r.stderr.contains("ACPX_KEEP_ROTATED_SEGMENTS"),
        "{}",
        r.stderr
    );
}

/// A session whose oldest events were removed by retention exports an archive of the
/// retained log: the export says so at once, on both stores (a whole log exports without a
/// word), and `sessions import` recreates the log from the same seq, in either store.
#[test]
fn a_log_cut_by_retention_exports_with_a_warning_and_imports_from_its_first_seq() {
    for backend in BACKENDS {
        let mut env = Env::new(backend);
        for (k, v) in [
            ("ACPX_MAX_SEGMENT_BYTES", "4096"),
            ("ACPX_MAX_SEGMENTS", "2"),
        ] {
            env.extra_env.push((k.into(), v.into()));
        }
        let agent = env.agent_cmd("");
        let s = new_session(&env, &agent, &[]);
        let id = s["acpxRecordId"].as_str().unwrap().to_owned();
        let archive = env.home().join("whole.ndjson");
        let r = env
            .run(&["sessions", "export", &id, "-o", archive.to_str().unwrap()])
            .ok();
        assert!(!r.stderr.contains("warning"), "{backend}: {}", r.stderr);

        env.run(&[
            "--format",
            "quiet",
            "--no-owner",
            "--agent",
            &agent,
            "stream",
            "300",
        ])
        .ok();
        let archive = env.home().join("cut.ndjson");
        let r = env
            .run(&["sessions", "export", &id, "-o", archive.to_str().unwrap()])
            .ok();
        assert!(
            r.stderr.contains("older events were removed by retention")
                && r.stderr.contains("the archive holds the events from seq"),
            "{backend}: {}",
            r.stderr
        );
        let exported = env
            .run(&["--format", "json", "sessions", "events", &id])
            .ok()
            .json_lines();
        let first = exported[0]["seq"].as_u64().unwrap();
        assert!(first > 1, "{backend}: retention cut nothing");
        let r = env
            .run(&["sessions", "events", &id, "--from-seq", "2"])
            .ok();
        assert!(
            r.stderr.contains(&format!(
                "events 2..{} were removed by retention",
                first - 1
            )),
            "{backend}: {}",
            r.stderr
        );
        for target in BACKENDS {
            let r = env
                .run(&[
                    "--store",
                    target,
                    "--format",
                    "json",
                    "sessions",
                    "import",
                    "--new-id",
                    // Stored exactly as exported (the test's own archive).
                    "--trust",
                    archive.to_str().unwrap(),
                ])
                .ok();
            // A whole retained log: no word of missing events.
            assert!(
                !r.stderr.contains("missing"),
                "{backend} → {target}: {}",
                r.stderr
            );
            let copy = r.json()["acpxRecordId"].as_str().unwrap().to_owned();
            let imported = env
                .run(&[
                    "--store", target, "--format", "json", "sessions", "events", &copy,
                ])
                .ok()
                .json_lines();
            // The target's own retention (the same small window) may keep a shorter tail.
            assert!(!imported.is_empty(), "{backend} → {target}");
            let skip = exported.len() - imported.len();
            assert!(
                imported.len() == exported.len() || target != backend,
                "{backend} → {target}: {} of {}",
                imported.len(),
                exported.len()
            );
            for (a, b) in imported.iter().zip(&exported[skip..]) {
                assert_eq!(a["seq"], b["seq"], "{backend} → {target}");
                assert_eq!(a["payload"], b["payload"], "{backend} → {target}");
            }
            env.run(&["--store", target, "fsck"]).ok();
        }
    }
}

/// The run file of a killed `--no-owner` prompt stays (nothing removes it but the next
/// one-process prompt), but a later turn through the queue owner supersedes it: once that
/// owner is gone, `status` and `show` no longer say the last prompt died.
#[test]
fn a_dead_run_file_is_superseded_by_a_later_turn_through_the_owner() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        new_session(&env, &agent, &[]);
        let run = slow_no_owner_prompt(&env, &agent);
        kill_child(&run.child, libc::SIGKILL);
        let _ = run.finish();
        let st = status(&env, &agent);
        assert_eq!(st["status"], "dead", "{st}");
        assert!(
            st["summary"].as_str().unwrap().contains("died mid-turn"),
            "the run file's death, not a turn left unfinished: {st}"
        );
        let show = env.run(&["--agent", &agent, "sessions", "show"]).ok();
        assert!(show.stdout.contains("died mid-turn"), "{}", show.stdout);
        env.run(&[
            "--ttl", "1", "--format", "quiet", "--agent", &agent, "echo", "later",
        ])
        .ok();
        wait_for("the idle owner to exit", || {
            status(&env, &agent)["ttl"].is_null()
        });
        let st = status(&env, &agent);
        assert_eq!(st["status"], "idle", "{st}");
        let show = env.run(&["--agent", &agent, "sessions", "show"]).ok();
        assert!(
            !show.stdout.contains("died") && show.stdout.contains("last seq"),
            "{}",
            show.stdout
        );
    }
}

/// A one-process (`--no-owner`) prompt `slow 400` printing JSON, once its turn has started.
fn slow_no_owner_prompt(env: &Env, agent: &str) -> Running {
    spawn_until(
        env,
        &[
            "--format",
            "json",
            "--no-owner",
            "--agent",
            agent,
            "slow",
            "400",
        ],
        STARTED,
    )
}

/// One exit code per kind of mistake (issue 51): a config option, value, model or mode the
/// session does not offer is a usage error (exit 2) naming the ones it does, whether acpx
/// knows them from the session's options or the agent refuses with invalid params (its own
/// text kept in JSON); through the owner and in one process.
#[test]
fn what_the_session_does_not_offer_is_a_usage_error() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        for no_owner in [false, true] {
            let base: Vec<&str> = if no_owner {
                vec!["--no-owner", "--agent", &agent]
            } else {
                vec!["--agent", &agent]
            };
            let run = |args: &[&str]| {
                let mut all = base.clone();
                all.extend_from_slice(args);
                env.run(&all)
            };
            let r = run(&["set", "foo", "bar"]);
            assert_eq!(r.code, 2, "{r:?}");
            assert!(
                r.stderr.contains("config option \"foo\"") && r.stderr.contains("model"),
                "{r:?}"
            );
            let r = run(&["set", "model", "huge"]);
            assert_eq!(r.code, 2, "{r:?}");
            assert!(r.stderr.contains("small, large"), "{r:?}");
            let r = run(&["set-mode", "bogus"]);
            assert_eq!(r.code, 2, "{r:?}");
            assert!(r.stderr.contains("plan"), "{r:?}");
            // A valid one still works.
            run(&["set", "model", "large"]).ok();
        }
        // An agent that advertises no options refuses with invalid params: the same exit,
        // and its own words in JSON.
        let models = env.agent_cmd("--models");
        env.run(&["--agent", &models, "sessions", "new"]).ok();
        let r = env.run(&[
            "--format",
            "json",
            "--no-owner",
            "--agent",
            &models,
            "set",
            "foo",
            "bar",
        ]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stdout.contains("unknown config option foo"), "{r:?}");
        let r = env.run(&["--agent", &models, "set", "model", "huge"]);
        assert_eq!(r.code, 2, "{r:?}");
    }
}
