//! The grammar, configuration, help and usage errors of the real binary.

use crate::common;

use std::process::{Command, Stdio};

use common::{acpx_bin, Env, Run};
use serde_json::Value;

fn run_plain(
    args: &[&str],
    home: &std::path::Path,
    cwd: &std::path::Path,
    env: &[(&str, &str)],
) -> Run {
    let mut c = Command::new(acpx_bin());
    c.args(args)
        .current_dir(cwd)
        .env_remove("ACPX_HOME")
        .env_remove("ACPX_STORE")
        .env("HOME", home)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[test]
fn unknown_words_and_bad_flags_are_usage_errors() {
    let env = Env::new("fs");
    let r = env.run(&["frobnicate", "the", "code"]);
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr
            .contains("\"frobnicate\" is neither a command nor a known agent"),
        "{}",
        r.stderr
    );
    assert!(
        r.stderr.contains("acpx prompt [-s name] \"frobnicate"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("--agent"), "{}", r.stderr);
    assert!(
        r.stderr.contains("known agents: ") && r.stderr.contains("claude, codex"),
        "{}",
        r.stderr
    );

    let r = env.run(&["--format", "json", "frobnicate"]);
    assert_eq!(r.code, 2);
    let e = r.json();
    assert_eq!(e["jsonrpc"], "2.0");
    assert_eq!(e["error"]["code"], -32602);
    assert_eq!(e["error"]["data"]["acpxCode"], "USAGE");
    assert_eq!(e["error"]["data"]["detailCode"], "UNKNOWN_AGENT");
    assert!(e["error"]["data"]["knownAgents"]
        .as_array()
        .unwrap()
        .contains(&Value::from("gemini")));

    for args in [
        vec!["sessions", "list", "--bogus"],
        vec!["--format", "yaml", "sessions"],
        vec!["--store", "mongo", "sessions"],
        vec!["--timeout", "-3", "status"],
        vec!["--timeout", "soon", "status"],
        vec!["--timeout", "1e20", "status"],
        vec!["--timeout", "NaN", "status"],
        vec!["--timeout", "inf", "status"],
        vec!["--ttl", "-1", "status"],
        vec!["--ttl", "1e20", "status"],
        vec!["--approve-all", "--deny-all", "status"],
        vec!["set-mode"],
        vec!["sessions", "search"],
        vec!["migrate"],
    ] {
        let r = env.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(!r.stderr.is_empty(), "{args:?}");
        let mut j = vec!["--format", "json"];
        j.extend(args.iter());
        let r = env.run(&j);
        assert_eq!(r.code, 2, "{j:?}");
        // `--format yaml` is itself the error, so that one is reported as text.
        if !args.contains(&"yaml") {
            assert_eq!(r.json()["error"]["data"]["acpxCode"], "USAGE", "{j:?}");
        }
    }

    // A negative number is a bad value of its option, named with it, not an unknown flag.
    for (args, option) in [
        (vec!["--timeout", "-3", "status"], "--timeout"),
        (vec!["--ttl", "-1", "status"], "--ttl"),
        (vec!["--prompt-retries", "-1", "status"], "--prompt-retries"),
        (vec!["sessions", "list", "--limit", "-1"], "--limit"),
        (vec!["sessions", "events", "--from-seq", "-3"], "--from-seq"),
        (vec!["sessions", "read", "--tail", "-2"], "--tail"),
        (
            vec!["sessions", "prune", "--older-than", "-3"],
            "--older-than",
        ),
    ] {
        let r = env.run(&args);
        assert_eq!(r.code, 2, "{args:?}: {r:?}");
        assert!(
            r.stderr.contains(option) && !r.stderr.contains("unexpected argument"),
            "{args:?}: {r:?}"
        );
    }

    // A positional agent and --agent together.
    let r = env.run(&["--agent", "x", "codex", "sessions"]);
    assert_eq!(r.code, 2, "{r:?}");
    // Command options belong after their command, but global options go anywhere.
    let r = env.run(&["sessions", "list", "--format", "json"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert_eq!(r.json()["action"], "sessions_list");
}

#[test]
fn help_reads_for_every_command() {
    let env = Env::new("fs");
    let top = env.run(&["--help"]).ok();
    for word in [
        "Usage:",
        "prompt",
        "sessions",
        "--agent",
        "--format",
        "Exit codes",
        "acpx prompt \"",
    ] {
        assert!(top.stdout.contains(word), "{word} missing from --help");
    }
    let short = env.run(&["-h"]).ok();
    assert!(short.stdout.len() < top.stdout.len());
    for cmd in [
        vec!["prompt"],
        vec!["exec"],
        vec!["cancel"],
        vec!["set-mode"],
        vec!["set"],
        vec!["status"],
        vec!["fsck"],
        vec!["migrate"],
        vec!["config"],
        vec!["sessions"],
        vec!["sessions", "new"],
        vec!["sessions", "ensure"],
        vec!["sessions", "list"],
        vec!["sessions", "show"],
        vec!["sessions", "close"],
        vec!["sessions", "delete"],
        vec!["sessions", "fork"],
        vec!["sessions", "history"],
        vec!["sessions", "events"],
        vec!["sessions", "export"],
        vec!["sessions", "import"],
        vec!["sessions", "prune"],
        vec!["sessions", "search"],
    ] {
        let mut args = cmd.clone();
        args.push("--help");
        let r = env.run(&args).ok();
        assert!(r.stdout.contains("Usage: acpx"), "{cmd:?}: {}", r.stdout);
        assert!(r.stdout.lines().count() > 3, "{cmd:?}");
    }
    let v = env.run(&["--version"]).ok();
    assert!(v.stdout.starts_with("acpx "), "{}", v.stdout);
    let v = env.run(&["--format", "json", "--version"]).ok().json();
    assert_eq!(v["action"], "version");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn config_files_set_defaults_and_bad_values_name_file_and_key() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    // A project file defines an agent and makes it the default; the format comes from the
    // global file.
    std::fs::write(
        env.project.path().join(".acpxrc.json"),
        serde_json::json!({"agents": {"mine": {"command": agent}}, "defaultAgent": "mine"})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        env.home().join("config.json"),
        r#"{"format": "json", "timeout": 60}"#,
    )
    .unwrap();
    let created = env.run(&["sessions", "new"]).ok().json();
    assert_eq!(created["action"], "session_ensured");
    let r = env
        .run(&["--format", "quiet", "mine", "echo", "via", "alias"])
        .ok();
    assert_eq!(r.stdout, "via alias\n");
    let r = env.run(&["--format", "quiet", "echo", "needs", "prompt"]);
    assert_eq!(r.code, 2, "a bare word is not prompt text: {r:?}");
    let r = env
        .run(&["--format", "quiet", "prompt", "echo", "default", "agent"])
        .ok();
    assert_eq!(r.stdout, "default agent\n");
    let cfg = env.run(&["config", "show"]).ok().json();
    assert_eq!(cfg["agents"]["mine"], agent.as_str());
    assert_eq!(cfg["timeout"], 60.0);
    assert_eq!(cfg["configFiles"].as_array().unwrap().len(), 2);

    // A broken config file: exit 1 (CONFIG_INVALID, not the usage code) where it is needed,
    // naming the file, the line and the key; commands that do not need it still run and warn.
    std::fs::write(
        env.home().join("config.json"),
        "{\n  \"format\": \"text\",\n  \"timeout\": \"soon\"\n}",
    )
    .unwrap();
    let r = env.run(&["config", "show"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(
        r.stderr.contains("config.json")
            && r.stderr.contains("line 3")
            && r.stderr.contains("`timeout`"),
        "{}",
        r.stderr
    );
    let r = env.run(&["sessions", "list"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(r.stderr.contains("`timeout`"), "{}", r.stderr);
    // fsck runs; the session's queue owner from the prompt above still holds it, so it is
    // reported as in use rather than checked.
    let r = env.run(&["fsck"]);
    assert_eq!(r.code, 0, "{r:?}");
    assert!(
        r.stderr
            .contains("in use by a running prompt or its queue owner, not checked")
            && r.stderr
                .contains("`acpx fsck --repair` has idle queue owners release")
            && r.stderr.contains("checked 0 session(s)"),
        "{r:?}"
    );
    assert_eq!(env.run(&["--version"]).code, 0);
    assert_eq!(env.run(&["--help"]).code, 0);
    std::fs::write(env.home().join("config.json"), "{}").unwrap();
    std::fs::write(
        env.project.path().join(".acpxrc.json"),
        r#"{"defaultPermissions": "sure"}"#,
    )
    .unwrap();
    let r = env.run(&["--format", "json", "status"]);
    assert_eq!(r.code, 1, "{r:?}");
    let err = r.json()["error"].clone();
    assert_eq!(err["data"]["detailCode"], "CONFIG_INVALID", "{err}");
    let msg = err["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains(".acpxrc.json") && msg.contains("`defaultPermissions`"),
        "{msg}"
    );
    std::fs::write(env.project.path().join(".acpxrc.json"), "{not json").unwrap();
    let r = env.run(&["status"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains(".acpxrc.json") && r.stderr.contains("line 1, column 2"),
        "{}",
        r.stderr
    );
    std::fs::write(
        env.project.path().join(".acpxrc.json"),
        r#"{"defaultAgent": "nobody"}"#,
    )
    .unwrap();
    let r = env.run(&["sessions", "list"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("nobody"), "{}", r.stderr);
}

#[test]
fn home_and_store_come_from_flags_environment_or_config() {
    let home = tempfile::tempdir().unwrap();
    let fake_home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let agent = common::test_agent();
    let agent = agent.as_str();
    // ACPX_HOME and ACPX_STORE.
    let h = home.path().to_str().unwrap();
    let r = run_plain(
        &["--format", "json", "--agent", agent, "sessions", "new"],
        fake_home.path(),
        cwd.path(),
        &[("ACPX_HOME", h), ("ACPX_STORE", "sqlite")],
    );
    assert_eq!(r.code, 0, "{r:?}");
    assert!(home.path().join("acpx.db").exists());
    // Without anything: ~/.acpx under $HOME, fs store.
    let r = run_plain(
        &["--format", "json", "--agent", agent, "sessions", "new"],
        fake_home.path(),
        cwd.path(),
        &[],
    );
    assert_eq!(r.code, 0, "{r:?}");
    let id = r.json()["acpxRecordId"].as_str().unwrap().to_owned();
    assert!(fake_home
        .path()
        .join(format!(".acpx/sessions/{id}.json"))
        .exists());
    // `store` in the config.
    std::fs::write(
        fake_home.path().join(".acpx/config.json"),
        r#"{"store": "sqlite"}"#,
    )
    .unwrap();
    let r = run_plain(
        &["--format", "json", "sessions", "list"],
        fake_home.path(),
        cwd.path(),
        &[],
    );
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert!(
        v["sessions"].as_array().unwrap().is_empty(),
        "the sqlite store of ~/.acpx is empty"
    );
    // The flag beats the environment and the config.
    let r = run_plain(
        &["--format", "json", "--store", "fs", "sessions", "list"],
        fake_home.path(),
        cwd.path(),
        &[("ACPX_STORE", "sqlite")],
    );
    let v: Value = serde_json::from_str(r.stdout.trim()).unwrap();
    assert_eq!(v["sessions"].as_array().unwrap().len(), 1);
    // Bad retention environment values are reported.
    let r = run_plain(
        &["sessions", "list"],
        fake_home.path(),
        cwd.path(),
        &[("ACPX_MAX_SEGMENT_BYTES", "lots")],
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(r.stderr.contains("ACPX_MAX_SEGMENT_BYTES"), "{}", r.stderr);
}

/// Every duration flag is bounded: a huge, negative or meaningless value is a usage error that
/// names the flag and the allowed range, never a panic.
/// A bad ACPX_STORE is named as the variable it came from, not only as `--store`.
#[test]
fn a_bad_store_variable_is_named() {
    let home = tempfile::tempdir().unwrap();
    let cwd = tempfile::tempdir().unwrap();
    let h = home.path().to_str().unwrap();
    let env = [("ACPX_STORE", "bogus")];
    let r = run_plain(
        &["--home", h, "sessions", "list"],
        home.path(),
        cwd.path(),
        &env,
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(
        r.stderr.contains("'bogus'") && r.stderr.contains("environment variable ACPX_STORE"),
        "{}",
        r.stderr
    );
    let r = run_plain(
        &["--home", h, "--format", "json", "sessions", "list"],
        home.path(),
        cwd.path(),
        &env,
    );
    assert_eq!(r.code, 2, "{r:?}");
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).unwrap();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(message.contains("ACPX_STORE"), "{message}");
    // Typed on the command line, the flag is what is named.
    let r = run_plain(
        &["--home", h, "--store", "bogus", "sessions", "list"],
        home.path(),
        cwd.path(),
        &env,
    );
    assert_eq!(r.code, 2, "{r:?}");
    assert!(!r.stderr.contains("ACPX_STORE"), "{}", r.stderr);
}

#[test]
fn duration_flags_name_the_flag_and_the_range() {
    let env = Env::new("fs");
    for (flag, value, range) in [
        ("--timeout", "1e20", "more than 0 and at most 31536000"),
        ("--timeout=-5", "", "more than 0 and at most 31536000"),
        ("--timeout", "nan", "more than 0 and at most 31536000"),
        ("--ttl", "inf", "from 0 to 31536000"),
    ] {
        let mut args = vec![flag];
        args.extend([value].into_iter().filter(|v| !v.is_empty()));
        args.push("status");
        let r = env.run(&args);
        assert_eq!(r.code, 2, "{flag} {value}: {r:?}");
        assert!(
            r.stderr.contains(flag.trim_end_matches("=-5")) && r.stderr.contains(range),
            "{flag} {value}: {}",
            r.stderr
        );
    }
    std::fs::write(
        env.home().join("config.json"),
        r#"{"requestTimeout": 1e20}"#,
    )
    .unwrap();
    let r = env.run(&["config", "show"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert!(r.stderr.contains("`requestTimeout`"), "{}", r.stderr);
}

/// A home that cannot be a directory is named with the problem, on both stores.
#[test]
fn a_home_that_is_not_a_directory_is_named() {
    let env = Env::new("fs");
    for store in ["fs", "sqlite"] {
        for home in ["/dev/null", "/dev/null/acpx"] {
            let r = env.run(&["--home", home, "--store", store, "sessions", "list"]);
            assert_eq!(r.code, 1, "{store} {home}: {r:?}");
            assert!(
                r.stderr.contains(home) && r.stderr.contains("not a directory"),
                "{store} {home}: {}",
                r.stderr
            );
        }
    }
}

/// `acpx` with no argument prints the help (exit 2) whatever the environment says: with
/// ACPX_HOME or ACPX_STORE set, clap alone answered "requires a subcommand" and listed the
/// hidden `__owner`.
#[test]
fn acpx_alone_prints_the_help_whatever_the_environment() {
    let home = tempfile::tempdir().unwrap();
    let h = home.path().to_str().unwrap();
    for env in [
        &[][..],
        &[("ACPX_HOME", h)][..],
        &[("ACPX_STORE", "sqlite")][..],
    ] {
        let r = run_plain(&[], home.path(), home.path(), env);
        assert_eq!(r.code, 2, "{env:?}: {r:?}");
        assert!(r.stderr.contains("Usage: acpx"), "{env:?}: {r:?}");
        assert!(!r.stderr.contains("__owner"), "{env:?}: {r:?}");
    }
}
