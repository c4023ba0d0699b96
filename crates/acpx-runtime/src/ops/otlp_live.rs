//! The live OpenTelemetry export: after a turn, its spans (`acpx_interchange::otlp`) sent to
//! an OTLP/HTTP endpoint as JSON (`POST …/v1/traces`, `Content-Type: application/json`).
//!
//! Where: the client that asked for the turn sends it once the turn is over, reading the
//! turn's events back from the store: for a turn the queue owner ran, the owner has written
//! them all by the time it answers. The export is best effort: it never fails the turn; the
//! caller warns once when it fails.
//!
//! Which endpoint (the OpenTelemetry exporter variables' rules): `--otlp-endpoint URL`, else
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` used as it is, else `OTEL_EXPORTER_OTLP_ENDPOINT` with
//! `/v1/traces` appended (so is the flag's URL, unless it already ends with `/v1/traces`).
//! `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (`k=v,k2=v2`, values
//! percent-decoded) are sent; `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` / `OTEL_EXPORTER_OTLP_TIMEOUT`
//! (milliseconds) bound the whole exchange, 3 seconds when unset: name resolution runs on a
//! thread of its own that is given up on at the deadline, and the request is written in
//! chunks, each write bounded by the time left, so a slow resolver or a collector that reads
//! slowly cannot keep `prompt` from exiting.
//!
//! The URL must not hold a space or a control character (a CR LF in it would add a header
//! to the request): such a URL is refused, naming the flag or variable it came from. A
//! `#fragment` is not part of what is sent.
//!
//! The client is a minimal HTTP/1.1 POST over `std::net::TcpStream`, `http://` only (an
//! `https://` endpoint is refused with a clear error): no HTTP or TLS crate in the binary for
//! an optional export, whose usual receiver is a collector on the same host or network
//! (`http://127.0.0.1:4318`). A collector in front of a TLS backend forwards it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use acpx_model::{RecordId, Store};

use super::transfer::for_each_page;

/// The default bound on one export (connect, send, read the answer).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// Where and how to send a turn's spans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpTarget {
    /// The whole URL, as shown in messages.
    pub url: String,
    host: String,
    port: u16,
    path: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
}

impl OtlpTarget {
    /// The target from the flag's value and the environment (`env` reads one variable);
    /// `Ok(None)` when neither names an endpoint. An endpoint that is not an `http://` URL
    /// is an error that says so.
    pub fn resolve(
        flag: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, String> {
        let var = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let (source, given, url) = match (flag, var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(f), _) => ("--otlp-endpoint", f.to_owned(), with_traces_path(f.trim())),
            (None, Some(t)) => (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                t.clone(),
                without_fragment(t.trim()).to_owned(),
            ),
            (None, None) => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => (
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    base.clone(),
                    with_traces_path(base.trim()),
                ),
                None => return Ok(None),
            },
        };
        if let Some(b) = given.trim().bytes().find(|b| *b <= 0x20 || *b == 0x7f) {
            return Err(format!(
                "{source}: the OTLP endpoint {given:?} holds a space or control character \
                 (byte 0x{b:02x}); a URL must not"
            ));
        }
        let (host, port, path) = parse_http_url(&url).map_err(|e| format!("{source}: {e}"))?;
        let mut headers = Vec::new();
        for key in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            if let Some(list) = var(key) {
                for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
                    let (k, v) = pair
                        .split_once('=')
                        .ok_or_else(|| format!("{key}: {pair:?} is not key=value"))?;
                    let (k, v) = (k.trim().to_owned(), percent_decode(v.trim()));
                    if k.is_empty() || k.contains(['\r', '\n', ':']) || v.contains(['\r', '\n']) {
                        return Err(format!("{key}: {pair:?} is not a valid header"));
                    }
                    headers.retain(|(old, _): &(String, String)| !old.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }
        let timeout = match var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        {
            Some(ms) => match ms.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => {
                    return Err(format!(
                    "OTEL_EXPORTER_OTLP_TIMEOUT: {ms:?} is not a number of milliseconds above 0"
                ))
                }
            },
            None => DEFAULT_TIMEOUT,
        };
        Ok(Some(Self {
            url,
            host,
            port,
            path,
            headers,
            timeout,
        }))
    }
}

