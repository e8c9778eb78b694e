//! The terms of a compaction (`compaction/start`, `compaction/end`): what started it and the one
//! rule by which an old tool result is shrunk, shared by dshd (which decides) and every reader of
//! the log (which derives the same history from it).

use serde::{Deserialize, Serialize};

/// The plugin name a compaction's summary is sent under, as a user message of its own.
pub const SUMMARY_PLUGIN: &str = "compaction";

/// The words before a summary in the history sent to the model: the model reads it as what
/// happened before, not as a new request.
pub const SUMMARY_PREFIX: &str = "The conversation so far was compacted to fit the model's \
context window. This summary, written at that point, replaces the earlier messages; the newest \
request and the recent messages follow it verbatim.\n\n";

/// What started a compaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionTrigger {
    /// A person asked for it (`Agents.Compact`, `dshctl compact`, ACP `/compact`).
    Manual,
    /// The next request would have passed the threshold, or the provider refused one as too
    /// long.
    Auto,
}

impl CompactionTrigger {
    /// `manual` or `auto` (Claude Code's PreCompact `trigger`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Manual => "manual",
            Self::Auto => "auto",
        }
    }
}

/// `content` as a compaction that keeps `keep` bytes of each pruned result sends it: unchanged
/// when it is no longer than `keep`, otherwise its head and tail (half of `keep` each, cut at
/// character boundaries) around a line that says how much was cut and where the rest is.
pub fn pruned(content: &str, keep: u64) -> String {
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    if content.len() <= keep {
        return content.to_owned();
    }
    let mut head = keep / 2;
    while !content.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = content.len() - keep / 2;
    while !content.is_char_boundary(tail) {
        tail += 1;
    }
    let cut = tail - head;
    format!(
        "{}\n[… {cut} bytes of this output were cut when the context was compacted; the whole \
         output is in the session log …]\n{}",
        &content[..head],
        &content[tail..]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_within_the_budget_is_kept_and_a_longer_one_keeps_head_and_tail() {
        assert_eq!(pruned("short", 10), "short");
        let long = format!("{}{}{}", "a".repeat(100), "b".repeat(1000), "c".repeat(100));
        let shrunk = pruned(&long, 200);
        assert!(shrunk.starts_with(&"a".repeat(100)), "{shrunk}");
        assert!(shrunk.ends_with(&"c".repeat(100)), "{shrunk}");
        assert!(
            shrunk.contains("1000 bytes of this output were cut"),
            "{shrunk}"
        );
        assert!(!shrunk.contains("bb"), "{shrunk}");
    }

    #[test]
    fn pruning_never_splits_a_character() {
        let text = "é".repeat(500);
        let shrunk = pruned(&text, 101);
        assert!(shrunk.len() < text.len());
        assert!(shrunk.starts_with('é') && shrunk.ends_with('é'));
    }
}
