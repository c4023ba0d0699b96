//! Tidy checks: the architecture's invariants (ARCHITECTURE.md) as `#[test]`s, so that
//! `cargo test --workspace` fails when a change breaks one. In the spirit of rust-analyzer's
//! `xtask/src/tidy.rs`: each rule is stated so that it can fail, and says which file broke it.
//!
//! - Every Rust file (`crates/*/src`, `crates/*/tests`, `tests/`, `xtask/src`) has at most
//!   [`MAX_LINES`] lines, and every one that is not a unit-test module (`tests.rs`) opens
//!   with a `//!` doc comment saying what it is for. No function is longer than
//!   [`MAX_FN_LINES`] lines, but for the few in [`LONG_FUNCTIONS`] (a list that only shrinks).
//! - Each crate links its integration tests once: one `tests/it/main.rs` binary, not a binary
//!   per test file.
//! - Dependency direction: `acpx-model` depends on no async runtime, database, lock or ACP
//!   crate; the stores depend on no other acpx crate than `acpx-model` and `acpx-lock` (the
//!   database stores also on `acpx-store-sql`, which depends on no database driver); the
//!   runtime depends on no backend (`acpx-stores` opens them by name); only
//!   `acpx-cli` uses clap and the terminal crates; nothing depends on `acpx-cli`.
//! - The `acpx` binary has no `unsafe` code; a library has it only in the files of
//!   [`UNSAFE_ALLOWED`], each with the reason.

#![cfg(test)]

use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a source file may have (a file that needs more holds more than one concern).
const MAX_LINES: usize = 900;

pub(crate) fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every Rust file of the workspace: the `src` and `tests` directories of its crates, the
/// conformance suite and xtask.
fn source_files() -> Vec<PathBuf> {
    let root = root();
    let mut dirs = vec![
        root.join("tests/src"),
        root.join("tests/tests"),
        root.join("xtask/src"),
    ];
    for entry in fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        dirs.push(entry.path().join("src"));
        dirs.push(entry.path().join("tests"));
    }
    let mut files = Vec::new();
    for d in dirs {
        rust_files(&d, &mut files);
    }
    files.sort();
    assert!(files.len() > 50, "found only {} source files", files.len());
    files
}

fn relative(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

#[test]
fn no_source_file_passes_the_line_limit() {
    let long: Vec<String> = source_files()
        .iter()
        .filter_map(|p| {
            let n = fs::read_to_string(p).ok()?.lines().count();
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", relative(p)))
        })
        .collect();
    assert!(
        long.is_empty(),
        "split these by concern (at most {MAX_LINES} lines a file): {long:#?}"
    );
}

#[test]
fn every_module_says_what_it_is_for() {
    let undocumented: Vec<String> = source_files()
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs"))
        .filter(|p| fs::read_to_string(p).is_ok_and(|text| !text.trim_start().starts_with("//!")))
        .map(|p| relative(p))
        .collect();
    assert!(
        undocumented.is_empty(),
        "these modules lack a leading //! doc comment: {undocumented:#?}"
    );
}

/// The names under `[dependencies]` (not dev- or build-dependencies) of a crate's manifest.
fn dependencies(manifest: &Path) -> Vec<String> {
    let text = fs::read_to_string(manifest).expect("a Cargo.toml");
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && !line.is_empty() && !line.starts_with('#') {
            if let Some((name, _)) = line.split_once(['=', '.']) {
                names.push(name.trim().to_owned());
            }
        }
    }
    names
}

fn deps_of(krate: &str) -> Vec<String> {
    dependencies(&root().join(krate).join("Cargo.toml"))
}

#[test]
fn the_model_stays_pure() {
    let deps = deps_of("crates/acpx-model");
    for banned in [
        "tokio",
        "rusqlite",
        "agent-client-protocol",
        "acpx-lock",
        "acpx-runtime",
    ] {
        assert!(
            !deps.iter().any(|d| d == banned),
            "acpx-model must not depend on {banned} (it is pure: no I/O, no async runtime)"
        );
    }
}

#[test]
fn the_interchange_crate_stays_pure() {
    for dep in deps_of("crates/acpx-interchange") {
        assert!(
            !dep.starts_with("acpx-") || dep == "acpx-model",
            "acpx-interchange depends on {dep}: it reads the model's formats, nothing else"
        );
        assert!(
            ![
                "tokio",
                "rusqlite",
                "tokio-postgres",
                "agent-client-protocol"
            ]
            .contains(&dep.as_str()),
            "acpx-interchange must not depend on {dep} (it is pure: no I/O, no async runtime)"
        );
    }
}

#[test]
fn stores_depend_only_on_the_model_and_the_lock_crate() {
    for store in [
        "crates/acpx-store-fs",
        "crates/acpx-store-sqlite",
        "crates/acpx-store-postgres",
    ] {
        let database = store != "crates/acpx-store-fs";
        for dep in deps_of(store) {
            if dep.starts_with("acpx-") {
                assert!(
                    dep == "acpx-model"
                        || dep == "acpx-lock"
                        || (database && dep == "acpx-store-sql"),
                    "{store} depends on {dep}: a backend knows only the Store contract (and a \
                     database store the SQL layer)"
                );
            }
            assert!(dep != "agent-client-protocol", "{store} must not speak ACP");
        }
    }
}