/// `url` without its `#fragment`, which is never sent to a server.
fn without_fragment(url: &str) -> &str {
    url.split_once('#').map_or(url, |(before, _)| before)
}

/// A base endpoint (its fragment dropped) with the traces path (`…/v1/traces`) appended,
/// unless it has it.
fn with_traces_path(base: &str) -> String {
    let base = without_fragment(base).trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// `http://host[:port][/path]` → (host, port, path); IPv6 hosts in brackets.
fn parse_http_url(url: &str) -> Result<(String, u16, String), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(if url.starts_with("https://") {
            format!(
                "OTLP endpoint {url}: https is not supported; acpx sends OTLP/HTTP JSON over \
                 plain http (point it at an OpenTelemetry Collector, e.g. http://127.0.0.1:4318, \
                 which can forward over TLS)"
            )
        } else {
            format!("OTLP endpoint {url:?} is not an http:// URL")
        });
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let bad = || format!("OTLP endpoint {url:?}: cannot read its host and port");
    if authority.contains('@') {
        return Err(format!(
            "OTLP endpoint {url:?}: credentials in the URL are not supported (use \
             OTEL_EXPORTER_OTLP_HEADERS)"
        ));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or_else(bad)?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| bad())?,
        None => 80,
    };
    Ok((host.to_owned(), port, path.to_owned()))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a command's finished turn sends its spans: `flag` (`--otlp-endpoint`) else the
/// OTEL variables `env` reads ([`OtlpTarget::resolve`]), with the warning to give when a
/// variable names an endpoint acpx cannot use. A bad flag is an error (`Err`, a usage
/// error); a bad variable only a warning, since the environment may be set for other
/// programs: what is wrong, that the turn is not exported, and how to silence it, since it
/// comes at every prompt while the variable is set.
pub fn turn_target(
    flag: Option<&str>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<(Option<OtlpTarget>, Option<String>), String> {
    match OtlpTarget::resolve(flag, env) {
        Ok(t) => Ok((t, None)),
        Err(e) if flag.is_some() => Err(e),
        Err(e) => {
            // `e` starts with the variable's name.
            let var = e
                .split_once(':')
                .map(|(v, _)| v)
                .filter(|v| v.starts_with("OTEL_"))
                .unwrap_or("the OTEL_EXPORTER_OTLP_* variable");
            let warning = format!(
                "{e}; the turn is not exported (unset {var}, or point it at an http:// \
                 OpenTelemetry Collector, to silence this warning)"
            );
            Ok((None, Some(warning)))
        }
    }
}

/// Sends a finished turn's spans (turn `request_id` of session `id`) to `target`, if there
/// is one and the turn has a request id; a failure is the warning to give, never the turn's
/// failure.
pub async fn export_finished_turn(
    store: &dyn Store,
    id: &RecordId,
    request_id: &str,
    target: Option<&OtlpTarget>,
) -> Option<String> {
    let target = target.filter(|_| !request_id.is_empty())?;
    let sent = export_turn(store, id, request_id, target).await;
    sent.err()
        .map(|e| format!("the turn's OpenTelemetry export failed: {e}"))
}

/// Sends the spans of turn `request_id` of session `id` to `target`; returns how many bytes
/// were sent. Errors are sentences for a warning.
pub async fn export_turn(
    store: &dyn Store,
    id: &RecordId,
    request_id: &str,
    target: &OtlpTarget,
) -> Result<usize, String> {
    let record = store
        .load(id)
        .await
        .map_err(|e| format!("cannot read the session: {e}"))?;
    let mut trace = acpx_interchange::TurnTrace::new(record, request_id);
    for_each_page::<acpx_model::StoreError>(store, id, acpx_model::ReadMode::Lenient, |page| {
        for e in page {
            trace.push(e);
        }
        Ok(())
    })
    .await
    .map_err(|e| format!("cannot read the session's log: {e}"))?;
    let body = trace
        .finish()
        .ok_or_else(|| format!("turn {request_id} is not in the session's log"))?;
    let target = target.clone();
    let n = body.len();
    tokio::task::spawn_blocking(move || post(&target, &body))
        .await
        .map_err(|e| format!("the export task failed: {e}"))??;
    Ok(n)
}

/// One HTTP/1.1 POST of `body`; `Ok` on a 2xx answer.
fn post(t: &OtlpTarget, body: &[u8]) -> Result<(), String> {
    let deadline = Instant::now() + t.timeout;
    let left = || {
        deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    };
    let fail = |what: &str, e: std::io::Error| format!("{what} {}: {e}", t.url);
    let (host, port) = (t.host.clone(), t.port);
    let addrs = resolve_within(
        move || {
            (host.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect)
        },
        left(),
    )
    .map_err(|e| fail("cannot resolve", e))?;
    let mut last = None;
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, left()) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut s = stream.ok_or_else(|| {
        fail(
            "cannot connect to",
            last.unwrap_or_else(|| std::io::Error::other("no address")),
        )
    })?;
    let host = if t.host.contains(':') {
        format!("[{}]:{}", t.host, t.port)
    } else {
        format!("{}:{}", t.host, t.port)
    };
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: acpx/{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        t.path,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    for (k, v) in &t.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    for part in [head.as_bytes(), body] {
        write_before(&mut s, part, deadline).map_err(|e| fail("cannot send to", e))?;
    }
    // The status line is all that is needed; read until it is whole (bounded).
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") && answer.len() < 8192 {
        if Instant::now() >= deadline {
            return Err(fail("no answer from", timed_out("the answer")));
        }
        s.set_read_timeout(Some(left()))
            .map_err(|e| fail("no answer from", e))?;
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) => return Err(fail("no answer from", e)),
        }
    }
    let line = String::from_utf8_lossy(&answer);
    let line = line.lines().next().unwrap_or("").trim().to_owned();
    let code = line
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok());
    match code {
        Some(c) if (200..300).contains(&c) => Ok(()),
        Some(_) => Err(format!("{} answered {line:?}", t.url)),
        None => Err(format!("{} did not answer HTTP ({line:?})", t.url)),
    }
}

