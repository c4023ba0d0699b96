//! Renders an event log (`<id>.events.ndjson`, or any NDJSON of acpx event envelopes) as the
//! self-contained HTML viewer, reading one line at a time, so a log of any length is never
//! in memory:
//!
//! ```sh
//! cargo run -p acpx-render --example ndjson_to_html -- ~/.acpx/sessions/<id>.events.ndjson > session.html
//! ```
//!
//! A line that is not an event envelope (a torn last line, say) is reported and skipped.

use std::io::{BufRead, BufReader, BufWriter, Write};

use acpx_model::EventEnvelope;
use acpx_render::html::HtmlExport;

fn main() {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: ndjson_to_html EVENTS.ndjson > page.html");
        std::process::exit(2);
    };
    if let Err(e) = run(&path) {
        eprintln!("ndjson_to_html: {path}: {e}");
        std::process::exit(1);
    }
}

fn run(path: &str) -> std::io::Result<()> {
    let input = BufReader::new(std::fs::File::open(path)?);
    let out = BufWriter::new(std::io::stdout().lock());
    let mut page = HtmlExport::begin(out, path, &[("source", path.to_owned())])?;
    for (n, line) in input.split(b'\n').enumerate() {
        let line = line?;
        if line.is_empty() {
            continue;
        }
        match EventEnvelope::from_ndjson_line(&line) {
            Ok(event) => page.event(&event)?,
            Err(e) => eprintln!("ndjson_to_html: {path}:{}: skipped: {e}", n + 1),
        }
    }
    page.finish()?.flush()
}
