//! `--add-dir` (`RuntimeOptions::additional_directories`): sent as `additionalDirectories` on
//! session/new and on every reattach (resume, load, the fallback) from the record, admitted by
//! acpx's own fs confinement, and refused for an agent that does not advertise it.

use crate::common;
use common::*;

use acpx_owner::local::{self, LocalEvent};
use acpx_runtime::{text_prompt, Attachment, RuntimeError, RuntimeOptions};
use tokio::sync::watch;

backend_tests! {
    sent_on_new_and_every_reattach => sent_on_new_and_every_reattach;
    refused_unless_advertised => refused_unless_advertised;
    a_fork_carries_them => a_fork_carries_them;
}

async fn sent_on_new_and_every_reattach(env: Env) {
    let extra = env.dir.path().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let extra = std::fs::canonicalize(&extra).unwrap();
    let outside = env.dir.path().join("outside.txt");
    let rt = env.runtime(RuntimeOptions {
        additional_directories: vec![extra.clone()],
        ..approve_all()
    });
    let mut s = rt
        .open_new(env.spec(env.loading_agent("--resume --additional-dirs")))
        .await
        .unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt("dirs")).await.unwrap();
    assert_eq!(out.agent_text, format!("dirs={}", extra.display()));
    // acpx's own confinement admits the added directory, and still nothing else.
    let inside = extra.join("note.txt");
    let out = s
        .prompt(text_prompt(&format!(
            "write-direct {} hello",
            inside.display()
        )))
        .await
        .unwrap();
    assert!(out.agent_text.starts_with("Wrote"), "{}", out.agent_text);
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "hello");
    let out = s
        .prompt(text_prompt(&format!(
            "write-direct {} no",
            outside.display()
        )))
        .await
        .unwrap();
    assert!(
        out.agent_text.starts_with("Write failed"),
        "{}",
        out.agent_text
    );
    assert!(!outside.exists());
    s.shutdown().await.unwrap();
    assert_eq!(
        env.stored(&id).await.acpx.extra["additional_directories"],
        serde_json::json!([extra.display().to_string()])
    );
    // A later command without --add-dir sends the stored list again (resume)...
    let rt = env.runtime(approve_all());
    let mut s = rt.open_existing(&id).await.unwrap();
    assert!(
        matches!(s.attachment(), Attachment::Reattached { method, .. } if method == "session/resume")
    );
    let out = s.prompt(text_prompt("dirs")).await.unwrap();
    assert_eq!(out.agent_text, format!("dirs={}", extra.display()));
    s.shutdown().await.unwrap();
    // ... and on load, for an agent that only loads.
    let store = env.reopen_store();
    let mut r = store.load(&id).await.unwrap();
    r.agent_command = env.loading_agent("--additional-dirs");
    store.save(&mut r).await.unwrap();
    let mut s = rt.open_existing(&id).await.unwrap();
    assert!(
        matches!(s.attachment(), Attachment::Reattached { method, .. } if method == "session/load")
    );
    let out = s.prompt(text_prompt("dirs")).await.unwrap();
    assert_eq!(out.agent_text, format!("dirs={}", extra.display()));
    s.shutdown().await.unwrap();
}

async fn refused_unless_advertised(env: Env) {
    let rt = env.runtime(RuntimeOptions {
        additional_directories: vec![env.cwd.clone()],
        ..approve_all()
    });
    let agent = env.loading_agent("");
    let err = rt.open_new(env.spec(agent.clone())).await.unwrap_err();
    assert!(matches!(err, RuntimeError::InvalidInput(_)), "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&agent) && text.contains("--add-dir"),
        "{text}"
    );
    // A directory that does not exist is named.
    let missing = env.dir.path().join("missing");
    let rt = env.runtime(RuntimeOptions {
        additional_directories: vec![missing.clone()],
        ..approve_all()
    });
    let err = rt
        .open_new(env.spec(env.loading_agent("--additional-dirs")))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
}

/// Both fork paths (the agent's `session/fork`, and by copy in a fresh session) send the
/// parent's directories, and the child keeps them for its own reattaches.
async fn a_fork_carries_them(env: Env) {
    let extra = std::fs::canonicalize(env.dir.path()).unwrap().join("extra");
    std::fs::create_dir_all(&extra).unwrap();
    let want = format!("dirs={}", extra.display());
    let home = env.dir.path().join("home");
    for (flags, method) in [("--fork", "session/fork"), ("", "copy")] {
        let agent = env.loading_agent(&format!("--additional-dirs {flags}"));
        let rt = env.runtime(RuntimeOptions {
            additional_directories: vec![extra.clone()],
            ..approve_all()
        });
        let mut s = rt.open_new(env.spec(agent)).await.unwrap();
        let id = s.id().clone();
        s.prompt(text_prompt("hello")).await.unwrap();
        s.shutdown().await.unwrap();
        let rt = env.runtime(approve_all());
        let (_press, interrupts) = watch::channel(0);
        let mut by_copy = false;
        let (_, mut child) = local::fork_keeping_agent(
            &rt,
            &home,
            &id,
            acpx_model::RecordId::generate(),
            None,
            None,
            interrupts,
            |e| by_copy |= matches!(e, LocalEvent::ForkByCopy),
        )
        .await
        .unwrap();
        assert_eq!(by_copy, method == "copy");
        if method == "copy" {
            // A child by copy gets the parent's conversation quoted with its first prompt.
            child.prompt(text_prompt("hello again")).await.unwrap();
        }
        let out = child.prompt(text_prompt("dirs")).await.unwrap();
        assert_eq!(out.agent_text, want, "{method}");
        let child_id = child.id().clone();
        child.shutdown().await.unwrap();
        assert_eq!(
            env.stored(&child_id).await.acpx.extra["additional_directories"],
            serde_json::json!([extra.display().to_string()]),
            "{method}"
        );
        let mut s = rt.open_existing(&child_id).await.unwrap();
        let out = s.prompt(text_prompt("dirs")).await.unwrap();
        assert_eq!(out.agent_text, want, "{method}: the child's reattach");
        s.shutdown().await.unwrap();
    }
}