/// How much one write may hand the kernel: small enough that the deadline is checked often.
const WRITE_CHUNK: usize = 16 * 1024;

/// Writes all of `data` to `s` before `deadline`: in chunks, each write bounded by the time
/// left (a socket's write timeout bounds one system call, not the whole of `write_all`).
fn write_before(s: &mut TcpStream, data: &[u8], deadline: Instant) -> std::io::Result<()> {
    let mut sent = 0;
    while sent < data.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out("the request"));
        }
        s.set_write_timeout(Some(left))?;
        let end = data.len().min(sent + WRITE_CHUNK);
        match s.write(&data[sent..end]) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    s.flush()
}

/// `resolve` (a name lookup, which the standard library cannot bound) run on a thread of its
/// own, waited for at most `timeout`; a lookup still running then is left to finish alone.
fn resolve_within(
    resolve: impl FnOnce() -> std::io::Result<Vec<SocketAddr>> + Send + 'static,
    timeout: Duration,
) -> std::io::Result<Vec<SocketAddr>> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("acpx-otlp-resolve".into())
        .spawn(move || {
            let _ = tx.send(resolve());
        })?;
    rx.recv_timeout(timeout)
        .unwrap_or_else(|_| Err(timed_out("the name lookup")))
}

fn timed_out(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("{what} took longer than the export's timeout"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_variable_is_a_warning_naming_it_and_a_bad_flag_an_error() {
        let env = |k: &str| (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| "ftp://x".to_owned());
        let (target, warning) = turn_target(None, env).unwrap();
        assert!(target.is_none());
        let warning = warning.unwrap();
        assert!(
            warning.contains("unset OTEL_EXPORTER_OTLP_ENDPOINT"),
            "{warning}"
        );
        assert!(turn_target(Some("ftp://x"), |_| None).is_err());
        assert_eq!(turn_target(None, |_| None).unwrap(), (None, None));
    }

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn endpoints_follow_the_opentelemetry_variables() {
        let t = OtlpTarget::resolve(
            None,
            env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (t.url.as_str(), t.port, t.path.as_str()),
            ("http://c:4318/v1/traces", 4318, "/v1/traces")
        );
        let t = OtlpTarget::resolve(
            None,
            env(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://d/custom"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("d", 80, "/custom")
        );
        let t = OtlpTarget::resolve(Some("http://[::1]:9/v1/traces"), env(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9, "/v1/traces")
        );
        assert_eq!(OtlpTarget::resolve(None, env(&[])).unwrap(), None);
        let e = OtlpTarget::resolve(Some("https://x"), env(&[])).unwrap_err();
        assert!(e.contains("https is not supported"), "{e}");
        assert!(OtlpTarget::resolve(Some("http://x:99999"), env(&[])).is_err());
    }

    #[test]
    fn headers_and_timeout_come_from_the_environment() {
        let t = OtlpTarget::resolve(
            Some("http://c"),
            env(&[
                ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=a%20b, x=1"),
                ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "x=2"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "250"),
            ]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            t.headers,
            vec![("api-key".into(), "a b".into()), ("x".into(), "2".into())]
        );
        assert_eq!(t.timeout, Duration::from_millis(250));
        assert!(OtlpTarget::resolve(
            Some("http://c"),
            env(&[("OTEL_EXPORTER_OTLP_HEADERS", "novalue")])
        )
        .is_err());
    }

    #[test]
    fn a_url_with_a_space_or_control_character_is_refused_naming_its_source() {
        let injected = "http://h:4318/x\r\nX-Injected: 1";
        let e = OtlpTarget::resolve(Some(injected), env(&[])).unwrap_err();
        assert!(e.starts_with("--otlp-endpoint:"), "{e}");
        assert!(e.contains("control character"), "{e}");
        for var in [
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ] {
            let e = OtlpTarget::resolve(None, env(&[(var, injected)])).unwrap_err();
            assert!(e.starts_with(&format!("{var}:")), "{e}");
        }
        for bad in [
            "http://h/a b",
            "http://h/\u{7f}",
            "http://h\t:1/",
            "http://h/\0",
        ] {
            assert!(OtlpTarget::resolve(Some(bad), env(&[])).is_err(), "{bad:?}");
        }
        // Surrounding blanks are not part of the URL.
        assert!(OtlpTarget::resolve(Some(" http://h:1 \n"), env(&[])).is_ok());
        let e = OtlpTarget::resolve(Some("https://x"), env(&[])).unwrap_err();
        assert!(e.starts_with("--otlp-endpoint:"), "{e}");
    }

    #[test]
    fn the_fragment_is_not_sent() {
        let t = OtlpTarget::resolve(Some("http://h:1/base#frag"), env(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (t.path.as_str(), t.url.as_str()),
            ("/base/v1/traces", "http://h:1/base/v1/traces")
        );
        let t = OtlpTarget::resolve(
            None,
            env(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/t?x=1#f")]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(t.path, "/t?x=1");
    }

    #[test]
    fn a_slow_name_lookup_is_given_up_at_the_deadline() {
        let started = Instant::now();
        let e = resolve_within(
            || {
                std::thread::sleep(Duration::from_secs(5));
                Ok(Vec::new())
            },
            Duration::from_millis(100),
        )
        .unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(2));
        let fast = resolve_within(
            || Ok(vec![([127, 0, 0, 1], 9).into()]),
            Duration::from_secs(5),
        );
        assert_eq!(fast.unwrap().len(), 1);
    }

    #[test]
    fn a_collector_that_reads_slowly_cannot_hold_the_export_past_its_timeout() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        // Reads a little at a time, far slower than the body arrives, and never answers.
        std::thread::spawn(move || {
            if let Ok((mut conn, _)) = listener.accept() {
                let mut buf = [0u8; 512];
                while matches!(conn.read(&mut buf), Ok(n) if n > 0) {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        });
        let t = OtlpTarget::resolve(
            Some(&format!("http://127.0.0.1:{port}")),
            env(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "500")]),
        )
        .unwrap()
        .unwrap();
        let body = vec![b'x'; 64 * 1024 * 1024];
        let started = Instant::now();
        let e = post(&t, &body).unwrap_err();
        let took = started.elapsed();
        assert!(e.contains("cannot send to"), "{e}");
        assert!(took < Duration::from_millis(1500), "took {took:?}: {e}");
    }
}
