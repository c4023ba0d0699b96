//! The session viewer (`sessions export --as html`, issue 46) end to end: a real session of
//! the scripted agent with every kind of item, exported on every backend, its page checked as
//! text and, in headless Chromium, as a DOM (every item there, nothing recorded turned into
//! markup, the page's script run under its policy) and as a screenshot that is not blank.
//! Also what the thread keeps for `sessions read` and the Markdown export: a terminal's output
//! the agent never read, plans, standard unified diffs, no filler.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{Env, BACKENDS};

/// A session with every kind of item but the hostile turn ([`add_hostile_turn`]).
fn record_session(env: &Env) -> (String, String) {
    let state = env.home().join("agent-state");
    let agent = env.agent_cmd(&format!("--load --state-dir {}", state.display()));
    let id = env.new_session(&agent);
    let prompt = |extra: &[&str], text: &str| {
        let mut args = vec!["--no-owner", "--agent", agent.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["prompt", text]);
        env.run(&args)
    };
    let rule = r#"{"autoApprove": ["edit"]}"#;
    prompt(&["--permission-policy", rule], "showcase").ok();
    prompt(
        &["--approve-all"],
        "terminal --no-output echo TERMINAL-OUTPUT-42",
    )
    .ok();
    prompt(&[], "think").ok();
    env.run(&["--no-owner", "--agent", &agent, "set-mode", "plan"])
        .ok();
    let failed = prompt(&[], "error");
    assert_ne!(failed.code, 0, "the error script fails its turn");
    (id, agent)
}

/// A turn whose agent writes hostile strings everywhere (it also sets the session's title).
fn add_hostile_turn(env: &Env, agent: &str) {
    env.run(&["--no-owner", "--agent", agent, "prompt", "hostile"])
        .ok();
}

fn export_html(env: &Env, id: &str, out: &Path) -> String {
    env.run(&[
        "sessions",
        "export",
        id,
        "--as",
        "html",
        "-o",
        out.to_str().unwrap(),
    ])
    .ok();
    std::fs::read_to_string(out).unwrap()
}

/// What the page must show of the recorded session (as text, so also in the DOM).
const ITEMS: &[&str] = &[
    // The prompt, the reply's Markdown rendered, the thought, the plan.
    ">showcase</div>",
    "<h2>Fixed the off-by-one</h2>",
    "<li>removed the <code>+ 1</code></li>",
    "data-lang=\"python\"",
    "The test says <code>add(2, 2)</code> returns 5",
    "Fix add()",
    // The tool calls: kind, title, status, the diff with its real hunk header.
    "Edit src/calc.py",
    "@@ -1,5 +1,5 @@",
    "    return a + b + 1",
    // The terminal the agent never read.
    "TERMINAL-OUTPUT-42",
    "exit code 0",
    // The permission question, its answer and what decided.
    "answer approved",
    "decided by permission rule: approve",
    // The mode change, how turns ended, tokens and cost.
    "set_mode",
    "end_turn",
    "scripted failure",
    "3,800 input",
    "cost 0.0420 USD",
    "HOSTILE-END",
];

#[test]
fn html_export_shows_every_item_on_every_backend() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let (id, agent) = record_session(&env);
        add_hostile_turn(&env, &agent);
        let out = env.home().join("session.html");
        let html = export_html(&env, &id, &out);
        for item in ITEMS {
            assert!(
                html.contains(item),
                "{backend}: {item:?} missing from the page"
            );
        }
        assert!(
            html.contains("id=\"seq-1\""),
            "{backend}: items carry their seq"
        );
        assert_markup_is_the_viewer_s(&html, backend);
        // The file is the user's only.
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&out).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{backend}");
    }
}

