//! Tidy checks of the code's shape across files and crates (issue 44):
//!
//! - **No import circles between files** of a crate: file A naming a module whose file is B
//!   (`crate::…`, `super::…`, `self::…`, or a `use child::…` of its own child module), and B
//!   naming A, directly or through other files, is a circle. A module and the modules inside
//!   it (`session/mod.rs` and `session/attach.rs`) are one unit for this rule: a parent
//!   declares and re-exports its children, and the children use its types; what must not
//!   happen is two siblings, or two unrelated files, leaning on each other, which makes
//!   neither understandable alone. Inline `#[cfg(test)]` modules and `tests.rs` files are left
//!   out (tests see everything).
//! - **No crate holds more than [`MAX_CRATE_SHARE`] of the workspace's library source**
//!   (`crates/*/src`), so that no crate becomes the catch-all the runtime once was.

#![cfg(test)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::tidy::{root, rust_files};

/// A module path inside a crate (`["session", "attach"]`; the crate root is empty).
type ModPath = Vec<String>;

/// Circles still being taken apart, as the test prints them: a list that only shrinks (the
/// test fails when one listed here is gone, so it is taken off). Empty since issue 44 item 4
/// took the last ones apart; kept so that a circle found while one is being removed can be
/// listed and ratcheted down again rather than hidden.
const KNOWN_CIRCLES: &[&str] = &[];

/// The largest share of the workspace's library source lines one crate may hold, in percent.
const MAX_CRATE_SHARE: usize = 30;

/// Every module file of a crate's `src`, by module path.
fn module_files(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut mods = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).expect("under src").with_extension("");
        let mut path: ModPath = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            path.last().map(String::as_str),
            Some("lib" | "main" | "mod")
        ) {
            path.pop();
        }
        // A `src/bin/x.rs` is a crate of its own: not a module of this one.
        if path.first().is_some_and(|p| p == "bin") {
            continue;
        }
        mods.insert(path, f);
    }
    mods
}

/// `text` without line comments and without inline `#[cfg(test)] mod … { … }` blocks.
fn code_of(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let next_is_mod = lines.get(i + 1).is_some_and(|l| {
            let t = l.trim_start();
            (t.starts_with("mod ") || t.starts_with("pub mod ") || t.starts_with("pub(crate) mod "))
                && t.trim_end().ends_with('{')
        });
        if line.trim() == "#[cfg(test)]" && next_is_mod {
            let mut depth: i64 = 0;
            i += 1;
            while i < lines.len() {
                depth +=
                    lines[i].matches('{').count() as i64 - lines[i].matches('}').count() as i64;
                i += 1;
                if depth <= 0 {
                    break;
                }
            }
            continue;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
        i += 1;
    }
    out
}

fn is_ident(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

/// The paths named after each `crate::`, `super::` (repeated) or `self::` in `code`, as the
/// base module they start from and their segments; a `{a, b::c}` group gives one path each.
fn named_paths(code: &str, here: &ModPath) -> Vec<ModPath> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        let head = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|h| starts_word && rest.starts_with(h));
        let Some(head) = head else {
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        let mut base: ModPath = match head {
            "crate::" => Vec::new(),
            _ => here.clone(),
        };
        let mut j = i + head.len();
        if head == "super::" {
            // `super` of a file module is its parent; of a `mod.rs` module, its parent too.
            base.pop();
            while code[j..].starts_with("super::") {
                base.pop();
                j += "super::".len();
            }
        }
        // The rest of the path: idents joined by `::`, possibly ending in a `{…}` group.
        let mut segs = Vec::new();
        loop {
            let ident: String = code[j..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if ident.is_empty() {
                break;
            }
            j += ident.len();
            segs.push(ident);
            if code[j..].starts_with("::") {
                j += 2;
            } else {
                break;
            }
        }
        if code[j..].starts_with('{') {
            let end = code[j..].find('}').map_or(code.len(), |e| j + e);
            for item in code[j + 1..end].split(',') {
                let tail: Vec<String> = item
                    .trim()
                    .split("::")
                    .map(str::trim)
                    .filter(|s| is_ident(s) && *s != "self")
                    .map(str::to_owned)
                    .collect();
                let mut p = base.clone();
                p.extend(segs.iter().cloned());
                p.extend(tail);
                out.push(p);
            }
            j = end;
        } else {
            let mut p = base;
            p.extend(segs);
            out.push(p);
        }
        i = j.max(i + 1);
    }
    out
}

