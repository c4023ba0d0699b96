//! Line diffs as standard unified hunks: what `diff -u` and `git diff` print, with real
//! `@@ -a,b +c,d @@` headers and three lines of context.

use std::time::Duration;

use similar::{ChangeTag, TextDiff};

/// Lines of unchanged context around each change.
const CONTEXT: usize = 3;

/// How long one diff may search for the smallest edit before it settles for a larger one: a
/// pathological pair of texts must not stall an export.
const DEADLINE: Duration = Duration::from_millis(300);

/// What a line of a hunk is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// In both texts.
    Context,
    /// Only in the old text.
    Removed,
    /// Only in the new text.
    Added,
}

impl LineKind {
    /// The unified-diff prefix of such a line: ` `, `-` or `+`.
    pub fn prefix(self) -> char {
        match self {
            LineKind::Context => ' ',
            LineKind::Removed => '-',
            LineKind::Added => '+',
        }
    }
}

/// One hunk of a unified diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    /// `@@ -a,b +c,d @@`.
    pub header: String,
    /// Its lines, without their line breaks.
    pub lines: Vec<(LineKind, String)>,
}

/// The hunks that turn `old` into `new` (`old` `None`: a new file, every line added). Empty
/// when the texts are equal.
pub fn unified(old: Option<&str>, new: &str) -> Vec<Hunk> {
    let old = old.unwrap_or("");
    let diff = TextDiff::configure().timeout(DEADLINE).diff_lines(old, new);
    let mut hunks = Vec::new();
    for hunk in diff.unified_diff().context_radius(CONTEXT).iter_hunks() {
        let lines = hunk
            .iter_changes()
            .map(|change| {
                let kind = match change.tag() {
                    ChangeTag::Equal => LineKind::Context,
                    ChangeTag::Delete => LineKind::Removed,
                    ChangeTag::Insert => LineKind::Added,
                };
                let text = change.value();
                let text = text.strip_suffix('\n').unwrap_or(text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                (kind, text.to_owned())
            })
            .collect();
        hunks.push(Hunk {
            header: hunk.header().to_string(),
            lines,
        });
    }
    hunks
}

/// Counts of added and removed lines over `hunks`.
pub fn stat(hunks: &[Hunk]) -> (usize, usize) {
    let mut added = 0;
    let mut removed = 0;
    for (kind, _) in hunks.iter().flat_map(|h| &h.lines) {
        match kind {
            LineKind::Added => added += 1,
            LineKind::Removed => removed += 1,
            LineKind::Context => {}
        }
    }
    (added, removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_changed_line_has_a_real_hunk_header_and_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\n";
        let new = "a\nb\nc\nD\ne\nf\ng\n";
        let hunks = unified(Some(old), new);
        assert_eq!(hunks.len(), 1);
        assert_eq!(hunks[0].header, "@@ -1,7 +1,7 @@");
        assert!(hunks[0].lines.contains(&(LineKind::Removed, "d".into())));
        assert!(hunks[0].lines.contains(&(LineKind::Added, "D".into())));
        assert_eq!(stat(&hunks), (1, 1));
    }

    #[test]
    fn a_new_file_is_all_added() {
        let hunks = unified(None, "x\ny\n");
        assert_eq!(hunks[0].header, "@@ -0,0 +1,2 @@");
        assert_eq!(stat(&hunks), (2, 0));
    }

    #[test]
    fn far_apart_changes_are_two_hunks_and_equal_texts_none() {
        let old: String = (0..40).map(|i| format!("{i}\n")).collect();
        let new = old
            .replace("\n5\n", "\nfive\n")
            .replace("\n30\n", "\nthirty\n");
        let hunks = unified(Some(&old), &new);
        assert_eq!(hunks.len(), 2);
        assert_eq!(hunks[1].header, "@@ -28,7 +28,7 @@");
        assert!(unified(Some(&old), &old).is_empty());
    }
}
