//! The summary requests of a compaction: one request that reuses the conversation's own prefix
//! (the provider's prompt cache serves it) when it fits the window, else the span rendered as a
//! transcript and summarised piece by piece, each piece's request fitting on its own.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::CompactionError;
use crate::agent::provider::{ModelProvider, ModelRequest};
use dsh_session::MessageSource;
use dsh_session::compaction::pruned;
use dsh_session::history::HistoryMessage;

/// What the model is asked for. The summary replaces what it covers, so it must carry what the
/// next steps need; the model must not act.
const SUMMARY_PROMPT: &str = "Compact the conversation so far so that the work can go on in a \
smaller context. Write a summary another model can continue from: the user's requests and \
constraints in their own words, what has been done (commands run, files read and changed, \
results and errors that matter), decisions and their reasons, what is in progress and what \
remains. Keep exact paths, names and values. Do not call tools; answer with the summary only.";

/// The plugin name the summary request's prompt is sent under.
const SUMMARY_REQUEST_PLUGIN: &str = "compaction";

/// The summary prompt, with a person's instructions for it.
fn prompt(instructions: Option<&str>) -> String {
    match instructions.map(str::trim).filter(|i| !i.is_empty()) {
        Some(extra) => format!("{SUMMARY_PROMPT}\n\nInstructions for this summary: {extra}"),
        None => SUMMARY_PROMPT.to_owned(),
    }
}

fn user(text: String) -> HistoryMessage {
    HistoryMessage::User {
        text,
        source: MessageSource::Plugin {
            plugin: SUMMARY_REQUEST_PLUGIN.to_owned(),
        },
    }
}

/// Asks `provider` once; the reply's text is the summary.
async fn ask(
    provider: &dyn ModelProvider,
    request: ModelRequest,
    cancel: &CancellationToken,
) -> Result<String, CompactionError> {
    let quiet = |_: &str| {};
    let reply = tokio::select! {
        reply = provider.complete(&request, cancel, &quiet) => reply?,
        () = cancel.cancelled() => return Err(CompactionError::Cancelled),
    };
    let text = reply.text.trim();
    if text.is_empty() {
        return Err(CompactionError::EmptySummary);
    }
    Ok(text.to_owned())
}

/// The summary of the conversation in `base` (its history already pruned): `base` itself with
/// the summary prompt after it.
pub(super) async fn whole(
    provider: &dyn ModelProvider,
    base: &ModelRequest,
    instructions: Option<&str>,
    cancel: &CancellationToken,
) -> Result<String, CompactionError> {
    let mut messages = Vec::with_capacity(base.messages.len() + 1);
    messages.extend(base.messages.iter().cloned());
    messages.push(user(prompt(instructions)));
    let request = ModelRequest {
        messages: Arc::new(messages),
        ..base.clone()
    };
    ask(provider, request, cancel).await
}

/// The summary of `span`, rendered as a transcript and cut into pieces of at most `piece_bytes`:
/// each piece is summarised together with the summary of the pieces before it, in requests
/// without tools.
pub(super) async fn in_pieces(
    provider: &dyn ModelProvider,
    base: &ModelRequest,
    span: &[HistoryMessage],
    instructions: Option<&str>,
    piece_bytes: usize,
    cancel: &CancellationToken,
) -> Result<String, CompactionError> {
    let mut summary: Option<String> = None;
    for piece in pieces(span, piece_bytes) {
        let earlier = summary
            .as_deref()
            .map(|s| format!("The summary of the conversation before this part:\n{s}\n\n"))
            .unwrap_or_default();
        let text = format!(
            "{}\n\n{earlier}The conversation (or its next part), as a transcript:\n{piece}",
            prompt(instructions)
        );
        let request = ModelRequest {
            messages: Arc::new(vec![user(text)]),
            tools: Vec::new(),
            ..base.clone()
        };
        summary = Some(ask(provider, request, cancel).await?);
    }
    summary.ok_or(CompactionError::NothingToCompact)
}

/// `span` as transcript text in pieces of at most `piece_bytes` (a message longer than a piece is
/// shortened as pruning shortens a result).
fn pieces(span: &[HistoryMessage], piece_bytes: usize) -> Vec<String> {
    let piece_bytes = piece_bytes.max(1024);
    let mut out = Vec::new();
    let mut current = String::new();
    for message in span {
        let line = match message {
            HistoryMessage::User { text, .. } => format!("[user]\n{text}\n"),
            HistoryMessage::Assistant { text, tool_calls } => {
                let mut line = format!("[assistant]\n{text}\n");
                for call in tool_calls {
                    line.push_str(&format!(
                        "[call {} {}] {}\n",
                        call.id, call.name, call.arguments
                    ));
                }
                line
            }
            HistoryMessage::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let kind = if *is_error { "error" } else { "result" };
                format!("[{kind} of {call_id}]\n{content}\n")
            }
        };
        let line = pruned(&line, piece_bytes as u64 - 256);
        if !current.is_empty() && current.len() + line.len() > piece_bytes {
            out.push(std::mem::take(&mut current));
        }
        current.push_str(&line);
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transcript_is_cut_into_pieces_that_each_fit() {
        let span: Vec<_> = (0..50)
            .map(|i| HistoryMessage::ToolResult {
                call_id: format!("c{i}"),
                content: "x".repeat(if i == 7 { 100_000 } else { 900 }),
                is_error: false,
            })
            .collect();
        let pieces = pieces(&span, 4096);
        assert!(pieces.len() > 10);
        assert!(pieces.iter().all(|p| p.len() <= 4096), "every piece fits");
        let all = pieces.concat();
        assert!(all.contains("[result of c0]") && all.contains("[result of c49]"));
        assert!(
            all.contains("bytes of this output were cut"),
            "the long one was shortened"
        );
    }
}
