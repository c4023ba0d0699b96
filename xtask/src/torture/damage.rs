//! A corpus of damaged homes: each damage is applied to a fresh copy of a home holding two
//! sessions (one damaged, one intact), then every command runs on it. Each must end with a
//! clear error or succeed: never exit 101, never print a panic, never hang, and a failure
//! must say why (stderr, or a JSON error object). Exit codes are reported per damage, so the
//! figures show *how* acpx answers (e.g. which commands a broken config blocks).

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::harness::{first_line, Env, Figures};
use super::Plan;

/// One way of damaging a home.
struct Damage {
    name: &'static str,
    apply: fn(&Path, &str) -> Result<(), String>,
}

fn sessions(home: &Path) -> PathBuf {
    home.join("sessions")
}

fn io(what: &Path) -> impl Fn(std::io::Error) -> String + '_ {
    move |e| format!("{}: {e}", what.display())
}

fn rewrite(path: &Path, f: impl FnOnce(Vec<u8>) -> Vec<u8>) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    std::fs::write(path, f(bytes)).map_err(io(path))
}

const GARBAGE: &[u8] = b"\x00\xff\xfegarbage {\"not\": json\n";

fn bad_config(home: &Path, _: &str) -> Result<(), String> {
    let p = home.join("config.json");
    std::fs::write(&p, b"{\"format\": \"json\",\n \"agents\": {").map_err(io(&p))
}

fn mistyped_config(home: &Path, _: &str) -> Result<(), String> {
    let p = home.join("config.json");
    std::fs::write(&p, br#"{"timeout": "soon", "agents": 5, "ttl": -3}"#).map_err(io(&p))
}

const FS_DAMAGES: &[Damage] = &[
    Damage {
        name: "truncated snapshot",
        apply: |home, id| {
            rewrite(&sessions(home).join(format!("{id}.json")), |b| {
                b[..b.len() / 3].to_vec()
            })
        },
    },
    Damage {
        name: "garbage snapshot",
        apply: |home, id| {
            rewrite(&sessions(home).join(format!("{id}.json")), |_| {
                GARBAGE.to_vec()
            })
        },
    },
    Damage {
        name: "missing snapshot (log intact)",
        apply: |home, id| {
            let p = sessions(home).join(format!("{id}.json"));
            std::fs::remove_file(&p).map_err(io(&p))
        },
    },
    Damage {
        name: "torn log tail",
        apply: |home, id| {
            rewrite(
                &sessions(home).join(format!("{id}.events.ndjson")),
                |mut b| {
                    b.extend_from_slice(b"{\"eventVersion\":1,\"seq\":");
                    b
                },
            )
        },
    },
    Damage {
        name: "garbage line inside the log",
        apply: |home, id| {
            rewrite(&sessions(home).join(format!("{id}.events.ndjson")), |b| {
                let lines: Vec<&[u8]> = b.split_inclusive(|c| *c == b'\n').collect();
                let mid = lines.len() / 2;
                let mut out = lines[..mid].concat();
                out.extend_from_slice(GARBAGE);
                out.extend_from_slice(&lines[mid..].concat());
                out
            })
        },
    },
    Damage {
        name: "garbage segment anchor (older segment starts with garbage)",
        apply: |home, id| {
            let active = sessions(home).join(format!("{id}.events.ndjson"));
            let older = sessions(home).join(format!("{id}.events.1.ndjson"));
            let bytes = std::fs::read(&active).map_err(io(&active))?;
            let lines: Vec<&[u8]> = bytes.split_inclusive(|c| *c == b'\n').collect();
            let mid = lines.len() / 2;
            let mut first = GARBAGE.to_vec();
            first.extend_from_slice(&lines[1..mid].concat());
            std::fs::write(&older, first).map_err(io(&older))?;
            std::fs::write(&active, lines[mid..].concat()).map_err(io(&active))
        },
    },
    Damage {
        name: "garbage .index.json",
        apply: |home, _| {
            let p = sessions(home).join(".index.json");
            std::fs::write(&p, GARBAGE).map_err(io(&p))
        },
    },
    Damage {
        name: "garbage .search.ndjson",
        apply: |home, _| {
            let p = sessions(home).join(".search.ndjson");
            std::fs::write(&p, GARBAGE).map_err(io(&p))
        },
    },
    Damage {
        name: "config.json not JSON",
        apply: bad_config,
    },
    Damage {
        name: "config.json with wrong types",
        apply: mistyped_config,
    },
];

fn sql(home: &Path, statement: &str) -> Result<(), String> {
    let db = home.join("acpx.db");
    let conn = rusqlite::Connection::open(&db).map_err(|e| format!("{}: {e}", db.display()))?;
    conn.execute_batch(statement)
        .map_err(|e| format!("{statement}: {e}"))
}

const SQLITE_DAMAGES: &[Damage] = &[
    Damage {
        name: "garbage document",
        apply: |home, id| {
            sql(
                home,
                &format!("UPDATE sessions SET document = 'garbage' WHERE acpx_record_id = '{id}'"),
            )
        },
    },
    Damage {
        name: "truncated document",
        apply: |home, id| {
            sql(
                home,
                &format!(
                    "UPDATE sessions SET document = substr(document, 1, 200) \
                     WHERE acpx_record_id = '{id}'"
                ),
            )
        },
    },
    Damage {
        name: "garbage event payload",
        apply: |home, id| {
            sql(
                home,
                &format!(
                    "UPDATE event_rows SET payload = '{{' WHERE seq = 3 AND session_key = \
                     (SELECT session_key FROM sessions WHERE acpx_record_id = '{id}')"
                ),
            )
        },
    },
    Damage {
        name: "truncated database file",
        apply: |home, _| rewrite(&home.join("acpx.db"), |b| b[..b.len() / 2].to_vec()),
    },
    Damage {
        name: "garbage database header",
        apply: |home, _| {
            rewrite(&home.join("acpx.db"), |mut b| {
                for (i, byte) in b.iter_mut().take(4096).enumerate() {
                    *byte = GARBAGE[i % GARBAGE.len()];
                }
                b
            })
        },
    },
    Damage {
        name: "config.json not JSON",
        apply: bad_config,
    },
    Damage {
        name: "config.json with wrong types",
        apply: mistyped_config,
    },
];

fn copy_dir(from: &Path, to: &Path) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(io(to))?;
    for entry in std::fs::read_dir(from).map_err(io(from))? {
        let entry = entry.map_err(io(from))?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(io(&entry.path()))?;
        if kind.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target).map_err(io(&entry.path()))?;
        }
    }
    Ok(())
}

