//! Hook scripts written the way people write them for Claude Code and Codex, run unchanged by the
//! real daemon, in each dialect they are written for. Each test stands for a pattern found in
//! public hook collections (the scripts here are our own, in the same style):
//!
//! 1. **Python rm -rf guard** — `pre_tool_use.py` of disler/claude-code-hooks-mastery and its many
//!    copies: `if tool_name == "Bash"`, a regex over `tool_input["command"]`, `BLOCKED: …` on
//!    stderr, exit 2 ([`python_rm_rf_guard_blocks_in_both_dialects`]).
//! 2. **.env protection** — the same collection's `.env` access check, as bash + jq: commands
//!    touching `.env` (but not `.env.sample`) exit 2 ([`env_file_guard_in_bash_and_jq`]).
//! 3. **JSON deny with `jq -n`** — Claude Code's reference `block-rm.sh` and Codex's
//!    `pre_tool_use_policy.py`: `permissionDecision: "deny"` with a reason
//!    ([`json_deny_written_with_jq`]).
//! 4. **Command validator rules** — Claude Code's `bash_command_validator_example.py` (grep → rg,
//!    find -name → rg --files) and werdnum/family-assistant's `check_banned_commands.py`
//!    (`git commit --no-verify`): `if tool_name != "Bash": sys.exit(0)`, every issue on stderr,
//!    exit 2 ([`python_command_validator_rules`]).
//! 5. **Bash command log** — the hooks guide's one-liner
//!    `jq -r '"\(.tool_input.command) - \(.tool_input.description // "No description")"' >> log`
//!    ([`bash_command_log_one_liner`]).
//! 6. **PostToolUse stdout tracker** — the `gh pr create` URL trackers and `git commit` detectors
//!    reading `.tool_response.stdout` ([`post_tool_use_tracker_reads_the_real_stdout`]).
//! 7. **PostToolUse JSON logger** — `post_tool_use.py` (disler) and `jq -c '. + {event: …}' >>
//!    log` (mgreenly/ikigai): the whole payload, one record per call
//!    ([`post_tool_use_json_logger`]).
//! 8. **SessionStart git context as plain text** — `session-start.sh` scripts that `echo` the
//!    branch, `git status --short` and recent commits ([`semantics::session_start_plain_text_is_in_the_first_model_request`](super::semantics)).
//! 9. **UserPromptSubmit secret scanner** — the hooks guide's prompt validator and Codex's "scan
//!    your team's prompts to block accidentally pasting API keys": a JSON block with a reason,
//!    else plain context ([`prompt_secret_scanner`]).
//! 10. **Stop loop** — Stop hooks that return `{"decision": "block", "reason": …}` until the work is
//!     done, guarded by `stop_hook_active` ([`stop_loop_with_a_stop_hook_active_guard`]).
//! 11. **Command rewriting** — rtk-ai/rtk's `rtk-rewrite.sh` and its descendants:
//!     `jq --arg cmd "$REWRITTEN" '.tool_input | .command = $cmd'` returned as `updatedInput` beside
//!     `permissionDecision: "allow"` ([`semantics::updated_input_runs_the_rewritten_command`](super::semantics)).
//! 12. **Transcript backup on SessionEnd** — session-end hooks that copy `transcript_path`
//!     ([`semantics::closing_an_agent_runs_session_end_with_its_transcript`](super::semantics)).
//! 13. **`continue: false` circuit breaker** — the references' `{"continue": false, "stopReason":
//!     "Build failed, fix errors before continuing"}` ([`semantics`](super::semantics)).
//! 14. **systemMessage reporter** — the reference's test runner reporting
//!     `{"systemMessage": "Tests passed after editing …"}`
//!     ([`semantics::system_messages_reach_the_client`](super::semantics)).
//! 15. **PostToolUse lint feedback** — "exit 2 instead so Claude sees the stderr" and Codex's
//!     `post_tool_use_review.py` (`decision: "block"`)
//!     ([`semantics::post_tool_use_block_feedback_by_dialect`](super::semantics)).
//! 16. **Subagent-aware hooks** — scripts that skip subagent calls by the presence of `agent_id`
//!     ([`lifecycle::hooks_inside_a_child_carry_agent_id_and_the_parents_session`](super::lifecycle)).

