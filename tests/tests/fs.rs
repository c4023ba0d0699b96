//! The conformance suite against `FsStore`, plus the checks only a file store has.

use std::process::ExitCode;
use std::time::Duration;

use acpx_store_fs::FsStoreOptions;
use acpx_tests::FsBackend;

fn main() -> ExitCode {
    acpx_tests::suite!()
        .conformance(FsBackend::new)
        .retention(tiny_segments)
        .test(
            "files::segment_count_equals_files_present",
            files::segment_count_equals_files_present,
        )
        .test(
            "files::layout_paths_and_private_modes",
            files::layout_paths_and_private_modes,
        )
        .test(
            "files::torn_tail_bytes_are_set_aside",
            files::torn_tail_bytes_are_set_aside,
        )
        .test(
            "files::symlinked_log_is_not_followed_for_appends",
            files::symlinked_log_is_not_followed_for_appends,
        )
        .test(
            "files::symlinked_snapshot_is_not_followed_for_saves",
            files::symlinked_snapshot_is_not_followed_for_saves,
        )
        .test(
            "files::live_temp_files_survive_cleanup",
            files::live_temp_files_survive_cleanup,
        )
        .test(
            "files::crash_leftover_temp_file_is_cleaned_on_open",
            files::crash_leftover_temp_file_is_cleaned_on_open,
        )
        .test(
            "files::unreadable_snapshots_are_left_untouched",
            files::unreadable_snapshots_are_left_untouched,
        )
        .test(
            "files::listing_cache_cannot_change_answers",
            files::listing_cache_cannot_change_answers,
        )
        .test(
            "assembled::hooks_drive_the_checks",
            assembled::hooks_drive_the_checks,
        )
        .run()
}

/// 4 KiB × 3 segments: a dozen events rotate the log, and a turn's end past 1 KiB does.
fn tiny_segments() -> FsBackend {
    FsBackend::with_options(FsStoreOptions {
        max_segment_bytes: 4096,
        max_segments: 3,
        keep_rotated_segments: false,
        turn_end_rotate_bytes: 1024,
        lock_timeout: Duration::from_secs(60),
    })
}

/// Checks that only apply to the file layout.
mod files {
    use std::collections::BTreeSet;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::Duration;

    use acpx_model::{Durability, EventQuery, ListQuery, RecordId, Store};
    use acpx_store_fs::FsStore;
    use acpx_tests::fixtures::{event, events, ndjson_line, rich_session, rid, session};
    use acpx_tests::ops::AppendLocked;
    use acpx_tests::worker::{set_binary, Worker};
    use acpx_tests::{Backend, FsBackend};

    fn files_of(store: &FsStore, id: &RecordId) -> BTreeSet<String> {
        std::fs::read_dir(store.sessions_dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(&format!("{id}.")) || n.starts_with(&format!(".{id}.")))
            .collect()
    }

    fn segment_files(store: &FsStore, id: &RecordId) -> Vec<String> {
        files_of(store, id)
            .into_iter()
            .filter(|n| n.ends_with(".ndjson") || n.ends_with(".ndjson.zst"))
            .collect()
    }

    /// `segment_count` is the number of segment files that exist, at every step of a log
    /// that rotates many times; older segments are `.1`, `.2`, … without gaps, and never more
    /// than `max_segments` files.
    pub async fn segment_count_equals_files_present() {
        let b = super::tiny_segments();
        let store = b.open_fs();
        let id = rid("segments");
        let mut r = session("segments", 0);
        store.create(&mut r).await.unwrap();
        let mut counts = BTreeSet::new();
        for seq in 1..=120 {
            let st = store
                .append_locked(&id, &[event(&id, seq)], Durability::Flush)
                .await
                .unwrap();
            let files = segment_files(&store, &id);
            assert_eq!(
                st.segment_count as usize,
                files.len(),
                "after seq {seq}: {files:?}"
            );
            assert!(st.segment_count <= 3);
            assert!(store.active_log_path(&id).exists());
            // Older segments are compressed once closed (docs/format.md § Compressed segments).
            for n in 1..st.segment_count {
                assert!(
                    store.compressed_segment_path(&id, n).exists()
                        && !store.segment_path(&id, n).exists(),
                    "segment {n} missing or not compressed: {files:?}"
                );
            }
            assert!(
                !store.segment_path(&id, 3).exists()
                    && !store.compressed_segment_path(&id, 3).exists(),
                "beyond max_segments: {files:?}"
            );
            counts.insert(st.segment_count);
        }
        assert_eq!(
            counts,
            BTreeSet::from([1, 2, 3]),
            "the log grew to the limit and stayed"
        );
        // The snapshot's view after a reopen agrees too.
        let again = b.open_fs().event_log_state(&id).await.unwrap();
        assert_eq!(
            again.segment_count as usize,
            segment_files(&store, &id).len()
        );
        assert_eq!(again.last_seq, 120);
    }

