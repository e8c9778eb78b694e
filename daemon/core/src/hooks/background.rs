//! Background (`async`) hooks: a Claude Code command hook marked `"async": true` is handed to
//! the caller unstarted, as a [`Background`], which runs it without the call waiting (the agent
//! bounds and kills them, `agent/background.rs`).

use super::job::Job;
use super::{EventName, HookContext, HookEvent, Hooks, decode, log_output, records_of, runner};
use dsh_session::EventData;

/// One background hook: awaited, it runs the hook and gives its records and what it says for the
/// model (its `additionalContext` and `systemMessage`: Claude Code delivers both to the model at
/// the next turn). Dropped unpolled, nothing runs.
pub struct Background(std::pin::Pin<Box<dyn Future<Output = BackgroundEnd> + Send>>);

impl Background {
    /// Runs it.
    pub async fn run(self) -> BackgroundEnd {
        self.0.await
    }
}

impl std::fmt::Debug for Background {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Background")
    }
}

/// What a background hook did.
#[derive(Debug, Clone, PartialEq)]
pub struct BackgroundEnd {
    /// Its `hook/invoked` and `hook/result`.
    pub records: Vec<EventData>,
    /// What it says for the model's next turn, attributed to its dialect's plugin name.
    pub context: Vec<(&'static str, String)>,
}

impl Hooks {
    /// `job` as a background hook: run under the agent's background token, its decision
    /// ignored (the call did not wait for it), what it says kept for the next turn.
    pub(super) fn background(
        &self,
        mut job: Job,
        name: EventName,
        ctx: &HookContext,
        event: &HookEvent,
    ) -> Background {
        if let Some(token) = &ctx.background {
            job.cancel = token.clone();
        }
        let (executor, chars) = (self.executor.clone(), self.settings.stderr_summary_chars);
        let (turn, event) = (ctx.turn, event.clone());
        Background(Box::pin(async move {
            let end = runner::run_one(&executor, job.clone()).await;
            let output = decode::decode(&end, name, job.dialect);
            log_output(&job, &output);
            tracing::info!(
                handler = %job.handler_id,
                exit_code = end.exit_code,
                duration_ms = end.duration.as_millis(),
                "background hook ran"
            );
            let plugin = job.dialect.plugin_name();
            let context = [&output.additional_context, &output.system_message]
                .into_iter()
                .flatten()
                .map(|text| (plugin, text.clone()))
                .collect();
            BackgroundEnd {
                records: records_of(&job, &end, &output, turn, &event, chars).to_vec(),
                context,
            }
        }))
    }
}
