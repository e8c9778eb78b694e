//! Choosing a model provider for an agent: the per-agent choice at creation, falling back to the
//! daemon's configured default.

use std::sync::Arc;

use super::openai::{self, OpenAiProvider};
pub use super::provider::ModelChoice;
use super::provider::ModelProvider;
use super::scripted::{self, Script, ScriptedProvider};

/// A model choice that cannot be used, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct InvalidModel {
    /// Which field, e.g. `model.script_json`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
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

    /// The provider for `choice`.
    pub fn build(&self, choice: &ModelChoice) -> Result<Arc<dyn ModelProvider>, InvalidModel> {
        let provider = choice.provider.as_deref().unwrap_or(&self.default_provider);
        match provider {
            scripted::PROVIDER => {
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
                    });
                }
                let provider = match &choice.model {
                    Some(model) => self.openai.clone().with_model(model.clone()),
                    None => self.openai.clone(),
                };
                Ok(Arc::new(provider))
            }
            other => Err(InvalidModel {
                field: "model.provider",
                message: format!("unknown provider {other:?}; known providers: scripted, openai"),
            }),
        }
    }
}
