//! One session driven from two hosts on PostgreSQL (two acpx homes with their own runtime
//! directories, one database; `ACPX_TEST_POSTGRES_URL`, failing under `CI=true` without it):
//! host B's prompts run in host A's warm queue owner, in order, through the store's task
//! queue; B sees A's owner in `status` and cancels its turn; when A's owner dies mid-turn,
//! B's waiting prompt takes the session over; `--no-owner` on B waits for A's owner.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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
        TwoHosts::with(tag, url, |_| {})
    }

    /// [`TwoHosts::new`], host A's environment changed by `change_a` first (its URL, its
    /// lease TTL).
    fn with(tag: &str, url: &str, change_a: impl FnOnce(&mut Env)) -> TwoHosts {
        let schema = Schema::new(url, tag);
        let mut a = schema.host();
        change_a(&mut a);
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
    // Busy: B says so and waits for the turn, then runs.
    let (long, reader) = spawn_running(&h, &h.a, "slow 40");
    let r = h.run(&h.b, &["--no-owner", "echo", "after-the-queue"]).ok();
    assert!(r.stdout.contains("after-the-queue"), "{}", r.stderr);
    assert!(
        r.stderr.contains("busy") && r.stderr.contains("waiting for its queue"),
        "{}",
        r.stderr
    );
    assert_eq!(finish(long).code, 0);
    reader.join().unwrap();
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

#[test]
fn fsck_repair_on_host_b_releases_host_a_idle_owner_and_names_a_busy_one() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_fsck", &url);
    let owner = h.owner_pid();
    // Busy: refused at once, naming the task.
    let (long, reader) = spawn_running(&h, &h.a, "slow 400");
    let t0 = Instant::now();
    let r = h.run(&h.b, &["fsck", "--repair"]);
    assert_ne!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("busy"), "{}", r.stderr);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    h.run(&h.b, &["cancel"]).ok();
    finish(long);
    reader.join().unwrap();
    // Idle: it steps aside, and the repair runs.
    let r = h
        .run(&h.b, &["--format", "json", "fsck", "--repair"])
        .ok()
        .json();
    assert_eq!(r["ok"], true, "{r}");
    wait_for("A's owner stepped aside", || !alive(owner));
}

#[test]
fn ctrl_c_on_host_b_withdraws_its_queued_prompt_and_leaves_host_a_turn_alone() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::new("remote_withdraw", &url);
    let (long, reader) = spawn_running(&h, &h.a, "slow 100");
    let queued = h.spawn(&h.b, &["echo", "queued-on-b"]);
    wait_for("B's prompt in A's queue", || {
        h.status(&h.b)["queueDepth"].as_u64() == Some(1)
    });
    common::process::kill_child(&queued, libc::SIGINT);
    let q = finish(queued);
    assert_eq!(q.code, 130, "{q:?}");
    let a = finish(long);
    reader.join().unwrap();
    assert_eq!(a.code, 0, "{}", a.stderr);
    let events = h.events();
    let done = events.iter().rfind(|e| e["type"] == "prompt_done").unwrap();
    assert_eq!(done["payload"]["stopReason"], "end_turn", "{done}");
    // Nothing of B's prompt ran: give the owner a moment to reach it, then look.
    std::thread::sleep(Duration::from_millis(500));
    let text = serde_json::to_string(&h.events()).unwrap();
    assert!(!text.contains("queued-on-b\""), "the withdrawn prompt ran");
}

/// Host A's lease TTL in the tests of a host that stops answering: short, so they take
/// seconds.
const SHORT_TTL_MS: &str = "2000";

fn set_env(env: &mut Env, key: &str, value: &str) {
    env.extra_env.retain(|(k, _)| k != key);
    env.extra_env.push((key.into(), value.into()));
}

/// The lines of host A's owner log for session `id`.
fn owner_log(h: &TwoHosts) -> String {
    std::fs::read_to_string(h.a.home().join("owners").join(format!("{}.log", h.id)))
        .unwrap_or_default()
}

