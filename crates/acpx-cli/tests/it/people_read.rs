//! What a person reads (issue 49): one question per action at a real terminal with "always"
//! remembered, tables with headers that fit the terminal, `config show` with sources, and
//! errors that name their cause (unknown config keys, authentication, PostgreSQL), against
//! real `acpx` processes and the scripted agent.

use crate::common;

use std::io::{Read, Write};
use std::process::Stdio;

use common::process::{args, MODES};
use common::{Env, BACKENDS};

/// Runs `acpx … <rest>` at a terminal (`script`), typing `answer` at every permission
/// question; returns the exit code and what the terminal showed.
fn at_terminal(
    env: &Env,
    agent: &str,
    mode: &[&str],
    rest: &[&str],
    answer: &str,
) -> (i32, String) {
    let mut line = vec![
        common::acpx_bin().to_string_lossy().into_owned(),
        "--home".into(),
        env.home().to_string_lossy().into_owned(),
        "--store".into(),
        env.backend.into(),
        "--agent".into(),
        agent.into(),
    ];
    line.extend(mode.iter().chain(rest).map(|w| w.to_string()));
    let quoted: Vec<String> = line
        .iter()
        .map(|w| format!("'{}'", w.replace('\'', "'\\''")))
        .collect();
    let mut child = std::process::Command::new("script")
        .args(["-qfec", &quoted.join(" "), "/dev/null"])
        .current_dir(env.cwd())
        .env_remove("ACPX_HOME")
        .env_remove("ACPX_STORE")
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let answer = answer.to_owned();
    let reader = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        let mut answered = 0;
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
            let asked = String::from_utf8_lossy(&seen).matches("(y/N").count();
            while answered < asked {
                let _ = stdin.write_all(format!("{answer}\n").as_bytes());
                answered += 1;
            }
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    let status = child.wait().unwrap();
    (status.code().unwrap_or(-1), reader.join().unwrap())
}

fn have_script() -> bool {
    let ok = std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        assert!(
            std::env::var("CI").map_or(true, |v| v != "true"),
            "util-linux `script` is missing under CI=true"
        );
        eprintln!("skipped: util-linux `script` is not installed");
    }
    ok
}

#[test]
fn a_write_is_asked_once_and_always_holds_for_the_session() {
    if !have_script() {
        return;
    }
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let a = env.cwd().join("a.txt").display().to_string();
            let prompt = format!("write-file {a} one");
            let (code, screen) = at_terminal(&env, &agent, mode, &["prompt", &prompt], "a");
            assert_eq!(code, 0, "{backend} {mode:?}: {screen}");
            assert_eq!(
                screen.matches("[permission] Allow").count(),
                1,
                "{backend} {mode:?}: one question for the tool call and its write: {screen}"
            );
            assert!(screen.contains("a = always"), "{screen}");
            assert_eq!(std::fs::read_to_string(&a).unwrap(), "one");
            // "Always": the next edit is not asked about, in a new process.
            let prompt = format!("write-file {a} two");
            let (code, screen) = at_terminal(&env, &agent, mode, &["prompt", &prompt], "n");
            assert_eq!(code, 0, "{backend} {mode:?}: {screen}");
            assert!(!screen.contains("[permission] Allow"), "{screen}");
            assert_eq!(std::fs::read_to_string(&a).unwrap(), "two");
        }
    }
}

#[test]
fn a_policy_rule_approval_is_not_refused_by_the_write_gate() {
    for backend in BACKENDS {
        for mode in MODES {
            let env = Env::new(backend);
            let agent = env.agent_cmd("");
            env.run(&args(&agent, mode, &["sessions", "new"])).ok();
            let a = env.cwd().join("ruled.txt").display().to_string();
            let prompt = format!("write-file {a} ruled");
            let policy = r#"{"autoApprove":["edit"],"defaultAction":"deny"}"#;
            let r = env.run(&args(
                &agent,
                mode,
                &[
                    "--approve-reads",
                    "--permission-policy",
                    policy,
                    "prompt",
                    &prompt,
                ],
            ));
            assert_eq!(r.code, 0, "{backend} {mode:?}: {r:?}");
            assert!(
                !r.stderr.contains("not allowed by the permission mode"),
                "{r:?}"
            );
            assert_eq!(std::fs::read_to_string(&a).unwrap(), "ruled");
        }
    }
}

