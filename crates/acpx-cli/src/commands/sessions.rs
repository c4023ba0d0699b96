//! `sessions list|show|close|delete|history|events|prune|search`: commands that only read or
//! change the store.

use std::path::Path;
use std::time::Duration;

use acpx_model::{
    ClosedFilter, EventEnvelope, EventQuery, EventStream, EventType, ListQuery, ReadMode,
    SearchQuery, SessionRecord, StoreError, Timestamp,
};
use serde_json::{json, Map, Value};

use crate::cli::{DeleteArgs, EventsArgs, HistoryArgs, ListArgs, PruneArgs, SearchArgs, Target};
use crate::commands::{select, transfer};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::output::Style;
use crate::render::{self, action, record_identity, summary_json};
use crate::runs::{self, Probe};

/// A directory filter made absolute the way `--cwd` is (symlinks resolved when it exists).
pub fn dir_filter(p: &Path) -> CliResult<String> {
    let abs = std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .map_err(|e| CliError::usage(format!("{}: {e}", p.display())))?;
    Ok(abs.to_string_lossy().into_owned())
}

/// `sessions list`.
pub async fn list(ctx: &Ctx, a: ListArgs) -> CliResult<()> {
    let store = ctx.store().await?;
    let query = ListQuery {
        cwd: a.filter_cwd.as_deref().map(dir_filter).transpose()?,
        agent_command: ctx.agent.explicit.then(|| ctx.agent.command.clone()),
        name: a.name.clone(),
        closed: if a.open {
            ClosedFilter::Open
        } else if a.closed {
            ClosedFilter::Closed
        } else {
            ClosedFilter::Any
        },
        limit: a.limit.map(|l| l as usize),
        cursor: a.cursor.clone(),
    };
    let page = store.list(&query).await?;
    for s in &page.skipped {
        ctx.out.warn(&format!(
            "skipped {}: {} (run `acpx fsck`)",
            s.location, s.reason
        ));
    }
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert(
            "sessions".into(),
            Value::Array(page.sessions.iter().map(summary_json).collect()),
        );
        if let Some(c) = &page.next_cursor {
            m.insert("nextCursor".into(), json!(c));
        }
        if !page.skipped.is_empty() {
            m.insert("skipped".into(), json!(page.skipped));
        }
        ctx.out.json(&action("sessions_list", m));
        return Ok(());
    }
    if page.sessions.is_empty() {
        ctx.out
            .note("no sessions (create one with `acpx sessions new`)");
    }
    for s in &page.sessions {
        let agent = ctx
            .registry
            .name_of(&s.agent_command)
            .map(str::to_owned)
            .unwrap_or_else(|| s.agent_command.clone());
        let state = if s.closed { "closed" } else { "open" };
        let name = s.name.as_deref().unwrap_or("-");
        let title = s
            .title
            .as_deref()
            .map(|t| render::clip(t, 50))
            .unwrap_or_default();
        if ctx.out.is_text() {
            ctx.out.line(&format!(
                "{}  {:<6}  {}  {}  {}  {}  {} msgs  {}",
                ctx.out.paint_out(Style::Bold, s.acpx_record_id.as_str()),
                state,
                s.last_used_at,
                agent,
                name,
                s.cwd,
                s.message_count,
                title
            ));
        } else {
            ctx.out.line(s.acpx_record_id.as_str());
        }
    }
    if let Some(c) = &page.next_cursor {
        ctx.out.note(&format!(
            "more: acpx sessions list --cursor {c} (with the same filters)"
        ));
    }
    Ok(())
}

/// `sessions show`.
pub async fn show(ctx: &Ctx, t: Target) -> CliResult<()> {
    let r = select(ctx, &t).await?;
    if ctx.out.is_json() {
        ctx.out.json(&render::record_show_json(&r));
        return Ok(());
    }
    if !ctx.out.is_text() {
        ctx.out.line(r.acpx_record_id.as_str());
        return Ok(());
    }
    let run = runs::probe(&ctx.home, &r.acpx_record_id)?;
    for (k, v) in show_lines(&r, &run) {
        ctx.out.line(&format!("{:<18} {v}", format!("{k}:")));
    }
    Ok(())
}

