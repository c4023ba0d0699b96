//! The client side of ACP (permissions, fs, terminals) against the scripted agent, on every
//! backend.
use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use acpx_runtime::{
    text_prompt, PermissionMode, PermissionPrompter, PermissionQuestion, RuntimeOptions,
};
use async_trait::async_trait;
use common::*;
use serde_json::json;

struct Prompter {
    answer: Option<bool>,
    asked: AtomicUsize,
}

#[async_trait]
impl PermissionPrompter for Prompter {
    async fn ask(&self, _q: &PermissionQuestion) -> bool {
        self.asked.fetch_add(1, Ordering::SeqCst);
        match self.answer {
            Some(a) => a,
            // A human who never answers.
            None => std::future::pending().await,
        }
    }
}

fn prompter(answer: Option<bool>) -> Arc<Prompter> {
    Arc::new(Prompter {
        answer,
        asked: AtomicUsize::new(0),
    })
}

fn opts(mode: PermissionMode, p: Option<Arc<Prompter>>) -> RuntimeOptions {
    RuntimeOptions {
        permission_mode: mode,
        prompter: p.map(|p| p as Arc<dyn PermissionPrompter>),
        ..RuntimeOptions::default()
    }
}

backend_tests! {
    permission_policies_decide_and_are_counted => permission_policies;
    a_permission_request_fills_in_its_tool_call => permission_tool_call;
    pending_permission_requests_are_cancelled_with_the_turn => permission_cancel;
    fs_reads_and_writes_stay_inside_the_session_directory => fs_confinement;
    writes_follow_the_permission_policy => fs_write_policy;
    terminals_run_cap_output_and_kill => terminals;
    terminals_are_refused_under_deny_all => terminal_denied;
    a_session_keeps_at_most_64_unreleased_terminals => unreleased_terminals;
}

async fn run_one(
    env: &Env,
    o: RuntimeOptions,
    prompt: &str,
) -> (
    acpx_runtime::TurnOutcome,
    acpx_model::SessionRecord,
    Vec<acpx_model::EventEnvelope>,
) {
    let rt = env.runtime(o);
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s.prompt(text_prompt(prompt)).await.unwrap();
    let r = s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    (out, r, ev)
}

async fn permission_policies(env: Env) {
    type Case = (
        PermissionMode,
        Option<Arc<Prompter>>,
        &'static str,
        &'static str,
        [u64; 4],
    );
    let cases: Vec<Case> = vec![
        (
            PermissionMode::ApproveAll,
            None,
            "permission edit",
            "selected allow",
            [1, 1, 0, 0],
        ),
        (
            PermissionMode::DenyAll,
            None,
            "permission edit",
            "selected reject",
            [1, 0, 1, 0],
        ),
        (
            PermissionMode::ApproveReads,
            None,
            "permission edit",
            "selected reject",
            [1, 0, 1, 0],
        ),
        (
            PermissionMode::ApproveReads,
            Some(prompter(Some(true))),
            "permission execute",
            "selected allow",
            [1, 1, 0, 0],
        ),
        (
            PermissionMode::ApproveReads,
            Some(prompter(Some(false))),
            "permission execute",
            "selected reject",
            [1, 0, 1, 0],
        ),
        (
            PermissionMode::ApproveReads,
            Some(prompter(Some(false))),
            "permission read",
            "selected allow",
            [1, 1, 0, 0],
        ),
        (
            PermissionMode::ApproveReads,
            None,
            "permission - grep for TODO",
            "selected allow",
            [1, 1, 0, 0],
        ),
    ];
    for (mode, p, prompt, expected, stats) in cases {
        let (out, r, ev) = run_one(&env, opts(mode, p.clone()), prompt).await;
        assert_eq!(out.agent_text, expected, "{mode:?} {prompt}");
        let s = out.permission_stats;
        assert_eq!(
            [s.requested, s.approved, s.denied, s.cancelled],
            stats,
            "{mode:?} {prompt}"
        );
        assert_eq!(r.acpx.last_turn.unwrap().permission_stats, s);
        let done = ev.iter().find(|e| e.event_type == "prompt_done").unwrap();
        assert_eq!(done.payload["permissionStats"]["requested"], 1);
        let (asked, op) = permission_ops(&ev);
        assert_eq!((asked.len(), op.len()), (1, 1));
        assert!(asked[0].seq < op[0].seq);
        assert_eq!(asked[0].payload["toolCall"]["toolCallId"], "call_perm");
        assert_eq!(op[0].payload["policy"], mode.as_str());
        assert_eq!(op[0].request_id, done.request_id);
        if let Some(p) = p {
            let asked = p.asked.load(Ordering::SeqCst);
            assert_eq!(
                asked,
                usize::from(!prompt.contains("read")),
                "{prompt}: reads are not asked about"
            );
        }
    }
}

