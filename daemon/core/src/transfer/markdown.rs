//! The Markdown transcript: prompts, answers, tool calls with their commands, outputs (long ones
//! trimmed, saying so), file changes as diffs, approvals, compactions, hooks and the session's
//! own records. Every event type has its rendering: the `match` below names each variant and has
//! no catch-all arm, so a new event type does not compile until someone decides how it reads.

use std::fmt::Write as _;

use super::copy::Copy;
use dsh_session::{Event, EventData, MessageSource, TurnEndReason};

/// Outputs longer than this many bytes are cut to their head and tail.
const OUTPUT_SHOWN: usize = 4000;

/// The transcript of `copies` (the root session first, then its descendants).
pub(super) fn render(copies: &[Copy]) -> String {
    let mut out = String::new();
    for (i, copy) in copies.iter().enumerate() {
        let header = &copy.header;
        let title = if i == 0 { "#" } else { "##" };
        let _ = writeln!(out, "{title} Session `{}`\n", header.id.as_str());
        let _ = writeln!(out, "- directory: `{}`", header.cwd.display());
        let _ = writeln!(
            out,
            "- created: {}",
            crate::hooks::claude_timestamp(header.created_at)
        );
        if let Some(parent) = &header.parent_session {
            let _ = writeln!(out, "- parent session: `{}`", parent.as_str());
        }
        if let Some(settings) = &header.settings {
            let _ = writeln!(out, "- model: {} ({})", settings.model, settings.provider);
        }
        let _ = writeln!(out, "- events: {}\n", copy.events.len());
        for event in &copy.events {
            event_md(&mut out, event);
        }
        out.push('\n');
    }
    out
}

/// A fenced block whose fence no line of `text` can close.
fn fenced(out: &mut String, lang: &str, text: &str) {
    let mut fence = "```".to_owned();
    while text.contains(&fence) {
        fence.push('`');
    }
    let _ = writeln!(
        out,
        "{fence}{lang}\n{}\n{fence}\n",
        text.trim_end_matches('\n')
    );
}

/// `text` cut to its first and last [`OUTPUT_SHOWN`]` / 2` bytes, with a note of what was left out.
fn trimmed(text: &str) -> (String, Option<String>) {
    if text.len() <= OUTPUT_SHOWN {
        return (text.to_owned(), None);
    }
    let mut head = OUTPUT_SHOWN / 2;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - OUTPUT_SHOWN / 2;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let left_out = tail - head;
    (
        format!("{}\n[…]\n{}", &text[..head], &text[tail..]),
        Some(format!(
            "*(output trimmed: {left_out} of {} bytes left out; the full text is in the session's log)*",
            text.len()
        )),
    )
}

fn quote(text: &str) -> String {
    text.lines().map(|l| format!("> {l}\n")).collect()
}

