use super::terminals::*;
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn tree() -> (tempfile::TempDir, FsRoot, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\nfour").unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s3cret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), dir.path().join("leak")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("outdir")).unwrap();
    std::os::unix::fs::symlink(dir.path().join("a.txt"), dir.path().join("inner-link")).unwrap();
    let root = FsRoot::new(dir.path()).unwrap();
    (dir, root, outside)
}

#[tokio::test]
async fn reads_are_confined_and_windowed() {
    let (dir, root, outside) = tree();
    let p = |n: &str| dir.path().join(n).display().to_string();
    assert_eq!(
        root.read(&p("a.txt"), None, None).await.unwrap(),
        "one\ntwo\nthree\nfour"
    );
    assert_eq!(
        root.read(&p("a.txt"), Some(2), Some(2)).await.unwrap(),
        "two\nthree\n"
    );
    assert_eq!(root.read(&p("a.txt"), Some(4), None).await.unwrap(), "four");
    assert_eq!(
        root.read(&p("a.txt"), None, Some(1)).await.unwrap(),
        "one\n"
    );
    assert_eq!(root.read(&p("a.txt"), Some(9), Some(1)).await.unwrap(), "");
    assert_eq!(
        root.read(&p("inner-link"), None, Some(1)).await.unwrap(),
        "one\n",
        "links inside the tree are fine"
    );
    for bad in [
        "a.txt".to_owned(),
        format!(
            "{}/../{}/secret.txt",
            dir.path().display(),
            outside.path().file_name().unwrap().to_string_lossy()
        ),
        p("leak"),
        format!("{}/secret.txt", p("outdir")),
        outside.path().join("secret.txt").display().to_string(),
    ] {
        let e = root.read(&bad, None, None).await.unwrap_err();
        assert!(matches!(e, FsError::Refused(_)), "{bad}: {e:?}");
        assert_eq!(i32::from(e.to_sdk().code), -32602);
    }
    assert!(matches!(
        root.read(&p("missing"), None, None).await,
        Err(FsError::NotFound(_))
    ));
}

#[tokio::test]
async fn writes_are_confined_and_create_directories() {
    let (dir, root, outside) = tree();
    let p = |n: &str| dir.path().join(n).display().to_string();
    root.write(&p("new/deep/b.txt"), "hello").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("new/deep/b.txt")).unwrap(),
        "hello"
    );
    root.write(&p("inner-link"), "through a link")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "through a link"
    );
    for bad in [
        p("leak"),
        format!("{}/x.txt", p("outdir")),
        format!("{}/../x.txt", dir.path().display()),
        "rel.txt".into(),
    ] {
        assert!(
            matches!(root.write(&bad, "pwned").await, Err(FsError::Refused(_))),
            "{bad}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "s3cret"
    );
    assert!(!outside.path().join("x.txt").exists());
    // A dangling link is not written through.
    std::os::unix::fs::symlink(outside.path().join("nothing"), dir.path().join("dangling"))
        .unwrap();
    assert!(matches!(
        root.write(&p("dangling"), "x").await,
        Err(FsError::Refused(_))
    ));
    assert!(!outside.path().join("nothing").exists());
}

struct Counting {
    answer: bool,
    asked: AtomicUsize,
}

#[async_trait]
impl PermissionPrompter for Counting {
    async fn ask(&self, _q: &PermissionQuestion) -> bool {
        self.asked.fetch_add(1, Ordering::SeqCst);
        self.answer
    }
}

fn req(kind: Option<&str>, title: &str, options: Value) -> Value {
    let mut tc = json!({"toolCallId": "c", "title": title});
    if let Some(k) = kind {
        tc["kind"] = json!(k);
    }
    json!({"sessionId": "s", "toolCall": tc, "options": options})
}

fn opts() -> Value {
    json!([{"optionId": "a1", "name": "A", "kind": "allow_always"}, {"optionId": "a0", "name": "A0", "kind": "allow_once"},
           {"optionId": "r1", "name": "R", "kind": "reject_always"}, {"optionId": "r0", "name": "R0", "kind": "reject_once"}])
}

