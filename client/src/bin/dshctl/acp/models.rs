//! The model picker: ACP's session configuration option `model` (category `model`), a dropdown
//! of what dshd can run for the session. Its values are `openai/<model>` (the configured model,
//! and the one the session runs) when dshd has a key, and `scripted` when the session runs the
//! keyless scripted model or this bridge was given a script. Choosing one is `Agents.Configure`
//! on the live agent: the same thread goes on with the other model.

use dsh_proto::v1;

use super::Bridge;
use super::jsonrpc::RpcError;
use super::schema::{
    ConfigOption, ConfigValue, SessionUpdate, SetConfigOptionRequest, SetConfigOptionResponse,
};

/// The id of the model option.
const MODEL: &str = "model";
/// The value of the scripted model.
const SCRIPTED: &str = "scripted";

impl Bridge {
    /// The configuration options of a session running as `info` says.
    pub(super) async fn config_options(
        &self,
        info: &v1::AgentInfo,
    ) -> Result<Vec<ConfigOption>, RpcError> {
        let status = self
            .client()
            .await?
            .daemon()
            .status(v1::StatusRequest {})
            .await?
            .into_inner();
        let current = value_of(&info.provider, &info.model);
        let mut options = vec![ConfigValue {
            name: label(&current),
            value: current.clone(),
        }];
        let mut offer = |value: String| {
            if !options.iter().any(|o| o.value == value) {
                options.push(ConfigValue {
                    name: label(&value),
                    value,
                });
            }
        };
        if status.model_key_configured && !status.openai_model.is_empty() {
            offer(format!("openai/{}", status.openai_model));
        }
        if !self.model.script_json.is_empty() {
            offer(SCRIPTED.to_owned());
        }
        Ok(vec![ConfigOption {
            id: MODEL.to_owned(),
            name: "Model".to_owned(),
            category: "model".to_owned(),
            kind: "select".to_owned(),
            current_value: current,
            options,
        }])
    }

    /// `session/set_config_option`: `model` is changed on the live agent (made live again first
    /// when it is not); the answer is every option as it now is.
    pub(super) async fn set_config_option(
        &self,
        p: SetConfigOptionRequest,
    ) -> Result<SetConfigOptionResponse, RpcError> {
        if p.config_id != MODEL {
            return Err(RpcError::params(format!(
                "configId: unknown option {:?}; dsh's option is \"model\"",
                p.config_id
            )));
        }
        let spec = if p.value == SCRIPTED {
            if self.model.script_json.is_empty() {
                return Err(RpcError::params(
                    "value: the scripted model needs a script: start dshctl acp with --script FILE or --demo",
                ));
            }
            v1::ModelSpec {
                provider: SCRIPTED.to_owned(),
                model: String::new(),
                script_json: self.model.script_json.clone(),
            }
        } else if let Some(model) = p.value.strip_prefix("openai/").filter(|m| !m.is_empty()) {
            v1::ModelSpec {
                provider: "openai".to_owned(),
                model: model.to_owned(),
                script_json: String::new(),
            }
        } else {
            return Err(RpcError::params(format!(
                "value: unknown model {:?}; the values are \"scripted\" and \"openai/<model>\"",
                p.value
            )));
        };
        let info = self
            .configure(v1::ConfigureAgentRequest {
                agent_id: p.session_id.clone(),
                model: Some(spec.clone()),
                sandbox: None,
                approval: v1::ApprovalPolicy::Unspecified as i32,
            })
            .await?;
        self.remember_model(&p.session_id, spec);
        Ok(SetConfigOptionResponse {
            config_options: self.config_options(&info).await?,
        })
    }

    /// Tells the editor the session's options as they now are (after it was made live again,
    /// perhaps on another model).
    pub(super) async fn config_changed(&self, session_id: &str) {
        let Ok(client) = self.client().await else {
            return;
        };
        let info = client
            .agents()
            .get(v1::GetAgentRequest {
                agent_id: session_id.to_owned(),
            })
            .await;
        let Ok(info) = info else {
            return;
        };
        if let Ok(config_options) = self.config_options(&info.into_inner()).await {
            let update = SessionUpdate::ConfigOptionUpdate { config_options };
            self.update(session_id, &update).await;
        }
    }
}

/// The option value of a provider and model.
fn value_of(provider: &str, model: &str) -> String {
    if provider == SCRIPTED {
        SCRIPTED.to_owned()
    } else {
        format!("{provider}/{model}")
    }
}

/// What the editor shows for a value.
fn label(value: &str) -> String {
    match value.split_once('/') {
        Some((_, model)) => model.to_owned(),
        None => "Scripted (keyless demo)".to_owned(),
    }
}
