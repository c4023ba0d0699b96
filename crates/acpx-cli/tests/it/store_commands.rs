//! End-to-end tests of the commands that only read or change the store, on both backends.
//! Sessions are brought in with `sessions import` of hand-made archives.

use crate::common;

use common::{Env, Seed, BACKENDS};
use serde_json::Value;

pub(crate) const AGENT: &str = "npx -y @agentclientprotocol/codex-acp@^1.1.5";

fn ids(v: &Value) -> Vec<String> {
    v["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["acpxRecordId"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn import_list_show_history_with_canonical_identity() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-aaaa-1111", &cwd, AGENT);
        seed.name = Some("api");
        let imported = env.import_archive(&seed.archive());
        assert_eq!(imported["action"], "session_imported");
        assert_eq!(imported["acpxRecordId"], "rec-aaaa-1111");
        assert_eq!(imported["acpxSessionId"], "acp-rec-aaaa-1111");
        assert!(imported.get("agentSessionId").is_none(), "{imported}");
        assert_eq!(imported["events"], 3);

        let list = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        assert_eq!(list["action"], "sessions_list");
        let s = &list["sessions"][0];
        assert_eq!(s["acpxRecordId"], "rec-aaaa-1111");
        assert_eq!(s["acpxSessionId"], "acp-rec-aaaa-1111");
        assert!(s.get("agentSessionId").is_none());
        assert!(s.get("acpSessionId").is_none());
        assert_eq!(s["name"], "api");
        assert_eq!(s["messageCount"], 2);
        // `sessions` alone lists too.
        assert_eq!(
            ids(&env.run(&["--format", "json", "sessions"]).ok().json()),
            ["rec-aaaa-1111"]
        );

        // show by id, by ACP id, by suffix, and by name (-s and positional).
        for args in [
            vec!["sessions", "show", "rec-aaaa-1111"],
            vec!["sessions", "show", "acp-rec-aaaa-1111"],
            vec!["sessions", "show", "1111"],
            vec!["sessions", "show", "-s", "api"],
            vec!["sessions", "show", "api"],
        ] {
            let mut a = vec!["--format", "json"];
            a.extend(args.iter());
            let show = env.run(&a).ok().json();
            assert_eq!(show["acpxRecordId"], "rec-aaaa-1111", "{args:?}");
            assert_eq!(show["acpxSessionId"], "acp-rec-aaaa-1111");
            assert!(show.get("agentSessionId").is_none());
            assert_eq!(show["thread"]["messageCount"], 2);
        }
        let text = env.run(&["sessions", "show", "api"]).ok().stdout;
        assert!(
            text.contains("record id:") && text.contains("rec-aaaa-1111"),
            "{text}"
        );

        let hist = env.run(&["sessions", "history", "api"]).ok().stdout;
        assert!(hist.contains("## user\nhello there"), "{hist}");
        assert!(hist.contains("## agent\ngeneral kenobi"), "{hist}");
        let hist = env
            .run(&[
                "--format", "json", "sessions", "history", "api", "--limit", "1",
            ])
            .ok()
            .json();
        assert_eq!(hist["messages"].as_array().unwrap().len(), 1);
        assert_eq!(
            hist["messages"][0]["Agent"]["content"][0]["Text"],
            "general kenobi"
        );
        assert_eq!(hist["messageCount"], 2);
    }
}

#[test]
fn agent_session_id_is_shown_when_known() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let seed = Seed::new("rec-native", &cwd, AGENT);
        let mut doc = seed.document();
        doc["agentSessionId"] = "native-42".into();
        let archive = format!(
            "{}\n",
            serde_json::json!({"schema": "acpx.export.v1", "session": doc})
        );
        env.import_archive(&archive);
        let show = env
            .run(&["--format", "json", "sessions", "show", "rec-native"])
            .ok()
            .json();
        assert_eq!(show["agentSessionId"], "native-42");
        let list = env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json();
        assert_eq!(list["sessions"][0]["agentSessionId"], "native-42");
    }
}

