//! Escaping: every string recorded from an agent or a user goes into the page through here,
//! as text or as a quoted attribute value, and a link target only after [`safe_link`].

use std::fmt::Write as _;

/// `s` as HTML text or as a double- or single-quoted attribute value: `&`, `<`, `>`, `"`
/// and `'` become entities, so nothing in it can open a tag, end an attribute or start an
/// entity of its own.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    push_escaped(&mut out, s);
    out
}

/// [`escape`], appended to `out`.
pub fn push_escaped(out: &mut String, s: &str) {
    let mut last = 0;
    for (i, b) in s.bytes().enumerate() {
        let entity = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&#39;",
            // A NUL is dropped by parsers anyway; made visible instead of passed on.
            0 => "\u{FFFD}",
            _ => continue,
        };
        out.push_str(&s[last..i]);
        out.push_str(entity);
        last = i + 1;
    }
    out.push_str(&s[last..]);
}

/// The schemes a link in the page may have: nothing that runs (`javascript:`), embeds
/// (`data:`), or reaches the local machine (`file:`).
const SAFE_SCHEMES: [&str; 3] = ["http:", "https:", "mailto:"];

/// `url` if a reader may follow it: an absolute `http`, `https` or `mailto` URL. Anything
/// else (other schemes, relative paths that would resolve against the page's own `file://`
/// location, URLs hiding a scheme behind control characters or whitespace) is `None` and is
/// shown as text.
pub fn safe_link(url: &str) -> Option<&str> {
    let trimmed = url.trim();
    if trimmed.is_empty() || trimmed.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return None;
    }
    let lower = trimmed.get(..7).unwrap_or(trimmed).to_ascii_lowercase();
    SAFE_SCHEMES
        .iter()
        .any(|s| lower.starts_with(s))
        .then_some(trimmed)
}

/// An `<a>` element to `url` (when [`safe_link`] allows it) showing `text`, or `text` alone.
/// The link opens without telling the target where it came from.
pub fn push_link(out: &mut String, url: &str, text: &str) {
    match safe_link(url) {
        Some(url) => {
            out.push_str("<a href=\"");
            push_escaped(out, url);
            out.push_str("\" rel=\"noopener noreferrer\" target=\"_blank\">");
            push_escaped(out, text);
            out.push_str("</a>");
        }
        None => push_escaped(out, text),
    }
}

/// `s` reduced to a token safe in a `class` name: ASCII letters, digits, `-` and `_`, at
/// most 32 of them (a code block's language, a tool's kind, a status).
pub fn class_token(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
        .take(32)
        .collect()
}

/// A byte count for people: `812 B`, `4.2 KB`, `1.3 MB`.
pub fn human_bytes(n: u64) -> String {
    let mut s = String::new();
    if n < 1024 {
        let _ = write!(s, "{n} B");
    } else if n < 1024 * 1024 {
        let _ = write!(s, "{:.1} KB", n as f64 / 1024.0);
    } else {
        let _ = write!(s, "{:.1} MB", n as f64 / (1024.0 * 1024.0));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_become_entities() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(
            escape("<img src=x onerror=alert(1)>"),
            "&lt;img src=x onerror=alert(1)&gt;"
        );
        assert_eq!(escape("a\0b"), "a\u{FFFD}b");
        assert_eq!(escape("plain ünïcode"), "plain ünïcode");
    }

    #[test]
    fn only_web_and_mail_links_are_kept() {
        assert_eq!(
            safe_link("https://example.com/a?b"),
            Some("https://example.com/a?b")
        );
        assert_eq!(safe_link(" HTTP://x.org "), Some("HTTP://x.org"));
        assert_eq!(safe_link("mailto:a@b.c"), Some("mailto:a@b.c"));
        for bad in [
            "javascript:alert(1)",
            "JaVaScRiPt:alert(1)",
            "java\tscript:alert(1)",
            "\u{1}javascript:alert(1)",
            "data:text/html,<script>alert(1)</script>",
            "vbscript:x",
            "file:///etc/passwd",
            "//evil.example/x",
            "relative/path",
            "",
        ] {
            assert_eq!(safe_link(bad), None, "{bad:?} must not be a link");
        }
    }

    #[test]
    fn a_refused_link_is_text_and_a_kept_one_is_escaped() {
        let mut out = String::new();
        push_link(&mut out, "javascript:alert(1)", "<b>click</b>");
        assert_eq!(out, "&lt;b&gt;click&lt;/b&gt;");
        out.clear();
        push_link(&mut out, "https://x.org/?a=\"><script>", "x");
        assert_eq!(
            out,
            "<a href=\"https://x.org/?a=&quot;&gt;&lt;script&gt;\" rel=\"noopener noreferrer\" \
             target=\"_blank\">x</a>"
        );
    }

    #[test]
    fn class_tokens_keep_only_safe_characters() {
        assert_eq!(class_token("rust\" onload=\"x"), "rustonloadx");
        assert_eq!(class_token("in_progress"), "in_progress");
    }
}
