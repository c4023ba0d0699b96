//! The search index against the scan it replaces, on real files: the same hits whatever the
//! index holds (stale, damaged, missing, foreign), and snapshots loaded only when it cannot
//! answer.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use acpx_model::thread::{AgentContent, AgentMessage, Mention, Message, Thinking, UserContent};
use acpx_model::{list_order_key, NewSession, Timestamp, UserMessage};

use super::*;
use crate::core::{FsCore, FsStoreOptions};
use crate::layout::SEARCH_FILE;

fn open(dir: &Path) -> FsCore {
    FsCore::open(dir, FsStoreOptions::default()).unwrap()
}

fn index_path(core: &FsCore) -> PathBuf {
    core.sessions_dir().join(SEARCH_FILE)
}

fn record(id: &str, cwd: &str, last_used_ms: i64) -> SessionRecord {
    let mut r = SessionRecord::new(
        NewSession {
            acpx_record_id: RecordId::parse(id).unwrap(),
            acp_session_id: "acp".into(),
            agent_session_id: None,
            agent_command: "agent".into(),
            cwd: cwd.into(),
            name: None,
        },
        Timestamp::now(),
    );
    r.last_used_at = Timestamp::from_millis(last_used_ms).unwrap();
    r
}

fn user(id: &str, text: &str) -> Message {
    Message::User(UserMessage {
        id: id.into(),
        content: vec![UserContent::Text(text.into())],
        extra: Default::default(),
    })
}

fn agent(text: &str) -> Message {
    let mut a = AgentMessage::new();
    a.content.push(AgentContent::Text(text.into()));
    Message::Agent(a)
}

/// What search answered before the index: every listed session loaded, in list order.
fn scanned(core: &FsCore, query: &SearchQuery) -> Vec<SearchHit> {
    let cwd = query.cwd.clone();
    let mut summaries: Vec<_> = core
        .list_all()
        .unwrap()
        .summaries
        .into_iter()
        .filter(|s| cwd.as_deref().is_none_or(|c| s.cwd == c))
        .collect();
    summaries.sort_by(|a, b| list_order_key(a).cmp(&list_order_key(b)));
    let mut hits: Vec<SearchHit> = summaries
        .iter()
        .flat_map(|s| search_record(&core.load(&s.acpx_record_id).unwrap(), query))
        .collect();
    hits.truncate(query.effective_limit());
    hits
}

/// Searches through the index; returns the hits and how many snapshots it had to parse.
fn searched(core: &FsCore, query: &SearchQuery) -> (Vec<SearchHit>, usize) {
    let before = core.snapshot_parses.load(Ordering::Relaxed);
    let hits = core.search(query, None).unwrap();
    (hits, core.snapshot_parses.load(Ordering::Relaxed) - before)
}

fn q(text: &str) -> SearchQuery {
    SearchQuery {
        text: text.into(),
        ..SearchQuery::default()
    }
}

/// A tiny deterministic generator (no dependency, same set on every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % n
    }
}

const WORDS: &[&str] = &[
    "Build",
    "flaky",
    "linker",
    "naïve",
    "café",
    "say \"hi\"",
    "back\\slash",
    "tab\there",
    "line\nbreak",
    "UPPER",
    "lower",
    "user",
    "agent",
    "id",
    "revision",
    "日本語",
    "x",
    "zz",
];

fn generated(core: &FsCore, rng: &mut Lcg, n: usize) {
    for i in 0..n {
        let cwd = ["/a", "/b", "/c"][rng.next(3)];
        // Ties in last use are common (the record id decides).
        let mut r = record(&format!("g{i:03}"), cwd, 1_000 + rng.next(40) as i64);
        if rng.next(4) == 0 {
            r.thread.title = format!("title {}", WORDS[rng.next(WORDS.len())]);
        }
        for m in 0..rng.next(7) {
            let text: Vec<&str> = (0..rng.next(6))
                .map(|_| WORDS[rng.next(WORDS.len())])
                .collect();
            let text = text.join(" ");
            r.thread.messages.push(match rng.next(5) {
                0 => Message::Resume,
                1 => {
                    let mut a = AgentMessage::new();
                    a.content.push(AgentContent::Thinking(Thinking {
                        text: text.clone().into(),
                        signature: None,
                    }));
                    a.content
                        .push(AgentContent::Text(WORDS[rng.next(WORDS.len())].into()));
                    Message::Agent(a)
                }
                2 => Message::User(UserMessage {
                    id: format!("u-{i}-{m}"),
                    content: vec![
                        UserContent::Text(text),
                        UserContent::Mention(Mention {
                            uri: serde_json::json!({"File": {"abs_path": "/x"}}),
                            content: WORDS[rng.next(WORDS.len())].into(),
                        }),
                    ],
                    extra: Default::default(),
                }),
                3 => agent(&text),
                _ => user(&format!("u-{i}-{m}"), &text),
            });
        }
        core.create(&mut r).unwrap();
    }
}

