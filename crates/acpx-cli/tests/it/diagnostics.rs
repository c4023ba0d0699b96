//! End-to-end tests of the runtime and store diagnostics: `tracing` events reach stderr (by
//! default warnings and errors, more with `-v` or `RUST_LOG`), and never stdout, which with
//! `--format json` carries JSON lines only.

use crate::common;

use common::{Env, Run, Seed};

const AGENT: &str = "npx -y @agentclientprotocol/codex-acp@^1.1.5";

/// A file-store home with one healthy session and no listing cache, so that the next listing
/// rebuilds the cache (a debug event of `acpx_store_fs`).
fn env_without_listing_cache() -> Env {
    let env = Env::new("fs");
    env.import_archive(&Seed::new("rec-diag", &env.cwd_str(), AGENT).archive());
    let _ = std::fs::remove_file(env.home().join("sessions/.index.json"));
    env
}

/// Every non-empty stdout line is JSON (panics on any other line).
fn assert_stdout_is_json(r: &Run) {
    let lines = r.json_lines();
    assert!(!lines.is_empty(), "no JSON on stdout; stderr: {}", r.stderr);
}

#[test]
fn rust_log_shows_store_debug_events_on_stderr_only() {
    let mut env = env_without_listing_cache();
    env.extra_env
        .push(("RUST_LOG".into(), "acpx_store_fs=debug".into()));
    let r = env.run(&["--format", "json", "sessions", "list"]).ok();
    assert_stdout_is_json(&r);
    assert!(
        r.stderr.contains("DEBUG") && r.stderr.contains("no usable listing cache"),
        "stderr: {}",
        r.stderr
    );
    assert!(!r.stdout.contains("listing cache"), "stdout: {}", r.stdout);
}

#[test]
fn verbose_shows_store_debug_events() {
    let env = env_without_listing_cache();
    let r = env
        .run(&["-v", "--format", "json", "sessions", "list"])
        .ok();
    assert_stdout_is_json(&r);
    assert!(
        r.stderr.contains("DEBUG") && r.stderr.contains("no usable listing cache"),
        "stderr: {}",
        r.stderr
    );
}

#[test]
fn without_verbose_debug_events_stay_hidden() {
    let env = env_without_listing_cache();
    let r = env.run(&["--format", "json", "sessions", "list"]).ok();
    assert_stdout_is_json(&r);
    assert!(!r.stderr.contains("DEBUG"), "stderr: {}", r.stderr);
}

#[test]
fn warnings_are_shown_by_default() {
    let env = env_without_listing_cache();
    // A snapshot that does not parse: the listing skips it and says so.
    std::fs::write(
        env.home().join("sessions/rec-broken.json"),
        "{\"schema\": \"acpx.session.v1\", trunc",
    )
    .unwrap();
    let r = env.run(&["--format", "json", "sessions", "list"]);
    assert_stdout_is_json(&r);
    assert!(
        r.stderr.contains("warning: skipped") && r.stderr.contains("rec-broken.json"),
        "stderr: {}",
        r.stderr
    );
    // Once: the store hands the skipped entry back to the command, which reports it, and
    // logs it only at debug level (it used to be a `WARN` line as well).
    assert_eq!(
        r.stderr.matches("rec-broken.json").count(),
        1,
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("WARN"), "stderr: {}", r.stderr);
    // The quiet format shows errors only.
    let _ = std::fs::remove_file(env.home().join("sessions/.index.json"));
    let q = env.run(&["--format", "quiet", "sessions", "list"]);
    assert!(
        !q.stderr.contains("WARN") && !q.stderr.contains("warning"),
        "stderr: {}",
        q.stderr
    );
}

#[test]
fn a_closed_stderr_does_not_panic() {
    use std::process::Stdio;
    let mut env = env_without_listing_cache();
    env.extra_env.push(("RUST_LOG".into(), "acpx=debug".into()));
    let mut child = env
        .cmd()
        .args(["--format", "json", "sessions", "list"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The reading end of stderr closed before acpx writes its diagnostics: writes get EPIPE.
    drop(child.stderr.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout
        .lines()
        .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
}

/// A store warning with nobody to hand it to reaches stderr by default as a `WARN` line: an
/// append that sets aside a torn last line of the log (a writer killed mid-line).
#[test]
fn store_warnings_are_shown_by_default() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    // No process holds the session when its log is damaged (as after a writer was killed).
    env.run(&["--no-owner", "--agent", &agent, "sessions", "new"])
        .ok();
    let id = env
        .run(&["--format", "quiet", "--agent", &agent, "sessions", "show"])
        .ok()
        .stdout
        .trim()
        .to_owned();
    let log = env.home().join(format!("sessions/{id}.events.ndjson"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, b"{\"seq\": 99, \"torn").unwrap();
    drop(f);
    let r = env
        .run(&[
            "--no-owner",
            "--format",
            "json",
            "--agent",
            &agent,
            "echo",
            "hi",
        ])
        .ok();
    assert_stdout_is_json(&r);
    assert!(
        r.stderr.contains("WARN") && r.stderr.contains("torn event-log tail"),
        "stderr: {}",
        r.stderr
    );
}
