//! # acpx-tests: one conformance suite for every `Store` backend
//!
//! In the spirit of `object_store`'s `integration` module: the checks in [`conformance`] are
//! async functions that take a [`Backend`] and assert behaviour through the `Store` trait.
//! Each backend gets a test file of a few lines under `tests/tests/` that expands
//! [`conformance_tests!`] (and, for backends with bounded event retention,
//! [`retention_tests!`]) into one `#[tokio::test]` per check:
//!
//! ```text
//! acpx_tests::conformance_tests!(acpx_tests::MemoryBackend::new());
//! ```
//!
//! Cross-process checks run the `acpx-store-worker` binary of this package (see
//! [`worker`]); a backend opts in by returning its argv from [`Backend::worker_args`].

pub mod backend;
pub mod conformance;
pub mod fixtures;
pub mod ops;
pub mod worker;

pub use backend::{argv, Backend, DirBackend, FsBackend, MemoryBackend};

/// Expands to one `#[tokio::test]` per conformance check, each on a fresh backend made by
/// evaluating `$make` (an expression of a type implementing [`Backend`]).
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::__checks!($make;
            create_load_round_trip,
            create_existing_id_is_refused,
            save_increments_revision,
            save_stale_revision_conflicts,
            save_deleted_session_not_found,
            close_is_idempotent_and_keeps_session,
            delete_removes_everything_idempotently,
            append_seq_must_continue_exactly,
            append_batches_and_page_back,
            read_filters_by_type_stream_and_request_id,
            unknown_events_round_trip_byte_equal,
            event_log_state_is_consistent,
            append_durability_none_then_flush,
            list_filters,
            list_order_newest_first_with_id_tie_break,
            list_cursor_walk_exactly_once,
            list_invalid_cursors_refused,
            list_empty_store,
            list_pagination_while_adding,
            lock_waits_times_out_and_releases_on_drop,
            lock_cross_process_mutations_wait,
            lock_released_when_holder_killed,
            record_id_rejects_hostile_strings,
            hostile_inner_id_is_corrupt,
            nothing_created_outside_the_store,
            malformed_snapshots_reported_not_fatal,
            torn_tail_withheld_and_next_append_is_clean,
            mid_log_damage_strict_and_lenient,
            crash_kill_mid_append,
            crash_kill_mid_save_loop,
            reader_during_rewrite_sees_whole_documents,
            failpoint_save_after_temp_fsync,
            failpoint_save_after_rename,
            failpoint_append_after_partial_write,
            failpoint_delete_after_snapshot_unlink,
            append_failure_is_reported_and_undone,
            two_processes_append_one_session_locked,
            two_processes_append_one_session_retry,
            processes_write_different_sessions,
            concurrent_saves_exactly_one_wins,
            two_processes_save_one_session,
            tasks_append_concurrently_in_process,
            search_finds_conversation_text,
        );
    };
}

/// Expands to the event-retention checks, for a backend (made by `$make`) configured with a
/// tiny segment budget (at most 1 MiB in total), such as `max_segment_bytes` 4 KiB × 3.
#[macro_export]
macro_rules! retention_tests {
    ($make:expr) => {
        $crate::__checks!($make;
            retention_keeps_a_contiguous_suffix,
            failpoint_rotate_after_shift,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __checks {
    ($make:expr; $($check:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                if let Some(bin) = option_env!("CARGO_BIN_EXE_acpx-store-worker") {
                    $crate::worker::set_binary(bin);
                }
                let backend = $make;
                $crate::conformance::$check(&backend).await;
            }
        )+
    };
}