#[test]
fn sessions_read_and_markdown_keep_terminal_output_plans_and_unified_hunks() {
    for backend in BACKENDS {
        let env = Env::new(backend);
        let (id, _) = record_session(&env);
        let read = env.run(&["sessions", "read", &id]).ok().stdout;
        assert!(read.contains("    TERMINAL-OUTPUT-42"), "{backend}: {read}");
        assert!(read.contains("@@ -1,5 +1,5 @@"), "{backend}: {read}");
        assert!(!read.contains("unchanged before"), "{backend}: {read}");
        assert!(
            read.contains("[plan] [x] Read src/calc.py"),
            "{backend}: {read}"
        );
        assert!(
            !read.contains("output: Run echo TERMINAL-OUTPUT-42 (completed)"),
            "{backend}: the title repeated as output is filler: {read}"
        );
        assert!(!read.contains("input: {}"), "{backend}: {read}");
        let md = env
            .run(&["sessions", "export", &id, "--as", "markdown"])
            .ok()
            .stdout;
        assert!(md.contains("```diff\n--- "), "{backend}: {md}");
        assert!(md.contains("@@ -1,5 +1,5 @@"), "{backend}: {md}");
        assert!(md.contains("- [x] Read src/calc.py"), "{backend}: {md}");
        assert!(md.contains("TERMINAL-OUTPUT-42"), "{backend}: {md}");
    }
}

/// One tag of the page: its name and its attributes (name, value).
struct Tag {
    name: String,
    attrs: Vec<(String, String)>,
}

/// The tags of `html` (a page as written, or a DOM as Chromium serializes it), read with
/// their quoted attribute values, so a `>` or `<` inside a value does not end a tag.
fn tags(html: &str) -> Vec<Tag> {
    let b = html.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(off) = html[i..].find('<') {
        i += off + 1;
        let name_start = if html[i..].starts_with('/') { i + 1 } else { i };
        let name_end = html[name_start..]
            .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
            .map_or(html.len(), |e| name_start + e);
        let name = html[i..name_end].to_ascii_lowercase();
        let mut attrs = Vec::new();
        let mut j = name_end;
        while j < b.len() && b[j] != b'>' {
            if b[j].is_ascii_whitespace() || b[j] == b'/' {
                j += 1;
                continue;
            }
            let start = j;
            while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'=' && b[j] != b'>' {
                j += 1;
            }
            let attr = html[start..j].to_ascii_lowercase();
            let mut value = String::new();
            if j < b.len() && b[j] == b'=' {
                j += 1;
                if j < b.len() && (b[j] == b'"' || b[j] == b'\'') {
                    let q = b[j];
                    let vstart = j + 1;
                    j = vstart;
                    while j < b.len() && b[j] != q {
                        j += 1;
                    }
                    value = html[vstart..j.min(b.len())].to_owned();
                    j += 1;
                } else {
                    let vstart = j;
                    while j < b.len() && !b[j].is_ascii_whitespace() && b[j] != b'>' {
                        j += 1;
                    }
                    value = html[vstart..j].to_owned();
                }
            }
            attrs.push((attr, value));
        }
        i = j.min(html.len());
        // Text inside <script> and <style> is not markup.
        if name == "script" || name == "style" {
            let close = format!("</{name}>");
            if let Some(e) = html[i..].find(&close) {
                i += e;
            }
        }
        out.push(Tag { name, attrs });
    }
    out
}

/// Every tag is one the viewer writes; one script and one style sheet (its own); no
/// handler, no `src`, no inline style, and links only to the web, mail, or the page itself.
fn assert_markup_is_the_viewer_s(html: &str, context: &str) {
    let all = tags(html);
    let opening = |n: &str| all.iter().filter(|t| t.name == n).count();
    assert_eq!(opening("script"), 1, "{context}: one script, the viewer's");
    assert_eq!(
        opening("style"),
        1,
        "{context}: one style sheet, the viewer's"
    );
    for t in &all {
        let name = t.name.trim_start_matches('/');
        assert!(
            name == "!doctype" || acpx_render::html::PAGE_ELEMENTS.contains(&name),
            "{context}: a <{}> tag in the page",
            t.name
        );
        for (attr, value) in &t.attrs {
            assert!(
                !attr.starts_with("on"),
                "{context}: handler {attr}={value:?}"
            );
            assert!(
                !matches!(
                    attr.as_str(),
                    "src" | "style" | "srcdoc" | "formaction" | "background"
                ),
                "{context}: attribute {attr}={value:?}"
            );
            if attr == "href" {
                let v = value.to_ascii_lowercase();
                assert!(
                    v.starts_with('#')
                        || v.starts_with("http://")
                        || v.starts_with("https://")
                        || v.starts_with("mailto:"),
                    "{context}: link to {value:?}"
                );
            }
        }
    }
}

