//! The model-provider seam: one trait that the loop asks for the next step, whatever answers it (the
//! keyless scripted provider, or an OpenAI-compatible API).

use tokio_util::sync::CancellationToken;

use crate::call::{BoxFuture, ToolSchema};
use dsh_session::history::HistoryMessage;
use dsh_session::{SessionId, ToolCallRequest, Usage};

/// Which provider and model an agent runs. At creation `None` fields take the daemon's defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelChoice {
    /// `scripted` or `openai`.
    pub provider: Option<String>,
    /// Model name (providers that have one).
    pub model: Option<String>,
    /// Reasoning effort (the `openai` provider). `None`: not named (at creation the provider's
    /// default; going live again or reconfigured, what the session ran with); `Some(None)`: the
    /// provider's default, named.
    pub reasoning_effort: Option<Option<dsh_session::ReasoningEffort>>,
    /// Scripted provider: the script as JSON text.
    pub script: Option<String>,
}

/// One model request, built from the session log.
#[derive(Debug, Clone)]
pub struct ModelRequest {
    /// The session making the request (providers may send it as a header).
    pub session_id: SessionId,
    /// System prompt.
    pub system: String,
    /// The history derived from the log, in order.
    pub messages: std::sync::Arc<Vec<HistoryMessage>>,
    /// Tools the model may call.
    pub tools: Vec<ToolSchema>,
}

/// Why the model stopped producing output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// A complete answer.
    Stop,
    /// The model wants tool results.
    ToolCalls,
    /// The output limit was reached.
    Length,
}

/// The model's answer for one step.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    /// Text (may be empty).
    pub text: String,
    /// The model's reasoning before its answer, when the provider returns it (empty
    /// otherwise): logged as `assistant/thought`, never part of the history sent back.
    pub reasoning: String,
    /// Tool calls, in the model's order.
    pub calls: Vec<ToolCallRequest>,
    /// Token usage, when the provider reports it.
    pub usage: Option<Usage>,
    /// Why the model stopped.
    pub finish: FinishReason,
}

/// Why a model request failed. Messages are written for the person reading the turn's end reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The scripted model has no reply left.
    #[error(
        "scripted model: the script is exhausted (it had {replies} replies); add replies or start a new agent"
    )]
    ScriptExhausted {
        /// Number of replies the script had.
        replies: usize,
    },
    /// The API key variable is not set in the daemon's environment.
    #[error(
        "no API key: set {variable} in dshd's environment (e.g. `systemctl --user edit dshd`) and restart it"
    )]
    MissingKey {
        /// The environment variable that should hold the key.
        variable: String,
    },
    /// The API refused the key.
    #[error("the model API rejected the key from {variable} (HTTP {status}): {message}")]
    Unauthorized {
        /// The environment variable the key came from.
        variable: String,
        /// 401 or 403.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// Rate limited, and the bounded retries ran out.
    #[error(
        "the model API is rate limiting requests (HTTP 429) after {attempts} attempts: {message}"
    )]
    RateLimited {
        /// Attempts made.
        attempts: u32,
        /// The API's message.
        message: String,
    },
    /// The request is longer than the model's context window (the API said so).
    #[error("the conversation no longer fits the model's context window: {message}")]
    ContextOverflow {
        /// The API's message.
        message: String,
    },
    /// Any other HTTP error status.
    #[error("the model API answered HTTP {status}: {message}")]
    Http {
        /// The status.
        status: u16,
        /// The API's message.
        message: String,
    },
    /// The response stream could not be understood.
    #[error("the model API sent a malformed response: {0}")]
    Malformed(String),
    /// The connection failed or broke off.
    #[error("cannot reach the model API: {0}")]
    Transport(String),
    /// No data arrived for too long.
    #[error("the model API sent nothing for {seconds} s; giving up")]
    IdleTimeout {
        /// The idle limit.
        seconds: u64,
    },
    /// The request was cancelled.
    #[error("the model request was cancelled")]
    Cancelled,
}

/// A retry the provider is about to wait for: the attempt that failed, how long it waits before
/// the next, and why (`429`, `503`, `unreachable`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRetry {
    /// The attempt that failed (1 for the first request).
    pub attempt: u32,
    /// The wait before the next attempt.
    pub delay: std::time::Duration,
    /// Why: the HTTP status of the refusal, or `unreachable` when no connection was made.
    pub reason: String,
}

/// What a provider reports while it answers: text and reasoning as they stream, and the retries
/// it waits for.
/// A closure `Fn(&str)` is one that only takes the text.
pub trait ModelProgress: Send + Sync {
    /// Text as it streams (providers that do not stream call it once with the whole text).
    fn text(&self, text: &str);

    /// The model's reasoning as it streams, where the provider streams it (the reply carries
    /// all of it either way).
    fn thought(&self, text: &str) {
        let _ = text;
    }

    /// The provider waits `retry.delay` before trying again.
    fn retry(&self, retry: &ModelRetry) {
        let _ = retry;
    }
}

impl<F: Fn(&str) + Send + Sync> ModelProgress for F {
    fn text(&self, text: &str) {
        self(text);
    }
}

/// Something that answers model requests.
pub trait ModelProvider: Send + Sync + std::fmt::Debug {
    /// Provider name, e.g. `scripted` or `openai`.
    fn provider(&self) -> &str;

    /// Model name, e.g. `deepseek-v4-flash` (`script` for the scripted provider).
    fn model(&self) -> &str;

    /// The reasoning effort it asks of the model; `None`: the provider's default.
    fn reasoning_effort(&self) -> Option<dsh_session::ReasoningEffort> {
        None
    }

    /// How many tokens the model's context holds, when known (config, or the shipped table of
    /// the provider's models); `None`: only the provider's refusal says when it is full.
    fn context_window(&self) -> Option<u64> {
        None
    }

    /// The model a child spawned by this agent's call `call_id` runs: by default the same
    /// provider, model and reasoning effort. (The scripted provider answers with the script that call carried.)
    fn child_choice(&self, call_id: &str) -> ModelChoice {
        let _ = call_id;
        ModelChoice {
            provider: Some(self.provider().to_owned()),
            model: Some(self.model().to_owned()),
            reasoning_effort: Some(self.reasoning_effort()),
            script: None,
        }
    }

    /// Answers one request, telling `progress` of text as it streams and of retries it waits
    /// for. Must return promptly with `ModelError::Cancelled` when `cancel` fires, aborting any
    /// network request.
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
        progress: &'a dyn ModelProgress,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>>;
}
