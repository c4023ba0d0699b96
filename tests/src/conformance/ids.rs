//! Hostile record ids: refused at parse time, corrupt when stored, never a way out of the
//! backend's data directory.

use super::*;
use crate::ops::AppendLocked;

/// Everything that could escape a directory is refused by `RecordId::parse`.
pub async fn record_id_rejects_hostile_strings(b: &dyn Backend) {
    let _ = b;
    let long = "x".repeat(MAX_RECORD_ID_LEN + 1);
    for bad in [
        "",
        ".",
        "..",
        "../x",
        "a/../b",
        "a/b",
        "/abs",
        "a\\b",
        "..\\x",
        "a\0b",
        ".hidden",
        "C:x",
        "C:\\x",
        "a b",
        "a\nb",
        "é",
        "\u{202e}x",
        long.as_str(),
    ] {
        assert!(RecordId::parse(bad).is_err(), "{bad:?} must be rejected");
        let derived = RecordId::from_untrusted_or_generate(bad);
        assert_ne!(derived.as_str(), bad);
    }
    assert!(RecordId::parse(&"x".repeat(MAX_RECORD_ID_LEN)).is_ok());
    assert!(serde_json::from_value::<RecordId>(json!("../etc/passwd")).is_err());
}

/// A stored snapshot whose inner id is hostile is corrupt: `load` and `list` refuse it and
/// nothing is written outside the store.
pub async fn hostile_inner_id_is_corrupt(b: &dyn Backend) {
    let store = b.open().await;
    create(&*store, session("victim", 0)).await;
    create(&*store, session("fine", 0)).await;
    let mut doc = serde_json::to_value(session("victim", 0)).unwrap();
    doc["acpxRecordId"] = json!("../escape");
    doc["revision"] = json!(1);
    drop(store);
    if b.inject_snapshot(&rid("victim"), &serde_json::to_vec(&doc).unwrap())
        .await
        .is_none()
    {
        undeclared(b, "hostile_inner_id_is_corrupt", "raw snapshot bytes");
    }
    let store = b.open().await;
    let err = store
        .load(&rid("victim"))
        .await
        .expect_err("hostile inner id");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err:?}");
    assert!(err.to_string().contains("acpxRecordId"), "{err}");
    let page = store
        .list(&ListQuery::default())
        .await
        .expect("list survives");
    assert_eq!(page.sessions.len(), 1);
    assert_eq!(page.sessions[0].acpx_record_id.as_str(), "fine");
    assert_eq!(page.skipped.len(), 1, "{:?}", page.skipped);
    assert_fenced(b);
}

/// Operations fed with hostile strings (through every entry point that takes them) create
/// nothing outside the backend's data directory.
pub async fn nothing_created_outside_the_store(b: &dyn Backend) {
    let Some(data) = b.data_dir() else {
        undeclared(b, "nothing_created_outside_the_store", "a data directory");
    };
    let store = b.open().await;
    let mut r = session("placeholder", 0);
    r.acpx_record_id = RecordId::from_untrusted_or_generate("../../escape");
    r.cwd = "/../../escape".into();
    r.name = Some("../../escape".into());
    r.acp_session_id = "../../escape".into();
    r.agent_command = "../../escape\0".into();
    let mut r = create(&*store, r).await;
    let id = r.acpx_record_id.clone();
    store.save(&mut r).await.unwrap();
    let mut e = event(&id, 1);
    e.acp_session_id = "../../escape".into();
    e.request_id = Some("/etc/passwd".into());
    e.event_type = "../../escape".into();
    store
        .append_locked(&id, &[e], Durability::Fsync)
        .await
        .unwrap();
    let _ = store
        .list(&ListQuery {
            cwd: Some("/../../escape/".into()),
            name: Some("../../escape".into()),
            ..ListQuery::default()
        })
        .await
        .unwrap();
    drop(store.lock(&id, Duration::from_secs(5)).await.unwrap());
    store.close(&id, ts(1)).await.unwrap();
    let page = store.list(&ListQuery::default()).await.unwrap();
    assert_eq!(page.sessions.len(), 1);
    assert!(store.delete(&id).await.unwrap());
    assert_fenced(b);
    assert!(data.exists());
}

/// The parent of the backend's data directory holds nothing but the data directory.
fn assert_fenced(b: &dyn Backend) {
    let Some(data) = b.data_dir() else { return };
    let parent = data.parent().expect("data dir has a parent");
    let names: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![data.file_name().unwrap().to_owned()],
        "something was created next to the store's data directory"
    );
}
