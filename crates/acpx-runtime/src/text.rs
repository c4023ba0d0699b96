//! Text an agent or an imported archive chose, made safe to print on a terminal: control
//! characters escaped, one line, bounded.

/// `s` with its control characters escaped (`\u{1b}`, `\n`, …): a name, title or path a
/// person reads on a terminal, which an agent or an imported archive chose, must not move
/// the cursor, recolour the screen or hide text.
pub fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// `s` on one line, cut to `max` characters with `…`; other control characters escaped
/// ([`printable`]).
pub fn clip(s: &str, max: usize) -> String {
    let one_line = printable(&s.replace('\n', " ")).into_owned();
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut t: String = one_line.chars().take(max).collect();
        t.push('…');
        t
    }
}
