//! The READMEs' command lines work (issue 49, item 6): every `acpx …` line of a shell code
//! block in README.md and crates/acpx-cli/README.md parses (run with `--help` appended: clap
//! refuses an unknown option or command before it prints help), and the read-only ones run
//! against the built-in demo agent in a private home.

use crate::common;

use common::Env;

const READMES: [&str; 2] = ["../../README.md", "README.md"];

/// The `acpx …` lines of the fenced code blocks of `text` (a `$ ` prompt and a trailing
/// `# comment` dropped; lines continued with `\` joined).
fn command_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    let mut pending = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let mut l = line.trim().trim_start_matches("$ ").to_owned();
        if let Some(at) = l.find(" #") {
            l.truncate(at);
        }
        let joined = format!("{pending}{l}");
        if let Some(head) = joined.strip_suffix('\\') {
            pending = format!("{} ", head.trim_end());
            continue;
        }
        pending.clear();
        // The acpx part of a pipeline (`echo hi | acpx exec`).
        let cmd = joined
            .split(" | ")
            .find(|p| p.trim_start().starts_with("acpx "));
        if let Some(cmd) = cmd {
            out.push(cmd.trim().to_owned());
        }
    }
    out
}

/// Shell words: spaces split, single and double quotes group (enough for README lines).
fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in line.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            (None, c) => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Commands that only read, run for real against the demo agent.
const READ_ONLY: [&[&str]; 6] = [
    &["sessions", "list"],
    &["config", "show"],
    &["man"],
    &["completions"],
    &["status"],
    &["sessions", "usage"],
];

#[test]
fn every_readme_command_line_parses_and_the_read_only_ones_run() {
    let env = Env::new("fs");
    env.run(&["demo", "sessions", "new"]).ok();
    let mut checked = 0;
    for readme in READMES {
        let text = std::fs::read_to_string(readme).unwrap();
        for line in command_lines(&text) {
            let mut args = words(&line);
            assert_eq!(args.remove(0), "acpx");
            // `$AGENT` is any agent: the demo one. A synopsis with placeholders is not a command.
            let args: Vec<String> = args
                .into_iter()
                .map(|a| match a.as_str() {
                    "$AGENT" => "demo".into(),
                    _ => a,
                })
                .collect();
            if args
                .iter()
                .any(|a| a == "…" || a.starts_with('<') || a.starts_with('[') || a == "__owner")
            {
                continue;
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let mut help = refs.clone();
            help.push("--help");
            let r = env.run(&help);
            assert_eq!(r.code, 0, "{readme}: `{line}` does not parse: {}", r.stderr);
            checked += 1;
            let bare: Vec<&str> = refs
                .iter()
                .copied()
                .filter(|a| !a.starts_with('-'))
                .collect();
            if READ_ONLY.iter().any(|c| bare.starts_with(c)) && !refs.contains(&"postgres") {
                let mut with_demo = vec!["--agent", "demo"];
                with_demo.extend(
                    refs.iter()
                        .copied()
                        .filter(|a| *a != "claude" && *a != "codex"),
                );
                let mut demo: Vec<&str> = refs.clone();
                if !refs.contains(&"--agent") {
                    demo = with_demo;
                }
                let r = env.run(&demo);
                assert_eq!(r.code, 0, "{readme}: `{line}` fails: {r:?}");
            }
        }
    }
    assert!(checked > 20, "only {checked} command lines found");
}

#[test]
fn lines_and_words_are_read_as_a_shell_would() {
    let text = "x\n```sh\n$ acpx claude 'fix it'   # one turn\necho hi | acpx exec\nacpx --store fs \\\n  sessions list\n```\nacpx prose\n";
    assert_eq!(
        command_lines(text),
        [
            "acpx claude 'fix it'",
            "acpx exec",
            "acpx --store fs sessions list"
        ]
    );
    assert_eq!(
        words("acpx claude 'fix it' \"a b\" ''"),
        ["acpx", "claude", "fix it", "a b", ""]
    );
}
