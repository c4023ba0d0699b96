//! Who drives a session, end to end with real `acpx` processes, owners and agents: the
//! authority of a session belongs to the store that holds it (a prompt for the file store is
//! never run by the owner of the SQLite copy), lives outside the data home, and lifecycle
//! commands get an idle owner out of the way at once instead of waiting on it.

use crate::common;

use std::time::{Duration, Instant};

use common::process::{alive, status, wait_for};
use common::{Env, BACKENDS};
use serde_json::Value;

/// The user messages of the scope's session on `backend`, in order.
fn user_messages(env: &Env, backend: &str, agent: &str) -> Vec<String> {
    let out = env
        .run_on(
            backend,
            &["--format", "json", "--agent", agent, "sessions", "history"],
        )
        .ok();
    out.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["User"]["content"][0]["Text"].as_str())
        .map(str::to_owned)
        .collect()
}

/// Ends a process the test stopped (`kill -STOP`) when the test ends, however it ends: a
/// failed assertion must not leave a frozen owner behind (it cannot see its home go).
struct KillOnDrop(u64);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if std::thread::panicking() {
            common::process::kill(self.0, libc::SIGKILL);
        }
    }
}

/// The lifecycle phases of session `id`'s log, in order.
fn lifecycle_phases(env: &Env, id: &str) -> Vec<Value> {
    env.run(&[
        "--format",
        "json",
        "sessions",
        "events",
        id,
        "--type",
        "lifecycle_event",
    ])
    .ok()
    .json_lines()
    .into_iter()
    .map(|e| e["payload"]["phase"].clone())
    .collect()
}

/// The socket of the (one) queue owner under `env`'s authority directory.
fn owner_socket(env: &Env) -> std::path::PathBuf {
    std::fs::read_dir(env.authority().join("owners"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sock"))
        .expect("the owner's socket")
}

fn owner_pid(env: &Env, backend: &str, agent: &str) -> Option<u64> {
    let st: Value = env
        .run_on(backend, &["--format", "json", "--agent", agent, "status"])
        .ok()
        .json();
    (st["status"] == "alive")
        .then(|| st["pid"].as_u64())
        .flatten()
}

/// The reproduction: after `migrate --to sqlite` both stores hold the session under
/// one record id. Each prompt must run in the owner of its own store and be recorded there
/// only; before, the third prompt ran in the SQLite owner and the file store never saw it.
#[test]
fn each_prompt_lands_in_the_store_it_names() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.new_session(&agent);
    env.run(&["--agent", &agent, "echo", "one"]).ok();
    env.run(&["migrate", "--to", "sqlite"]).ok();
    env.run_on("sqlite", &["--agent", &agent, "echo", "two"])
        .ok();
    env.run(&["--agent", &agent, "echo", "three via fs"]).ok();
    env.run_on("sqlite", &["--agent", &agent, "echo", "four"])
        .ok();

    assert_eq!(
        user_messages(&env, "fs", &agent),
        ["echo one", "echo three via fs"]
    );
    assert_eq!(
        user_messages(&env, "sqlite", &agent),
        ["echo one", "echo two", "echo four"]
    );
    // Two owners, one per store, both warm.
    let fs_owner = owner_pid(&env, "fs", &agent).expect("the file store's owner");
    let sqlite_owner = owner_pid(&env, "sqlite", &agent).expect("the SQLite store's owner");
    assert_ne!(fs_owner, sqlite_owner);
    // Their sockets live outside the data home.
    let in_home: Vec<_> = walk(env.home())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "sock"))
        .collect();
    assert!(in_home.is_empty(), "sockets in the home: {in_home:?}");
    for backend in ["fs", "sqlite"] {
        env.run_on(backend, &["--agent", &agent, "sessions", "close"])
            .ok();
    }
    wait_for("both owners to end", || {
        !alive(fs_owner) && !alive(sqlite_owner)
    });
}

