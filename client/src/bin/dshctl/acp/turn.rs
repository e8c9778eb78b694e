//! `session/prompt`, `session/cancel` and permission requests: a turn's events become updates,
//! its approval requests `session/request_permission`s answered with `Agents.Approve`, its end
//! the `stopReason`.

use std::sync::Arc;

use dsh_proto::v1;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_stream::StreamExt;

use super::jsonrpc::RpcError;
use super::updates::{Ask, Output, Translator, stop_reason};
use super::{Bridge, parse_params};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PromptParams {
    session_id: String,
    prompt: Vec<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelParams {
    session_id: String,
}

/// The permission options offered for every request; their ids are what the answer names.
const ALLOW_ONCE: &str = "allow-once";
const ALLOW_ALWAYS: &str = "allow-always";
const REJECT_ONCE: &str = "reject-once";

impl Bridge {
    pub(super) async fn prompt(self: &Arc<Self>, params: Value) -> Result<Value, RpcError> {
        let p: PromptParams = parse_params("session/prompt", params)?;
        let text = prompt_text(&p.prompt)?;
        let client = self.client().await?;
        let mut events = client
            .agents()
            .prompt(v1::PromptRequest {
                agent_id: p.session_id.clone(),
                text,
            })
            .await
            .map_err(|s| match s.code() {
                tonic::Code::NotFound => RpcError {
                    message: format!(
                        "{}; load or resume the session first (session/load, session/resume)",
                        s.message()
                    ),
                    ..s.into()
                },
                _ => s.into(),
            })?
            .into_inner();
        super::lock(&self.prompting).insert(p.session_id.clone());
        let ended = self.follow(&p.session_id, &mut events).await;
        super::lock(&self.prompting).remove(&p.session_id);
        ended
    }

    /// Turns the prompt's events into updates and permission requests until the turn ends.
    async fn follow(
        self: &Arc<Self>,
        session_id: &str,
        events: &mut tonic::Streaming<v1::Event>,
    ) -> Result<Value, RpcError> {
        let mut translator = Translator::new(session_id, false);
        while let Some(event) = events.next().await {
            let event = event?;
            for out in translator.translate(&event) {
                match out {
                    Output::Update(update) => self.update(session_id, update).await,
                    // Asked on the side: the stream goes on (other calls, the cancel) meanwhile.
                    Output::Ask(ask) => {
                        let bridge = self.clone();
                        let session = session_id.to_owned();
                        tokio::spawn(async move { bridge.ask(&session, ask).await });
                    }
                    Output::End(data) => {
                        return stop_reason(&data)
                            .map(|reason| json!({"stopReason": reason}))
                            .map_err(RpcError::internal);
                    }
                }
            }
        }
        Err(RpcError::internal(
            "dshd ended the turn's stream before the turn ended (is it shutting down?)",
        ))
    }

    /// Asks the person about one approval request and hands the answer to dsh. A client that
    /// cannot answer (an error, the cancelled outcome) denies; one that never answers leaves it to
    /// dsh's timeout, which denies too.
    async fn ask(&self, session_id: &str, ask: Ask) {
        let options = json!([
            {"optionId": ALLOW_ONCE, "name": "Allow once", "kind": "allow_once"},
            {"optionId": ALLOW_ALWAYS, "name": "Allow always (this command, this session)", "kind": "allow_always"},
            {"optionId": REJECT_ONCE, "name": "Reject", "kind": "reject_once"},
        ]);
        let answer = self
            .peer
            .request(
                "session/request_permission",
                json!({"sessionId": session_id, "toolCall": ask.tool_call, "options": options}),
            )
            .await;
        let chosen = match &answer {
            Ok(result) if result["outcome"]["outcome"] == "selected" => {
                result["outcome"]["optionId"].as_str().unwrap_or_default()
            }
            _ => "",
        };
        let (decision, scope, reason) = match chosen {
            ALLOW_ONCE => (v1::ApprovalDecision::Allow, v1::ApprovalScope::Once, ""),
            ALLOW_ALWAYS => (v1::ApprovalDecision::Allow, v1::ApprovalScope::Session, ""),
            REJECT_ONCE => (
                v1::ApprovalDecision::Deny,
                v1::ApprovalScope::Once,
                "rejected in the editor",
            ),
            _ => (
                v1::ApprovalDecision::Deny,
                v1::ApprovalScope::Once,
                "the editor did not allow it",
            ),
        };
        let Ok(client) = self.client().await else {
            return;
        };
        let approved = client
            .agents()
            .approve(v1::ApproveRequest {
                agent_id: ask.agent_id,
                call_id: ask.call_id.clone(),
                decision: decision as i32,
                reason: reason.to_owned(),
                scope: scope as i32,
            })
            .await;
        match approved {
            // Timed out, cancelled or answered elsewhere first: the log says what happened.
            Err(s) if s.code() == tonic::Code::NotFound => {}
            Err(s) => crate::safe::eprintln(format_args!(
                "dshctl acp: answering the approval of {}: {}",
                ask.call_id,
                s.message()
            )),
            Ok(_) => {}
        }
    }

    pub(super) async fn cancel(&self, params: Value) -> Result<(), RpcError> {
        let p: CancelParams = parse_params("session/cancel", params)?;
        self.client()
            .await?
            .agents()
            .cancel(v1::CancelAgentRequest {
                agent_id: p.session_id,
            })
            .await?;
        Ok(())
    }
}

/// The text dsh gets for a prompt's content blocks: text as is, resources (embedded context)
/// as their text under their URI, resource links as their URI. Images and audio are refused (the
/// bridge says it does not take them).
fn prompt_text(blocks: &[Value]) -> Result<String, RpcError> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().map(str::to_owned),
            Some("resource_link") => block["uri"].as_str().map(|uri| format!("@{uri}")),
            Some("resource") => {
                let resource = &block["resource"];
                match (resource["uri"].as_str(), resource["text"].as_str()) {
                    (Some(uri), Some(text)) => Some(format!("{uri}:\n```\n{text}\n```")),
                    _ => {
                        return Err(RpcError::params(format!(
                            "prompt[{i}]: only text resources are supported"
                        )));
                    }
                }
            }
            Some(other) => {
                return Err(RpcError::params(format!(
                    "prompt[{i}]: content of type {other:?} is not supported (text, resource, resource_link are)"
                )));
            }
            None => None,
        };
        match part {
            Some(part) => parts.push(part),
            None => {
                return Err(RpcError::params(format!(
                    "prompt[{i}]: not a content block this bridge can read"
                )));
            }
        }
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(RpcError::params(
            "prompt: empty; give at least one text block",
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_blocks_become_one_text_and_unsupported_ones_name_their_index() {
        let text = prompt_text(&[
            json!({"type": "text", "text": "look at"}),
            json!({"type": "resource_link", "uri": "file:///w/a.rs", "name": "a.rs"}),
            json!({"type": "resource", "resource": {"uri": "file:///w/b.rs", "text": "fn b() {}"}}),
        ])
        .unwrap();
        assert_eq!(
            text,
            "look at\n\n@file:///w/a.rs\n\nfile:///w/b.rs:\n```\nfn b() {}\n```"
        );
        let e = prompt_text(&[
            json!({"type": "text", "text": "x"}),
            json!({"type": "image"}),
        ])
        .unwrap_err();
        assert!(e.message.starts_with("prompt[1]: "), "{}", e.message);
        assert!(
            prompt_text(&[])
                .unwrap_err()
                .message
                .starts_with("prompt: ")
        );
    }
}