use super::*;

/// Runs `script` (a hook file entry per `entries`, with `{}` replaced by the script's command)
/// for `dialect` and returns the world.
fn world(dialect: Dialect, name: &str, body: &str, entries: &[(&str, Option<&str>)]) -> World {
    dsh_core::test_support::require_jq();
    dsh_core::test_support::require_python3();
    World::new(|dir| {
        let command = dir.script(name, body);
        let entries: Vec<(&str, Option<&str>, &str)> = entries
            .iter()
            .map(|(event, matcher)| (*event, *matcher, command.as_str()))
            .collect();
        Setup::dialect(dialect, hook_file(&entries))
    })
}

/// The tool result of call `id` in `turn`.
fn result<'a>(turn: &'a Turn, id: &str) -> &'a Value {
    turn.tool_results()
        .into_iter()
        .find(|r| r["callId"] == id)
        .unwrap_or_else(|| panic!("no result for {id}: {:?}", turn.lines))
}

/// The text of a result (the model's next request is built from it).
fn text(result: &Value) -> &str {
    result["content"].as_str().unwrap()
}

/// A reply calling bash once per `(id, command)`.
fn calls(text: &str, commands: &[(&str, &str)]) -> Value {
    let calls: Vec<Value> = commands
        .iter()
        .map(|(id, command)| json!({"id": id, "name": "bash", "arguments": {"command": command}}))
        .collect();
    json!({"text": text, "tool_calls": calls})
}

const PY_RM_GUARD: &str = r#"#!/usr/bin/env python3
"""PreToolUse guard: blocks recursive forced deletes in Bash commands."""
import json
import re
import sys


def is_dangerous_rm_command(command):
    normalized = " ".join(command.lower().split())
    patterns = [
        r"\brm\s+.*-[a-z]*r[a-z]*f",
        r"\brm\s+.*-[a-z]*f[a-z]*r",
        r"\brm\s+--recursive\s+--force",
        r"\brm\s+--force\s+--recursive",
    ]
    return any(re.search(p, normalized) for p in patterns)


def main():
    try:
        input_data = json.load(sys.stdin)
    except json.JSONDecodeError:
        sys.exit(0)
    tool_name = input_data.get("tool_name", "")
    tool_input = input_data.get("tool_input", {})
    if tool_name == "Bash":
        command = tool_input.get("command", "")
        if is_dangerous_rm_command(command):
            print("BLOCKED: Dangerous rm command detected and prevented", file=sys.stderr)
            sys.exit(2)
    sys.exit(0)


if __name__ == "__main__":
    main()
"#;

