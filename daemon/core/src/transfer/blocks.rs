//! Upstream DeepSeek Harness message content: a list of typed blocks (`text`, `reasoning`,
//! `tool-call`, `tool-result`), read by the upstream importer and by its surface.

use serde_json::Value;

/// The text of content blocks (their `text` blocks, joined), or of a plain string.
pub(super) fn text_of(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(blocks)) => blocks
            .iter()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}
