//! `sessions usage`, `status` and the end-of-turn line sum what the agents reported (issue 46,
//! item 3): real `acpx` processes, the scripted agent's `usage [AMOUNT [CURRENCY]]` (a
//! `usage_update` with the session's cost, and the turn's token usage on the prompt
//! response), on every store (PostgreSQL when `ACPX_TEST_POSTGRES_URL` is set).

use crate::common;

use common::postgres::{server_url, Schema};
use common::{test_agent, Env, BACKENDS};
use serde_json::Value;

/// Three sessions: `paid` reports 100 in / 50 out tokens a turn over two turns and a
/// cost of 0.50 EUR at the end (ACP's cost is the session's running total), `dollars` one
/// turn and 1.50 USD, `silent` reports nothing. Returns their record ids in that order.
fn seed(env: &Env) -> [String; 3] {
    let agent = test_agent();
    let mut ids = Vec::new();
    for (name, prompts) in [
        ("paid", &["usage 0.25 EUR", "usage 0.5 EUR"][..]),
        ("dollars", &["usage 1.5 USD"][..]),
        ("silent", &["echo hi"][..]),
    ] {
        let created = env
            .run(&[
                "--format",
                "json",
                "--no-owner",
                "--agent",
                &agent,
                "sessions",
                "new",
                "--name",
                name,
            ])
            .ok()
            .json();
        ids.push(created["acpxRecordId"].as_str().unwrap().to_owned());
        for p in prompts {
            env.run(&["--no-owner", "--agent", &agent, "-s", name, "prompt", p])
                .ok();
        }
    }
    ids.try_into().unwrap()
}

fn report(env: &Env, args: &[&str]) -> Value {
    let mut all = vec!["--format", "json", "sessions", "usage"];
    all.extend_from_slice(args);
    let out = env.run(&all).ok().json();
    assert_eq!(out["action"], "sessions_usage", "{out}");
    out["report"].clone()
}

fn row<'a>(report: &'a Value, key: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no row {key} in {report}"))
}

fn sums_on(env: &Env) {
    let [paid, dollars, silent] = seed(env);
    let all = report(env, &[]);
    let totals = &all["totals"];
    assert_eq!(totals["sessions"], 3, "{all}");
    assert_eq!(totals["reportedSessions"], 2);
    assert_eq!(totals["inputTokens"], 300);
    assert_eq!(totals["outputTokens"], 150);
    assert_eq!(totals["cacheReadTokens"], 60);
    assert_eq!(totals["cacheWriteTokens"], 15);
    assert_eq!(totals["thoughtTokens"], 21);
    assert_eq!(
        totals["totalTokens"], 450,
        "the agent's own totals, 150 a turn"
    );
    assert_eq!(
        totals["cost"],
        serde_json::json!({"EUR": 0.5, "USD": 1.5}),
        "per currency, never added across"
    );
    assert_eq!(row(&all, &paid)["inputTokens"], 200);
    assert_eq!(row(&all, &paid)["label"], "paid");
    assert_eq!(row(&all, &paid)["context"]["size"], 200000);
    assert_eq!(row(&all, &dollars)["cost"]["USD"], 1.5);
    // Never null: the silent session is there, zero, and says it reported nothing.
    let quiet = row(&all, &silent);
    assert_eq!(quiet["reported"], false, "{quiet}");
    assert_eq!(quiet["totalTokens"], 0);
    assert_eq!(quiet["cost"], serde_json::json!({}));

    let by_agent = report(env, &["--by", "agent"]);
    assert_eq!(by_agent["rows"].as_array().unwrap().len(), 1, "{by_agent}");
    assert_eq!(by_agent["rows"][0]["sessions"], 3);
    let by_day = report(env, &["--by", "day"]);
    assert_eq!(by_day["rows"][0]["totalTokens"], 450, "{by_day}");
    let today = by_day["rows"][0]["key"].as_str().unwrap().to_owned();
    let none = report(env, &["--since", "2999-01-01"]);
    assert!(none["rows"].as_array().unwrap().is_empty(), "{none}");
    let compact = today.replace('-', "");
    let same = report(env, &["--since", &compact, "--until", &today]);
    assert_eq!(same["totals"]["sessions"], 3, "{same}");
    let one = report(env, &[&dollars]);
    assert_eq!(one["totals"]["sessions"], 1);
    assert_eq!(one["totals"]["cost"]["USD"], 1.5);

    // The table: a header, aligned columns, — for nothing reported, a Total row.
    let text = env.run(&["sessions", "usage"]).ok().stdout;
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("SESSION") && lines[0].contains("TOTAL TOKENS"),
        "{text}"
    );
    let total = lines.last().unwrap();
    assert!(total.starts_with("Total (3 sessions)"), "{text}");
    assert!(
        total.contains("450") && total.contains("0.50 EUR + 1.50 USD"),
        "{text}"
    );
    let silent_line = lines.iter().find(|l| l.contains("(silent)")).unwrap();
    assert!(silent_line.contains('—'), "{text}");
    let end = |l: &str| l.find("TOTAL TOKENS").map(|i| i + "TOTAL TOKENS".len());
    let header_end = end(lines[0]).unwrap();
    let paid_line = lines.iter().find(|l| l.contains("(paid)")).unwrap();
    assert_eq!(
        &paid_line[..header_end].trim_end().len(),
        &header_end,
        "numbers end under their header: {text}"
    );

    // `status` shows the session's tokens, cost and context use.
    let agent = test_agent();
    let status = env
        .run(&["--no-owner", "--agent", &agent, "-s", "paid", "status"])
        .ok()
        .stdout;
    assert!(status.contains("tokens:           300"), "{status}");
    assert!(status.contains("cost:             0.50 EUR"), "{status}");
    assert!(status.contains("1,200 / 200,000 tokens"), "{status}");
    let json = env
        .run(&[
            "--format", "json", "--agent", &agent, "-s", "silent", "status",
        ])
        .ok()
        .json();
    assert_eq!(json["usage"]["reported"], false, "{json}");
    assert_eq!(json["usage"]["totalTokens"], 0);
}

#[test]
fn usage_sums_what_the_agents_reported_on_fs_and_sqlite() {
    for backend in BACKENDS {
        sums_on(&Env::new(backend));
    }
}

#[test]
fn usage_sums_what_the_agents_reported_on_postgres() {
    let Some(url) = server_url() else {
        return;
    };
    let schema = Schema::new(&url, "usage");
    sums_on(&schema.host());
}

#[test]
fn the_end_of_turn_line_has_the_turns_tokens_and_cost() {
    let env = Env::new("fs");
    let agent = test_agent();
    env.run(&["--no-owner", "--agent", &agent, "sessions", "new"])
        .ok();
    let r = env
        .run(&["--no-owner", "--agent", &agent, "prompt", "usage 0.25 EUR"])
        .ok();
    assert!(
        r.stderr
            .contains("[done] end_turn · 150 tokens (in 100, out 50) · session cost 0.25 EUR"),
        "{}",
        r.stderr
    );
    let r = env
        .run(&["--no-owner", "--agent", &agent, "prompt", "echo plain"])
        .ok();
    assert!(
        r.stderr.lines().any(|l| l == "[done] end_turn"),
        "nothing added when nothing was reported: {}",
        r.stderr
    );
}
