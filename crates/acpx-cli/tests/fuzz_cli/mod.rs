//! Fuzz targets (property tests) of the binary's readers of outside bytes: the config files
//! (`<home>/config.json` and the project's `.acpxrc.json`, through `config::load` on real
//! files) and the command line (`grammar::prescan`, `grammar::split_agent`, then clap).
//!
//! The CLI crate is a binary, so these run as its unit tests: `main.rs` includes this module
//! under `#[cfg(test)]` (`cargo test -p acpx-cli --bin acpx fuzz`). See docs/RELIABILITY.md
//! § Fuzzing; `ACPX_FUZZ_CASES=1000000` for a long run.

use acpx_test_support::fuzz as fuzz_support;

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;

use clap::{CommandFactory, FromArgMatches};
use proptest::prelude::*;
use serde_json::json;

use crate::cli::Cli;
use crate::config;
use crate::grammar;

/// A config file using every key, in the shapes the config accepts.
fn config_samples() -> Vec<Vec<u8>> {
    [
        json!({
            "defaultAgent": "codex",
            "defaultPermissions": "approve-reads",
            "format": "json",
            "store": "sqlite",
            "timeout": 30,
            "ttl": 300,
            "queueMaxDepth": 16,
            "noOwner": false,
            "disableExec": true,
            "agents": {"x": {"command": "x-agent --acp"}, "y": "y-agent", "z": {"argv": ["z agent", "--acp"]}},
            "mcpServers": {"files": {"command": "/bin/true", "args": ["x"], "env": {"K": "V"}}},
            "nonInteractivePermissions": "deny",
            "resumePolicy": "same-session-only",
            "authPolicy": "skip",
            "unknownKey": [1, 2]
        }),
        json!({"format": "quiet", "agents": {"x": {"argv": ["x agent", "--acp"]}}, "ttl": 0}),
    ]
    .iter()
    .map(|v| serde_json::to_vec_pretty(v).expect("json"))
    .collect()
}

#[test]
fn fuzz_config_files() {
    let home = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    let project = tempfile::tempdir_in(fuzz_support::scratch_root()).expect("a temp dir");
    std::fs::create_dir_all(project.path().join(".git")).expect("a git root");
    let samples = config_samples();
    let strategy = (
        fuzz_support::inputs(samples.len()),
        fuzz_support::inputs(samples.len()),
        any::<u8>(),
    );
    fuzz_support::fuzz_with(
        "config files",
        strategy,
        |(global, local, which): (fuzz_support::Input, fuzz_support::Input, u8)| {
            let global_path = home.path().join("config.json");
            let local_path = project.path().join(".acpxrc.json");
            let _ = std::fs::remove_file(&global_path);
            let _ = std::fs::remove_file(&local_path);
            if which & 1 == 1 {
                let bytes = fuzz_support::bytes_of(&global, &samples);
                std::fs::write(&global_path, bytes).expect("write");
            }
            if which & 2 == 2 {
                let bytes = fuzz_support::bytes_of(&local, &samples);
                std::fs::write(&local_path, bytes).expect("write");
            }
            if let Err(e) = config::load(home.path(), project.path()) {
                // A refusal names the file it comes from.
                assert!(
                    e.message.contains("config.json") || e.message.contains(".acpxrc.json"),
                    "{e}"
                );
            }
        },
    );
}

/// Every word clap knows (subcommands, long and short options, their possible values), plus
/// values that break number, path and duration parsers.
fn vocabulary() -> Vec<String> {
    fn walk(cmd: &clap::Command, out: &mut Vec<String>) {
        out.push(cmd.get_name().to_owned());
        for arg in cmd.get_arguments() {
            if let Some(l) = arg.get_long() {
                out.push(format!("--{l}"));
            }
            if let Some(s) = arg.get_short() {
                out.push(format!("-{s}"));
            }
            for v in arg.get_possible_values() {
                out.push(v.get_name().to_owned());
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = Vec::new();
    walk(&Cli::command(), &mut out);
    for v in [
        "",
        "-",
        "--",
        "=",
        "demo",
        "codex",
        "1e20",
        "-1",
        "0",
        "NaN",
        "inf",
        "1e-300",
        "99999999999999999999",
        "/tmp",
        "../..",
        "--timeout=1e20",
        "--ttl=-1",
        "--format=",
        "--home=",
        "--agent=",
        "-s",
        "-vv",
        "--cwd=/nonexistent",
        "prompt text",
        "\u{0}",
    ] {
        out.push(v.to_owned());
    }
    out.sort();
    out.dedup();
    out
}

/// One argv word: from the vocabulary, random text, or bytes that are not UTF-8.
#[derive(Debug, Clone)]
enum Word {
    Known(usize),
    Text(String),
    Bytes(Vec<u8>),
}

fn words() -> impl Strategy<Value = Vec<Word>> {
    let word = prop_oneof![
        8 => any::<usize>().prop_map(Word::Known),
        1 => ".{0,12}".prop_map(Word::Text),
        1 => prop::collection::vec(any::<u8>(), 0..8).prop_map(Word::Bytes),
    ];
    prop::collection::vec(word, 0..10)
}

/// The argv handling of `main.rs::run`, without running the command. `cli` is
/// `Cli::command()`, built once: `Cli::try_parse_from` builds the same command for every call
/// and then does exactly this, and building it cost more than parsing.
fn parse_argv(cli: &mut clap::Command, argv: Vec<OsString>) {
    let pre = grammar::prescan(&argv);
    let _ = pre.format.as_deref();
    let Ok(split) = grammar::split_agent(argv, |w| matches!(w, "demo" | "codex" | "claude")) else {
        return;
    };
    let parsed = cli
        .try_get_matches_from_mut(&split.args)
        .and_then(|mut matches| Cli::from_arg_matches_mut(&mut matches));
    match parsed {
        Ok(_) => {}
        Err(e) => {
            let _ = e.kind();
            let _ = e.to_string();
        }
    }
}

#[test]
fn fuzz_command_line() {
    let vocab = vocabulary();
    let cli = std::cell::RefCell::new(Cli::command());
    fuzz_support::fuzz_with("command line", words(), |ws: Vec<Word>| {
        let mut argv: Vec<OsString> = vec!["acpx".into()];
        argv.extend(ws.into_iter().map(|w| match w {
            Word::Known(i) => OsString::from(&vocab[i % vocab.len()]),
            Word::Text(t) => OsString::from(t),
            Word::Bytes(b) => OsString::from_vec(b),
        }));
        parse_argv(&mut cli.borrow_mut(), argv);
    });
}
