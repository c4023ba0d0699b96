//! A filtered `list` keeps only the summaries its filters match while listing (so that a
//! scope lookup among 10k sessions copies a handful), and stats the snapshots relative to the
//! open directory. Both must leave every answer as it was: here each filtered list of one
//! handle is checked against the unfiltered list of a fresh handle (which reads every file)
//! filtered by `ListQuery::matches`, after another handle renamed, closed, created and deleted
//! sessions, and a snapshot was rewritten in place (not through the store: only its stat
//! tells).

use crate::common;

use std::fs;
use std::io::Write;

use acpx_model::{ClosedFilter, ListQuery, Store};
use common::*;

fn queries() -> Vec<ListQuery> {
    let mut out = Vec::new();
    for cwd in [None, Some("/repo"), Some("/repo/"), Some("/elsewhere")] {
        for name in [None, Some("n"), Some("renamed")] {
            for closed in [ClosedFilter::Any, ClosedFilter::Open, ClosedFilter::Closed] {
                for agent in [None, Some("test-agent --acp"), Some("other")] {
                    out.push(ListQuery {
                        cwd: cwd.map(str::to_owned),
                        agent_command: agent.map(str::to_owned),
                        name: name.map(str::to_owned),
                        closed,
                        limit: None,
                        cursor: None,
                    });
                }
            }
        }
    }
    out
}

async fn assert_filtered_lists_match(dir: &std::path::Path, lister: &acpx_store_fs::FsStore) {
    let everything = store(dir)
        .list(&ListQuery {
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    for q in queries() {
        let got = lister.list(&q).await.unwrap();
        let cwd = q
            .cwd
            .as_deref()
            .map(|c| acpx_model::normalize_cwd(c).unwrap());
        let want: Vec<_> = everything
            .sessions
            .iter()
            .filter(|s| q.matches(s, cwd.as_deref()))
            .map(|s| (s.acpx_record_id.clone(), s.revision))
            .collect();
        let got_ids: Vec<_> = got
            .sessions
            .iter()
            .map(|s| (s.acpx_record_id.clone(), s.revision))
            .collect();
        assert_eq!(got_ids, want, "{q:?}");
        // Skipped entries are reported whatever the filters.
        assert_eq!(got.skipped.len(), everything.skipped.len(), "{q:?}");
    }
}

#[tokio::test]
async fn filtered_lists_match_the_full_list_through_changes_by_another_handle() {
    let tmp = tempfile::tempdir().unwrap();
    let lister = store(tmp.path());
    let other = store(tmp.path());
    for (i, (name, cwd)) in [
        (None, "/repo"),
        (Some("n"), "/repo"),
        (Some("n"), "/elsewhere"),
        (None, "/elsewhere"),
        (Some("m"), "/repo"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut r = record(&id(&format!("s{i}")), cwd);
        r.name = name.map(str::to_owned);
        lister.create(&mut r).await.unwrap();
    }
    assert_filtered_lists_match(tmp.path(), &lister).await;

    let mut r = other.load(&id("s1")).await.unwrap();
    r.name = Some("renamed".into());
    other.save(&mut r).await.unwrap();
    other
        .close(&id("s3"), acpx_model::Timestamp::now())
        .await
        .unwrap();
    assert!(other.delete(&id("s0")).await.unwrap());
    let mut r = record(&id("late"), "/repo");
    r.name = Some("n".into());
    other.create(&mut r).await.unwrap();
    // In place, as a hand edit would: same inode, new content (another cwd), no journal line.
    let mut moved = lister.load(&id("s4")).await.unwrap();
    moved.cwd = "/elsewhere".into();
    moved.revision += 1;
    let path = lister.snapshot_path(&id("s4"));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.write_all(&moved.to_json_vec().unwrap()).unwrap();
    f.sync_all().unwrap();
    // And one damaged in place.
    fs::write(lister.snapshot_path(&id("s2")), b"{ not json").unwrap();
    fs::File::open(lister.snapshot_path(&id("s2")))
        .unwrap()
        .sync_all()
        .unwrap();
    assert_filtered_lists_match(tmp.path(), &lister).await;
    let at_elsewhere = lister
        .list(&ListQuery {
            cwd: Some("/elsewhere".into()),
            closed: ClosedFilter::Any,
            ..ListQuery::default()
        })
        .await
        .unwrap();
    let ids: Vec<_> = at_elsewhere
        .sessions
        .iter()
        .map(|s| s.acpx_record_id.as_str())
        .collect();
    assert!(ids.contains(&"s4") && ids.contains(&"s3"), "{ids:?}");
    assert_eq!(at_elsewhere.skipped.len(), 1);
}
