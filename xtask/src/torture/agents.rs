//! Misbehaving agents: one that crashes mid-turn (the scripted agent's `die`), one that never
//! answers `initialize`, one that exits at once, one that writes non-JSON lines on stdout
//! before speaking ACP, one that writes only garbage, and one that stalls mid-turn past
//! `--timeout`. Each is run through `sessions new` and `prompt`, with the queue owner and
//! with `--no-owner`: acpx must end (no hang), never panic, fail with a message when the agent
//! failed, and record a turn it started to its end.

use std::time::Duration;

use serde_json::Value;

use super::harness::{first_line, Env, Figures};
use super::Plan;

/// One misbehaving agent. The session is created with the scripted agent; then, for the
/// prompt, `bad` (a shell snippet) runs in its place when it is set, so that the session
/// exists and it is the prompt that meets the misbehaviour.
struct Agent {
    name: &'static str,
    bad: Option<&'static str>,
    prompt: &'static str,
    may_succeed: bool,
}

const AGENTS: &[Agent] = &[
    Agent {
        name: "crash mid-turn (die)",
        bad: None,
        prompt: "die",
        may_succeed: false,
    },
    Agent {
        name: "never answers initialize",
        bad: Some("exec sleep 1000"),
        prompt: "echo hi",
        may_succeed: false,
    },
    Agent {
        name: "exits at once (code 3)",
        bad: Some("exit 3"),
        prompt: "echo hi",
        may_succeed: false,
    },
    Agent {
        name: "non-JSON on stdout, then ACP",
        bad: Some("echo this is not json; echo {}"),
        prompt: "echo hi",
        may_succeed: true,
    },
    Agent {
        name: "garbage only",
        bad: Some(
            "echo garbage; echo \"{\\\"jsonrpc\\\":\\\"2.0\\\",\\\"id\\\":0,\\\"result\\\":42}\"; exec sleep 1000",
        ),
        prompt: "echo hi",
        may_succeed: false,
    },
    Agent {
        name: "stalls mid-turn past --timeout",
        bad: None,
        prompt: "slow 400",
        may_succeed: false,
    },
];

pub fn misbehaving(plan: &Plan, store: &str) -> Figures {
    let mut f = Figures::new("misbehaving agents", store);
    if plan.quick && plan.stores.first().map(String::as_str) != Some(store) {
        // The agent side does not depend on the store: a quick run tries it on one store.
        f.not_run = Some("quick run: misbehaving agents run on the first store only".into());
        return f;
    }
    for agent in AGENTS {
        for no_owner in [false, true] {
            let env = match Env::new(&plan.acpx, store) {
                Ok(e) => e,
                Err(e) => {
                    f.not_run = Some(e);
                    return f;
                }
            };
            let flag = env.home.with_file_name("misbehave");
            let command = format!(
                "sh -c 'if [ -e {} ]; then {}; fi; exec {} __test-agent'",
                flag.display(),
                agent.bad.unwrap_or("true"),
                plan.acpx.display()
            );
            let label = format!(
                "{} ({})",
                agent.name,
                if no_owner { "--no-owner" } else { "owner" }
            );
            let limit = Duration::from_secs(if plan.quick { 20 } else { 90 });
            // Made in this process (no owner keeps the well-behaved agent warm): the prompt
            // below starts the agent again, which then misbehaves.
            let new = env.run(
                &[
                    "--agent",
                    &command,
                    "--timeout",
                    "5",
                    "--no-owner",
                    "sessions",
                    "ensure",
                ],
                limit,
            );
            f.tried += 1;
            f.check_panic(&format!("{label}: sessions ensure"), &new);
            if agent.bad.is_some() {
                if let Err(e) = std::fs::write(&flag, b"") {
                    f.not_run = Some(format!("{}: {e}", flag.display()));
                    return f;
                }
            }
            let mut args = vec!["--agent", &command, "--timeout", "5", "--ttl", "2"];
            args.extend(["--format", "json"]);
            if no_owner {
                args.push("--no-owner");
            }
            args.extend(["prompt", agent.prompt]);
            let run = env.run(&args, limit);
            f.tried += 1;
            f.check_panic(&format!("{label}: prompt"), &run);
            if new.timed_out || run.timed_out {
                f.failures += 1;
                f.note(format!("{label}: hung for {} s", limit.as_secs()));
            }
            if run.code == Some(0) && !agent.may_succeed {
                f.failures += 1;
                f.note(format!("{label}: prompt exited 0"));
            }
            if !run.timed_out && run.code != Some(0) && !run.explained() {
                f.failures += 1;
                f.note(format!("{label}: exit {:?} without a message", run.code));
            }
            let started: Vec<Value> = run
                .json_lines()
                .into_iter()
                .map(|(_, v)| v)
                .filter(|v| v["type"] == "prompt_started")
                .collect();
            if let Some(start) = started.first() {
                ended_in_log(&env, start, &label, &mut f);
            }
            let said = if run.code == Some(0) {
                "ok".to_owned()
            } else {
                let msg = run
                    .json_lines()
                    .into_iter()
                    .rev()
                    .find_map(|(_, v)| v["error"]["message"].as_str().map(str::to_owned))
                    .unwrap_or_else(|| first_line(&run.stderr));
                msg.chars().take(110).collect()
            };
            f.note(format!(
                "{label}: ensure exit {:?}, prompt exit {:?}: {said}",
                new.code, run.code
            ));
        }
    }
    f
}

/// A turn acpx printed as started must be in the log with its end (after the owner is done).
fn ended_in_log(env: &Env, start: &Value, label: &str, f: &mut Figures) {
    let (Some(id), Some(req)) = (start["acpxRecordId"].as_str(), start["requestId"].as_str())
    else {
        return;
    };
    let mut ended = false;
    for _ in 0..50 {
        let r = env.run(
            &[
                "--format",
                "json",
                "sessions",
                "events",
                id,
                "--request-id",
                req,
            ],
            Duration::from_secs(30),
        );
        ended = r
            .json_lines()
            .iter()
            .any(|(_, v)| matches!(v["type"].as_str(), Some("prompt_done" | "prompt_error")));
        if ended {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if !ended {
        f.lost += 1;
        f.note(format!(
            "{label}: turn {req} started but never recorded as ended"
        ));
    }
}
