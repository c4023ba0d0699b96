//! Structure-aware input mutation for the property tests ("fuzz targets") of every reader of
//! outside bytes (docs/RELIABILITY.md § Fuzzing). Shared by the crates' `fuzz_*` tests as a
//! dev-dependency, so that no library carries test-only code.
//!
//! An input is a valid sample (a real snapshot, log, journal or config written by acpx or Node
//! acpx) plus a short list of mutations. Mutations that work on the JSON tree (replace a value
//! with one of another type, delete or add a key, rename a key, copy a subtree, nest deeply)
//! reach validation code that random bytes never get past; byte mutations (truncate, flip,
//! insert, delete, splice a token) cover the parser and torn writes. One input in ten is plain
//! random bytes.
//!
//! Every target runs `ACPX_FUZZ_CASES` inputs (default [`DEFAULT_CASES`]) drawn from the seed
//! `ACPX_FUZZ_SEED` (default [`DEFAULT_SEED`]: the same inputs every run) and reports a panic
//! as a failure naming the seed and the (shrunk) input, so that it can be kept as a
//! regression test.

use std::cell::RefCell;
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};
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

/// Where targets that read real files make their temp dirs: `/dev/shm` (a tmpfs) when it
/// exists, so that the files they write and remove for every input never touch a disk; else
/// the system temp dir.
pub fn scratch_root() -> std::path::PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The seed of the inputs: `ACPX_FUZZ_SEED=N`, or `random` for a fresh one (printed with the
/// target's count, so that a failure can be run again); by default [`DEFAULT_SEED`], so that
/// a plain `cargo test` runs the same inputs every time.
pub fn seed() -> u64 {
    match std::env::var("ACPX_FUZZ_SEED").ok().as_deref() {
        None | Some("") => DEFAULT_SEED,
        Some("random") => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
        }
        Some(n) => n
            .parse()
            .unwrap_or_else(|_| panic!("ACPX_FUZZ_SEED={n}: a number or `random`")),
    }
}

/// The seed of a plain `cargo test` (issue 45).
pub const DEFAULT_SEED: u64 = 45;

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

/// How many values [`interesting_value`] picks from.
pub const INTERESTING_VALUES: u32 = 24;

/// Values of every JSON type and the edges readers get wrong (the `k`-th of
/// [`INTERESTING_VALUES`]; only that one is built).
pub fn interesting_value(k: u32) -> Value {
    match k % INTERESTING_VALUES {
        0 => Value::Null,
        1 => Value::Bool(true),
        2 => Value::Bool(false),
        3 => serde_json::json!(0),
        4 => serde_json::json!(-1),
        5 => serde_json::json!(1),
        6 => serde_json::json!(u64::MAX),
        7 => serde_json::json!(i64::MIN),
        8 => serde_json::json!(1.5),
        9 => serde_json::json!(-1e308),
        10 => serde_json::json!(""),
        11 => serde_json::json!("x"),
        12 => Value::String("x".repeat(5000)),
        13 => serde_json::json!("2026-01-10T09:00:00.000Z"),
        14 => serde_json::json!("9999-99-99T99:99:99Z"),
        15 => serde_json::json!("../../etc/passwd"),
        16 => serde_json::json!("a/b\\c\u{0}d"),
        17 => serde_json::json!("\u{202e}\u{fffd}"),
        18 => serde_json::json!([]),
        19 => serde_json::json!({}),
        20 => serde_json::json!([null]),
        21 => serde_json::json!({"": null}),
        22 => serde_json::json!("1"),
        _ => serde_json::json!(18446744073709551615u64),
    }
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

/// How many nodes `v` has (itself included).
fn node_count(v: &Value) -> usize {
    1 + match v {
        Value::Object(m) => m.values().map(node_count).sum(),
        Value::Array(a) => a.iter().map(node_count).sum(),
        _ => 0,
    }
}

/// The JSON pointer of the `n`-th node of `v` in preorder (0 is `v` itself, pointer ""),
/// built only along the path to it; `n` must be below [`node_count`].
fn nth_pointer(v: &Value, mut n: usize) -> String {
    let mut at = String::new();
    let mut node = v;
    'descend: while n > 0 {
        n -= 1;
        let children: Box<dyn Iterator<Item = (String, &Value)>> = match node {
            Value::Object(m) => Box::new(
                m.iter()
                    .map(|(k, c)| (k.replace('~', "~0").replace('/', "~1"), c)),
            ),
            Value::Array(a) => Box::new(a.iter().enumerate().map(|(i, c)| (i.to_string(), c))),
            _ => return at,
        };
        for (token, child) in children {
            let size = node_count(child);
            if n < size {
                at.push('/');
                at.push_str(&token);
                node = child;
                continue 'descend;
            }
            n -= size;
        }
        return at;
    }
    at
}