#[test]
fn list_filters_and_pages() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let other = tempfile::tempdir().unwrap();
        let other_cwd = std::fs::canonicalize(other.path())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        for i in 0..5 {
            let id = format!("rec-{i}");
            let t = format!("2026-01-0{}T00:00:00.000Z", i + 1);
            let mut s = Seed::new(
                &id,
                if i < 3 { &cwd } else { &other_cwd },
                if i == 4 { "other-agent" } else { AGENT },
            );
            s.last_used_at = &t;
            let closed = format!("2026-01-0{}T00:00:01.000Z", i + 1);
            if i == 1 {
                s.closed_at = Some(&closed);
            }
            if i == 2 {
                s.name = Some("named");
            }
            env.import_archive(&s.archive());
        }
        let all = ids(&env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json());
        assert_eq!(all, ["rec-4", "rec-3", "rec-2", "rec-1", "rec-0"]);
        let here = ids(&env
            .run(&["--format", "json", "sessions", "list", "--filter-cwd", "."])
            .ok()
            .json());
        assert_eq!(here, ["rec-2", "rec-1", "rec-0"]);
        let closed = ids(&env
            .run(&["--format", "json", "sessions", "list", "--closed"])
            .ok()
            .json());
        assert_eq!(closed, ["rec-1"]);
        let open = ids(&env
            .run(&["--format", "json", "sessions", "list", "--open"])
            .ok()
            .json());
        assert_eq!(open, ["rec-4", "rec-3", "rec-2", "rec-0"]);
        let named = ids(&env
            .run(&["--format", "json", "sessions", "list", "--name", "named"])
            .ok()
            .json());
        assert_eq!(named, ["rec-2"]);
        // A named agent filters by its command.
        let codex = ids(&env
            .run(&["--format", "json", "codex", "sessions", "list"])
            .ok()
            .json());
        assert_eq!(codex, ["rec-3", "rec-2", "rec-1", "rec-0"]);
        let raw = ids(&env
            .run(&[
                "--format",
                "json",
                "--agent",
                "other-agent",
                "sessions",
                "list",
            ])
            .ok()
            .json());
        assert_eq!(raw, ["rec-4"]);

        // Pages of 2 walk everything once.
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut args = vec!["--format", "json", "sessions", "list", "--limit", "2"];
            if let Some(c) = &cursor {
                args.push("--cursor");
                args.push(c);
            }
            let page = env.run(&args).ok().json();
            seen.extend(ids(&page));
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(c) => cursor = Some(c.to_owned()),
                None => break,
            }
        }
        assert_eq!(seen, all);

        // A bad cursor is a usage error, in JSON too.
        let bad = env.run(&[
            "--format", "json", "sessions", "list", "--cursor", "garbage!",
        ]);
        assert_eq!(bad.code, 2, "{bad:?}");
        let e = bad.json();
        assert_eq!(e["error"]["data"]["acpxCode"], "USAGE");
        assert!(e["error"]["message"].as_str().unwrap().contains("cursor"));
        let bad = env.run(&["sessions", "list", "--cursor", "garbage!"]);
        assert_eq!(bad.code, 2);
        assert!(bad.stderr.contains("invalid cursor"), "{}", bad.stderr);
        // A cursor made for other filters is refused.
        let page = env
            .run(&["--format", "json", "sessions", "list", "--limit", "1"])
            .ok()
            .json();
        let c = page["nextCursor"].as_str().unwrap();
        let foreign = env.run(&["sessions", "list", "--closed", "--cursor", c]);
        assert_eq!(foreign.code, 2, "{foreign:?}");
        // --limit 0 is rejected by the parser.
        assert_eq!(env.run(&["sessions", "list", "--limit", "0"]).code, 2);
    }
}

#[test]
fn ambiguous_and_unknown_ids() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        env.import_archive(&Seed::new("one-xyz", &cwd, AGENT).archive());
        env.import_archive(&Seed::new("two-xyz", &cwd, AGENT).archive());
        let r = env.run(&["sessions", "show", "xyz"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains("matches 2 sessions"), "{}", r.stderr);
        assert!(
            r.stderr.contains("one-xyz") && r.stderr.contains("two-xyz"),
            "the candidates are listed: {}",
            r.stderr
        );
        let r = env.run(&["--format", "json", "sessions", "show", "nope"]);
        assert_eq!(r.code, 4, "{r:?}");
        assert_eq!(r.json()["error"]["data"]["acpxCode"], "NO_SESSION");
        // A unique prefix works as a suffix does (issue 49: the beginning people copy).
        let r = env
            .run(&["--format", "json", "sessions", "show", "one-"])
            .ok()
            .json();
        assert_eq!(r["acpxRecordId"], "one-xyz", "{r}");
        let r = env
            .run(&["--format", "json", "sessions", "show", "acp-two"])
            .ok()
            .json();
        assert_eq!(r["acpxRecordId"], "two-xyz", "{r}");
        // The scope's session: none is unnamed in this agent's scope here? Both are unnamed:
        // the newest wins.
        let show = env
            .run(&["--format", "json", "sessions", "show"])
            .ok()
            .json();
        assert!(show["acpxRecordId"].as_str().unwrap().ends_with("-xyz"));
    }
}

