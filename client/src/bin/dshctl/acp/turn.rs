//! `session/prompt`, `session/cancel` and permission requests: a turn's events become updates,
//! its approval requests `session/request_permission`s answered with `Agents.Approve`, its end
//! the `stopReason`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use dsh_client::refusal::Refusal;
use dsh_proto::v1;
use serde_json::value::RawValue;
use tokio::sync::oneshot;
use tokio_stream::StreamExt;

use super::Bridge;
use super::jsonrpc::RpcError;
use super::schema::{
    BlockType, ContentBlock, PermissionOption, PermissionOptionKind, PermissionOutcome,
    PromptRequest, PromptResponse, RequestPermissionRequest, RequestPermissionResponse,
};
use super::updates::{Ask, Output, Translator, stop_reason};

/// The permission options offered for every request; their ids are what the answer names.
const ALLOW_ONCE: &str = "allow-once";
const ALLOW_ALWAYS: &str = "allow-always";
const REJECT_ONCE: &str = "reject-once";

/// The options of every permission request.
const OPTIONS: [PermissionOption; 3] = [
    PermissionOption {
        option_id: ALLOW_ONCE,
        name: "Allow once",
        kind: PermissionOptionKind::AllowOnce,
    },
    PermissionOption {
        option_id: ALLOW_ALWAYS,
        name: "Allow always (this command, this session)",
        kind: PermissionOptionKind::AllowAlways,
    },
    PermissionOption {
        option_id: REJECT_ONCE,
        name: "Reject",
        kind: PermissionOptionKind::RejectOnce,
    },
];

