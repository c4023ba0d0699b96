//! The page shell: `<head>` with its Content-Security-Policy, the inline style sheet, the
//! toolbar, and the inline script (search, expand all, the summary moved to the top).
//!
//! The policy allows exactly this style sheet and this script, by their SHA-256 hashes, and
//! nothing else: no other script, no inline event handler, no image, font, frame or fetch.
//! It is the second line of defence; the first is that every recorded string is escaped.

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::escape::push_escaped;

/// The style sheet (light and dark).
pub const STYLE: &str = r#"
:root{--bg:#fff;--fg:#1f2328;--muted:#656d76;--line:#d0d7de;--soft:#f6f8fa;--accent:#0969da;
--add:#dafbe1;--addfg:#116329;--del:#ffebe9;--delfg:#a40e26;--warn:#9a6700;--warnbg:#fff8c5;
--err:#cf222e;--errbg:#ffebe9;--chg:#8250df;--user:#ddf4ff}
@media (prefers-color-scheme:dark){:root{--bg:#0d1117;--fg:#e6edf3;--muted:#8d96a0;--line:#30363d;
--soft:#161b22;--accent:#4493f8;--add:#12261e;--addfg:#3fb950;--del:#25171c;--delfg:#f85149;
--warn:#d29922;--warnbg:#272115;--err:#f85149;--errbg:#25171c;--chg:#a371f7;--user:#0c2d6b}}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif}
header.session{padding:16px 24px;border-bottom:1px solid var(--line);background:var(--soft);
display:flex;flex-wrap:wrap;gap:8px 48px;align-items:flex-start}
header.session h1{margin:0;font-size:20px;flex-basis:100%;overflow-wrap:anywhere}
dl.meta{display:grid;grid-template-columns:max-content 1fr;gap:2px 12px;margin:0;font-size:13px}
dl.meta dt{color:var(--muted)}dl.meta dd{margin:0;word-break:break-all}
.toolbar{position:sticky;top:0;z-index:2;display:flex;gap:12px;align-items:center;padding:8px 24px;
background:var(--bg);border-bottom:1px solid var(--line);flex-wrap:wrap}
.toolbar input[type=search]{flex:1;min-width:200px;padding:5px 8px;border:1px solid var(--line);
border-radius:6px;background:var(--bg);color:var(--fg)}
.toolbar button{padding:4px 10px;border:1px solid var(--line);border-radius:6px;background:var(--soft);color:var(--fg);cursor:pointer}
#match-count{color:var(--muted);font-size:12px}
main{max-width:1100px;margin:0 auto;padding:8px 24px 48px}
body:has(#show-internals:not(:checked)) .internal{display:none}
section.turn{border:1px solid var(--line);border-radius:8px;margin:16px 0;overflow:hidden}
section.turn>header{display:flex;gap:12px;align-items:baseline;padding:6px 12px;background:var(--soft);border-bottom:1px solid var(--line)}
section.turn>header h2{margin:0;font-size:15px}
.between{margin:12px 0}
.time,.seq{color:var(--muted);font-size:12px;font-family:ui-monospace,SFMono-Regular,Menlo,monospace}
a.seq{text-decoration:none}a.seq:hover{text-decoration:underline}
.item{padding:8px 12px;border-top:1px solid var(--soft);position:relative}
.item>.where{float:right;margin-left:8px}
.prompt{background:var(--user)}
.prompt .text{white-space:pre-wrap;word-break:break-word}
.label{display:inline-block;font-size:11px;font-weight:600;text-transform:uppercase;letter-spacing:.04em;color:var(--muted);margin-right:6px}
.message .md{overflow-wrap:anywhere}
.md pre,.pre{background:var(--soft);border:1px solid var(--line);border-radius:6px;padding:8px;overflow:auto;
font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre-wrap;word-break:break-word;margin:6px 0}
.md code{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:12.5px}
.md table{border-collapse:collapse}.md td,.md th{border:1px solid var(--line);padding:3px 8px}
.md a.refused-link{color:var(--muted);text-decoration:line-through dotted}
.kw{color:#cf222e}.st{color:#0a3069}.cm{color:var(--muted);font-style:italic}.nu{color:#0550ae}
@media (prefers-color-scheme:dark){.kw{color:#ff7b72}.st{color:#a5d6ff}.nu{color:#79c0ff}}
details>summary{cursor:pointer;color:var(--muted)}
.thought{color:var(--muted)}
.tool{border-left:3px solid var(--line)}
.tool.completed{border-left-color:var(--addfg)}.tool.failed,.tool.cancelled{border-left-color:var(--err)}
.tool .head{font-weight:600}
.badge{display:inline-block;padding:0 6px;border-radius:10px;font-size:11px;border:1px solid var(--line);color:var(--muted);margin-left:4px;font-weight:400}
.badge.completed{color:var(--addfg);border-color:var(--addfg)}.badge.failed,.badge.cancelled{color:var(--err);border-color:var(--err)}
.badge.in_progress,.badge.pending{color:var(--warn);border-color:var(--warn)}
.locations{font-size:12px;color:var(--muted);font-family:ui-monospace,monospace}
.diff{border:1px solid var(--line);border-radius:6px;margin:6px 0;overflow:auto;font:12px/1.45 ui-monospace,SFMono-Regular,Menlo,monospace}
.diff .file{padding:4px 8px;background:var(--soft);border-bottom:1px solid var(--line);font-weight:600}
.diff .l{white-space:pre-wrap;word-break:break-word;padding:0 8px}
.dh{background:var(--soft);color:var(--accent);display:block}.da{background:var(--add);color:var(--addfg);display:block}.dr{background:var(--del);color:var(--delfg);display:block}
.terminal .pre{background:#0d1117;color:#e6edf3;border-color:#30363d}
.permission{font-size:13px}
.permission .answer.approved,.permission .answer.allowed{color:var(--addfg);font-weight:600}
.permission .answer.denied,.permission .answer.rejected,.permission .answer.cancelled{color:var(--err);font-weight:600}
.plan ul{list-style:none;padding-left:4px;margin:4px 0}
.plan li.completed{color:var(--muted);text-decoration:line-through}
.plan li.in_progress{font-weight:600}
.note{font-size:13px}
.note.change .label{color:var(--chg)}.note.warning{background:var(--warnbg)}.note.warning .label{color:var(--warn)}
.note.error{background:var(--errbg)}.note.error .label{color:var(--err)}
.end{background:var(--soft);font-size:13px;display:flex;gap:16px;flex-wrap:wrap}
.end.failed{background:var(--errbg)}
.end .reason{font-weight:600}
.usage{color:var(--muted)}
#summary table{border-collapse:collapse;font-size:13px;margin:0}
#summary td,#summary th{padding:2px 12px 2px 0;text-align:left}
#summary th{color:var(--muted);font-weight:400}
.more{color:var(--muted);font-size:12px}
.hidden-by-search{display:none!important}
:target{outline:2px solid var(--accent);outline-offset:-2px}
"#;

/// The script: search (hides the items whose text does not match, opens the collapsed parts
/// that do), expand and collapse all, and the totals moved from the end of the page to its
/// top. It reads the page's text only and writes no markup.
pub const SCRIPT: &str = r#"
(function(){
var q=document.getElementById('search'),n=document.getElementById('match-count');
var items=Array.prototype.slice.call(document.querySelectorAll('.item'));
var turns=Array.prototype.slice.call(document.querySelectorAll('section.turn,div.between'));
var t=null;
function run(){var s=q.value.trim().toLowerCase(),hits=0;
items.forEach(function(el){var ok=!s||el.textContent.toLowerCase().indexOf(s)>=0;
el.classList.toggle('hidden-by-search',!ok);if(ok&&s){hits++;
Array.prototype.forEach.call(el.querySelectorAll('details'),function(d){
if(d.textContent.toLowerCase().indexOf(s)>=0)d.open=true;});}});
turns.forEach(function(sec){var any=!s||sec.querySelector('.item:not(.hidden-by-search)');
sec.classList.toggle('hidden-by-search',!any);});
n.textContent=s?hits+' matching':'';}
q.addEventListener('input',function(){clearTimeout(t);t=setTimeout(run,120);});
function all(open){Array.prototype.forEach.call(document.querySelectorAll('main details'),function(d){d.open=open;});}
document.getElementById('expand').addEventListener('click',function(){all(true);});
document.getElementById('collapse').addEventListener('click',function(){all(false);});
var sum=document.getElementById('summary'),slot=document.getElementById('summary-slot');
if(sum&&slot){slot.appendChild(sum);}
})();
"#;

/// `'sha256-…'` of `text`, as a CSP source.
fn csp_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The Content-Security-Policy of the page.
pub fn policy() -> String {
    format!(
        "default-src 'none'; style-src {}; script-src {}; img-src 'none'; font-src 'none'; \
         connect-src 'none'; frame-src 'none'; object-src 'none'; base-uri 'none'; \
         form-action 'none'",
        csp_hash(STYLE),
        csp_hash(SCRIPT)
    )
}

/// The page up to the start of `<main>`: head, session header, toolbar. `title` and the
/// `meta` pairs are recorded text and are escaped here.
pub fn push_head(out: &mut String, title: &str, meta: &[(&str, String)]) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"");
    out.push_str(&policy());
    out.push_str("\">\n<meta name=\"referrer\" content=\"no-referrer\">\n");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"generator\" content=\"acpx sessions export --as html\">\n<title>");
    push_escaped(out, title);
    out.push_str(" · acpx session</title>\n<style>");
    out.push_str(STYLE);
    out.push_str("</style>\n</head>\n<body>\n<header class=\"session\">\n<h1>");
    push_escaped(out, title);
    out.push_str("</h1>\n<dl class=\"meta\">\n");
    for (k, v) in meta {
        out.push_str("<dt>");
        push_escaped(out, k);
        out.push_str("</dt><dd>");
        push_escaped(out, v);
        out.push_str("</dd>\n");
    }
    out.push_str("</dl>\n<div id=\"summary-slot\"></div>\n</header>\n");
    out.push_str(
        "<div class=\"toolbar\">\
         <input type=\"search\" id=\"search\" placeholder=\"Search this session\" \
         aria-label=\"Search this session\">\
         <span id=\"match-count\"></span>\
         <label><input type=\"checkbox\" id=\"show-internals\"> acpx internals</label>\
         <button type=\"button\" id=\"expand\">Expand all</button>\
         <button type=\"button\" id=\"collapse\">Collapse all</button>\
         </div>\n<main>\n",
    );
}

/// The end of the page, from the end of `<main>`.
pub fn push_tail(out: &mut String) {
    out.push_str("</main>\n<script>");
    out.push_str(SCRIPT);
    out.push_str("</script>\n</body>\n</html>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_names_the_page_s_own_script_and_style_only() {
        let p = policy();
        assert!(
            p.starts_with("default-src 'none'; style-src 'sha256-"),
            "{p}"
        );
        assert!(!p.contains("unsafe"), "{p}");
        assert!(p.contains(&csp_hash(SCRIPT)));
    }

    #[test]
    fn the_head_escapes_what_it_is_given() {
        let mut out = String::new();
        push_head(
            &mut out,
            "<script>x</script>",
            &[("cwd", "\"><img src=x>".into())],
        );
        assert!(!out.contains("<script>x"));
        assert!(!out.contains("<img"));
    }
}
