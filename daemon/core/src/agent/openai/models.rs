//! The provider's model list: `GET {base_url}/models`, as OpenAI and DeepSeek answer it
//! (`{"object": "list", "data": [{"id": "...", ...}, ...]}`).

use reqwest::header::{self, HeaderValue};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use super::{OpenAiProvider, error_chain, whole_seconds, wire};
use crate::agent::provider::ModelError;

/// Largest `/models` answer read; real ones are a few kilobytes.
const MAX_MODELS_BODY: usize = 1024 * 1024;

/// Most models taken from one answer: a list is for a person to pick from.
const MAX_MODELS: usize = 500;

#[derive(Deserialize)]
struct ModelPage {
    data: Vec<ModelEntry>,
}

#[derive(Deserialize)]
struct ModelEntry {
    id: String,
}

impl OpenAiProvider {
    /// The models the provider offers, in its order, without duplicates or blank names. One
    /// attempt, bounded by `request_timeout_ms` as a whole: this answers a person waiting for a
    /// list, and nothing is lost when it fails (the caller falls back to the configured model).
    pub async fn models(&self) -> Result<Vec<String>, ModelError> {
        let Some(authorization) = &self.authorization else {
            return Err(ModelError::MissingKey {
                variable: self.config.api_key_env.clone(),
            });
        };
        let mut url = self.endpoint.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop().pop().push("models");
        }
        let limit = self.config.request_timeout;
        let ask = async {
            let response = self
                .client
                .get(url)
                .header(header::AUTHORIZATION, authorization.clone())
                .header(header::ACCEPT, HeaderValue::from_static("application/json"))
                .send()
                .await
                .map_err(|e| ModelError::Transport(error_chain(&e)))?;
            let status = response.status();
            let never = CancellationToken::new();
            if !status.is_success() {
                let body = self
                    .read_body(response, super::MAX_ERROR_BODY, &never)
                    .await?
                    .unwrap_or_default();
                let message = wire::error_message(&body, status.canonical_reason());
                return Err(match status.as_u16() {
                    401 | 403 => ModelError::Unauthorized {
                        variable: self.config.api_key_env.clone(),
                        status: status.as_u16(),
                        message,
                    },
                    code => ModelError::Http {
                        status: code,
                        message,
                    },
                });
            }
            let body = self.read_body(response, MAX_MODELS_BODY, &never).await??;
            parse(&body)
        };
        tokio::time::timeout(limit, ask)
            .await
            .map_err(|_elapsed| ModelError::IdleTimeout {
                seconds: whole_seconds(limit),
            })?
    }
}

/// The ids of a `/models` answer.
fn parse(body: &[u8]) -> Result<Vec<String>, ModelError> {
    let page: ModelPage = serde_json::from_slice(body).map_err(|e| {
        ModelError::Malformed(format!(
            "the provider's model list is not {{\"data\": [{{\"id\": ...}}]}}: {e}"
        ))
    })?;
    let mut models: Vec<String> = Vec::new();
    for entry in page.data {
        let id = entry.id.trim();
        if !id.is_empty() && !models.iter().any(|m| m == id) && models.len() < MAX_MODELS {
            models.push(id.to_owned());
        }
    }
    Ok(models)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_taken_in_order_without_blanks_or_repeats() {
        let body = br#"{"object":"list","data":[
            {"id":"deepseek-chat","object":"model","owned_by":"deepseek"},
            {"id":" "},{"id":"deepseek-reasoner"},{"id":"deepseek-chat"}]}"#;
        assert_eq!(parse(body).unwrap(), ["deepseek-chat", "deepseek-reasoner"]);
    }

    #[test]
    fn an_answer_of_another_shape_is_malformed_and_says_what_was_expected() {
        let error = parse(br#"{"models":["a"]}"#).unwrap_err();
        assert!(
            matches!(&error, ModelError::Malformed(m) if m.contains("\"data\"")),
            "{error:?}"
        );
    }
}