#[test]
fn the_sql_layer_depends_on_no_driver_and_no_backend() {
    for dep in deps_of("crates/acpx-store-sql") {
        assert!(
            dep == "acpx-model" || !dep.starts_with("acpx-"),
            "acpx-store-sql depends on {dep}: it is below the backends, over the model only"
        );
        assert!(
            !["rusqlite", "tokio-postgres", "deadpool-postgres", "tokio"].contains(&dep.as_str()),
            "acpx-store-sql depends on {dep}: each backend keeps its driver code"
        );
    }
}

#[test]
fn the_runtime_depends_on_no_backend() {
    for dep in deps_of("crates/acpx-runtime") {
        assert!(
            !dep.starts_with("acpx-store") && dep != "rusqlite" && dep != "tokio-postgres",
            "acpx-runtime depends on {dep}: it takes an Arc<dyn Store>; opening a backend by \
             name is acpx-stores's job"
        );
    }
}

#[test]
fn only_the_binary_knows_the_command_line() {
    let mut manifests = Vec::new();
    for entry in fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        manifests.push(entry.path());
    }
    manifests.push(root().join("tests"));
    for dir in manifests {
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.as_deref() == Some("acpx-cli") {
            continue;
        }
        let deps = dependencies(&dir.join("Cargo.toml"));
        // A library may derive clap's value enums for its own types, behind an optional
        // `clap` feature that only the binary turns on (so the binary mirrors none of them).
        let optional_clap = fs::read_to_string(dir.join("Cargo.toml")).is_ok_and(|t| {
            t.lines().any(|l| {
                let l = l.trim();
                l.starts_with("clap ") && l.contains("optional = true")
            }) && t.lines().any(|l| l.trim() == "clap = [\"dep:clap\"]")
        });
        for banned in [
            "clap",
            "clap_complete",
            "clap_mangen",
            "indicatif",
            "acpx-cli",
        ] {
            if banned == "clap" && optional_clap {
                continue;
            }
            assert!(
                !deps.iter().any(|d| d == banned),
                "{} depends on {banned}: argv, terminals and exit codes belong to acpx-cli \
                 (a library's own value enums may derive clap's behind an optional `clap` \
                 feature)",
                relative(&dir)
            );
        }
    }
}

#[test]
fn the_binary_has_no_unsafe_code() {
    let mut files = Vec::new();
    rust_files(&root().join("crates/acpx-cli/src"), &mut files);
    let with_unsafe: Vec<String> = files
        .iter()
        .filter(|p| {
            fs::read_to_string(p).is_ok_and(|t| {
                t.lines()
                    .any(|l| !l.trim_start().starts_with("//") && l.contains("unsafe"))
            })
        })
        .map(|p| relative(p))
        .collect();
    assert!(
        with_unsafe.is_empty(),
        "unsafe in the binary: {with_unsafe:?}"
    );
}

/// The most lines a function may have: one that needs more does several things.
const MAX_FN_LINES: usize = 150;

/// Functions longer than [`MAX_FN_LINES`] that predate the rule, as `(file, fn name)`. The
/// list only shrinks: a listed function that got short must leave it.
const LONG_FUNCTIONS: &[(&str, &str)] = &[
    (
        "crates/acpx-cli/tests/it/maintenance.rs",
        "node_acpx_import_rebuilds_trimmed_threads_from_the_journal",
    ),
    (
        "crates/acpx-model/src/migrate.rs",
        "copy_store_with_progress",
    ),
    ("crates/acpx-runtime/src/agent.rs", "spawn"),
    ("crates/acpx-app/src/config_file.rs", "merge_key"),
    (
        "crates/acpx-runtime/src/core/permission_request.rs",
        "request_permission",
    ),
    ("crates/acpx-runtime/src/core.rs", "terminal"),
    (
        "crates/acpx-runtime/src/mapping/messages.rs",
        "apply_session_update",
    ),
    (
        "crates/acpx-runtime/src/ops/node_import/journal.rs",
        "convert_journal",
    ),
    ("crates/acpx-owner/src/dispatch.rs", "dispatch"),
    ("crates/acpx-owner/src/worker.rs", "run_job"),
    ("crates/acpx-runtime/src/turn.rs", "drive"),
    (
        "crates/acpx-store-sqlite/tests/it/docs_queries.rs",
        "documented_queries_run_and_answer",
    ),
    (
        "crates/acpx-store-sqlite/tests/it/migrate.rs",
        "a_version_1_database_migrates_forward_with_everything_in_it",
    ),
    ("crates/acpx-test-agent/src/scripts.rs", "prompt"),
    (
        "tests/src/conformance/damage.rs",
        "malformed_snapshots_reported_not_fatal",
    ),
    ("xtask/src/bench_owner.rs", "run"),
];