fn show_lines(r: &SessionRecord, run: &Probe) -> Vec<(&'static str, String)> {
    let mut l = vec![
        ("record id", r.acpx_record_id.to_string()),
        ("ACP session id", r.acp_session_id.clone()),
    ];
    if let Some(a) = &r.agent_session_id {
        l.push(("agent session id", a.clone()));
    }
    l.push(("agent", r.agent_command.clone()));
    l.push(("directory", r.cwd.clone()));
    if let Some(n) = &r.name {
        l.push(("name", n.clone()));
    }
    if !r.thread.title.is_empty() {
        l.push(("title", r.thread.title.clone()));
    }
    l.push(("created", r.created_at.to_string()));
    l.push(("last used", r.last_used_at.to_string()));
    if let Some(t) = r.last_prompt_at {
        l.push(("last prompt", t.to_string()));
    }
    let state = match (r.closed, run) {
        (true, _) => format!(
            "closed {}",
            r.closed_at.map(|t| t.to_string()).unwrap_or_default()
        ),
        (false, Probe::Running(Some(i))) => format!("open, prompt running (pid {})", i.pid),
        (false, Probe::Running(None)) => "open, prompt running".to_owned(),
        (false, Probe::Dead(_)) => "open, its last prompt process died mid-turn".to_owned(),
        (false, Probe::Idle) => "open".to_owned(),
    };
    l.push(("state", state));
    l.push(("messages", r.thread.messages.len().to_string()));
    if let Some(m) = &r.acpx.current_mode_id {
        l.push(("mode", m.clone()));
    }
    if let Some(t) = &r.acpx.last_turn {
        let mut s = format!("{} at {}", t.outcome, t.started_at);
        if let Some(sr) = &t.stop_reason {
            s.push_str(&format!(", stopReason {sr}"));
        }
        if let Some(e) = &t.error {
            s.push_str(&format!(", {}: {}", e.code, e.message));
        }
        l.push(("last turn", s));
    }
    let el = &r.acpx.event_log;
    l.push((
        "event log",
        format!(
            "{} events, {} segment(s){}",
            el.last_seq,
            el.segment_count,
            if el.active_path.is_empty() {
                String::new()
            } else {
                format!(", {}", el.active_path)
            }
        ),
    ));
    if let Some(e) = &el.last_write_error {
        l.push(("last write error", e.clone()));
    }
    l
}

/// `sessions close`: cancels a running prompt first, then marks the session closed.
pub async fn close(ctx: &Ctx, t: Target) -> CliResult<()> {
    let r = select(ctx, &t).await?;
    let store = ctx.store().await?;
    if let Some(info) = runs::request_cancel(&ctx.home, &r.acpx_record_id)? {
        ctx.out.note(&format!(
            "cancelled the prompt running in this session (pid {}); waiting for it to end",
            info.pid
        ));
        if !runs::wait_idle(&ctx.home, &r.acpx_record_id, Duration::from_secs(30)).await? {
            return Err(CliError::runtime(format!(
                "the prompt running in session {} did not end within 30 s of the cancel",
                r.acpx_record_id
            ))
            .with_hint("try again, or stop that acpx process (Ctrl-C twice in its terminal)"));
        }
    }
    let closed = close_with_retry(&*store, &r).await?;
    if ctx.out.is_json() {
        ctx.out
            .json(&action("session_closed", record_identity(&closed)));
    } else if ctx.out.is_text() {
        ctx.out.line(&format!("closed {}", closed.acpx_record_id));
    } else {
        ctx.out.line(closed.acpx_record_id.as_str());
    }
    Ok(())
}

