//! Developer tasks. `cargo xtask bench store [--backend memory|fs|sqlite|all] [--quick]`.
//!
//! The `xtask` alias (in `.cargo/config.toml`) builds this crate in release mode.

mod bench;
mod tidy;

use std::process::ExitCode;

const USAGE: &str =
    "usage: cargo xtask bench store [--backend memory|fs|sqlite|all] [--quick] [--dir DIR]

  bench store   append throughput (batches of 1 and 64; durability none, flush, fsync; ~300-byte
                events), snapshot save time (10 / 1,000 / 10,000 messages), per-event append cost
                at 1,000 vs 100,000 events already stored, list time for 10,000 sessions, and the
                time to read the last 1,000 events of a 1,000,000-event session.
  --quick       smaller counts, for a smoke run (figures are not comparable with a full run)
  --dir DIR     where the stores are created (default: a temporary directory on /tmp's disk)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench") => match bench::Options::parse(&args[1..]) {
            Ok(opts) => match bench::run(&opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("xtask bench: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("xtask bench: {e}\n\n{USAGE}");
                ExitCode::from(2)
            }
        },
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