fn queries() -> Vec<SearchQuery> {
    let mut out = Vec::new();
    for text in [
        "build",
        "FLAKY build",
        "naïve café",
        "\"hi\"",
        "back\\slash",
        "user",
        "agent id",
        "revision",
        "日本",
        "x",
        "zz x",
        "line",
        "title",
        "nothing-matches-this",
    ] {
        for limit in [None, Some(1), Some(3), Some(7)] {
            for cwd in [None, Some("/b")] {
                out.push(SearchQuery {
                    text: text.into(),
                    cwd: cwd.map(Into::into),
                    limit,
                });
            }
        }
    }
    out
}

fn assert_same_as_scan(core: &FsCore, what: &str) -> usize {
    let mut parses = 0;
    for query in queries() {
        let (hits, p) = searched(core, &query);
        parses += p;
        assert_eq!(hits, scanned(core, &query), "{what}: {query:?}");
    }
    parses
}

#[test]
fn the_index_gives_the_scans_hits_on_a_generated_set() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    let mut rng = Lcg(15);
    generated(&core, &mut rng, 120);
    assert_eq!(
        assert_same_as_scan(&core, "fresh"),
        0,
        "every save noted its texts"
    );

    // Saves, renames, closes, deletes, and a snapshot written by hand.
    for i in (0..120).step_by(7) {
        let id = RecordId::parse(&format!("g{i:03}")).unwrap();
        let mut r = core.load(&id).unwrap();
        match i % 4 {
            0 => r.thread.messages.push(agent("a new build result")),
            1 => r.name = Some(format!("renamed {i}")),
            2 => r.thread.title = "flaky title".into(),
            _ => r.thread.messages.clear(),
        }
        core.save(&mut r).unwrap();
    }
    for i in (3..120).step_by(11) {
        let id = RecordId::parse(&format!("g{i:03}")).unwrap();
        if i % 2 == 0 {
            core.close(&id, Timestamp::now(), None).unwrap();
        } else {
            core.delete(&id).unwrap();
        }
    }
    let mut hand = core.load(&RecordId::parse("g001").unwrap()).unwrap();
    hand.thread.messages = vec![user("u-hand", "written by hand: build flaky")];
    hand.revision += 1;
    std::fs::write(
        core.snapshot_path(&hand.acpx_record_id),
        hand.to_json_vec().unwrap(),
    )
    .unwrap();
    let parses = assert_same_as_scan(&core, "after changes");
    assert_eq!(
        parses, 2,
        "only the snapshot written behind the store's back is read: parsed by the listing, \
         loaded by the first search"
    );
}

#[test]
fn a_save_by_another_process_or_a_lost_line_is_never_missed() {
    let tmp = tempfile::tempdir().unwrap();
    let a = open(tmp.path());
    for (i, text) in ["first build", "second build", "third"].iter().enumerate() {
        let mut r = record(&format!("s{i}"), "/r", 1_000 + i as i64);
        r.thread.messages.push(user("u", text));
        a.create(&mut r).unwrap();
    }
    assert_eq!(searched(&a, &q("build")).0.len(), 2);
    // Another handle on the same directory shares no memory with `a`, as another process.
    let b = open(tmp.path());
    let mut r = b.load(&RecordId::parse("s2").unwrap()).unwrap();
    r.thread.messages.push(agent("now a build too"));
    b.save(&mut r).unwrap();
    let (hits, parses) = searched(&a, &q("build"));
    assert_eq!(hits, scanned(&a, &q("build")));
    assert_eq!((hits.len(), parses), (3, 0), "b's save appended its entry");

    // A save whose line was lost (a crash, a full disk) or torn: the snapshot is read.
    let before = std::fs::metadata(index_path(&a)).unwrap().len();
    let mut r = b.load(&RecordId::parse("s0").unwrap()).unwrap();
    r.thread.messages = vec![user("u", "zebra")];
    b.save(&mut r).unwrap();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(index_path(&a))
        .unwrap();
    // Torn: the line cut short, then another save appended right after it.
    let after = f.metadata().unwrap().len();
    f.set_len(before + (after - before) / 2).unwrap();
    let mut r = b.load(&RecordId::parse("s1").unwrap()).unwrap();
    r.thread.messages.push(agent("zebra crossing"));
    b.save(&mut r).unwrap();
    let (hits, parses) = searched(&a, &q("zebra"));
    assert_eq!(hits, scanned(&a, &q("zebra")));
    assert_eq!(hits.len(), 2);
    assert_eq!(
        parses, 1,
        "the torn line is refused; the next save's line starts on a line of its own"
    );
    assert_eq!(searched(&a, &q("zebra")).1, 0, "and indexed by that search");
}

