//! Structure-aware input mutation for the property tests ("fuzz targets") of every reader of
//! outside bytes (docs/RELIABILITY.md § Fuzzing). Shared by the crates' `fuzz_*` tests through
//! `#[path]`, so that no library carries test-only code.
//!
//! An input is a valid sample (a real snapshot, log, journal or config written by acpx or Node
//! acpx) plus a short list of mutations. Mutations that work on the JSON tree (replace a value
//! with one of another type, delete or add a key, rename a key, copy a subtree, nest deeply)
//! reach validation code that random bytes never get past; byte mutations (truncate, flip,
//! insert, delete, splice a token) cover the parser and torn writes. One input in ten is plain
//! random bytes.
//!
//! Every target runs `ACPX_FUZZ_CASES` inputs (default [`DEFAULT_CASES`]) and reports a panic as
//! a failure naming the (shrunk) input, so that it can be kept as a regression test.

#![allow(dead_code)]

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

/// Inputs per target in a plain `cargo test` (a long run sets `ACPX_FUZZ_CASES`).
pub const DEFAULT_CASES: u32 = 512;

/// One mutation: a kind and two numbers that pick a place and a variant.
pub type Mutation = (u8, u32, u32);

/// An input: which sample, which mutations, or plain random bytes.
#[derive(Debug, Clone)]
pub enum Input {
    Mutated(usize, Vec<Mutation>),
    Random(Vec<u8>),
}

/// How many inputs a target runs.
pub fn cases() -> u32 {
    std::env::var("ACPX_FUZZ_CASES")
        .ok()
        .and_then(|v| v.replace('_', "").parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_CASES)
}