/// The open sessions `sessions list` shows.
fn open_sessions(env: &Env) -> Vec<Value> {
    env.run(&["--format", "json", "sessions", "list"])
        .ok()
        .json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["closed"] != true)
        .cloned()
        .collect()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if e.file_type().is_ok_and(|t| t.is_dir()) {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `sessions new` hands its agent to a queue owner: the first prompt runs in the agent
/// process that created the session, with no reattach (and so no `session/load` of a session
/// without messages, which fast-agent answers "Session not found"). `ensure` alike when it
/// creates; `--no-owner` keeps the one-process path.
#[test]
fn the_first_prompt_runs_in_the_agent_that_created_the_session() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        // An agent that cannot load sessions: a reattach would fall back to a new session.
        let agent = env.agent_cmd("");
        for create in [
            &["sessions", "new"][..],
            &["sessions", "ensure", "--name", "b"][..],
        ] {
            let mut args = vec!["--format", "json", "--agent", &agent];
            args.extend_from_slice(create);
            env.run(&args).ok();
            let named: &[&str] = if create[1] == "ensure" {
                &["-s", "b"]
            } else {
                &[]
            };
            let mut st_args = vec!["--format", "json", "--agent", &agent];
            st_args.extend_from_slice(named);
            st_args.push("status");
            let st = env.run(&st_args).ok().json();
            assert_eq!(st["status"], "alive", "{backend} {create:?}: {st}");
            let agent_pid = st["agentPid"].as_u64().unwrap();
            let mut p = vec!["--agent", &agent];
            p.extend_from_slice(named);
            p.extend(["echo", "first"]);
            let r = env.run(&p).ok();
            assert!(!r.stderr.contains("could not restore"), "{backend}: {r:?}");
            let st = env.run(&st_args).ok().json();
            assert_eq!(st["agentPid"].as_u64(), Some(agent_pid), "{backend}: {st}");
            let id = st["acpxRecordId"].as_str().unwrap().to_owned();
            let phases = lifecycle_phases(&env, &id);
            assert!(
                !phases
                    .iter()
                    .any(|p| p == "session_fallback" || p == "session_attached"),
                "{backend}: {phases:?}"
            );
        }
        // --no-owner: created in the command's process, no owner left.
        env.run(&[
            "--no-owner",
            "--agent",
            &agent,
            "sessions",
            "new",
            "--name",
            "c",
        ])
        .ok();
        let st = env
            .run(&["--format", "json", "--agent", &agent, "-s", "c", "status"])
            .ok()
            .json();
        assert_eq!(st["status"], "idle", "{backend}: {st}");
        for close in [&["sessions", "close"][..], &["sessions", "close", "b"][..]] {
            let mut c = vec!["--agent", &agent];
            c.extend_from_slice(close);
            env.run(&c).ok();
        }
    }
}

/// `sessions new` while the scope's session has a warm idle owner: the owner closes the old
/// session at once (it was waited on for 112 s, then the command failed with two sessions
/// left open), and exactly one open session remains.
#[test]
fn sessions_new_with_a_warm_idle_owner_replaces_the_session_at_once() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let first = env.new_session(&agent);
        env.run(&["--agent", &agent, "echo", "warm"]).ok();
        let owner = owner_pid(&env, backend, &agent).expect("a warm owner");

        let t = Instant::now();
        let r = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "new"])
            .ok()
            .json();
        let took = t.elapsed();
        assert_eq!(r["replacedSessionId"], first.as_str(), "{r}");
        // The new session's own agent start is the command's time; the old owner took none.
        assert!(took < Duration::from_secs(10), "{backend}: took {took:?}");
        wait_for("the old owner to end", || !alive(owner));

        let open = open_sessions(&env);
        assert_eq!(open.len(), 1, "{backend}: {open:?}");
        assert_ne!(open[0]["acpxRecordId"], first.as_str());
        // The old session's log says it was closed.
        let closed = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                &first,
                "--type",
                "lifecycle_event",
            ])
            .ok()
            .json_lines();
        assert!(
            closed
                .iter()
                .any(|e| e["payload"]["phase"] == "session_closed"),
            "{backend}: {closed:?}"
        );
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}

/// `sessions delete --force` (and `migrate`, `fsck --repair`, which write every session) of
/// a session whose owner is running a turn say so at once, naming the task and how to cancel
/// it, and change nothing; the turn runs to its end. (`sessions close` and `sessions new`
/// cancel that turn instead, as Node acpx's close does: tested in session_commands.)
#[test]
fn commands_that_need_the_session_whole_refuse_a_running_turn_at_once() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = env.new_session(&agent);
        let running = common::process::spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "slow", "60"],
            "prompt_started",
        );
        let other = if backend == "fs" { "sqlite" } else { "fs" };
        for args in [
            vec!["--format", "json", "sessions", "delete", &id, "--force"],
            vec!["--format", "json", "migrate", "--to", other],
            vec!["--format", "json", "fsck", "--repair"],
        ] {
            let t = Instant::now();
            let r = env.run(&args);
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "{backend} {args:?}: {:?}",
                t.elapsed()
            );
            assert_eq!(r.code, 1, "{backend} {args:?}: {r:?}");
            let err: Value = serde_json::from_str(r.stdout.lines().last().unwrap()).unwrap();
            assert_eq!(err["error"]["data"]["detailCode"], "SESSION_BUSY", "{err}");
            assert!(err.to_string().contains(&id), "{err}");
        }
        let (code, _, _) = running.finish();
        assert_eq!(code, 0, "{backend}: the turn ran to its end");
        let open = open_sessions(&env);
        assert_eq!(open.len(), 1, "{backend}: {open:?}");
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}

