//! Reading commands take a long session in pieces (docs/format.md decision 17, "Opening a long
//! session"): its turns before the last two are settled into spill files as the snapshot is
//! read, and read back a message at a time. What the commands show must be the stored
//! conversation, whole and in order, on every backend.

use crate::common;

use common::{Env, BACKENDS};
use serde_json::Value;

/// The snapshot as stored, read past acpx: the file, or the SQLite row.
fn stored(env: &Env, id: &str) -> Value {
    let bytes = if env.backend == "fs" {
        std::fs::read(env.home().join("sessions").join(format!("{id}.json"))).unwrap()
    } else {
        let db = rusqlite::Connection::open(env.home().join("acpx.db")).unwrap();
        db.query_row(
            "SELECT d.document FROM session_documents d JOIN session_rows r \
             ON r.session_key = d.session_key WHERE r.acpx_record_id = ?1",
            [id],
            |row| Ok(row.get_ref(0)?.as_bytes()?.to_vec()),
        )
        .unwrap()
    };
    serde_json::from_slice(&bytes).unwrap()
}

fn json(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(args);
    env.run(&all).ok().json()
}

/// Eight one-process turns, tool calls and echoed words in turn: six settle on each load.
fn long_session(env: &Env, agent: &str) -> String {
    let id = json(env, &["--agent", agent, "sessions", "new"])["acpxRecordId"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 0..8 {
        let word = format!("word{i}");
        let prompt: &[&str] = if i % 2 == 0 {
            &["tools", "300"]
        } else {
            &["echo", &word]
        };
        let mut args = vec!["--no-owner", "--format", "quiet", "--agent", agent];
        args.extend_from_slice(prompt);
        env.run(&args).ok();
    }
    id
}

#[test]
fn commands_show_a_long_session_whole() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let id = long_session(&env, &agent);
        let truth = stored(&env, &id);
        let messages = truth["thread"]["messages"].as_array().unwrap();
        // A turn of tool calls is three messages (the calls, then the answer), one of echo two.
        assert_eq!(messages.len(), 20, "{backend}");

        // The snapshot, through the settled runs and back.
        let exported: Value = serde_json::from_str(
            &env.run(&["sessions", "export", &id, "--as", "json"])
                .ok()
                .stdout,
        )
        .unwrap();
        assert_eq!(exported, truth, "{backend}");
        let archive = env.run(&["sessions", "export", &id]).ok().stdout;
        let head: Value = serde_json::from_str(archive.lines().next().unwrap()).unwrap();
        assert_eq!(head["session"], truth, "{backend}");

        let shown = json(&env, &["sessions", "show", &id]);
        assert_eq!(shown["thread"]["messageCount"], 20, "{backend}: {shown}");
        assert!(shown["thread"].get("messages").is_none(), "{backend}");

        let history = json(&env, &["sessions", "history", &id]);
        assert_eq!(
            history["messages"], truth["thread"]["messages"],
            "{backend}"
        );
        assert_eq!(history["messageCount"], 20, "{backend}");
        assert!(history.get("error").is_none(), "{backend}");
        let last = json(&env, &["sessions", "history", &id, "--limit", "3"]);
        assert_eq!(
            last["messages"].as_array().unwrap()[..],
            messages[17..],
            "{backend}"
        );

        let text = env.run(&["sessions", "history", &id]).ok().stdout;
        let markdown = env
            .run(&["sessions", "export", &id, "--as", "markdown"])
            .ok()
            .stdout;
        for word in ["word1", "word3", "word5", "word7"] {
            assert_eq!(text.matches(word).count(), 2, "{backend}: {word}: {text}");
            assert!(markdown.contains(word), "{backend}: {word}");
        }
        let tail = env
            .run(&["sessions", "history", &id, "--limit", "2"])
            .ok()
            .stdout;
        assert!(
            tail.starts_with("… 18 earlier messages not shown"),
            "{tail}"
        );
        assert!(tail.contains("word7") && !tail.contains("word5"), "{tail}");

        // A one-process turn after reads that settled it keeps it whole.
        env.run(&[
            "--no-owner",
            "--format",
            "quiet",
            "--agent",
            &agent,
            "echo",
            "ninth",
        ])
        .ok();
        let after = stored(&env, &id);
        let all = after["thread"]["messages"].as_array().unwrap();
        assert_eq!(all.len(), 22, "{backend}");
        assert_eq!(all[..20], messages[..], "{backend}");

        // So does a fork, into a new session.
        let fork = json(&env, &["--agent", &agent, "sessions", "fork", &id]);
        let child = fork["acpxRecordId"].as_str().unwrap();
        let forked = stored(&env, child);
        assert_eq!(
            forked["thread"]["messages"], after["thread"]["messages"],
            "{backend}"
        );

        // `sessions close` reads the session settling and writes it back whole, closed.
        let closed = json(&env, &["sessions", "close", &id]);
        assert_eq!(closed["acpxRecordId"], id.as_str(), "{backend}: {closed}");
        let stored_closed = stored(&env, &id);
        assert_eq!(stored_closed["closed"], true, "{backend}");
        assert_eq!(
            stored_closed["thread"], after["thread"],
            "{backend}: the conversation is kept whole"
        );
        // A follower of the closed session's log delivers it and stops.
        let events = env
            .run(&["sessions", "events", &id, "--follow"])
            .ok()
            .stdout;
        assert!(events.lines().count() > 20, "{backend}: {events}");

        let r = env.run(&["fsck"]);
        assert_eq!(r.code, 0, "{backend}: {} {}", r.stdout, r.stderr);
    }
}