/// `Store::close`, retried while a cancelled turn finishes and releases the session lock.
pub async fn close_with_retry(
    store: &dyn acpx_model::Store,
    r: &SessionRecord,
) -> CliResult<SessionRecord> {
    Ok(acpx_runtime::ops::scope::close_with_retry(store, r).await?)
}

/// `sessions delete`.
pub async fn delete(ctx: &Ctx, a: DeleteArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    if let Probe::Running(_) = runs::probe(&ctx.home, &r.acpx_record_id)? {
        return Err(CliError::runtime(format!(
            "session {} has a prompt running; refusing to delete it",
            r.acpx_record_id
        ))
        .with_hint("cancel it first with `acpx cancel`, or wait for it to finish"));
    }
    if !r.closed && !a.force {
        return Err(CliError::usage(format!(
            "session {} is open; refusing to delete an open session",
            r.acpx_record_id
        ))
        .with_hint(format!(
            "close it first (`acpx sessions close {}`) or pass --force",
            r.acpx_record_id
        )));
    }
    let store = ctx.store().await?;
    let existed = store.delete(&r.acpx_record_id).await?;
    if ctx.out.is_json() {
        let mut m = record_identity(&r);
        m.insert("deleted".into(), json!(existed));
        ctx.out.json(&action("session_deleted", m));
    } else if ctx.out.is_text() {
        ctx.out
            .line(&format!("deleted {} and its event log", r.acpx_record_id));
    } else {
        ctx.out.line(r.acpx_record_id.as_str());
    }
    Ok(())
}

/// `sessions history`.
pub async fn history(ctx: &Ctx, a: HistoryArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    if ctx.out.is_json() {
        let msgs = &r.thread.messages;
        let skip = a.limit.map_or(0, |l| msgs.len().saturating_sub(l));
        let mut m = record_identity(&r);
        if !r.thread.title.is_empty() {
            m.insert("title".into(), json!(r.thread.title));
        }
        m.insert("messageCount".into(), json!(msgs.len()));
        m.insert("messages".into(), json!(&msgs[skip..]));
        ctx.out.json(&action("session_history", m));
        return Ok(());
    }
    let text = render::history_text(&r, a.limit, a.full);
    if text.is_empty() {
        ctx.out.note("no messages yet");
    } else {
        ctx.out.raw(&text);
    }
    Ok(())
}

fn event_query(a: &EventsArgs) -> EventQuery {
    EventQuery {
        from_seq: a.from_seq,
        types: a
            .types
            .iter()
            .map(|t| EventType::from(t.as_str()))
            .collect(),
        streams: a
            .streams
            .iter()
            .map(|s| EventStream::from(s.as_str()))
            .collect(),
        request_id: a.request_id.clone(),
        limit: a.limit,
        mode: if a.lenient {
            ReadMode::Lenient
        } else {
            ReadMode::Strict
        },
    }
}

fn print_event(ctx: &Ctx, e: &EventEnvelope) {
    if ctx.out.is_json() {
        ctx.out.raw(&format!("{}\n", e.to_ndjson()));
    } else {
        ctx.out.line(&render::event_line(e));
    }
}

/// `sessions events`: the log, filtered; `--follow` keeps reading as it grows.
pub async fn events(ctx: &Ctx, a: EventsArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    let store = ctx.store().await?;
    let query = event_query(&a);
    if !a.follow {
        let page = store.read_events(&r.acpx_record_id, &query).await?;
        for e in &page.events {
            print_event(ctx, e);
        }
        report_page_damage(ctx, &page);
        if let Some(n) = page.next_seq {
            ctx.out.note(&format!("more: --from-seq {n}"));
        }
        return Ok(());
    }
    follow(ctx, &r, &query).await
}

fn report_page_damage(ctx: &Ctx, page: &acpx_model::EventPage) {
    if let Some(t) = &page.torn_tail {
        ctx.out.warn(&format!(
            "{}: an incomplete last line ({} bytes) was withheld; `acpx fsck --repair` sets it aside",
            t.location, t.bytes
        ));
    }
    for d in &page.damaged {
        ctx.out.warn(&format!(
            "{} line {}: skipped: {}",
            d.location, d.line, d.reason
        ));
    }
}

