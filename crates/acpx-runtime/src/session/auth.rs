//! Authenticating to an agent that lists `authMethods` in its `initialize` answer, with Node
//! acpx 0.19.1's rules (`docs/format.md`, § Authentication).
//!
//! The first advertised method with a credential is chosen; a method's credential is the
//! environment variable `ACPX_AUTH_<TOKEN>` (TOKEN: the method id upper-cased, each run of
//! characters other than ASCII letters and digits one `_`), else the configuration's
//! `auth.<methodId>` (or `auth.<TOKEN>`). acpx then sends `authenticate {methodId}`; the
//! credential itself reaches the agent through its environment ([`credential_env`]). With no
//! credential for any advertised method, the `skip` policy goes on (the agent may handle
//! authentication itself) and `fail` stops before any session request.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::RuntimeError;

/// The prefix of the environment variables that hold credentials.
pub const AUTH_ENV_PREFIX: &str = "ACPX_AUTH_";

/// What to do when the agent advertises auth methods and no credential matches any of them
/// (`--auth-policy`, config `authPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthPolicy {
    /// Go on without authenticating: the agent may handle authentication itself.
    #[default]
    Skip,
    /// Fail before any session request ([`crate::RuntimeError::AuthRequired`]).
    Fail,
}

impl AuthPolicy {
    /// The CLI and config spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthPolicy::Skip => "skip",
            AuthPolicy::Fail => "fail",
        }
    }
}

/// The token of a method id: upper-cased, each run of characters other than ASCII letters and
/// digits one `_`, no `_` at either end.
pub fn env_token(method_id: &str) -> String {
    let mut token = String::new();
    for c in method_id.trim().chars() {
        if c.is_ascii_alphanumeric() {
            token.push(c.to_ascii_uppercase());
        } else if !token.ends_with('_') {
            token.push('_');
        }
    }
    token.trim_matches('_').to_owned()
}

/// `ACPX_AUTH_<TOKEN>`, the environment variable holding the credential of `method_id`
/// (`None` when the id has no letter or digit).
pub fn env_key(method_id: &str) -> Option<String> {
    let token = env_token(method_id);
    (!token.is_empty()).then(|| format!("{AUTH_ENV_PREFIX}{token}"))
}

/// Where a chosen credential came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CredentialSource {
    Env,
    Config,
}

impl CredentialSource {
    fn as_str(self) -> &'static str {
        match self {
            CredentialSource::Env => "env",
            CredentialSource::Config => "config",
        }
    }
}

/// What [`decide`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthDecision {
    /// The agent advertises no auth method.
    NotNeeded,
    /// Send `authenticate` with this method.
    Authenticate {
        method_id: String,
        source: CredentialSource,
    },
    /// No credential for any advertised method, under the `skip` policy.
    Skip { methods: Vec<String> },
    /// No credential for any advertised method, under the `fail` policy.
    Fail { methods: Vec<String> },
}

/// An agent's `auth_required` answer (JSON-RPC -32000) to a session request after acpx went
/// on without a credential (`skip`): the error the `fail` policy gives, naming the advertised
/// methods and their `ACPX_AUTH_*` variables, with the agent's own words first. Any other
/// error is returned as it is.
pub(crate) fn explain_auth_required(e: RuntimeError, decision: &AuthDecision) -> RuntimeError {
    match (&e, decision) {
        (RuntimeError::Agent { method, error }, AuthDecision::Skip { methods })
            if error.code == -32000 && !methods.is_empty() =>
        {
            RuntimeError::AuthRequired {
                env_vars: methods.iter().filter_map(|m| env_key(m)).collect(),
                methods: methods.clone(),
                agent_said: Some(format!(
                    "the agent refused `{method}`: {} (JSON-RPC {})",
                    error.message, error.code
                )),
            }
        }
        _ => e,
    }
}