/// Chromium, when installed (Debian's `chromium`). Under CI it must be there (`.ci/run`
/// installs it): its absence fails the test instead of skipping it.
/// The unprivileged user and group Chromium runs as when the tests run as root.
const NOBODY: libc::uid_t = 65534;

fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("chromium"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "chromium is not installed (CI=true: .ci/run installs Debian's chromium package)"
        );
        eprintln!("skipping the headless Chromium checks: chromium is not installed");
    }
    found
}

/// Runs headless Chromium on `page` with `args`; returns (stdout, stderr). Killed after 90 s.
///
/// Chromium runs as an unprivileged user with its sandbox on: when the tests run as root (as
/// CI does), as `nobody` through util-linux's `setpriv`, with a copy of the page it can read
/// and `profile` (where a screenshot goes too) owned by it.
fn run_chromium(chromium: &Path, profile: &Path, args: &[&str], page: &Path) -> (String, String) {
    use std::os::unix::fs::PermissionsExt;
    let out_path = profile.with_extension("out");
    let err_path = profile.with_extension("err");
    std::fs::create_dir_all(profile).unwrap();
    let work = profile
        .parent()
        .expect("the profile lives in a work directory");
    let name = profile
        .file_name()
        .expect("a profile name")
        .to_string_lossy();
    let readable = work.join(format!("{name}.html"));
    std::fs::copy(page, &readable).unwrap();
    std::fs::set_permissions(work, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    // SAFETY: geteuid has no preconditions.
    let as_root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if as_root {
        let path = std::ffi::CString::new(profile.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: chown of a directory this test just made, through a valid C string.
        assert_eq!(unsafe { libc::chown(path.as_ptr(), NOBODY, NOBODY) }, 0);
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(chromium);
        c
    } else {
        Command::new(chromium)
    };
    let mut child = cmd
        .args([
            "--headless",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", readable.display()))
        .env("HOME", profile)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("start chromium");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish in 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (
        std::fs::read_to_string(&out_path).unwrap_or_default(),
        std::fs::read_to_string(&err_path).unwrap_or_default(),
    )
}

#[test]
fn html_export_in_headless_chromium() {
    let Some(chromium) = chromium() else { return };
    let env = Env::new("fs");
    let (id, agent) = record_session(&env);
    // The screenshot (the README's picture) is of the session before its hostile turn.
    let clean = env.home().join("clean.html");
    export_html(&env, &id, &clean);
    add_hostile_turn(&env, &agent);
    let page = env.home().join("session.html");
    export_html(&env, &id, &page);
    let work = tempfile::tempdir().unwrap();

    let (dom, log) = run_chromium(&chromium, &work.path().join("dom"), &["--dump-dom"], &page);
    for item in ITEMS {
        assert!(dom.contains(item), "{item:?} missing from the DOM:\n{dom}");
    }
    assert_markup_is_the_viewer_s(&dom, "DOM");
    // The page's script ran under its policy: it moved the totals under the header.
    assert!(
        dom.contains("<div id=\"summary-slot\"><div id=\"summary\">"),
        "the page's script did not run:\n{log}"
    );
    // Nothing on the page tried to run or load anything the policy refused.
    assert!(!log.contains("Refused to"), "a policy violation:\n{log}");

    // In the profile directory: Chromium, unprivileged, writes it.
    let shot = work.path().join("shot").join("viewer.png");
    let (_, log) = run_chromium(
        &chromium,
        &work.path().join("shot"),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1100,1250",
            "--hide-scrollbars",
        ],
        &clean,
    );
    let png = std::fs::read(&shot).unwrap_or_else(|e| panic!("no screenshot ({e}):\n{log}"));
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    // A blank 1100×1250 page compresses to a few KB; a page of text and colour does not.
    assert!(
        png.len() > 30_000,
        "the screenshot looks blank ({} bytes)",
        png.len()
    );
    // The README's picture of the viewer comes from here.
    if std::env::var_os("ACPX_UPDATE_VIEWER_PNG").is_some() {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/viewer.png");
        std::fs::copy(&shot, docs).unwrap();
    }
}
