//! A PostgreSQL schema of a test's own on the server of `ACPX_TEST_POSTGRES_URL`, and the
//! "hosts" (acpx homes with their own runtime directories) that share it.

use std::sync::atomic::{AtomicU32, Ordering};

use super::Env;

const URL_VAR: &str = "ACPX_TEST_POSTGRES_URL";

pub fn server_url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(u) if !u.trim().is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "{URL_VAR} is not set under CI=true: the postgres tests must run"
            );
            eprintln!("skipped: set {URL_VAR} to run the postgres end-to-end tests");
            None
        }
    }
}

/// A schema of this test's own, dropped when it goes.
pub struct Schema {
    pub url: String,
    pub name: String,
}

impl Schema {
    pub fn new(url: &str, tag: &str) -> Schema {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        Schema {
            url: url.to_owned(),
            name: format!(
                "acpx_e2e_{tag}_{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// A host: its own home, the same database and schema. (Sessions are found by
    /// directory: a host working on another's session runs in that project, see `in_dir`.)
    /// A host of its own: its own home, and its own runtime directory (another machine's
    /// `XDG_RUNTIME_DIR`), where its owners live; two homes on one machine would share the
    /// store's local authority directory, since they name the same store.
    pub fn host(&self) -> Env {
        let mut env = Env::new("postgres");
        let run = env.home().join("run");
        std::fs::create_dir(&run).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
        env.extra_env = vec![
            ("ACPX_STORE_URL".into(), self.url.clone()),
            ("ACPX_STORE_SCHEMA".into(), self.name.clone()),
            ("XDG_RUNTIME_DIR".into(), run.to_string_lossy().into_owned()),
        ];
        env
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (url, name) = (self.url.clone(), self.name.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                if let Ok((c, conn)) = tokio_postgres::connect(&url, tokio_postgres::NoTls).await {
                    tokio::spawn(conn);
                    let _ = c
                        .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                        .await;
                }
            });
        })
        .join();
    }
}
