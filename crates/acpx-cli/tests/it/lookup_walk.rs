//! The session of a scope and of a typed word, found by separate `acpx` processes while other
//! processes create, use and close sessions: nearest directory first, then the newest; an
//! unnamed lookup never takes a named session; a word is an id, an ACP id or a suffix before
//! it is a name. The file store answers these from one listing per command
//! (docs/format.md § Finding a session among many); both stores must answer the same.

use crate::common;

use common::{Env, BACKENDS};

/// The record id `sessions show [WORD]` finds from `cwd`, or the failed run.
fn shown(env: &Env, agent: &str, cwd: &str, word: Option<&str>) -> Result<String, String> {
    let mut args = vec!["--format", "json", "--agent", agent, "--cwd", cwd];
    args.extend(["sessions", "show"]);
    args.extend(word);
    let r = env.run(&args);
    if r.code != 0 {
        return Err(r.stderr);
    }
    Ok(r.json()["acpxRecordId"].as_str().unwrap().to_owned())
}

fn new_session(env: &Env, agent: &str, cwd: &str, name: Option<&str>) -> String {
    let mut args = vec!["--format", "json", "--agent", agent, "--cwd", cwd];
    args.extend(["sessions", "new"]);
    if let Some(n) = name {
        args.extend(["--name", n]);
    }
    env.run(&args).ok().json()["acpxRecordId"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn separate_processes_find_the_nearest_then_newest_session() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let root = env.cwd();
        let a = root.join("a");
        let deep = a.join("b");
        std::fs::create_dir_all(&deep).unwrap();
        let (root, a, deep) = (
            root.to_string_lossy().into_owned(),
            a.to_string_lossy().into_owned(),
            deep.to_string_lossy().into_owned(),
        );

        // Nothing yet: exit 4 names the scope.
        let r = env.run(&["--agent", &agent, "--cwd", &deep, "sessions", "show"]);
        assert_eq!(r.code, 4, "{backend}: {r:?}");

        let at_root = new_session(&env, &agent, &root, None);
        let named = new_session(&env, &agent, &root, Some("n"));
        assert_eq!(
            shown(&env, &agent, &deep, None).as_deref(),
            Ok(at_root.as_str())
        );
        assert_eq!(
            shown(&env, &agent, &deep, Some("n")).as_deref(),
            Ok(named.as_str())
        );

        // Created by another process nearer the working directory, then the root session
        // used (newer): the nearer one still wins.
        let in_a = new_session(&env, &agent, &a, None);
        env.run(&[
            "--no-owner",
            "--agent",
            &agent,
            "--cwd",
            &root,
            "echo",
            "hi",
        ])
        .ok();
        assert_eq!(
            shown(&env, &agent, &deep, None).as_deref(),
            Ok(in_a.as_str())
        );
        assert_eq!(
            shown(&env, &agent, &root, None).as_deref(),
            Ok(at_root.as_str())
        );

        // Typed words: a suffix of a record id, a name, and a suffix shared by none.
        let suffix = &in_a[in_a.len() - 12..];
        assert_eq!(
            shown(&env, &agent, &root, Some(suffix)).as_deref(),
            Ok(in_a.as_str())
        );
        assert!(shown(&env, &agent, &deep, Some("no-such-word")).is_err());

        // Several processes create sessions in the deepest directory while others look up.
        let creators: Vec<_> = (0..3)
            .map(|_| {
                env.cmd()
                    .args(["--format", "json", "--agent", &agent, "--cwd", &deep])
                    .args(["sessions", "new"])
                    .output_async()
            })
            .collect();
        let lookers: Vec<_> = (0..3)
            .map(|_| {
                env.cmd()
                    .args(["--format", "json", "--agent", &agent, "--cwd", &deep])
                    .args(["sessions", "show"])
                    .output_async()
            })
            .collect();
        let mut created = Vec::new();
        for c in creators {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "{backend}: {out:?}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            created.push(v["acpxRecordId"].as_str().unwrap().to_owned());
        }
        for l in lookers {
            let out = l.wait_with_output().unwrap();
            assert!(out.status.success(), "{backend}: {out:?}");
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let id = v["acpxRecordId"].as_str().unwrap();
            // Before the creators, the session of `a`; after any of them, one of theirs.
            assert!(
                id == in_a || created.iter().any(|c| c == id),
                "{backend}: looked up {id}"
            );
        }
        let found = shown(&env, &agent, &deep, None).unwrap();
        assert!(
            created.contains(&found),
            "{backend}: {found} not in {created:?}"
        );

        // Closed by another process: the walk goes on up.
        for id in &created {
            env.run(&["--agent", &agent, "sessions", "close", id]).ok();
        }
        assert_eq!(
            shown(&env, &agent, &deep, None).as_deref(),
            Ok(in_a.as_str())
        );
        env.run(&["--agent", &agent, "sessions", "close", &in_a])
            .ok();
        assert_eq!(
            shown(&env, &agent, &deep, None).as_deref(),
            Ok(at_root.as_str())
        );
        // A closed session is still found by its id.
        assert_eq!(
            shown(&env, &agent, &deep, Some(&in_a)).as_deref(),
            Ok(in_a.as_str())
        );
    }
}

/// `Command::spawn` with captured output, for processes run side by side.
trait SpawnCaptured {
    fn output_async(&mut self) -> std::process::Child;
}

impl SpawnCaptured for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}