/// The functions of `text` as `(name, first line, lines)`: a `fn` item whose body opens on
/// its signature's last line and closes at the same indentation (rustfmt's layout).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let body = line.trim_start();
        let indent = &line[..line.len() - body.len()];
        let after_fn = [
            "pub ",
            "pub(crate) ",
            "pub(super) ",
            "async ",
            "const ",
            "unsafe ",
        ]
        .iter()
        .fold(body, |rest, prefix| {
            rest.strip_prefix(prefix).unwrap_or(rest)
        });
        let Some(name) = after_fn
            .strip_prefix("fn ")
            .map(|rest| {
                rest.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .next()
            })
            .and_then(|n| n.filter(|n| !n.is_empty()))
        else {
            i += 1;
            continue;
        };
        // The signature's last line: the one that opens the body (or ends a declaration).
        let Some(open) = (i..lines.len()).find(|&j| {
            let l = lines[j].trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            break;
        };
        if lines[open].trim_end().ends_with(';') {
            i = open + 1;
            continue;
        }
        let close = format!("{indent}}}");
        let end = (open + 1..lines.len())
            .find(|&j| lines[j].trim_end() == close)
            .unwrap_or(lines.len() - 1);
        found.push((name.to_owned(), i + 1, end - i + 1));
        i = open + 1;
    }
    found
}

#[test]
fn no_function_passes_the_length_limit() {
    let mut long = Vec::new();
    let mut listed_but_short = Vec::new();
    for p in source_files() {
        let Ok(text) = fs::read_to_string(&p) else {
            continue;
        };
        let file = relative(&p);
        let fns = functions(&text);
        for (name, line, n) in &fns {
            let listed = LONG_FUNCTIONS.contains(&(file.as_str(), name.as_str()));
            if *n > MAX_FN_LINES && !listed {
                long.push(format!("{file}:{line} fn {name} ({n} lines)"));
            }
        }
        for (f, name) in LONG_FUNCTIONS.iter().filter(|(f, _)| *f == file) {
            if !fns
                .iter()
                .any(|(n, _, len)| n == name && *len > MAX_FN_LINES)
            {
                listed_but_short.push(format!("{f} fn {name}"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "split these functions (at most {MAX_FN_LINES} lines): {long:#?}"
    );
    assert!(
        listed_but_short.is_empty(),
        "these are short now (or gone): take them out of LONG_FUNCTIONS: {listed_but_short:#?}"
    );
}

#[test]
fn each_crate_links_its_integration_tests_once() {
    let mut loose = Vec::new();
    for entry in fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        let tests = entry.path().join("tests");
        let Ok(files) = fs::read_dir(&tests) else {
            continue;
        };
        for f in files.flatten() {
            let path = f.path();
            if path.extension().is_some_and(|e| e == "rs") {
                loose.push(relative(&path));
            }
        }
    }
    assert!(
        loose.is_empty(),
        "each file under tests/ is a test binary that links the workspace again: make these \
         modules of tests/it/main.rs: {loose:#?}"
    );
}

/// Library files that may hold `unsafe` code, with the reason. Tests and xtask are not
/// covered (they kill processes and set resource limits through libc).
const UNSAFE_ALLOWED: &[(&str, &str)] = &[
    (
        "crates/acpx-app/src/allocator.rs",
        "the counting global allocator of the benchmarks implements GlobalAlloc",
    ),
    (
        "crates/acpx-runtime/src/client_ops/terminals.rs",
        "a terminal's whole process group is signalled (killpg)",
    ),
    (
        "crates/acpx-runtime/src/client_ops/tests.rs",
        "the terminals' tests check that a grandchild is gone (kill with signal 0)",
    ),
    (
        "crates/acpx-owner/src/frozen.rs",
        "a frozen queue owner, named by its own lease, is ended (kill SIGKILL)",
    ),
    (
        "crates/acpx-runtime/src/text_spill.rs",
        "freed heap pages go back to the system after a long reply (glibc malloc_trim)",
    ),
];

/// Whether `line` holds `unsafe` code (not a comment or a string that mentions the word).
fn has_unsafe_code(line: &str) -> bool {
    let code = line.trim_start();
    if code.starts_with("//") {
        return false;
    }
    let before_string = code.split('"').next().unwrap_or(code);
    ["unsafe {", "unsafe fn", "unsafe impl", "unsafe extern"]
        .iter()
        .any(|t| before_string.contains(t))
}

#[test]
fn unsafe_code_only_where_the_allow_list_says() {
    let mut files = Vec::new();
    for entry in fs::read_dir(root().join("crates"))
        .expect("crates/")
        .flatten()
    {
        rust_files(&entry.path().join("src"), &mut files);
    }
    let unlisted: Vec<String> = files
        .iter()
        .filter(|p| fs::read_to_string(p).is_ok_and(|t| t.lines().any(has_unsafe_code)))
        .map(|p| relative(p))
        .filter(|f| !UNSAFE_ALLOWED.iter().any(|(a, _)| a == f))
        .collect();
    assert!(
        unlisted.is_empty(),
        "unsafe code outside UNSAFE_ALLOWED (add the file with its reason, or remove it): \
         {unlisted:#?}"
    );
}