/// The names the crate root re-exports from its modules (`pub use a::b::{X, Y as Z};`,
/// `pub use a::X;`), each with the module it comes from: a file that names `crate::X`
/// depends on that module, not on the root (which every file is related to, so a circle
/// through a re-export would go unseen).
fn root_reexports(src: &Path) -> BTreeMap<String, ModPath> {
    let mut names = BTreeMap::new();
    let Some(root) = ["lib.rs", "main.rs"]
        .iter()
        .find_map(|f| fs::read_to_string(src.join(f)).ok())
    else {
        return names;
    };
    let code = code_of(&root);
    for stmt in code.split(';') {
        let Some(path) = stmt.trim().strip_prefix("pub use ") else {
            continue;
        };
        let (module, items) = match path.find("::{") {
            Some(at) => (&path[..at], path[at + 3..].trim_end_matches('}')),
            None => match path.rfind("::") {
                Some(at) => (&path[..at], &path[at + 2..]),
                None => continue,
            },
        };
        let module: ModPath = module
            .split("::")
            .map(str::trim)
            .filter(|s| *s != "crate" && *s != "self")
            .map(str::to_owned)
            .collect();
        // Another crate's items (`pub use acpx_model::X`) are not this crate's files.
        if module.is_empty() || module.iter().any(|s| !is_ident(s)) {
            continue;
        }
        for item in items.split(',') {
            let name = item.rsplit(" as ").next().unwrap_or("").trim();
            if is_ident(name) && !item.contains("::") {
                names.insert(name.to_owned(), module.clone());
            }
        }
    }
    names
}

/// The module files each module file of `src` names (the longest prefix of each named path
/// that is a module file), parent–child pairs left out.
fn file_graph(src: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mods = module_files(src);
    let reexported = root_reexports(src);
    let mut edges: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    for (here, file) in &mods {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        let code = code_of(&text);
        let mut paths = named_paths(&code, here);
        // `use child::…` of a module's own child (2018 paths).
        for l in code.lines() {
            if let Some(rest) = l.trim_start().strip_prefix("use ") {
                let first: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let mut p = here.clone();
                p.push(first);
                paths.push(p);
            }
        }
        for mut p in paths {
            // `crate::X` of a root re-export is a name of the module it comes from.
            if let Some(module) = p
                .first()
                .filter(|f| !mods.contains_key(&vec![(*f).clone()]))
                .and_then(|f| reexported.get(f))
            {
                p.splice(..1, module.iter().cloned());
            }
            let target = (0..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|k| mods.contains_key(k));
            let Some(target) = target else { continue };
            let related = target.starts_with(here) || here.starts_with(&target);
            if !related {
                edges.entry(here.clone()).or_default().insert(target);
            }
        }
    }
    edges
}

