//! Closed or failing output never costs the record, and signals cancel through ACP: real
//! pipes closed early, `/dev/full`, SIGINT and SIGTERM, with the session owner and with
//! `--no-owner`, on both stores.

use crate::common;

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::process::{args, last_turn, MODES};
use common::{Env, BACKENDS};
use serde_json::Value;

fn chunks(turn: &[Value]) -> usize {
    turn.iter()
        .filter(|e| e["payload"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .count()
}

/// `status` and `sessions show` after the turn: neither says the session died.
fn assert_session_agrees(env: &Env, agent: &str) {
    let st = env
        .run(&["--format", "json", "--agent", agent, "status"])
        .ok()
        .json();
    assert!(
        st["status"] == "idle" || st["status"] == "alive",
        "status after the turn: {st}"
    );
    let show = env
        .run(&["--format", "json", "--agent", agent, "sessions", "show"])
        .ok()
        .json();
    assert_eq!(show["closed"], false, "{show}");
    assert_eq!(show["acpxRecordId"], st["acpxRecordId"]);
}

fn wait_with_deadline(child: &mut Child) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s.code().unwrap_or(-1);
        }
        assert!(Instant::now() < deadline, "acpx did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_pipe_closed_early_costs_nothing_and_exits_with_the_turns_status() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            // Quiet through the owner: the reply's parts still come after the pipe closed, and
            // are dropped as the one-process path drops its pieces.
            for format in ["text", "json", "quiet"] {
                // `acpx prompt "stream 3000" | head -c 10`: read 10 bytes, close the pipe.
                let mut child = env
                    .cmd()
                    .args(args(
                        &agent,
                        mode,
                        &["--format", format, "prompt", "stream 3000"],
                    ))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                let mut stdout = child.stdout.take().unwrap();
                let mut first = [0u8; 10];
                stdout.read_exact(&mut first).unwrap();
                drop(stdout);
                let mut stderr = child.stderr.take().unwrap();
                let code = wait_with_deadline(&mut child);
                let mut err = String::new();
                stderr.read_to_string(&mut err).unwrap();
                assert_eq!(code, 0, "{backend} {mode:?} {format}: {err}");
                assert!(!err.contains("panicked"), "{err}");
                assert!(!err.contains("error"), "a closed pipe is quiet: {err}");
                let turn = last_turn(&env, &agent);
                assert_eq!(chunks(&turn), 3000, "{backend} {mode:?} {format}");
                let end = turn.last().unwrap();
                assert_eq!(end["type"], "prompt_done", "{end}");
                assert_eq!(end["payload"]["stopReason"], "end_turn", "{end}");
                assert_session_agrees(&env, &agent);
            }

            // stderr closed early (`--verbose … 2>&1 | head -1`): no panic, same record.
            let mut child = env
                .cmd()
                .args(args(&agent, mode, &["--verbose", "prompt", "stream 500"]))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stderr = child.stderr.take().unwrap();
            let mut first = [0u8; 1];
            stderr.read_exact(&mut first).unwrap();
            drop(stderr);
            assert_eq!(wait_with_deadline(&mut child), 0, "{backend} {mode:?}");
            assert_eq!(chunks(&last_turn(&env, &agent)), 500);
        }
    }
}

/// `sessions export … | head -1` (and `sessions events`, `history`): a reader that stops
/// early is not an error, as for a prompt; `> /dev/full` still is.
#[test]
fn a_pipe_closed_early_on_a_reading_command_is_quiet() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    env.run(&["--no-owner", "--agent", &agent, "stream 20000"])
        .ok();
    for cmd in [
        &["sessions", "export"][..],
        &["sessions", "export", "--as", "ndjson"][..],
        // The document streams through serde: the closed pipe surfaces inside it.
        &["sessions", "export", "--as", "json"][..],
        &["sessions", "events"][..],
        &["--format", "json", "sessions", "events"][..],
        // Rendered and written a piece at a time.
        &["sessions", "export", "--as", "markdown"][..],
        &["sessions", "history"][..],
        &["--format", "json", "sessions", "history"][..],
    ] {
        let mut child = env
            .cmd()
            .args(["--agent", &agent])
            .args(cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let mut first = [0u8; 10];
        stdout.read_exact(&mut first).unwrap();
        drop(stdout);
        let mut stderr = child.stderr.take().unwrap();
        let code = wait_with_deadline(&mut child);
        let mut err = String::new();
        stderr.read_to_string(&mut err).unwrap();
        assert_eq!(code, 0, "{cmd:?}: {err}");
        assert!(err.is_empty(), "{cmd:?}: a closed pipe is quiet: {err}");
    }
    for cmd in [
        &["sessions", "export"][..],
        &["--format", "json", "sessions", "history"][..],
    ] {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let r = env
            .cmd()
            .args(["--agent", &agent])
            .args(cmd)
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(r.status.code(), Some(1), "{cmd:?}: {r:?}");
        let err = String::from_utf8_lossy(&r.stderr);
        assert!(err.contains("cannot write to stdout"), "{cmd:?}: {err}");
    }
}

#[test]
fn a_failing_stdout_exits_1_after_the_turn_is_recorded() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let full = std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .unwrap();
            let o = env
                .cmd()
                .args(args(&agent, mode, &["prompt", "stream 400"]))
                .stdout(full)
                .stderr(Stdio::piped())
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(1), "{backend} {mode:?}: {err}");
            assert!(err.contains("cannot write to stdout"), "{err}");
            assert!(!err.contains("panicked"), "{err}");
            let turn = last_turn(&env, &agent);
            assert_eq!(chunks(&turn), 400);
            assert_eq!(turn.last().unwrap()["type"], "prompt_done");
            assert_session_agrees(&env, &agent);
        }
    }
}