#[test]
fn python_rm_rf_guard_blocks_in_both_dialects() {
    for dialect in Dialect::ALL {
        // Matcher "Bash", as the configs that ship these guards write it.
        let w = world(
            dialect,
            "pre_tool_use.py",
            PY_RM_GUARD,
            &[("PreToolUse", Some("Bash"))],
        );
        let build = w.cwd.join("build");
        std::fs::create_dir(&build).unwrap();
        std::fs::write(build.join("precious"), "keep me").unwrap();
        let agent = w.agent(&json!({"replies": [
            calls("cleaning", &[("rm", "rm -rf build"), ("ls", "ls build > listing.txt")]),
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "clean up");
        assert_eq!(turn.kind(), "completed", "{dialect:?}: {:?}", turn.lines);
        assert!(build.join("precious").exists(), "{dialect:?}: rm -rf ran");
        let rm = result(&turn, "rm");
        assert_eq!(rm["isError"], true, "{dialect:?}: {rm}");
        assert!(
            text(rm).contains("BLOCKED: Dangerous rm command detected and prevented"),
            "{dialect:?}: the model gets the guard's reason: {rm}"
        );
        // What the next model request is built from says the same.
        let events = w.events(&agent);
        let logged = of_type(&events, "tool/result")
            .into_iter()
            .find(|e| e["data"]["callId"] == "rm")
            .unwrap();
        assert_eq!(logged["data"]["content"], rm["content"]);
        assert_eq!(
            std::fs::read_to_string(w.cwd.join("listing.txt")).unwrap(),
            "precious\n",
            "{dialect:?}: other commands pass the guard"
        );
    }
}

const ENV_GUARD: &str = r#"#!/usr/bin/env bash
# Keeps .env files (secrets) out of reach; .env.sample is fine.
input=$(cat)
tool=$(printf '%s' "$input" | jq -r '.tool_name')
[ "$tool" = "Bash" ] || exit 0
cmd=$(printf '%s' "$input" | jq -r '.tool_input.command // empty')
if printf '%s' "$cmd" | grep -Eq '\.env([^.a-zA-Z_]|$)' && ! printf '%s' "$cmd" | grep -q '\.env\.sample'; then
  echo "Access to .env files containing sensitive data is prohibited" >&2
  echo "Use .env.sample for template files instead" >&2
  exit 2
fi
exit 0
"#;

#[test]
fn env_file_guard_in_bash_and_jq() {
    for dialect in Dialect::ALL {
        let w = world(dialect, "env-guard.sh", ENV_GUARD, &[("PreToolUse", None)]);
        std::fs::write(w.cwd.join(".env"), "API_TOKEN=hunter2\n").unwrap();
        std::fs::write(w.cwd.join(".env.sample"), "API_TOKEN=\n").unwrap();
        let agent = w.agent(&json!({"replies": [
            calls("reading", &[
                ("secret", "cat .env > leaked.txt"),
                ("sample", "cat .env.sample > sample.txt"),
            ]),
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "show me the config");
        assert_eq!(turn.kind(), "completed", "{dialect:?}");
        assert!(
            !w.cwd.join("leaked.txt").exists(),
            "{dialect:?}: the .env read ran"
        );
        assert!(text(result(&turn, "secret")).contains("prohibited"));
        assert_eq!(
            std::fs::read_to_string(w.cwd.join("sample.txt")).unwrap(),
            "API_TOKEN=\n"
        );
    }
}

const JQ_DENY: &str = r#"#!/bin/bash
COMMAND=$(jq -r '.tool_input.command')

if echo "$COMMAND" | grep -q 'rm -rf'; then
  jq -n '{
    hookSpecificOutput: {
      hookEventName: "PreToolUse",
      permissionDecision: "deny",
      permissionDecisionReason: "Destructive command blocked by hook"
    }
  }'
else
  exit 0  # allow the command
fi
"#;

#[test]
fn json_deny_written_with_jq() {
    for dialect in Dialect::ALL {
        let w = world(
            dialect,
            "block-rm.sh",
            JQ_DENY,
            &[("PreToolUse", Some("Bash"))],
        );
        let victim = w.cwd.join("tmp-build");
        std::fs::create_dir(&victim).unwrap();
        let agent = w.agent(&json!({"replies": [
            calls("removing", &[("rm", "rm -rf tmp-build"), ("ok", "echo safe > ok.txt")]),
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "remove it");
        assert!(victim.exists(), "{dialect:?}: the denied command ran");
        assert!(
            text(result(&turn, "rm")).contains("Destructive command blocked by hook"),
            "{dialect:?}"
        );
        assert!(w.cwd.join("ok.txt").exists(), "{dialect:?}");
        let events = w.events(&agent);
        // The two calls' hooks run at once: their records come in either order.
        let mut guard: Vec<&str> = of_type(&events, "hook/result")
            .iter()
            .map(|e| e["data"]["decision"].as_str().unwrap())
            .collect();
        guard.sort_unstable();
        assert_eq!(guard, ["deny", "pass"], "{dialect:?}");
    }
}

const PY_VALIDATOR: &str = r#"#!/usr/bin/env python3
"""Bash command validator: steers the model to the project's tools."""
import json
import re
import sys

_VALIDATION_RULES = [
    (
        r"^grep\b(?!.*\|)",
        "Use 'rg' (ripgrep) instead of 'grep' for better performance and features",
    ),
    (
        r"^find\s+\S+\s+-name\b",
        "Use 'rg --files | rg pattern' or 'rg --files -g pattern' instead of 'find -name' for better performance",
    ),
    (
        r"\bgit\s+commit\b.*--no-verify",
        "Using --no-verify is not permitted in this project.",
    ),
]


def _validate_command(command):
    issues = []
    for pattern, message in _VALIDATION_RULES:
        if re.search(pattern, command):
            issues.append(message)
    return issues


def main():
    try:
        input_data = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        print(f"Error: Invalid JSON input: {e}", file=sys.stderr)
        sys.exit(1)

    tool_name = input_data.get("tool_name", "")
    if tool_name != "Bash":
        sys.exit(0)

    tool_input = input_data.get("tool_input", {})
    command = tool_input.get("command", "")
    if not command:
        sys.exit(0)

    issues = _validate_command(command)
    if issues:
        for message in issues:
            print(f"• {message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
"#;

#[test]
fn python_command_validator_rules() {
    for dialect in Dialect::ALL {
        let w = world(
            dialect,
            "bash_command_validator.py",
            PY_VALIDATOR,
            &[("PreToolUse", Some("Bash"))],
        );
        std::fs::write(w.cwd.join("notes.txt"), "needle\n").unwrap();
        let agent = w.agent(&json!({"replies": [
            calls("searching", &[
                ("grep", "grep -r needle . > found.txt"),
                ("commit", "git commit --no-verify -m wip > committed.txt"),
                ("rg", "cat notes.txt | grep needle > piped.txt"),
            ]),
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "find the needle");
        assert!(!w.cwd.join("found.txt").exists(), "{dialect:?}");
        assert!(!w.cwd.join("committed.txt").exists(), "{dialect:?}");
        assert!(
            text(result(&turn, "grep")).contains("Use 'rg' (ripgrep) instead of 'grep'"),
            "{dialect:?}"
        );
        assert!(
            text(result(&turn, "commit")).contains("--no-verify is not permitted"),
            "{dialect:?}"
        );
        assert_eq!(
            std::fs::read_to_string(w.cwd.join("piped.txt")).unwrap(),
            "needle\n",
            "{dialect:?}: a piped grep is allowed"
        );
    }
}

#[test]
fn bash_command_log_one_liner() {
    for (dialect, expected) in [
        // Claude Code's Bash input has `description`; Codex's has only `command`.
        (Dialect::ClaudeCode, "make test - Run the test suite\n"),
        (Dialect::Codex, "make test - No description\n"),
    ] {
        dsh_core::test_support::require_jq();
        let w = World::new(|dir| {
            let command = format!(
                r#"jq -r '"\(.tool_input.command) - \(.tool_input.description // "No description")"' >> {}"#,
                dir.q("bash-command-log.txt")
            );
            Setup::dialect(
                dialect,
                hook_file(&[("PreToolUse", Some("Bash"), &command)]),
            )
        });
        let agent = w.agent(&json!({"replies": [
            {"text": "testing", "tool_calls": [{"name": "bash", "arguments": {
                "command": "make test", "description": "Run the test suite", "timeout_ms": 1000}}]},
            {"text": "done"},
        ]}));
        w.prompt(&agent, "test");
        assert_eq!(w.read("bash-command-log.txt"), expected, "{dialect:?}");
    }
}

const PR_TRACKER: &str = r#"#!/usr/bin/env bash
# PostToolUse: keeps what a command printed, and remembers pull requests it created.
set -u
input=$(cat)
command=$(printf '%s' "$input" | jq -r '.tool_input.command // empty')
stdout=$(printf '%s' "$input" | jq -r '.tool_response.stdout // empty')
dir=$(dirname "$0")
printf '%s' "$input" | jq -j '.tool_response.stdout // empty' >> "$dir/stdout.log"
printf '%s' "$input" | jq -r '.tool_response.interrupted // false' >> "$dir/interrupted.log"
case "$command" in
  *"gh pr create"*) ;;
  *) exit 0 ;;
esac
url=$(printf '%s' "$stdout" | grep -Eo 'https://github\.com/[^[:space:]]+/pull/[0-9]+' | tail -1)
[ -n "$url" ] || exit 0
echo "$url" >> "$dir/prs.log"
"#;

#[test]
fn post_tool_use_tracker_reads_the_real_stdout() {
    let w = world(
        Dialect::ClaudeCode,
        "pr-tracker.sh",
        PR_TRACKER,
        &[("PostToolUse", Some("Bash"))],
    );
    // A stand-in for `gh pr create` that prints like it: progress on stderr, the URL on stdout.
    let fake_gh = "gh() { echo 'Creating pull request for feature into main' >&2; \
                   printf 'https://github.com/acme/app/pull/42\\n'; }; gh pr create --fill";
    let agent = w.agent(&json!({"replies": [
        calls("opening the PR", &[("pr", fake_gh)]),
        // Claude Code runs PostToolUse only for a call that succeeded (a failed one is its
        // PostToolUseFailure, see `upstream.rs`).
        calls("checking", &[("two", "printf 'line one\\nline two\\n'; echo oops >&2")]),
        {"text": "done"},
    ]}));
    assert_eq!(w.prompt(&agent, "open a PR").kind(), "completed");
    assert_eq!(
        w.read("stdout.log"),
        "https://github.com/acme/app/pull/42\nline one\nline two\n",
        "the commands' real stdout, without stderr or dsh's markers"
    );
    assert_eq!(w.read("prs.log"), "https://github.com/acme/app/pull/42\n");
    assert_eq!(w.read("interrupted.log"), "false\nfalse\n");
}

const PY_JSON_LOGGER: &str = r#"#!/usr/bin/env python3
"""PostToolUse: appends every payload to logs/post_tool_use.json (a JSON list)."""
import json
import os
import sys

input_data = json.load(sys.stdin)
log_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "logs")
os.makedirs(log_dir, exist_ok=True)
log_path = os.path.join(log_dir, "post_tool_use.json")
log_data = []
if os.path.exists(log_path):
    with open(log_path) as f:
        try:
            log_data = json.load(f)
        except (json.JSONDecodeError, ValueError):
            log_data = []
log_data.append(input_data)
with open(log_path, "w") as f:
    json.dump(log_data, f, indent=2)
sys.exit(0)
"#;

#[test]
fn post_tool_use_json_logger() {
    for dialect in Dialect::ALL {
        let w = world(
            dialect,
            "post_tool_use.py",
            PY_JSON_LOGGER,
            &[("PostToolUse", None)],
        );
        let agent = w.agent(&json!({"replies": [
            {"text": "listing", "tool_calls": [{"id": "c1", "name": "bash",
                "arguments": {"command": "echo hello", "workdir": "."}}]},
            {"text": "done"},
        ]}));
        w.prompt(&agent, "go");
        let log: Vec<Value> = serde_json::from_str(&w.read("logs/post_tool_use.json")).unwrap();
        assert_eq!(log.len(), 1, "{dialect:?}: {log:?}");
        let entry = &log[0];
        assert_eq!(entry["hook_event_name"], "PostToolUse");
        assert_eq!(entry["tool_name"], "Bash");
        assert_eq!(entry["tool_use_id"], "c1");
        assert_eq!(entry["tool_input"], json!({"command": "echo hello"}));
        match dialect {
            Dialect::ClaudeCode => assert_eq!(
                entry["tool_response"],
                json!({"stdout": "hello\n", "stderr": "", "interrupted": false, "isImage": false})
            ),
            Dialect::Codex => assert_eq!(entry["tool_response"], json!("hello\n")),
        }
    }
}

const PY_SECRET_SCANNER: &str = r#"#!/usr/bin/env python3
"""UserPromptSubmit: keeps secrets out of prompts; otherwise notes the check as context."""
import json
import re
import sys

input_data = json.load(sys.stdin)
prompt = input_data.get("prompt", "")
sensitive_patterns = [
    (r"(?i)\b(password|secret|api[_-]?key|token)\s*[:=]", "Prompt contains potential secrets"),
    (r"\bsk-[A-Za-z0-9]{20,}\b", "Prompt contains what looks like an API key"),
]
for pattern, message in sensitive_patterns:
    if re.search(pattern, prompt):
        output = {
            "decision": "block",
            "reason": f"Security policy violation: {message}. Please rephrase your request without sensitive information.",
        }
        print(json.dumps(output))
        sys.exit(0)

print("Prompt screened: no secrets found.")
sys.exit(0)
"#;

#[test]
fn prompt_secret_scanner() {
    for dialect in Dialect::ALL {
        let w = world(
            dialect,
            "user_prompt_submit.py",
            PY_SECRET_SCANNER,
            &[("UserPromptSubmit", None)],
        );
        let agent = w.agent(&json!({"replies": [{"text": "first reply"}]}));
        let blocked = w.prompt(&agent, "deploy with api_key=sk-abcdefghijklmnopqrstuvwx");
        assert_eq!(
            blocked.kind(),
            "blocked",
            "{dialect:?}: {:?}",
            blocked.lines
        );
        assert!(blocked.message().contains("Security policy violation"));
        let events = w.events(&agent);
        assert!(
            !serde_json::to_string(&events)
                .unwrap()
                .contains("sk-abcdefghij"),
            "{dialect:?}: the prompt was logged"
        );

        let ok = w.prompt(&agent, "deploy the app");
        assert_eq!(ok.kind(), "completed", "{dialect:?}");
        assert_eq!(
            ok.text(),
            "first reply",
            "the blocked prompt cost no model request"
        );
        let events = w.events(&agent);
        let context: Vec<&str> = plugin_messages(&events)
            .iter()
            .map(|e| e["data"]["message"]["text"].as_str().unwrap())
            .collect();
        assert_eq!(
            context,
            ["Prompt screened: no secrets found."],
            "{dialect:?}"
        );
        assert_eq!(
            plugin_messages(&events)[0]["data"]["message"]["source"]["plugin"],
            dialect.plugin()
        );
    }
}

const PY_STOP_LOOP: &str = r#"#!/usr/bin/env python3
"""Stop: keeps the agent working until the tests have been run."""
import json
import os
import sys

input_data = json.load(sys.stdin)
log = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stop-payloads.jsonl")
with open(log, "a") as f:
    f.write(json.dumps(input_data) + "\n")

# Already continuing because of this hook: let it stop, or it never will.
if input_data.get("stop_hook_active"):
    sys.exit(0)

if not os.path.exists(os.path.join(input_data["cwd"], "TESTS_PASSED")):
    print(json.dumps({
        "decision": "block",
        "reason": "Tests have not been run. Run the test suite before stopping.",
    }))
sys.exit(0)
"#;

#[test]
fn stop_loop_with_a_stop_hook_active_guard() {
    for dialect in Dialect::ALL {
        let w = world(dialect, "stop.py", PY_STOP_LOOP, &[("Stop", None)]);
        let agent = w.agent(&json!({"replies": [
            {"text": "all done"},
            calls("running them", &[("t", "touch TESTS_PASSED")]),
            {"text": "tests pass"},
        ]}));
        let turn = w.prompt(&agent, "fix the bug");
        assert_eq!(turn.kind(), "completed", "{dialect:?}: {:?}", turn.lines);
        assert_eq!(turn.text(), "tests pass", "{dialect:?}");
        assert!(w.cwd.join("TESTS_PASSED").exists());

        let payloads = parse_lines(&w.read("stop-payloads.jsonl"));
        let active: Vec<&Value> = payloads.iter().map(|p| &p["stop_hook_active"]).collect();
        assert_eq!(active, [&json!(false), &json!(true)], "{dialect:?}");
        let events = w.events(&agent);
        let reasons = plugin_messages(&events);
        assert_eq!(reasons.len(), 1, "{dialect:?}: {events:#?}");
        assert!(
            reasons[0]["data"]["message"]["text"]
                .as_str()
                .unwrap()
                .contains("Tests have not been run")
        );
    }
}
