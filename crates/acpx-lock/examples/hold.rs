//! Holds an exclusive lock on a file for a while, to watch two processes take turns:
//!
//! ```sh
//! cargo run -p acpx-lock --example hold -- /tmp/demo.lock 5 &
//! cargo run -p acpx-lock --example hold -- /tmp/demo.lock 1   # waits for the first
//! ```
//!
//! Kill the first with `kill -9` instead of waiting: the kernel releases its lock, and the
//! second takes it at once; nothing is left behind to clean up.

use std::time::{Duration, Instant};

use acpx_lock::FileLock;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(secs)) = (args.next(), args.next()) else {
        eprintln!("usage: hold LOCK_FILE SECONDS");
        std::process::exit(2);
    };
    let Ok(secs) = secs.parse::<u64>() else {
        eprintln!("hold: SECONDS must be a whole number, not {secs:?}");
        std::process::exit(2);
    };
    let pid = std::process::id();
    let held = match FileLock::try_exclusive(path.as_ref()) {
        Ok(Some(held)) => held,
        Ok(None) => {
            println!("[{pid}] {path} is held by another process; waiting up to 60 s");
            let asked = Instant::now();
            match FileLock::exclusive(path.as_ref(), Duration::from_secs(60)) {
                Ok(held) => {
                    println!(
                        "[{pid}] got it after {:.1} s",
                        asked.elapsed().as_secs_f64()
                    );
                    held
                }
                Err(e) => fail(&path, e),
            }
        }
        Err(e) => fail(&path, e),
    };
    println!("[{pid}] holding {} for {secs} s", held.path().display());
    std::thread::sleep(Duration::from_secs(secs));
    println!("[{pid}] done");
}

fn fail(path: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("hold: {path}: {e}");
    std::process::exit(1);
}
