//! The `openai` provider's settings (the `[model]` table) and what makes them unusable.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::{DEFAULT_API_KEY_ENV, DEFAULT_BASE_URL, DEFAULT_MODEL};

/// Settings of the `openai` provider: the `[model]` table of the daemon's config, minus the
/// `provider` key that selects it.
///
/// TOML keys: `base_url`, `model`, `models`, `api_key_env`, `request_timeout_ms`,
/// `idle_timeout_ms`, `retries`, `max_backoff_ms`, `context_window`, `context_windows`. Every key is
/// optional; unknown keys are refused.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// API base URL, without `/chat/completions`. A trailing `/` is ignored and `/v1` is never
    /// added: OpenAI's base is `https://api.openai.com/v1`, DeepSeek's `https://api.deepseek.com`.
    pub base_url: String,
    /// Model name sent with each request (agents may override it).
    pub model: String,
    /// The models offered to pick from (`Models.List`, an editor's model picker). Empty: the
    /// provider's own `GET /models` list is asked for instead.
    pub models: Vec<String>,
    /// Name of the environment variable the daemon reads the key from (and scrubs from children).
    pub api_key_env: String,
    /// Ceiling on establishing a response (connect, send, response headers) per attempt.
    #[serde(rename = "request_timeout_ms", deserialize_with = "millis")]
    pub request_timeout: Duration,
    /// Once the response started: no bytes for this long ends the request.
    #[serde(rename = "idle_timeout_ms", deserialize_with = "millis")]
    pub idle_timeout: Duration,
    /// How many times a rate-limited (429), server-failed (5xx) or unconnectable request is
    /// retried before giving up; 0 disables retries.
    pub retries: u32,
    /// Longest single wait between attempts, including waits asked for by `retry-after`.
    #[serde(rename = "max_backoff_ms", deserialize_with = "millis")]
    pub max_backoff: Duration,
    /// Tokens the context of every model holds (`model.context_window`), over the shipped
    /// table; `None`: the table, else unknown.
    pub context_window: Option<u64>,
    /// Tokens the context of each named model holds (`[model.context_windows]`), over
    /// `context_window` and the table.
    pub context_windows: std::collections::BTreeMap<String, u64>,
}

/// The context windows of the default provider's models, as DeepSeek's API documentation gives
/// them ("1M"; DECISIONS.md says why 1,000,000; the config overrides them). The retired
/// `deepseek-chat`/`deepseek-reasoner` names are left out: their size is whatever a proxy that
/// still serves them says.
const SHIPPED_WINDOWS: &[(&str, u64)] = &[
    ("deepseek-v4-flash", 1_000_000),
    ("deepseek-v4-pro", 1_000_000),
];

impl OpenAiConfig {
    /// How many tokens `model`'s context holds: `[model.context_windows]`, else
    /// `model.context_window`, else the shipped table; `None` when none of them knows.
    pub fn context_window_of(&self, model: &str) -> Option<u64> {
        self.context_windows
            .get(model)
            .copied()
            .or(self.context_window)
            .or_else(|| {
                SHIPPED_WINDOWS
                    .iter()
                    .find(|(name, _)| *name == model)
                    .map(|(_, tokens)| *tokens)
            })
    }
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.to_owned(),
            model: DEFAULT_MODEL.to_owned(),
            models: Vec::new(),
            api_key_env: DEFAULT_API_KEY_ENV.to_owned(),
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(120),
            retries: 3,
            max_backoff: Duration::from_secs(30),
            context_window: None,
            context_windows: std::collections::BTreeMap::new(),
        }
    }
}

fn millis<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}

impl OpenAiConfig {
    /// Checks the values serde cannot: the URL's shape, non-empty names, non-zero timeouts. Called
    /// by [`OpenAiProvider::new`]; the config loader may call it earlier to report the file.
    pub fn validate(&self) -> Result<(), OpenAiSetupError> {
        endpoint_url(&self.base_url)?;
        if self.model.trim().is_empty() {
            return Err(OpenAiSetupError::Empty { key: "model" });
        }
        if let Some(index) = self.models.iter().position(|m| m.trim().is_empty()) {
            return Err(OpenAiSetupError::BlankModel { index });
        }
        if self.api_key_env.trim().is_empty() {
            return Err(OpenAiSetupError::Empty { key: "api_key_env" });
        }
        if self.request_timeout.is_zero() {
            return Err(OpenAiSetupError::ZeroTimeout {
                key: "request_timeout_ms",
            });
        }
        if self.idle_timeout.is_zero() {
            return Err(OpenAiSetupError::ZeroTimeout {
                key: "idle_timeout_ms",
            });
        }
        Ok(())
    }
}

/// Why an [`OpenAiProvider`] could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenAiSetupError {
    /// `base_url` is not an absolute `http`/`https` URL.
    #[error("model.base_url {url:?} is not usable: {reason}")]
    BaseUrl {
        /// The configured value.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A name that must not be empty is.
    #[error("model.{key} must not be empty")]
    Empty {
        /// The TOML key.
        key: &'static str,
    },
    /// An entry of `model.models` is blank.
    #[error(
        "model.models[{index}] is blank; list model names, or leave models out to ask the provider"
    )]
    BlankModel {
        /// Position in the list, from 0.
        index: usize,
    },
    /// A timeout is zero, which would fail every request.
    #[error("model.{key} must be greater than 0")]
    ZeroTimeout {
        /// The TOML key.
        key: &'static str,
    },
    /// The key contains characters an HTTP header cannot carry (the key itself is not shown).
    #[error(
        "the API key in {variable} contains characters that cannot be sent in an HTTP header; check the value"
    )]
    InvalidKey {
        /// The variable the key came from.
        variable: String,
    },
    /// The HTTP client could not be initialised (TLS setup).
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
}

/// `{base_url}/chat/completions`, tolerating a trailing `/`.
pub(super) fn endpoint_url(base_url: &str) -> Result<reqwest::Url, OpenAiSetupError> {
    let invalid = |reason: &str| OpenAiSetupError::BaseUrl {
        url: base_url.to_owned(),
        reason: reason.to_owned(),
    };
    let trimmed = base_url.trim().trim_end_matches('/');
    let url = reqwest::Url::parse(&format!("{trimmed}/chat/completions"))
        .map_err(|e| invalid(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid("the scheme must be http or https"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("it has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it must not have a query or fragment"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "it must not carry credentials; the key comes from api_key_env",
        ));
    }
    Ok(url)
}
