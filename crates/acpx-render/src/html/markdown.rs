//! An agent's Markdown as safe HTML. pulldown-cmark parses it; before its HTML writer sees
//! the events, every raw-HTML event becomes text (shown, escaped, as the agent wrote it),
//! links keep only `http`, `https` and `mailto` targets (with `rel="noopener noreferrer"`),
//! images become links (the page loads nothing), and code blocks are highlighted here.

use pulldown_cmark::{CodeBlockKind, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

use super::escape::{class_token, push_escaped, safe_link};
use super::highlight;

/// The Markdown `text` as HTML, appended to `out`.
pub fn push_markdown(out: &mut String, text: &str) {
    // No heading attributes (`{#id}` would let text choose ids of the page), no math, no
    // footnotes: only what an agent's reply needs.
    let options =
        Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TASKLISTS;
    let mut events = Vec::new();
    let mut code: Option<(String, String)> = None;
    // Image alt text is shown as text: the depth of images being read.
    for event in Parser::new_ext(text, options) {
        if let Some((lang, body)) = code.as_mut() {
            match event {
                Event::Text(t) => body.push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    let mut html = String::from("<pre class=\"code\"><code");
                    if !lang.is_empty() {
                        html.push_str(" data-lang=\"");
                        html.push_str(lang);
                        html.push('"');
                    }
                    html.push('>');
                    highlight::push_highlighted(&mut html, lang, body);
                    html.push_str("</code></pre>\n");
                    events.push(Event::Html(html.into()));
                    code = None;
                }
                // A code block holds only text; anything else is kept as text too.
                other => body.push_str(&event_text(&other)),
            }
            continue;
        }
        match event {
            Event::Start(Tag::CodeBlock(kind)) => {
                let lang = match kind {
                    CodeBlockKind::Fenced(info) => {
                        class_token(info.split_whitespace().next().unwrap_or(""))
                    }
                    CodeBlockKind::Indented => String::new(),
                };
                code = Some((lang, String::new()));
            }
            // Raw HTML of the agent: shown as the text it is.
            Event::Html(h) | Event::InlineHtml(h) => events.push(Event::Text(h)),
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                ..
            }) => events.push(Event::Html(link_open(link_type, &dest_url, false).into())),
            Event::End(TagEnd::Link) => events.push(Event::Html(CowStr::Borrowed("</a>"))),
            Event::Start(Tag::Image {
                link_type,
                dest_url,
                ..
            }) => events.push(Event::Html(link_open(link_type, &dest_url, true).into())),
            Event::End(TagEnd::Image) => {
                events.push(Event::Html(CowStr::Borrowed("]</a>")));
            }
            other => events.push(other),
        }
    }
    // A code block the text left open (the reply was cut): shown as it is.
    if let Some((lang, body)) = code {
        let mut html = String::from("<pre class=\"code\"><code>");
        highlight::push_highlighted(&mut html, &lang, &body);
        html.push_str("</code></pre>\n");
        events.push(Event::Html(html.into()));
    }
    pulldown_cmark::html::push_html(out, events.into_iter());
}

/// The opening of a link (or of an image shown as a link): an `<a>` with the target when
/// [`safe_link`] keeps it, else an `<a>` without `href` (plain text), with the refused
/// target shown after the text so nothing is hidden. Always closed by `</a>`.
fn link_open(link_type: LinkType, dest: &str, image: bool) -> String {
    let dest = if link_type == LinkType::Email && !dest.starts_with("mailto:") {
        format!("mailto:{dest}")
    } else {
        dest.to_owned()
    };
    let mut html = String::new();
    match safe_link(&dest) {
        Some(url) => {
            html.push_str("<a href=\"");
            push_escaped(&mut html, url);
            html.push_str("\" rel=\"noopener noreferrer\" target=\"_blank\"");
            if image {
                html.push_str(" class=\"image-link\"");
            }
            html.push('>');
        }
        None => {
            html.push_str("<a class=\"refused-link\" title=\"link not kept: ");
            push_escaped(&mut html, &dest);
            html.push_str("\">");
        }
    }
    if image {
        html.push_str("[image: ");
    }
    html
}

/// The text an event stands for inside a code block.
fn event_text(event: &Event<'_>) -> String {
    match event {
        Event::Text(t) | Event::Code(t) | Event::Html(t) | Event::InlineHtml(t) => t.to_string(),
        Event::SoftBreak | Event::HardBreak => "\n".into(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn md(text: &str) -> String {
        let mut out = String::new();
        push_markdown(&mut out, text);
        out
    }

    #[test]
    fn headings_lists_and_code_render() {
        let html = md("# Title\n\n- one\n- two\n\n```rust\nfn main() {}\n```\n");
        assert!(html.contains("<h1>Title</h1>"), "{html}");
        assert!(html.contains("<li>one</li>"), "{html}");
        assert!(
            html.contains("<pre class=\"code\"><code data-lang=\"rust\">"),
            "{html}"
        );
        assert!(html.contains("<span class=\"kw\">fn</span>"), "{html}");
    }

    #[test]
    fn raw_html_stays_text() {
        let html = md("hi <script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n<div style=\"background:url(http://e/x)\">d</div>");
        assert!(!html.contains("<script"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(!html.contains("<div"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{html}"
        );
    }

    #[test]
    fn unsafe_links_lose_their_target_and_images_are_not_loaded() {
        let html = md("[a](javascript:alert(1)) [b](data:text/html,x) [c](https://ok.example/) ![pic](https://img.example/p.png) <mail@example.com>");
        assert!(!html.contains("href=\"javascript"), "{html}");
        assert!(!html.contains("href=\"data"), "{html}");
        assert!(
            html.contains("<a href=\"https://ok.example/\" rel=\"noopener noreferrer\""),
            "{html}"
        );
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("[image: pic]"), "{html}");
        assert!(html.contains("href=\"mailto:mail@example.com\""), "{html}");
    }

    #[test]
    fn a_code_fence_language_cannot_inject_attributes() {
        let html = md("```x\" onmouseover=\"alert(1)\nbody\n```\n");
        assert!(!html.contains("onmouseover=\""), "{html}");
    }

    #[test]
    fn an_unclosed_code_block_is_still_shown() {
        let html = md("```\n<b>cut");
        assert!(html.contains("&lt;b&gt;cut"), "{html}");
    }
}
