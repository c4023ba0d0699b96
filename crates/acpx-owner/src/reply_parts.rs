//! A reply sent in parts (`TaskOptions::reply_in_parts`) and the bounded writes every
//! answer line goes through: what reaches a client's socket, at the client's pace.

use std::time::Duration;

use acpx_model::ThreadText;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::OwnedWriteHalf;

use super::protocol::{line, Response, WireOutcome};

/// Writes the reply's texts as `reply_part` lines, each awaited into the socket before the
/// next piece is read (the socket's buffer is the only queue), then `outcome` as the `result`,
/// with `agentTextError` when a piece could not be read back (the pieces before it stay sent,
/// as the one-process path leaves printed what it printed). An error is the socket's.
///
/// A line the client leaves unread for `stall` is an error too: an idle owner waits for its
/// connections before it exits, and a client stopped for good (`^Z`, a pager left open)
/// must not keep it, its agent and its spill file alive past its TTL.
pub(super) async fn write_reply(
    write: &mut OwnedWriteHalf,
    texts: &[ThreadText],
    mut outcome: WireOutcome,
    stall: Duration,
) -> std::io::Result<()> {
    for piece in texts.iter().flat_map(ThreadText::chunks) {
        match piece {
            Ok(p) => {
                for part in parts_of(&p) {
                    write_within(write, part_line(part).as_bytes(), stall).await?;
                }
            }
            Err(e) => {
                outcome.agent_text_error = Some(e.to_string());
                break;
            }
        }
    }
    let result = line(&Response::Result { outcome });
    write_within(write, result.as_bytes(), stall).await
}

/// The most text in one `reply_part` line: what a spilled text is read in.
const PART_MAX: usize = 64 << 10;

/// `text` in non-empty pieces of at most [`PART_MAX`] bytes, cut on character boundaries. A
/// spilled text's chunks are that size already; a text in memory comes as one piece (up to
/// 256 KiB, more when its spill file could not be made), and a client should not have to hold
/// more than a part at a time.
pub(super) fn parts_of(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(PART_MAX);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (part, tail) = rest.split_at(end);
        rest = tail;
        Some(part)
    })
}

/// `write_all`, failing with `TimedOut` when the client takes none of the bytes for `limit`
/// (a client reading slowly but steadily is never cut, however long the write).
pub(super) async fn write_within(
    write: &mut OwnedWriteHalf,
    mut bytes: &[u8],
    limit: Duration,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        match tokio::time::timeout(limit, write.write(bytes)).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client took none of its answer",
                ))
            }
        }
    }
    Ok(())
}

/// A `reply_part` line for `text`, serialized from the borrowed piece (no copy).
pub(super) fn part_line(text: &str) -> String {
    #[derive(serde::Serialize)]
    struct PartLine<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }
    line(&PartLine {
        kind: "reply_part",
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_in_memory_goes_in_parts_cut_between_characters() {
        assert_eq!(parts_of("").count(), 0);
        assert_eq!(parts_of("short").collect::<Vec<_>>(), ["short"]);
        // 'é' is two bytes, after one 'x': byte PART_MAX falls inside an 'é'.
        let text = "x".to_owned() + &"é".repeat(PART_MAX);
        let parts: Vec<&str> = parts_of(&text).collect();
        assert!(parts.iter().all(|p| !p.is_empty() && p.len() <= PART_MAX));
        assert_eq!(parts.concat(), text);
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [PART_MAX - 1, PART_MAX, 2]
        );
    }

    #[test]
    fn a_part_line_is_a_reply_part_response() {
        let l = part_line("a \"quoted\"\nline");
        assert_eq!(
            serde_json::from_str::<Response>(l.trim_end()).unwrap(),
            Response::ReplyPart {
                text: "a \"quoted\"\nline".into()
            }
        );
    }
}