#[tokio::test]
async fn permission_policies() {
    use PermissionDecision::*;
    let yes = Counting {
        answer: true,
        asked: AtomicUsize::new(0),
    };
    let no = Counting {
        answer: false,
        asked: AtomicUsize::new(0),
    };
    let edit = req(Some("edit"), "Edit a", opts());
    assert_eq!(
        decide(PermissionMode::ApproveAll, None, &edit).await,
        Approved("a0".into())
    );
    assert_eq!(
        decide(PermissionMode::DenyAll, None, &edit).await,
        Denied("r0".into())
    );
    assert_eq!(
        decide(PermissionMode::ApproveReads, None, &edit).await,
        Denied("r0".into()),
        "no TTY: denied"
    );
    assert_eq!(
        decide(PermissionMode::ApproveReads, Some(&yes), &edit).await,
        Approved("a0".into())
    );
    assert_eq!(
        decide(PermissionMode::ApproveReads, Some(&no), &edit).await,
        Denied("r0".into())
    );
    assert_eq!(
        (
            yes.asked.load(Ordering::SeqCst),
            no.asked.load(Ordering::SeqCst)
        ),
        (1, 1)
    );
    // Reads and searches are allowed without asking, kind given or inferred from the title.
    for r in [
        req(Some("read"), "x", opts()),
        req(Some("search"), "x", opts()),
        req(None, "cat foo", opts()),
        req(None, "grep x", opts()),
    ] {
        assert_eq!(
            decide(PermissionMode::ApproveReads, Some(&no), &r).await,
            Approved("a0".into())
        );
    }
    assert_eq!(no.asked.load(Ordering::SeqCst), 1);
    // No options: cancelled. No reject option under deny-all: cancelled. No allow option: the first.
    assert_eq!(
        decide(PermissionMode::ApproveAll, None, &req(None, "x", json!([]))).await,
        Cancelled
    );
    let only_allow = json!([{"optionId": "ok", "name": "OK", "kind": "allow_once"}]);
    assert_eq!(
        decide(PermissionMode::DenyAll, None, &req(None, "x", only_allow)).await,
        Cancelled
    );
    let only_reject = json!([{"optionId": "no", "name": "No", "kind": "reject_once"}]);
    assert_eq!(
        decide(
            PermissionMode::ApproveAll,
            None,
            &req(None, "x", only_reject)
        )
        .await,
        Approved("no".into())
    );
    assert_eq!(
        Approved("a".into()).outcome(),
        json!({"outcome": "selected", "optionId": "a"})
    );
    assert_eq!(Cancelled.outcome(), json!({"outcome": "cancelled"}));
}

#[tokio::test]
async fn terminal_output_is_capped_keeping_the_end() {
    let terms = Terminals::default();
    let dir = tempfile::tempdir().unwrap();
    let id = terms
        .create(TerminalSpec {
            command: "sh".into(),
            args: vec![
                "-c".into(),
                "printf 'aaaaaaaaaa'; printf 'é'; printf 'bbbb'; echo err >&2; exit 7".into(),
            ],
            env: vec![],
            cwd: dir.path().into(),
            output_limit: 10,
        })
        .unwrap()
        .id;
    let t = terms.get(&id).unwrap();
    let status = t.wait().await;
    assert_eq!(
        status,
        ExitStatus {
            exit_code: Some(7),
            signal: None
        }
    );
    let out = t.output();
    assert_eq!(out["truncated"], json!(true));
    let text = out["output"].as_str().unwrap();
    assert!(text.len() <= 10 && text.ends_with("err\n"), "{text:?}");
    assert_eq!(out["exitStatus"], json!({"exitCode": 7, "signal": null}));
    assert!(terms.get(&id).is_some());
    terms.remove(&id);
    assert!(terms.get(&id).is_none());
}