/// The strongly connected components with more than one file (Tarjan's algorithm).
fn circles(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<ModPath, usize>,
        low: BTreeMap<ModPath, usize>,
        stack: Vec<ModPath>,
        on_stack: BTreeSet<ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl Walk<'_> {
        fn visit(&mut self, v: &ModPath) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(lw);
                } else if self.on_stack.contains(w) {
                    let iw = self.index[w];
                    let lv = self.low.get_mut(v).expect("visited");
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let done = &w == v;
                    comp.push(w);
                    if done {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.found.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.found
}

fn crate_dirs() -> Vec<PathBuf> {
    let root = root();
    let mut dirs: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("crates/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    dirs.push(root.join("xtask"));
    dirs.push(root.join("tests"));
    dirs.sort();
    dirs
}

#[test]
fn no_import_circles_between_files() {
    let mut found = Vec::new();
    for dir in crate_dirs() {
        for comp in circles(&file_graph(&dir.join("src"))) {
            let names: Vec<String> = comp
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "(root)".to_owned()
                    } else {
                        m.join("/")
                    }
                })
                .collect();
            found.push(format!(
                "{}: {}",
                dir.strip_prefix(root()).unwrap_or(&dir).display(),
                names.join(" <-> ")
            ));
        }
    }
    let new: Vec<&String> = found
        .iter()
        .filter(|f| !KNOWN_CIRCLES.contains(&f.as_str()))
        .collect();
    assert!(
        new.is_empty(),
        "files that import each other (move what both need into a file of its own): {new:#?}"
    );
    let gone: Vec<&&str> = KNOWN_CIRCLES
        .iter()
        .filter(|k| !found.iter().any(|f| f == *k))
        .collect();
    assert!(
        gone.is_empty(),
        "these circles are gone: take them off KNOWN_CIRCLES: {gone:#?}"
    );
}

#[test]
fn the_detector_sees_a_circle_and_ignores_a_parent() {
    let dir = tempfile_dir("circles");
    let src = dir.join("src");
    fs::create_dir_all(src.join("session")).expect("mkdir");
    fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod session;\n").expect("write");
    fs::write(src.join("a.rs"), "//! a\nuse crate::b::B;\npub struct A;\n").expect("write");
    fs::write(
        src.join("b.rs"),
        "//! b\nuse crate::{a::A, session};\npub struct B;\n",
    )
    .expect("write");
    fs::write(
        src.join("session/mod.rs"),
        "mod attach;\npub use attach::X;\npub struct S;\n",
    )
    .expect("write");
    fs::write(
        src.join("session/attach.rs"),
        "use super::S;\npub struct X;\n",
    )
    .expect("write");
    let found = circles(&file_graph(&src));
    assert_eq!(
        found,
        vec![vec![vec!["a".to_owned()], vec!["b".to_owned()]]]
    );
    let _ = fs::remove_dir_all(&dir);
}

/// A circle through the crate root's re-exports (`crate::A` where lib.rs has
/// `pub use a::A;`) is a circle all the same.
#[test]
fn the_detector_follows_root_reexports() {
    let dir = tempfile_dir("tidy-reexport");
    let src = dir.join("src");
    fs::create_dir_all(&src).expect("mkdir");
    fs::write(
        src.join("lib.rs"),
        "//! root\nmod a;\nmod b;\npub use a::A;\npub use b::{B, Bee as Bumble};\n",
    )
    .expect("write");
    fs::write(
        src.join("a.rs"),
        "//! a\nuse crate::Bumble;\npub struct A;\n",
    )
    .expect("write");
    fs::write(src.join("b.rs"), "//! b\nuse crate::A;\npub struct B;\n").expect("write");
    let found = circles(&file_graph(&src));
    let _ = fs::remove_dir_all(&dir);
    assert_eq!(
        found,
        vec![vec![vec!["a".to_owned()], vec!["b".to_owned()]]]
    );
}

fn tempfile_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("acpx-tidy-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir
}

#[test]
fn no_crate_holds_more_than_its_share() {
    let mut lines = BTreeMap::new();
    for dir in crate_dirs()
        .into_iter()
        .filter(|d| d.parent().is_some_and(|p| p.ends_with("crates")))
    {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        let n: usize = files
            .iter()
            .map(|f| fs::read_to_string(f).map_or(0, |t| t.lines().count()))
            .sum();
        lines.insert(
            dir.file_name()
                .expect("name")
                .to_string_lossy()
                .into_owned(),
            n,
        );
    }
    let total: usize = lines.values().sum();
    let over: Vec<String> = lines
        .iter()
        .filter(|(_, n)| **n * 100 > total * MAX_CRATE_SHARE)
        .map(|(c, n)| format!("{c}: {n} of {total} lines ({}%)", n * 100 / total))
        .collect();
    assert!(
        over.is_empty(),
        "crates above {MAX_CRATE_SHARE}% of the workspace's library source: {over:?}"
    );
}
