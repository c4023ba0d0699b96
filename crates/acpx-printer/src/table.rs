//! Tables for people: a header row, columns as wide as their widest cell, two spaces between
//! them, no trailing blanks, and, on a terminal, fitted to its width by cutting the middle of
//! the one column that may shrink (a path keeps its start and its end). `--format json` never
//! comes here. Widths are display widths (`console`, which also skips colour codes).
//! Cells are often text an agent chose (model names, titles): their control characters (ESC,
//! CR, LF, …) are escaped (`\u{1b}`, `\r`, `\n`) when they are added, so they can neither
//! break the layout nor reach the terminal; colour is added afterwards, by `render`'s `paint`.
//!
//! ```text
//! ID        STATE  AGENT  CWD
//! 8e1a7338  open   codex  /home/me/…/project
//! ```

use acpx_runtime::text::printable;
use console::measure_text_width;

/// Rows of cells under a header, rendered as aligned lines.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<usize>,
    shrink: Vec<usize>,
}

/// The narrowest a shrinking column gets before the table is left wider than the terminal.
const MIN_SHRUNK: usize = 12;

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| printable(h).into_owned()).collect(),
            ..Table::default()
        }
    }

    /// Right-aligns column `col` (numbers).
    pub fn right(mut self, col: usize) -> Table {
        self.right.push(col);
        self
    }

    /// Column `col` gives up width when the table is wider than the terminal: its cells lose
    /// their middle (`/home/me/…/project`). Columns given first give up width first.
    pub fn shrink(mut self, col: usize) -> Table {
        self.shrink.push(col);
        self
    }

    /// Adds a row (missing cells are empty, extra ones are dropped), its control characters
    /// escaped.
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells
            .into_iter()
            .map(|c| match printable(&c) {
                std::borrow::Cow::Borrowed(_) => c,
                std::borrow::Cow::Owned(escaped) => escaped,
            })
            .collect();
        cells.resize(self.headers.len(), String::new());
        self.rows.push(cells);
    }

    /// The lines: the header, then the rows. `width`: the terminal's width, if any. `paint`
    /// styles a padded cell (`None` row: the header) without changing its width.
    pub fn render(
        &self,
        width: Option<usize>,
        paint: impl Fn(Option<usize>, usize, &str) -> String,
    ) -> Vec<String> {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| measure_text_width(h)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(measure_text_width(cell));
            }
        }
        if let Some(total) = width {
            for &col in self.shrink.iter().filter(|c| **c < n) {
                let used: usize = widths.iter().sum::<usize>() + 2 * n.saturating_sub(1);
                let over = used.saturating_sub(total);
                let floor = MIN_SHRUNK.max(measure_text_width(&self.headers[col]));
                widths[col] = widths[col].saturating_sub(over).max(floor).min(widths[col]);
            }
        }
        let line = |row: Option<usize>, cells: &[String]| {
            let mut out = String::new();
            for (i, cell) in cells.iter().enumerate() {
                let text = if self.shrink.contains(&i) {
                    cut_middle(cell, widths[i])
                } else {
                    cell.clone()
                };
                let pad = widths[i].saturating_sub(measure_text_width(&text));
                let last = i + 1 == n;
                let padded = if self.right.contains(&i) {
                    format!("{}{text}", " ".repeat(pad))
                } else if last {
                    text
                } else {
                    format!("{text}{}", " ".repeat(pad))
                };
                if i > 0 {
                    out.push_str("  ");
                }
                out.push_str(&paint(row, i, &padded));
            }
            out.trim_end().to_owned()
        };
        std::iter::once(line(None, &self.headers))
            .chain(self.rows.iter().enumerate().map(|(r, c)| line(Some(r), c)))
            .collect()
    }
}

/// How a column's cells sit in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text.
    Left,
    /// Numbers.
    Right,
}

/// A table from `(header, alignment)` columns and rows, with an optional total row after a
/// rule of `─` as wide as the table (no terminal fitting: every column matters).
pub fn render(
    header: &[(&str, Align)],
    rows: &[Vec<String>],
    total: Option<&Vec<String>>,
) -> Vec<String> {
    let names: Vec<&str> = header.iter().map(|(h, _)| *h).collect();
    let mut t = Table::new(&names);
    for (i, (_, a)) in header.iter().enumerate() {
        if *a == Align::Right {
            t = t.right(i);
        }
    }
    for r in rows {
        t.row(r.clone());
    }
    if let Some(total) = total {
        t.row(total.clone());
    }
    let mut lines = t.render(None, |_, _, s| s.to_owned());
    if total.is_some() {
        let width = lines
            .iter()
            .map(|l| measure_text_width(l))
            .max()
            .unwrap_or(0);
        let at = lines.len() - 1;
        lines.insert(at, "─".repeat(width));
    }
    lines
}