#[test]
fn close_then_lookup_skips_it_and_delete_requires_closed() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        env.import_archive(&Seed::new("rec-close", &cwd, AGENT).archive());
        let del = env.run(&["sessions", "delete", "rec-close"]);
        assert_eq!(del.code, 2, "{del:?}");
        assert!(del.stderr.contains("is open"), "{}", del.stderr);
        // The hint's commands name the session by id: closed, it is not found by scope.
        assert!(
            del.stderr
                .contains("acpx sessions close rec-close && acpx sessions delete rec-close"),
            "{}",
            del.stderr
        );

        let closed = env
            .run(&["--format", "json", "sessions", "close", "rec-close"])
            .ok()
            .json();
        assert_eq!(closed["action"], "session_closed");
        assert_eq!(closed["acpxRecordId"], "rec-close");
        assert_eq!(closed["acpxSessionId"], "acp-rec-close");
        // Closing again is fine (idempotent).
        env.run(&["sessions", "close", "rec-close"]).ok();
        // Scope lookup skips closed sessions.
        let r = env.run(&["sessions", "show"]);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(r.stderr.contains("sessions new"), "{}", r.stderr);
        // By id it is still there.
        let show = env
            .run(&["--format", "json", "sessions", "show", "rec-close"])
            .ok()
            .json();
        assert_eq!(show["closed"], true);

        let del = env
            .run(&["--format", "json", "sessions", "delete", "rec-close"])
            .ok()
            .json();
        assert_eq!(del["action"], "session_deleted");
        assert_eq!(del["deleted"], true);
        assert_eq!(env.run(&["sessions", "show", "rec-close"]).code, 4);
    }
}

/// A named session is found by its name only while open; asked for by name once closed, the
/// error points at it by id.
#[test]
fn a_closed_named_session_is_pointed_at_by_id() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-named", &cwd, AGENT);
        seed.name = Some("review");
        env.import_archive(&seed.archive());
        let agent = ["--agent", AGENT];
        env.run(&[agent[0], agent[1], "sessions", "show", "-s", "review"])
            .ok();
        env.run(&["sessions", "close", "rec-named"]).ok();
        let r = env.run(&[agent[0], agent[1], "sessions", "show", "-s", "review"]);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(
            r.stderr
                .contains("a closed session is named \"review\": rec-named")
                && r.stderr.contains("acpx sessions show rec-named"),
            "{}",
            r.stderr
        );
        // Another name: the usual hint.
        let r = env.run(&[agent[0], agent[1], "sessions", "show", "-s", "other"]);
        assert_eq!(r.code, 4, "{r:?}");
        assert!(!r.stderr.contains("a closed session"), "{}", r.stderr);
    }
}

/// `sessions events` reads the log a page (5,000 events) at a time: every event once, in
/// order, and `--limit` across a page boundary.
#[test]
fn events_of_a_long_log_come_in_pages() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-long", &cwd, AGENT);
        seed.events = 12_345;
        seed.audit_seq = 12_345;
        env.import_archive(&seed.archive());
        let seqs = |r: &common::Run| {
            r.json_lines()
                .iter()
                .map(|e| e["seq"].as_u64().unwrap())
                .collect::<Vec<_>>()
        };
        let all = env
            .run(&["--format", "json", "sessions", "events", "rec-long"])
            .ok();
        assert_eq!(seqs(&all), (1..=12_345).collect::<Vec<_>>(), "{backend}");
        let limited = env
            .run(&[
                "sessions",
                "events",
                "rec-long",
                "--from-seq",
                "2",
                "--limit",
                "7000",
            ])
            .ok();
        assert_eq!(limited.stdout.lines().count(), 7_000, "{backend}");
        assert!(
            limited.stderr.contains("more: --from-seq 7002"),
            "{backend}: {}",
            limited.stderr
        );
    }
}

