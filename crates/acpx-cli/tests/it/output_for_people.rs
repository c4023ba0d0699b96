//! Output for people: shell completions and the manual page come from the same grammar as
//! `--help`; terminal exits read as words; NO_COLOR and non-terminals get no escape codes.

use crate::common;

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

/// The pids of `acpx` processes whose command line names `needle` (the test's own home).
fn acpx_pids_naming(needle: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let first = cmd.split(|b| *b == 0).next().unwrap_or_default();
        let is_acpx = first == common::acpx_bin().to_string_lossy().as_bytes();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if is_acpx && cmd.contains(needle) && cmd.contains(" slow ") {
            pids.push(pid);
        }
    }
    pids
}

/// A Ctrl-C while the reply streams (issue 51): on a terminal, the reply line is ended once,
/// the cancel notice follows, then the cancelled tool call, with no blank line in between;
/// through the queue owner and in one process.
/// What a terminal shows of `raw`: a carriage return goes back to the line's start, and
/// erase-line (`ESC [2K`) empties it, as the spinner's redraws do (crate::spinner); so the
/// spinner's frames, each cleared before the next output, leave nothing.
fn on_screen(raw: &str) -> String {
    let mut out = String::new();
    let mut line = String::new();
    let mut rest = raw;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("\x1b[2K") {
            line.clear();
            rest = after;
            continue;
        }
        match c {
            '\r' => {}
            '\n' => {
                out.push_str(&line);
                out.push('\n');
                line.clear();
            }
            c => line.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    out + &line
}

#[test]
fn a_cancel_leaves_no_blank_line_on_the_terminal() {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    for no_owner in [false, true] {
        let env = Env::new("fs");
        let agent = env.agent_cmd("");
        env.run(&["--agent", &agent, "sessions", "new"]).ok();
        let home = env.home().to_string_lossy().into_owned();
        let mut line = vec![
            quote(&common::acpx_bin().to_string_lossy()),
            "--home".into(),
            quote(&home),
            "--agent".into(),
            quote(&agent),
        ];
        if no_owner {
            line.push("--no-owner".into());
        }
        line.extend(["slow", "100"].map(String::from));
        let child = std::process::Command::new("script")
            .arg("-qec")
            .arg(line.join(" "))
            .arg("/dev/null")
            .current_dir(env.cwd())
            .env("NO_COLOR", "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("script(1) runs");
        // Once it streams (a second of chunks), interrupt the acpx client itself.
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let pids = acpx_pids_naming(&home);
        assert!(!pids.is_empty(), "the client runs");
        for pid in pids {
            // SAFETY: kill(2) on the acpx client this test started.
            unsafe {
                libc::kill(pid, libc::SIGINT);
            }
        }
        let out = child.wait_with_output().unwrap();
        let shown = on_screen(&String::from_utf8_lossy(&out.stdout));
        let at = shown
            .find("[acpx] cancelling the turn")
            .unwrap_or_else(|| panic!("{shown}"));
        let after = &shown[at..];
        assert!(
            !after.contains("\n\n"),
            "no blank line after the cancel: {shown:?}"
        );
        assert!(
            after.contains("\n[tool] Long task (failed)"),
            "the cancelled call follows: {shown:?}"
        );
        // The reply line before the notice was ended once, not twice.
        assert!(!shown[..at].ends_with("\n\n"), "{shown:?}");
        assert!(shown[..at].contains("chunk 1."), "{shown:?}");
    }
}

/// Messages name what the user gave (issue 51): the agent as typed (not the flag), and a
/// lookup with no agent named does not bring one in.
#[test]
fn messages_name_the_agent_as_given_and_only_what_was_typed() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    let r = env
        .run(&["--no-owner", "--agent", &agent, "sessions", "new"])
        .ok();
    assert!(r.stdout.contains(&format!("for agent `{agent}`")), "{r:?}");
    assert!(!r.stdout.contains("--agent"), "{r:?}");
    let r = env.run(&["sessions", "show", "3504299c"]);
    assert_eq!(r.code, 4, "{r:?}");
    assert!(r.stderr.contains("\"3504299c\""), "{r:?}");
    assert!(!r.stderr.contains("of agent"), "no agent was named: {r:?}");
    let r = env.run(&["--agent", &agent, "sessions", "show", "3504299c"]);
    assert!(r.stderr.contains(&format!("of agent `{agent}`")), "{r:?}");
}