fn event_md(out: &mut String, event: &Event) {
    let note = |out: &mut String, text: String| {
        let _ = writeln!(out, "*{text}*\n");
    };
    match &event.data {
        EventData::TurnStart { turn } => {
            let _ = writeln!(out, "---\n\n### Turn {turn}\n");
        }
        EventData::TurnEnd {
            turn,
            reason,
            usage,
            ..
        } => {
            let detail = match reason {
                TurnEndReason::Completed => String::new(),
                other => format!(": {}", other.message()),
            };
            let tokens = usage.map_or(String::new(), |u| {
                format!(" ({} tokens in, {} out)", u.input_tokens, u.output_tokens)
            });
            note(
                out,
                format!("Turn {turn} ended: {}{detail}{tokens}", reason.kind()),
            );
        }
        EventData::StepStart { turn, step } => note(out, format!("Step {turn}.{step}")),
        // Invisible when the Markdown is shown, there for a reader of its text.
        EventData::StepEnd { turn, step } => {
            let _ = writeln!(out, "<!-- end of step {turn}.{step} -->\n");
        }
        EventData::UserMessage { message } => match &message.source {
            MessageSource::User => {
                let _ = writeln!(out, "**User:**\n\n{}\n", quote(&message.text));
            }
            MessageSource::Steer => {
                let _ = writeln!(
                    out,
                    "**User (during the turn):**\n\n{}\n",
                    quote(&message.text)
                );
            }
            MessageSource::Plugin { plugin } => {
                let _ = writeln!(out, "**Context from {plugin}:**\n");
                fenced(out, "text", &message.text);
            }
        },
        EventData::AssistantMessage { message, usage, .. } => {
            if !message.text.is_empty() {
                let _ = writeln!(out, "**Assistant:**\n\n{}\n", message.text);
            }
            if let Some(u) = usage {
                note(
                    out,
                    format!("{} tokens in, {} out", u.input_tokens, u.output_tokens),
                );
            }
        }
        EventData::AssistantThought { text, .. } => {
            let _ = writeln!(
                out,
                "<details><summary>Thinking</summary>\n\n{}\n</details>\n",
                quote(text)
            );
        }
        EventData::ToolCall {
            call_id,
            name,
            arguments,
            ..
        } => {
            let _ = writeln!(out, "**Tool call `{name}`** (`{call_id}`)\n");
            match arguments.get("command").and_then(|c| c.as_str()) {
                Some(command) => fenced(out, "bash", command),
                None => fenced(
                    out,
                    "json",
                    &serde_json::to_string_pretty(arguments).unwrap_or_default(),
                ),
            }
        }
        EventData::ToolRewritten {
            call_id, arguments, ..
        } => {
            let _ = writeln!(out, "*A hook rewrote call `{call_id}`; it ran with:*\n");
            fenced(
                out,
                "json",
                &serde_json::to_string_pretty(arguments).unwrap_or_default(),
            );
        }
        EventData::ToolResult {
            call_id,
            content,
            is_error,
            code,
            exit_code,
            ..
        } => {
            let mut what = format!("**Result** (`{call_id}`)");
            if *is_error {
                what.push_str(" — error");
            }
            if let Some(code) = code {
                let _ = write!(what, " `{code}`");
            }
            if let Some(exit) = exit_code {
                let _ = write!(what, ", exit code {exit}");
            }
            let _ = writeln!(out, "{what}\n");
            let (shown, cut) = trimmed(content);
            fenced(out, "text", &shown);
            if let Some(cut) = cut {
                let _ = writeln!(out, "{cut}\n");
            }
        }
        EventData::ToolFile {
            path, kind, diff, ..
        } => match diff {
            Some(diff) => {
                let _ = writeln!(out, "**File {kind}:** `{path}`\n");
                let (shown, cut) = trimmed(diff);
                fenced(out, "diff", &shown);
                if let Some(cut) = cut {
                    let _ = writeln!(out, "{cut}\n");
                }
            }
            None => note(out, format!("File {kind}: `{path}`")),
        },
        EventData::HookInvoked {
            dialect,
            event,
            handler,
            ..
        } => {
            note(out, format!("Hook {event} ({dialect}) `{handler}` ran"));
        }
        EventData::HookResult {
            event,
            handler,
            decision,
            system_message,
            ..
        } => {
            let message = system_message
                .as_deref()
                .map_or(String::new(), |m| format!(": {m}"));
            note(
                out,
                format!("Hook {event} `{handler}` decided {decision}{message}"),
            );
        }
        EventData::SessionTitle { title } => note(out, format!("Session titled “{title}”")),
        EventData::SessionArchived { archived } => note(
            out,
            if *archived {
                "Session archived"
            } else {
                "Session taken out of the archive"
            }
            .to_owned(),
        ),
        EventData::EndSeed {} => note(out, "Resumed or forked here".to_owned()),
        EventData::Imported {
            format,
            source,
            original_id,
            ..
        } => {
            let id = original_id
                .as_deref()
                .map_or(String::new(), |i| format!(" (id `{i}` there)"));
            note(out, format!("Imported from {format} `{source}`{id}"));
        }
        EventData::Instructions {
            files, problems, ..
        } => {
            let names: Vec<_> = files.iter().map(|f| format!("`{}`", f.path)).collect();
            let mut text = format!("Project instructions: {}", names.join(", "));
            if !problems.is_empty() {
                let _ = write!(text, " (not read: {})", problems.join("; "));
            }
            note(out, text);
        }
        EventData::CompactionStart { trigger, .. } => {
            note(out, format!("Compaction started ({trigger:?})"));
        }
        EventData::CompactionEnd {
            summary,
            tokens_before,
            tokens_after,
            error,
            ..
        } => match (error, summary) {
            (Some(error), _) => note(out, format!("Compaction failed: {error}")),
            (None, summary) => {
                let _ = writeln!(
                    out,
                    "**Compaction** ({tokens_before} → {tokens_after} tokens)\n"
                );
                if let Some(summary) = summary {
                    let _ = writeln!(out, "{}\n", quote(summary));
                }
            }
        },
        EventData::Settings {
            provider,
            model,
            approval,
            ..
        } => note(
            out,
            format!("Settings: {model} ({provider}), approval {approval:?}"),
        ),
        EventData::ApprovalRuleRemoved { tool, command, .. } => {
            note(out, format!("Approval rule removed: {tool} `{command}`"));
        }
        EventData::ApprovalRuleAdded { tool, command, .. } => {
            note(
                out,
                format!("Approval rule added by a hook: {tool} `{command}`"),
            );
        }
        EventData::ApprovalRequest {
            call_id,
            tool,
            command,
            reason,
            change,
            ..
        } => {
            let _ = writeln!(
                out,
                "**Approval asked** for `{tool}` (`{call_id}`): {reason}\n"
            );
            fenced(out, "bash", command);
            if let Some(change) = change {
                fenced(out, "diff", &change.diff);
            }
        }
        EventData::ApprovalDecision {
            call_id,
            decision,
            by,
            reason,
            ..
        } => {
            let why = reason
                .as_deref()
                .map_or(String::new(), |r| format!(": {r}"));
            note(
                out,
                format!("Approval for `{call_id}`: {decision:?} by {by:?}{why}"),
            );
        }
        EventData::Unknown(unknown) => {
            let _ = writeln!(out, "*Event `{}` (not known to this dsh):*\n", unknown.kind);
            fenced(out, "json", unknown.line());
        }
    }
}
