//! Progress bars of `migrate`, `fsck` and `sessions prune`: drawn on stderr when it is a
//! terminal (a pty from `script -qec`), never when it is not, never with `--format json`.

use crate::common;

use std::process::Command;

use common::{acpx_bin, Env, Seed};

const AGENT: &str = "some-agent --acp";
const SESSIONS: usize = 3;

/// An fs store with three closed sessions from 2020.
fn seeded() -> Env {
    let env = Env::new("fs");
    let cwd = env.cwd_str();
    for i in 0..SESSIONS {
        let id = format!("rec-{i}");
        let mut s = Seed::new(&id, &cwd, AGENT);
        s.closed_at = Some("2020-01-01T00:00:00.000Z");
        env.import_archive(&s.archive());
    }
    env
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs acpx with `args` under a pty (`script -qec`); returns what the terminal showed.
fn on_a_terminal(env: &Env, args: &[&str]) -> (i32, String) {
    let mut line = vec![
        quote(&acpx_bin().to_string_lossy()),
        "--home".into(),
        quote(&env.home().to_string_lossy()),
        "--store".into(),
        "fs".into(),
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
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const COMMANDS: [(&[&str], &str); 3] = [
    (&["fsck"], "checking"),
    (
        &["sessions", "prune", "--before", "2021-01-01", "--dry-run"],
        "pruning",
    ),
    (&["migrate", "--to", "sqlite"], "migrating"),
];

#[test]
fn no_bar_when_stderr_is_not_a_terminal() {
    let env = seeded();
    for (args, label) in COMMANDS {
        let r = env.run(args).ok();
        assert!(!r.stderr.contains(label), "{args:?}: {}", r.stderr);
        assert!(!r.stderr.contains("sessions \u{1b}"), "{}", r.stderr);
        assert!(
            !r.stderr.contains(&format!("{SESSIONS}/{SESSIONS}")),
            "{}",
            r.stderr
        );
    }
}

#[test]
fn a_bar_on_a_terminal_and_none_with_json() {
    let env = seeded();
    for (args, label) in COMMANDS {
        let (code, shown) = on_a_terminal(&env, args);
        assert_eq!(code, 0, "{args:?}: {shown}");
        assert!(
            shown.contains(label) && shown.contains(&format!("{SESSIONS}/{SESSIONS} sessions")),
            "{args:?}: {shown}"
        );
    }
    let env = seeded();
    for (args, label) in COMMANDS {
        let mut json = vec!["--format", "json"];
        json.extend(args);
        let (code, shown) = on_a_terminal(&env, &json);
        assert_eq!(code, 0, "{json:?}: {shown}");
        assert!(!shown.contains(label), "{json:?}: {shown}");
        assert!(
            !shown.contains(&format!("{SESSIONS}/{SESSIONS} sessions")),
            "{shown}"
        );
    }
}
