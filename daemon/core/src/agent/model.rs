//! Choosing a model provider for an agent: the per-agent choice at creation, falling back to the
//! daemon's configured default; and for an agent going live again, what its session ran with.

use std::sync::Arc;

use super::openai::{self, OpenAiProvider};
pub use super::provider::ModelChoice;
use super::provider::{ModelError, ModelProvider};
use super::scripted::{self, Script, ScriptedProvider};
use dsh_session::{AgentSettings, ApprovalPolicy, EventData, SandboxPolicy, SessionId, SessionLog};

/// A model choice that cannot be used, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidModel {
    /// Which field, e.g. `model.script_json`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

/// Why no provider could be built for a choice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnusableModel {
    /// The choice itself is wrong.
    #[error(transparent)]
    Invalid(#[from] InvalidModel),
    /// The provider needs an API key the daemon does not have (the message the first model
    /// request would give).
    #[error("{}", ModelError::MissingKey { variable: variable.clone() })]
    NoKey {
        /// The environment variable that should hold the key.
        variable: String,
    },
}

/// Where a [`ModelList`] came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    /// `[model] models` in the config: the user's own choice of what to offer.
    Config,
    /// The provider's `GET /models`, asked just now.
    Provider,
    /// The configured model alone, because the provider could not be asked (see the problem).
    Default,
}

impl ModelSource {
    /// The name used on the wire and in `dshctl models`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Provider => "provider",
            Self::Default => "default",
        }
    }
}

/// The models of the `openai` provider an agent can be given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelList {
    /// The configured default model (`[model] model`); also the first of `models`.
    pub default: String,
    /// Every model offered, the default first, then in the source's order.
    pub models: Vec<String>,
    /// Where the list came from.
    pub source: ModelSource,
    /// Why the provider's list could not be had (its request's error), when `source` is
    /// [`ModelSource::Default`].
    pub problem: Option<String>,
}

/// Builds providers from choices and the daemon's defaults.
#[derive(Debug, Clone)]
pub struct ProviderFactory {
    /// Provider used when a choice names none.
    default_provider: String,
    /// Script used by scripted agents created without one.
    default_script: Option<Script>,
    /// The configured OpenAI-compatible provider (with the key read at start); agents clone it
    /// and may choose another model.
    openai: OpenAiProvider,
}

impl ProviderFactory {
    /// A factory whose default is `default_provider`; scripted agents without a script use
    /// `default_script` (or none: their first request ends the turn saying the script is empty).
    pub fn new(
        default_provider: String,
        default_script: Option<Script>,
        openai: OpenAiProvider,
    ) -> Self {
        Self {
            default_provider,
            default_script,
            openai,
        }
    }

    /// The variable the `openai` provider's key is read from, and whether it held one at start.
    pub fn model_key(&self) -> (&str, bool) {
        (&self.openai.config().api_key_env, self.openai.has_key())
    }

    /// The models an agent can be given: `[model] models` when configured, otherwise the
    /// provider's own list (asked now: a person is waiting for it, and a stale list offers
    /// models that are gone), otherwise the configured model alone with the reason. The
    /// configured default is always offered, first.
    pub async fn models(&self) -> ModelList {
        let config = self.openai.config();
        let default = config.model.clone();
        let (source, found, problem) = if config.models.is_empty() {
            match self.openai.models().await {
                Ok(found) => (ModelSource::Provider, found, None),
                Err(error) => (ModelSource::Default, Vec::new(), Some(error.to_string())),
            }
        } else {
            (ModelSource::Config, config.models.clone(), None)
        };
        let mut models = vec![default.clone()];
        models.extend(found.into_iter().filter(|m| *m != default));
        ModelList {
            default,
            models,
            source,
            problem,
        }
    }

