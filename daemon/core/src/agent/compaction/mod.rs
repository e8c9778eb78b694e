//! Context compaction (CONTRACTS §7.1): when a session's history no longer fits its model (or a
//! person asks), old oversized tool results are sent shortened and the older span is replaced by
//! a summary the model writes. Nothing is rewritten: one `compaction/end` event says what
//! changed, and every reader of the log derives the same history from it
//! ([`dsh_session::history::derive`]).

mod plan;
mod summary;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::gauge::{history_bytes, overhead_bytes, request_bytes};
use super::hook_run::run_hooks;
use super::live::Agent;
use super::provider::{ModelError, ModelRequest};
use super::services::AgentServices;
use crate::hooks::{Decision, HookEvent, SessionSource};
use dsh_session::history::{HistoryMessage, derive_with};
use dsh_session::{CompactionTrigger, Event, EventData};

/// Bytes kept of each pruned tool result (its first and last half).
const KEEP_BYTES: u64 = 2048;

/// The share of the window (percent) the verbatim tail may take.
const TAIL_PERCENT: u64 = 25;

/// Pruning alone is enough when it brings the request under this share of the window (percent):
/// below it, the next compaction is far away.
const PRUNED_ENOUGH_PERCENT: u64 = 50;

/// A single summary request may fill this share of the window (percent); a longer history is
/// summarised in pieces of half the window.
const SUMMARY_REQUEST_PERCENT: u64 = 90;

/// Why a compaction failed; the history is as it was.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CompactionError {
    /// The summary request failed.
    #[error("the summary request failed: {0}")]
    Model(#[from] ModelError),
    /// The model answered the summary request with no text.
    #[error("the model answered the summary request with no text")]
    EmptySummary,
    /// Nothing is old enough to prune or summarise.
    #[error(
        "nothing to compact: the history is the newest step alone, and no output is long enough to shorten"
    )]
    NothingToCompact,
    /// The summary would not make the history shorter.
    #[error(
        "the summary did not shrink the history (about {before} → {after} tokens), so it was not used"
    )]
    DidNotShrink {
        /// Estimated tokens before.
        before: u64,
        /// Estimated tokens with the summary.
        after: u64,
    },
    /// A Claude Code PreCompact hook blocked it (exit 2 or `decision: "block"`).
    #[error("a PreCompact hook blocked it: {reason}")]
    Blocked {
        /// The hooks' reason, or one naming the event.
        reason: String,
    },
    /// The turn (or the compaction) was cancelled.
    #[error("cancelled")]
    Cancelled,
}

/// One compaction of an agent, run by [`Compaction::run`].
pub(crate) struct Compaction<'a> {
    /// Whose history is compacted; its log gets the events, its model the summary request.
    pub agent: &'a Arc<Agent>,
    /// Its hooks and the rest the loop shares.
    pub services: &'a AgentServices,
    /// The turn it runs in, for the hooks' records.
    pub turn: Option<u32>,
    /// The turn's cancellation: a cancel stops the summary request.
    pub cancel: &'a CancellationToken,
    /// Manual or automatic (PreCompact's `trigger`; a manual one keeps only the newest step).
    pub trigger: CompactionTrigger,
    /// A person's instructions for the summary.
    pub instructions: Option<String>,
    /// The provider refused a request of this many tokens as too long: the window is smaller
    /// than that, whatever dshd was told (a wrong table entry, a proxy's own limit).
    pub refused_at: Option<u64>,
}

/// A compaction's budgets, in request bytes.
#[derive(Debug, Clone, Copy)]
struct Sizes {
    /// The newest messages that fit in this stay verbatim.
    tail_bytes: u64,
    /// The model's window, when known.
    window_bytes: Option<u64>,
}

/// What a planned compaction needs from the log, read under one lock.
struct Planned {
    plan: plan::Plan,
    /// The history with this compaction's pruning.
    pruned: Vec<HistoryMessage>,
    /// The span to summarise, with this compaction's pruning, when there is one.
    span: Vec<HistoryMessage>,
}