/// A home with two sessions of a few turns each; the id of the one to damage.
fn base_home(env: &Env) -> Result<String, String> {
    let other = env.run(
        &["--no-owner", "demo", "sessions", "new", "--name", "intact"],
        Duration::from_secs(60),
    );
    if other.code != Some(0) {
        return Err(format!("sessions new: {}", first_line(&other.stderr)));
    }
    let _ = env.run(
        &[
            "--no-owner",
            "demo",
            "prompt",
            "-s",
            "intact",
            "echo intact",
        ],
        Duration::from_secs(60),
    );
    let id = env.new_session()?;
    for p in ["echo one", "tools", "stream 50"] {
        let r = env.run(
            &["--no-owner", "demo", "prompt", p],
            Duration::from_secs(60),
        );
        if r.code != Some(0) {
            return Err(format!("prompt {p:?}: {}", first_line(&r.stderr)));
        }
    }
    Ok(id)
}

pub fn corpus(plan: &Plan, store: &str) -> Figures {
    let mut f = Figures::new("damaged files corpus", store);
    let base = match Env::new(&plan.acpx, store) {
        Ok(e) => e,
        Err(e) => {
            f.not_run = Some(e);
            return f;
        }
    };
    let id = match base_home(&base) {
        Ok(id) => id,
        Err(e) => {
            f.failures += 1;
            f.note(e);
            return f;
        }
    };
    let damages = if store == "sqlite" {
        SQLITE_DAMAGES
    } else {
        FS_DAMAGES
    };
    let commands: Vec<(&str, Vec<&str>)> = vec![
        ("version", vec!["--version"]),
        ("help", vec!["--help"]),
        ("config", vec!["config", "show"]),
        ("list", vec!["sessions", "list"]),
        ("show", vec!["demo", "sessions", "show", &id]),
        ("events", vec!["demo", "sessions", "events", &id]),
        ("history", vec!["demo", "sessions", "history", &id]),
        ("status", vec!["demo", "status"]),
        (
            "prompt",
            vec!["--no-owner", "demo", "prompt", "echo after damage"],
        ),
        ("fsck", vec!["fsck"]),
        ("repair", vec!["fsck", "--repair"]),
        ("fsck2", vec!["fsck"]),
        (
            "prompt2",
            vec!["--no-owner", "demo", "prompt", "echo after repair"],
        ),
    ];
    // The demo agent's command names its home, so a damaged copy must live at the same path:
    // the pristine home is kept aside and copied back before each damage.
    let Some(root) = base.home.parent().map(Path::to_path_buf) else {
        f.not_run = Some("the home has no parent directory".into());
        return f;
    };
    let pristine = root.join("pristine");
    if let Err(e) = copy_dir(&base.home, &pristine) {
        f.not_run = Some(format!("cannot copy the home: {e}"));
        return f;
    }
    let env = &base;
    for damage in damages {
        let _ = std::fs::remove_dir_all(&env.home);
        if let Err(e) = copy_dir(&pristine, &env.home).and_then(|()| (damage.apply)(&env.home, &id))
        {
            f.failures += 1;
            f.note(format!("{}: cannot prepare: {e}", damage.name));
            continue;
        }
        let mut exits = Vec::new();
        for (label, args) in &commands {
            let run = env.run(args, Duration::from_secs(60));
            f.tried += 1;
            let what = format!("{}: acpx {}", damage.name, args.join(" "));
            f.check_panic(&what, &run);
            if run.timed_out {
                f.failures += 1;
                f.note(format!("{what}: hung for 60 s"));
            } else if run.code != Some(0) && !run.explained() {
                f.failures += 1;
                f.note(format!("{what}: exit {:?} without a message", run.code));
            }
            exits.push(format!(
                "{label}={}",
                run.code.map_or("killed".into(), |c| c.to_string())
            ));
        }
        f.note(format!("{}: exits {}", damage.name, exits.join(" ")));
    }
    f
}
