//! Crash injection for tests (cargo feature `failpoints`).
//!
//! With the feature on, [`failpoint!`] aborts the process when the environment variable
//! `ACPX_FAILPOINT` equals the step name; without it the macro expands to nothing. The names
//! are public only with the cargo feature `testing` (which `failpoints` turns on), for the
//! crash tests that set them.

/// The environment variable naming the step at which to abort.
#[cfg(feature = "testing")]
pub const FAILPOINT_ENV: &str = "ACPX_FAILPOINT";

/// Every step name the store checks.
#[cfg(feature = "testing")]
pub const FAILPOINTS: &[&str] = &[
    "save.after_temp_fsync",
    "save.after_rename",
    "append.after_partial_write",
    "rotate.after_shift",
    "compress.before_plain_removed",
    "delete.after_snapshot_unlink",
    "delete.after_logs_removed",
    "create_sessions.after_sync",
    "create_sessions.after_first_commit",
    "stage.before_commit",
];

/// Whether `ACPX_FAILPOINT` names `step` (always false without the `failpoints` feature).
#[inline]
pub(crate) fn armed(step: &str) -> bool {
    #[cfg(feature = "failpoints")]
    {
        std::env::var_os(FAILPOINT_ENV).is_some_and(|v| v == step)
    }
    #[cfg(not(feature = "failpoints"))]
    {
        let _ = step;
        false
    }
}

/// Aborts the process right here when `ACPX_FAILPOINT` equals the step name.
macro_rules! failpoint {
    ($step:literal) => {
        #[cfg(feature = "failpoints")]
        {
            if $crate::failpoint::armed($step) {
                std::process::abort();
            }
        }
    };
}

pub(crate) use failpoint;
