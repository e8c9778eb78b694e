//! The `openai` model provider: OpenAI-compatible chat completions with tool calling, always
//! streamed (SSE). DeepSeek's endpoint and `deepseek-v4-flash` are the defaults.
//!
//! One request is: build the JSON body from the session's derived history, `POST` it to
//! `{base_url}/chat/completions`, retry 429 and 5xx answers (bounded, before any byte of the reply
//! was used), then read the event stream, handing text to the caller as it arrives and assembling
//! tool calls from their fragments. Every failure ends as a [`ModelError`] whose message tells a
//! person what to do.
//!
//! The provider never reads the process environment: the daemon resolves the key once at start and
//! passes it to [`OpenAiProvider::new`], so tests can inject keys and a changed environment cannot
//! change a running daemon's behaviour behind its back.

mod config;
mod models;
mod retry;
mod sse;
mod stream;
mod wire;

#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use reqwest::header::{self, HeaderMap, HeaderValue};
use tokio_util::sync::CancellationToken;

use super::provider::{
    ModelError, ModelProgress, ModelProvider, ModelReply, ModelRequest, ModelRetry,
};
use crate::call::BoxFuture;
use config::endpoint_url;
pub use config::{OpenAiConfig, OpenAiSetupError};
use dsh_session::ReasoningEffort;
use retry::{Backoff, retry_after};
use stream::{Accumulator, Flow};

/// The provider name reported by [`ModelProvider::provider`].
pub const PROVIDER_NAME: &str = "openai";

/// Default API base: DeepSeek's OpenAI-compatible endpoint (no `/v1`).
pub(crate) const DEFAULT_BASE_URL: &str = "https://api.deepseek.com";

/// Default model.
/// DeepSeek retired `deepseek-chat` and `deepseek-reasoner` on 2026-07-24; `deepseek-v4-flash` is
/// what `deepseek-chat` had routed to since V4.
pub(crate) const DEFAULT_MODEL: &str = "deepseek-v4-flash";

/// Default name of the environment variable holding the API key.
pub(crate) const DEFAULT_API_KEY_ENV: &str = "DEEPSEEK_API_KEY";

/// Largest error body read to extract the API's message; the rest is not worth the memory.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Largest non-streamed (plain JSON) reply accepted from a server that ignored `stream: true`.
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;

