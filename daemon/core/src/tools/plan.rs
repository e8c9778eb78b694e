//! `update_plan`: the model keeps a short checklist of its task, as Codex's tool of that name
//! does. The plan is the call's arguments, logged with the call like any other; clients show it
//! (an editor's plan view through ACP, `dshctl prompt`'s checklist). The tool changes nothing and
//! needs no approval; it only checks the plan is one a client can show.

use dsh_session::{Plan, PlanStatus, UPDATE_PLAN};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::call::{BoxFuture, Tool, ToolExecution, ToolOutput, ToolSchema};

/// Most steps a plan may have: a checklist a person reads, not a task database.
const MAX_STEPS: usize = 50;

/// Longest step, in characters.
const MAX_STEP_CHARS: usize = 500;

/// `update_plan`.
#[derive(Debug, Default)]
pub(crate) struct PlanTool;

/// Why `arguments` are not a plan a client can show, in words the model can act on.
fn check(arguments: &Value) -> Result<usize, String> {
    let args = Plan::deserialize(arguments).map_err(|e| {
        format!(
            "the arguments must be {{\"plan\": [{{\"step\": TEXT, \"status\": \"pending\"|\"in_progress\"|\"completed\"}}], \"explanation\"?: TEXT}}: {e}"
        )
    })?;
    if args.plan.is_empty() {
        return Err("`plan`: give at least one step".to_owned());
    }
    if args.plan.len() > MAX_STEPS {
        return Err(format!(
            "`plan`: {} steps; keep it to at most {MAX_STEPS}",
            args.plan.len()
        ));
    }
    for (i, step) in args.plan.iter().enumerate() {
        let chars = step.step.trim().chars().count();
        if chars == 0 {
            return Err(format!("`plan[{i}].step` is empty"));
        }
        if chars > MAX_STEP_CHARS {
            return Err(format!(
                "`plan[{i}].step` has {chars} characters; keep a step under {MAX_STEP_CHARS}"
            ));
        }
    }
    let running = args
        .plan
        .iter()
        .filter(|s| s.status == PlanStatus::InProgress)
        .count();
    if running > 1 {
        return Err(format!(
            "`plan`: {running} steps are in_progress; at most one step is in_progress at a time"
        ));
    }
    Ok(args.plan.len())
}

impl Tool for PlanTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: UPDATE_PLAN.into(),
            description: "Keep a short plan of the task as a checklist the user sees. Send the whole plan each time: every step with its status; at most one step is in_progress. Use it for tasks of several steps; skip it for simple ones.".into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "explanation": {"type": "string", "description": "Why the plan changed (optional)."},
                    "plan": {
                        "type": "array",
                        "description": "The steps, in order.",
                        "items": {
                            "type": "object",
                            "properties": {
                                "step": {"type": "string"},
                                "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}
                            },
                            "required": ["step", "status"],
                            "additionalProperties": false
                        }
                    }
                },
                "required": ["plan"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(
        &'a self,
        _exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        let output = match check(arguments) {
            Ok(_) => ToolOutput::ok("Plan updated"),
            Err(message) => ToolOutput::error(format!("Error: {UPDATE_PLAN}: {message}")),
        };
        Box::pin(std::future::ready(output))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_checked_as_a_client_will_show_it() {
        let step = |s: &str, status: &str| json!({"step": s, "status": status});
        assert_eq!(
            check(
                &json!({"explanation": "start", "plan": [step("read", "completed"), step("fix", "in_progress"), step("test", "pending")]})
            ),
            Ok(3)
        );
        let refused = |args: Value, says: &str| {
            let message = check(&args).unwrap_err();
            assert!(message.contains(says), "{message}");
        };
        refused(json!({"plan": []}), "at least one step");
        refused(
            json!({"plan": [step(" ", "pending")]}),
            "`plan[0].step` is empty",
        );
        refused(
            json!({"plan": [step("a", "in_progress"), step("b", "in_progress")]}),
            "at most one step is in_progress",
        );
        refused(
            json!({"plan": [step("a", "doing")]}),
            "\"pending\"|\"in_progress\"",
        );
        refused(json!({"todos": []}), "the arguments must be");
        refused(
            json!({"plan": vec![step("a", "pending"); MAX_STEPS + 1]}),
            "at most 50",
        );
    }
}