    /// The provider for `choice`. An `openai` choice without a key is refused at once, with the
    /// message its first request would otherwise give.
    pub fn build(&self, choice: &ModelChoice) -> Result<Arc<dyn ModelProvider>, UnusableModel> {
        let provider = choice.provider.as_deref().unwrap_or(&self.default_provider);
        match provider {
            scripted::PROVIDER => {
                if matches!(choice.reasoning_effort, Some(Some(_))) {
                    return Err(InvalidModel {
                        field: "model.reasoning_effort",
                        message: "a reasoning effort is only for the openai provider".into(),
                    }
                    .into());
                }
                let script = match &choice.script {
                    Some(text) => Script::parse(text).map_err(|e| InvalidModel {
                        field: "model.script_json",
                        message: e.to_string(),
                    })?,
                    None => self.default_script.clone().unwrap_or(Script {
                        replies: Vec::new(),
                    }),
                };
                Ok(Arc::new(ScriptedProvider::new(script)))
            }
            openai::PROVIDER_NAME => {
                if choice.script.is_some() {
                    return Err(InvalidModel {
                        field: "model.script_json",
                        message: "a script is only for the scripted provider".into(),
                    }
                    .into());
                }
                if !self.openai.has_key() {
                    return Err(UnusableModel::NoKey {
                        variable: self.openai.config().api_key_env.clone(),
                    });
                }
                let provider = match &choice.model {
                    Some(model) => self.openai.clone().with_model(model.clone()),
                    None => self.openai.clone(),
                };
                Ok(Arc::new(
                    provider.with_reasoning_effort(choice.reasoning_effort.flatten()),
                ))
            }
            other => Err(InvalidModel {
                field: "model.provider",
                message: format!("unknown provider {other:?}; known providers: scripted, openai"),
            }
            .into()),
        }
    }

    /// The choice for session `id` going live again (resumed, or forked), which last ran with
    /// `recorded`: what the request names, else what the session ran with, else the defaults.
    /// A model name alone keeps the recorded provider. The scripted model's script is not
    /// stored, so a scripted session needs one in the request (or a configured default).
    pub fn again(
        &self,
        id: &SessionId,
        requested: &ModelChoice,
        recorded: Option<&AgentSettings>,
    ) -> Result<ModelChoice, InvalidModel> {
        let provider = requested
            .provider
            .clone()
            .or_else(|| {
                requested
                    .script
                    .as_ref()
                    .map(|_| scripted::PROVIDER.to_owned())
            })
            .or_else(|| recorded.map(|r| r.provider.clone()))
            .unwrap_or_else(|| self.default_provider.clone());
        let same = recorded.filter(|r| r.provider == provider && provider != scripted::PROVIDER);
        let model = requested
            .model
            .clone()
            .or_else(|| same.map(|r| r.model.clone()));
        let reasoning_effort = requested
            .reasoning_effort
            .or_else(|| same.and_then(|r| r.reasoning_effort).map(Some));
        if provider == scripted::PROVIDER
            && requested.script.is_none()
            && self.default_script.is_none()
        {
            return Err(InvalidModel {
                field: "model.script_json",
                message: format!(
                    "session {id} runs the scripted model, whose script is not stored: give it one \
                     (dshctl: --script FILE) or another provider (dshctl: --model openai)"
                ),
            });
        }
        Ok(ModelChoice {
            provider: Some(provider),
            model,
            reasoning_effort,
            script: requested.script.clone(),
        })
    }
}

/// The settings an agent with `provider` and `approval` runs with.
pub(super) fn settings_of(provider: &dyn ModelProvider, approval: ApprovalPolicy) -> AgentSettings {
    AgentSettings {
        provider: provider.provider().to_owned(),
        model: provider.model().to_owned(),
        reasoning_effort: provider.reasoning_effort(),
        approval,
    }
}