/// The `openai` provider. Cheap to clone (the connection pool is shared), so per-agent copies with
/// another model are made with `provider.clone().with_model(..)`.
#[derive(Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    client: reqwest::Client,
    endpoint: reqwest::Url,
    /// `Bearer <key>`, marked sensitive so reqwest and `Debug` never print it.
    authorization: Option<HeaderValue>,
    /// The agent's chosen reasoning effort; `None` sends none (the provider's default).
    reasoning_effort: Option<ReasoningEffort>,
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.endpoint.as_str())
            .field("model", &self.config.model)
            .field("api_key_env", &self.config.api_key_env)
            .field("has_key", &self.authorization.is_some())
            .finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// Builds the provider. `api_key` is the value of `config.api_key_env` as the daemon read it at
    /// start; `None` (or blank) is accepted, and every request then fails with
    /// `ModelError::MissingKey` naming the variable.
    pub fn new(config: OpenAiConfig, api_key: Option<String>) -> Result<Self, OpenAiSetupError> {
        config.validate()?;
        let endpoint = endpoint_url(&config.base_url)?;
        let authorization = match api_key.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(key) => {
                let mut value = HeaderValue::try_from(format!("Bearer {key}")).map_err(|_| {
                    OpenAiSetupError::InvalidKey {
                        variable: config.api_key_env.clone(),
                    }
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };

        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        // Redirects are refused rather than followed: reqwest would turn the POST of a 301/302
        // into a GET, and a moved API is a configuration change a person should make.
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("dshd/", env!("CARGO_PKG_VERSION")))
            .default_headers(headers);
        // A proxy from the environment must never see traffic meant for this machine (local
        // servers, the tests' mock).
        if is_loopback(&endpoint) {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|e| OpenAiSetupError::Client(error_chain(&e)))?;
        Ok(Self {
            config,
            client,
            endpoint,
            authorization,
            reasoning_effort: None,
        })
    }

    /// The same provider asking for another model (per-agent override).
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.config.model = model.into();
        self
    }

    /// The same provider asking for `effort` (per-agent choice; `None`: the provider's default).
    #[must_use]
    pub fn with_reasoning_effort(mut self, effort: Option<ReasoningEffort>) -> Self {
        self.reasoning_effort = effort;
        self
    }

    /// The configuration in force (with any model override applied).
    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    /// Whether the daemon has an API key for this provider.
    pub fn has_key(&self) -> bool {
        self.authorization.is_some()
    }

    /// The URL requests are posted to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.as_str()
    }

    async fn run(
        &self,
        request: &ModelRequest,
        cancel: &CancellationToken,
        progress: &dyn ModelProgress,
    ) -> Result<ModelReply, ModelError> {
        if cancel.is_cancelled() {
            return Err(ModelError::Cancelled);
        }
        let Some(authorization) = &self.authorization else {
            return Err(ModelError::MissingKey {
                variable: self.config.api_key_env.clone(),
            });
        };
        let body = wire::request_body(&self.config.model, self.reasoning_effort, request)
            .map_err(|e| ModelError::Malformed(format!("cannot encode the request: {e}")))?;
        let response = self.send(body, authorization, cancel, progress).await?;
        self.read_reply(response, cancel, progress).await
    }

    /// Posts the body until a 2xx response arrives, retrying what is worth retrying. Nothing of a
    /// response has been handed to the caller at this point, so retrying is safe.
    async fn send(
        &self,
        body: Vec<u8>,
        authorization: &HeaderValue,
        cancel: &CancellationToken,
        progress: &dyn ModelProgress,
    ) -> Result<reqwest::Response, ModelError> {
        let attempts = self.config.retries.saturating_add(1);
        let mut backoff = Backoff::new(self.config.max_backoff);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let send = self
                .client
                .post(self.endpoint.clone())
                .header(header::AUTHORIZATION, authorization.clone())
                .body(body.clone())
                .send();
            let sent = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(ModelError::Cancelled),
                sent = tokio::time::timeout(self.config.request_timeout, send) => sent,
            };
            let response = match sent {
                Err(_elapsed) => {
                    return Err(ModelError::IdleTimeout {
                        seconds: whole_seconds(self.config.request_timeout),
                    });
                }
                Ok(Err(error)) => {
                    // Only a connection that was never made is certainly unseen by the server; any
                    // later failure might have started a (billed) completion.
                    if error.is_connect() && attempt < attempts {
                        let wait = backoff.next_wait(None);
                        let error = error_chain(&error);
                        tracing::warn!(attempt, ?wait, %error, "model API unreachable; retrying");
                        progress.retry(&ModelRetry {
                            attempt,
                            delay: wait,
                            reason: "unreachable".to_owned(),
                        });
                        sleep_or_cancel(wait, cancel).await?;
                        continue;
                    }
                    return Err(ModelError::Transport(error_chain(&error)));
                }
                Ok(Ok(response)) => response,
            };

            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            let asked_wait = retry_after(response.headers(), SystemTime::now());
            let location = status
                .is_redirection()
                .then(|| response.headers().get(header::LOCATION)?.to_str().ok())
                .flatten()
                .map(wire::shorten);
            let (mut message, overflow) = self.error_message(response, cancel).await?;
            if let Some(location) = location {
                message = format!("redirected to {location}; set model.base_url accordingly");
            }
            let code = status.as_u16();
            let retryable = code == 429 || status.is_server_error();
            if retryable && attempt < attempts {
                let wait = backoff.next_wait(asked_wait);
                tracing::warn!(
                    status = code,
                    attempt,
                    ?wait,
                    "model API refused the request; retrying"
                );
                progress.retry(&ModelRetry {
                    attempt,
                    delay: wait,
                    reason: code.to_string(),
                });
                sleep_or_cancel(wait, cancel).await?;
                continue;
            }
            return Err(match code {
                401 | 403 => ModelError::Unauthorized {
                    variable: self.config.api_key_env.clone(),
                    status: code,
                    message,
                },
                429 => ModelError::RateLimited {
                    attempts: attempt,
                    message,
                },
                400 | 413 if overflow => ModelError::ContextOverflow { message },
                _ if retryable && attempt > 1 => ModelError::Http {
                    status: code,
                    message: format!("{message} (gave up after {attempt} attempts)"),
                },
                _ => ModelError::Http {
                    status: code,
                    message,
                },
            });
        }
    }

    /// Reads (a bounded prefix of) an error response and extracts the API's message, and
    /// whether it says the request did not fit the model's context.
    async fn error_message(
        &self,
        response: reqwest::Response,
        cancel: &CancellationToken,
    ) -> Result<(String, bool), ModelError> {
        let status = response.status();
        // A broken error body is not worth failing over: the status alone is still actionable.
        let body = self
            .read_body(response, MAX_ERROR_BODY, cancel)
            .await?
            .unwrap_or_default();
        Ok((
            wire::error_message(&body, status.canonical_reason()),
            wire::context_overflow(&body),
        ))
    }

    /// Reads a whole body, at most `limit` bytes of it, under the idle timeout. The outer
    /// `Result` is for cancellation only, so callers can treat other failures as they see fit.
    async fn read_body(
        &self,
        mut response: reqwest::Response,
        limit: usize,
        cancel: &CancellationToken,
    ) -> Result<Result<Vec<u8>, ModelError>, ModelError> {
        let mut body = Vec::new();
        loop {
            match self.next_chunk(&mut response, cancel).await {
                Err(ModelError::Cancelled) => return Err(ModelError::Cancelled),
                Err(other) => return Ok(Err(other)),
                Ok(None) => return Ok(Ok(body)),
                Ok(Some(chunk)) => {
                    let room = limit.saturating_sub(body.len());
                    body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                    if body.len() >= limit {
                        return Ok(Ok(body));
                    }
                }
            }
        }
    }

    /// The next piece of the body, under cancellation and the idle timeout.
    async fn next_chunk(
        &self,
        response: &mut reqwest::Response,
        cancel: &CancellationToken,
    ) -> Result<Option<bytes::Bytes>, ModelError> {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(ModelError::Cancelled),
            next = tokio::time::timeout(self.config.idle_timeout, response.chunk()) => next,
        };
        match next {
            Err(_elapsed) => Err(ModelError::IdleTimeout {
                seconds: whole_seconds(self.config.idle_timeout),
            }),
            Ok(Err(error)) => Err(ModelError::Transport(format!(
                "the response stream was cut off: {}",
                error_chain(&error)
            ))),
            Ok(Ok(chunk)) => Ok(chunk),
        }
    }

    /// Reads a 2xx response: an event stream, or (from servers that ignore `stream: true`) one
    /// JSON completion.
    async fn read_reply(
        &self,
        mut response: reqwest::Response,
        cancel: &CancellationToken,
        progress: &dyn ModelProgress,
    ) -> Result<ModelReply, ModelError> {
        let mut reply = Accumulator::default();
        if is_json(response.headers()) {
            let body = self.read_body(response, MAX_JSON_BODY, cancel).await??;
            reply.apply_event(&body, progress)?;
            return reply.finish(true);
        }

        let mut parser = sse::Parser::default();
        let mut done = false;
        loop {
            let chunk = match self.next_chunk(&mut response, cancel).await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                // A finished reply whose connection broke before `[DONE]` is still complete.
                Err(ModelError::Transport(_)) if reply.has_finish_reason() => break,
                Err(error) => return Err(error),
            };
            let flow = parser.feed(&chunk, |data| reply.apply_event(data, progress))?;
            if flow == Flow::Done {
                done = true;
                break;
            }
        }
        if !done {
            done = parser.finish(|data| reply.apply_event(data, progress))? == Flow::Done;
        }
        reply.finish(done)
    }
}

