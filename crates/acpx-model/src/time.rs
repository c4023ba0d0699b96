//! Timestamps: ISO-8601 UTC, written with millisecond precision (`2026-02-27T12:00:00.000Z`).

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant. Reads any RFC 3339 timestamp that carries an offset (a timestamp without a
/// zone is rejected: it cannot be ordered); writes the canonical `...sss Z` form.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    /// Now, truncated to milliseconds so that a value survives a write/read round trip unchanged.
    pub fn now() -> Self {
        Self::from_datetime(Utc::now())
    }

    /// `dt`, truncated to milliseconds (the precision written on disk).
    pub fn from_datetime(dt: DateTime<Utc>) -> Self {
        let millis = dt.timestamp_millis();
        Timestamp(DateTime::from_timestamp_millis(millis).unwrap_or(dt))
    }

    /// Milliseconds since the Unix epoch; `None` when out of range.
    pub fn from_millis(millis: i64) -> Option<Self> {
        DateTime::from_timestamp_millis(millis).map(Timestamp)
    }

    /// Parses an RFC 3339 timestamp with a zone (`docs/format.md`, Decisions 12).
    pub fn parse(s: &str) -> Result<Self, String> {
        DateTime::parse_from_rfc3339(s)
            .map(|dt| Timestamp::from_datetime(dt.with_timezone(&Utc)))
            .map_err(|e| format!("{s:?} is not an RFC 3339 timestamp with a zone ({e})"))
    }

    /// As a `chrono` date-time.
    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

    /// Milliseconds since the Unix epoch.
    pub fn millis(&self) -> i64 {
        self.0.timestamp_millis()
    }

    /// The canonical text form.
    pub fn to_rfc3339(&self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Millis, true)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({})", self.to_rfc3339())
    }
}

impl Timestamp {
    /// The canonical form (`%Y-%m-%dT%H:%M:%S%.3fZ`) written digit by digit into `buf`, for
    /// years 0 to 9999 (`None` outside them, or for a leap second). Every event line carries
    /// a timestamp, and chrono's formatter, which interprets the format string on every call,
    /// cost as much as the rest of the line.
    fn write_canonical<'a>(&self, buf: &'a mut [u8; 24]) -> Option<&'a str> {
        use chrono::{Datelike, Timelike};
        let t = self.0;
        let year = u32::try_from(t.year()).ok().filter(|y| *y <= 9999)?;
        let nanos = t.nanosecond();
        if nanos >= 1_000_000_000 {
            return None;
        }
        *buf = *b"0000-00-00T00:00:00.000Z";
        let mut put = |at: usize, value: u32, digits: usize| {
            let mut v = value;
            for i in (at..at + digits).rev() {
                buf[i] = b'0' + (v % 10) as u8;
                v /= 10;
            }
        };
        put(0, year, 4);
        put(5, t.month(), 2);
        put(8, t.day(), 2);
        put(11, t.hour(), 2);
        put(14, t.minute(), 2);
        put(17, t.second(), 2);
        put(20, nanos / 1_000_000, 3);
        std::str::from_utf8(buf).ok()
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 24];
        match self.write_canonical(&mut buf) {
            Some(text) => s.serialize_str(text),
            None => s.collect_str(&format_args!("{}", self.0.format("%Y-%m-%dT%H:%M:%S%.3fZ"))),
        }
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Timestamp::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_millisecond_utc() {
        let t = Timestamp::parse("2026-02-27T12:00:00Z").unwrap();
        assert_eq!(
            serde_json::to_string(&t).unwrap(),
            "\"2026-02-27T12:00:00.000Z\""
        );
        let t = Timestamp::parse("2026-02-27T14:00:00.123456+02:00").unwrap();
        assert_eq!(t.to_string(), "2026-02-27T12:00:00.123Z");
    }

    /// The hand-written form is exactly chrono's, wherever it applies, and chrono's is used
    /// beyond it.
    #[test]
    fn canonical_form_matches_chrono() {
        let chrono_form = |t: &Timestamp| format!("\"{}\"", t.0.format("%Y-%m-%dT%H:%M:%S%.3fZ"));
        let mut millis: Vec<i64> = vec![
            0,
            -1,
            1,
            999,
            1_772_193_600_000,
            951_782_400_000,     // 2000-02-29
            4_107_542_399_999,   // 2100-02-28T23:59:59.999
            253_402_300_799_999, // 9999-12-31T23:59:59.999
            253_402_300_800_000, // 10000-01-01
            -62_167_219_200_000, // 0000-01-01
            -62_167_219_200_001, // -0001-12-31
            -62_135_596_800_000, // 0001-01-01
        ];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            millis.push((x % 400_000_000_000_000) as i64 - 100_000_000_000_000);
        }
        for m in millis {
            let Some(t) = Timestamp::from_millis(m) else {
                continue;
            };
            assert_eq!(serde_json::to_string(&t).unwrap(), chrono_form(&t), "{m}");
        }
    }

    #[test]
    fn rejects_zoneless_and_garbage() {
        assert!(Timestamp::parse("2026-02-27T12:00:00").is_err());
        assert!(Timestamp::parse("yesterday").is_err());
    }

    #[test]
    fn now_round_trips() {
        let t = Timestamp::now();
        let s = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Timestamp>(&s).unwrap(), t);
    }
}
