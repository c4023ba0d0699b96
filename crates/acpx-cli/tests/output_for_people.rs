//! Output for people: shell completions and the manual page come from the same grammar as
//! `--help`; terminal exits read as words; NO_COLOR and non-terminals get no escape codes.

mod common;

use common::{Env, BACKENDS};

#[test]
fn completions_and_man_page_follow_the_grammar() {
    let env = Env::new("fs");
    for shell in ["bash", "zsh", "fish"] {
        let r = env.run(&["completions", shell]).ok();
        for word in ["sessions", "json-strict", "permission-policy", "watch"] {
            assert!(r.stdout.contains(word), "{shell}: {word}");
        }
    }
    let bash = env.run(&["completions", "bash"]).ok().stdout;
    let script = env.home().join("acpx.bash");
    std::fs::write(&script, bash).unwrap();
    let check = std::process::Command::new("bash")
        .arg("-n")
        .arg(&script)
        .status()
        .unwrap();
    assert!(check.success(), "bash -n rejects the script");
    let r = env.run(&["completions", "tcsh"]);
    assert_eq!(r.code, 2, "{r:?}");

    let man = env.run(&["man"]).ok().stdout;
    assert!(man.contains(".TH acpx 1"), "{man}");
    assert!(man.contains("permission\\-policy"), "{man}");
    assert!(man.contains("Exit codes"), "{man}");
}

#[test]
fn terminal_exits_read_as_words_without_colour() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let r = env
            .run(&[
                "--agent",
                &agent,
                "--no-owner",
                "--approve-all",
                "terminal",
                "true",
            ])
            .ok();
        assert!(r.stderr.contains("exited with code 0"), "{}", r.stderr);
        assert!(!r.stderr.contains("Some("), "{}", r.stderr);
        assert!(
            !r.stderr.contains('\u{1b}'),
            "no escape codes: {}",
            r.stderr
        );
    }
}

/// An agent that sends a write's path, input and diff only in its permission request (as
/// qwen-code does): `prompt` shows them before the decision, and `sessions read` and the
/// Markdown export keep them, on every backend.
#[test]
fn a_permission_request_shows_and_keeps_what_the_call_changes() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let target = env.cwd().join("asked.txt").display().to_string();
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let r = env
            .run(&[
                "--agent",
                &agent,
                "--approve-all",
                "prompt",
                &format!("write-asked {target} hello there"),
            ])
            .ok();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello there");
        let asked = format!("[permission] Permission requested: Writing to {target}");
        let at = r
            .stderr
            .find(&asked)
            .unwrap_or_else(|| panic!("{}", r.stderr));
        let decided = r.stderr.find("[permission] Permission approved").unwrap();
        assert!(at < decided, "{}", r.stderr);
        assert!(
            r.stderr.contains(&format!("  at {target}\n")),
            "{}",
            r.stderr
        );
        assert!(
            r.stderr
                .contains(&format!("  edits {target} (-0 +1 lines)")),
            "{}",
            r.stderr
        );
        let read = env
            .run(&["--agent", &agent, "sessions", "history", "--full"])
            .ok();
        assert!(
            read.stdout.contains(&format!("  at: {target}")),
            "{}",
            read.stdout
        );
        assert!(read.stdout.contains("\"file_path\""), "{}", read.stdout);
        assert!(read.stdout.contains("+hello there"), "{}", read.stdout);
        let short = env.run(&["--agent", &agent, "sessions", "history"]).ok();
        assert!(
            short
                .stdout
                .contains(&format!("edited {target} (-0 +1 lines)")),
            "{}",
            short.stdout
        );
        let md = env
            .run(&["--agent", &agent, "sessions", "export", "--as", "markdown"])
            .ok();
        assert!(
            md.stdout.contains(&format!("Diff of `{target}`")),
            "{}",
            md.stdout
        );
        assert!(
            md.stdout.contains(&format!("At: `{target}`")),
            "{}",
            md.stdout
        );
    }
}
