//! Exports a session from its files: `cargo run -p acpx-interchange --example from_log --
//! atif|otlp SESSION.json EVENTS.ndjson` prints the trajectory or the trace on stdout (a
//! file-store session lives in `~/.acpx/sessions/<id>.json`; `acpx sessions export --as
//! ndjson` prints its log).

use std::io::{BufRead, Write};

use acpx_interchange::{Export, Format};
use acpx_model::{EventEnvelope, SessionRecord};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [format, session, events] = args.as_slice() else {
        return Err("usage: from_log atif|otlp SESSION.json EVENTS.ndjson".into());
    };
    let format = match format.as_str() {
        "atif" => Format::Atif,
        "otlp" => Format::Otlp,
        other => return Err(format!("unknown format {other:?}: atif or otlp").into()),
    };
    let record: SessionRecord = serde_json::from_slice(&std::fs::read(session)?)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut export = Export::new(format, &record);
    for line in std::io::BufReader::new(std::fs::File::open(events)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let e: EventEnvelope = serde_json::from_str(&line)?;
        export.push(&e, &mut out)?;
    }
    export.finish(&mut out)?;
    out.flush()?;
    Ok(())
}