/// `s` in at most `max` columns: its start and end around a `…` when it is longer.
pub fn cut_middle(s: &str, max: usize) -> String {
    if measure_text_width(s) <= max {
        return s.to_owned();
    }
    let chars: Vec<char> = s.chars().collect();
    let keep = max.saturating_sub(1);
    let head = keep / 2;
    let tail = keep - head;
    let start: String = chars[..head.min(chars.len())].iter().collect();
    let end: String = chars[chars.len().saturating_sub(tail)..].iter().collect();
    format!("{start}…{end}")
}

/// The width of the terminal stdout is, if it is one (`COLUMNS` wins, as for other tools).
pub fn stdout_width() -> Option<usize> {
    if let Some(c) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0)
    {
        return Some(c);
    }
    let term = console::Term::stdout();
    if !term.is_term() {
        return None;
    }
    term.size_checked().map(|(_, cols)| usize::from(cols))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(t: &Table, width: Option<usize>) -> Vec<String> {
        t.render(width, |_, _, s| s.to_owned())
    }

    #[test]
    fn columns_align_on_the_widest_cell_without_trailing_blanks() {
        let mut t = Table::new(&["ID", "AGENT", "MSGS", "TITLE"]).right(2);
        t.row(vec!["a".into(), "codex".into(), "7".into(), String::new()]);
        t.row(vec!["bb".into(), "claude".into(), "12".into(), "hi".into()]);
        assert_eq!(
            plain(&t, None),
            [
                "ID  AGENT   MSGS  TITLE",
                "a   codex      7",
                "bb  claude    12  hi"
            ]
        );
    }

    #[test]
    fn a_wide_table_cuts_the_middle_of_its_shrinking_column() {
        let mut t = Table::new(&["ID", "CWD", "N"]).shrink(1);
        t.row(vec![
            "x".into(),
            "/home/someone/projects/very/deep/checkout".into(),
            "1".into(),
        ]);
        let lines = plain(&t, Some(24));
        assert_eq!(lines[1], "x   /home/so…checkout  1");
        assert_eq!(measure_text_width(&lines[1]), 24);
        assert!(lines.iter().all(|l| !l.ends_with(' ')));
        // Never below the floor, even when the terminal is narrower.
        let lines = plain(&t, Some(5));
        assert_eq!(measure_text_width(&lines[1]), 2 + 2 + MIN_SHRUNK + 2 + 1);
        assert_eq!(cut_middle("abcdef", 4), "a…ef");
        assert_eq!(cut_middle("abc", 4), "abc");
    }

    #[test]
    fn colour_codes_do_not_count_as_width() {
        let mut t = Table::new(&["A", "B"]);
        t.row(vec!["ab".into(), "c".into()]);
        let bold = |r: Option<usize>, c: usize, s: &str| match (r, c) {
            (Some(_), 0) => format!("\u{1b}[1m{s}\u{1b}[0m"),
            _ => s.to_owned(),
        };
        assert_eq!(t.render(None, bold)[1], "\u{1b}[1mab\u{1b}[0m  c");
    }

    #[test]
    fn control_characters_in_cells_are_escaped_before_measuring() {
        let mut t = Table::new(&["MODEL", "TITLE"]);
        t.row(vec![
            "gpt\u{1b}[2J".into(),
            "line one\r\nX-line\ttab\u{7}\u{7f}".into(),
        ]);
        t.row(vec!["m".into(), "ok".into()]);
        let lines = plain(&t, None);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(
            lines[1],
            "gpt\\u{1b}[2J  line one\\r\\nX-line\\ttab\\u{7}\\u{7f}"
        );
        assert_eq!(lines[2], "m             ok");
        assert!(lines.iter().all(|l| !l.chars().any(char::is_control)));
        // Measured after escaping: the second column starts at the same place in each row.
        assert_eq!(lines[0].find("TITLE"), lines[2].find("ok"));
    }
}
