//! The model picker: ACP's session configuration option `model` (category `model`), a dropdown
//! of what dshd can run for the session. Its values are `openai/<model>` when dshd has a key (the
//! model the session runs, and what `Models.List` offers: the configured list or the
//! provider's), and `scripted` when the session runs the keyless scripted model or this bridge
//! was given a script. Choosing one is `Agents.Configure` on the live agent: the same thread goes
//! on with the other model. An `openai` session also has `reasoning_effort` (category
//! `thought_level`): the request's `reasoning_effort`, or none for `default`.

use dsh_proto::v1;

use super::Bridge;
use super::jsonrpc::RpcError;
use super::schema::{
    ConfigOption, ConfigValue, SessionUpdate, SetConfigOptionRequest, SetConfigOptionResponse,
};

/// The id of the model option.
const MODEL: &str = "model";
/// The id of the reasoning effort option (category `thought_level`).
const EFFORT: &str = "reasoning_effort";
/// The value of the scripted model.
const SCRIPTED: &str = "scripted";
/// The provider of named models.
const OPENAI: &str = "openai";
/// The reasoning effort option's values and labels; `default` sends none.
const EFFORTS: [(&str, &str); 5] = [
    ("default", "Provider default"),
    ("low", "Low"),
    ("medium", "Medium"),
    ("high", "High"),
    ("max", "Max (DeepSeek)"),
];

/// The reasoning effort option of an `openai` session asking `current` (empty: none).
fn effort_option(current: &str) -> ConfigOption {
    let current = if current.is_empty() {
        "default"
    } else {
        current
    };
    ConfigOption {
        id: EFFORT.to_owned(),
        name: "Reasoning effort".to_owned(),
        category: "thought_level".to_owned(),
        kind: "select".to_owned(),
        current_value: current.to_owned(),
        options: EFFORTS
            .iter()
            .map(|(value, name)| ConfigValue {
                value: (*value).to_owned(),
                name: (*name).to_owned(),
            })
            .collect(),
    }
}

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
        if status.model_key_configured {
            for model in self.openai_models(&status.openai_model).await {
                offer(format!("openai/{model}"));
            }
        }
        if !self.model.script_json.is_empty() {
            offer(SCRIPTED.to_owned());
        }
        let mut all = vec![ConfigOption {
            id: MODEL.to_owned(),
            name: "Model".to_owned(),
            category: "model".to_owned(),
            kind: "select".to_owned(),
            current_value: current,
            options,
        }];
        if info.provider == OPENAI {
            all.push(effort_option(&info.reasoning_effort));
        }
        Ok(all)
    }

    /// The `openai` models to offer: dshd's `Models.List` (the configured list or the
    /// provider's), or `default` alone when it cannot be had.
    async fn openai_models(&self, default: &str) -> Vec<String> {
        let listed = self
            .models
            .get_or_try_init(|| async {
                let client = self.client().await.map_err(|_| ())?;
                let list = client
                    .models()
                    .list(v1::ListModelsRequest {})
                    .await
                    .map_err(|_| ())?
                    .into_inner();
                // Not kept when the provider could not be asked: the next session asks again.
                if !list.problem.is_empty() {
                    eprintln!("dshctl acp: the provider's model list: {}", list.problem);
                    return Err(());
                }
                Ok::<_, ()>(list.models.into_iter().map(|m| m.model).collect())
            })
            .await;
        match listed {
            Ok(models) => models.clone(),
            Err(()) if default.is_empty() => Vec::new(),
            Err(()) => vec![default.to_owned()],
        }
    }

    /// `session/set_config_option`: `model` is changed on the live agent (made live again first
    /// when it is not); the answer is every option as it now is.
    pub(super) async fn set_config_option(
        &self,
        p: SetConfigOptionRequest,
    ) -> Result<SetConfigOptionResponse, RpcError> {
        let spec = match p.config_id.as_str() {
            MODEL => self.model_spec(&p.value)?,
            EFFORT => self.effort_spec(&p.session_id, &p.value).await?,
            other => {
                return Err(RpcError::params(format!(
                    "configId: unknown option {other:?}; dsh's options are \"model\" and \"{EFFORT}\""
                )));
            }
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

    /// The model spec of the `model` option's `value`.
    fn model_spec(&self, value: &str) -> Result<v1::ModelSpec, RpcError> {
        let spec = if value == SCRIPTED {
            if self.model.script_json.is_empty() {
                return Err(RpcError::params(
                    "value: the scripted model needs a script: start dshctl acp with --script FILE or --demo",
                ));
            }
            v1::ModelSpec {
                provider: SCRIPTED.to_owned(),
                script_json: self.model.script_json.clone(),
                ..v1::ModelSpec::default()
            }
        } else if let Some(model) = value.strip_prefix("openai/").filter(|m| !m.is_empty()) {
            v1::ModelSpec {
                provider: OPENAI.to_owned(),
                model: model.to_owned(),
                ..v1::ModelSpec::default()
            }
        } else {
            return Err(RpcError::params(format!(
                "value: unknown model {value:?}; the values are \"scripted\" and \"openai/<model>\""
            )));
        };
        Ok(spec)
    }

    /// The model spec of the reasoning effort option's `value`: the session's model, asked to
    /// think that hard.
    async fn effort_spec(&self, session_id: &str, value: &str) -> Result<v1::ModelSpec, RpcError> {
        if !EFFORTS.iter().any(|(v, _)| *v == value) {
            return Err(RpcError::params(format!(
                "value: unknown reasoning effort {value:?}; the values are default, low, medium, high and max"
            )));
        }
        let info = self
            .client()
            .await?
            .agents()
            .get(v1::GetAgentRequest {
                agent_id: session_id.to_owned(),
            })
            .await?
            .into_inner();
        if info.provider != OPENAI {
            return Err(RpcError::params(format!(
                "configId: the session runs the {} model, which has no reasoning effort",
                info.provider
            )));
        }
        Ok(v1::ModelSpec {
            provider: OPENAI.to_owned(),
            model: info.model,
            reasoning_effort: value.to_owned(),
            ..v1::ModelSpec::default()
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
