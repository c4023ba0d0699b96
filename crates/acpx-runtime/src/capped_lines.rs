//! Lines read from an agent with a bound on their length: an agent that writes gigabytes
//! without a newline must not grow acpx's memory with it (Node acpx caps an ACP message at
//! 64 MiB; so does acpx, `ACPX_MAX_AGENT_MESSAGE_BYTES` sets another cap).

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line of the agent's stdout (one JSON-RPC message) acpx takes, by default.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 << 20;

/// The cap on one stdout line: `ACPX_MAX_AGENT_MESSAGE_BYTES` (1 KiB to 4 GiB), else
/// [`DEFAULT_MAX_MESSAGE_BYTES`].
pub fn max_message_bytes() -> usize {
    std::env::var("ACPX_MAX_AGENT_MESSAGE_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1024..=(4usize << 30)).contains(n))
        .unwrap_or(DEFAULT_MAX_MESSAGE_BYTES)
}

/// How one capped read ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Capped {
    /// The end of the stream, nothing read.
    End,
    /// A line (its newline, if any, included in the buffer).
    Line,
    /// A line longer than the cap: `buf` holds its first `max` bytes, the rest up to its
    /// newline (or the end) was read and dropped.
    TooLong,
}

/// Reads one line into `buf` (cleared first), keeping at most `max` bytes of it. A line past
/// the cap is read to its end and dropped when `drain`, else left unread (the caller stops
/// reading the stream: an agent writing an endless line is not waited for).
pub async fn read_line_capped<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
    drain: bool,
) -> std::io::Result<Capped> {
    buf.clear();
    let mut too_long = false;
    let mut read_any = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            break;
        }
        read_any = true;
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..=i], true),
            None => (available, false),
        };
        let room = max.saturating_sub(buf.len());
        if chunk.len() > room {
            too_long = true;
            if !drain {
                return Ok(Capped::TooLong);
            }
        }
        buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let used = chunk.len();
        reader.consume(used);
        if done {
            break;
        }
    }
    Ok(match (read_any, too_long) {
        (false, _) => Capped::End,
        (true, true) => Capped::TooLong,
        (true, false) => Capped::Line,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_line_past_the_cap_is_cut_and_the_next_line_is_whole() {
        let data = format!("{}\nshort\nlast", "x".repeat(100));
        let mut r = tokio::io::BufReader::with_capacity(16, data.as_bytes());
        let mut buf = Vec::new();
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10, true).await.unwrap(),
            Capped::TooLong
        );
        assert_eq!(buf, b"xxxxxxxxxx");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10, true).await.unwrap(),
            Capped::Line
        );
        assert_eq!(buf, b"short\n");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10, true).await.unwrap(),
            Capped::Line
        );
        assert_eq!(buf, b"last");
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10, true).await.unwrap(),
            Capped::End
        );
        let endless = "y".repeat(1000);
        let mut r = tokio::io::BufReader::with_capacity(16, endless.as_bytes());
        assert_eq!(
            read_line_capped(&mut r, &mut buf, 10, false).await.unwrap(),
            Capped::TooLong,
            "not read to its end"
        );
    }
}
