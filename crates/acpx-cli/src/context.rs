//! What a command runs with: the settings ([`acpx_app::settings`]: flags over environment
//! over config over defaults, resolved from the parsed global options), the output, and the
//! store and authority directory, opened on first use.

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use acpx_app::settings::{Flags, Settings};
use acpx_model::Store;
use tokio::sync::OnceCell;

use crate::agents::AgentRegistry;
use crate::backends::OpenStore;
use crate::cli::GlobalArgs;
use crate::config::{Backend, Config};
use crate::error::CliResult;
use crate::output::Out;

/// Everything a command needs: its settings (reached through `Deref`, `ctx.home`), its
/// output, its store.
#[derive(Debug)]
pub struct Ctx {
    pub out: Out,
    pub settings: Settings,
    store: OnceCell<OpenStore>,
    authority: std::sync::OnceLock<PathBuf>,
}

impl Deref for Ctx {
    type Target = Settings;

    fn deref(&self) -> &Settings {
        &self.settings
    }
}

impl DerefMut for Ctx {
    fn deref_mut(&mut self) -> &mut Settings {
        &mut self.settings
    }
}

/// The settings the global options give.
fn flags(g: GlobalArgs) -> Flags {
    Flags {
        agent: g.agent,
        format: g.format,
        json_strict: g.json_strict,
        verbose: g.verbose,
        store: g.store,
        approve_all: g.approve_all,
        approve_reads: g.approve_reads,
        deny_all: g.deny_all,
        timeout: g.timeout,
        non_interactive_permissions: g.non_interactive_permissions,
        resume_policy: g.resume_policy,
        mcp_config: g.mcp_config,
        add_dir: g.add_dir,
        model: g.model,
        ttl: g.ttl,
        no_owner: g.no_owner,
        permission_policy: g.permission_policy,
        elicitation_answers: g.elicitation_answers,
        prompt_retries: g.prompt_retries,
        no_fs: g.no_fs,
        no_terminal: g.no_terminal,
        auth_policy: g.auth_policy,
    }
}

impl Ctx {
    /// Resolves the globals ([`Settings::resolve`]); the config's unknown keys are warned
    /// about. `agent_word` is the positional agent taken out of argv.
    pub fn new(
        global: GlobalArgs,
        agent_word: Option<String>,
        home: PathBuf,
        cwd: PathBuf,
        config: Config,
        registry: AgentRegistry,
    ) -> CliResult<Ctx> {
        let flags = flags(global);
        let out = Out::new(Settings::output_format(&flags, &config), flags.verbose);
        let mut warn = |w: &str| out.warn(w);
        let settings =
            Settings::resolve(flags, agent_word, home, cwd, config, registry, &mut warn)?;
        Ok(Ctx {
            out,
            settings,
            store: OnceCell::new(),
            authority: std::sync::OnceLock::new(),
        })
    }

    /// The store of `--store`, opened on first use.
    pub async fn opened(&self) -> CliResult<&OpenStore> {
        self.store
            .get_or_try_init(|| async {
                crate::backends::open(
                    self.backend,
                    &self.home,
                    self.config.store_url.as_ref(),
                    self.settle_loads,
                )
                .await
                .map_err(Into::into)
            })
            .await
    }

    /// The authority directory of the store of `--store` (`acpx_owner::authority`): where
    /// its sessions' queue owners, `--no-owner` runs and scope locks are found. Created on
    /// first use.
    pub fn authority(&self) -> CliResult<&Path> {
        if let Some(dir) = self.authority.get() {
            return Ok(dir);
        }
        let dir = self.authority_of(self.backend)?;
        Ok(self.authority.get_or_init(|| dir))
    }

    /// The authority directory of `backend`'s store under this home
    /// ([`Settings::authority_of`]), created when missing.
    pub fn authority_of(&self, backend: Backend) -> CliResult<PathBuf> {
        Ok(self.settings.authority_of(backend)?)
    }

    /// The store, if it was opened already.
    pub fn opened_now(&self) -> Option<&OpenStore> {
        self.store.get()
    }

    /// The store as a trait object.
    pub async fn store(&self) -> CliResult<Arc<dyn Store>> {
        Ok(self.opened().await?.as_dyn())
    }
}
