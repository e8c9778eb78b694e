//! The registry's side of session metadata: naming and archiving a session, live or stored, and
//! deleting a stored one. A live session's metadata events are logged by its agent (a session has
//! one writer); a stored one's are appended by the backend.

use super::error::AgentError;
use super::registry::{AgentRegistry, stored_error};
use dsh_session::{EventData, SessionId, SessionMeta, check_title};

impl AgentRegistry {
    /// Names the session `id`: a `session/title` event in its own log. Returns the metadata after.
    pub async fn set_title(&self, id: &SessionId, title: &str) -> Result<SessionMeta, AgentError> {
        let title = check_title(title)?;
        self.log_meta(id, EventData::SessionTitle { title }).await
    }

    /// Archives the session `id` (hidden from the default listing), or takes it back.
    pub async fn set_archived(
        &self,
        id: &SessionId,
        archived: bool,
    ) -> Result<SessionMeta, AgentError> {
        self.log_meta(id, EventData::SessionArchived { archived })
            .await
    }

    /// The metadata of the session `id`, live or stored.
    pub async fn meta(&self, id: &SessionId) -> Result<SessionMeta, AgentError> {
        if let Ok(agent) = self.get(id) {
            return Ok(agent.read_log(|log| SessionMeta::of(log.header(), log.events())));
        }
        let backend = self.services().persistence.backend();
        backend
            .meta(id)
            .await
            .map_err(stored_error)?
            .ok_or_else(|| AgentError::SessionNotFound(id.clone()))
    }

    async fn log_meta(&self, id: &SessionId, data: EventData) -> Result<SessionMeta, AgentError> {
        if let Ok(agent) = self.get(id) {
            agent.append(data);
            agent.checkpoint(self.services()).await?;
            return Ok(agent.read_log(|log| SessionMeta::of(log.header(), log.events())));
        }
        let backend = self.services().persistence.backend();
        match data {
            EventData::SessionTitle { title } => backend.set_title(id, &title).await,
            EventData::SessionArchived { archived } => backend.set_archived(id, archived).await,
            _ => Ok(()),
        }
        .map_err(stored_error)?;
        backend
            .meta(id)
            .await
            .map_err(stored_error)?
            .ok_or_else(|| AgentError::SessionNotFound(id.clone()))
    }

    /// Deletes the stored session `id` from the active backend: its log and what the backend
    /// derived from it. Refused while an agent has it live.
    pub async fn delete(&self, id: &SessionId) -> Result<(), AgentError> {
        if self.get(id).is_ok() {
            return Err(AgentError::Live(id.clone()));
        }
        let handle = &self.services().persistence;
        handle.backend().delete(id).await.map_err(stored_error)?;
        handle.forget_header(id);
        self.services().hooks.delete_transcript(id);
        tracing::info!(session = %id, "session deleted");
        Ok(())
    }
}