/// An agent that announces a write with an empty input and sends its title, path, input and
/// diff only in the permission request (qwen-code 0.24): the thread's tool use gets them from
/// the request, and keeps the diff after the agent's final update (which has only text).
async fn permission_tool_call(env: Env) {
    let target = env.cwd.join("asked.txt").display().to_string();
    for (mode, outcome) in [
        (PermissionMode::ApproveAll, "completed"),
        (PermissionMode::DenyAll, "failed"),
    ] {
        let (out, r, ev) = run_one(
            &env,
            opts(mode, None),
            &format!("write-asked {target} two lines"),
        )
        .await;
        let (asked, answered) = permission_ops(&ev);
        assert_eq!((asked.len(), answered.len()), (1, 1), "{mode:?}");
        // Logged as the agent sent it.
        let tc = &asked[0].payload["toolCall"];
        assert_eq!(tc["rawInput"]["file_path"], target.as_str());
        assert_eq!(tc["content"][0]["type"], "diff");
        assert_eq!(asked[0].payload["options"].as_array().unwrap().len(), 3);
        // Folded into the thread's tool use, which the agent announced with `{}`.
        let tool_use = r.thread.messages.iter().rev().find_map(|m| match m {
            acpx_model::Message::Agent(a) => a.content.iter().find_map(|c| match c {
                acpx_model::AgentContent::ToolUse(t) if t.id == "call_asked" => {
                    Some((a.clone(), t.clone()))
                }
                _ => None,
            }),
            _ => None,
        });
        let (msg, tool_use) = tool_use.expect("the tool use is in the thread");
        assert!(
            tool_use.raw_input.to_text_lossy().contains("asked.txt"),
            "{mode:?}: {:?}",
            tool_use.raw_input
        );
        assert_eq!(tool_use.extra["title"], format!("Writing to {target}"));
        assert_eq!(tool_use.extra["locations"][0]["path"], target.as_str());
        assert_eq!(tool_use.extra["status"], outcome, "{mode:?}");
        let result = &msg.tool_results["call_asked"];
        if mode == PermissionMode::ApproveAll {
            assert_eq!(out.agent_text, format!("Wrote {target}."));
            // The final update carried only text; the diff came with the request.
            let diffs = &result.extra["diffs"];
            assert_eq!(diffs[0]["path"], target.as_str(), "{:?}", result.extra);
            assert_eq!(diffs[0]["new_text"], "two lines");
        } else {
            assert_eq!(out.agent_text, "Permission denied.");
            assert!(result.is_error);
        }
        // The snapshot is what the log folds into.
        let mut rebuilt = acpx_model::SessionRecord::new(
            acpx_model::NewSession {
                acpx_record_id: r.acpx_record_id.clone(),
                acp_session_id: r.acp_session_id.clone(),
                agent_session_id: r.agent_session_id.clone(),
                agent_command: r.agent_command.clone(),
                cwd: r.cwd.clone(),
                name: r.name.clone(),
            },
            r.created_at,
        );
        acpx_runtime::mapping::roll_forward(&mut rebuilt, &ev);
        assert_eq!(rebuilt.thread.messages, r.thread.messages, "{mode:?}");
    }
}

