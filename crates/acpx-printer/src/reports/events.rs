//! What `sessions events`, `sessions watch` and `--follow` say beside the events they print:
//! the damage of a log, the events retention removed, where to go on, why following stopped.
//! (The events themselves are [`crate::transcript::event_line`]'s, or their JSON.)

use acpx_model::DamagedLine;
use acpx_runtime::ops::log_pages::LogItem;
use acpx_runtime::ops::watch::{FollowEnd, Followed};

use super::Said;

fn damaged(d: &DamagedLine) -> Said {
    Said::Warning(format!(
        "{} line {}: skipped: {}",
        d.location, d.line, d.reason
    ))
}

/// What a page of the log says beside its events (`None` for an event).
pub fn log_item(item: &LogItem<'_>) -> Option<Said> {
    Some(match item {
        LogItem::Event(_) => return None,
        LogItem::Removed { asked_from, oldest } => Said::Warning(format!(
            "events {asked_from}..{} were removed by retention; the log starts at seq {oldest}",
            oldest - 1,
        )),
        LogItem::TornTail(t) => Said::Warning(format!(
            "{}: an incomplete last line ({} bytes) was withheld; `acpx fsck --repair` sets it aside",
            t.location, t.bytes
        )),
        LogItem::Damaged(d) => damaged(d),
        LogItem::More(n) => Said::Note(format!("more: --from-seq {n}")),
    })
}

/// What following a log says beside its events (`None` for an event).
pub fn followed(item: &Followed) -> Option<Said> {
    Some(match item {
        Followed::Event(_) => return None,
        Followed::Damaged(d) => damaged(d),
        Followed::IncompleteTail => Said::Verbose(
            "the log ends with an incomplete line; waiting for it to be completed".into(),
        ),
        Followed::Missed { from, to } => Said::Warning(format!(
            "events {from}..{to} were rotated out of the log before they could be read"
        )),
    })
}

/// Why following stopped, when a person should hear it.
pub fn follow_end(end: FollowEnd) -> Option<&'static str> {
    match end {
        FollowEnd::Closed => Some("the session was closed; stopping"),
        FollowEnd::Deleted => Some("the session was deleted; stopping"),
        FollowEnd::LimitReached => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removed_events_name_the_range_and_where_the_log_starts() {
        let item = LogItem::Removed {
            asked_from: 2,
            oldest: 10,
        };
        assert_eq!(
            log_item(&item),
            Some(Said::Warning(
                "events 2..9 were removed by retention; the log starts at seq 10".into()
            ))
        );
        assert_eq!(
            log_item(&LogItem::More(7)),
            Some(Said::Note("more: --from-seq 7".into()))
        );
        assert_eq!(follow_end(FollowEnd::LimitReached), None);
    }
}