#[tokio::test]
async fn terminal_kill_stops_the_whole_process_group() {
    let terms = Terminals::default();
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("child.pid");
    // The shell starts a background grandchild that ignores nothing and would outlive a plain kill.
    let script = format!("sleep 60 & echo $! > {}; wait", pidfile.display());
    let id = terms
        .create(TerminalSpec {
            command: "sh".into(),
            args: vec!["-c".into(), script],
            env: vec![],
            cwd: dir.path().into(),
            output_limit: 1000,
        })
        .unwrap()
        .id;
    let t = terms.get(&id).unwrap();
    let mut grandchild = None;
    for _ in 0..100 {
        if let Ok(s) = std::fs::read_to_string(&pidfile) {
            if let Ok(pid) = s.trim().parse::<i32>() {
                grandchild = Some(pid);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let grandchild = grandchild.expect("the script wrote its child's pid");
    assert!(t.is_running());
    tokio::time::timeout(Duration::from_secs(10), t.kill())
        .await
        .unwrap();
    let status = t.wait().await;
    assert_eq!(status.signal.as_deref(), Some("SIGTERM"));
    // The grandchild is gone too (kill(pid, 0) fails with ESRCH once it is reaped or dead).
    let mut gone = false;
    for _ in 0..100 {
        // SAFETY: signal 0 only checks for existence.
        let alive = unsafe { libc::kill(grandchild, 0) } == 0;
        let zombie = std::fs::read_to_string(format!("/proc/{grandchild}/stat"))
            .map(|s| s.split_whitespace().nth(2) == Some("Z"))
            .unwrap_or(true);
        if !alive || zombie {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "grandchild {grandchild} survived the kill");
}

#[test]
fn exit_statuses_read_as_words() {
    let st = |exit_code, signal: Option<&str>| ExitStatus {
        exit_code,
        signal: signal.map(str::to_owned),
    };
    assert_eq!(st(Some(0), None).describe(), "exited with code 0");
    assert_eq!(st(None, Some("SIGTERM")).describe(), "killed by SIGTERM");
    assert_eq!(st(None, None).describe(), "ended");
}

/// An agent that never releases its terminals: past `MAX_TERMINALS` the oldest exited one is
/// forgotten, and with every kept command running a new one is refused, naming the limit.
#[tokio::test]
async fn a_session_keeps_at_most_max_terminals() {
    let terms = Terminals::default();
    let dir = tempfile::tempdir().unwrap();
    let spec = |script: &str| TerminalSpec {
        command: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![],
        cwd: dir.path().into(),
        output_limit: 100,
    };
    let mut ids = Vec::new();
    for i in 0..MAX_TERMINALS {
        // The first two exit at once; the rest run until killed.
        let script = if i < 2 { "exit 0" } else { "exec sleep 60" };
        let created = terms.create(spec(script)).unwrap();
        assert_eq!(created.forgotten, None);
        ids.push(created.id);
    }
    for id in &ids[..2] {
        terms.get(id).unwrap().wait().await;
    }
    let third = terms.create(spec("exit 0")).unwrap();
    assert_eq!(
        third.forgotten.as_ref(),
        Some(&ids[0]),
        "the oldest exited one"
    );
    assert!(terms.get(&ids[0]).is_none());
    let fourth = terms.create(spec("exec sleep 60")).unwrap();
    assert_eq!(
        fourth.forgotten.as_ref(),
        Some(&ids[1]),
        "older than the third"
    );
    terms.get(&third.id).unwrap().wait().await;
    // A command that cannot start forgets nothing (the exited third stays).
    let mut missing = spec("exit 0");
    missing.command = "/nonexistent/acpx-test-command".into();
    assert!(terms.create(missing).is_err());
    assert!(terms.get(&third.id).is_some());
    let fifth = terms.create(spec("exec sleep 60")).unwrap();
    assert_eq!(fifth.forgotten, Some(third.id));
    // Every kept command runs now.
    let refused = terms.create(spec("exit 0")).unwrap_err().to_string();
    assert!(
        refused.contains(&format!("{MAX_TERMINALS} terminal commands"))
            && refused.contains("terminal/release"),
        "{refused}"
    );
    tokio::time::timeout(Duration::from_secs(30), terms.release_all())
        .await
        .unwrap();
}

#[tokio::test]
async fn a_file_with_another_hard_link_is_not_written() {
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    std::fs::write(&secret, "keep").unwrap();
    let inside = dir.path().join("innocent.txt");
    std::fs::hard_link(&secret, &inside).unwrap();
    let root = FsRoot::new(dir.path()).unwrap();
    let err = root
        .write(inside.to_str().unwrap(), "changed")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, FsError::Refused(m) if m.contains("hard links")),
        "{err:?}"
    );
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "keep");
    // A file of one link is written as before.
    let plain = dir.path().join("plain.txt");
    std::fs::write(&plain, "a").unwrap();
    root.write(plain.to_str().unwrap(), "b").await.unwrap();
    assert_eq!(std::fs::read_to_string(&plain).unwrap(), "b");
}

/// `--add-dir`: paths inside an additional root are admitted (read, write, a link into it),
/// paths outside every root still are not, and the refusal names the additional roots.
#[tokio::test]
async fn additional_roots_are_admitted() {
    let (dir, root, outside) = tree();
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("shared.txt"), "shared").unwrap();
    let root = root.with_additional(&[extra.path().to_path_buf()]).unwrap();
    let shared = extra.path().join("shared.txt").display().to_string();
    assert_eq!(root.read(&shared, None, None).await.unwrap(), "shared");
    let new = extra.path().join("sub/new.txt").display().to_string();
    root.write(&new, "made").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(extra.path().join("sub/new.txt")).unwrap(),
        "made"
    );
    std::os::unix::fs::symlink(extra.path(), dir.path().join("to-extra")).unwrap();
    let via_link = dir.path().join("to-extra/shared.txt").display().to_string();
    assert!(root.resolve_existing(&via_link).is_ok());
    let secret = outside.path().join("secret.txt").display().to_string();
    let err = root.resolve_existing(&secret).unwrap_err();
    assert!(
        matches!(&err, FsError::Refused(m) if m.contains("additional directories")),
        "{err:?}"
    );
}
