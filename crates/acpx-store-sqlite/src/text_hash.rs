//! `messages.text_hash`: the hash of a search part's role, message id and text, which a save
//! compares to rewrite (and re-index) only the parts that changed.
//!
//! The value is stored, so the function must never change without a migration that computes
//! it again (schema version 6 did, through the SQL function [`register`] installs). Until
//! version 5 it was FNV-1a, a byte at a time: every save hashes the whole conversation's text,
//! and for the 8 MB reply of a 1M-chunk turn that was 12 ms of each later prompt's save
//! (`perf`, docs/BENCHMARKS.md § SQLite documents in place). This one takes 8 bytes per step.
//! It detects changes; it is not a defence against text crafted to collide (a collision would
//! leave that part's search text stale, never the document).

use rusqlite::functions::FunctionFlags;
use rusqlite::types::ValueRef;
use rusqlite::Connection;

/// Name of the SQL function that computes [`part_hash`] (`role`, `message_id`, `text`).
const SQL_FUNCTION: &str = "acpx_part_hash";

/// The hash of one part: `message_id` `None` hashes as `""`.
pub(crate) fn part_hash(role: &str, message_id: Option<&str>, text: &str) -> i64 {
    hash_bytes(
        role.as_bytes(),
        message_id.unwrap_or("").as_bytes(),
        text.as_bytes(),
    )
}

/// [`part_hash`] over bytes: what the SQL function computes, whatever a row holds (a text
/// that is not UTF-8, stored by hand, must not stop a migration).
fn hash_bytes(role: &[u8], message_id: &[u8], text: &[u8]) -> i64 {
    let mut h = WordHash(0xcbf2_9ce4_8422_2325);
    h.field(role);
    h.field(message_id);
    h.field(text);
    h.finish() as i64
}

/// Multiply-rotate over 64-bit little-endian words, each field preceded by its length (so
/// that moving a byte from one field to the next changes the value), finished with
/// MurmurHash3's `fmix64`.
struct WordHash(u64);

impl WordHash {
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }

    fn field(&mut self, bytes: &[u8]) {
        self.word(bytes.len() as u64);
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            self.word(u64::from_le_bytes(b));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.word(u64::from_le_bytes(b));
        }
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// Installs `acpx_part_hash(role, message_id, text)` on `conn`, for the migration that
/// computes the stored hashes again.
pub(crate) fn register(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        SQL_FUNCTION,
        3,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let bytes = |i: usize| match ctx.get_raw(i) {
                ValueRef::Text(b) | ValueRef::Blob(b) => b,
                _ => &[],
            };
            Ok(hash_bytes(bytes(0), bytes(1), bytes(2)))
        },
    )
}

/// Removes what [`register`] installed.
pub(crate) fn unregister(conn: &Connection) -> rusqlite::Result<()> {
    conn.remove_function(SQL_FUNCTION, 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_and_byte_counts() {
        let base = part_hash("agent", None, "hello world, a text of some length");
        assert_eq!(
            base,
            part_hash("agent", Some(""), "hello world, a text of some length")
        );
        assert_ne!(
            base,
            part_hash("user", None, "hello world, a text of some length")
        );
        assert_ne!(
            base,
            part_hash("agent", Some("m1"), "hello world, a text of some length")
        );
        assert_ne!(
            base,
            part_hash("agent", None, "hello world, a text of some lengtH")
        );
        assert_ne!(
            base,
            part_hash("agent", None, "hello world, a text of some length ")
        );
        assert_ne!(part_hash("ab", None, "c"), part_hash("a", None, "bc"));
        assert_ne!(part_hash("a", None, ""), part_hash("a", None, "\0"));
    }

    /// The value is stored: it must not change between builds or Rust versions.
    #[test]
    fn the_value_is_fixed() {
        assert_eq!(
            part_hash("agent", None, "hello"),
            part_hash("agent", None, "hello")
        );
        assert_eq!(part_hash("agent", None, "hello"), FIXED);
    }

    const FIXED: i64 = 3_551_489_808_825_112_063;

    #[test]
    fn the_sql_function_computes_the_same_value() {
        let conn = Connection::open_in_memory().unwrap();
        register(&conn).unwrap();
        let sql: i64 = conn
            .query_row("SELECT acpx_part_hash('user', NULL, 'ünï')", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(sql, part_hash("user", None, "ünï"));
        let bytes: i64 = conn
            .query_row(
                "SELECT acpx_part_hash('user', NULL, CAST(x'ff00fe' AS TEXT))",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(
            bytes,
            hash_bytes(b"user", b"", &[0xff, 0, 0xfe]),
            "not UTF-8"
        );
        unregister(&conn).unwrap();
        assert!(conn
            .query_row("SELECT acpx_part_hash('user', NULL, 'x')", [], |r| r
                .get::<_, i64>(0))
            .is_err());
    }
}
