//! Tidy checks: the architecture's invariants (ARCHITECTURE.md) as `#[test]`s, so that
//! `cargo test --workspace` fails when a change breaks one. In the spirit of rust-analyzer's
//! `xtask/src/tidy.rs`: each rule is stated so that it can fail, and says which file broke it.
//!
//! - Every source file (`crates/*/src`, `tests/src`, `xtask/src`) has at most
//!   [`MAX_LINES`] lines, and every one that is not a unit-test module (`tests.rs`) opens
//!   with a `//!` doc comment saying what it is for.
//! - Dependency direction: `acpx-model` depends on no async runtime, database, lock or ACP
//!   crate; the stores depend on no other acpx crate than `acpx-model` and `acpx-lock`; the
//!   runtime depends on no backend (`acpx-stores` opens them by name); only
//!   `acpx-cli` uses clap and the terminal crates; nothing depends on `acpx-cli`.
//! - The `acpx` binary has no `unsafe` code.

#![cfg(test)]

use std::fs;
use std::path::{Path, PathBuf};

/// The most lines a source file may have (a file that needs more holds more than one concern).
const MAX_LINES: usize = 900;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
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

/// Every `src` directory of the workspace's crates.
fn source_files() -> Vec<PathBuf> {
    let root = root();
    let mut dirs = vec![root.join("tests/src"), root.join("xtask/src")];
    for entry in fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
    {
        dirs.push(entry.path().join("src"));
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
        for dep in deps_of(store) {
            if dep.starts_with("acpx-") {
                assert!(
                    dep == "acpx-model" || dep == "acpx-lock",
                    "{store} depends on {dep}: a backend knows only the Store contract"
                );
            }
            assert!(dep != "agent-client-protocol", "{store} must not speak ACP");
        }
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
        for banned in [
            "clap",
            "clap_complete",
            "clap_mangen",
            "indicatif",
            "acpx-cli",
        ] {
            assert!(
                !deps.iter().any(|d| d == banned),
                "{} depends on {banned}: argv, terminals and exit codes belong to acpx-cli",
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
