//! What an editor shows besides the thread: the slash commands it may offer (dsh's skills and
//! `/compact`, sent with `available_commands_update` once a session is made or made live), and
//! deleting a
//! session from its list (`session/delete`).

use dsh_proto::v1;

use super::Bridge;
use super::jsonrpc::RpcError;
use super::schema::{AvailableCommand, CommandInput, Empty, SessionRequest, SessionUpdate};

/// The bridge's own slash command: compact the session's context.
pub(super) const COMPACT: &str = "compact";

/// The instructions of a `/compact` prompt (`Some(None)`: none given); `None` when `text` is not
/// one.
pub(super) fn compact_command(text: &str) -> Option<Option<String>> {
    let rest = text.trim_start().strip_prefix('/')?.strip_prefix(COMPACT)?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let rest = rest.trim();
    Some((!rest.is_empty()).then(|| rest.to_owned()))
}

impl Bridge {
    /// Sends session `session_id` the slash commands: one per skill of dshd's (`Skills.List`),
    /// whose text after the name goes to the agent with the prompt, and `compact` (the bridge's
    /// own: `Agents.Compact`, the text after it the summary's instructions). Sent after the
    /// answer that gave the editor the session; a failure to list the skills leaves `compact`
    /// alone.
    pub(super) async fn announce_commands(&self, session_id: &str) {
        let Ok(client) = self.client().await else {
            return;
        };
        let skills = match client.skills().list(v1::ListSkillsRequest {}).await {
            Ok(list) => list.into_inner().skills,
            Err(status) => {
                crate::safe::eprintln(format_args!(
                    "dshctl acp: listing skills for the editor's commands: {}",
                    status.message()
                ));
                Vec::new()
            }
        };
        let mut available_commands: Vec<AvailableCommand> = skills
            .into_iter()
            // The bridge's own command is the one `/compact` runs.
            .filter(|skill| skill.name != COMPACT)
            .map(|skill| AvailableCommand {
                name: skill.name,
                description: skill.description,
                input: CommandInput {
                    hint: "what to do".to_owned(),
                },
            })
            .collect();
        available_commands.push(AvailableCommand {
            name: COMPACT.to_owned(),
            description: "Summarise the older conversation so that it fits the model's context"
                .to_owned(),
            input: CommandInput {
                hint: "what the summary should keep (optional)".to_owned(),
            },
        });
        let update = SessionUpdate::AvailableCommandsUpdate { available_commands };
        self.update(session_id, &update).await;
    }

    /// `session/delete`: the session's agent is closed if live (its running turn cancelled), then
    /// the stored session deleted (`Persistence.Delete`). An unknown session is `-32002`.
    pub(super) async fn delete_session(&self, p: SessionRequest) -> Result<Empty, RpcError> {
        if p.session_id.is_empty() {
            return Err(RpcError::params("session/delete: sessionId: required"));
        }
        let client = self.client().await?;
        let closed = client
            .agents()
            .close(v1::CloseAgentRequest {
                agent_id: p.session_id.clone(),
            })
            .await;
        match closed {
            Ok(_) => {}
            // Not live: only stored, or unknown (which the delete says).
            Err(s) if s.code() == tonic::Code::NotFound => {}
            Err(s) => return Err(s.into()),
        }
        self.live_set().remove(&p.session_id);
        super::lock(&self.known).remove(&p.session_id);
        client
            .persistence()
            .delete(v1::DeleteSessionRequest {
                session_id: p.session_id,
            })
            .await?;
        Ok(Empty {})
    }
}

#[cfg(test)]
mod tests {
    use super::compact_command;

    #[test]
    fn compact_is_recognised_with_or_without_instructions_and_nothing_else_is() {
        assert_eq!(compact_command("/compact"), Some(None));
        assert_eq!(compact_command("  /compact  "), Some(None));
        assert_eq!(
            compact_command("/compact keep the plan\nand the paths"),
            Some(Some("keep the plan\nand the paths".into()))
        );
        assert_eq!(compact_command("/compaction"), None);
        assert_eq!(compact_command("please /compact"), None);
        assert_eq!(compact_command("compact"), None);
    }
}
