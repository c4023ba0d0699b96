//! Developer tasks. `cargo xtask bench store [--backend memory|fs|sqlite|postgres|all] [--quick]`,
//! `cargo xtask bench owner [--backend fs|sqlite] [--acpx PATH] [--runs N] [--stream-runs N] [--memory-turns N] [--memory-chunks C | --memory-tools B] [--memory-pause-ms N] [--node PATH [--node-runs N]]`,
//! `cargo xtask bench open [--backend fs|sqlite] [--turns N] [--tools B] [--calls K] [--runs N]
//! [--commands] [--acpx PATH]…`, `cargo xtask bench turn|session …`, `cargo xtask bench import [--quick]`,
//! `cargo xtask bench migrate [--sessions N] [--dir DIR] [--acpx PATH]`,
//! `cargo xtask torture [--quick] [--store fs|sqlite|all] [--kills N] [--seed N] [--acpx PATH]
//! [--strict]`.
//!
//! The `xtask` alias (in `.cargo/config.toml`) builds this crate in release mode.

mod bench;
mod bench_hosts;
mod bench_import;
mod bench_migrate;
mod bench_open;
mod bench_owner;
mod bench_proc;
mod bench_turn;
mod tidy;
mod tidy_structure;
mod torture;

use std::process::ExitCode;