#[test]
fn a_frozen_owner_on_host_a_is_taken_over_after_its_ttl_and_never_writes_again() {
    let Some(url) = server_url() else { return };
    let h = TwoHosts::with("remote_frozen", &url, |a| {
        set_env(a, "ACPX_LEASE_TTL_MS", SHORT_TTL_MS)
    });
    let owner = h.owner_pid();
    // The host stops answering (its process frozen, its connections open).
    kill(owner, libc::SIGSTOP);
    let t0 = Instant::now();
    let r = h.run(&h.b, &["echo", "after-the-freeze"]).ok();
    let took = t0.elapsed();
    assert!(r.stdout.contains("after-the-freeze"), "{}", r.stderr);
    assert!(
        took < Duration::from_secs(2 + 5),
        "takeover took {took:?} (TTL 2 s + 5 s)"
    );
    let last_seq = h.events().last().unwrap()["seq"].as_u64().unwrap();
    // Thawed, A's owner finds its lease taken over and stops without writing.
    kill(owner, libc::SIGCONT);
    wait_for("A's thawed owner stopped", || !alive(owner));
    let log = owner_log(&h);
    assert!(
        log.contains("its lease was taken over by another owner"),
        "{log}"
    );
    let events = h.events();
    assert_eq!(
        events.last().unwrap()["seq"].as_u64().unwrap(),
        last_seq,
        "nothing written by the owner taken over: {:?}",
        events.last()
    );
    let again = h.run(&h.b, &["echo", "still-b"]).ok();
    assert!(again.stdout.contains("still-b"), "{}", again.stderr);
}

/// A TCP proxy in front of the database: what host A's network to it goes through, cut at
/// will (every connection closed, new ones refused).
struct Proxy {
    port: u16,
    cut: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn to(target: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let open = Arc::new(Mutex::new(Vec::<TcpStream>::new()));
        let (c, o) = (cut.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                if c.load(Ordering::SeqCst) {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                let mut open = o.lock().unwrap();
                for s in [&client, &server] {
                    open.push(s.try_clone().unwrap());
                }
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { port, cut, open }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

/// `url` with its `host:port` replaced by `127.0.0.1:<port>`.
fn through(url: &str, port: u16) -> (String, String) {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split('/').next().unwrap();
    let host_port = authority.rsplit('@').next().unwrap();
    (
        url.replacen(host_port, &format!("127.0.0.1:{port}"), 1),
        host_port.to_owned(),
    )
}

#[test]
fn host_a_cut_off_from_the_database_loses_the_session_to_host_b() {
    let Some(url) = server_url() else { return };
    let (_, target) = through(&url, 0);
    let proxy = Proxy::to(target);
    let (proxied, _) = through(&url, proxy.port);
    let h = TwoHosts::with("remote_cut", &url, |a| {
        set_env(a, "ACPX_STORE_URL", &proxied);
        set_env(a, "ACPX_LEASE_TTL_MS", SHORT_TTL_MS);
    });
    let owner = h.owner_pid();
    proxy.cut();
    // The server saw A's connections end: its lease lock went with them, and B takes over
    // at once.
    let t0 = Instant::now();
    let r = h.run(&h.b, &["echo", "after-the-cut"]).ok();
    assert!(r.stdout.contains("after-the-cut"), "{}", r.stderr);
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // A's owner cannot renew its lease: it stops within its TTL (and a little).
    let t1 = Instant::now();
    wait_for("A's cut-off owner stopped", || !alive(owner));
    assert!(
        t1.elapsed() < Duration::from_secs(2 + 5),
        "{:?}",
        t1.elapsed()
    );
    assert!(
        owner_log(&h).contains("its lease was taken over by another owner"),
        "{}",
        owner_log(&h)
    );
    let status = h.status(&h.b);
    assert_ne!(status["pid"].as_u64(), Some(owner), "{status}");
}
