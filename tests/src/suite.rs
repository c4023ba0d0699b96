//! [`Suite`]: runs the checks against one backend as libtest-compatible trials
//! (`libtest-mimic`), in a test binary with `harness = false`.
//!
//! Each trial makes a fresh backend and runs its check on a fresh multi-thread tokio runtime.
//! A check whose [`Capabilities`](crate::Capabilities) the backend lacks is reported as
//! `ignored (backend lacks …)` and counted under "ignored", never under "passed". Filters,
//! `--exact`, `--list`, `--nocapture` and `--test-threads` work as with the built-in harness.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;

use libtest_mimic::{Arguments, Completion, Failed, Trial};

use crate::backend::Backend;
use crate::conformance::{Check, CHECKS, RETENTION_CHECKS};

/// The trials of one test binary: the conformance checks on one or more backends, plus any
/// backend-specific tests.
pub struct Suite {
    trials: Vec<Trial>,
}

impl Suite {
    /// A suite whose cross-process checks run the worker binary at `worker_binary`: pass
    /// `option_env!("CARGO_BIN_EXE_acpx-store-worker")`, which Cargo sets only for the
    /// integration tests of this package (the [`crate::conformance_tests!`] macro does).
    pub fn new(worker_binary: Option<&str>) -> Self {
        if let Some(bin) = worker_binary {
            crate::worker::set_binary(bin);
        }
        Suite { trials: Vec::new() }
    }

    /// Adds every check of [`CHECKS`], each on a fresh backend made by `make`.
    pub fn conformance<B: Backend + 'static>(
        self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        self.checks("", CHECKS, make)
    }

    /// Adds the event-retention checks ([`RETENTION_CHECKS`], named `retention::<check>`),
    /// each on a fresh backend made by `make`, which should have a small event budget.
    pub fn retention<B: Backend + 'static>(
        self,
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        self.checks("retention::", RETENTION_CHECKS, make)
    }

    /// Adds `checks`, named `<prefix><check>`. Each is ignored, with the reason, when the
    /// capabilities of the backend that `make` returns do not cover its needs.
    pub fn checks<B: Backend + 'static>(
        mut self,
        prefix: &str,
        checks: &[Check],
        make: impl Fn() -> B + Send + Sync + 'static,
    ) -> Self {
        let make = Arc::new(make);
        let capabilities = make().capabilities();
        for check in checks {
            let missing = capabilities.missing(&check.needs);
            let make = make.clone();
            let run = check.run;
            self.trials.push(Trial::ignorable_test(
                format!("{prefix}{}", check.name),
                move || match missing {
                    Some(reason) => Ok(Completion::ignored_with(reason)),
                    None => block_on(async move {
                        let backend = make();
                        run(&backend).await;
                    })
                    .map(|()| Completion::Completed),
                },
            ));
        }
        self
    }

    /// Adds a test of its own (backend-specific behaviour), run like the checks: on a fresh
    /// multi-thread runtime; a panic fails it.
    pub fn test<F, Fut>(mut self, name: &str, test: F) -> Self
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        self.trials.push(Trial::test(name, move || {
            block_on(async move { test().await })
        }));
        self
    }

    /// Parses the command line like libtest, runs the selected trials and returns the exit
    /// code (failure when any trial failed).
    pub fn run(self) -> ExitCode {
        libtest_mimic::run(&Arguments::from_args(), self.trials).exit_code()
    }
}

/// Runs `fut` to completion on a new two-worker tokio runtime (what
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` gives a test). A panic
/// propagates, and libtest-mimic reports it as the trial's failure with its message.
fn block_on(fut: impl Future<Output = ()>) -> Result<(), Failed> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Failed::from(format!("cannot start a tokio runtime: {e}")))?;
    runtime.block_on(fut);
    Ok(())
}
