//! "The server restarted between turns: the next command works": a PostgreSQL cluster of this
//! test's own (started with `scripts/pg-test-server.sh`) is restarted with `pg_ctl restart`
//! between two prompts of one session, while the session's queue owner keeps its pooled
//! connections; the second prompt must succeed. Skipped with a message when the PostgreSQL
//! server binaries are not installed, failing under `CI=true`.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::Env;

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pg-test-server.sh")
}

/// Whether `initdb` and `pg_ctl` are found where the script looks for them.
fn server_binaries_found() -> bool {
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()))
    };
    if on_path("initdb") && on_path("pg_ctl") {
        return true;
    }
    std::fs::read_dir("/usr/lib/postgresql").is_ok_and(|versions| {
        versions
            .flatten()
            .any(|v| v.path().join("bin/initdb").is_file() && v.path().join("bin/pg_ctl").is_file())
    })
}

/// A throwaway cluster on a free port, stopped (and its files removed) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    url: String,
}

impl Cluster {
    fn start() -> Cluster {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(dir.path())
            .arg(port.to_string())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "start a cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let url = stdout
            .trim()
            .strip_prefix("export ACPX_TEST_POSTGRES_URL=")
            .unwrap_or_else(|| panic!("the script printed {stdout:?}"))
            .to_owned();
        Cluster { dir, url }
    }

    fn script(&self, command: &str) {
        let out = Command::new("bash")
            .arg(script())
            .arg(command)
            .arg(self.dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command} the cluster: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(self.dir.path())
            .output();
    }
}

#[test]
fn the_server_restarted_between_turns_and_the_next_prompt_works() {
    if !server_binaries_found() {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "no PostgreSQL server binaries (initdb, pg_ctl) under CI=true: this test must run"
        );
        eprintln!("skipped: no PostgreSQL server binaries (initdb, pg_ctl) found");
        return;
    }
    let cluster = Cluster::start();
    let mut env = Env::new("postgres");
    env.extra_env = vec![("ACPX_STORE_URL".into(), cluster.url.clone())];
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    // The first turn starts the session's queue owner, which stays for the next one.
    let r = env
        .run(&["--format", "quiet", "--agent", &agent, "echo", "one"])
        .ok();
    assert_eq!(r.stdout, "one\n");
    let status = env
        .run(&["--format", "json", "--agent", &agent, "status"])
        .ok()
        .json();
    assert!(status["pid"].is_number(), "a queue owner runs: {status}");

    cluster.script("restart");

    let r = env.run(&["--format", "quiet", "--agent", &agent, "echo", "two"]);
    assert_eq!(r.code, 0, "the prompt after the restart: {r:?}");
    assert_eq!(r.stdout, "two\n");
    let r = env
        .run(&[
            "--format",
            "quiet",
            "--no-owner",
            "--agent",
            &agent,
            "echo",
            "three",
        ])
        .ok();
    assert_eq!(r.stdout, "three\n");
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}
