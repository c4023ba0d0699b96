//! `sessions read` (the readable transcript) and `sessions watch` (replay, then follow across
//! processes until the session closes), on both stores.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{Env, BACKENDS};
use serde_json::Value;

#[test]
fn read_shows_the_whole_conversation_and_tail_the_last_messages() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        for word in ["one", "two", "three"] {
            env.run(&["--agent", &agent, "echo", word]).ok();
        }
        env.run(&["--agent", &agent, "tools"]).ok();
        let r = env.run(&["--agent", &agent, "sessions", "read"]).ok();
        for word in ["echo one", "echo two", "echo three", "Read README.md"] {
            assert!(r.stdout.contains(word), "{backend}: {word}: {}", r.stdout);
        }
        let r = env
            .run(&["--agent", &agent, "sessions", "read", "--tail", "2"])
            .ok();
        assert!(!r.stdout.contains("echo one"), "{}", r.stdout);
        assert!(r.stdout.contains("Read README.md"), "{}", r.stdout);
        let r = env
            .run(&[
                "--format", "json", "--agent", &agent, "sessions", "read", "--tail", "2",
            ])
            .ok();
        assert_eq!(r.json()["messages"].as_array().unwrap().len(), 2);
    }
}

#[test]
fn watch_replays_then_follows_other_processes_until_the_session_closes() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        env.run(&["--agent", &agent, "echo", "before"]).ok();

        let mut watcher = env
            .cmd()
            .args(["--format", "json", "--agent", &agent, "sessions", "watch"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
        let reader = {
            let lines = lines.clone();
            let stdout = watcher.stdout.take().unwrap();
            std::thread::spawn(move || {
                for l in BufReader::new(stdout).lines() {
                    let v: Value = serde_json::from_str(&l.unwrap()).unwrap();
                    lines.lock().unwrap().push(v);
                }
            })
        };
        let texts = |lines: &[Value]| -> Vec<String> {
            lines
                .iter()
                .filter(|e| e["type"] == "prompt_started")
                .map(|e| {
                    e["payload"]["messagePreview"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        };
        let wait = |what: &str, f: &dyn Fn(&[Value]) -> bool| {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !f(&lines.lock().unwrap()) {
                assert!(Instant::now() < deadline, "timed out waiting for {what}");
                std::thread::sleep(Duration::from_millis(50));
            }
        };
        // The replay has the earlier turn.
        wait("the replay", &|l| {
            l.iter().any(|e| e["type"] == "prompt_done")
        });
        // Another process prompts: the watcher sees it as it is recorded.
        env.run(&["--agent", &agent, "echo", "after"]).ok();
        wait("the new turn", &|l| {
            l.iter().filter(|e| e["type"] == "prompt_done").count() >= 2
        });
        assert!(watcher.try_wait().unwrap().is_none(), "still watching");
        // Closing the session ends the watch (exit 0).
        env.run(&["--agent", &agent, "sessions", "close"]).ok();
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = watcher.try_wait().unwrap() {
                break s;
            }
            assert!(Instant::now() < deadline, "watch did not stop");
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.code(), Some(0), "{backend}");
        reader.join().unwrap();
        let lines = lines.lock().unwrap();
        let seqs: Vec<u64> = lines.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "each event once, in order: {seqs:?}"
        );
        assert_eq!(seqs.first(), Some(&1));
        let t = texts(&lines);
        assert_eq!(t.len(), 2, "{t:?}");
    }
}

/// `sessions events` finds its session by its summary, not by loading it. A SQLite row whose
/// summary columns were edited by hand (so that they disagree with its document) is refused
/// as a summary, but still loads: the command finds it as `sessions show` does and prints
/// its log, rather than calling a readable session damaged.
#[test]
fn events_find_a_session_whose_summary_columns_disagree_with_its_document() {
    let env = Env::new("sqlite");
    let agent = env.agent_cmd("");
    let id = env.new_session(&agent);
    env.run(&["--no-owner", "--agent", &agent, "echo", "one"])
        .ok();
    let db = rusqlite::Connection::open(env.home().join("acpx.db")).unwrap();
    let changed = db
        .execute(
            "UPDATE session_rows SET title = 'edited by hand', document_checked = 0 \
             WHERE acpx_record_id = ?1",
            [id.as_str()],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);

    env.run(&["--agent", &agent, "sessions", "show", &id]).ok();
    let r = env
        .run(&[
            "--format", "json", "--agent", &agent, "sessions", "events", &id, "--limit", "2",
        ])
        .ok();
    let events = r.json_lines();
    assert_eq!(events.len(), 2, "{r:?}");
    assert_eq!(events[0]["seq"], 1, "{r:?}");
    // By a suffix of its id, the session is designated through the list, which leaves the
    // row out until `fsck --repair`: the error names it, as `sessions show` does.
    let suffix = &id[id.len() - 8..];
    for command in ["events", "show"] {
        let r = env.run(&["--agent", &agent, "sessions", command, suffix]);
        assert_eq!(r.code, 1, "{command}: {r:?}");
        assert!(
            r.stderr.contains(&id) && r.stderr.contains("thread.title"),
            "{command}: {r:?}"
        );
    }
}
