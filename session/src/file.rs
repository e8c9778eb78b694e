//! What a file tool did to a file, as its `tool/file` event says.

use serde::{Deserialize, Serialize};

/// The kind of a file tool's call, as editors show it (ACP's tool kinds `read` and `edit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileToolKind {
    /// The file was read (`read`).
    Read,
    /// The file was changed or created (`write`, `edit`).
    Edit,
}

impl FileToolKind {
    /// The name in events: `read` or `edit`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Edit => "edit",
        }
    }
}

impl std::fmt::Display for FileToolKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A file change a person is asked to approve (`approval/request`'s `change`): the file, the
/// unified diff, and the texts before and after when they are small (ACP's `diff` content is the
/// two texts, not a patch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProposedChange {
    /// The file, absolute, as the call named it.
    pub path: String,
    /// The unified diff from before to after (`--- /dev/null` for a new file).
    pub diff: String,
    /// The text before (absent for a new file, or when the texts are large).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_text: Option<String>,
    /// The text after (absent when the texts are large).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_text: Option<String>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::{Event, EventData, FileToolKind};

    /// A change's event keeps its diff and hashes through the log's JSON; a read's has none.
    #[test]
    fn tool_file_events_round_trip() {
        for (kind, diff) in [
            (
                FileToolKind::Edit,
                Some("--- /w/a\n+++ /w/a\n@@ -1 +1 @@\n-a\n+b\n".to_owned()),
            ),
            (FileToolKind::Read, None),
        ] {
            let event = Event {
                seq: 4,
                time: 1,
                data: EventData::ToolFile {
                    turn: 1,
                    step: 2,
                    call_id: "c".into(),
                    path: "/w/a".into(),
                    kind,
                    old_hash: diff.as_ref().map(|_| "sha256:00".to_owned()),
                    new_hash: diff.as_ref().map(|_| "sha256:11".to_owned()),
                    old_text: diff.as_ref().map(|_| "a\n".to_owned()),
                    new_text: diff.as_ref().map(|_| "b\n".to_owned()),
                    diff,
                },
            };
            let json = event.to_json();
            assert!(json.contains(r#""type":"tool/file""#), "{json}");
            assert!(json.contains(&format!(r#""kind":"{kind}""#)), "{json}");
            assert_eq!(
                kind == FileToolKind::Edit,
                json.contains("oldHash"),
                "{json}"
            );
            assert_eq!(serde_json::from_str::<Event>(&json).unwrap(), event);
        }
    }
}

/// One project instructions file as a session loaded it (`session/instructions`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstructionFile {
    /// The file, absolute.
    pub path: String,
    /// How many of its bytes the session took.
    pub bytes: u64,
    /// Whether it was cut to the instructions budget.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}