#[test]
fn sigint_sigterm_and_sighup_cancel_the_turn_through_acp_and_exit_130() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            // SIGHUP: the terminal closed under the turn (it used to be left unfinished).
            for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                let mut child = env
                    .cmd()
                    .args(args(&agent, mode, &["prompt", "slow 200"]))
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                // Wait for the reply to start streaming: the turn is running.
                let mut stdout = child.stdout.take().unwrap();
                let mut first = [0u8; 1];
                stdout.read_exact(&mut first).unwrap();
                let pid = i32::try_from(child.id()).unwrap();
                // SAFETY: kill(2) on the pid of a child this test spawned and has not reaped.
                assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
                let code = wait_with_deadline(&mut child);
                assert_eq!(code, 130, "{backend} {mode:?} signal {signal}");
                let turn = last_turn(&env, &agent);
                let end = turn.last().unwrap();
                assert_eq!(end["type"], "prompt_done", "{end}");
                assert_eq!(end["payload"]["stopReason"], "cancelled", "{end}");
                assert!(chunks(&turn) < 200, "the turn was cut short");
                assert_session_agrees(&env, &agent);
            }
        }
    }
}

/// Shell-quotes one word for `script -c`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn ctrl_c_on_an_open_permission_question_cancels_the_turn_and_exits_130() {
    // `script` gives acpx a real terminal, so the question is asked at it (forwarded by the
    // owner); a Ctrl-C typed at that terminal is a real SIGINT from the line discipline.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipped: util-linux `script` is not installed");
        return;
    }
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let mut line = vec![
                common::acpx_bin().to_string_lossy().into_owned(),
                "--home".into(),
                env.home().to_string_lossy().into_owned(),
                "--store".into(),
                backend.into(),
                "--agent".into(),
                agent.clone(),
            ];
            line.extend(mode.iter().map(|m| m.to_string()));
            line.extend(["prompt".into(), "wait-permission".into()]);
            let line: Vec<String> = line.iter().map(|w| quote(w)).collect();
            let mut child = std::process::Command::new("script")
                .args(["-qfec", &line.join(" "), "/dev/null"])
                .current_dir(env.cwd())
                .env_remove("ACPX_HOME")
                .env_remove("ACPX_STORE")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut stdout = child.stdout.take().unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 256];
            while !String::from_utf8_lossy(&seen).contains("(y/N") {
                let n = stdout.read(&mut buf).unwrap();
                assert!(n > 0, "no question: {}", String::from_utf8_lossy(&seen));
                seen.extend_from_slice(&buf[..n]);
            }
            use std::io::Write;
            child.stdin.as_mut().unwrap().write_all(b"\x03").unwrap();
            let reader = std::thread::spawn(move || {
                let mut rest = String::new();
                let _ = stdout.read_to_string(&mut rest);
                rest
            });
            let code = wait_with_deadline(&mut child);
            drop(child.stdin.take());
            let rest = reader.join().unwrap();
            assert_eq!(code, 130, "{backend} {mode:?}: {rest}");
            // Through the owner the client exits once the cancel is answered; the owner
            // appends the turn's end right after, so it may not be in the log yet.
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            let turn = loop {
                let turn = last_turn(&env, &agent);
                let ended = turn
                    .last()
                    .is_some_and(|e| e["type"] == "prompt_done" || e["type"] == "prompt_error");
                if ended || std::time::Instant::now() >= deadline {
                    break turn;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            };
            let end = turn.last().unwrap();
            assert_eq!(end["type"], "prompt_done", "{backend} {mode:?}: {end}");
            assert_eq!(
                end["payload"]["stopReason"], "cancelled",
                "{backend} {mode:?}: {end}"
            );
            assert_eq!(
                end["payload"]["permissionStats"]["cancelled"], 1,
                "{backend} {mode:?}: {end}"
            );
            assert!(
                turn.iter().any(|e| e["payload"]["decision"] == "cancelled"),
                "{turn:?}"
            );
            assert_session_agrees(&env, &agent);
        }
    }
}

/// An agent's children end with it, also when the agent exits first (its process group used
/// to be signalled only while the agent lived): with and without a queue owner.
#[test]
fn the_agents_children_end_with_it() {
    for mode in MODES {
        let env = Env::new("fs");
        let marker = env.home().join("child.pid");
        let agent = format!(
            "sh -c 'sleep 300 & echo $! > {}; exec {}'",
            marker.display(),
            env.agent_cmd("")
        );
        env.run(&args(&agent, mode, &["sessions", "new"])).ok();
        env.run(&args(&agent, mode, &["echo", "hi"])).ok();
        let pid: u64 = std::fs::read_to_string(&marker)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Through an owner the agent lives until the session closes.
        env.run(&args(&agent, mode, &["sessions", "close"])).ok();
        common::process::wait_for("the agent's child ended", || !common::process::alive(pid));
    }
}

/// An agent that writes a huge line without a newline is stopped with a clear error at the
/// message cap, instead of growing acpx's memory with it.
#[test]
fn an_endless_line_from_the_agent_is_cut_at_the_message_cap() {
    let mut env = Env::new("fs");
    env.extra_env
        .push(("ACPX_MAX_AGENT_MESSAGE_BYTES".into(), "1048576".into()));
    let agent = "sh -c 'head -c 8000000 /dev/zero | tr \"\\\\0\" x; sleep 60'";
    let t0 = Instant::now();
    let r = env.run(&["--no-owner", "--agent", agent, "sessions", "new"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(
        r.stderr.contains("without a newline") && r.stderr.contains("1 MiB"),
        "{}",
        r.stderr
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
}