async fn permission_cancel(env: Env) {
    let (obs, mut rx) = channel();
    let p = prompter(None);
    let rt = env.runtime(RuntimeOptions {
        observer: Some(obs),
        ..opts(PermissionMode::ApproveReads, Some(p.clone()))
    });
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let handle = s.cancel_handle();
    let prompter_seen = p.clone();
    let canceller = tokio::spawn(async move {
        // Wait until the tool call is announced and the human is being asked.
        while let Some(e) = rx.recv().await {
            if e.payload["update"]["sessionUpdate"] == "tool_call" {
                break;
            }
        }
        while prompter_seen.asked.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        handle.cancel()
    });
    let out = s.prompt(text_prompt("wait-permission")).await.unwrap();
    assert!(canceller.await.unwrap());
    assert_eq!(out.outcome, "cancelled");
    assert_eq!(out.stop_reason.as_deref(), Some("cancelled"));
    assert_eq!(
        (
            out.permission_stats.requested,
            out.permission_stats.cancelled
        ),
        (1, 1)
    );
    let r = s.record().await;
    let t = thread_json(&r);
    assert_eq!(
        t["messages"][1]["Agent"]["tool_results"]["call_wait"]["content"],
        json!([{"Text": "Tool canceled by user"}])
    );
    assert_eq!(
        s.prompt(text_prompt("echo next")).await.unwrap().outcome,
        "completed"
    );
    let id = s.id().clone();
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    assert_eq!(permission_ops(&ev).1[0].payload["decision"], "cancelled");
}

