//! Light highlighting of code blocks: keywords, strings, comments and numbers of the common
//! languages, told apart by a small scanner. Enough to read code; not a grammar. All text
//! goes out escaped.

use super::escape::push_escaped;

/// Words shown as keywords (the union of those of Rust, Python, JavaScript/TypeScript, Go,
/// shell, C-like languages): a word that is a keyword in one and a name in another is
/// coloured anyway, which is harmless.
const KEYWORDS: &[&str] = &[
    "as",
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "def",
    "default",
    "defer",
    "do",
    "done",
    "elif",
    "else",
    "enum",
    "esac",
    "export",
    "extends",
    "false",
    "fi",
    "fn",
    "for",
    "from",
    "func",
    "function",
    "go",
    "if",
    "impl",
    "import",
    "in",
    "interface",
    "let",
    "loop",
    "match",
    "mod",
    "mut",
    "new",
    "nil",
    "None",
    "null",
    "package",
    "pass",
    "pub",
    "raise",
    "return",
    "self",
    "Self",
    "static",
    "struct",
    "switch",
    "then",
    "this",
    "throw",
    "trait",
    "True",
    "False",
    "true",
    "try",
    "type",
    "typeof",
    "undefined",
    "use",
    "var",
    "where",
    "while",
    "with",
    "yield",
];

/// Whether `#` starts a comment in `lang` (shell, Python, Ruby, YAML, TOML…) rather than being
/// an attribute or a preprocessor line.
fn hash_comments(lang: &str) -> bool {
    matches!(
        lang,
        "sh" | "bash"
            | "zsh"
            | "shell"
            | "console"
            | "python"
            | "py"
            | "ruby"
            | "rb"
            | "yaml"
            | "yml"
            | "toml"
            | "perl"
            | "r"
            | "make"
            | "makefile"
            | "dockerfile"
            | "conf"
            | "ini"
    )
}

/// `code` (of language `lang`, possibly empty) as escaped HTML with `<span class>`es.
pub fn push_highlighted(out: &mut String, lang: &str, code: &str) {
    let lang = lang.to_ascii_lowercase();
    if matches!(lang.as_str(), "diff" | "patch") {
        return push_diff_lines(out, code);
    }
    let hash = hash_comments(&lang);
    let bytes = code.as_bytes();
    let mut i = 0;
    let mut plain = 0;
    let flush = |out: &mut String, from: usize, to: usize| {
        if from < to {
            push_escaped(out, &code[from..to]);
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        let rest = &code[i..];
        let (class, end) = if rest.starts_with("//") || (hash && b == b'#') {
            ("cm", i + rest.find('\n').unwrap_or(rest.len()))
        } else if let Some(body) = rest.strip_prefix("/*") {
            ("cm", i + body.find("*/").map_or(rest.len(), |e| e + 4))
        } else if b == b'"' || b == b'\'' || b == b'`' {
            ("st", string_end(bytes, i))
        } else if b.is_ascii_digit() && (i == 0 || !is_word(bytes[i - 1])) {
            let mut e = i;
            while e < bytes.len()
                && (bytes[e].is_ascii_alphanumeric() || bytes[e] == b'.' || bytes[e] == b'_')
            {
                e += 1;
            }
            ("nu", e)
        } else if is_word(b) && (i == 0 || !is_word(bytes[i - 1])) {
            let mut e = i;
            while e < bytes.len() && is_word(bytes[e]) {
                e += 1;
            }
            if KEYWORDS.contains(&&code[i..e]) {
                ("kw", e)
            } else {
                i = e;
                continue;
            }
        } else {
            // Step over one whole character (never split a UTF-8 sequence).
            i += rest.chars().next().map_or(1, char::len_utf8);
            continue;
        };
        flush(out, plain, i);
        out.push_str("<span class=\"");
        out.push_str(class);
        out.push_str("\">");
        push_escaped(out, &code[i..end]);
        out.push_str("</span>");
        i = end;
        plain = end;
    }
    flush(out, plain, bytes.len());
}

/// A byte of a word (identifier): ASCII letters, digits, `_`. Non-ASCII bytes are never part
/// of a keyword, so they end one.
fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The end (exclusive) of the string literal opened at `start`: after its closing quote,
/// or at the end of the line when it has none (an apostrophe in prose, a Rust lifetime).
fn string_end(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\n' if quote != b'`' => return start + 1,
            b if b == quote => return i + 1,
            _ => i += 1,
        }
    }
    if quote == b'`' {
        bytes.len()
    } else {
        start + 1
    }
}

/// A diff in a code block: `+` lines green, `-` lines red, `@@` lines as headers.
fn push_diff_lines(out: &mut String, code: &str) {
    for line in code.split_inclusive('\n') {
        let class = if line.starts_with("@@") {
            Some("dh")
        } else if line.starts_with('+') {
            Some("da")
        } else if line.starts_with('-') {
            Some("dr")
        } else {
            None
        };
        match class {
            Some(c) => {
                out.push_str("<span class=\"");
                out.push_str(c);
                out.push_str("\">");
                push_escaped(out, line);
                out.push_str("</span>");
            }
            None => push_escaped(out, line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hl(lang: &str, code: &str) -> String {
        let mut out = String::new();
        push_highlighted(&mut out, lang, code);
        out
    }

    #[test]
    fn keywords_strings_comments_and_numbers_are_marked() {
        let html = hl("rust", "let x = \"<b>\"; // note\nfn f() -> u8 { 42 }");
        assert!(html.contains("<span class=\"kw\">let</span>"), "{html}");
        assert!(
            html.contains("<span class=\"st\">&quot;&lt;b&gt;&quot;</span>"),
            "{html}"
        );
        assert!(html.contains("<span class=\"cm\">// note</span>"), "{html}");
        assert!(html.contains("<span class=\"nu\">42</span>"), "{html}");
    }

    #[test]
    fn text_survives_whole_and_escaped() {
        let code = "it's <tag> & ünï 'x";
        let html = hl("", code);
        assert!(!html.contains('<') || html.contains("&lt;tag&gt;"));
        let text = html
            .replace("<span class=\"st\">", "")
            .replace("<span class=\"kw\">", "")
            .replace("</span>", "");
        assert_eq!(text, "it&#39;s &lt;tag&gt; &amp; ünï &#39;x");
    }

    #[test]
    fn shell_hash_is_a_comment_only_in_hash_languages() {
        assert!(hl("sh", "ls # all").contains("<span class=\"cm\"># all</span>"));
        assert!(!hl("c", "#include <x>").contains("class=\"cm\""));
    }
}
