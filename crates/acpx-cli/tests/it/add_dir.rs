//! End to end, every step a separate `acpx` process: `--add-dir` is sent on `sessions new`,
//! again after a `--no-owner` reattach and through the queue owner from the record; a write
//! into the added directory passes acpx's own gate and one outside it does not; an agent that
//! does not advertise `additionalDirectories` is refused, and a missing directory is exit 2.
use crate::common;

use common::*;

#[test]
fn add_dir_is_sent_kept_and_admitted() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd(&format!(
            "--load --resume --additional-dirs --state-dir {}",
            env.home().join("agent").display()
        ));
        let extra = env.home().join("extra");
        std::fs::create_dir_all(&extra).unwrap();
        let extra = std::fs::canonicalize(&extra).unwrap();
        let extra_s = extra.display().to_string();
        env.run(&["--add-dir", &extra_s, "--agent", &agent, "sessions", "new"])
            .ok();
        let want = format!("dirs={extra_s}");
        // Without --add-dir: the record's list, in this process and through the owner.
        let r = env
            .run(&["--no-owner", "--format", "quiet", "--agent", &agent, "dirs"])
            .ok();
        assert_eq!(r.stdout.trim_end(), want, "{r:?}");
        let r = env
            .run(&["--format", "quiet", "--agent", &agent, "dirs"])
            .ok();
        assert_eq!(r.stdout.trim_end(), want, "{r:?}");
        let inside = extra.join("note.txt").display().to_string();
        let r = env
            .run(&[
                "--approve-all",
                "--format",
                "quiet",
                "--agent",
                &agent,
                "write-direct",
                &inside,
                "hello",
            ])
            .ok();
        assert!(r.stdout.contains("Wrote"), "{r:?}");
        assert_eq!(std::fs::read_to_string(&inside).unwrap(), "hello");
        let outside = env.home().join("outside.txt");
        let outside_s = outside.display().to_string();
        let r = env.run(&[
            "--approve-all",
            "--format",
            "quiet",
            "--agent",
            &agent,
            "write-direct",
            &outside_s,
            "no",
        ]);
        assert!(r.stdout.contains("Write failed"), "{r:?}");
        assert!(!outside.exists());
    }
}

#[test]
fn add_dir_is_refused_when_not_advertised_or_missing() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let agent = env.agent_cmd("");
        let dir = env.cwd_str();
        let r = env.run(&["--add-dir", &dir, "--agent", &agent, "sessions", "new"]);
        assert_ne!(r.code, 0, "{r:?}");
        assert!(
            r.stderr.contains("--add-dir")
                && r.stderr
                    .contains("does not advertise sessionCapabilities.additionalDirectories"),
            "{}",
            r.stderr
        );
        let missing = env.home().join("missing").display().to_string();
        let r = env.run(&["--add-dir", &missing, "--agent", &agent, "sessions", "new"]);
        assert_eq!(r.code, 2, "{r:?}");
        assert!(r.stderr.contains(&missing), "{}", r.stderr);
    }
}
