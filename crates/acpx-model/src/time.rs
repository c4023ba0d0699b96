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

    pub fn from_datetime(dt: DateTime<Utc>) -> Self {
        let millis = dt.timestamp_millis();
        Timestamp(DateTime::from_timestamp_millis(millis).unwrap_or(dt))
    }

    pub fn from_millis(millis: i64) -> Option<Self> {
        DateTime::from_timestamp_millis(millis).map(Timestamp)
    }

    pub fn parse(s: &str) -> Result<Self, String> {
        DateTime::parse_from_rfc3339(s)
            .map(|dt| Timestamp::from_datetime(dt.with_timezone(&Utc)))
            .map_err(|e| format!("{s:?} is not an RFC 3339 timestamp with a zone ({e})"))
    }

    pub fn as_datetime(&self) -> DateTime<Utc> {
        self.0
    }

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

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}", self.0.format("%Y-%m-%dT%H:%M:%S%.3fZ")))
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