    /// Files sit at the documented paths, with private permissions.
    pub async fn layout_paths_and_private_modes() {
        let b = FsBackend::new();
        let store = b.open_fs();
        let mut r = rich_session("layout", 3);
        store.create(&mut r).await.unwrap();
        let id = r.acpx_record_id.clone();
        store
            .append_locked(&id, &events(&id, 1, 3), Durability::Fsync)
            .await
            .unwrap();
        drop(store.lock(&id, Duration::from_secs(5)).await.unwrap());
        assert_eq!(store.sessions_dir(), b.root().join("sessions"));
        assert_eq!(
            store.snapshot_path(&id),
            b.root().join("sessions/layout.json")
        );
        assert_eq!(
            store.active_log_path(&id),
            b.root().join("sessions/layout.events.ndjson")
        );
        assert_eq!(
            store.segment_path(&id, 2),
            b.root().join("sessions/layout.events.2.ndjson")
        );
        let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&store.sessions_dir()), 0o700);
        assert_eq!(mode(b.root()), 0o700);
        assert_eq!(mode(&store.snapshot_path(&id)), 0o600);
        assert_eq!(mode(&store.active_log_path(&id)), 0o600);
        let stored: acpx_model::SessionRecord =
            serde_json::from_slice(&std::fs::read(store.snapshot_path(&id)).unwrap()).unwrap();
        assert_eq!(stored, r, "the snapshot file is the record");
        let log = std::fs::read(store.active_log_path(&id)).unwrap();
        let want: Vec<u8> = events(&id, 1, 3).iter().flat_map(ndjson_line).collect();
        assert_eq!(
            log, want,
            "the active segment holds exactly the NDJSON lines"
        );
    }

    /// The bytes of a torn tail are moved aside (not discarded) before the next append.
    pub async fn torn_tail_bytes_are_set_aside() {
        let b = FsBackend::new();
        let store = b.open_fs();
        let id = rid("aside");
        store.create(&mut session("aside", 0)).await.unwrap();
        store
            .append_locked(&id, &events(&id, 1, 2), Durability::Flush)
            .await
            .unwrap();
        drop(store);
        let torn = b"{\"eventVersion\":1,\"seq\":3,\"timest";
        b.inject_log_bytes(&id, torn).await.unwrap();
        let store = b.open_fs();
        store
            .append_locked(&id, &events(&id, 3, 1), Durability::Flush)
            .await
            .unwrap();
        let aside: Vec<_> = files_of(&store, &id)
            .into_iter()
            .filter(|n| n.starts_with("aside.events.torn-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        let kept = std::fs::read(store.sessions_dir().join(&aside[0])).unwrap();
        assert_eq!(kept, torn);
        assert_eq!(
            std::fs::metadata(store.sessions_dir().join(&aside[0]))
                .unwrap()
                .mode()
                & 0o777,
            0o600
        );
        let page = store
            .read_events(&id, &EventQuery::from_seq(0))
            .await
            .unwrap();
        assert_eq!(page.events, events(&id, 1, 3));
    }

    /// Replaces the file at `inside` with a symlink to a copy of it at `outside`; returns the
    /// copy's bytes.
    fn plant_symlink(inside: &std::path::Path, outside: &std::path::Path) -> Vec<u8> {
        std::fs::copy(inside, outside).unwrap();
        std::fs::remove_file(inside).unwrap();
        std::os::unix::fs::symlink(outside, inside).unwrap();
        std::fs::read(outside).unwrap()
    }

    /// A symlink planted as a session's log is not followed for appends: the file it points
    /// to, outside the store, is never changed.
    pub async fn symlinked_log_is_not_followed_for_appends() {
        let b = FsBackend::new();
        let outside = tempfile::tempdir().unwrap();
        let store = b.open_fs();
        let id = rid("linked");
        store.create(&mut session("linked", 0)).await.unwrap();
        store
            .append_locked(&id, &events(&id, 1, 1), Durability::Flush)
            .await
            .unwrap();
        let target = outside.path().join("victim.ndjson");
        let before = plant_symlink(&store.active_log_path(&id), &target);
        drop(store);
        let appended = b
            .open_fs()
            .append_locked(&id, &events(&id, 2, 1), Durability::Flush)
            .await;
        assert!(
            std::fs::read(&target).unwrap() == before,
            "append wrote through a symlink to a file outside the store (append: {appended:?})"
        );
    }

    /// A symlink planted as a session's snapshot is not followed for saves.
    pub async fn symlinked_snapshot_is_not_followed_for_saves() {
        let b = FsBackend::new();
        let outside = tempfile::tempdir().unwrap();
        let store = b.open_fs();
        let mut r = session("linked-doc", 0);
        store.create(&mut r).await.unwrap();
        let target = outside.path().join("victim.json");
        let before = plant_symlink(&store.snapshot_path(&r.acpx_record_id), &target);
        drop(store);
        r.thread.title = "through the link?".into();
        let saved = b.open_fs().save(&mut r).await;
        assert!(
            std::fs::read(&target).unwrap() == before,
            "save wrote through a symlink to a file outside the store (save: {saved:?})"
        );
    }

    /// Cleanup of temp files never removes one whose session lock is held by a live process
    /// (a writer between write and rename); once that process is gone, it is removed.
    pub async fn live_temp_files_survive_cleanup() {
        set_binary(env!("CARGO_BIN_EXE_acpx-store-worker"));
        let b = FsBackend::new();
        let store = b.open_fs();
        store.create(&mut session("busy", 0)).await.unwrap();
        store.create(&mut session("idle", 0)).await.unwrap();
        let mut w =
            Worker::spawn(&b, &["hold-lock", "--id", "busy", "--seconds", "120"], &[]).unwrap();
        w.expect_line("locked").await;
        let dir = store.sessions_dir();
        let live = dir.join(".busy.json.tmp.999999.live");
        let dead = dir.join(".idle.json.tmp.999998.dead");
        for p in [&live, &dead] {
            std::fs::write(p, b"{\"partial\": ").unwrap();
        }
        let removed = store.cleanup_stale_temp_files().unwrap();
        assert!(
            live.exists(),
            "cleanup removed a temp file of a session being written"
        );
        assert!(!dead.exists(), "a temp file of an idle session is stale");
        assert_eq!(removed, 1);
        drop(b.open_fs_when_sweep_is_due()); // opening runs the cleanup too
        assert!(
            live.exists(),
            "open's cleanup removed a live writer's temp file"
        );
        w.kill().await;
        drop(b.open_fs_when_sweep_is_due());
        assert!(
            !live.exists(),
            "the dead writer's temp file is cleaned up on open"
        );
        let page = store.list(&ListQuery::default()).await.unwrap();
        assert_eq!(page.sessions.len(), 2);
        assert!(page.skipped.is_empty(), "{:?}", page.skipped);
    }

    /// A snapshot temp file left by a crash before the rename is cleaned up by the next open
    /// that sweeps (at most every 10 minutes) and never shows up in `list`.
    pub async fn crash_leftover_temp_file_is_cleaned_on_open() {
        set_binary(env!("CARGO_BIN_EXE_acpx-store-worker"));
        let b = FsBackend::new();
        let store = b.open_fs();
        store
            .create(&mut rich_session("leftover", 5))
            .await
            .unwrap();
        let op = ["save-loop", "--id", "leftover", "--count", "1"];
        let env = [("ACPX_FAILPOINT", "save.after_temp_fsync")];
        Worker::spawn(&b, &op, &env).unwrap().finish_aborted().await;
        let temps = |s: &FsStore| {
            files_of(s, &rid("leftover"))
                .into_iter()
                .filter(|n| n.starts_with(".leftover.json.tmp."))
                .count()
        };
        assert_eq!(temps(&store), 1, "the crash left its temp file");
        let page = store.list(&ListQuery::default()).await.unwrap();
        assert_eq!((page.sessions.len(), page.skipped.len()), (1, 0));
        let reopened = b.open_fs_when_sweep_is_due();
        assert_eq!(
            temps(&reopened),
            0,
            "open removes a dead writer's temp file"
        );
    }

    /// A snapshot this version cannot read (a newer schema, damage) is reported but never
    /// rewritten, moved or deleted by reading it.
    pub async fn unreadable_snapshots_are_left_untouched() {
        let b = FsBackend::new();
        let store = b.open_fs();
        let mut r = session("newer", 0);
        store.create(&mut r).await.unwrap();
        store.create(&mut session("garbled", 0)).await.unwrap();
        let newer = String::from_utf8(r.to_json_vec().unwrap())
            .unwrap()
            .replace("acpx.session.v1", "acpx.session.v2")
            .into_bytes();
        let garbled = b"{\"schema\": \"acpx.sess".to_vec();
        b.inject_snapshot(&rid("newer"), &newer).await.unwrap();
        b.inject_snapshot(&rid("garbled"), &garbled).await.unwrap();
        let store = b.open_fs();
        for _ in 0..2 {
            let page = store.list(&ListQuery::default()).await.unwrap();
            assert_eq!(page.skipped.len(), 2);
            assert!(store.load(&rid("newer")).await.is_err());
            assert!(store.load(&rid("garbled")).await.is_err());
        }
        drop(b.open_fs());
        assert_eq!(
            std::fs::read(store.snapshot_path(&rid("newer"))).unwrap(),
            newer
        );
        assert_eq!(
            std::fs::read(store.snapshot_path(&rid("garbled"))).unwrap(),
            garbled
        );
    }

    /// A damaged, stale or foreign listing cache never changes what `list` answers.
    pub async fn listing_cache_cannot_change_answers() {
        let b = FsBackend::new();
        let store = b.open_fs();
        for i in 0..5 {
            store
                .create(&mut session(&format!("idx-{i}"), i))
                .await
                .unwrap();
        }
        let want = store.list(&ListQuery::default()).await.unwrap().sessions;
        let index = store.sessions_dir().join(".index.json");
        for garbage in [&b"not json"[..], b"", b"[]", b"{\"entries\": 5}"] {
            std::fs::write(&index, garbage).unwrap();
            let got = b.open_fs().list(&ListQuery::default()).await.unwrap();
            assert_eq!(got.sessions, want);
            assert!(got.skipped.is_empty(), "{:?}", got.skipped);
        }
        // A snapshot replaced behind the cache's back (same size, new content) is re-read.
        let path = store.snapshot_path(&rid("idx-3"));
        let text = std::fs::read_to_string(&path).unwrap();
        let renamed = text.replace("\"name\": null", "\"name\": \"zz\"");
        assert_ne!(text, renamed);
        std::fs::write(&path, renamed).unwrap();
        let got = b.open_fs().list(&ListQuery::default()).await.unwrap();
        let s = got
            .sessions
            .iter()
            .find(|s| s.acpx_record_id.as_str() == "idx-3")
            .unwrap();
        assert_eq!(s.name.as_deref(), Some("zz"));
    }
}

/// `DirBackend` (the few-lines template for new backends) assembled over `FsStore`: each of
/// its hooks drives the checks that need it.
mod assembled {
    use std::io::Write;
    use std::sync::Arc;

    use acpx_store_fs::FsStore;
    use acpx_tests::{argv, conformance, worker, DirBackend};

    fn fs_dir_backend() -> DirBackend {
        DirBackend::new("fs-assembled", |dir| Arc::new(FsStore::open(dir).unwrap()))
            .worker(|dir| argv(["--backend", "fs", "--root", dir.to_str().unwrap()]))
            .snapshot_injector(|dir, id, bytes| {
                std::fs::write(FsStore::open(dir).unwrap().snapshot_path(id), bytes).unwrap()
            })
            .log_injector(|dir, id, bytes| {
                let path = FsStore::open(dir).unwrap().active_log_path(id);
                let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
                f.write_all(bytes).unwrap();
            })
            .failpoints(acpx_store_fs::FAILPOINTS)
    }

    pub async fn hooks_drive_the_checks() {
        worker::set_binary(env!("CARGO_BIN_EXE_acpx-store-worker"));
        conformance::malformed_snapshots_reported_not_fatal(&fs_dir_backend()).await;
        conformance::torn_tail_withheld_and_next_append_is_clean(&fs_dir_backend()).await;
        conformance::two_processes_append_one_session_retry(&fs_dir_backend()).await;
        conformance::failpoint_save_after_rename(&fs_dir_backend()).await;
        conformance::nothing_created_outside_the_store(&fs_dir_backend()).await;
    }
}
