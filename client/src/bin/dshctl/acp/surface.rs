//! What an editor shows besides the thread: the slash commands it may offer (dsh's skills, sent
//! with `available_commands_update` once a session is made or made live), and deleting a
//! session from its list (`session/delete`).

use dsh_proto::v1;

use super::Bridge;
use super::jsonrpc::RpcError;
use super::schema::{AvailableCommand, CommandInput, Empty, SessionRequest, SessionUpdate};

impl Bridge {
    /// Sends session `session_id` the slash commands: one per skill of dshd's (`Skills.List`),
    /// whose text after the name goes to the agent with the prompt. Sent after the answer that
    /// gave the editor the session, when there is a skill; a failure only costs the editor its
    /// command list.
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
                return;
            }
        };
        if skills.is_empty() {
            // Nothing to offer: no update (an editor starts with no commands).
            return;
        }
        let available_commands = skills
            .into_iter()
            .map(|skill| AvailableCommand {
                name: skill.name,
                description: skill.description,
                input: CommandInput {
                    hint: "what to do".to_owned(),
                },
            })
            .collect();
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
