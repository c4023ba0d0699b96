//! The agent's command-line flags (documented in the crate docs).

use std::path::PathBuf;

#[derive(Debug, Default, Clone)]
pub(crate) struct Flags {
    pub(crate) load: bool,
    pub(crate) resume: bool,
    pub(crate) load_not_found: bool,
    pub(crate) load_internal_error: bool,
    pub(crate) agent_session_id: bool,
    pub(crate) empty_agent_session_id: bool,
    pub(crate) fork: bool,
    pub(crate) fork_unsupported: bool,
    pub(crate) close: bool,
    pub(crate) delete: bool,
    /// Advertise `sessionCapabilities.additionalDirectories`.
    pub(crate) additional_dirs: bool,
    pub(crate) resume_unsupported: bool,
    pub(crate) models: bool,
    /// No model selection in the session answer (modes only), yet `session/set_config_option`
    /// with configId `model` is served and `session/set_model` is not: pydantic-acp 1.10.0.
    pub(crate) unadvertised_model: bool,
    pub(crate) refuse_mode: Option<String>,
    pub(crate) cancel_on_deny: bool,
    pub(crate) state_dir: Option<PathBuf>,
    pub(crate) require_auth: Option<String>,
    pub(crate) advertise_auth: Option<String>,
    /// Milliseconds to wait before serving (an agent slow to start, as `npx` fetching one).
    pub(crate) start_delay_ms: u64,
    /// A fork is kept in this process only until its first turn, which stores it (as some
    /// agents do): another process cannot load or resume it before.
    pub(crate) lazy_fork: bool,
    /// Advertise and serve `session/list` (`crate::listing`).
    pub(crate) list: bool,
    /// Sessions per `session/list` page.
    pub(crate) list_page_size: Option<usize>,
    /// A request method never answered until the client cancels it (`crate::stall`).
    pub(crate) stall: Option<String>,
    /// Where stalled requests and `$/cancel_request`s are noted (`crate::stall`).
    pub(crate) cancel_log: Option<PathBuf>,
}

impl Flags {
    /// The auth method this agent lists (`--require-auth`, else `--advertise-auth`).
    pub(crate) fn auth_method(&self) -> Option<&String> {
        self.require_auth.as_ref().or(self.advertise_auth.as_ref())
    }

    pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Flags, String> {
        let mut f = Flags::default();
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--load" => f.load = true,
                "--resume" => f.resume = true,
                "--load-not-found" => f.load_not_found = true,
                "--load-internal-error" => f.load_internal_error = true,
                "--agent-session-id" => f.agent_session_id = true,
                "--empty-agent-session-id" => f.empty_agent_session_id = true,
                "--no-agent-session-id" => {
                    f.agent_session_id = false;
                    f.empty_agent_session_id = false;
                }
                "--fork" => f.fork = true,
                "--lazy-fork" => {
                    f.fork = true;
                    f.lazy_fork = true;
                }
                "--start-delay-ms" => {
                    f.start_delay_ms = it
                        .next()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--start-delay-ms needs a number of milliseconds")?
                }
                "--fork-unsupported" => {
                    f.fork = true;
                    f.fork_unsupported = true;
                }
                "--close" => f.close = true,
                "--list" => f.list = true,
                "--list-page-size" => {
                    f.list_page_size = Some(
                        it.next()
                            .and_then(|v| v.parse().ok())
                            .filter(|n| *n > 0)
                            .ok_or("--list-page-size needs a positive number")?,
                    )
                }
                "--stall" => f.stall = Some(it.next().ok_or("--stall needs a method")?),
                "--cancel-log" => {
                    f.cancel_log =
                        Some(PathBuf::from(it.next().ok_or("--cancel-log needs a file")?))
                }
                "--delete" => f.delete = true,
                "--additional-dirs" => f.additional_dirs = true,
                "--resume-unsupported" => {
                    f.resume = true;
                    f.resume_unsupported = true;
                }
                "--models" => f.models = true,
                "--unadvertised-model" => f.unadvertised_model = true,
                "--refuse-mode" => {
                    f.refuse_mode = Some(it.next().ok_or("--refuse-mode needs a mode id")?)
                }
                "--cancel-on-deny" => f.cancel_on_deny = true,
                "--state-dir" => {
                    f.state_dir = Some(PathBuf::from(it.next().ok_or("--state-dir needs a value")?))
                }
                "--require-auth" => {
                    f.require_auth = Some(it.next().ok_or("--require-auth needs a method id")?)
                }
                "--advertise-auth" => {
                    f.advertise_auth = Some(it.next().ok_or("--advertise-auth needs a method id")?)
                }
                other => return Err(format!("unknown flag {other:?}")),
            }
        }
        Ok(f)
    }
}