#[test]
fn a_damaged_missing_or_foreign_index_is_rebuilt_without_changing_an_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    generated(&core, &mut Lcg(7), 30);
    let path = index_path(&core);
    let good = std::fs::read(&path).unwrap();
    let mut flipped = good.clone();
    // A byte inside the first entry's messages: its hash no longer matches.
    let first_tab = flipped.iter().position(|b| *b == b'\t').unwrap();
    flipped[first_tab + 3] ^= 0x20;
    let damages: Vec<(&str, Vec<u8>)> = vec![
        ("missing", Vec::new()),
        ("empty", Vec::new()),
        ("garbage", b"\x00\xff not an index \n{[}\n".to_vec()),
        ("cut in its header", good[..20].to_vec()),
        ("cut mid-entry", good[..good.len() / 2].to_vec()),
        (
            "another version",
            [
                header_bytes(0)
                    .iter()
                    .map(|b| if *b == b'1' { b'9' } else { *b })
                    .collect::<Vec<_>>(),
                good[HEADER_LEN as usize..].to_vec(),
            ]
            .concat(),
        ),
        ("a flipped byte", flipped),
    ];
    for (what, bytes) in damages {
        if what == "missing" {
            std::fs::remove_file(&path).unwrap();
        } else {
            std::fs::write(&path, &bytes).unwrap();
        }
        let (hits, parses) = searched(&core, &q("build"));
        assert_eq!(hits, scanned(&core, &q("build")), "{what}");
        assert!(parses > 0, "{what}: the snapshots were read");
        assert_eq!(assert_same_as_scan(&core, what), 0, "{what}: rebuilt");
        assert!(read_header(&File::open(&path).unwrap()).is_some(), "{what}");
    }
    // A directory in its place: searches still answer (from the snapshots), with no error.
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let (hits, _) = searched(&core, &q("build"));
    assert_eq!(hits, scanned(&core, &q("build")));
    let mut r = record("late", "/a", 5_000);
    r.thread.messages.push(user("u", "build"));
    core.create(&mut r).unwrap();
    assert_eq!(searched(&core, &q("build")).0, scanned(&core, &q("build")));
}

#[test]
fn deleted_renamed_retitled_and_closed_sessions() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    for (i, id) in ["gone", "renamed", "retitled", "closed"].iter().enumerate() {
        let mut r = record(id, "/r", 1_000 + i as i64);
        r.thread
            .messages
            .push(user(&format!("u-{id}"), "the flaky build"));
        core.create(&mut r).unwrap();
    }
    searched(&core, &q("flaky"));
    let id = |s: &str| RecordId::parse(s).unwrap();
    core.delete(&id("gone")).unwrap();
    let mut r = core.load(&id("renamed")).unwrap();
    r.name = Some("a name".into());
    core.save(&mut r).unwrap();
    let mut r = core.load(&id("retitled")).unwrap();
    r.thread.title = "Flaky CI".into();
    core.save(&mut r).unwrap();
    core.close(&id("closed"), Timestamp::now(), None).unwrap();
    let (hits, parses) = searched(&core, &q("flaky"));
    assert_eq!(parses, 0);
    let got: Vec<_> = hits
        .iter()
        .map(|h| (h.acpx_record_id.as_str(), h.title.as_deref()))
        .collect();
    assert_eq!(
        got,
        [
            ("closed", None),
            ("retitled", Some("Flaky CI")),
            ("renamed", None)
        ]
    );
    assert_eq!(hits, scanned(&core, &q("flaky")));
    // A new session with the deleted one's id is searched for what it holds now.
    let mut r = record("gone", "/r", 9_000);
    r.thread.messages.push(agent("nothing flaky here"));
    core.create(&mut r).unwrap();
    let (hits, parses) = searched(&core, &q("build"));
    assert_eq!(parses, 0);
    assert_eq!(hits, scanned(&core, &q("build")));
    assert!(hits.iter().all(|h| h.acpx_record_id.as_str() != "gone"));
}