#[test]
fn events_filters_and_text() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut seed = Seed::new("rec-ev", &cwd, AGENT);
        seed.events = 6;
        seed.audit_seq = 6;
        env.import_archive(&seed.archive());
        let all = env
            .run(&["--format", "json", "sessions", "events", "rec-ev"])
            .ok()
            .json_lines();
        assert_eq!(all.len(), 6);
        // The same objects as the log.
        assert_eq!(all[0], seed.event(1));
        let from = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                "rec-ev",
                "--from-seq",
                "4",
            ])
            .ok()
            .json_lines();
        assert_eq!(
            from.iter()
                .map(|e| e["seq"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            [4, 5, 6]
        );
        let limited = env
            .run(&[
                "--format", "json", "sessions", "events", "rec-ev", "--limit", "2",
            ])
            .ok();
        assert_eq!(limited.json_lines().len(), 2);
        let none = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                "rec-ev",
                "--type",
                "prompt_done",
            ])
            .ok();
        assert!(none.stdout.is_empty());
        let typed = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                "rec-ev",
                "--type",
                "session_update",
                "--stream",
                "prompt",
                "--request-id",
                "req-1",
            ])
            .ok();
        assert_eq!(typed.json_lines().len(), 6);
        let other_req = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "events",
                "rec-ev",
                "--request-id",
                "req-2",
            ])
            .ok();
        assert!(other_req.stdout.is_empty());
        let text = env.run(&["sessions", "events", "rec-ev"]).ok().stdout;
        assert!(text.lines().next().unwrap().starts_with("#1 "), "{text}");
        assert!(text.contains("agent_message_chunk \"chunk 1\""), "{text}");
    }
}

/// Names and paths an archive (or an agent) chose are shown with their control characters
/// escaped: an escape sequence in a name must not reach the terminal. New names with them
/// are refused.
#[test]
fn control_characters_in_names_never_reach_the_terminal() {
    let env = Env::new("fs");
    let cwd = env.cwd_str();
    let mut seed = Seed::new("rec-esc", &cwd, AGENT);
    seed.name = Some("evil\u{1b}[2Jname");
    env.import_archive(&seed.archive());
    for args in [
        &["sessions", "list"][..],
        &["sessions", "show", "rec-esc"][..],
    ] {
        let out = env.run(args).ok().stdout;
        assert!(!out.contains('\u{1b}'), "{args:?}: {out:?}");
        assert!(out.contains("evil\\u{1b}[2Jname"), "{args:?}: {out}");
    }
    let r = env.run(&[
        "--agent",
        AGENT,
        "sessions",
        "new",
        "--name",
        "a\u{1b}[31mb",
    ]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("control characters"), "{}", r.stderr);
}

#[test]
fn prune_closed_sessions_older_than_cutoff() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        for (id, closed) in [
            ("old-1", Some("2020-01-01T00:00:00.000Z")),
            ("old-2", Some("2020-02-01T00:00:00.000Z")),
            ("new-1", Some("2099-01-01T00:00:00.000Z")),
            ("open-1", None),
        ] {
            let mut s = Seed::new(id, &cwd, AGENT);
            s.closed_at = closed;
            env.import_archive(&s.archive());
        }
        let dry = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "prune",
                "--before",
                "2021-01-01",
                "--dry-run",
            ])
            .ok()
            .json();
        assert_eq!(dry["dryRun"], true);
        assert_eq!(dry["count"], 2);
        assert_eq!(
            ids(&env
                .run(&["--format", "json", "sessions", "list"])
                .ok()
                .json())
            .len(),
            4
        );

        let pruned = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "prune",
                "--before",
                "2021-01-01",
            ])
            .ok()
            .json();
        assert_eq!(pruned["count"], 2);
        let kept = pruned["sessions"][0]["keptLog"]
            .as_str()
            .unwrap()
            .to_owned();
        let log = std::fs::read_to_string(&kept).unwrap();
        assert_eq!(log.lines().count(), 3, "the log is kept in <home>/pruned");
        let left = ids(&env
            .run(&["--format", "json", "sessions", "list"])
            .ok()
            .json());
        assert_eq!(left.len(), 2);
        assert!(left.contains(&"new-1".to_owned()) && left.contains(&"open-1".to_owned()));

        // --older-than in days, with --include-history: nothing kept.
        let mut s = Seed::new("old-3", &cwd, AGENT);
        s.closed_at = Some("2020-03-01T00:00:00.000Z");
        env.import_archive(&s.archive());
        let pruned = env
            .run(&[
                "--format",
                "json",
                "sessions",
                "prune",
                "--older-than",
                "30",
                "--include-history",
            ])
            .ok()
            .json();
        assert_eq!(pruned["count"], 1);
        assert!(pruned["sessions"][0].get("keptLog").is_none());
        assert!(!env.home().join("pruned/old-3.events.ndjson").exists());
        assert_eq!(
            env.run(&["sessions", "prune", "--before", "yesterday"])
                .code,
            2
        );
    }
}

