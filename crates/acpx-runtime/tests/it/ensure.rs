//! `acpx_owner::ensure`: finding or creating a scope's session under the scope lock, replacing the
//! scope's open sessions, attaching an existing ACP session, and giving up on interrupt, on
//! every backend against the scripted agent.
use crate::common;

use acpx_owner::ensure::{self, EnsureError, EnsureEvent, Scope};
use acpx_runtime::ops::scope::open_in_exact_scope;
use acpx_runtime::RuntimeOptions;
use common::*;

backend_tests! {
    ensure_creates_once_and_new_replaces => ensure_then_new;
    a_resume_the_agent_cannot_do_leaves_nothing_behind => resume_refused;
    an_interrupt_while_starting_gives_up => interrupted;
}

async fn ensure_then_new(env: Env) {
    let agent = env.loading_agent("");
    let rt = env.runtime(RuntimeOptions::default());
    let home = env.dir.path().join("home");
    let scope = Scope {
        agent_command: &agent,
        cwd: &env.cwd,
        name: None,
    };
    let mut opened = 0;
    let first = ensure::ensure(&rt, &home, scope, None, std::future::pending(), |e| {
        if let EnsureEvent::Opened(_) = e {
            opened += 1;
        }
    })
    .await
    .unwrap();
    assert!(first.created);
    assert_eq!(opened, 1);
    let again = ensure::ensure(&rt, &home, scope, None, std::future::pending(), |_| {
        panic!("nothing to tell: the session exists")
    })
    .await
    .unwrap();
    assert!(!again.created);
    assert_eq!(again.record.acpx_record_id, first.record.acpx_record_id);

    let new = ensure::new_session(
        &rt,
        &home,
        scope,
        None,
        None,
        std::future::pending(),
        |_| {},
    )
    .await
    .unwrap();
    assert!(new.created);
    let replaced = new.replaced.expect("the ensured session is replaced");
    assert_eq!(replaced.acpx_record_id, first.record.acpx_record_id);
    assert!(replaced.closed);
    let open = open_in_exact_scope(&*env.store, &agent, &env.cwd.to_string_lossy(), None)
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].acpx_record_id, new.record.acpx_record_id);
}

async fn resume_refused(env: Env) {
    // Without --load the agent supports neither session/resume nor session/load.
    let agent = agent("");
    let rt = env.runtime(RuntimeOptions::default());
    let home = env.dir.path().join("home");
    let scope = Scope {
        agent_command: &agent,
        cwd: &env.cwd,
        name: None,
    };
    let existing = ensure::ensure(&rt, &home, scope, None, std::future::pending(), |_| {})
        .await
        .unwrap();
    let err = ensure::new_session(
        &rt,
        &home,
        scope,
        Some("sess-unknown"),
        None,
        std::future::pending(),
        |_| {},
    )
    .await
    .unwrap_err();
    match err {
        EnsureError::Resume(inner) => assert!(
            matches!(*inner, EnsureError::ResumeFellBack { ref acp_session_id, .. } if acp_session_id == "sess-unknown"),
            "{inner:?}"
        ),
        other => panic!("expected a refused resume, got {other:?}"),
    }
    // The record made for the resume is gone, and the existing session is untouched.
    let open = open_in_exact_scope(&*env.store, &agent, &env.cwd.to_string_lossy(), None)
        .await
        .unwrap();
    assert_eq!(open.len(), 1);
    assert_eq!(open[0].acpx_record_id, existing.record.acpx_record_id);
}

async fn interrupted(env: Env) {
    let agent = env.loading_agent("");
    let rt = env.runtime(RuntimeOptions::default());
    let home = env.dir.path().join("home");
    let scope = Scope {
        agent_command: &agent,
        cwd: &env.cwd,
        name: None,
    };
    let err = ensure::ensure(&rt, &home, scope, None, async {}, |_| {})
        .await
        .unwrap_err();
    assert!(matches!(err, EnsureError::Interrupted), "{err:?}");
}