#[test]
fn a_huge_session_is_indexed_by_the_next_search_not_at_every_save() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    let mut small = record("small", "/r", 1_000);
    small.thread.messages.push(user("u", "tiny"));
    core.create(&mut small).unwrap();
    let path = index_path(&core);
    let len = || std::fs::metadata(&path).unwrap().len();
    let base = len();
    let mut huge = record("huge", "/r", 2_000);
    let reply = "word ".repeat(SAVE_TEXT_MAX / 5 + 1) + "needle";
    huge.thread.messages.push(agent(&reply));
    core.create(&mut huge).unwrap();
    core.save(&mut huge).unwrap();
    assert_eq!(
        len(),
        base,
        "saves of a huge session do not write its texts"
    );
    let (hits, parses) = searched(&core, &q("needle"));
    assert_eq!((hits.len(), parses), (1, 1));
    assert_eq!(hits, scanned(&core, &q("needle")));
    assert!(len() > base + reply.len() as u64, "indexed by the search");
    assert_eq!(searched(&core, &q("needle")).1, 0);
    assert_eq!(searched(&core, &q("tiny")).1, 0);
}

#[test]
fn dead_entries_are_compacted_away_and_saves_keep_appending() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    let path = index_path(&core);
    let mut r = record("busy", "/r", 1_000);
    let text = "busy ".repeat(40_000);
    r.thread.messages.push(user("u", &text));
    core.create(&mut r).unwrap();
    for _ in 0..12 {
        core.save(&mut r).unwrap();
    }
    let grown = std::fs::metadata(&path).unwrap().len();
    assert!(grown > 12 * text.len() as u64);
    let (hits, parses) = searched(&core, &q("busy"));
    assert_eq!((hits.len(), parses), (1, 0));
    let compacted = std::fs::metadata(&path).unwrap().len();
    assert!(
        compacted < HEADER_LEN + text.len() as u64 + 1_000,
        "{grown} → {compacted}"
    );
    let header = read_header(&File::open(&path).unwrap()).unwrap();
    assert_eq!(header.live, compacted - HEADER_LEN);
    core.save(&mut r).unwrap();
    assert!(std::fs::metadata(&path).unwrap().len() > compacted);
    assert_eq!(searched(&core, &q("busy")).1, 0);
}

#[test]
fn search_temp_files_of_dead_writers_are_cleaned_up() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    let stale = core.sessions_dir().join(".search.ndjson.tmp.1.abc");
    std::fs::write(&stale, b"partial").unwrap();
    assert_eq!(core.cleanup_stale_temp_files().unwrap(), 1);
    assert!(!stale.exists());
}

#[test]
fn hits_keep_only_what_can_still_be_among_the_first() {
    let hit = |rank: usize, i: usize| SearchHit {
        acpx_record_id: RecordId::parse(&format!("r{rank}")).unwrap(),
        title: None,
        message_index: i,
        role: "user".into(),
        message_id: None,
        snippet: String::new(),
    };
    let mut hits = Hits::new(3);
    hits.add(5, vec![hit(5, 0), hit(5, 1)]);
    hits.add(9, vec![hit(9, 0)]);
    assert!(!hits.wants(10), "three hits up to rank 9");
    hits.add(2, vec![hit(2, 0), hit(2, 1)]);
    assert!(!hits.wants(6) && hits.wants(4));
    hits.add(7, vec![hit(7, 0)]);
    let got: Vec<_> = hits
        .finish()
        .iter()
        .map(|h| (h.acpx_record_id.to_string(), h.message_index))
        .collect();
    assert_eq!(
        got,
        [("r2".into(), 0), ("r2".into(), 1), ("r5".to_string(), 0)]
    );
}

