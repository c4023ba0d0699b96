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
//! (milliseconds) bound the whole exchange, 3 seconds when unset.
//!
//! The client is a minimal HTTP/1.1 POST over `std::net::TcpStream`, `http://` only (an
//! `https://` endpoint is refused with a clear error): no HTTP or TLS crate in the binary for
//! an optional export, whose usual receiver is a collector on the same host or network
//! (`http://127.0.0.1:4318`). A collector in front of a TLS backend forwards it.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
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
        let url = match (flag, var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
            (Some(f), _) => with_traces_path(f.trim()),
            (None, Some(t)) => t.trim().to_owned(),
            (None, None) => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => with_traces_path(base.trim()),
                None => return Ok(None),
            },
        };
        let (host, port, path) = parse_http_url(&url)?;
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

/// A base endpoint with the traces path (`…/v1/traces`) appended, unless it has it.
fn with_traces_path(base: &str) -> String {
    let base = base.trim_end_matches('/');
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
    let addrs: Vec<_> = (t.host.as_str(), t.port)
        .to_socket_addrs()
        .map_err(|e| fail("cannot resolve", e))?
        .collect();
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
    s.set_write_timeout(Some(left()))
        .map_err(|e| fail("cannot send to", e))?;
    s.write_all(head.as_bytes())
        .and_then(|_| s.write_all(body))
        .and_then(|_| s.flush())
        .map_err(|e| fail("cannot send to", e))?;
    // The status line is all that is needed; read until it is whole (bounded).
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") && answer.len() < 8192 {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
