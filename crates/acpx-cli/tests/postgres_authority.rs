//! One session driven from two hosts on PostgreSQL (two acpx homes with their own runtime
//! directories, one database; `ACPX_TEST_POSTGRES_URL`, failing under `CI=true` without it):
//! host B's prompts run in host A's warm queue owner, in order, through the store's task
//! queue; B sees A's owner in `status` and cancels its turn; when A's owner dies mid-turn,
//! B's waiting prompt takes the session over; `--no-owner` on B waits for A's owner.

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::postgres::{server_url, Schema};
use common::process::{alive, exit_code, kill, wait_for};
use common::*;
use serde_json::Value;

/// `env`'s command in `dir` (the project of the session, on whichever host).
fn on(env: &Env, dir: &Path, args: &[&str]) -> Command {
    let mut c = env.cmd();
    c.current_dir(dir).args(args);
    c
}

fn run(env: &Env, dir: &Path, args: &[&str]) -> Run {
    let o = on(env, dir, args).output().unwrap();
    Run {
        code: exit_code(o.status),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn spawn(env: &Env, dir: &Path, args: &[&str]) -> Child {
    on(env, dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(child: Child) -> Run {
    let o = child.wait_with_output().unwrap();
    Run {
        code: exit_code(o.status),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// Two hosts and a session made on host A by `sessions new` (so A's queue owner holds it,
/// warm), with a first prompt through it.
struct TwoHosts {
    _schema: Schema,
    a: Env,
    b: Env,
    agent: String,
    project: std::path::PathBuf,
    id: String,
}

impl TwoHosts {
    fn new(tag: &str, url: &str) -> TwoHosts {
        let schema = Schema::new(url, tag);
        let a = schema.host();
        let b = schema.host();
        let agent = a.agent_cmd("");
        let project = a.cwd();
        let created = run(
            &a,
            &project,
            &["--format", "json", "--agent", &agent, "sessions", "new"],
        )
        .ok()
        .json();
        let id = created["acpxRecordId"].as_str().unwrap().to_owned();
        let warm = run(&a, &project, &["--agent", &agent, "echo", "warm"]).ok();
        assert!(warm.stdout.contains("warm"), "{}", warm.stderr);
        TwoHosts {
            _schema: schema,
            a,
            b,
            agent,
            project,
            id,
        }
    }

    fn args<'a>(&'a self, rest: &[&'a str]) -> Vec<&'a str> {
        let mut v = vec!["--agent", self.agent.as_str()];
        v.extend(rest);
        v
    }

    fn run(&self, host: &Env, rest: &[&str]) -> Run {
        run(host, &self.project, &self.args(rest))
    }

    fn spawn(&self, host: &Env, rest: &[&str]) -> Child {
        spawn(host, &self.project, &self.args(rest))
    }

    fn status(&self, host: &Env) -> Value {
        self.run(host, &["--format", "json", "status"]).ok().json()
    }

    fn events(&self) -> Vec<Value> {
        self.run(
            &self.a,
            &["--format", "json", "sessions", "events", &self.id],
        )
        .ok()
        .json_lines()
    }

    /// The pid of host A's queue owner, from its own status.
    fn owner_pid(&self) -> u64 {
        let s = self.status(&self.a);
        s["pid"]
            .as_u64()
            .unwrap_or_else(|| panic!("A's owner runs: {s}"))
    }
}

fn attaches(events: &[Value]) -> usize {
    events
        .iter()
        .filter(|e| e["payload"]["phase"] == "session_attached")
        .count()
}

/// Spawns a prompt whose JSON output is read on a thread; returns once the turn started.
fn spawn_running(h: &TwoHosts, host: &Env, prompt: &str) -> (Child, std::thread::JoinHandle<()>) {
    let mut child = h.spawn(host, &["--format", "json", "prompt", prompt]);
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut sent = false;
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if !sent && l.contains(common::process::STARTED) {
                let _ = tx.send(());
                sent = true;
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the turn started");
    (child, reader)
}

#[test]
fn a_prompt_from_host_b_runs_in_host_a_warm_owner() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_prompt", &url);
    let owner = h.owner_pid();

    let status = h.status(&h.b);
    assert_eq!(status["status"], "alive", "{status}");
    assert_eq!(status["pid"].as_u64(), Some(owner), "{status}");
    assert!(status["ownerHost"].is_string(), "{status}");
    assert!(status["leaseExpiresAt"].is_string(), "{status}");

    let t0 = Instant::now();
    let from_b = h.run(&h.b, &["echo", "from-host-b"]).ok();
    let took = t0.elapsed();
    assert!(from_b.stdout.contains("from-host-b"), "{}", from_b.stderr);
    assert!(took < Duration::from_secs(10), "{took:?}");
    // The same owner ran it: no owner on B, no reattach since the session was created.
    assert_eq!(h.owner_pid(), owner);
    assert_eq!(
        attaches(&h.events()),
        0,
        "the agent that created the session ran it"
    );
    // JSON from B is the same stream a local client gets: the turn's events, then the result.
    let json = h
        .run(&h.b, &["--format", "json", "echo", "json-from-b"])
        .ok()
        .json_lines();
    assert!(
        json.iter().any(|e| e["type"] == "prompt_started"),
        "{json:?}"
    );
    assert!(json.iter().any(|e| e["type"] == "prompt_done"), "{json:?}");
}

#[test]
fn prompts_from_both_hosts_at_once_all_complete_one_at_a_time() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_fifo", &url);
    let owner = h.owner_pid();
    let mut children = Vec::new();
    for i in 0..3 {
        for (name, host) in [("a", &h.a), ("b", &h.b)] {
            let word = format!("word-{name}-{i}");
            children.push((word.clone(), h.spawn(host, &["echo", &word])));
        }
    }
    for (word, child) in children {
        let r = finish(child);
        assert_eq!(r.code, 0, "{word}: {}", r.stderr);
        assert!(r.stdout.contains(&word), "{word}: {}", r.stdout);
    }
    assert_eq!(h.owner_pid(), owner, "one owner ran them all");
    // One turn at a time: each turn's events are contiguous in the log.
    let events = h.events();
    let turns: Vec<&str> = events
        .iter()
        .filter(|e| e["stream"] != "queue")
        .filter_map(|e| e["requestId"].as_str())
        .collect();
    let mut seen = Vec::new();
    for r in &turns {
        if seen.last() != Some(r) {
            assert!(!seen.contains(r), "turn {r} interleaved with another");
            seen.push(r);
        }
    }
    assert_eq!(seen.len(), 7, "the warm-up turn and six more: {seen:?}");
}

#[test]
fn host_b_sees_and_cancels_host_a_running_turn() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_cancel", &url);
    let (long, reader) = spawn_running(&h, &h.a, "slow 400");
    let status = h.status(&h.b);
    assert_eq!(status["status"], "running", "{status}");
    assert!(status["requestId"].is_string(), "{status}");
    assert!(status["runningSince"].is_string(), "{status}");

    let t0 = Instant::now();
    let cancelled = h.run(&h.b, &["--format", "json", "cancel"]).ok().json();
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    let r = finish(long);
    let took = t0.elapsed();
    reader.join().unwrap();
    assert!(
        took < Duration::from_secs(3),
        "the turn ended {took:?} after the cancel from host B"
    );
    let done = h
        .events()
        .into_iter()
        .rfind(|e| e["type"] == "prompt_done")
        .unwrap();
    assert_eq!(
        done["payload"]["stopReason"], "cancelled",
        "{done}\n{}",
        r.stderr
    );
}

#[test]
fn host_b_takes_the_session_over_when_host_a_owner_is_killed_mid_turn() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_takeover", &url);
    let owner = h.owner_pid();
    let (long, reader) = spawn_running(&h, &h.a, "slow 400");
    // B's prompt waits behind A's turn, in A's queue.
    let waiting = h.spawn(&h.b, &["echo", "after-the-takeover"]);
    wait_for("B's task in A's queue", || {
        h.status(&h.b)["queueDepth"].as_u64() == Some(1)
    });
    let t0 = Instant::now();
    kill(owner, libc::SIGKILL);
    wait_for("A's owner gone", || !alive(owner));
    let r = finish(waiting);
    let took = t0.elapsed();
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("after-the-takeover"), "{}", r.stdout);
    assert!(
        took < Duration::from_secs(20),
        "takeover took {took:?} (lease TTL 15 s + 5 s)"
    );
    let a_side = finish(long);
    reader.join().unwrap();
    assert_ne!(a_side.code, 0, "A's client lost its owner mid-turn");
    // The interrupted turn is recorded as such, then B's turn, in a new owner that
    // reattached.
    let events = h.events();
    assert!(
        events.iter().any(|e| matches!(
            e["payload"]["phase"].as_str(),
            Some("session_attached" | "session_fallback")
        )),
        "the new owner attached the session again"
    );
    let status = h.status(&h.b);
    assert_ne!(status["pid"].as_u64(), Some(owner), "{status}");
}

#[test]
fn no_owner_on_host_b_waits_for_host_a_owner_to_step_aside() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_no_owner", &url);
    let owner = h.owner_pid();
    let r = h.run(&h.b, &["--no-owner", "echo", "in-process-on-b"]).ok();
    assert!(r.stdout.contains("in-process-on-b"), "{}", r.stderr);
    wait_for("A's owner stepped aside", || !alive(owner));
    // A's next prompt starts a new owner there, which takes the session again.
    let again = h.run(&h.a, &["echo", "back-on-a"]).ok();
    assert!(again.stdout.contains("back-on-a"), "{}", again.stderr);
}

#[test]
fn lifecycle_commands_from_host_b_reach_host_a_owner() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_lifecycle", &url);
    let owner = h.owner_pid();
    // `sessions new` on B soft-closes the session A's owner holds, through that owner.
    let t0 = Instant::now();
    let created = h
        .run(&h.b, &["--format", "json", "sessions", "new"])
        .ok()
        .json();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_ne!(created["acpxRecordId"], h.id.as_str());
    wait_for("A's owner closed its session", || !alive(owner));
    let shown = h
        .run(&h.b, &["--format", "json", "sessions", "show", &h.id])
        .ok()
        .json();
    assert_eq!(shown["closed"], true, "{shown}");
    let open: Vec<Value> = h
        .run(&h.b, &["--format", "json", "sessions", "list"])
        .ok()
        .json()["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["closed"] != true)
        .cloned()
        .collect();
    assert_eq!(open.len(), 1, "one open session in the scope: {open:?}");
}