/// Appends `session/settings` when the agent runs with other settings than the session records
/// (`recorded`: its settings, and the sandbox a `session/settings` recorded, if any), with the
/// sandbox it goes live under.
pub(super) fn record_settings(
    log: &mut SessionLog,
    recorded: (Option<AgentSettings>, Option<SandboxPolicy>),
    now: AgentSettings,
    sandbox: SandboxPolicy,
) {
    let (settings, recorded_sandbox) = recorded;
    let other_sandbox = recorded_sandbox.is_some_and(|s| s != sandbox);
    if settings.as_ref() != Some(&now) || other_sandbox {
        log.append(EventData::Settings {
            provider: now.provider,
            model: now.model,
            reasoning_effort: now.reasoning_effort,
            approval: now.approval,
            sandbox: Some(sandbox),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::openai::OpenAiConfig;
    use dsh_session::ApprovalPolicy;

    fn factory(key: Option<&str>) -> ProviderFactory {
        let openai = OpenAiProvider::new(OpenAiConfig::default(), key.map(str::to_owned)).unwrap();
        ProviderFactory::new("scripted".into(), None, openai)
    }

    fn recorded(provider: &str, model: &str) -> AgentSettings {
        AgentSettings {
            provider: provider.into(),
            model: model.into(),
            reasoning_effort: None,
            approval: ApprovalPolicy::OnRequest,
        }
    }

    fn choice(provider: Option<&str>, model: Option<&str>, script: Option<&str>) -> ModelChoice {
        ModelChoice {
            provider: provider.map(str::to_owned),
            model: model.map(str::to_owned),
            reasoning_effort: None,
            script: script.map(str::to_owned),
        }
    }

    #[test]
    fn openai_without_a_key_is_refused_with_the_first_requests_message() {
        let err = factory(None)
            .build(&choice(Some("openai"), None, None))
            .unwrap_err();
        let variable = OpenAiConfig::default().api_key_env;
        assert_eq!(
            err,
            UnusableModel::NoKey {
                variable: variable.clone()
            }
        );
        assert_eq!(
            err.to_string(),
            ModelError::MissingKey { variable }.to_string()
        );
        assert!(
            factory(Some("sk-x"))
                .build(&choice(Some("openai"), None, None))
                .is_ok()
        );
    }

    #[test]
    fn going_live_again_keeps_what_the_session_ran_with() {
        let f = factory(Some("sk-x"));
        let id = SessionId::parse("s").unwrap();
        let openai = recorded("openai", "deepseek-reasoner");
        assert_eq!(
            f.again(&id, &ModelChoice::default(), Some(&openai))
                .unwrap(),
            choice(Some("openai"), Some("deepseek-reasoner"), None)
        );
        // A model name alone keeps the provider; a script switches to the scripted model.
        assert_eq!(
            f.again(&id, &choice(None, Some("other"), None), Some(&openai))
                .unwrap(),
            choice(Some("openai"), Some("other"), None)
        );
        assert_eq!(
            f.again(&id, &choice(None, None, Some("{}")), Some(&openai))
                .unwrap(),
            choice(Some("scripted"), None, Some("{}"))
        );
        // The scripted model's script is not stored.
        let err = f
            .again(
                &id,
                &ModelChoice::default(),
                Some(&recorded("scripted", "script")),
            )
            .unwrap_err();
        assert_eq!(err.field, "model.script_json");
        assert!(err.message.contains("script is not stored"), "{err}");
        // Sessions that recorded nothing take the defaults (scripted here, so a script).
        assert!(f.again(&id, &ModelChoice::default(), None).is_err());
        assert_eq!(
            f.again(&id, &choice(Some("openai"), None, None), None)
                .unwrap(),
            choice(Some("openai"), None, None)
        );
    }

    #[test]
    fn a_reasoning_effort_is_kept_until_another_is_named_and_only_openai_takes_one() {
        use dsh_session::ReasoningEffort::{High, Max};
        let f = factory(Some("sk-x"));
        let id = SessionId::parse("s").unwrap();
        let thinking = AgentSettings {
            reasoning_effort: Some(Max),
            ..recorded("openai", "deepseek-reasoner")
        };
        let named = |effort| ModelChoice {
            reasoning_effort: Some(effort),
            ..ModelChoice::default()
        };
        let again = |choice: &ModelChoice| f.again(&id, choice, Some(&thinking)).unwrap();
        let built = |choice: &ModelChoice| f.build(choice).unwrap().reasoning_effort();
        assert_eq!(built(&again(&ModelChoice::default())), Some(Max));
        assert_eq!(
            built(&again(&choice(None, Some("deepseek-chat"), None))),
            Some(Max),
            "another model keeps the effort"
        );
        assert_eq!(built(&again(&named(Some(High)))), Some(High));
        assert_eq!(built(&again(&named(None))), None, "`default` asks for none");
        assert_eq!(
            built(&again(&choice(None, None, Some(r#"{"replies": []}"#)))),
            None,
            "the scripted model has none"
        );
        let err = f
            .build(&ModelChoice {
                provider: Some("scripted".into()),
                ..named(Some(High))
            })
            .err()
            .unwrap();
        assert!(
            err.to_string().starts_with("model.reasoning_effort:"),
            "{err}"
        );
    }
}
