//! One decision per action (docs/format.md § One decision per action), against the scripted
//! agent on every backend: an approved permission request covers the write or terminal of its
//! tool call; "always" / "never" answers are remembered for the session, in its record, and
//! hold after it is opened again; a write no approval covers is still asked about.
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use acpx_runtime::permission_rules::PermissionRules;
use acpx_runtime::{
    text_prompt, PermissionAnswer, PermissionMode, PermissionPrompter, PermissionQuestion,
    RuntimeOptions,
};
use async_trait::async_trait;
use common::*;
use serde_json::json;

/// A human who gives the same answer every time, and counts the questions by method.
struct Human {
    answer: PermissionAnswer,
    asked: Mutex<Vec<String>>,
    count: AtomicUsize,
}

#[async_trait]
impl PermissionPrompter for Human {
    async fn ask(&self, q: &PermissionQuestion) -> bool {
        self.answer(q).await.approved
    }

    async fn answer(&self, q: &PermissionQuestion) -> PermissionAnswer {
        self.count.fetch_add(1, Ordering::SeqCst);
        self.asked.lock().unwrap().push(q.method.clone());
        self.answer
    }
}

fn human(approved: bool, always: bool) -> Arc<Human> {
    Arc::new(Human {
        answer: PermissionAnswer { approved, always },
        asked: Mutex::new(Vec::new()),
        count: AtomicUsize::new(0),
    })
}

fn asking(h: &Arc<Human>) -> RuntimeOptions {
    RuntimeOptions {
        permission_mode: PermissionMode::ApproveReads,
        prompter: Some(h.clone() as Arc<dyn PermissionPrompter>),
        ..RuntimeOptions::default()
    }
}

backend_tests! {
    an_approved_tool_call_covers_its_write_and_its_terminal => covered;
    a_policy_rule_approval_covers_the_write_without_a_terminal => covered_by_rule;
    a_write_no_approval_covers_is_still_asked => uncovered;
    always_and_never_are_remembered_for_the_session_and_survive_reopening => remembered;
}

/// `y` to the agent's question: the write and the terminal of that tool call are not asked
/// again, and their events name the tool call that covered them.
async fn covered(env: Env) {
    let h = human(true, false);
    let rt = env.runtime(asking(&h));
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let target = env.cwd.join("covered.txt").display().to_string();
    let out = s
        .prompt(text_prompt(&format!("write-file {target} hello")))
        .await
        .unwrap();
    assert_eq!(out.agent_text, format!("Wrote {target}."));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello");
    let out = s.prompt(text_prompt("terminal echo hi")).await.unwrap();
    assert!(out.agent_text.contains("output=hi"), "{}", out.agent_text);
    assert_eq!(
        *h.asked.lock().unwrap(),
        ["session/request_permission", "session/request_permission"],
        "one question per action"
    );
    // One decision counted per turn, as the agent asked once.
    assert_eq!(out.permission_stats.requested, 1);
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let write = client_ops(&ev, "fs/write_text_file");
    assert_eq!(write[0].payload["status"], "completed");
    assert_eq!(write[0].payload["coveredBy"], "call_write");
    let create = client_ops(&ev, "terminal/create");
    assert_eq!(create[0].payload["coveredBy"], "call_term");
}

/// `--permission-policy '{"autoApprove":["edit"],"defaultAction":"deny"}'` under approve-reads
/// with nobody to ask: the rule's approval lets the write through.
async fn covered_by_rule(env: Env) {
    let rules =
        PermissionRules::from_json(&json!({"autoApprove": ["edit"], "defaultAction": "deny"}))
            .unwrap();
    let o = RuntimeOptions {
        permission_mode: PermissionMode::ApproveReads,
        permission_rules: Some(rules),
        ..RuntimeOptions::default()
    };
    let rt = env.runtime(o);
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let target = env.cwd.join("ruled.txt").display().to_string();
    let out = s
        .prompt(text_prompt(&format!("write-file {target} ruled")))
        .await
        .unwrap();
    assert_eq!(out.agent_text, format!("Wrote {target}."));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "ruled");
    // The rule denies a terminal (execute is not approved): nothing ran.
    let marker = env.cwd.join("ran");
    let out = s
        .prompt(text_prompt(&format!("terminal touch {}", marker.display())))
        .await
        .unwrap();
    assert_eq!(out.agent_text, "Permission denied.");
    assert!(!marker.exists());
    s.shutdown().await.unwrap();
}

