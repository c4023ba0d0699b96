//! `sessions list|show|close|delete|history|events|prune|search`: commands that only read or
//! change the store.

use std::path::Path;

use acpx_model::{
    ClosedFilter, EventEnvelope, EventQuery, ListQuery, ReadMode, SearchQuery, SessionSummary,
    Timestamp,
};
use acpx_owner::closing::{self, CloseError};
use acpx_printer::transcript::record_facts;
use acpx_runtime::ops::log_pages::{self, LogItem};
use acpx_runtime::ops::prune::{self, CutoffError, PruneOptions};
use acpx_runtime::ops::watch::{self, Followed};
use acpx_runtime::Runtime;

use crate::cli::{
    DeleteArgs, EventsArgs, HistoryArgs, ListArgs, PruneArgs, ReadArgs, SearchArgs, Target,
    WatchArgs,
};
use crate::commands::{paint_out, print, runtime_cmds, say, select, select_summary};
use crate::context::Ctx;
use crate::error::{CliError, CliResult};
use crate::render;
use acpx_printer::reports::events as events_said;
use acpx_printer::reports::sessions as reports;
use acpx_printer::results;

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
        ctx.out.json_action(|extra| {
            serde_json::to_string(&results::SessionsListJson { page: &page, extra })
        });
        return Ok(());
    }
    let elsewhere = match page.sessions.is_empty() {
        true => acpx_stores::other_local_store(&ctx.home, ctx.backend).await,
        false => None,
    };
    // One write for the whole listing: a flushed write per line was most of the cost of
    // printing 10k sessions.
    let agent_name = |command: &str| ctx.registry.name_of(command);
    print(
        ctx,
        reports::sessions_list(&page, elsewhere, &agent_name, &paint_out(ctx)),
    );
    Ok(())
}

/// `sessions show`.
pub async fn show(ctx: &Ctx, t: Target) -> CliResult<()> {
    let r = select(ctx, &t).await?;
    if ctx.out.is_json() {
        ctx.out.json(&render::record_show_json(r));
        return Ok(());
    }
    if !ctx.out.is_text() {
        ctx.out.line(r.acpx_record_id.as_str());
        return Ok(());
    }
    let run = runtime_cmds::probe_run(ctx, &r).await?;
    for (k, v) in record_facts(&r, &run) {
        ctx.out.line(&format!("{:<18} {v}", format!("{k}:")));
    }
    Ok(())
}

/// `sessions close`: cancels a running prompt first, then marks the session closed
/// ([`closing::close_session`]).
pub async fn close(ctx: &Ctx, t: Target) -> CliResult<()> {
    let r = select(ctx, &t).await?;
    let runtime = Runtime::new(ctx.store().await?, runtime_cmds::runtime_options(ctx, None));
    let closed = closing::close_session(ctx.authority()?, &runtime, &r, |info| {
        ctx.out.note(&format!(
            "cancelled the prompt running in this session (pid {}); waiting for it to end",
            info.pid
        ))
    })
    .await
    .map_err(close_error)?;
    print(ctx, reports::closed(&closed));
    Ok(())
}

/// A [`CloseError`] as the user sees it (`sessions close`).
fn close_error(e: CloseError) -> CliError {
    acpx_printer::failure::flows::close_failure(e).into()
}

/// `sessions delete` ([`closing::delete_session`]).
pub async fn delete(ctx: &Ctx, a: DeleteArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    let runtime = Runtime::new(ctx.store().await?, runtime_cmds::runtime_options(ctx, None));
    let deleted = closing::delete_session(ctx.authority()?, &runtime, &r, a.force)
        .await
        .map_err(|e| CliError::from(acpx_printer::failure::flows::delete_failure(e)))?;
    print(ctx, reports::deleted(&r, deleted.existed, &deleted.agent));
    Ok(())
}

/// `sessions history`.
pub async fn history(ctx: &Ctx, a: HistoryArgs) -> CliResult<()> {
    let r = select(ctx, &a.target).await?;
    if ctx.out.is_json() {
        ctx.out
            .json_action_streamed(|extra, out| {
                let history = results::SessionHistoryJson {
                    record: &r,
                    limit: a.limit,
                    extra,
                };
                Ok(serde_json::to_writer(out, &history)?)
            })
            .map_err(|e| {
                CliError::runtime(format!(
                    "the history of {} could not be written whole: {e}",
                    r.acpx_record_id
                ))
            })?;
        return Ok(());
    }
    if r.thread.message_count() == 0 {
        ctx.out.note("no messages yet");
        return Ok(());
    }
    // In pieces as it is rendered: a long conversation is never one string.
    acpx_printer::transcript::write_history(&r, a.limit, a.full, &mut |piece| {
        ctx.out.raw(piece);
        crate::output::stdout_failure().is_none()
    });
    Ok(())
}

/// `sessions read`: the conversation in full (`sessions history --full`), every message
/// unless `--tail` says otherwise.
pub async fn read(ctx: &Ctx, a: ReadArgs) -> CliResult<()> {
    let args = HistoryArgs {
        target: a.target,
        limit: a.tail,
        full: true,
    };
    history(ctx, args).await
}