#[test]
fn searches_racing_saves_and_compactions_stay_exact() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let writer = open(&dir);
    for i in 0..4 {
        let mut r = record(&format!("race{i}"), "/r", 1_000 + i);
        r.thread.messages.push(user("u", "round 0"));
        writer.create(&mut r).unwrap();
    }
    // Saves of ~100 kB of text each, so that dead entries pass the compaction threshold
    // several times while another handle searches.
    let saver = std::thread::spawn(move || {
        let filler = "x".repeat(100_000);
        for round in 1..=40 {
            let id = RecordId::parse(&format!("race{}", round % 4)).unwrap();
            let mut r = writer.load(&id).unwrap();
            r.thread.messages = vec![user("u", &format!("round {round} {filler}"))];
            writer.save(&mut r).unwrap();
        }
    });
    let reader = open(&dir);
    let mut searches = 0;
    while !saver.is_finished() {
        let hits = reader.search(&q("round"), None).unwrap();
        assert_eq!(hits.len(), 4, "every session holds the word: {hits:?}");
        searches += 1;
    }
    saver.join().unwrap();
    assert!(searches > 0);
    for text in ["round", "round 40", "round 1 ", "xxxx"] {
        assert_eq!(
            searched(&reader, &q(text)).0,
            scanned(&reader, &q(text)),
            "{text}"
        );
    }
    assert_eq!(searched(&reader, &q("round")).1, 0, "the index is current");
    let len = std::fs::metadata(index_path(&reader)).unwrap().len();
    assert!(len < 2_000_000, "compacted: {len} bytes");
}

#[test]
fn a_session_past_the_search_cap_is_searched_in_its_snapshot_and_never_indexed() {
    let tmp = tempfile::tempdir().unwrap();
    let core = open(tmp.path());
    let path = index_path(&core);
    let mut long = record("long", "/r", 1_000);
    // Past both caps: its texts, and its entry line as an earlier version wrote it.
    let reply = "word ".repeat(ENTRY_LINE_MAX / 5 + 1) + "needle";
    long.thread.messages.push(agent(&reply));
    core.create(&mut long).unwrap();
    core.save(&mut long).unwrap();
    let base = std::fs::metadata(&path).map_or(0, |m| m.len());
    for _ in 0..2 {
        let (hits, parses) = searched(&core, &q("needle"));
        assert_eq!(
            (hits.len(), parses),
            (1, 1),
            "read from the snapshot each time"
        );
        assert_eq!(hits, scanned(&core, &q("needle")));
    }
    assert!(
        std::fs::metadata(&path).unwrap().len() < base + SEARCH_TEXT_MAX as u64,
        "its texts are not in the index (which the searches made)"
    );

    // An entry line longer than a search reads, as an earlier version wrote it for this very
    // snapshot: skipped without being held, the snapshot answers.
    let ident =
        FileIdent::of(&std::fs::metadata(core.snapshot_path(&long.acpx_record_id)).unwrap());
    let body = messages_part(&long, usize::MAX).unwrap();
    let line = entry_line(&long.acpx_record_id, ident, long.revision, &body).unwrap();
    assert!(line.len() > ENTRY_LINE_MAX);
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(&line).unwrap();
    let (hits, parses) = searched(&core, &q("needle"));
    assert_eq!((hits.len(), parses), (1, 1));
    assert_eq!(hits, scanned(&core, &q("needle")));
}

#[test]
fn lines_past_the_cap_are_read_through_and_not_kept() {
    let text = format!("short\n{}\nlast\ntorn", "x".repeat(100));
    let mut reader = BufReader::with_capacity(16, text.as_bytes());
    let mut line = Vec::new();
    let mut read = |line: &mut Vec<u8>| {
        line.clear();
        read_line_within(&mut reader, line, 10).unwrap()
    };
    assert_eq!(
        (read(&mut line), line.as_slice()),
        ((6, true), &b"short\n"[..])
    );
    assert_eq!((read(&mut line), line.as_slice()), ((101, true), &b""[..]));
    assert_eq!(
        (read(&mut line), line.as_slice()),
        ((5, true), &b"last\n"[..])
    );
    assert_eq!(
        (read(&mut line), line.as_slice()),
        ((4, false), &b"torn"[..])
    );
    assert_eq!(read(&mut line), (0, false));
}
