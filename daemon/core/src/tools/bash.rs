//! The `bash` tool: runs a command through the executor with a managed `DSH_*` snapshot collected
//! for this one call (CONTRACTS §6).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::call::{BoxFuture, Tool, ToolDetail, ToolExecution, ToolOutput, ToolSchema};
use crate::exec::CommandOutcome;
use crate::shell::{Command, Ran, Shell};
use serde_json::{Value, json};

/// The description the model reads. It teaches only the durable convention, never a
/// persistence-specific key, so the prompt is the same whatever backend is active.
pub(crate) const DESCRIPTION: &str = "Run a bash command in the session's working directory and return \
its output (stdout, then stderr under [stderr], then an [exit code: N] marker when it failed). \
Current harness facts (such as which home, session and transcript this call belongs to) are \
available in managed $DSH_* environment variables; inspect them when you need them \
(e.g. `env | grep ^DSH_`). Set run_in_background for long-running commands and read their output \
later with job_output.";

/// The `bash` tool.
#[derive(Debug)]
pub(crate) struct BashTool {
    /// The path every command on someone's behalf takes (shared with `Shell.Run`).
    shell: Shell,
}

impl BashTool {
    /// A bash tool running its commands through `shell`.
    pub(crate) fn new(shell: Shell) -> Self {
        Self { shell }
    }
}

/// The arguments the tool accepts. Anything else the model sends (notably `env` or `stdin`) is
/// dropped: managed facts come only from the snapshot, and a model command reads no stdin.
#[derive(Debug)]
struct Arguments {
    command: String,
    timeout: Option<Duration>,
    workdir: Option<PathBuf>,
    background: bool,
}

fn parse(arguments: &Value, cwd: &Path) -> Result<Arguments, String> {
    let command = match arguments.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => c.clone(),
        Some(Value::String(_)) | None => {
            return Err("`command` is required and must not be empty".into());
        }
        Some(other) => return Err(format!("`command` must be a string, got {other}")),
    };
    let timeout = match arguments.get("timeout_ms") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(ms) => Some(Duration::from_millis(ms)),
            None => {
                return Err(format!(
                    "`timeout_ms` must be a non-negative integer, got {v}"
                ));
            }
        },
    };
    let workdir = match arguments.get("workdir") {
        None | Some(Value::Null) => None,
        Some(Value::String(dir)) if dir.is_empty() => None,
        Some(Value::String(dir)) => Some(dsh_paths::home::normalize(&cwd.join(dir))),
        Some(other) => return Err(format!("`workdir` must be a string, got {other}")),
    };
    let background = match arguments.get("run_in_background") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(other) => {
            return Err(format!(
                "`run_in_background` must be a boolean, got {other}"
            ));
        }
    };
    Ok(Arguments {
        command,
        timeout,
        workdir,
        background,
    })
}

impl Tool for BashTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: "bash".into(),
            description: DESCRIPTION.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The command, run with bash -c."},
                    "description": {"type": "string", "description": "What the command does, in a few words."},
                    "timeout_ms": {"type": "integer", "minimum": 0, "description": "Timeout in milliseconds (default 120000, at most 600000)."},
                    "workdir": {"type": "string", "description": "Working directory, relative to the session's (default: the session's)."},
                    "run_in_background": {"type": "boolean", "description": "Start the command as a background job and return its id at once."}
                },
                "required": ["command"],
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
            let args = match parse(arguments, &exec.cwd) {
                Ok(args) => args,
                Err(message) => return ToolOutput::refused(format!("Error: bash: {message}")),
            };
            let command = Command {
                command: args.command,
                cwd: args.workdir,
                timeout: args.timeout,
                env: Default::default(),
                background: args.background,
                // The agent's own policy.
                sandbox: None,
            };
            match self.shell.run(exec, command).await {
                Ok(Ran::Started(job)) => ToolOutput::ok(format!(
                    "Started background job {job}. Read its new output with job_output (job_id: {job}); stop it with job_kill."
                ))
                .with_detail(ToolDetail::Background {
                    job_id: job.to_string(),
                }),
                Ok(Ran::Finished(outcome)) => {
                    let detail = ToolDetail::Command {
                        stdout: outcome.stdout.clone(),
                        stderr: outcome.stderr.clone(),
                        exit_code: outcome.exit_code,
                        interrupted: outcome.timed_out || outcome.aborted,
                    };
                    let output = if outcome.success() {
                        ToolOutput::ok(outcome.render())
                    } else {
                        ToolOutput::error(with_sandbox_note(outcome.render(), exec, &outcome))
                    };
                    output.with_detail(detail)
                }
                // Refused before anything was spawned (a failing contributor, limits, a missing
                // cwd): nothing ran.
                Err(error) => ToolOutput::refused(format!("Error: bash: {error}")),
            }
        })
    }
}