/// `--ttl` given with a later task reaches the warm owner: its status shows the new TTL, and
/// the owner ends after it.
#[test]
fn ttl_from_a_later_task_updates_the_warm_owner() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.new_session(&agent);
    env.run(&["--ttl", "300", "--agent", &agent, "echo", "a"])
        .ok();
    let st = status(&env, &agent);
    assert_eq!(st["ttl"], 300, "{st}");
    let owner = st["pid"].as_u64().unwrap();
    env.run(&["--ttl", "2", "--agent", &agent, "echo", "b"])
        .ok();
    assert_eq!(status(&env, &agent)["ttl"], 2);
    // A task without --ttl leaves it as the user set it.
    env.run(&["--agent", &agent, "echo", "c"]).ok();
    assert_eq!(status(&env, &agent)["ttl"], 2);
    wait_for("the owner to end after its new TTL", || !alive(owner));
}

/// Closing a session with no owner running records `session_closed` too.
#[test]
fn closing_without_an_owner_records_session_closed() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = env.new_session(&agent);
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
        let phases = lifecycle_phases(&env, &id);
        assert_eq!(
            phases.last().and_then(Value::as_str),
            Some("session_closed"),
            "{backend}: {phases:?}"
        );
        let shown = env
            .run(&["--format", "json", "sessions", "show", &id])
            .ok()
            .json();
        assert_eq!(shown["closed"], true);
    }
}