/// The parent pointer and the last token of `ptr` (unescaped).
fn split_pointer(ptr: &str) -> Option<(&str, String)> {
    let (parent, last) = ptr.rsplit_once('/')?;
    Some((parent, last.replace("~1", "/").replace("~0", "~")))
}

/// Applies one tree mutation to `doc`.
fn mutate_tree(doc: &mut Value, kind: u8, a: u32, b: u32) {
    let nodes = node_count(doc);
    let ptr = nth_pointer(doc, a as usize % nodes);
    let other = nth_pointer(doc, b as usize % nodes);
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

thread_local! {
    /// Samples parsed as one JSON document (`None`: not one), keyed by their address and
    /// length: a target's samples live as long as the target, and parsing a large snapshot for
    /// every input cost more than the reader under test.
    static PARSED_SAMPLES: RefCell<HashMap<(usize, usize), Option<Value>>> =
        RefCell::new(HashMap::new());
}

/// `sample` parsed as one JSON document (cached, see [`PARSED_SAMPLES`]).
fn parsed_sample(sample: &[u8]) -> Option<Value> {
    PARSED_SAMPLES.with(|cache| {
        cache
            .borrow_mut()
            .entry((sample.as_ptr() as usize, sample.len()))
            .or_insert_with(|| serde_json::from_slice::<Value>(sample).ok())
            .clone()
    })
}

/// `sample` with `mutations` applied. A tree mutation works on one line of the sample (the
/// whole sample when it is one JSON document), re-serialised; byte mutations on the bytes.
///
/// Consecutive tree mutations of a whole document work on one tree, printed (pretty) once
/// when bytes are needed, instead of printing and parsing it again between them. That gives
/// the same bytes, except that after a nesting mutation the tree is printed and parsed again
/// as before, since the parser's depth limit can refuse it (the next tree mutation then works
/// on a line, as it always did).
pub fn apply(sample: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut buf = sample.to_vec();
    let mut pristine = true;
    let mut tree: Option<Value> = None;
    let print = |doc: &Value| serde_json::to_vec_pretty(doc).unwrap_or_default();
    for &(kind, a, b) in mutations {
        if kind < 128 {
            if tree.is_none() {
                tree = if pristine {
                    parsed_sample(sample)
                } else {
                    serde_json::from_slice::<Value>(&buf).ok()
                };
            }
            pristine = false;
            if let Some(doc) = tree.as_mut() {
                mutate_tree(doc, kind, a, b);
                if kind % 6 == 5 {
                    buf = print(doc);
                    tree = None;
                }
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
            if let Some(doc) = tree.take() {
                buf = print(&doc);
            }
            pristine = false;
            mutate_bytes(&mut buf, kind, a, b);
        }
    }
    if let Some(doc) = tree {
        buf = print(&doc);
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
    let seed = seed();
    let config = Config {
        cases,
        rng_seed: RngSeed::Fixed(seed),
        // Crashing inputs are kept as named regression tests, not in proptest's files.
        failure_persistence: None,
        max_shrink_iters: 2000,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let mut count = 0u64;
    let started = Instant::now();
    let budget = budget();
    let mut out_of_time = false;
    let mut result = Ok(());
    // One input at a time (rather than `TestRunner::run`), so that a time budget stops the
    // generation too; a failing input is shrunk by `run_one` as `run` would.
    for _ in 0..cases {
        if budget.is_some_and(|b| started.elapsed() > b) {
            out_of_time = true;
            break;
        }
        let tree = strategy
            .new_tree(&mut runner)
            .unwrap_or_else(|why| panic!("fuzz target {name}: cannot generate an input: {why}"));
        count += 1;
        let outcome = runner.run_one(tree, |input| {
            let kept = input.clone();
            catch_unwind(AssertUnwindSafe(|| check(input)))
                .map_err(|_| TestCaseError::fail(format!("panicked on {kept:?}")))
        });
        if let Err(e) = outcome {
            result = Err(e);
            break;
        }
    }
    eprintln!(
        "fuzz {name}: {} inputs (seed {seed}), {:.1} s, {}{}",
        count,
        started.elapsed().as_secs_f64(),
        if result.is_ok() { "0 panics" } else { "PANIC" },
        if out_of_time {
            " (stopped by ACPX_FUZZ_SECONDS)"
        } else {
            ""
        }
    );
    if let Err(e) = result {
        panic!("fuzz target {name} (ACPX_FUZZ_SEED={seed}): {e}");
    }
}