impl Bridge {
    pub(super) async fn prompt(
        self: &Arc<Self>,
        p: PromptRequest,
    ) -> Result<PromptResponse, RpcError> {
        let text = prompt_text(&p.prompt)?;
        let client = self.client().await?;
        let compact = super::surface::compact_command(&text);
        let request = v1::PromptRequest {
            agent_id: p.session_id.clone(),
            text,
        };
        // `/compact [instructions]` runs a compaction turn instead of a prompt.
        let start = |request: v1::PromptRequest| {
            let mut agents = client.agents();
            let compact = compact.clone();
            async move {
                match compact {
                    Some(instructions) => {
                        agents
                            .compact(v1::CompactRequest {
                                agent_id: request.agent_id,
                                instructions,
                            })
                            .await
                    }
                    None => agents.prompt(request).await,
                }
            }
        };
        let first = start(request.clone()).await;
        let mut events = match first {
            Ok(events) => events.into_inner(),
            // Not live (dshd restarted, or another bridge closed it): made live again, and the
            // person is told so in the thread.
            Err(s) if matches!(Refusal::of(&s), Some(Refusal::AgentNotLive { .. })) => {
                let how = self.revive(&p.session_id).await?;
                self.revived_notice(&p.session_id, how).await;
                start(request).await?.into_inner()
            }
            Err(s) => return Err(s.into()),
        };
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
    ) -> Result<PromptResponse, RpcError> {
        let mut translator = Translator::new(session_id, false)
            .with_context_window(*super::lock(&self.context_window))
            .with_terminal_output(self.terminal_output.load(Ordering::Relaxed))
            .with_compaction(self.compaction.load(Ordering::Relaxed));
        // The permission requests still open, by (agent, call): a decision made elsewhere
        // withdraws them.
        let mut open: HashMap<(String, String), oneshot::Sender<()>> = HashMap::new();
        while let Some(event) = events.next().await {
            let event = event?;
            for out in translator.translate(&event) {
                match out {
                    Output::Update(update) => self.update(session_id, &update).await,
                    // Asked on the side: the stream goes on (other calls, the cancel) meanwhile.
                    Output::Ask(ask) => {
                        let (withdraw, withdrawn) = oneshot::channel();
                        open.retain(|_, w| !w.is_closed());
                        open.insert((ask.agent_id.clone(), ask.call_id.clone()), withdraw);
                        let bridge = self.clone();
                        let session = session_id.to_owned();
                        tokio::spawn(async move { bridge.ask(&session, ask, withdrawn).await });
                    }
                    // When the answer was this editor's, its request is over and this is a
                    // no-op; otherwise (dshctl approve, the timeout, a rule, a cancel) the editor
                    // is told to take the question down.
                    Output::Decided { agent_id, call_id } => {
                        if let Some(withdraw) = open.remove(&(agent_id, call_id)) {
                            let _ = withdraw.send(());
                        }
                    }
                    Output::End(reason) => {
                        return stop_reason(&reason)
                            .map(|stop_reason| PromptResponse { stop_reason })
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
    async fn ask(&self, session_id: &str, ask: Ask, withdrawn: oneshot::Receiver<()>) {
        // Withdrawn only when told so: a closed channel (the turn's stream ended) is not a
        // decision.
        let withdrawn = async {
            if withdrawn.await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let answer = self
            .peer
            .request_until::<_, RequestPermissionResponse>(
                "session/request_permission",
                RequestPermissionRequest {
                    session_id,
                    tool_call: &ask.tool_call,
                    options: &OPTIONS,
                },
                withdrawn,
            )
            .await;
        if matches!(&answer, Err(e) if e.code == super::jsonrpc::code::REQUEST_CANCELLED) {
            // Decided elsewhere: the log has the decision; nothing to answer.
            return;
        }
        let chosen = match &answer {
            Ok(RequestPermissionResponse {
                outcome: PermissionOutcome::Selected { option_id },
            }) => option_id.as_str(),
            Ok(RequestPermissionResponse {
                outcome: PermissionOutcome::Cancelled,
            })
            | Err(_) => "",
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

    pub(super) async fn cancel(&self, session_id: String) -> Result<(), RpcError> {
        self.client()
            .await?
            .agents()
            .cancel(v1::CancelAgentRequest {
                agent_id: session_id,
            })
            .await?;
        Ok(())
    }
}

/// The text dsh gets for a prompt's content blocks: text as is, resources (embedded context)
/// as their text under their URI, resource links as their URI. Images and audio are refused (the
/// bridge says it does not take them).
fn prompt_text(blocks: &[Box<RawValue>]) -> Result<String, RpcError> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        let part = match serde_json::from_str::<ContentBlock>(block.get()) {
            Ok(ContentBlock::Text { text }) => text,
            Ok(ContentBlock::ResourceLink { uri }) => format!("@{uri}"),
            Ok(ContentBlock::Resource { resource }) => match (resource.uri, resource.text) {
                (Some(uri), Some(text)) => format!("{uri}:\n```\n{text}\n```"),
                _ => {
                    return Err(RpcError::params(format!(
                        "prompt[{i}]: only text resources are supported"
                    )));
                }
            },
            Err(_) => {
                let kind = serde_json::from_str::<BlockType>(block.get())
                    .ok()
                    .and_then(|b| b.kind)
                    .filter(|k| !matches!(k.as_str(), "text" | "resource_link" | "resource"));
                return Err(RpcError::params(match kind {
                    Some(other) => format!(
                        "prompt[{i}]: content of type {other:?} is not supported (text, resource, resource_link are)"
                    ),
                    None => format!("prompt[{i}]: not a content block this bridge can read"),
                }));
            }
        };
        parts.push(part);
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
    use serde_json::{Value, json};

    fn blocks(values: &[Value]) -> Vec<Box<RawValue>> {
        values
            .iter()
            .map(|v| serde_json::value::to_raw_value(v).unwrap())
            .collect()
    }

    #[test]
    fn prompt_blocks_become_one_text_and_unsupported_ones_name_their_index() {
        let text = prompt_text(&blocks(&[
            json!({"type": "text", "text": "look at"}),
            json!({"type": "resource_link", "uri": "file:///w/a.rs", "name": "a.rs"}),
            json!({"type": "resource", "resource": {"uri": "file:///w/b.rs", "text": "fn b() {}"}}),
        ]))
        .unwrap();
        assert_eq!(
            text,
            "look at\n\n@file:///w/a.rs\n\nfile:///w/b.rs:\n```\nfn b() {}\n```"
        );
        let e = prompt_text(&blocks(&[
            json!({"type": "text", "text": "x"}),
            json!({"type": "image"}),
        ]))
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