/// The owner lease lives in the store: a command run with another runtime directory (another
/// `XDG_RUNTIME_DIR` on the same machine) cannot reach the owner that holds the session, and
/// says so at once, naming it, instead of starting a second owner.
#[test]
fn an_owner_under_another_runtime_directory_is_named_not_duplicated() {
    for backend in BACKENDS {
        let mut env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let owner = owner_pid(&env, backend, &agent).expect("the owner of sessions new");
        let other = env.home().join("other-run");
        std::fs::create_dir(&other).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
        env.extra_env.push((
            "XDG_RUNTIME_DIR".into(),
            other.to_string_lossy().into_owned(),
        ));
        let t0 = Instant::now();
        let r = env.run(&["--agent", &agent, "echo", "elsewhere"]);
        assert_ne!(r.code, 0, "{backend}: {r:?}");
        assert!(
            r.stderr.contains(&format!("queue owner pid {owner}"))
                && r.stderr.contains("XDG_RUNTIME_DIR"),
            "{backend}: {}",
            r.stderr
        );
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
        assert!(alive(owner), "{backend}: the owner goes on");
        env.extra_env.pop();
        let r = env.run(&["--agent", &agent, "echo", "here"]).ok();
        assert!(r.stdout.contains("here"), "{backend}: {}", r.stderr);
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}

/// An owner out of file descriptors (EMFILE on `accept`) backs off and goes on accepting once
/// some are closed, and `status` says what happened; it used to stop accepting for good.
#[test]
fn an_owner_out_of_file_descriptors_goes_on_accepting() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    // The owner inherits the limit of the command that starts it.
    let mut start = env.cmd();
    let bin = start.get_program().to_owned();
    let args: Vec<_> = start.get_args().map(|a| a.to_owned()).collect();
    start = std::process::Command::new("sh");
    start
        .arg("-c")
        .arg("ulimit -n 48 && exec \"$0\" \"$@\"")
        .arg(bin)
        .args(args)
        .args(["--agent", &agent, "sessions", "new"])
        .current_dir(env.cwd());
    for (k, v) in &env.extra_env {
        start.env(k, v);
    }
    let o = start.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let owner = owner_pid(&env, "fs", &agent).expect("the owner runs");
    let sock = owner_socket(&env);
    // Hold connections open until the owner runs out of descriptors.
    let mut held = Vec::new();
    for _ in 0..64 {
        match std::os::unix::net::UnixStream::connect(&sock) {
            Ok(s) => held.push(s),
            Err(_) => break,
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(held);
    // It waits for the connections' first lines (up to 10 s) before it lets them go.
    let t0 = Instant::now();
    let r = loop {
        let r = env.run(&["--agent", &agent, "echo", "still-serving"]);
        if r.code == 0 || t0.elapsed() > Duration::from_secs(30) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(r.stdout.contains("still-serving"), "{r:?}");
    assert!(alive(owner));
    assert_eq!(owner_pid(&env, "fs", &agent), Some(owner), "the same owner");
    let st: Value = env
        .run(&["--format", "json", "--agent", &agent, "status"])
        .ok()
        .json();
    assert!(
        st["acceptErrors"].as_u64().is_some_and(|n| n > 0),
        "the errors are shown: {st}"
    );
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}

/// A stopped owner (`kill -STOP`): the kernel still accepts connections for it, and clients
/// used to wait for its answer forever. Now `status` gives up after 10 s naming it, Ctrl-C
/// stops a waiting prompt at once, and a prompt that finds the owner's lease expired (no
/// heartbeat for a whole TTL) ends the frozen owner like a dead one and is served by a new
/// one. The prompt whose client gave up never runs (at most once).
#[test]
fn a_stopped_owner_does_not_hold_its_clients() {
    for backend in BACKENDS {
        let mut env = Env::new(backend);
        env.extra_env
            .push(("ACPX_LEASE_TTL_MS".into(), "3000".into()));
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let owner = owner_pid(&env, backend, &agent).expect("the owner runs");
        let _unfreeze = KillOnDrop(owner);
        common::process::kill(owner, libc::SIGSTOP);
        let t0 = Instant::now();
        let interrupted = common::process::spawn(&env, &["--agent", &agent, "echo", "ctrl-c"]);
        std::thread::sleep(Duration::from_millis(500));
        common::process::kill_child(&interrupted, libc::SIGINT);
        let i = common::process::finish(interrupted);
        assert_eq!(i.code, 130, "{i:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let status = env.run(&["--agent", &agent, "status"]);
        assert_ne!(status.code, 0, "{status:?}");
        assert!(
            status.stderr.contains(&format!("pid {owner}"))
                && status.stderr.contains("did not answer"),
            "{}",
            status.stderr
        );
        let r = env
            .run(&["--agent", &agent, "echo", "after", "the", "freeze"])
            .ok();
        assert!(r.stdout.contains("after the freeze"), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(40), "{:?}", t0.elapsed());
        wait_for("the frozen owner to be gone", || !alive(owner));
        let now = owner_pid(&env, backend, &agent).expect("a new owner runs");
        assert_ne!(now, owner);
        assert_eq!(
            user_messages(&env, backend, &agent),
            ["echo after the freeze"]
        );
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}

/// Ctrl-C of a client waiting its turn withdraws its own prompt: the running turn (another
/// client's) goes on, and the withdrawn prompt never runs.
#[test]
fn ctrl_c_of_a_queued_client_withdraws_its_own_prompt_only() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    let running = common::process::spawn_until(
        &env,
        &["--format", "json", "--agent", &agent, "prompt", "slow 100"],
        common::process::STARTED,
    );
    let queued = common::process::spawn(&env, &["--agent", &agent, "echo", "queued"]);
    wait_for("the second prompt queued", || {
        status(&env, &agent)["queueDepth"].as_u64() == Some(1)
    });
    let t0 = Instant::now();
    common::process::kill_child(&queued, libc::SIGINT);
    let q = common::process::finish(queued);
    assert_eq!(q.code, 130, "{q:?}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let (code, lines, stderr) = running.finish();
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        lines.last().unwrap()["payload"]["stopReason"],
        "end_turn",
        "the running turn was not cancelled: {stderr}"
    );
    assert_eq!(
        user_messages(&env, "fs", &agent),
        ["slow 100"],
        "the withdrawn prompt never ran"
    );
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}

/// A request line without end is cut at the message cap: the client is told, the owner keeps
/// serving (it read the whole line into memory before).
#[test]
fn an_endless_request_line_is_refused_at_the_cap() {
    let mut env = Env::new("fs");
    env.extra_env
        .push(("ACPX_MAX_AGENT_MESSAGE_BYTES".into(), "1048576".into()));
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    let owner = owner_pid(&env, "fs", &agent).expect("the owner runs");
    let sock = owner_socket(&env);
    let s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let writer = {
        let mut w = s.try_clone().unwrap();
        std::thread::spawn(move || {
            use std::io::Write;
            let chunk = vec![b'x'; 1 << 16];
            for _ in 0..64 {
                if w.write_all(&chunk).is_err() {
                    break;
                }
            }
        })
    };
    let mut answer = String::new();
    use std::io::BufRead;
    std::io::BufReader::new(&s).read_line(&mut answer).unwrap();
    assert!(answer.contains("more than 1 MiB"), "{answer}");
    drop(s);
    writer.join().unwrap();
    assert!(alive(owner));
    let r = env.run(&["--agent", &agent, "echo", "still-serving"]).ok();
    assert!(r.stdout.contains("still-serving"), "{}", r.stderr);
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}

/// One line the owner writes on `s`, read within `within`, as JSON.
fn owner_line(s: &std::os::unix::net::UnixStream, within: Duration) -> Value {
    use std::io::BufRead;
    s.set_read_timeout(Some(within)).unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(s).read_line(&mut answer).unwrap();
    serde_json::from_str(answer.trim_end()).unwrap_or_else(|e| panic!("{answer:?}: {e}"))
}

/// The error of a failed `--format json` command.
fn json_error(r: &common::Run) -> Value {
    let last = r.stdout.lines().last().unwrap_or_else(|| panic!("{r:?}"));
    serde_json::from_str::<Value>(last).unwrap()["error"].clone()
}

/// An owner serves a bounded number of connections at once (issue 45, item 5); before, every
/// connection cost a task and a file descriptor, so a script holding thousands of idle ones
/// ran the owner out of descriptors. Beyond `ACPX_OWNER_MAX_CONNECTIONS` a prompt is refused
/// at once with `QUEUE_OWNER_BUSY` naming the limit, and nothing is queued; `status` still
/// gets through (a small reserve for requests answered at once) and counts the refusals;
/// past the reserve too, a connection is answered and closed before it sends a word. Closed
/// junk frees the owner at once, and junk left open is closed after 10 s without a request.
#[test]
fn an_owner_bounds_the_connections_it_serves() {
    let mut env = Env::new("fs");
    env.extra_env
        .push(("ACPX_OWNER_MAX_CONNECTIONS".into(), "8".into()));
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    let owner = owner_pid(&env, "fs", &agent).expect("the owner runs");
    let sock = owner_socket(&env);
    let connect = || std::os::unix::net::UnixStream::connect(&sock).unwrap();

    // Eight idle connections fill the limit.
    let t0 = Instant::now();
    let mut junk: Vec<_> = (0..8).map(|_| connect()).collect();
    let r = env.run(&["--format", "json", "--agent", &agent, "echo", "refused"]);
    assert_eq!(r.code, 1, "{r:?}");
    let err = json_error(&r);
    assert_eq!(err["data"]["detailCode"], "QUEUE_OWNER_BUSY", "{err}");
    let message = err["message"].as_str().unwrap();
    assert!(
        message.contains("8 connections") && message.contains("ACPX_OWNER_MAX_CONNECTIONS"),
        "the message names the limit: {message}"
    );
    // `status` gets through and counts the refusal.
    let st: Value = env
        .run(&["--format", "json", "--agent", &agent, "status"])
        .ok()
        .json();
    assert_eq!(st["status"], "alive", "{st}");
    assert_eq!(st["pid"].as_u64(), Some(owner), "{st}");
    assert_eq!(st["maxConnections"], 8, "{st}");
    assert!(st["connections"].as_u64().is_some_and(|n| n > 8), "{st}");
    assert!(
        st["refusedConnections"].as_u64().is_some_and(|n| n >= 1),
        "{st}"
    );
    // The reserve full too: a connection is answered at once, without sending anything.
    junk.extend((0..16).map(|_| connect()));
    let extra = connect();
    let answer = owner_line(&extra, Duration::from_secs(5));
    assert_eq!(answer["type"], "error", "{answer}");
    assert_eq!(
        answer["error"]["detailCode"], "QUEUE_OWNER_BUSY",
        "{answer}"
    );
    assert_eq!(answer["error"]["retryable"], true, "{answer}");
    // All of that before the junk's first-line deadline cut any of it.
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());

    // Closed junk frees the owner at once.
    drop(junk);
    drop(extra);
    let t1 = Instant::now();
    let r = loop {
        let r = env.run(&["--agent", &agent, "echo", "served"]);
        if r.code == 0 || t1.elapsed() > Duration::from_secs(3) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(r.stdout.contains("served"), "{r:?}");

    // Junk left open is closed, told why, after 10 s without a request: it cannot pin the
    // limit, and the owner serves again.
    let junk: Vec<_> = (0..24).map(|_| connect()).collect();
    let t2 = Instant::now();
    let r = loop {
        let r = env.run(&["--agent", &agent, "echo", "after", "the", "deadline"]);
        if r.code == 0 || t2.elapsed() > Duration::from_secs(30) {
            break r;
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(r.stdout.contains("after the deadline"), "{r:?}");
    let took = t2.elapsed();
    assert!(
        took > Duration::from_secs(5) && took < Duration::from_secs(25),
        "{took:?}"
    );
    let told = owner_line(&junk[0], Duration::from_secs(1));
    assert!(
        told["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no request within 10 s")),
        "{told}"
    );
    drop(junk);
    assert!(alive(owner));
    assert_eq!(owner_pid(&env, "fs", &agent), Some(owner), "the same owner");
    // What was refused never ran.
    assert_eq!(
        user_messages(&env, "fs", &agent),
        ["echo served", "echo after the deadline"]
    );
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}

/// An owner frozen in the middle of a turn (issue 45, item 3): its client, which may wait a
/// long time for a line of a long turn, checks the owner's lease while it is silent and gives
/// up once the lease expired, saying the outcome is unknown; the next prompt ends the frozen
/// owner and is served by a new one.
#[test]
fn a_client_leaves_an_owner_that_froze_mid_turn() {
    for backend in BACKENDS {
        let mut env = Env::new(backend);
        env.extra_env
            .push(("ACPX_LEASE_TTL_MS".into(), "2000".into()));
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let owner = owner_pid(&env, backend, &agent).expect("the owner runs");
        let running = common::process::spawn_until(
            &env,
            &["--format", "json", "--agent", &agent, "prompt", "slow 400"],
            common::process::STARTED,
        );
        let t0 = Instant::now();
        let _unfreeze = KillOnDrop(owner);
        common::process::kill(owner, libc::SIGSTOP);
        let (code, lines, stderr) = running.finish();
        assert_eq!(code, 1, "{stderr}");
        let error = lines.last().map(Value::to_string).unwrap_or_default();
        assert!(
            error.contains("QUEUE_OWNER_UNRESPONSIVE")
                && error.contains("stopped renewing its lease")
                && error.contains("unknown"),
            "{error}"
        );
        assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
        let r = env.run(&["--agent", &agent, "echo", "next"]).ok();
        assert!(r.stdout.contains("next"), "{r:?}");
        wait_for("the frozen owner to be gone", || !alive(owner));
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}

/// Queue order is arrival order (issue 51): clients that queue while the owner is stopped run
/// in the order they arrived, once it continues, not in the order their requests happen to be
/// read; a client that gave up meanwhile is dropped and the others keep their order.
#[test]
fn prompts_queued_during_a_stall_run_in_arrival_order() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let owner = owner_pid(&env, backend, &agent).expect("the owner runs");
        for round in 0..2 {
            let _unfreeze = KillOnDrop(owner);
            common::process::kill(owner, libc::SIGSTOP);
            let mut clients = Vec::new();
            for i in 1..=5 {
                let text = format!("ord{round}-{i}");
                clients.push(common::process::spawn(
                    &env,
                    &["--agent", &agent, "echo", &text],
                ));
                std::thread::sleep(Duration::from_millis(400));
            }
            // The third one gives up before the owner continues.
            let gave_up = clients.remove(2);
            common::process::kill_child(&gave_up, libc::SIGKILL);
            let _ = common::process::finish(gave_up);
            common::process::kill(owner, libc::SIGCONT);
            for c in clients {
                let r = common::process::finish(c);
                assert_eq!(r.code, 0, "{r:?}");
            }
        }
        let heard = user_messages(&env, backend, &agent);
        let expected: Vec<String> = (0..2)
            .flat_map(|round| [1, 2, 4, 5].map(move |i| format!("echo ord{round}-{i}")))
            .collect();
        assert_eq!(heard, expected, "{backend}");
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
    }
}