#[test]
fn sessions_list_is_a_table_that_fits_the_terminal() {
    let env = Env::new("fs");
    let short = env.agent_cmd("");
    let long = env.agent_cmd("--load");
    env.run(&["--agent", &short, "sessions", "new"]).ok();
    env.run(&["--agent", &long, "sessions", "new", "--name", "second"])
        .ok();
    let wide = env
        .cmd()
        .env_remove("COLUMNS")
        .args(["sessions", "list"])
        .output()
        .unwrap();
    assert!(wide.status.success());
    let stdout = String::from_utf8_lossy(&wide.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", stdout);
    assert!(lines[0].starts_with("ID "), "a header row: {}", stdout);
    assert!(
        lines.iter().all(|l| !l.ends_with(' ')),
        "no trailing blanks: {:?}",
        stdout
    );
    // Aligned: every column starts where its header does.
    let at = |l: &str, word: &str| l.find(word).unwrap();
    let cwd_col = at(lines[0], "CWD");
    for l in &lines[1..] {
        assert_eq!(at(l, &env.cwd_str()), cwd_col, "{}", stdout);
    }
    // Narrow: the long cells lose their middle, the table fits.
    let narrow = Done(
        env.cmd()
            .env("COLUMNS", "100")
            .args(["sessions", "list"])
            .output()
            .unwrap(),
    );
    assert!(narrow.0.status.success());
    let text = String::from_utf8_lossy(&narrow.0.stdout).into_owned();
    assert!(text.contains('…'), "{text}");
    // (down to a floor per column: ids and dates are never cut)
    let widest = |t: &str| t.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest(&text) < widest(&stdout), "{text}");
    // JSON unchanged: no header, one object.
    let json = env
        .run(&["--format", "json", "sessions", "list"])
        .ok()
        .json();
    assert_eq!(json["sessions"].as_array().unwrap().len(), 2, "{json}");
}

/// A finished process, for checks on its raw output.
struct Done(std::process::Output);

#[test]
fn config_show_names_every_setting_and_its_source() {
    let env = Env::new("fs");
    std::fs::write(env.home().join("config.json"), r#"{"ttl": 30, "tll": 1}"#).unwrap();
    let r = env.run(&["config", "show"]);
    assert_eq!(r.code, 0, "{r:?}");
    let row = |name: &str| {
        r.stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row: {}", r.stdout))
            .to_owned()
    };
    assert!(
        row("ttl").contains("30 s") && row("ttl").contains("file "),
        "{}",
        r.stdout
    );
    assert!(row("store").ends_with("flag --store"), "{}", r.stdout);
    assert!(row("format").ends_with("default"), "{}", r.stdout);
    assert!(row("requestTimeout").contains("2 min"), "{}", r.stdout);
    assert!(
        r.stdout.lines().next().unwrap().starts_with("SETTING"),
        "{}",
        r.stdout
    );
    // The typo is said without -v, with the key it probably meant.
    assert!(
        r.stderr
            .contains("unknown key `tll` (ignored); did you mean `ttl`?"),
        "{}",
        r.stderr
    );
    let r = env.run(&["--ttl", "60", "config", "show"]);
    assert!(r.stdout.contains("flag --ttl"), "{}", r.stdout);
}

#[test]
fn authentication_required_names_the_methods_and_the_remedies() {
    for mode in MODES {
        let env = Env::new("fs");
        let agent = env.agent_cmd("--require-auth test-key");
        let r = env.run(&args(&agent, mode, &["sessions", "new"]));
        assert_eq!(r.code, 1, "{mode:?}: {r:?}");
        for said in [
            "Authentication required",
            "test-key",
            "ACPX_AUTH_TEST_KEY",
            "--auth-policy",
        ] {
            assert!(r.stderr.contains(said), "{mode:?}: {said}: {}", r.stderr);
        }
        let e = env
            .run(&args(
                &agent,
                mode,
                &["--format", "json", "sessions", "new"],
            ))
            .json();
        assert_eq!(e["error"]["data"]["detailCode"], "AUTH_REQUIRED", "{e}");
    }
}

#[test]
fn postgres_errors_carry_the_servers_message_and_the_url_once() {
    let Some(url) = common::postgres::server_url() else {
        return;
    };
    let env = Env::new("fs");
    // The same server, a database that does not exist, with a password to mask.
    let (scheme_host, _) = url.rsplit_once('/').unwrap();
    let with_password = scheme_host.replacen("://", "://acpx:s3cret@", 1);
    let (prefix, rest) = with_password.split_once("://").unwrap();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let bad = format!("{prefix}://acpx:s3cret@{rest}/acpx_no_such_db");
    let r = Done(
        env.cmd_on("postgres")
            .env("ACPX_STORE_URL", &bad)
            .args(["sessions", "list"])
            .output()
            .unwrap(),
    );
    let stderr = String::from_utf8_lossy(&r.0.stderr).into_owned();
    assert_eq!(r.0.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("database \"acpx_no_such_db\" does not exist"),
        "{stderr}"
    );
    assert!(!stderr.contains("s3cret"), "{stderr}");
    assert_eq!(stderr.matches("acpx_no_such_db\"").count(), 1, "{stderr}");
    assert_eq!(
        stderr.matches("/acpx_no_such_db").count(),
        1,
        "the URL once: {stderr}"
    );
    assert!(stderr.contains("createdb"), "{stderr}");
}

#[test]
fn an_error_after_partial_output_starts_on_a_new_line() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    let out = env
        .cmd()
        .args([
            "--agent",
            &agent,
            "--no-owner",
            "--timeout",
            "1",
            "prompt",
            "slow",
            "100",
        ])
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(3), "{stdout}");
    assert!(stdout.starts_with("chunk 0. "), "{stdout}");
    assert!(
        stdout.ends_with('\n'),
        "the partial line is ended: {stdout:?}"
    );
}