/// The ids of the methods of an `initialize` answer.
pub(crate) fn advertised_methods(init: &Value) -> Vec<String> {
    init.get("authMethods")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|m| m.get("id").and_then(Value::as_str))
                .filter(|id| !id.trim().is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

fn non_empty(v: Option<&String>) -> bool {
    v.is_some_and(|s| !s.trim().is_empty())
}

/// Chooses what to do with the methods of `init`: `env` looks an environment variable up,
/// `config` is the configuration's `auth` map.
pub(crate) fn decide(
    init: &Value,
    policy: AuthPolicy,
    config: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> AuthDecision {
    let methods = advertised_methods(init);
    if methods.is_empty() {
        return AuthDecision::NotNeeded;
    }
    for id in &methods {
        if non_empty(env_key(id).and_then(|k| env(&k)).as_ref()) {
            return AuthDecision::Authenticate {
                method_id: id.clone(),
                source: CredentialSource::Env,
            };
        }
        if non_empty(config.get(id).or_else(|| config.get(&env_token(id)))) {
            return AuthDecision::Authenticate {
                method_id: id.clone(),
                source: CredentialSource::Config,
            };
        }
    }
    match policy {
        AuthPolicy::Skip => AuthDecision::Skip { methods },
        AuthPolicy::Fail => AuthDecision::Fail { methods },
    }
}

/// The `authenticated` / `authentication_skipped` lifecycle payload of a decision (`None`
/// when there is nothing to record).
pub(crate) fn lifecycle_facts(decision: &AuthDecision) -> Option<(&'static str, Value)> {
    match decision {
        AuthDecision::Authenticate { method_id, source } => Some((
            crate::mapping::lifecycle::AUTHENTICATED,
            json!({"methodId": method_id, "source": source.as_str()}),
        )),
        AuthDecision::Skip { methods } => Some((
            crate::mapping::lifecycle::AUTHENTICATION_SKIPPED,
            json!({"authMethods": methods, "reason": "no_credentials"}),
        )),
        AuthDecision::NotNeeded | AuthDecision::Fail { .. } => None,
    }
}

/// The environment the configured credentials give the agent process (Node's rule): for
/// each `auth.<methodId>`, `ACPX_AUTH_<TOKEN>` and `<TOKEN>` unless already set in acpx's
/// environment.
pub fn credential_env(
    config: &BTreeMap<String, String>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (id, credential) in config {
        if credential.trim().is_empty() {
            continue;
        }
        let token = env_token(id);
        if token.is_empty() {
            continue;
        }
        for key in [format!("{AUTH_ENV_PREFIX}{token}"), token] {
            if env(&key).is_none() && !out.iter().any(|(k, _)| *k == key) {
                out.push((key, credential.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init(ids: &[&str]) -> Value {
        json!({"authMethods": ids.iter().map(|id| json!({"id": id, "name": id})).collect::<Vec<_>>()})
    }

    #[test]
    fn tokens_follow_node() {
        assert_eq!(env_token("openai-api-key"), "OPENAI_API_KEY");
        assert_eq!(env_token(" xai.api_key "), "XAI_API_KEY");
        assert_eq!(env_token("--a--b--"), "A_B");
        assert_eq!(env_key("..."), None);
        assert_eq!(env_key("token").as_deref(), Some("ACPX_AUTH_TOKEN"));
    }

    #[test]
    fn env_wins_then_config_then_policy() {
        let none = |_: &str| None;
        let mut config = BTreeMap::new();
        assert_eq!(
            decide(&json!({}), AuthPolicy::Fail, &config, none),
            AuthDecision::NotNeeded
        );
        assert_eq!(
            decide(&init(&["a", "b"]), AuthPolicy::Skip, &config, none),
            AuthDecision::Skip {
                methods: vec!["a".into(), "b".into()]
            }
        );
        assert!(matches!(
            decide(&init(&["a"]), AuthPolicy::Fail, &config, none),
            AuthDecision::Fail { .. }
        ));
        config.insert("B".to_owned(), "secret".to_owned());
        assert_eq!(
            decide(&init(&["a", "b"]), AuthPolicy::Fail, &config, none),
            AuthDecision::Authenticate {
                method_id: "b".into(),
                source: CredentialSource::Config
            }
        );
        let env = |k: &str| (k == "ACPX_AUTH_A").then(|| "x".to_owned());
        assert_eq!(
            decide(&init(&["a", "b"]), AuthPolicy::Fail, &config, env),
            AuthDecision::Authenticate {
                method_id: "a".into(),
                source: CredentialSource::Env
            }
        );
        let blank = |_: &str| Some("  ".to_owned());
        config.clear();
        assert!(matches!(
            decide(&init(&["a"]), AuthPolicy::Skip, &config, blank),
            AuthDecision::Skip { .. }
        ));
    }

    #[test]
    fn configured_credentials_reach_the_agent_environment() {
        let mut config = BTreeMap::new();
        config.insert("my-key".to_owned(), "s3cret".to_owned());
        let env = |k: &str| (k == "MY_KEY").then(|| "already".to_owned());
        assert_eq!(
            credential_env(&config, env),
            vec![("ACPX_AUTH_MY_KEY".to_owned(), "s3cret".to_owned())]
        );
    }
}
