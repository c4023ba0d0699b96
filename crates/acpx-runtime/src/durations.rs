//! The one place a number of seconds from the user (a flag or a config key) becomes a
//! duration (`docs/format.md` § Durations).
//!
//! Every duration acpx waits for is bounded: a value must be a finite decimal number of
//! seconds within the range of its setting, so no later `Duration` or `Instant` arithmetic
//! can overflow (`--timeout 1e20`, `NaN`, `inf`, `-1` are usage errors naming the flag and
//! the allowed range, never a panic).

use std::time::Duration;

/// The longest wait any duration setting accepts: 365 days.
pub const MAX_SECONDS: f64 = 365.0 * 24.0 * 3600.0;

/// The range a duration setting accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    /// More than 0, at most [`MAX_SECONDS`] (`--timeout`, `timeout`, `requestTimeout`).
    Positive,
    /// 0 or more, at most [`MAX_SECONDS`] (`--ttl`, `ttl`: 0 means "no limit").
    ZeroOrMore,
}

impl Range {
    fn describe(self) -> String {
        match self {
            Range::Positive => format!("a number of seconds more than 0 and at most {MAX_SECONDS}"),
            Range::ZeroOrMore => format!("a number of seconds from 0 to {MAX_SECONDS}"),
        }
    }

    fn admits(self, n: f64) -> bool {
        let low = match self {
            Range::Positive => n > 0.0,
            Range::ZeroOrMore => n >= 0.0,
        };
        n.is_finite() && low && n <= MAX_SECONDS
    }
}

/// Checks a number of seconds against `range`; the error says what is allowed.
pub fn check_seconds(n: f64, range: Range) -> Result<Duration, String> {
    if range.admits(n) {
        Ok(Duration::from_secs_f64(n))
    } else {
        Err(format!(
            "{n} is out of range: expected {}",
            range.describe()
        ))
    }
}

/// Parses a flag's text as a number of seconds in `range`.
pub fn parse_seconds(s: &str, range: Range) -> Result<Duration, String> {
    let n: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number: expected {}", range.describe()))?;
    if n.is_nan() {
        return Err(format!(
            "{s:?} is not a number: expected {}",
            range.describe()
        ));
    }
    check_seconds(n, range)
}

/// `--timeout`: seconds, more than 0 (clap names the flag in its error).
pub fn timeout_flag(s: &str) -> Result<f64, String> {
    parse_seconds(s, Range::Positive).map(|d| d.as_secs_f64())
}

/// `--ttl`: whole seconds (rounded), 0 or more.
pub fn ttl_flag(s: &str) -> Result<u64, String> {
    parse_seconds(s, Range::ZeroOrMore).map(|d| d.as_secs_f64().round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_values_parse() {
        assert_eq!(timeout_flag("2.5"), Ok(2.5));
        assert_eq!(ttl_flag("0"), Ok(0));
        assert_eq!(ttl_flag("299.6"), Ok(300));
        assert_eq!(timeout_flag(&MAX_SECONDS.to_string()), Ok(MAX_SECONDS));
    }

    #[test]
    fn unbounded_or_meaningless_values_are_refused_with_the_range() {
        for bad in [
            "1e20", "NaN", "nan", "inf", "-inf", "-1", "0", "", "ten", "1e309",
        ] {
            let e = timeout_flag(bad).expect_err(bad);
            assert!(e.contains("more than 0 and at most 31536000"), "{bad}: {e}");
        }
        for bad in ["1e20", "NaN", "inf", "-0.5", "x"] {
            let e = ttl_flag(bad).expect_err(bad);
            assert!(e.contains("from 0 to 31536000"), "{bad}: {e}");
        }
        assert!(check_seconds(f64::MAX, Range::ZeroOrMore).is_err());
    }
}
