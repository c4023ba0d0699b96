//! End-to-end tests of the commands that run an agent, with the workspace's scripted test agent
//! (`acpx-test-agent`, see `common::test_agent`), on both backends.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{Env, Run, BACKENDS};
use serde_json::Value;

fn new_session(env: &Env, agent: &str, extra: &[&str]) -> Value {
    let mut args = vec!["--format", "json", "--agent", agent, "sessions", "new"];
    args.extend(extra);
    env.run(&args).ok().json()
}

/// Polls `f` until it returns true (the deadline only guards against a hang).
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn status(env: &Env, agent: &str) -> Value {
    env.run(&["--format", "json", "--agent", agent, "status"])
        .ok()
        .json()
}

fn spawn(env: &Env, args: &[&str]) -> Child {
    env.cmd()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> Run {
    let o = child.wait_with_output().unwrap();
    Run {
        code: o.status.code().unwrap_or(128 + o.status.signal_code()),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

trait SignalCode {
    fn signal_code(&self) -> i32;
}

impl SignalCode for std::process::ExitStatus {
    fn signal_code(&self) -> i32 {
        use std::os::unix::process::ExitStatusExt;
        self.signal().unwrap_or(0)
    }
}

fn kill(child: &Child, sig: i32) {
    // SAFETY: plain kill(2) on the pid of a child we spawned and have not reaped.
    unsafe {
        libc::kill(child.id() as i32, sig);
    }
}

/// A running child whose stdout is read on a thread.
struct Running {
    child: Child,
    lines: std::thread::JoinHandle<Vec<String>>,
}

/// Spawns `acpx args…` and returns once a stdout line contains `needle` (in JSON mode, the
/// event that shows the turn has started).
fn spawn_until(env: &Env, args: &[&str], needle: &str) -> Running {
    let mut child = spawn(env, args);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let needle = needle.to_owned();
    let lines = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut sent = false;
        for l in BufReader::new(stdout).lines() {
            let l = l.unwrap();
            if !sent && l.contains(&needle) {
                let _ = tx.send(());
                sent = true;
            }
            all.push(l);
        }
        all
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the child printed the expected line");
    Running { child, lines }
}

impl Running {
    fn finish(self) -> (i32, Vec<Value>, String) {
        let o = self.child.wait_with_output().unwrap();
        let lines = self.lines.join().unwrap();
        let code = o.status.code().unwrap_or(128 + o.status.signal_code());
        let json = lines
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (code, json, String::from_utf8_lossy(&o.stderr).into_owned())
    }
}

const STARTED: &str = "\"type\":\"prompt_started\"";

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
        assert_eq!(st["status"], "idle");
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
        // Named session history shows only its own turns.
        let hist = env
            .run(&["--agent", &agent, "sessions", "history", "-s", "api"])
            .ok()
            .stdout;
        assert!(hist.contains("echo named"), "{hist}");
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
        let run = spawn_until(
            &env,
            &[
                "--no-owner",
                "--format",
                "json",
                "--agent",
                &agent,
                "slow",
                "400",
            ],
            STARTED,
        );
        kill(&run.child, libc::SIGINT);
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
        kill(&run.child, libc::SIGINT);
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
        kill(&run.child, libc::SIGINT);
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
            STARTED,
        );
        kill(&run.child, libc::SIGKILL);
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
        // A mode the agent refuses is a runtime error, recorded as control_error.
        let r = env.run(&["--agent", &agent, "set-mode", "warp"]);
        assert_eq!(r.code, 1, "{r:?}");
        assert!(r.stderr.contains("warp"), "{}", r.stderr);
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
            let rotated = env.home().join(format!("sessions/{id}.events.1.ndjson"));
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
        kill(&run.child, libc::SIGKILL);
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
    assert!(
        phases.contains(&"session_attached".to_owned()),
        "the second prompt must reattach with session/load, not fall back: {phases:?}"
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
