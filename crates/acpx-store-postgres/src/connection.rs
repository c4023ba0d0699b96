//! Connecting: the URL (parsed, redacted for messages), the connection pool, dedicated
//! connections (writer locks, LISTEN), and the mapping of client errors to [`StoreError`].

use std::str::FromStr;
use std::time::Duration;

use acpx_model::{RecordId, StoreError};
use deadpool_postgres::{Hook, HookError, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, Config, NoTls};

use crate::BACKEND;

/// A PostgreSQL URL (or `key=value` connection string) with its password, if any, replaced
/// by `***`, fit for messages, status output and logs.
///
/// ```
/// use acpx_store_postgres::redact_url;
/// assert_eq!(
///     redact_url("postgres://alice:s3cret@db.example:5432/acpx"),
///     "postgres://alice:***@db.example:5432/acpx"
/// );
/// assert_eq!(redact_url("host=db password=s3cret user=a"), "host=db password=*** user=a");
/// ```
pub fn redact_url(url: &str) -> String {
    if let Some(scheme_end) = url.find("://") {
        let rest = &url[scheme_end + 3..];
        // The user info ends at the last `@` before the path (a password may contain `@`).
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        let mut out = url[..scheme_end + 3].to_owned();
        match authority.rfind('@') {
            Some(at) => {
                let userinfo = &authority[..at];
                match userinfo.find(':') {
                    Some(colon) => {
                        out.push_str(&userinfo[..colon]);
                        out.push_str(":***");
                    }
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[at..]);
            }
            None => out.push_str(authority),
        }
        let tail = &rest[authority_end..];
        out.push_str(&redact_query_password(tail));
        return out;
    }
    // key=value form: every `password=<value>` (value possibly quoted).
    let mut out = String::new();
    let mut rest = url;
    while let Some(at) = rest.find("password=") {
        out.push_str(&rest[..at + "password=".len()]);
        out.push_str("***");
        let value = &rest[at + "password=".len()..];
        let end = if let Some(quoted) = value.strip_prefix('\'') {
            quoted.find('\'').map(|i| i + 2).unwrap_or(value.len())
        } else {
            value.find(' ').unwrap_or(value.len())
        };
        rest = &value[end..];
    }
    out.push_str(rest);
    out
}

/// `?password=…` in a URL's query string.
fn redact_query_password(tail: &str) -> String {
    let Some(q) = tail.find('?') else {
        return tail.to_owned();
    };
    let (path, query) = tail.split_at(q + 1);
    let parts: Vec<String> = query
        .split('&')
        .map(|kv| {
            if kv.starts_with("password=") {
                "password=***".to_owned()
            } else {
                kv.to_owned()
            }
        })
        .collect();
    format!("{path}{}", parts.join("&"))
}

/// Parses `url` and points every connection at `schema` (`search_path`).
pub(crate) fn parse_config(url: &str, schema: &str) -> Result<Config, StoreError> {
    let mut config = Config::from_str(url).map_err(|e| {
        StoreError::InvalidArgument(format!(
            "{} is not a PostgreSQL URL or connection string: {e}",
            redact_url(url)
        ))
    })?;
    let mut options = config.get_options().unwrap_or("").to_owned();
    if !options.is_empty() {
        options.push(' ');
    }
    options.push_str(&format!("-c search_path={schema}"));
    config.options(&options);
    if config.get_application_name().is_none() {
        config.application_name("acpx");
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(10));
    }
    Ok(config)
}

/// How long a pooled connection may go unused before it is checked with a round trip when
/// next taken. Within a turn connections are taken back to back and trusted; between turns
/// (the server may have restarted, a proxy may have dropped the connection) one empty query
/// proves the connection alive, so the first call of the next command does not fail on it.
const IDLE_BEFORE_CHECK: Duration = Duration::from_secs(1);

/// The pool of connections for ordinary calls. A connection found closed (the server
/// restarted, or an administrator ended its backend) is replaced when it is next taken;
/// one idle for [`IDLE_BEFORE_CHECK`] is first checked with an empty query and replaced if
/// that fails, before any statement of the caller runs on it.
pub(crate) fn pool(config: &Config, size: usize) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        config.clone(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size.max(1))
        .pre_recycle(Hook::async_fn(|client, metrics| {
            let idle = metrics.last_used() >= IDLE_BEFORE_CHECK;
            Box::pin(async move {
                if idle {
                    client.simple_query("").await.map_err(HookError::Backend)?;
                }
                Ok(())
            })
        }))
        .build()
        .map_err(|e| backend_error("", "build the connection pool", e))
}

