//! `--store postgres` end to end, against the server of `ACPX_TEST_POSTGRES_URL` (skipped
//! with a message without it, failing under `CI=true`): two "hosts" (two acpx homes,
//! separate processes, one database) writing one session at the same time, following it
//! from the other host, `migrate` and `fsck`, and the URL's password never shown.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::postgres::{server_url, Schema};
use common::*;
use serde_json::Value;

/// `env`'s command, run in `dir` (another host's project directory).
fn in_dir(env: &Env, dir: &std::path::Path) -> Command {
    let mut c = env.cmd();
    c.current_dir(dir);
    c
}

fn events(env: &Env, id: &str) -> Vec<Value> {
    env.run(&["--format", "json", "sessions", "events", id])
        .ok()
        .json_lines()
}

#[test]
fn two_hosts_write_one_session_concurrently_without_gap_or_interleaving() {
    let Some(url) = server_url() else { return };
    let schema = Schema::new(&url, "hosts");
    let a = schema.host();
    let b = schema.host();
    let agent = a.agent_cmd("");
    let created = a
        .run(&["--format", "json", "--agent", &agent, "sessions", "new"])
        .ok()
        .json();
    let id = created["acpxRecordId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    let project = a.cwd();
    // Both hosts prompt at once, each in its own process (no owner: each takes the session's
    // writer lock for its turn; the other waits for it).
    let spawn = |env: &Env, word: &str| {
        in_dir(env, &project)
            .args(["--no-owner", "--format", "quiet", "--agent", &agent])
            .args(["echo", word])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let pa = spawn(&a, "from-host-a");
    let pb = spawn(&b, "from-host-b");
    let ra = pa.wait_with_output().unwrap();
    let rb = pb.wait_with_output().unwrap();
    for (r, word) in [(&ra, "from-host-a"), (&rb, "from-host-b")] {
        assert!(
            r.status.success(),
            "{word}: {}",
            String::from_utf8_lossy(&r.stderr)
        );
        assert_eq!(String::from_utf8_lossy(&r.stdout), format!("{word}\n"));
    }
    // One log, seq 1..n without a gap, seen the same from both hosts.
    let log = events(&a, &id);
    assert_eq!(log, events(&b, &id));
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    // Each turn's events are contiguous: a turn runs from its prompt_started to its end
    // with no event of the other turn's request in between.
    let turns: Vec<(usize, String)> = log
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "prompt_started")
        .map(|(i, e)| (i, e["requestId"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(turns.len(), 2, "both turns are recorded");
    for (start, request) in &turns {
        let end = log
            .iter()
            .position(|e| {
                e["requestId"] == request.as_str()
                    && (e["type"] == "prompt_done" || e["type"] == "prompt_error")
            })
            .unwrap_or_else(|| panic!("turn {request} has no end"));
        for e in &log[*start..=end] {
            if let Some(r) = e["requestId"].as_str() {
                assert_eq!(r, request, "turns interleaved at seq {}", e["seq"]);
            }
        }
    }
    let text = serde_json::to_string(&log).unwrap();
    assert!(text.contains("from-host-a") && text.contains("from-host-b"));
    // And the conversation holds both turns.
    let shown = b
        .run(&["--format", "json", "sessions", "show", &id])
        .ok()
        .json();
    let messages = serde_json::to_string(&shown).unwrap();
    assert!(messages.contains("from-host-a") && messages.contains("from-host-b"));
}

#[test]
fn a_follower_on_another_host_sees_the_turn_and_stops_at_close() {
    let Some(url) = server_url() else { return };
    let schema = Schema::new(&url, "follow");
    let a = schema.host();
    let b = schema.host();
    let agent = a.agent_cmd("");
    let id = a.new_session(&agent);
    let mut follower = b
        .cmd()
        .args(["--format", "json", "sessions", "events", "--follow", &id])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let seen = std::thread::spawn(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });
    std::thread::sleep(Duration::from_millis(500));
    a.run(&[
        "--no-owner",
        "--format",
        "quiet",
        "--agent",
        &agent,
        "echo",
        "watched-from-b",
    ])
    .ok();
    a.run(&["sessions", "close", &id]).ok();
    let started = Instant::now();
    let status = loop {
        if let Some(s) = follower.try_wait().unwrap() {
            break s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the follower did not stop at close"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let lines = seen.join().unwrap().join("\n");
    assert!(lines.contains("watched-from-b"), "{lines}");
    assert!(lines.contains("prompt_done"), "{lines}");
}

#[test]
fn migrate_to_postgres_and_back_then_fsck_is_clean() {
    let Some(url) = server_url() else { return };
    let schema = Schema::new(&url, "migrate");
    let mut env = Env::new("fs");
    env.extra_env = vec![
        ("ACPX_STORE_URL".into(), url.clone()),
        ("ACPX_STORE_SCHEMA".into(), schema.name.clone()),
    ];
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    env.run(&["--no-owner", "--agent", &agent, "echo", "one"])
        .ok();
    let list = |store: &str| -> Vec<String> {
        env.run(&["--format", "json", "--store", store, "sessions", "list"])
            .ok()
            .json()["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["acpxRecordId"].as_str().unwrap().to_owned())
            .collect()
    };
    let ids = list("fs");
    assert_eq!(ids.len(), 1);
    let m = env
        .run(&["--format", "json", "migrate", "--to", "postgres"])
        .ok()
        .json();
    assert_eq!(m["verified"], true);
    assert_eq!(m["sessionCount"], 1);
    assert!(
        m["location"].as_str().unwrap().contains(&schema.name),
        "{m}"
    );
    assert_eq!(list("postgres"), ids);
    let fsck = env.run(&["--format", "json", "--store", "postgres", "fsck"]);
    assert_eq!(fsck.code, 0, "{fsck:?}");
    // Continue on postgres, then copy to sqlite, verified.
    env.run(&[
        "--store",
        "postgres",
        "--no-owner",
        "--agent",
        &agent,
        "echo",
        "two",
    ])
    .ok();
    let m = env
        .run(&[
            "--format", "json", "--store", "postgres", "migrate", "--to", "sqlite",
        ])
        .ok()
        .json();
    assert_eq!(m["verified"], true);
    assert_eq!(list("sqlite"), ids);
    let r = env
        .run(&[
            "--store", "sqlite", "--format", "quiet", "--agent", &agent, "echo", "three",
        ])
        .ok();
    assert_eq!(r.stdout, "three\n");
}

#[test]
fn the_store_password_is_never_shown() {
    let mut env = Env::new("postgres");
    env.extra_env = vec![(
        "ACPX_STORE_URL".into(),
        "postgres://someone:hunter2@127.0.0.1:1/acpx?connect_timeout=2".into(),
    )];
    for args in [
        &["config", "show"][..],
        &["--format", "json", "config", "show"][..],
    ] {
        let r = env.run(args).ok();
        assert!(!r.stdout.contains("hunter2"), "{}", r.stdout);
        assert!(r.stdout.contains("someone:***@127.0.0.1:1"), "{}", r.stdout);
    }
    // The config's storeUrl too.
    std::fs::write(
        env.home().join("config.json"),
        r#"{"store": "postgres", "storeUrl": "postgres://cfg:hunter3@127.0.0.1:1/x?connect_timeout=2"}"#,
    )
    .unwrap();
    let r = env
        .cmd()
        .env_remove("ACPX_STORE_URL")
        .args(["--verbose", "sessions", "list"])
        .output()
        .unwrap();
    let all = String::from_utf8_lossy(&r.stderr).into_owned() + &String::from_utf8_lossy(&r.stdout);
    assert!(!r.status.success());
    assert!(
        !all.contains("hunter3") && all.contains("cfg:***@"),
        "{all}"
    );
    for args in [
        &["sessions", "list"][..],
        &["--verbose", "--format", "json", "sessions", "list"][..],
    ] {
        let r = env.run(args);
        assert_ne!(r.code, 0);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(!all.contains("hunter2"), "{all}");
        assert!(all.contains("someone:***@127.0.0.1:1"), "{all}");
    }
    // Without a URL: a usage error that says where to put it.
    let env = Env::new("postgres");
    let out = env
        .cmd()
        .env_remove("ACPX_STORE_URL")
        .args(["sessions", "list"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("ACPX_STORE_URL"), "{stderr}");
}

#[test]
fn two_hosts_never_own_one_session_at_once() {
    let Some(url) = server_url() else { return };
    let schema = Schema::new(&url, "owners");
    let a = schema.host();
    let b = schema.host();
    let agent = a.agent_cmd("");
    let id = a.new_session(&agent);
    let project = a.cwd();
    // Host A's queue owner runs the turn and keeps the session while idle.
    let r = in_dir(&a, &project)
        .args(["--ttl", "4", "--format", "quiet", "--agent", &agent])
        .args(["echo", "owned-by-a"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    let a_status: Value = serde_json::from_slice(
        &in_dir(&a, &project)
            .args(["--format", "json", "--agent", &agent, "status"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let a_owner = a_status["pid"].as_u64().expect("A's owner runs");
    // Host B's prompt runs in A's owner, through the database; B starts no owner of its own.
    let r = in_dir(&b, &project)
        .args(["--format", "quiet", "--agent", &agent])
        .args(["echo", "from-b-in-a-owner"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(String::from_utf8_lossy(&r.stdout), "from-b-in-a-owner\n");
    let b_owners = b.home().join("run/acpx");
    let b_has_owner = std::fs::read_dir(&b_owners).is_ok_and(|d| {
        d.flatten()
            .any(|s| std::fs::read_dir(s.path().join("owners")).is_ok_and(|o| o.count() > 0))
    });
    assert!(!b_has_owner, "host B started an owner of its own");
    // Once A's owner has gone (idle TTL), B's next prompt starts the only owner.
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::process::alive(a_owner) {
        assert!(Instant::now() < deadline, "A's owner outlived its TTL");
        std::thread::sleep(Duration::from_millis(100));
    }
    let r = in_dir(&b, &project)
        .args(["--ttl", "1", "--format", "quiet", "--agent", &agent])
        .args(["echo", "now-on-b"])
        .output()
        .unwrap();
    assert!(r.status.success(), "{}", String::from_utf8_lossy(&r.stderr));
    assert_eq!(String::from_utf8_lossy(&r.stdout), "now-on-b\n");
    let log = events(&a, &id);
    let text = serde_json::to_string(&log).unwrap();
    assert!(
        text.contains("owned-by-a")
            && text.contains("from-b-in-a-owner")
            && text.contains("now-on-b")
    );
    let seqs: Vec<u64> = log.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    std::thread::sleep(Duration::from_secs(2));
}

/// Runs `statement` (with `$1` = `id`) on the server, as a person in `psql` would.
fn execute(url: &str, schema: &str, statement: &str, id: &str) {
    let (url, statement, id) = (url.to_owned(), statement.to_owned(), id.to_owned());
    let schema = schema.to_owned();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (c, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            c.batch_execute(&format!("SET search_path TO {schema}"))
                .await
                .unwrap();
            let changed = c.execute(&statement, &[&id]).await.unwrap();
            assert_eq!(changed, 1, "{statement}");
        });
    })
    .join()
    .unwrap();
}

/// A `document` made garbage (or cut short) by hand while the log is intact: `prompt` and
/// `sessions show` report the damaged snapshot, `sessions list` and `fsck` name it, and
/// `fsck --repair` rebuilds it from the log (`docs/format.md` § Damaged snapshots).
#[test]
fn a_damaged_document_is_found_reported_and_rebuilt_by_fsck_repair() {
    let Some(url) = server_url() else { return };
    for (how, damage) in [
        (
            "garbage",
            "UPDATE sessions SET document = 'garbage{' WHERE acpx_record_id = $1",
        ),
        (
            "truncated",
            "UPDATE sessions SET document = left(document, length(document) / 3) \
             WHERE acpx_record_id = $1",
        ),
    ] {
        let schema = Schema::new(&url, "damaged");
        let env = schema.host();
        let agent = env.agent_cmd("");
        // Stored sessions without a process (no owner holds them): what fsck reads.
        let id = env
            .run(&[
                "--no-owner",
                "--format",
                "json",
                "--agent",
                &agent,
                "sessions",
                "new",
            ])
            .ok()
            .json()["acpxRecordId"]
            .as_str()
            .unwrap()
            .to_owned();
        env.run(&[
            "--no-owner",
            "--format",
            "json",
            "--agent",
            &agent,
            "sessions",
            "new",
            "--name",
            "other",
        ])
        .ok();
        env.run(&["--no-owner", "--agent", &agent, "echo", "before", "damage"])
            .ok();
        let before = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        execute(&url, &schema.name, damage, &id);

        for args in [
            vec!["--no-owner", "--agent", &agent, "echo", "after"],
            vec!["--agent", &agent, "sessions", "show"],
        ] {
            let r = env.run(&args);
            assert_eq!(r.code, 1, "{how} {args:?}: {r:?}");
            assert!(
                r.stderr.contains(&id)
                    && r.stderr.contains("damaged snapshot")
                    && r.stderr.contains("fsck --repair"),
                "{how} {args:?}: {}",
                r.stderr
            );
        }
        let r = env.run(&["--agent", &agent, "sessions", "list"]);
        assert!(r.stderr.contains(&id), "{how}: {}", r.stderr);

        let r = env.run(&["--format", "json", "fsck"]);
        assert_eq!(r.code, 1, "{how}: {r:?}");
        let report = r.json();
        assert_eq!(report["sessions"], 2, "{how}: {report}");
        assert!(
            report["problems"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["acpxRecordId"] == id.as_str()
                    && p["kind"] == "snapshot_invalid"
                    && p["repairable"] == true),
            "{how}: {report}"
        );

        let r = env.run(&["--format", "json", "fsck", "--repair"]);
        assert_eq!(r.code, 0, "{how}: {r:?}");
        let after = env
            .run(&["--format", "json", "--agent", &agent, "sessions", "show"])
            .ok()
            .json();
        for key in ["acpxRecordId", "agentCommand", "cwd", "thread"] {
            assert_eq!(after[key], before[key], "{how}: {key}");
        }
        assert_eq!(
            after["acpx"]["audit_seq"], before["acpx"]["audit_seq"],
            "{how}"
        );
        let r = env.run(&["--format", "json", "fsck"]);
        assert_eq!(r.code, 0, "{how}: clean after the repair: {r:?}");
        let r = env
            .run(&[
                "--format",
                "quiet",
                "--no-owner",
                "--agent",
                &agent,
                "echo",
                "after",
            ])
            .ok();
        assert_eq!(r.stdout, "after\n", "{how}");
    }
}