#[test]
fn search_finds_messages() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut a = Seed::new("rec-s1", &cwd, AGENT);
        a.turns = vec![("please refactor the parser", "done refactoring")];
        env.import_archive(&a.archive());
        let mut b = Seed::new("rec-s2", &cwd, AGENT);
        b.turns = vec![("write docs", "docs written")];
        env.import_archive(&b.archive());
        let r = env
            .run(&["--format", "json", "sessions", "search", "REFACTOR"])
            .ok()
            .json();
        let hits = r["hits"].as_array().unwrap();
        assert_eq!(hits.len(), 2, "{r}");
        assert!(hits.iter().all(|h| h["acpxRecordId"] == "rec-s1"));
        assert!(hits[0]["snippet"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("refactor"));
        let text = env
            .run(&["sessions", "search", "docs", "written"])
            .ok()
            .stdout;
        assert!(
            text.contains("rec-s2") && !text.contains("rec-s1"),
            "{text}"
        );
        let none = env.run(&["sessions", "search", "zebra"]).ok();
        assert!(none.stdout.is_empty());
    }
}

#[test]
fn quiet_format_prints_only_ids() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        env.import_archive(&Seed::new("rec-q", &cwd, AGENT).archive());
        let r = env.run(&["--format", "quiet", "sessions", "list"]).ok();
        assert_eq!(r.stdout, "rec-q\n");
        assert!(r.stderr.is_empty());
    }
}

/// An empty list says when the home holds sessions of the other local backend; an other
/// store that exists but is empty is not mentioned.
#[test]
fn an_empty_list_names_the_other_store_that_has_sessions() {
    for (backend, other) in [("fs", "sqlite"), ("sqlite", "fs")] {
        let env = Env::new(backend);
        let r = env.run(&["--store", other, "sessions", "list"]).ok();
        assert!(r.stderr.contains("no sessions"), "{}", r.stderr);
        let r = env.run(&["sessions", "list"]).ok();
        assert!(
            !r.stderr.contains("also has"),
            "an empty {other} store: {}",
            r.stderr
        );
        let cwd = env.cwd_str();
        let archive = Seed::new("rec-other", &cwd, AGENT).archive();
        let file = env.home().join("other.ndjson");
        std::fs::write(&file, archive).unwrap();
        env.run(&[
            "--store",
            other,
            "sessions",
            "import",
            file.to_str().unwrap(),
        ])
        .ok();
        let r = env.run(&["sessions", "list"]).ok();
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        assert!(
            r.stderr
                .contains(&format!("also has sessions in the {other} store"))
                && r.stderr.contains(&format!("--store {other} sessions list")),
            "{}",
            r.stderr
        );
    }
}

/// A word that names a session in scope designates it, even when it is also the suffix of
/// another session's id: `sessions show a` must not pick a record id that happens to end in
/// `a`. A word that names nothing still resolves as a unique suffix.
#[test]
fn a_session_name_wins_over_an_id_suffix() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let cwd = env.cwd_str();
        let mut named = Seed::new("rec-named-session", &cwd, AGENT);
        named.name = Some("a");
        env.import_archive(&named.archive());
        env.import_archive(&Seed::new("other-ends-in-a", &cwd, AGENT).archive());
        let show = |word: &str| {
            env.run(&[
                "--format", "json", "--agent", AGENT, "sessions", "show", word,
            ])
            .ok()
            .json()["acpxRecordId"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(show("a"), "rec-named-session");
        assert_eq!(show("ends-in-a"), "other-ends-in-a");
    }
}