/// A connection of its own, outside the pool, driven by a task on the current runtime. The
/// payloads of its notifications (`LISTEN`) go to `notifications` when given.
pub(crate) async fn dedicated(
    config: &Config,
    location: &str,
    notifications: Option<tokio::sync::broadcast::Sender<String>>,
) -> Result<Client, StoreError> {
    let (client, mut connection) = config
        .connect(NoTls)
        .await
        .map_err(|e| pg_error(location, "connect", e))?;
    tokio::spawn(async move {
        loop {
            match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                Some(Ok(AsyncMessage::Notification(n))) => {
                    if let Some(tx) = &notifications {
                        // An error only means that nobody waits right now.
                        let _ = tx.send(n.payload().to_owned());
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "a dedicated PostgreSQL connection ended");
                    break;
                }
                None => break,
            }
        }
    });
    Ok(client)
}

/// Said of a call that failed because its connection was closed under it.
const CLOSED_NOTE: &str = " (the database connection was closed; the next call reconnects)";

/// Whether `e` says that the connection a call used was closed under it (a server restart,
/// `pg_terminate_backend`): nothing of the call was committed, and a fresh connection from
/// the pool may serve it.
pub(crate) fn is_closed_connection(e: &StoreError) -> bool {
    matches!(e, StoreError::Backend { message, .. } if message.ends_with(CLOSED_NOTE))
}

/// A client error as a [`StoreError`] naming where and what was being done. Passwords never
/// appear: `location` is already redacted, and the client's errors do not carry the URL.
pub(crate) fn pg_error(location: &str, context: &str, e: tokio_postgres::Error) -> StoreError {
    let detail = match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => {
            let mut text = e.to_string();
            if let Some(source) = std::error::Error::source(&e) {
                text.push_str(&format!(": {source}"));
            }
            if e.is_closed() {
                text.push_str(CLOSED_NOTE);
            }
            text
        }
    };
    backend_error(location, context, detail)
}

/// A pool error as a [`StoreError`]: a failed connect carries the server's own message
/// (`database "x" does not exist`, `password authentication failed for user "u"`) or the
/// socket's (`Connection refused`), not deadpool's wrapper (`Error occurred while creating a
/// new object: db error`).
pub(crate) fn pool_error(
    location: &str,
    context: &str,
    e: deadpool_postgres::PoolError,
) -> StoreError {
    use deadpool_postgres::PoolError;
    match e {
        PoolError::Backend(e) => pg_error(location, context, e),
        PoolError::PostCreateHook(HookError::Backend(e)) => pg_error(location, context, e),
        other => backend_error(location, context, other),
    }
}

pub(crate) fn backend_error(
    location: &str,
    context: &str,
    detail: impl std::fmt::Display,
) -> StoreError {
    let prefix = if location.is_empty() {
        String::new()
    } else {
        format!("{location}: ")
    };
    StoreError::Backend {
        backend: BACKEND,
        message: format!("{prefix}{context}: {detail}"),
    }
}

/// Whether the server gave up waiting for a lock (`lock_timeout`).
pub(crate) fn is_lock_timeout(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
}

/// Whether the insert hit a unique constraint.
pub(crate) fn is_unique_violation(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&SqlState::UNIQUE_VIOLATION)
}

/// The error of a writer lock given up on after `waited`.
pub(crate) fn locked(id: &RecordId, waited: Duration) -> StoreError {
    StoreError::Locked {
        id: id.clone(),
        waited,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted_in_every_form() {
        assert_eq!(
            redact_url("postgresql://u:p@ss@h/db?sslmode=disable&password=x"),
            "postgresql://u:***@h/db?sslmode=disable&password=***"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("postgres://h:5432/db"), "postgres://h:5432/db");
        assert_eq!(
            redact_url("host=h password='a b' dbname=x"),
            "host=h password=*** dbname=x"
        );
    }

    #[test]
    fn config_sets_the_search_path_and_keeps_user_options() {
        let c = parse_config("postgres://u:p@h/db?options=-c%20work_mem%3D4MB", "acpx").unwrap();
        assert_eq!(c.get_options(), Some("-c work_mem=4MB -c search_path=acpx"));
        assert!(parse_config("not a url://", "acpx").is_err());
    }
}