const USAGE: &str =
    "usage: cargo xtask bench store [--backend memory|fs|sqlite|postgres|all] [--quick] [--dir DIR]
                               [--only append,save,flat,many,tail] [--keep]
       cargo xtask bench owner [--backend fs|sqlite] [--acpx PATH] [--runs N] [--stream-runs N] [--memory-turns N] [--memory-chunks C | --memory-tools B] [--memory-pause-ms N] [--node PATH [--node-runs N]]
       cargo xtask bench hosts [--url URL] [--runs N] [--cancel-runs N] [--takeover-runs N]
       cargo xtask bench open [--backend fs|sqlite] [--turns N] [--tools B] [--calls K] [--runs N] [--commands] [--acpx PATH]..
       cargo xtask bench turn [--backend B[,B..]|all] [--owner] [--thoughts | --tools B] [--chunks N,N,..] [--runs N]
                              [--large-runs N] [--dir DIR] [--acpx PATH]
       cargo xtask bench session [--backend B[,B..]|all] [--owner] [--thoughts] [--chunks N] [--prefill N]
                                 [--runs N] [--instructions N] [--dir DIR] [--acpx PATH]
       cargo xtask bench import [--quick] [--sessions N] [--turns N] [--chunks N] [--dir DIR]
       cargo xtask bench migrate [--sessions N] [--dir DIR] [--acpx PATH]
       cargo xtask torture [--quick] [--store fs|sqlite|all] [--kills N] [--seed N] [--acpx PATH]
                           [--strict]

  bench store   append throughput (batches of 1 and 64; durability none, flush, fsync; ~300-byte
                events), snapshot save time (10 / 1,000 / 10,000 messages), per-event append cost
                at 1,000 vs 100,000 events already stored, list and search time for 10,000
                sessions (\"many\"), and the time to read the last 1,000 events of a
                1,000,000-event session.
  --only S,..   run only these sections (append, save, flat, many, tail)
  --keep        leave the stores written in place and print where (to inspect or time them)
  --quick       smaller counts, for a smoke run (figures are not comparable with a full run)
  --dir DIR     where the stores are created (default: a temporary directory on /tmp's disk)
  --backend postgres  (or --store postgres; not part of `all`) on the server of ACPX_STORE_URL,
                in scratch schemas dropped at the end

  bench hosts   one session from two hosts (two homes, one PostgreSQL schema on --url, default
                ACPX_TEST_POSTGRES_URL): a warm prompt from host B through host A's owner vs from
                A (target: B's median <= A's + 50 ms), cancel from B to the end of A's turn
                (target <= 1 s), and B's takeover after A's owner is killed or frozen (target
                <= the lease TTL + 5 s)
  bench owner   builds the release acpx, then times whole invocations against the scripted
                agent: warm second prompt through the session's queue owner (overhead = wall
                minus the agent's turn; median and p90 of --runs, default 30; target <= 15 ms),
                and a 10,000-chunk streamed prompt through the owner vs --no-owner, alternating
                (--stream-runs each, default 5; ratio of medians; target <= 1.05); then the
                owner's memory and CPU a turn over --memory-turns turns (default 100) of
                `stream C` or `tools B`, --memory-pause-ms apart (default 0); --backend picks
                the store, --acpx PATH runs that binary instead of building one
  --node PATH   also time warm prompts of Node acpx 0.19.1 (its bin/acpx; `npm install
                acpx@0.19.1`) against ours, alternating, --node-runs each (default 10);
                ratio of median wall times; target <= 0.1

  bench open    a queue owner opening a long session: --turns turns (default 30) of `tools B K`
                (--tools, --calls; default 4000 and 20: an 11 MB session.json) and a one-turn
                session, written with --no-owner; then --runs rounds (default 3) of a new owner
                opening a copy of each, for each --acpx build (repeatable; default: a release
                build of the tree): its first prompt's wall time and its VmHWM, VmRSS and
                RssAnon after one and two prompts; the peak above the one-turn session's
                --commands: instead, the peak RSS (wait4's ru_maxrss) of status, show,
                history, export, fsck and a --no-owner prompt on a copy of each session

  bench turn    builds the release acpx, then streams prompts of 10k, 100k and 1M chunks
                (--chunks) with --no-owner on each backend, alternating: wall time, cost per
                chunk, peak RSS of the acpx process (VmHWM from /proc), store bytes per chunk
  bench session gives a session one --prefill-chunk prompt (default 1M), then times 10k-chunk
                prompts on it and on new sessions, alternating: ratio of medians (wall, RSS)
                and of mean CPU; --instructions N runs N more pairs under valgrind's callgrind
                and gives the ratio of their instruction counts (steady under load)
  --backend B   fs, sqlite, postgres, comma-separated (all = fs,sqlite); postgres uses the
                server of ACPX_STORE_URL (or ACPX_TEST_POSTGRES_URL) in a scratch schema
  --owner       through the session's warm queue owner instead of --no-owner (RSS: the client's)
  --thoughts    the agent streams its reasoning (agent_thought_chunk) instead of its reply
  --tools B     each of the N is a round of two tool calls with B more bytes (a coding agent)
  --dir DIR     where the homes are created (default: the temporary directory); deleted after
  --acpx PATH   measure this acpx binary instead of building the release one

  bench import  `sessions import --from-node-acpx` of a synthetic Node home (default 40
                sessions x 10 turns x 250 chunks) into the file store; events/s over the whole
                import (target >= 50,000)

  bench migrate builds the release acpx, makes one real session and copies it to N (default
                10,000), then times `migrate --to sqlite` and back `--to fs`: sessions/s
                (target >= 2,000) and the lock files left (target: none)

  torture       builds acpx (debug) and runs real processes: SIGKILL during streamed prompts,
                concurrent prompts, a full disk (tmpfs), closed stdout, damaged files,
                misbehaving agents; prints tried / lost / panics / failures per scenario and
                exits 1 when anything was lost or panicked (--strict: also on failures)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("bench") if args.get(1).map(String::as_str) == Some("owner") => {
            match bench_owner::Options::parse(&args[2..]) {
                Ok(opts) => match bench_owner::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("xtask bench owner: {e}");
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("xtask bench owner: {e}\n\n{USAGE}");
                    ExitCode::from(2)
                }
            }
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("hosts") => {
            match bench_hosts::Options::parse(&args[2..]) {
                Ok(opts) => match bench_hosts::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("xtask bench hosts: {e}");
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("xtask bench hosts: {e}\n\n{USAGE}");
                    ExitCode::from(2)
                }
            }
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("open") => {
            match bench_open::Options::parse(&args[2..]) {
                Ok(opts) => match bench_open::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("xtask bench open: {e}");
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("xtask bench open: {e}\n\n{USAGE}");
                    ExitCode::from(2)
                }
            }
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("migrate") => {
            match bench_migrate::Options::parse(&args[2..]) {
                Ok(opts) => match bench_migrate::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("xtask bench migrate: {e}");
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("xtask bench migrate: {e}\n\n{USAGE}");
                    ExitCode::from(2)
                }
            }
        }
        Some("bench") if args.get(1).map(String::as_str) == Some("import") => {
            match bench_import::Options::parse(&args[2..]) {
                Ok(opts) => match bench_import::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("xtask bench import: {e}");
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("xtask bench import: {e}\n\n{USAGE}");
                    ExitCode::from(2)
                }
            }
        }
        Some("bench")
            if matches!(
                args.get(1).map(String::as_str),
                Some("turn") | Some("session")
            ) =>
        {
            match bench_turn::Options::parse(&args[1], &args[2..]) {
                Ok(opts) => match bench_turn::run(&opts) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("xtask bench {}: {e}", args[1]);
                        ExitCode::FAILURE
                    }
                },
                Err(e) => {
                    eprintln!("xtask bench {}: {e}\n\n{USAGE}", args[1]);
                    ExitCode::from(2)
                }
            }
        }
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
        Some("torture") => match torture::Plan::parse(&args[1..]) {
            Ok(plan) => match torture::run(&plan) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::FAILURE,
                Err(e) => {
                    eprintln!("xtask torture: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("xtask torture: {e}\n\n{USAGE}");
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