/// A failed command whose stderr says "Permission denied" under a sandbox gets one line naming
/// the policy (docs/CONFIG.md, "What the model is told"); the tool's description stays generic.
fn with_sandbox_note(mut text: String, exec: &ToolExecution, outcome: &CommandOutcome) -> String {
    let note = exec
        .agent
        .as_ref()
        .filter(|_| outcome.stderr.contains("Permission denied"))
        .and_then(|a| a.sandbox.refusal_note());
    if let Some(note) = note {
        text.push('\n');
        text.push_str(&note);
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked_and_extras_dropped() {
        let cwd = Path::new("/w");
        let ok = parse(
            &json!({"command": "ls", "timeout_ms": 5, "workdir": "sub/../x", "run_in_background": true, "env": {"DSH_SESSION_ID": "spoofed"}, "stdin": "x"}),
            cwd,
        )
        .unwrap();
        assert_eq!(ok.command, "ls");
        assert_eq!(ok.timeout, Some(Duration::from_millis(5)));
        assert_eq!(ok.workdir, Some(PathBuf::from("/w/x")));
        assert!(ok.background);
        assert!(
            parse(&json!({"command": " "}), cwd)
                .unwrap_err()
                .contains("command")
        );
        assert!(
            parse(&json!({"command": 3}), cwd)
                .unwrap_err()
                .contains("command")
        );
        assert!(
            parse(&json!({"command": "x", "timeout_ms": -1}), cwd)
                .unwrap_err()
                .contains("timeout_ms")
        );
        assert!(parse(&json!({"command": "x", "run_in_background": "yes"}), cwd).is_err());
        assert_eq!(
            parse(&json!({"command": "x", "workdir": "/abs"}), cwd)
                .unwrap()
                .workdir,
            Some(PathBuf::from("/abs"))
        );
    }

    /// A command too large for `execve` is the model's mistake to fix: it gets a tool error that
    /// names the argument and the limit, and the turn goes on.
    #[tokio::test]
    async fn an_oversized_command_is_a_tool_error_naming_command_and_the_limit() {
        let tmp = tempfile::tempdir().unwrap();
        let executor = std::sync::Arc::new(
            crate::exec::Executor::with_base_env(
                crate::exec::ExecConfig {
                    spill_dir: tmp.path().join("spill"),
                    ..crate::exec::ExecConfig::default()
                },
                std::env::vars_os(),
            )
            .unwrap(),
        );
        let tool = BashTool::new(Shell::new(
            executor,
            crate::shell_env::ShellEnvRegistry::new(
                tmp.path().join("home"),
                Duration::from_secs(5),
            ),
        ));
        let exec = ToolExecution {
            call_id: "c1".into(),
            tool_name: "bash".into(),
            agent: None,
            turn: Some(1),
            step: Some(1),
            cwd: tmp.path().to_path_buf(),
            cancel: tokio_util::sync::CancellationToken::new(),
            output: None,
        };
        let marker = tmp.path().join("ran");
        let command = format!("touch '{}'; : {}", marker.display(), "x".repeat(200 * 1024));
        for background in [false, true] {
            let out = tool
                .call(
                    &exec,
                    &json!({"command": command, "run_in_background": background}),
                )
                .await;
            assert!(out.is_error, "{out:?}");
            assert!(
                out.content.starts_with("Error: bash: command is "),
                "{out:?}"
            );
            assert!(
                out.content
                    .contains(&crate::exec::MAX_STRING_BYTES.to_string()),
                "{out:?}"
            );
        }
        assert!(!marker.exists(), "the command ran");
    }

    #[test]
    fn description_teaches_only_the_convention() {
        assert!(DESCRIPTION.contains("$DSH_*"));
        assert!(!DESCRIPTION.contains("JSONL"));
        assert!(!DESCRIPTION.contains("DSH_SESSION"));
    }
}
