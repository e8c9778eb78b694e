//! `job_output` and `job_kill`: the model's handles on its background jobs. A job belongs to the
//! agent that started it; another agent's job is refused.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::call::{BoxFuture, Tool, ToolExecution, ToolOutput, ToolSchema};
use crate::exec::{Executor, JobId};

/// Which job tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Output,
    Kill,
}

/// `job_output` or `job_kill`.
#[derive(Debug)]
pub(crate) struct JobTool {
    executor: Arc<Executor>,
    kind: Kind,
}

impl JobTool {
    /// The `job_output` tool: output not read before, and the job's state.
    pub(crate) fn output(executor: Arc<Executor>) -> Self {
        Self {
            executor,
            kind: Kind::Output,
        }
    }

    /// The `job_kill` tool: stops a job's whole process group.
    pub(crate) fn kill(executor: Arc<Executor>) -> Self {
        Self {
            executor,
            kind: Kind::Kill,
        }
    }

    fn job(&self, exec: &ToolExecution, arguments: &Value) -> Result<JobId, String> {
        let raw = arguments
            .get("job_id")
            .and_then(Value::as_str)
            .ok_or("`job_id` is required and must be a string")?;
        let id = JobId::parse(raw).map_err(|e| format!("`job_id`: {e}"))?;
        let info = self.executor.job_info(&id).map_err(|e| e.to_string())?;
        if info.owner.as_ref() != exec.session_id() {
            return Err(format!("job {id} belongs to another agent"));
        }
        Ok(id)
    }
}

impl Tool for JobTool {
    fn schema(&self) -> ToolSchema {
        let (name, description) = match self.kind {
            Kind::Output => (
                "job_output",
                "Read the next part of a background job's output (in order, up to 64 KiB of each stream; the result says when more is waiting), and whether it is still running.",
            ),
            Kind::Kill => (
                "job_kill",
                "Stop a background job and every process it started.",
            ),
        };
        ToolSchema {
            name: name.into(),
            description: description.into(),
            parameters: json!({
                "type": "object",
                "properties": {"job_id": {"type": "string", "description": "The id bash returned."}},
                "required": ["job_id"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let name = self.schema().name;
            let id = match self.job(exec, arguments) {
                Ok(id) => id,
                Err(message) => return ToolOutput::error(format!("Error: {name}: {message}")),
            };
            match self.kind {
                Kind::Output => match self.executor.job_output(&id) {
                    Ok(output) => ToolOutput::ok(output.render()),
                    Err(error) => ToolOutput::error(format!("Error: {name}: {error}")),
                },
                Kind::Kill => match self.executor.job_kill(&id) {
                    Ok(true) => ToolOutput::ok(format!("Killed job {id}.")),
                    Ok(false) => ToolOutput::ok(format!("Job {id} had already ended.")),
                    Err(error) => ToolOutput::error(format!("Error: {name}: {error}")),
                },
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio_util::sync::CancellationToken;

    use super::*;
    use crate::exec::{CommandSpec, ExecConfig, JOB_READ_LIMIT};

    /// The model pages through a long output with `job_output` as a client does: every byte, in
    /// order, each result bounded and saying when more is waiting.
    #[tokio::test]
    async fn the_model_reads_every_byte_of_a_long_output() {
        let tmp = tempfile::tempdir().unwrap();
        let executor = Arc::new(
            Executor::with_base_env(
                ExecConfig {
                    output_cap_bytes: 100,
                    spill_dir: tmp.path().join("spill"),
                    kill_grace: Duration::from_millis(300),
                    ..ExecConfig::default()
                },
                std::env::vars_os().filter(|(k, _)| k == "PATH"),
            )
            .unwrap(),
        );
        let total = 2 * JOB_READ_LIMIT + 5;
        let id = executor
            .start(
                CommandSpec::new(
                    format!("head -c {total} /dev/zero | tr '\\0' y"),
                    tmp.path(),
                ),
                None,
            )
            .unwrap();
        executor.job_wait(&id).await.unwrap();
        let tool = JobTool::output(executor.clone());
        let exec = ToolExecution {
            call_id: "c1".into(),
            tool_name: "job_output".into(),
            agent: None,
            turn: None,
            step: None,
            cwd: tmp.path().to_owned(),
            cancel: CancellationToken::new(),
            output: None,
        };
        let arguments = serde_json::json!({"job_id": id.to_string()});
        let mut seen = 0;
        for read in 1.. {
            let out = tool.call(&exec, &arguments).await;
            assert!(!out.is_error, "{}", out.content);
            assert!(!out.content.contains("not kept"), "{}", out.content);
            seen += out.content.matches('y').count();
            if out.content.contains("[status: completed") && !out.content.contains("more output") {
                assert_eq!(read, 3);
                break;
            }
            assert!(
                out.content.contains("[more output is waiting"),
                "{}",
                out.content
            );
        }
        assert_eq!(seen, total);
    }
}