/// The `acpx-<command>(1)` pages a page names.
fn named_pages(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| {
            let l = l.replace("\\-", "-");
            l.strip_prefix("acpx-")?
                .strip_suffix("(1)")
                .map(str::to_owned)
        })
        .collect()
}

#[test]
fn every_page_the_manual_names_exists_and_examples_keep_their_lines() {
    let env = Env::new("fs");
    let top = env.run(&["man"]).ok();
    assert!(top.stdout.contains(".nf\nUsage forms:"), "not reflowed");
    let mut pages = named_pages(&top.stdout);
    assert!(pages.contains(&"sessions".to_owned()), "{}", top.stdout);
    let mut seen = 0;
    while let Some(page) = pages.pop() {
        let words: Vec<&str> = page.split('-').collect();
        // A word of a command name may hold a dash (`set-mode`): try the longest names first.
        let mut args = vec!["man"];
        args.extend(&words);
        let r = env.run(&args);
        let r = if r.code == 0 {
            r
        } else {
            env.run(&["man", &page])
        };
        assert_eq!(
            r.code, 0,
            "acpx-{page}(1) is named but `acpx man` cannot print it: {r:?}"
        );
        assert!(r.stdout.contains(".TH"), "{page}");
        assert!(
            !r.stdout.contains("GLOBAL OPTIONS"),
            "{page}: the global options are on acpx(1)"
        );
        pages.extend(named_pages(&r.stdout));
        seen += 1;
    }
    assert!(seen > 20, "{seen} pages");
    assert_eq!(env.run(&["man", "nope"]).code, 2);
}

#[test]
fn a_commands_help_points_at_the_global_options_instead_of_repeating_them() {
    let env = Env::new("fs");
    let h = env.run(&["sessions", "list", "--help"]).ok();
    assert!(
        h.stdout.contains("Usage: acpx sessions list"),
        "{}",
        h.stdout
    );
    assert!(!h.stdout.contains("--approve-reads"), "{}", h.stdout);
    assert!(h.stdout.contains("acpx help global"), "{}", h.stdout);
    let g = env.run(&["help", "global"]).ok();
    assert!(
        g.stdout.contains("--approve-reads") && g.stdout.contains("--store"),
        "{}",
        g.stdout
    );
    let d = env.run(&["demo", "--help"]).ok();
    for word in ["write-file <path>", "terminal", "slow N", "echo <text>"] {
        assert!(d.stdout.contains(word), "{word}: {}", d.stdout);
    }
}

#[test]
fn a_prompt_queued_without_waiting_says_where_it_is() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    env.run(&["--agent", &agent, "sessions", "new"]).ok();
    let r = env
        .run(&["--agent", &agent, "prompt", "--no-wait", "slow", "40"])
        .ok();
    let line = r.stdout.trim();
    assert!(line.starts_with("queued "), "{line}");
    assert!(line.ends_with(" as #1 (see `acpx status`)"), "{line}");
    let q = env
        .run(&[
            "--format",
            "json",
            "--agent",
            &agent,
            "prompt",
            "--no-wait",
            "echo hi",
        ])
        .ok()
        .json();
    assert_eq!(q["action"], "prompt_queued", "{q}");
    assert!(q["position"].as_u64().is_some_and(|p| p >= 1), "{q}");
    env.run(&["--agent", &agent, "cancel"]);
}

#[test]
fn fsck_counts_what_it_skipped_and_repairs_without_a_raw_warning() {
    let env = Env::new("fs");
    let agent = env.agent_cmd("");
    let id = env.new_session(&agent);
    // A torn tail: the report says it was set aside, and no raw ` WARN …` line says it again.
    let log = env
        .home()
        .join("sessions")
        .join(format!("{id}.events.ndjson"));
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    f.write_all(br#"{"seq": 99, "trunc"#).unwrap();
    drop(f);
    let r = env.run(&["fsck"]);
    assert_eq!(r.code, 1, "{r:?}");
    assert_eq!(
        r.stderr.matches("acpx fsck --repair").count(),
        1,
        "one hint: {}",
        r.stderr
    );
    let r = env.run(&["fsck", "--repair"]).ok();
    assert!(!r.stderr.contains("WARN"), "{}", r.stderr);
    assert!(r.stderr.contains("1 repaired"), "{}", r.stderr);
    // A session whose turn is running is skipped, and the summary says so.
    env.run(&["--agent", &agent, "prompt", "--no-wait", "slow", "400"])
        .ok();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let r = loop {
        let r = env.run(&["fsck"]);
        if r.stderr.contains("skipped 1 in use") || std::time::Instant::now() > deadline {
            break r;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(
        r.stderr.contains("checked 0 session(s), skipped 1 in use"),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("to check a skipped session").count(),
        1,
        "{}",
        r.stderr
    );
    env.run(&["--agent", &agent, "cancel"]);
}
