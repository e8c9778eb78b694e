//! The turn's compaction points (CONTRACTS §7.1): before a step whose request would pass the
//! threshold, after the provider refused a request as too long (compact, then ask once more),
//! and the turn that only compacts (`Agents.Compact`).

use super::{ToolSet, TurnRun};
use crate::agent::compaction::{Compaction, CompactionError};
use crate::agent::gauge;
use crate::agent::provider::{ModelError, ModelReply, ModelRequest};
use dsh_session::{CompactionTrigger, EventData, TurnEndReason};

/// Why a step got no reply: the model request failed, or what it led to (a compaction that
/// failed, automatic compaction off) ended the turn.
pub(super) enum StepFailure {
    Model(ModelError),
    Ended(TurnEndReason),
}

/// A step's request and its size in bytes, measured once when a figure comes of it (a known
/// window, or the provider's usage).
pub(super) struct MeasuredRequest {
    pub request: ModelRequest,
    pub bytes: Option<u64>,
}

impl TurnRun {
    /// [`ask_model`](Self::ask_model), and when the provider refuses the request as longer than
    /// the model's context: compact and ask once more (automatic compaction on), or end the turn
    /// naming the setting that would have (off).
    pub(super) async fn ask_model_or_compact(
        &self,
        step: u32,
        tools: &ToolSet,
        request: MeasuredRequest,
    ) -> Result<ModelReply, StepFailure> {
        match self.ask_model(step, &request).await {
            Err(ModelError::ContextOverflow { message }) => {
                if !self.services.compaction.auto {
                    return Err(StepFailure::Ended(TurnEndReason::Error {
                        message: format!(
                            "the conversation no longer fits the model's context window ({message}); \
                             automatic compaction is off (compaction.auto = false in dshd's \
                             config): compact it with `dshctl compact`, or start a new session"
                        ),
                    }));
                }
                // The refused request's size (estimated as every request is).
                let bytes = request
                    .bytes
                    .unwrap_or_else(|| gauge::request_bytes(&request.request));
                let refused = self.agent.gauge(|g| g.tokens(bytes));
                self.compact(
                    CompactionTrigger::Auto,
                    None,
                    Some(refused),
                    &request.request,
                )
                .await
                .map_err(StepFailure::Ended)?;
                self.ask_model(step, &self.measured_request(tools))
                    .await
                    .map_err(StepFailure::Model)
            }
            other => other.map_err(StepFailure::Model),
        }
    }

    /// The next step's request, compacted first when it would fill more of the model's window
    /// than the threshold allows (automatic compaction on, and the window known). The turn's end
    /// reason when the compaction failed.
    pub(super) async fn compact_if_full(
        &self,
        tools: &ToolSet,
    ) -> Result<MeasuredRequest, TurnEndReason> {
        let request = self.measured_request(tools);
        let settings = self.services.compaction;
        let (Some(window), Some(bytes)) = (self.agent.provider().context_window(), request.bytes)
        else {
            return Ok(request);
        };
        let tokens = self.agent.gauge(|g| g.tokens(bytes));
        if !settings.auto || tokens * 100 <= window * u64::from(settings.threshold_percent) {
            return Ok(request);
        }
        self.compact(CompactionTrigger::Auto, None, None, &request.request)
            .await?;
        Ok(self.measured_request(tools))
    }

    /// Runs a compaction; the turn's end reason when it failed.
    async fn compact(
        &self,
        trigger: CompactionTrigger,
        instructions: Option<String>,
        refused_at: Option<u64>,
        base: &ModelRequest,
    ) -> Result<(), TurnEndReason> {
        let compaction = Compaction {
            agent: &self.agent,
            services: &self.services,
            turn: Some(self.turn),
            cancel: &self.cancel,
            trigger,
            instructions,
            refused_at,
        };
        match compaction.run(base).await {
            Ok(()) => Ok(()),
            // Nothing to compact on its own (a window smaller than the newest step): the request
            // goes as it is, and the provider says whether it fits.
            Err(CompactionError::NothingToCompact) if trigger == CompactionTrigger::Auto => Ok(()),
            // A PreCompact hook skipped a compaction the threshold asked for (as Claude Code does):
            // the request goes uncompacted. One the provider's refusal asked for fails the turn.
            Err(CompactionError::Blocked { .. })
                if trigger == CompactionTrigger::Auto && refused_at.is_none() =>
            {
                Ok(())
            }
            Err(CompactionError::Cancelled | CompactionError::Model(ModelError::Cancelled)) => {
                Err(self.aborted())
            }
            Err(error) => Err(TurnEndReason::Error {
                message: format!("cannot compact the context: {error}"),
            }),
        }
    }

    /// A turn that compacts the context and does nothing else.
    pub(super) async fn compact_only(&mut self, instructions: Option<String>) -> TurnEndReason {
        self.log(EventData::TurnStart { turn: self.turn });
        let tools = self.tools().await;
        match self
            .compact(
                CompactionTrigger::Manual,
                instructions,
                None,
                &self.request(&tools),
            )
            .await
        {
            Ok(()) => TurnEndReason::Completed,
            Err(reason) => reason,
        }
    }
}