impl ModelProvider for OpenAiProvider {
    fn provider(&self) -> &str {
        PROVIDER_NAME
    }

    fn model(&self) -> &str {
        &self.config.model
    }

    fn reasoning_effort(&self) -> Option<ReasoningEffort> {
        self.reasoning_effort
    }

    fn context_window(&self) -> Option<u64> {
        self.config.context_window_of(&self.config.model)
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        cancel: &'a CancellationToken,
        progress: &'a dyn ModelProgress,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(self.run(request, cancel, progress))
    }
}

/// Sleeps, unless cancelled first.
async fn sleep_or_cancel(wait: Duration, cancel: &CancellationToken) -> Result<(), ModelError> {
    tokio::select! {
        biased;
        () = cancel.cancelled() => Err(ModelError::Cancelled),
        () = tokio::time::sleep(wait) => Ok(()),
    }
}

fn is_loopback(url: &reqwest::Url) -> bool {
    match url.host_str() {
        Some("localhost") => true,
        Some(host) => host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback()),
        None => false,
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

/// Seconds for a message, rounded up so a sub-second limit never reads "0 s".
fn whole_seconds(duration: Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}

/// The error and its causes on one line: reqwest's top-level message alone ("error sending
/// request") hides the useful part (connection refused, DNS failure, TLS).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