async fn fs_confinement(env: Env) {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s3cret").unwrap();
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), env.cwd.join("leak")).unwrap();
    let rt = env.runtime(approve_all());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let cwd = env.cwd.display().to_string();
    let target = format!("{cwd}/out/new.txt");
    let out = s
        .prompt(text_prompt(&format!("write-file {target} hello world")))
        .await
        .unwrap();
    assert_eq!(out.agent_text, format!("Wrote {target}."));
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "hello world");
    let out = s
        .prompt(text_prompt(&format!("read-file {cwd}/README.md 2 1")))
        .await
        .unwrap();
    assert_eq!(out.agent_text, "Content: line two\n");
    for (path, code) in [
        ("README.md".to_owned(), -32602),
        (format!("{cwd}/../work/README.md"), -32602),
        (format!("{cwd}/leak"), -32602),
        (format!("{}/secret.txt", outside.path().display()), -32602),
        (format!("{cwd}/missing.txt"), -32002),
    ] {
        let out = s
            .prompt(text_prompt(&format!("read-file {path}")))
            .await
            .unwrap();
        assert!(
            out.agent_text.starts_with(&format!("Read failed ({code})")),
            "{path}: {}",
            out.agent_text
        );
        assert!(!out.agent_text.contains("s3cret"));
        if code == -32602 {
            // The reason is in the message itself, not only in `data.reason`.
            let why = out
                .agent_text
                .split("Invalid params: ")
                .nth(1)
                .unwrap_or("");
            assert!(why.len() > 10, "{path}: {}", out.agent_text);
        }
    }
    let escape = format!("{cwd}/leak");
    let out = s
        .prompt(text_prompt(&format!("write-file {escape} pwned")))
        .await
        .unwrap();
    assert!(
        out.agent_text.starts_with("Write failed"),
        "{}",
        out.agent_text
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt")).unwrap(),
        "s3cret"
    );
    s.shutdown().await.unwrap();
    let ev = env.events(&id).await;
    let reads = client_ops(&ev, "fs/read_text_file");
    assert_eq!(reads.len(), 6);
    assert_eq!(reads[0].payload["status"], "completed");
    assert!(reads[1..].iter().all(|e| e.payload["status"] == "failed"));
    let writes = client_ops(&ev, "fs/write_text_file");
    assert_eq!(
        writes
            .iter()
            .map(|e| e.payload["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["completed", "failed"]
    );
    assert_eq!(writes[0].payload["bytes"], 11);
}

async fn fs_write_policy(env: Env) {
    let target = env.cwd.join("policy.txt").display().to_string();
    let p = prompter(Some(true));
    // approve-reads: the tool's permission request is asked about; its approval covers the
    // write (one decision per action, tests/it/one_decision.rs).
    let (out, _, _) = run_one(
        &env,
        opts(PermissionMode::ApproveReads, Some(p.clone())),
        &format!("write-file {target} ok"),
    )
    .await;
    assert_eq!(out.agent_text, format!("Wrote {target}."));
    assert_eq!(p.asked.load(Ordering::SeqCst), 1);
    std::fs::remove_file(&target).unwrap();
    // A human who approves the tool calls the agent asks about but refuses writes acpx asks
    // about itself: a write the agent never asked about is refused.
    struct Split;
    #[async_trait]
    impl PermissionPrompter for Split {
        async fn ask(&self, q: &PermissionQuestion) -> bool {
            q.method == "session/request_permission"
        }
    }
    let o = RuntimeOptions {
        permission_mode: PermissionMode::ApproveReads,
        prompter: Some(Arc::new(Split)),
        ..RuntimeOptions::default()
    };
    let (out, _, ev) = run_one(&env, o, &format!("write-direct {target} no")).await;
    assert!(
        out.agent_text.contains("refused writing"),
        "{}",
        out.agent_text
    );
    assert!(!std::path::Path::new(&target).exists());
    let w = client_ops(&ev, "fs/write_text_file");
    assert_eq!(w[0].payload["status"], "failed");
    // deny-all refuses reads too.
    let readme = env.cwd.join("README.md").display().to_string();
    let (out, _, _) = run_one(
        &env,
        opts(PermissionMode::DenyAll, None),
        &format!("read-file {readme}"),
    )
    .await;
    assert!(
        out.agent_text.starts_with("Read failed (-32603)"),
        "{}",
        out.agent_text
    );
}

async fn terminals(env: Env) {
    let rt = env.runtime(approve_all());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    let out = s
        .prompt(text_prompt("terminal echo hi; pwd; exit 4"))
        .await
        .unwrap();
    assert_eq!(
        out.agent_text,
        format!(
            "exit=Some(4) signal=None truncated=false output=hi\n{}\n",
            std::fs::canonicalize(&env.cwd).unwrap().display()
        )
    );
    let out = s
        .prompt(text_prompt("terminal --limit 16 seq 1 1000"))
        .await
        .unwrap();
    assert_eq!(
        out.agent_text,
        "exit=Some(0) signal=None truncated=true output=97\n998\n999\n1000\n"
    );
    let started = std::time::Instant::now();
    let out = s
        .prompt(text_prompt(
            "terminal --kill-after 200 sleep 30; echo never",
        ))
        .await
        .unwrap();
    assert!(
        out.agent_text
            .starts_with("exit=None signal=Some(\"SIGTERM\")"),
        "{}",
        out.agent_text
    );
    assert!(!out.agent_text.contains("never"));
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let r = s.shutdown().await.unwrap();
    let t = thread_json(&r);
    assert_eq!(
        t["messages"][1]["Agent"]["tool_results"]["call_term"]["output"]["exitCode"],
        4
    );
    // The thread keeps the terminal's own output and exit status (from the logged
    // terminal/output), though the agent's final update no longer lists the terminal.
    let term = &t["messages"][1]["Agent"]["tool_results"]["call_term"]["terminals"][0];
    assert!(
        term["output"].as_str().unwrap().starts_with("hi\n"),
        "{term}"
    );
    assert_eq!(term["exit_status"]["exitCode"], 4, "{term}");
    let ev = env.events(&id).await;
    for m in [
        "terminal/create",
        "terminal/wait_for_exit",
        "terminal/output",
        "terminal/release",
        "terminal/kill",
    ] {
        assert!(!client_ops(&ev, m).is_empty(), "{m} logged");
    }
    assert_eq!(
        client_ops(&ev, "terminal/create")[1].payload["outputByteLimit"],
        16
    );
}

async fn terminal_denied(env: Env) {
    let marker = env.cwd.join("ran");
    let (out, _, ev) = run_one(
        &env,
        opts(PermissionMode::DenyAll, None),
        &format!("terminal touch {}", marker.display()),
    )
    .await;
    assert_eq!(out.agent_text, "Permission denied.");
    assert!(!marker.exists());
    assert!(
        client_ops(&ev, "terminal/create").is_empty(),
        "the agent never got that far"
    );
    // A human who approves the agent's question and would refuse acpx's own: the approval
    // covers the terminal of that tool call, so acpx's gate does not ask (one decision per
    // action; a write nobody asked about is still gated: `fs_write_policy`).
    struct Split;
    #[async_trait]
    impl PermissionPrompter for Split {
        async fn ask(&self, q: &PermissionQuestion) -> bool {
            q.method == "session/request_permission"
        }
    }
    let o = RuntimeOptions {
        permission_mode: PermissionMode::ApproveReads,
        prompter: Some(Arc::new(Split)),
        ..RuntimeOptions::default()
    };
    let (out, _, ev) = run_one(&env, o, &format!("terminal touch {}", marker.display())).await;
    assert!(
        out.agent_text.starts_with("exit=Some(0)"),
        "{}",
        out.agent_text
    );
    assert!(marker.exists());
    let create = &client_ops(&ev, "terminal/create")[0].payload;
    assert_eq!(create["status"], "completed", "{create}");
    assert_eq!(create["coveredBy"], "call_term", "{create}");
}

/// An agent that never releases its terminals: the session keeps 64, forgetting the oldest
/// exited one to make room (named in the create's `forgotTerminalId`), and refuses a command
/// when all 64 kept ones still run.
async fn unreleased_terminals(env: Env) {
    let rt = env.runtime(approve_all());
    let mut s = rt.open_new(env.spec(agent(""))).await.unwrap();
    let id = s.id().clone();
    for _ in 0..64 {
        let out = s.prompt(text_prompt("terminal --keep true")).await.unwrap();
        assert!(
            out.agent_text.starts_with("exit=Some(0)"),
            "{}",
            out.agent_text
        );
    }
    for _ in 0..64 {
        let out = s
            .prompt(text_prompt("terminal --detach exec sleep 60"))
            .await
            .unwrap();
        assert!(
            out.agent_text.starts_with("started term_"),
            "{}",
            out.agent_text
        );
    }
    let out = s
        .prompt(text_prompt("terminal --detach exec sleep 60"))
        .await
        .unwrap();
    assert!(
        out.agent_text.contains("terminal/create failed")
            && out.agent_text.contains("already runs 64 terminal commands")
            && out.agent_text.contains("terminal/release"),
        "{}",
        out.agent_text
    );
    // Shutting down kills the 64 running commands.
    s.shutdown().await.unwrap();
    let events = env.events(&id).await;
    let creates = client_ops(&events, "terminal/create");
    assert_eq!(creates.len(), 129);
    let tid = |e: &acpx_model::EventEnvelope, k: &str| e.payload[k].as_str().map(str::to_owned);
    // The first 64 kept everything; each later one forgot the oldest exited terminal.
    assert!(creates[..64]
        .iter()
        .all(|e| tid(e, "forgotTerminalId").is_none()));
    for i in 0..64 {
        assert_eq!(
            tid(creates[64 + i], "forgotTerminalId"),
            tid(creates[i], "terminalId")
        );
    }
    assert_eq!(creates[128].payload["status"], "failed");
    assert!(tid(creates[128], "terminalId").is_none());
}
