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

/// A duration for people (never `Debug`'s `10.000146764s`): `250 ms` under a second, `1.5 s`
/// under ten seconds, `10 s` under a minute, then `3 min 20 s`, `2 h 5 min`, `3 d 4 h`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let secs = d.as_secs_f64();
    if secs < 10.0 {
        let tenths = (secs * 10.0).round() / 10.0;
        return format!("{tenths} s");
    }
    let s = d.as_secs() + u64::from(d.subsec_millis() >= 500);
    let (d_, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    match (d_, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, _) if s == 0 => format!("{m} min"),
        (0, 0, _) => format!("{m} min {s} s"),
        (0, _, 0) => format!("{h} h"),
        (0, _, _) => format!("{h} h {m} min"),
        (_, 0, _) => format!("{d_} d"),
        _ => format!("{d_} d {h} h"),
    }
}

/// [`human`] of a number of seconds (negative or not finite: `0 ms`).
pub fn human_secs(s: f64) -> String {
    human(Duration::try_from_secs_f64(s).unwrap_or_default())
}

#[cfg(test)]
mod human_tests {
    use super::*;

    #[test]
    fn durations_read_as_people_say_them() {
        assert_eq!(human(Duration::from_millis(250)), "250 ms");
        assert_eq!(human(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human(Duration::from_nanos(10_000_146_764)), "10 s");
        assert_eq!(human(Duration::from_secs(300)), "5 min");
        assert_eq!(human(Duration::from_secs(200)), "3 min 20 s");
        assert_eq!(human(Duration::from_secs(7500)), "2 h 5 min");
        assert_eq!(human(Duration::from_secs(3 * 86400 + 4 * 3600)), "3 d 4 h");
        assert_eq!(human_secs(0.0), "0 ms");
        assert_eq!(human_secs(f64::NAN), "0 ms");
    }
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
