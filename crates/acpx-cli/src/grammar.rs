//! Telling the positional `<agent>` apart from a command and from prompt text.
//!
//! `acpx [global options] [<agent>] [command] [args]`. clap cannot express an optional
//! positional before a subcommand, so argv is rewritten before clap sees it:
//!
//! 1. Global options (and their values) are skipped; they may appear anywhere.
//! 2. The first remaining word is a **command** if it names one (`prompt`, `sessions`, …).
//! 3. Otherwise it must name an **agent** (built-in or from the config). It is taken out of
//!    argv. The next word is then a command if it names one; anything else (words, `-s`, `-f`,
//!    `--`) is the start of a `prompt`, so `acpx claude fix the bug` is
//!    `acpx claude prompt fix the bug`.
//! 4. A first word that is neither is a usage error that lists the known agents and says to use
//!    `acpx prompt "…"` for prompt text. (Node acpx ran unknown words as agent commands; a typo
//!    then started a random program, so acpx asks for `--agent "<command>"` instead.)
//!    With `--agent <command>` there is no positional agent: the first word that is not a
//!    command starts the prompt text (`acpx --agent ./my-agent fix the bug`), and a word that
//!    names an agent is an error (both an agent and `--agent`).
//! 5. Options of `prompt` may come first; the word after them follows 2–4: a command is moved
//!    in front of them (`acpx -s api status` = `acpx status -s api`), an agent is the agent
//!    (`acpx -s api claude fix it`), anything else is the usage error of 4; with nothing after
//!    them, or `--`, they start a `prompt` (`acpx -s api -- status` sends "status"). Nothing
//!    but global options runs `prompt` reading stdin; no arguments at all, `--help` or
//!    `--version` go to clap unchanged.
//! 6. Any other option is left where it is, so clap reports it as a usage error (exit 2, with a
//!    "did you mean" tip): an unknown option is never prompt text. Prompt text that starts with
//!    a dash follows `--` (`acpx codex -- -v means verbose`).
//!
//! So prompt text that equals a command name needs the explicit form: `acpx codex prompt status`.

use std::ffi::OsString;

use crate::cli::COMMAND_NAMES;
use crate::error::{CliError, CliResult};

/// Global options that take a value.
const GLOBAL_VALUE_OPTIONS: &[&str] = &[
    "--agent",
    "--cwd",
    "--format",
    "--store",
    "--home",
    "--timeout",
    "--ttl",
    "--mcp-config",
    "--add-dir",
    "--model",
    "--resume-policy",
    "--non-interactive-permissions",
    "--permission-policy",
    "--policy",
    "--elicitation-answers",
    "--prompt-retries",
    "--auth-policy",
];
/// Global options without a value (help and version included).
const GLOBAL_FLAGS: &[&str] = &[
    "--no-owner",
    "--json-strict",
    "--no-fs",
    "--no-terminal",
    "--approve-all",
    "--approve-reads",
    "--deny-all",
    "--verbose",
    "-v",
    "--help",
    "-h",
    "--version",
    "-V",
];
const HELP_FLAGS: &[&str] = &["--help", "-h", "--version", "-V"];
/// The options of `prompt`, which may start the default command (`acpx codex -s api hi`).
const PROMPT_OPTIONS: &[&str] = &[
    "-s",
    "--session",
    "-f",
    "--file",
    "--no-wait",
    "--otlp-endpoint",
];

/// Whether `word` is an option of `prompt` (`-s`, `-sapi`, `--session=api`, `--no-wait`, …).
fn is_prompt_option(word: &str) -> bool {
    let name = word.split_once('=').map_or(word, |(n, _)| n);
    PROMPT_OPTIONS.contains(&name)
        || ((word.starts_with("-s") || word.starts_with("-f")) && !word.starts_with("--"))
}

