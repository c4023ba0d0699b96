//! A session's log read a page at a time for a command that prints it (`sessions events`): a
//! log of a million events is printed without ever being in memory at once. Each event, each
//! damaged line (once, though a store may report it again on a later page), the events
//! retention already removed, a torn last line and where to go on when the query's limit
//! stopped the reading are handed to the caller in the log's order ([`LogItem`]).

use acpx_model::{
    DamagedLine, EventEnvelope, EventQuery, EventStream, EventType, ReadMode, RecordId, Store,
    StoreResult, TornTail,
};

/// Events read per store call.
pub const EVENTS_PAGE: usize = 5_000;

/// The query of `sessions events`' filters: from `from_seq`, of the event `types` and
/// `streams` named (a name acpx does not know is kept as it is), of one `request_id`, at
/// most `limit` events, read a page of [`acpx_model::PAGE_BYTES`] at a time; `lenient`
/// skips and reports damaged lines instead of failing on the first.
pub fn events_query(
    from_seq: u64,
    types: &[String],
    streams: &[String],
    request_id: Option<String>,
    limit: Option<usize>,
    lenient: bool,
) -> EventQuery {
    EventQuery {
        from_seq,
        types: types.iter().map(|t| EventType::from(t.as_str())).collect(),
        streams: streams
            .iter()
            .map(|s| EventStream::from(s.as_str()))
            .collect(),
        request_id,
        limit,
        max_bytes: Some(acpx_model::PAGE_BYTES),
        mode: if lenient {
            ReadMode::Lenient
        } else {
            ReadMode::Strict
        },
    }
}

/// What [`read_log`] reports, in order.
#[derive(Debug)]
pub enum LogItem<'a> {
    /// An event the query selects.
    Event(&'a EventEnvelope),
    /// The events `asked_from..oldest` were asked for but retention removed them: the log
    /// starts at `oldest`.
    Removed {
        /// The first seq asked for.
        asked_from: u64,
        /// The first seq the log still has.
        oldest: u64,
    },
    /// The log ends with an incomplete line, withheld (said once, with the last page).
    TornTail(&'a TornTail),
    /// A complete line that is not a valid event, skipped (lenient reads), said once.
    Damaged(&'a DamagedLine),
    /// The query's limit stopped the reading before the end; the log goes on at this seq.
    More(u64),
}

/// Reads the events `query` selects, at most [`EVENTS_PAGE`] events (and about
/// `query.max_bytes` of them) per store call, and hands each to `each` with what the pages
/// say about the log ([`LogItem`]).
pub async fn read_log(
    store: &dyn Store,
    id: &RecordId,
    mut query: EventQuery,
    mut each: impl FnMut(LogItem<'_>),
) -> StoreResult<()> {
    let mut remaining = query.limit;
    // A store may report a damaged line again on a later page (its seek can start before
    // `from_seq`): each is reported once.
    let mut reported = std::collections::HashSet::new();
    let asked_from = query.from_seq;
    loop {
        query.limit = Some(remaining.map_or(EVENTS_PAGE, |r| r.min(EVENTS_PAGE)));
        let mut page = store.read_events(id, &query).await?;
        if query.from_seq == asked_from && asked_from > 1 && page.oldest_seq > asked_from {
            // Asked for events retention already removed: said rather than start later
            // without a word.
            each(LogItem::Removed {
                asked_from,
                oldest: page.oldest_seq,
            });
        }
        for e in &page.events {
            each(LogItem::Event(e));
        }
        page.damaged
            .retain(|d| reported.insert((d.location.clone(), d.line)));
        if page.next_seq.is_some() {
            // The torn tail is at the end of the log: said once, with the last page.
            page.torn_tail = None;
        }
        if let Some(t) = &page.torn_tail {
            each(LogItem::TornTail(t));
        }
        for d in &page.damaged {
            each(LogItem::Damaged(d));
        }
        if let Some(r) = remaining.as_mut() {
            *r = r.saturating_sub(page.events.len());
        }
        match page.next_seq {
            Some(n) if remaining == Some(0) => {
                each(LogItem::More(n));
                return Ok(());
            }
            Some(n) if n > query.from_seq => query.from_seq = n,
            _ => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use acpx_model::{
        Durability, EventContext, EventPayload, EventSource, EventStream, MemoryStore, NewSession,
        SessionRecord, Timestamp,
    };
    use serde_json::json;

    /// A memory store with one session whose log holds `events` events (seqs 1..=events).
    async fn store_with(events: u64) -> (MemoryStore, RecordId) {
        let store = MemoryStore::new();
        let id = RecordId::parse("log-pages").unwrap();
        let mut r = SessionRecord::new(
            NewSession {
                acpx_record_id: id.clone(),
                acp_session_id: "acp".into(),
                agent_session_id: None,
                agent_command: "agent".into(),
                cwd: "/r".into(),
                name: None,
            },
            Timestamp::now(),
        );
        store.create(&mut r).await.unwrap();
        let ctx = EventContext {
            acpx_record_id: &id,
            acp_session_id: "acp",
            request_id: None,
            stream: EventStream::Prompt,
            source: EventSource::Acp,
        };
        let all: Vec<_> = (1..=events)
            .map(|seq| {
                let p = EventPayload::from_parts("something_new", &json!({"n": seq})).unwrap();
                acpx_model::EventEnvelope::new(&ctx, seq, Timestamp::now(), p)
            })
            .collect();
        let writer = store.lock(&id, std::time::Duration::ZERO).await.unwrap();
        store
            .append(&writer, &all, Durability::Flush)
            .await
            .unwrap();
        (store, id)
    }

    #[tokio::test]
    async fn a_limit_stops_the_reading_and_says_where_to_go_on() {
        let (store, id) = store_with(5).await;
        let query = EventQuery {
            limit: Some(2),
            ..EventQuery::default()
        };
        let mut seqs = Vec::new();
        let mut more = None;
        read_log(&store, &id, query, |item| match item {
            LogItem::Event(e) => seqs.push(e.seq),
            LogItem::More(n) => more = Some(n),
            other => panic!("unexpected {other:?}"),
        })
        .await
        .unwrap();
        assert_eq!(seqs, [1, 2]);
        assert_eq!(more, Some(3));
    }

    #[tokio::test]
    async fn without_a_limit_every_event_is_read_and_nothing_more_is_said() {
        let (store, id) = store_with(7).await;
        let mut seqs = Vec::new();
        read_log(&store, &id, EventQuery::default(), |item| match item {
            LogItem::Event(e) => seqs.push(e.seq),
            other => panic!("unexpected {other:?}"),
        })
        .await
        .unwrap();
        assert_eq!(seqs, (1..=7).collect::<Vec<_>>());
    }
}
