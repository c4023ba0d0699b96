//! Running `acpx` at a terminal a test types into: a pseudo-terminal from script(1), whose
//! stdin the test writes (the keys) and whose stdout it reads (the screen: acpx's stderr and
//! stdout as the terminal shows them, typed keys echoed).

use std::io::{Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{acpx_bin, Env};

/// One `acpx` command on a pseudo-terminal.
pub struct Terminal {
    child: Child,
    keys: Option<ChildStdin>,
    screen: Arc<Mutex<String>>,
    /// How much of the screen [`Terminal::expect`] has looked past.
    seen: usize,
}

/// A word for sh, in single quotes.
fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

impl Terminal {
    /// Starts `acpx --home … --store … args…` in `env`'s project on a new pseudo-terminal.
    pub fn start(env: &Env, args: &[&str]) -> Terminal {
        // `exec`, so script's child is acpx itself whatever shell runs the line: dash (the
        // `/bin/sh` script(1) falls back to without `$SHELL`) would otherwise stay between
        // them, and a signal sent to "acpx" would reach only the shell.
        let mut line = vec![
            "exec".into(),
            quoted(&acpx_bin().to_string_lossy()),
            "--home".into(),
            quoted(&env.home().to_string_lossy()),
            "--store".into(),
            env.backend.to_owned(),
        ];
        line.extend(args.iter().map(|a| quoted(a)));
        let mut child = Command::new("script")
            .arg("-qec")
            .arg(line.join(" "))
            .arg("/dev/null")
            .current_dir(env.cwd())
            .env("NO_COLOR", "1")
            .env("SHELL", "/bin/sh")
            .env_remove("ACPX_HOME")
            .env_remove("ACPX_STORE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1) runs (util-linux)");
        let mut out = child.stdout.take().unwrap();
        let screen = Arc::new(Mutex::new(String::new()));
        let filling = screen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = out.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let text = String::from_utf8_lossy(&buf[..n]).replace('\r', "");
                filling.lock().unwrap().push_str(&text);
            }
        });
        Terminal {
            keys: child.stdin.take(),
            child,
            screen,
            seen: 0,
        }
    }

    /// Waits until the screen shows `text` after what was expected before.
    pub fn expect(&mut self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let screen = self.screen.lock().unwrap().clone();
            if let Some(at) = screen[self.seen.min(screen.len())..].find(text) {
                self.seen += at + text.len();
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the terminal never showed {text:?}; it shows:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Types `keys` (a line ends with `\n`; Ctrl-D is `\x04`).
    pub fn type_keys(&mut self, keys: &str) {
        let k = self.keys.as_mut().expect("the keyboard is open");
        k.write_all(keys.as_bytes()).unwrap();
        k.flush().unwrap();
    }

    /// The pid of the `acpx` process (script's child).
    pub fn acpx_pid(&self) -> u64 {
        let children = format!("/proc/{0}/task/{0}/children", self.child.id());
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&children).unwrap_or_default();
            if let Some(pid) = text.split_whitespace().next() {
                let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
                // Until the shell has exec'd, the child is the shell.
                if comm.trim() == "acpx" {
                    return pid.parse().unwrap();
                }
            }
            assert!(Instant::now() < deadline, "script(1) started no acpx");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the command to end: its exit code (script's, which is acpx's) and the whole
    /// screen.
    pub fn finish(mut self) -> (i32, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            assert!(
                Instant::now() < deadline,
                "the command did not end; the terminal shows:\n{}",
                self.screen.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        drop(self.keys.take());
        // The reading thread has the rest shortly after the end.
        std::thread::sleep(Duration::from_millis(100));
        let screen = self.screen.lock().unwrap().clone();
        (super::process::exit_code(status), screen)
    }
}
