//! The lock excludes another process, and the kernel releases it when the holder dies.

use std::process::{Command, Stdio};
use std::time::Duration;

use acpx_lock::FileLock;

/// Re-run of this test binary that holds the lock named by `$ACPX_LOCK_HOLD` until killed.
#[test]
fn hold_lock_child() {
    let Some(path) = std::env::var_os("ACPX_LOCK_HOLD") else {
        return;
    };
    let _lock = FileLock::exclusive(path.as_ref(), Duration::from_secs(10)).unwrap();
    println!("held");
    std::thread::sleep(Duration::from_secs(60));
}

#[test]
fn another_process_holds_it_until_it_dies() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.lock");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "cross_process::hold_lock_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("ACPX_LOCK_HOLD", &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("held") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "child exited early");
    }
    assert!(FileLock::try_exclusive(&path).unwrap().is_none());
    assert!(matches!(
        FileLock::exclusive(&path, Duration::from_millis(20)),
        Err(acpx_lock::LockError::TimedOut { .. })
    ));
    child.kill().unwrap();
    child.wait().unwrap();
    // Killed without any cleanup: the kernel released the lock.
    assert!(FileLock::exclusive(&path, Duration::from_secs(5)).is_ok());
}