/// The time budget of a long run, if any.
fn budget() -> Option<Duration> {
    std::env::var("ACPX_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map(Duration::from_secs)
}

/// The inputs over `samples` samples.
pub fn inputs(samples: usize) -> impl Strategy<Value = Input> {
    prop_oneof![
        9 => (0..samples, prop::collection::vec(any::<Mutation>(), 1..6))
            .prop_map(|(s, m)| Input::Mutated(s, m)),
        1 => prop::collection::vec(any::<u8>(), 0..600).prop_map(Input::Random),
    ]
}

/// Values of every JSON type and the edges readers get wrong.
fn interesting_value(k: u32) -> Value {
    let long = "x".repeat(5000);
    let values = [
        Value::Null,
        Value::Bool(true),
        Value::Bool(false),
        serde_json::json!(0),
        serde_json::json!(-1),
        serde_json::json!(1),
        serde_json::json!(u64::MAX),
        serde_json::json!(i64::MIN),
        serde_json::json!(1.5),
        serde_json::json!(-1e308),
        serde_json::json!(""),
        serde_json::json!("x"),
        Value::String(long),
        serde_json::json!("2026-01-10T09:00:00.000Z"),
        serde_json::json!("9999-99-99T99:99:99Z"),
        serde_json::json!("../../etc/passwd"),
        serde_json::json!("a/b\\c\u{0}d"),
        serde_json::json!("\u{202e}\u{fffd}"),
        serde_json::json!([]),
        serde_json::json!({}),
        serde_json::json!([null]),
        serde_json::json!({"": null}),
        serde_json::json!("1"),
        serde_json::json!(18446744073709551615u64),
    ];
    values[k as usize % values.len()].clone()
}

/// Byte strings that break parsers: quotes, brackets, escapes, huge numbers, invalid UTF-8.
const TOKENS: &[&[u8]] = &[
    b"\n",
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"null",
    b"\\u0000",
    b"\\ud800",
    b"\xff\xfe",
    b"\xc3",
    b"1e999",
    b"-0",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"\r\n",
    b"\0",
    b"\t",
];

/// JSON pointers of every node of `v`, preorder (the root is "").
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    out.push(at.clone());
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let key = k.replace('~', "~0").replace('/', "~1");
                pointers(child, format!("{at}/{key}"), out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                pointers(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// The parent pointer and the last token of `ptr` (unescaped).
fn split_pointer(ptr: &str) -> Option<(&str, String)> {
    let (parent, last) = ptr.rsplit_once('/')?;
    Some((parent, last.replace("~1", "/").replace("~0", "~")))
}

/// Applies one tree mutation to `doc`.
fn mutate_tree(doc: &mut Value, kind: u8, a: u32, b: u32) {
    let mut ptrs = Vec::new();
    pointers(doc, String::new(), &mut ptrs);
    let ptr = ptrs[a as usize % ptrs.len()].clone();
    let other = ptrs[b as usize % ptrs.len()].clone();
    match kind % 6 {
        0 => {
            if let Some(node) = doc.pointer_mut(&ptr) {
                *node = interesting_value(b);
            }
        }
        1 => {
            let Some((parent, last)) = split_pointer(&ptr) else {
                return;
            };
            match doc.pointer_mut(parent) {
                Some(Value::Object(m)) => {
                    m.shift_remove(&last);
                }
                Some(Value::Array(items)) => {
                    if let Ok(i) = last.parse::<usize>() {
                        if i < items.len() {
                            items.remove(i);
                        }
                    }
                }
                _ => {}
            }
        }
        2 => match doc.pointer_mut(&ptr) {
            Some(Value::Object(m)) => {
                m.insert(format!("unknown{}", b % 7), interesting_value(b >> 3));
            }
            Some(Value::Array(items)) => items.push(interesting_value(b)),
            _ => {}
        },
        3 => {
            let copy = doc.pointer(&other).cloned().unwrap_or(Value::Null);
            if let Some(node) = doc.pointer_mut(&ptr) {
                *node = copy;
            }
        }
        4 => {
            // Rename a key to another key of the document (a field moved or duplicated).
            let Some((parent, last)) = split_pointer(&ptr) else {
                return;
            };
            let Some((_, new_key)) = split_pointer(&other) else {
                return;
            };
            if let Some(Value::Object(m)) = doc.pointer_mut(parent) {
                if let Some(v) = m.shift_remove(&last) {
                    m.insert(new_key, v);
                }
            }
        }
        _ => {
            if let Some(node) = doc.pointer_mut(&ptr) {
                let mut v = node.take();
                for _ in 0..(b % 160) {
                    v = Value::Array(vec![v]);
                }
                *node = v;
            }
        }
    }
}

/// Applies one byte mutation to `buf`.
fn mutate_bytes(buf: &mut Vec<u8>, kind: u8, a: u32, b: u32) {
    let at = |n: usize| a as usize % (n + 1);
    match kind % 6 {
        0 => {
            let cut = at(buf.len());
            buf.truncate(cut);
        }
        1 => {
            if !buf.is_empty() {
                let i = a as usize % buf.len();
                buf[i] ^= (b as u8) | 1;
            }
        }
        2 => {
            let i = at(buf.len());
            buf.insert(i, b as u8);
        }
        3 => {
            let i = at(buf.len());
            let end = (i + (b as usize % 64) + 1).min(buf.len());
            buf.drain(i..end);
        }
        4 => {
            let i = at(buf.len());
            let token = TOKENS[b as usize % TOKENS.len()];
            buf.splice(i..i, token.iter().copied());
        }
        _ => {
            // Duplicate or drop a whole line (a repeated or missing log record).
            let lines: Vec<&[u8]> = buf.split_inclusive(|c| *c == b'\n').collect();
            if lines.is_empty() {
                return;
            }
            let i = a as usize % lines.len();
            let mut out = Vec::with_capacity(buf.len() * 2);
            for (j, line) in lines.iter().enumerate() {
                if j == i && b.is_multiple_of(2) {
                    continue;
                }
                out.extend_from_slice(line);
                if j == i {
                    out.extend_from_slice(line);
                }
            }
            *buf = out;
        }
    }
}

/// `sample` with `mutations` applied. A tree mutation works on one line of the sample (the
/// whole sample when it is one JSON document), re-serialised; byte mutations on the bytes.
pub fn apply(sample: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut buf = sample.to_vec();
    for &(kind, a, b) in mutations {
        if kind < 128 {
            let whole = serde_json::from_slice::<Value>(&buf).ok();
            if let Some(mut doc) = whole {
                mutate_tree(&mut doc, kind, a, b);
                buf = serde_json::to_vec_pretty(&doc).unwrap_or_default();
                continue;
            }
            let mut lines: Vec<Vec<u8>> = buf
                .split_inclusive(|c| *c == b'\n')
                .map(<[u8]>::to_vec)
                .collect();
            if lines.is_empty() {
                continue;
            }
            let i = (b as usize).wrapping_mul(31) % lines.len();
            let ends_nl = lines[i].ends_with(b"\n");
            let body = lines[i].strip_suffix(b"\n").unwrap_or(&lines[i]);
            if let Ok(mut doc) = serde_json::from_slice::<Value>(body) {
                mutate_tree(&mut doc, kind, a, b);
                let mut line = serde_json::to_vec(&doc).unwrap_or_default();
                if ends_nl {
                    line.push(b'\n');
                }
                lines[i] = line;
                buf = lines.concat();
            }
        } else {
            mutate_bytes(&mut buf, kind, a, b);
        }
    }
    buf
}

/// The bytes of `input` over `samples`.
pub fn bytes_of(input: &Input, samples: &[Vec<u8>]) -> Vec<u8> {
    match input {
        Input::Mutated(s, m) => apply(&samples[*s % samples.len()], m),
        Input::Random(b) => b.clone(),
    }
}

/// Runs `check` on `cases()` inputs built from `samples`; a panic fails the target naming the
/// shrunk input. Prints the count and the time taken (seen with `--nocapture`).
pub fn fuzz(name: &str, samples: &[Vec<u8>], check: impl Fn(&[u8])) {
    fuzz_with(name, inputs(samples.len()), |input| {
        check(&bytes_of(&input, samples))
    });
}

/// [`fuzz`] over any strategy (argv lists, pairs of documents).
pub fn fuzz_with<S: Strategy>(name: &str, strategy: S, check: impl Fn(S::Value))
where
    S::Value: Clone + std::fmt::Debug,
{
    let cases = cases();
    let config = Config {
        cases,
        // Crashing inputs are kept as named regression tests, not in proptest's files.
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let count = Cell::new(0u64);
    let started = Instant::now();
    let budget = budget();
    let out_of_time = Cell::new(false);
    let result = runner.run(&strategy, |input| {
        if budget.is_some_and(|b| started.elapsed() > b) {
            out_of_time.set(true);
            return Ok(());
        }
        count.set(count.get() + 1);
        let kept = input.clone();
        catch_unwind(AssertUnwindSafe(|| check(input)))
            .map_err(|_| TestCaseError::fail(format!("panicked on {kept:?}")))
    });
    eprintln!(
        "fuzz {name}: {} inputs, {:.1} s, {}{}",
        count.get(),
        started.elapsed().as_secs_f64(),
        if result.is_ok() { "0 panics" } else { "PANIC" },
        if out_of_time.get() {
            " (stopped by ACPX_FUZZ_SECONDS)"
        } else {
            ""
        }
    );
    if let Err(e) = result {
        panic!("fuzz target {name}: {e}");
    }
}