/// Prints every event from `query.from_seq` on, then polls for new ones until the session is
/// closed (or deleted). Events are read unfiltered and in seq order, and the next read starts
/// after the last seq seen, so each event is printed exactly once, across rotations.
async fn follow(ctx: &Ctx, r: &SessionRecord, query: &EventQuery) -> CliResult<()> {
    let store = ctx.store().await?;
    let id = &r.acpx_record_id;
    let mut next = query.from_seq.max(1);
    let mut printed = 0usize;
    let mut idle_polls = 0u32;
    let mut warned_torn = false;
    loop {
        let page_query = EventQuery {
            from_seq: next,
            limit: Some(1000),
            mode: query.mode,
            ..EventQuery::default()
        };
        let page = match store.read_events(id, &page_query).await {
            Ok(p) => p,
            Err(StoreError::NotFound(_)) => {
                ctx.out.note("the session was deleted; stopping");
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        };
        for d in &page.damaged {
            ctx.out.warn(&format!(
                "{} line {}: skipped: {}",
                d.location, d.line, d.reason
            ));
        }
        if page.torn_tail.is_some() && !warned_torn && page.next_seq.is_none() {
            warned_torn = true;
            ctx.out
                .verbose("the log ends with an incomplete line; waiting for it to be completed");
        }
        let got_any = !page.events.is_empty();
        for e in &page.events {
            if e.seq < next {
                continue;
            }
            if e.seq > next && next > 1 {
                ctx.out.warn(&format!(
                    "events {next}..{} were rotated out of the log before they could be read",
                    e.seq - 1
                ));
            }
            next = e.seq + 1;
            if query.matches(e) {
                print_event(ctx, e);
                printed += 1;
                if query.limit.is_some_and(|l| printed >= l) {
                    return Ok(());
                }
            }
        }
        if page.next_seq.is_some() {
            continue;
        }
        if got_any {
            idle_polls = 0;
        } else {
            idle_polls += 1;
            // Check for close now and then, not on every poll.
            if idle_polls.is_multiple_of(5) {
                match store.load(id).await {
                    Ok(rec) if rec.closed => {
                        // One more read so nothing written before the close is missed.
                        let last = store.read_events(id, &EventQuery::from_seq(next)).await?;
                        for e in last.events.iter().filter(|e| e.seq >= next) {
                            if query.matches(e) {
                                print_event(ctx, e);
                            }
                        }
                        ctx.out.note("the session was closed; stopping");
                        return Ok(());
                    }
                    Ok(_) => {}
                    Err(StoreError::NotFound(_)) => {
                        ctx.out.note("the session was deleted; stopping");
                        return Ok(());
                    }
                    // A snapshot being replaced or damaged does not stop a follower.
                    Err(_) => {}
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Parses `--before`: RFC 3339, or a date (midnight UTC).
fn parse_date(s: &str) -> CliResult<Timestamp> {
    if let Ok(t) = Timestamp::parse(s) {
        return Ok(t);
    }
    if let Ok(d) = chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d") {
        if let Some(dt) = d.and_hms_opt(0, 0, 0) {
            return Ok(Timestamp::from_datetime(dt.and_utc()));
        }
    }
    Err(CliError::usage(format!("--before {s:?} is not a date"))
        .with_hint("use YYYY-MM-DD or an RFC 3339 timestamp such as 2026-02-27T12:00:00Z"))
}

/// `sessions prune`: deletes closed sessions older than the cutoff. Without
/// `--include-history` each pruned session's event log is first written to
/// `<home>/pruned/<id>.events.ndjson`.
pub async fn prune(ctx: &Ctx, a: PruneArgs) -> CliResult<()> {
    let cutoff = match (&a.before, a.older_than) {
        (Some(b), _) => Some(parse_date(b)?),
        (None, Some(days)) => {
            if !(days.is_finite() && days >= 0.0) {
                return Err(CliError::usage(format!(
                    "--older-than {days}: expected a number of days, 0 or more"
                )));
            }
            let ms = (days * 86_400_000.0) as i64;
            Timestamp::from_millis(Timestamp::now().millis() - ms)
        }
        (None, None) => None,
    };
    let store = ctx.store().await?;
    let page = store
        .list(&ListQuery {
            closed: ClosedFilter::Closed,
            agent_command: ctx.agent.explicit.then(|| ctx.agent.command.clone()),
            ..ListQuery::default()
        })
        .await?;
    let chosen: Vec<_> = page
        .sessions
        .into_iter()
        .filter(|s| s.closed)
        .filter(|s| {
            let when = s.closed_at.unwrap_or(s.last_used_at);
            cutoff.is_none_or(|c| when < c)
        })
        .collect();
    let mut reported = Vec::new();
    for s in &chosen {
        let mut m = identity_of_summary(s);
        m.insert(
            "closedAt".into(),
            json!(s.closed_at.unwrap_or(s.last_used_at)),
        );
        if !a.dry_run {
            if !a.include_history {
                let dir = ctx.home.join("pruned");
                let path = dir.join(format!("{}.events.ndjson", s.acpx_record_id));
                let n = transfer::write_log_file(&*store, &s.acpx_record_id, &path).await?;
                m.insert("keptLog".into(), json!(path.to_string_lossy()));
                m.insert("keptEvents".into(), json!(n));
            }
            store.delete(&s.acpx_record_id).await?;
        }
        reported.push(m);
    }
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("dryRun".into(), json!(a.dry_run));
        m.insert("count".into(), json!(reported.len()));
        m.insert(
            "sessions".into(),
            Value::Array(reported.into_iter().map(Value::Object).collect()),
        );
        ctx.out.json(&action("sessions_pruned", m));
        return Ok(());
    }
    let verb = if a.dry_run { "would prune" } else { "pruned" };
    for m in &reported {
        let id = m["acpxRecordId"].as_str().unwrap_or_default();
        let kept = m
            .get("keptLog")
            .and_then(Value::as_str)
            .map(|p| format!(" (log kept in {p})"))
            .unwrap_or_default();
        if ctx.out.is_text() {
            ctx.out.line(&format!("{verb} {id}{kept}"));
        } else {
            ctx.out.line(id);
        }
    }
    ctx.out
        .note(&format!("{verb} {} closed session(s)", reported.len()));
    Ok(())
}

fn identity_of_summary(s: &acpx_model::SessionSummary) -> Map<String, Value> {
    render::identity(
        s.acpx_record_id.as_str(),
        &s.acp_session_id,
        s.agent_session_id.as_deref(),
    )
}

/// `sessions search`.
pub async fn search(ctx: &Ctx, a: SearchArgs) -> CliResult<()> {
    let store = ctx.store().await?;
    let query = SearchQuery {
        text: a.text.join(" "),
        cwd: a.filter_cwd.as_deref().map(dir_filter).transpose()?,
        limit: Some(a.limit.max(1)),
    };
    let hits = store.search(&query).await?;
    if ctx.out.is_json() {
        let mut m = Map::new();
        m.insert("query".into(), json!(query.text));
        m.insert("hits".into(), json!(hits));
        ctx.out.json(&action("sessions_search", m));
        return Ok(());
    }
    if hits.is_empty() {
        ctx.out.note("no matches");
    }
    for h in &hits {
        if ctx.out.is_text() {
            ctx.out.line(&format!(
                "{}  #{} {}  {}",
                ctx.out.paint_out(Style::Bold, h.acpx_record_id.as_str()),
                h.message_index,
                h.role,
                h.snippet
            ));
        } else {
            ctx.out.line(h.acpx_record_id.as_str());
        }
    }
    Ok(())
}