/// A write the agent never asked about (no approved tool call) goes through acpx's gate: a
/// refusal there refuses it; a finished tool call's approval no longer covers anything.
async fn uncovered(env: Env) {
    let h = human(false, false);
    let rt = env.runtime(asking(&h));
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let target = env.cwd.join("direct.txt").display().to_string();
    let out = s
        .prompt(text_prompt(&format!("write-direct {target} x")))
        .await
        .unwrap();
    assert!(
        out.agent_text.contains("refused writing"),
        "{}",
        out.agent_text
    );
    assert!(!std::path::Path::new(&target).exists());
    assert_eq!(*h.asked.lock().unwrap(), ["fs/write_text_file"]);
    s.shutdown().await.unwrap();
}

/// "Always": the agent's `allow_always` option is selected, and no later question of that
/// kind is asked, in this session or after it is opened again; "never" refuses likewise.
async fn remembered(env: Env) {
    let h = human(true, true);
    let rt = env.runtime(asking(&h));
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let a = env.cwd.join("a.txt").display().to_string();
    s.prompt(text_prompt(&format!("write-file {a} 1")))
        .await
        .unwrap();
    assert_eq!(h.count.load(Ordering::SeqCst), 1);
    // acpx's own gate (a write nobody asked about) is an edit too: answered already.
    s.prompt(text_prompt(&format!("write-direct {a} 2")))
        .await
        .unwrap();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "2");
    assert_eq!(h.count.load(Ordering::SeqCst), 1);
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let (_, decided) = permission_ops(&ev);
    assert_eq!(
        decided[0].payload["optionId"], "always",
        "the agent's allow_always"
    );
    assert_eq!(decided[0].payload["always"], "allow");
    assert_eq!(decided[0].payload["alwaysKey"], "kind:edit");
    let direct = client_ops(&ev, "fs/write_text_file");
    assert_eq!(direct.last().unwrap().payload["fromAlways"], "kind:edit");
    let stored = env.stored(&id).await;
    assert_eq!(
        stored.acpx.extra["permission_always"],
        json!({"kind:edit": "allow"})
    );

    // Opened again (a new process would do the same): still answered, nobody asked.
    let later = human(false, false);
    let rt = env.runtime(asking(&later));
    let mut s = rt.open_existing(&id).await.unwrap();
    let out = s
        .prompt(text_prompt(&format!("write-file {a} 3")))
        .await
        .unwrap();
    assert_eq!(out.agent_text, format!("Wrote {a}."));
    assert_eq!(later.count.load(Ordering::SeqCst), 0);
    s.shutdown().await.unwrap();

    // "Never" for executions: refused now and later, asked once.
    let never = human(false, true);
    let rt = env.runtime(asking(&never));
    let mut s = rt.open_existing(&id).await.unwrap();
    let marker = env.cwd.join("never");
    for _ in 0..2 {
        let out = s
            .prompt(text_prompt(&format!("terminal touch {}", marker.display())))
            .await
            .unwrap();
        assert_eq!(out.agent_text, "Permission denied.");
    }
    assert!(!marker.exists());
    assert_eq!(never.count.load(Ordering::SeqCst), 1);
    s.shutdown().await.unwrap();
    let stored = env.stored(&id).await;
    assert_eq!(
        stored.acpx.extra["permission_always"],
        json!({"kind:edit": "allow", "kind:execute": "reject"})
    );
}