/// After prompt options (and global options) from `from`, the index of the first word: `None`
/// at the end, at `--` (prompt text follows) or at an option that is neither.
fn word_after_prompt_options(args: &[OsString], from: usize) -> Option<usize> {
    let mut i = from;
    while i < args.len() {
        let a = args[i].to_str()?;
        if a == "--" {
            return None;
        }
        if a == "-" || !a.starts_with('-') {
            return Some(i);
        }
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        if is_prompt_option(a) {
            // `-s api` and `--file x` are followed by their value; `-sapi`, `--session=api`
            // and `--no-wait` are one word.
            i += if ["-s", "--session", "-f", "--file", "--otlp-endpoint"].contains(&a) {
                2
            } else {
                1
            };
        } else if GLOBAL_VALUE_OPTIONS.contains(&name) {
            i += if a.contains('=') { 1 } else { 2 };
        } else if GLOBAL_FLAGS.contains(&a) {
            i += 1;
        } else {
            return None;
        }
    }
    None
}

/// The index of a command word right after the prompt options from `from` (`prompt`
/// included): `acpx -s api status` means `acpx status -s api`, not a prompt whose text is
/// "status" (which `acpx -s api -- status` sends).
fn command_after_prompt_options(args: &[OsString], from: usize) -> Option<usize> {
    let i = word_after_prompt_options(args, from)?;
    let word = args[i].to_str()?;
    COMMAND_NAMES.contains(&word).then_some(i)
}

/// Starts the default command at `at`: inserts `prompt` there, or, when a command word follows
/// the prompt options there ([`command_after_prompt_options`]), moves that command there.
fn start_command_at(args: &mut Vec<OsString>, at: usize) {
    match command_after_prompt_options(args, at) {
        Some(k) => {
            let command = args.remove(k);
            args.insert(at, command);
        }
        None => args.insert(at, "prompt".into()),
    }
}

/// argv with the positional agent taken out, and that agent's word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    pub args: Vec<OsString>,
    pub agent: Option<String>,
}

/// Index of the first token at or after `start` that is not a global option or its value,
/// and whether a help or version flag was skipped.
fn next_token(args: &[OsString], start: usize) -> (usize, bool) {
    let mut i = start;
    let mut help = false;
    while i < args.len() {
        let Some(a) = args[i].to_str() else {
            return (i, help);
        };
        if a == "--" || !a.starts_with('-') || a == "-" {
            return (i, help);
        }
        let name = a.split_once('=').map_or(a, |(n, _)| n);
        if GLOBAL_VALUE_OPTIONS.contains(&name) {
            i += if a.contains('=') { 1 } else { 2 };
        } else if GLOBAL_FLAGS.contains(&a) {
            help |= HELP_FLAGS.contains(&a);
            i += 1;
        } else {
            return (i, help);
        }
    }
    (args.len(), help)
}

/// Rewrites argv (program name first) as described in the module docs.
pub fn split_agent(mut args: Vec<OsString>, is_agent: impl Fn(&str) -> bool) -> CliResult<Split> {
    if args.len() <= 1 {
        return Ok(Split { args, agent: None });
    }
    let (j, help) = next_token(&args, 1);
    if j == args.len() {
        if !help {
            args.push("prompt".into());
        }
        return Ok(Split { args, agent: None });
    }
    let word = args[j].to_string_lossy().into_owned();
    if COMMAND_NAMES.contains(&word.as_str()) {
        return Ok(Split { args, agent: None });
    }
    // With `--agent <command>` there is no positional agent, so a word is prompt text; a
    // word that names an agent is a mistake (`--agent x codex …`), as in Node acpx.
    if has_raw_agent(&args) && !word.starts_with('-') && is_agent(&word) {
        return Err(CliError::usage(format!(
            "both an agent name ({word}) and --agent were given"
        ))
        .with_hint("use one of them; to send prompt text that starts with an agent's name, say `acpx --agent … prompt \"…\"`"));
    }
    if word.starts_with('-') && word != "--" && !is_prompt_option(&word) {
        // Unknown here: clap reports it (with its "did you mean" tip) as a usage error.
        return Ok(Split { args, agent: None });
    }
    if word.starts_with('-') && !has_raw_agent(&args) {
        // Prompt options first: the word after them is a command, or an agent (then what
        // follows it is), or neither, which is the same usage error as without the options.
        if let Some(k) = word_after_prompt_options(&args, j) {
            let next = args[k].to_string_lossy().into_owned();
            if !COMMAND_NAMES.contains(&next.as_str()) && next != "-" {
                if !is_agent(&next) {
                    return Err(unknown_word(&next));
                }
                args.remove(k);
                start_command_at(&mut args, j);
                return Ok(Split {
                    args,
                    agent: Some(next),
                });
            }
        }
    }
    if word.starts_with('-') || has_raw_agent(&args) {
        start_command_at(&mut args, j);
        return Ok(Split { args, agent: None });
    }
    if !is_agent(&word) {
        return Err(unknown_word(&word));
    }
    args.remove(j);
    let (k, help2) = next_token(&args, j);
    if k == args.len() {
        if !(help || help2) {
            args.push("prompt".into());
        }
    } else {
        let next = args[k].to_string_lossy();
        if !COMMAND_NAMES.contains(&next.as_ref()) {
            start_command_at(&mut args, k);
        }
    }
    Ok(Split {
        args,
        agent: Some(word),
    })
}

