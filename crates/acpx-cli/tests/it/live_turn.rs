//! A turn a person can follow (issue 46, item 4): on a terminal (a pty from `script -qec`) a
//! spinner on stderr says what happens and is cleared by the output; never on a pipe, never
//! with `--format json`; `-v` shows the agent's stderr through the queue owner too. Real
//! `acpx` processes and the scripted agent.

use crate::common;

use std::process::Command;

use common::{acpx_bin, test_agent, Env};

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs acpx with `args` under a pty; returns what the terminal showed.
fn on_a_terminal(env: &Env, args: &[&str]) -> String {
    let mut line = vec![
        quote(&acpx_bin().to_string_lossy()),
        "--home".into(),
        quote(&env.home().to_string_lossy()),
        "--store".into(),
        env.backend.into(),
    ];
    line.extend(args.iter().map(|a| quote(a)));
    let out = Command::new("script")
        .arg("-qec")
        .arg(line.join(" "))
        .arg("/dev/null")
        .current_dir(env.cwd())
        .env_remove("ACPX_HOME")
        .env_remove("ACPX_STORE")
        .env("NO_COLOR", "1")
        .output()
        .expect("script(1) runs");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The spinner's words for a turn of `slow 2` (a tool call, two chunks).
const SPUN: [&str; 2] = ["waiting for the first update…", "running Long task…"];

#[test]
fn the_spinner_shows_on_a_terminal_and_never_on_a_pipe_or_in_json() {
    let env = Env::new("fs");
    let agent = test_agent();
    env.run(&["--no-owner", "--agent", &agent, "sessions", "new"])
        .ok();
    for owner in [&["--no-owner"][..], &[][..]] {
        let mut args = owner.to_vec();
        args.extend(["--agent", &agent, "prompt", "slow 2"]);
        let screen = on_a_terminal(&env, &args);
        for words in SPUN {
            assert!(screen.contains(words), "{owner:?}: {words:?} in {screen:?}");
        }
        // Cleared (`\r` and erase-line) before the output that replaces it, and gone at
        // the end: the last thing on screen is the end-of-turn line.
        assert!(screen.contains("\r\x1b[2K[tool] Long task"), "{screen:?}");
        assert!(screen.trim_end().ends_with("[done] end_turn"), "{screen:?}");

        let piped = env.run(&args).ok();
        for text in [&piped.stdout, &piped.stderr] {
            assert!(!text.contains('…') && !text.contains("\x1b[2K"), "{text:?}");
        }
        let mut json = vec!["--format", "json"];
        json.extend(&args);
        let screen = on_a_terminal(&env, &json);
        assert!(!screen.contains("waiting for"), "{screen:?}");
    }
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}

#[test]
fn verbose_shows_the_agents_stderr_through_the_owner() {
    let env = Env::new("sqlite");
    let agent = test_agent();
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    let quiet = env
        .run(&["--agent", &agent, "prompt", "stderr said-on-stderr"])
        .ok();
    assert!(!quiet.stderr.contains("said-on-stderr"), "{}", quiet.stderr);
    let verbose = env
        .run(&["-v", "--agent", &agent, "prompt", "stderr said-on-stderr"])
        .ok();
    assert!(
        verbose
            .stderr
            .contains("acpx::agent_stderr: acpx-test-agent stderr: said-on-stderr"),
        "{}",
        verbose.stderr
    );
    assert_eq!(verbose.stdout.trim_end(), "said-on-stderr");
    env.run(&["--agent", &agent, "sessions", "close"]).ok();
}