impl Compaction<'_> {
    /// Runs it: `compaction/start`, PreCompact hooks, the plan, the summary, `compaction/end`,
    /// then PostCompact and SessionStart (`compact`) hooks; `base` is the request the agent
    /// would send next (its system prompt and tools are the summary request's prefix). On
    /// failure `compaction/end` carries the error and nothing changes.
    ///
    /// Nothing is logged when there is nothing to compact (the newest step alone, no long
    /// output): an automatic compaction then lets the request go as it is.
    pub(crate) async fn run(self, base: &ModelRequest) -> Result<(), CompactionError> {
        let agent = self.agent;
        let sizes = self.sizes(base);
        let planned = agent.read_log(|log| plan_from(log.events(), sizes.tail_bytes));
        if planned.plan.pruned.is_empty() && planned.plan.through.is_none() {
            return Err(CompactionError::NothingToCompact);
        }
        agent.append(EventData::CompactionStart {
            trigger: self.trigger,
            instructions: self.instructions.clone(),
        });
        let pre = self
            .hooks(HookEvent::PreCompact {
                trigger: self.trigger,
                custom_instructions: self.instructions.clone().unwrap_or_default(),
            })
            .await;
        let before = agent.gauge(|g| g.tokens(request_bytes(base)));
        let decided = match pre.outcome.decision {
            Decision::Deny => Err(CompactionError::Blocked {
                reason: pre.outcome.reason.unwrap_or_default(),
            }),
            _ => self.decide(base, before, sizes, planned).await,
        };
        match decided {
            Ok(end) => {
                let summary = match &end {
                    EventData::CompactionEnd { summary, .. } => summary.clone(),
                    _ => None,
                };
                agent.append(end);
                self.hooks(HookEvent::PostCompact {
                    trigger: self.trigger,
                    compact_summary: summary.unwrap_or_default(),
                })
                .await;
                let start = self
                    .hooks(HookEvent::SessionStart {
                        source: SessionSource::Compact,
                    })
                    .await;
                agent.add_env(&self.services.executor, &start.env);
                agent.log_hook_context(&start.outcome.additional_context);
                Ok(())
            }
            Err(error) => {
                agent.append(EventData::CompactionEnd {
                    trigger: self.trigger,
                    summary: None,
                    replaces_through: None,
                    keeps: None,
                    pruned: Vec::new(),
                    keep_bytes: KEEP_BYTES,
                    tokens_before: before,
                    tokens_after: before,
                    error: Some(error.to_string()),
                });
                Err(error)
            }
        }
    }

    async fn hooks(&self, event: HookEvent) -> crate::hooks::HookRun {
        run_hooks(self.agent, self.services, self.turn, self.cancel, event).await
    }

    /// The budgets of this compaction, in request bytes: the window is the smaller of what dshd
    /// knows and what the provider refused.
    fn sizes(&self, base: &ModelRequest) -> Sizes {
        let agent = self.agent;
        let window = match (agent.provider().context_window(), self.refused_at) {
            (Some(known), Some(refused)) => Some(known.min(refused)),
            (known, refused) => known.or(refused),
        };
        agent.gauge(|g| Sizes {
            // A person who asks wants the conversation summarised: only the newest step stays.
            tail_bytes: match (self.trigger, window) {
                (CompactionTrigger::Manual, _) => 0,
                (CompactionTrigger::Auto, Some(w)) => g.bytes(w * TAIL_PERCENT / 100),
                (CompactionTrigger::Auto, None) => request_bytes(base) * TAIL_PERCENT / 100,
            },
            window_bytes: window.map(|w| g.bytes(w)),
        })
    }

    /// The `compaction/end` of `planned`, or why there is none.
    async fn decide(
        &self,
        base: &ModelRequest,
        before: u64,
        sizes: Sizes,
        planned: Planned,
    ) -> Result<EventData, CompactionError> {
        let agent = self.agent;
        let window_bytes = sizes.window_bytes;
        let overhead = overhead_bytes(&base.system, &base.tools);
        let plan = planned.plan;
        let pruned_bytes = overhead + history_bytes(&planned.pruned);
        let enough = window_bytes.is_some_and(|w| pruned_bytes <= w * PRUNED_ENOUGH_PERCENT / 100);
        let summary =
            if plan.through.is_none() || (self.trigger == CompactionTrigger::Auto && enough) {
                None
            } else {
                Some(
                    self.summarise(base, planned.pruned, &planned.span, window_bytes)
                        .await?,
                )
            };
        let mut end = EventData::CompactionEnd {
            trigger: self.trigger,
            replaces_through: summary.as_ref().and(plan.through),
            keeps: summary.as_ref().and(plan.keeps),
            summary,
            pruned: plan.pruned,
            keep_bytes: KEEP_BYTES,
            tokens_before: before,
            tokens_after: 0,
            error: None,
        };
        let after = agent.read_log(|log| {
            let next = Event {
                seq: log.len(),
                time: 0,
                data: end.clone(),
            };
            overhead + history_bytes(&derive_with(log.events(), Some(&next)))
        });
        let after = agent.gauge(|g| g.tokens(after));
        if after >= before {
            return Err(CompactionError::DidNotShrink { before, after });
        }
        if let EventData::CompactionEnd { tokens_after, .. } = &mut end {
            *tokens_after = after;
        }
        agent.gauge(|g| g.set_used(after));
        Ok(end)
    }

    /// The summary: one request on the conversation's own prefix when it fits (or the window is
    /// unknown), else the span in pieces. A single request the provider refuses as too long is
    /// retried in pieces.
    async fn summarise(
        &self,
        base: &ModelRequest,
        pruned: Vec<HistoryMessage>,
        span: &[HistoryMessage],
        window_bytes: Option<u64>,
    ) -> Result<String, CompactionError> {
        let provider = self.agent.provider();
        let instructions = self.instructions.as_deref();
        let request = ModelRequest {
            messages: Arc::new(pruned),
            ..base.clone()
        };
        let bytes = request_bytes(&request);
        let piece = window_bytes.map_or(bytes / 2, |w| w / 2);
        let piece = usize::try_from(piece).unwrap_or(usize::MAX);
        if window_bytes.is_none_or(|w| bytes <= w * SUMMARY_REQUEST_PERCENT / 100) {
            match summary::whole(provider.as_ref(), &request, instructions, self.cancel).await {
                Err(CompactionError::Model(ModelError::ContextOverflow { .. })) => {}
                other => return other,
            }
        }
        summary::in_pieces(
            provider.as_ref(),
            &request,
            span,
            instructions,
            piece,
            self.cancel,
        )
        .await
    }
}

/// The plan for `events`, and the histories it needs, read under the log's lock.
fn plan_from(events: &[Event], tail_bytes: u64) -> Planned {
    let plan = plan::plan(events, KEEP_BYTES, tail_bytes);
    let pruning = Event {
        seq: events.last().map_or(0, |e| e.seq + 1),
        time: 0,
        data: EventData::CompactionEnd {
            trigger: CompactionTrigger::Auto,
            summary: None,
            replaces_through: None,
            keeps: None,
            pruned: plan.pruned.clone(),
            keep_bytes: KEEP_BYTES,
            tokens_before: 0,
            tokens_after: 0,
            error: None,
        },
    };
    let pruned = derive_with(events, Some(&pruning));
    let span = match plan.through {
        Some(through) => {
            let end = events.partition_point(|e| e.seq <= through);
            derive_with(&events[..end], Some(&pruning))
        }
        None => Vec::new(),
    };
    Planned { plan, pruned, span }
}