/// `compare` runs several agents: each `--agent X` before `--` becomes `--compare-agent X`,
/// the option of `compare` that takes many, so that the global `--agent` (one agent, the
/// last given wins) does not keep only the last. Any other command is left as it is.
pub fn compare_agents(args: &mut [OsString]) {
    let (at, _) = next_token(args, 1);
    if args.get(at).and_then(|a| a.to_str()) != Some("compare") {
        return;
    }
    for a in args.iter_mut().skip(1) {
        match a.to_str() {
            Some("--") => break,
            Some("--agent") => *a = "--compare-agent".into(),
            Some(s) if s.starts_with("--agent=") => {
                *a = format!("--compare-agent={}", &s["--agent=".len()..]).into();
            }
            _ => {}
        }
    }
}

/// Whether `--agent` appears among the options (before `--`).
fn has_raw_agent(args: &[OsString]) -> bool {
    args.iter()
        .skip(1)
        .map_while(|a| a.to_str().filter(|a| *a != "--"))
        .any(|a| a == "--agent" || a.starts_with("--agent="))
}

fn unknown_word(word: &str) -> CliError {
    CliError::usage(format!("{word:?} is neither a command nor a known agent"))
        .with_hint(format!(
            "to send prompt text, use `acpx prompt [-s name] \"{word} …\"` (or `acpx <agent> \"{word} …\"`); \
             to run an agent that is not registered, use `--agent \"<command line>\"`; \
             `acpx config show` lists the known agents"
        ))
        .with_detail("UNKNOWN_AGENT")
}

/// The values of `--home`, `--cwd` and `--format` wherever they appear before `--`, read
/// before clap parses argv because the config (and so the agent names) depends on them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prescan {
    pub home: Option<OsString>,
    pub cwd: Option<OsString>,
    pub format: Option<String>,
}

