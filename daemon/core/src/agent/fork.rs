//! Forking a live or stored session into a new live agent.

use std::sync::Arc;

use super::live::Agent;
use super::model::{ModelChoice, settings_of};
use super::registry::{AgentError, AgentRegistry, Read};
use crate::hooks::SessionSource;
use crate::locks::lock;
use crate::persistence::PersistenceError;
use crate::persistence::handle::DurableCursor;
use crate::sandbox::SandboxPolicy;
use dsh_session::{
    ApprovalPolicy, EventData, SessionHeader, SessionId, SessionLog, recorded_settings,
};

impl AgentRegistry {
    /// Forks a live or stored session: a new id whose log starts with a copy of the source's
    /// completed-turn prefix, `parentSession` and `seedLength` set, running under `sandbox`.
    /// Checkpointed at once, so the fork exists on disk as soon as it is created.
    ///
    /// With `at_seq`, the copy is the log up to and including that event instead: the end of a
    /// completed step or turn (`fork_points`), otherwise [`AgentError::InvalidForkPoint`] naming
    /// the nearest valid ones. A fork at a step's end in the middle of a turn closes that turn in
    /// the fork (`turn/end {interrupted}`). The source is never written: rolling back is forking
    /// at an earlier point.
    pub async fn fork_at(
        &self,
        source: &SessionId,
        at_seq: Option<u64>,
        choice: &ModelChoice,
        sandbox: SandboxPolicy,
        approval: Option<ApprovalPolicy>,
    ) -> Result<Arc<Agent>, AgentError> {
        self.check_open()?;
        let (source_header, mut events) = match self.get(source) {
            Ok(live) => (
                live.header().as_ref().clone(),
                live.read_log(|log| log.events().to_vec()),
            ),
            Err(_) => {
                let (stored, _) = self.read_stored(source, Read::Inspect).await?;
                (stored.header, stored.events)
            }
        };
        let recorded = recorded_settings(&source_header, &events);
        let choice = self.providers.again(source, choice, recorded.as_ref())?;
        let provider = self.providers.build(&choice)?;
        let approval = approval
            .or(recorded.as_ref().map(|r| r.approval))
            .unwrap_or(self.services().approval.policy);
        let seed = match at_seq {
            None => dsh_session::completed_prefix_len(&events),
            Some(seq) => {
                let points = dsh_session::fork_points(&events);
                if points.binary_search(&seq).is_err() {
                    return Err(AgentError::InvalidForkPoint {
                        session: source.clone(),
                        seq,
                        valid: dsh_session::nearest(&points, seq),
                    });
                }
                seq + 1
            }
        };
        events.truncate(usize::try_from(seed).unwrap_or(usize::MAX));
        let closers = dsh_session::repair::close_open_turn(&events);
        let header = SessionHeader {
            parent_session: Some(source_header.id.clone()),
            seed_length: Some(seed),
            origin: source_header.origin,
            delegation_depth: source_header.delegation_depth,
            settings: Some(settings_of(provider.as_ref(), approval)),
            ..SessionHeader::new(
                SessionId::new_v7(),
                source_header.cwd.clone(),
                dsh_session::now_ms(),
            )
        };
        let mut log = SessionLog::from_parts(header, events).map_err(|e| {
            AgentError::Persistence(PersistenceError::Config(format!("fork of {source}: {e}")))
        })?;
        for closer in closers {
            log.append(closer.data);
        }
        log.append(EventData::EndSeed {});
        let agent = self.top_level(
            log,
            DurableCursor::default(),
            // A fork starts with the source's history, as Claude Code's `--resume
            // --fork-session` does, whose SessionStart says `resume`.
            SessionSource::Resume,
            provider,
            approval,
            sandbox,
        );
        let agent = self.insert(agent, "fork")?;
        if let Err(error) = agent.checkpoint(self.services()).await {
            lock(&self.agents).remove(agent.id());
            return Err(error.into());
        }
        Ok(agent)
    }
}