/// `sessions watch`: the whole log (or from `--from-seq`), then every new event as any process
/// appends it, until the session is closed or deleted (`sessions events --follow`).
pub async fn watch(ctx: &Ctx, a: WatchArgs) -> CliResult<()> {
    let r = select_summary(ctx, &a.target).await?;
    // A watcher reports a damaged line and goes on rather than stop.
    let query = EventQuery {
        from_seq: a.from_seq,
        mode: ReadMode::Lenient,
        max_bytes: Some(acpx_model::PAGE_BYTES),
        ..EventQuery::default()
    };
    follow(ctx, &r, &query).await
}

/// The query of `sessions events`' filters ([`log_pages::events_query`]).
fn event_query(a: &EventsArgs) -> EventQuery {
    let (types, streams) = (&a.types, &a.streams);
    let lenient = a.lenient;
    log_pages::events_query(
        a.from_seq,
        types,
        streams,
        a.request_id.clone(),
        a.limit,
        lenient,
    )
}

/// One event as the format shows it: its envelope (`json`), the JSON-RPC frames rebuilt from
/// it (`acp`: `acpx_runtime::acp_frames::rebuild`; most events stand for none), or a line.
fn print_event(ctx: &Ctx, e: &EventEnvelope) {
    if ctx.out.is_acp() {
        ctx.out.lines(acpx_runtime::acp_frames::rebuild(e, true));
    } else if ctx.out.is_json() {
        ctx.out.raw(&format!("{}\n", e.to_ndjson()));
    } else {
        ctx.out.line(&render::event_line(e));
    }
}

/// `sessions events`: the log, filtered; `--follow` keeps reading as it grows.
pub async fn events(ctx: &Ctx, a: EventsArgs) -> CliResult<()> {
    let r = select_summary(ctx, &a.target).await?;
    let store = ctx.store().await?;
    let query = event_query(&a);
    if !a.follow {
        return print_events(ctx, &*store, &r.acpx_record_id, query).await;
    }
    follow(ctx, &r, &query).await
}

/// Prints the events `query` selects a page at a time ([`log_pages::read_log`]), and what the
/// pages say about the log.
async fn print_events(
    ctx: &Ctx,
    store: &dyn acpx_model::Store,
    id: &acpx_model::RecordId,
    query: EventQuery,
) -> CliResult<()> {
    let strict = query.mode == ReadMode::Strict;
    let read = log_pages::read_log(store, id, query, |item| match item {
        LogItem::Event(e) => print_event(ctx, e),
        other => say(ctx, events_said::log_item(&other)),
    });
    read.await.map_err(|e| {
        let corrupt = matches!(e, acpx_model::StoreError::Corrupt { .. });
        let err = CliError::from(e);
        // The generic hint sends the user to `fsck --repair`, which cannot replace a damaged
        // line of the file store or PostgreSQL: name what reads past it.
        if corrupt && strict {
            err.with_hint(
                "--lenient prints the rest of the log and reports each damaged line; \
                 `acpx fsck` names them, and `acpx fsck --repair` replaces them where the \
                 store can (SQLite)",
            )
        } else {
            err
        }
    })
}

/// Prints every event from `query.from_seq` on as the log grows, until the session is closed
/// or deleted ([`watch::follow`]).
async fn follow(ctx: &Ctx, r: &SessionSummary, query: &EventQuery) -> CliResult<()> {
    let store = ctx.store().await?;
    let id = &r.acpx_record_id;
    let interval = watch::DEFAULT_POLL_INTERVAL;
    let end = watch::follow(&*store, id, query, interval, |item| match item {
        Followed::Event(e) => print_event(ctx, &e),
        other => say(ctx, events_said::followed(&other)),
    })
    .await?;
    if let Some(why) = events_said::follow_end(end) {
        ctx.out.note(why);
    }
    Ok(())
}

/// `sessions prune`: deletes closed sessions older than the cutoff ([`prune::prune`]).
/// Without `--include-history` each pruned session's event log is first written to
/// `<home>/pruned/<id>.events.ndjson`.
pub async fn prune(ctx: &Ctx, a: PruneArgs) -> CliResult<()> {
    let now = Timestamp::now();
    let before = prune::cutoff(a.before.as_deref(), a.older_than, now).map_err(|e| {
        let err = CliError::usage(e.to_string());
        match e {
            CutoffError::NotADate(_) => err
                .with_hint("use YYYY-MM-DD or an RFC 3339 timestamp such as 2026-02-27T12:00:00Z"),
            CutoffError::BadDays(_) => err,
        }
    })?;
    let store = ctx.store().await?;
    let options = PruneOptions {
        agent_command: ctx.agent.explicit.then(|| ctx.agent.command.clone()),
        before,
        keep_logs_in: (!a.include_history).then(|| ctx.home.join("pruned")),
        dry_run: a.dry_run,
    };
    let pruned = {
        let bar = crate::progress::Bar::new(&ctx.out, "pruning");
        prune::prune_with_progress(&*store, &options, &bar).await?
    };
    print(ctx, reports::pruned(&pruned, a.dry_run));
    Ok(())
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
    print(ctx, reports::search(&query.text, &hits, &paint_out(ctx)));
    Ok(())
}