/// Scans argv for the options of [`Prescan`]. The last occurrence wins, as in clap.
pub fn prescan(args: &[OsString]) -> Prescan {
    let mut p = Prescan::default();
    let mut i = 1;
    while i < args.len() {
        let Some(a) = args[i].to_str() else {
            i += 1;
            continue;
        };
        if a == "--" {
            break;
        }
        let (name, inline) = match a.split_once('=') {
            Some((n, v)) => (n, Some(OsString::from(v))),
            None => (a, None),
        };
        if matches!(name, "--home" | "--cwd" | "--format") {
            let value = match inline {
                Some(v) => Some(v),
                None => {
                    i += 1;
                    args.get(i).cloned()
                }
            };
            match name {
                "--home" => p.home = value,
                "--cwd" => p.cwd = value,
                _ => p.format = value.map(|v| v.to_string_lossy().into_owned()),
            }
        }
        i += 1;
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(line: &[&str]) -> CliResult<(Vec<String>, Option<String>)> {
        let mut args: Vec<OsString> = vec!["acpx".into()];
        args.extend(line.iter().map(OsString::from));
        let s = split_agent(args, |w| ["codex", "claude"].contains(&w))?;
        Ok((
            s.args[1..]
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            s.agent,
        ))
    }

    #[test]
    fn agent_then_text_is_a_prompt() {
        let (args, agent) = split(&["--format", "json", "claude", "fix", "it"]).unwrap();
        assert_eq!(args, ["--format", "json", "prompt", "fix", "it"]);
        assert_eq!(agent.as_deref(), Some("claude"));
    }

    #[test]
    fn agent_then_command() {
        let (args, agent) = split(&["codex", "--verbose", "sessions", "list"]).unwrap();
        assert_eq!(args, ["--verbose", "sessions", "list"]);
        assert_eq!(agent.as_deref(), Some("codex"));
        let (args, _) = split(&["codex", "prompt", "status"]).unwrap();
        assert_eq!(args, ["prompt", "status"]);
    }

    #[test]
    fn agent_then_options_is_a_prompt() {
        let (args, _) = split(&["codex", "-s", "api", "hi"]).unwrap();
        assert_eq!(args, ["prompt", "-s", "api", "hi"]);
        // A command after the prompt options is that command, not prompt text.
        let (args, agent) = split(&["codex", "-s", "api", "set-mode", "code"]).unwrap();
        assert_eq!(args, ["set-mode", "-s", "api", "code"]);
        assert_eq!(agent.as_deref(), Some("codex"));
        let (args, _) = split(&["-s", "api", "status"]).unwrap();
        assert_eq!(args, ["status", "-s", "api"]);
        let (args, _) = split(&[
            "--agent",
            "x y",
            "--session=api",
            "--format",
            "json",
            "cancel",
        ])
        .unwrap();
        assert_eq!(
            args,
            [
                "--agent",
                "x y",
                "cancel",
                "--session=api",
                "--format",
                "json"
            ]
        );
        let (args, _) = split(&["-sapi", "--no-wait", "status", "please"]).unwrap();
        assert_eq!(args, ["status", "-sapi", "--no-wait", "please"]);
        // `--otlp-endpoint` takes its value: the word after it is not the text.
        let (args, agent) = split(&["--otlp-endpoint", "http://c", "claude", "fix"]).unwrap();
        assert_eq!(args, ["prompt", "--otlp-endpoint", "http://c", "fix"]);
        assert_eq!(agent.as_deref(), Some("claude"));
        // After `--` it stays text.
        let (args, _) = split(&["-s", "api", "--", "status"]).unwrap();
        assert_eq!(args, ["prompt", "-s", "api", "--", "status"]);
        // An agent after the prompt options is the agent; then a command, or the text.
        let (args, agent) = split(&["-s", "api", "claude", "status"]).unwrap();
        assert_eq!(args, ["status", "-s", "api"]);
        assert_eq!(agent.as_deref(), Some("claude"));
        let (args, agent) = split(&["-s", "api", "claude", "fix", "it"]).unwrap();
        assert_eq!(args, ["prompt", "-s", "api", "fix", "it"]);
        assert_eq!(agent.as_deref(), Some("claude"));
        // `prompt` itself after the options: the text is what follows it.
        let (args, _) = split(&["codex", "-s", "api", "prompt", "status"]).unwrap();
        assert_eq!(args, ["prompt", "-s", "api", "status"]);
        // A word that is neither a command nor an agent is the usual usage error.
        assert!(split(&["-s", "api", "stauts"]).is_err());
        assert!(split(&["-s", "api", "what", "status"]).is_err());
        // With --agent there is no positional agent: words are prompt text.
        let (args, _) = split(&["--agent", "x", "-s", "api", "fix", "it"]).unwrap();
        assert_eq!(args, ["--agent", "x", "prompt", "-s", "api", "fix", "it"]);
        let (args, _) = split(&["codex"]).unwrap();
        assert_eq!(args, ["prompt"]);
        let (args, _) = split(&["codex", "--", "status"]).unwrap();
        assert_eq!(args, ["prompt", "--", "status"]);
    }

    #[test]
    fn command_first() {
        let (args, agent) = split(&["--cwd", "codex", "sessions"]).unwrap();
        assert_eq!(args, ["--cwd", "codex", "sessions"]);
        assert_eq!(agent, None);
        let (args, _) = split(&["--home=/x", "status"]).unwrap();
        assert_eq!(args, ["--home=/x", "status"]);
    }

    #[test]
    fn unknown_word_is_a_usage_error() {
        let e = split(&["hello", "world"]).unwrap_err();
        assert_eq!(e.kind, crate::error::ErrorKind::Usage);
        assert!(e
            .hint
            .as_deref()
            .unwrap_or_default()
            .contains("acpx prompt"));
    }

    #[test]
    fn raw_agent_makes_words_prompt_text() {
        let (args, agent) = split(&["--agent", "./a --acp", "fix", "it"]).unwrap();
        assert_eq!(args, ["--agent", "./a --acp", "prompt", "fix", "it"]);
        assert_eq!(agent, None);
        let (args, _) = split(&["--agent=./a", "status"]).unwrap();
        assert_eq!(args, ["--agent=./a", "status"]);
    }

    #[test]
    fn help_and_bare_options() {
        let (args, _) = split(&["--help"]).unwrap();
        assert_eq!(args, ["--help"]);
        let (args, _) = split(&["--verbose"]).unwrap();
        assert_eq!(args, ["--verbose", "prompt"]);
        // As without the option, the first word must be a command or an agent.
        assert!(split(&["-s", "x", "hi"]).is_err());
        let (args, _) = split(&["-s", "x", "prompt", "hi"]).unwrap();
        assert_eq!(args, ["prompt", "-s", "x", "hi"]);
        let (args, _) = split(&["-s", "x"]).unwrap();
        assert_eq!(args, ["prompt", "-s", "x"]);
        let (args, _) = split(&["--", "-x"]).unwrap();
        assert_eq!(args, ["prompt", "--", "-x"]);
    }

    #[test]
    fn unknown_options_are_left_for_clap() {
        let (args, agent) = split(&["--formt", "json", "prompt", "hi"]).unwrap();
        assert_eq!(args, ["--formt", "json", "prompt", "hi"]);
        assert_eq!(agent, None);
        let (args, _) = split(&["--verbose", "-x", "hi"]).unwrap();
        assert_eq!(args, ["--verbose", "-x", "hi"]);
        let (args, _) = split(&["--session=api", "codex", "hi"]).unwrap();
        assert_eq!(args, ["prompt", "--session=api", "hi"]);
    }

    #[test]
    fn compare_takes_every_agent() {
        let mut args: Vec<OsString> = [
            "acpx",
            "--format",
            "json",
            "compare",
            "hi",
            "--agent",
            "a b",
            "--agent=c",
            "--",
            "--agent",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        compare_agents(&mut args);
        let got: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            got,
            [
                "acpx",
                "--format",
                "json",
                "compare",
                "hi",
                "--compare-agent",
                "a b",
                "--compare-agent=c",
                "--",
                "--agent"
            ]
        );
        // Another command keeps its one global agent.
        let mut args: Vec<OsString> = ["acpx", "--agent", "x", "replay", "s"]
            .iter()
            .map(OsString::from)
            .collect();
        compare_agents(&mut args);
        assert_eq!(args[1], "--agent");
    }

    #[test]
    fn prescan_finds_values_anywhere() {
        let args: Vec<OsString> = [
            "acpx",
            "sessions",
            "--home=/h",
            "list",
            "--format",
            "json",
            "--",
            "--cwd",
            "x",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let p = prescan(&args);
        assert_eq!(p.home.as_deref(), Some(std::ffi::OsStr::new("/h")));
        assert_eq!(p.format.as_deref(), Some("json"));
        assert_eq!(p.cwd, None);
    }
}
