//! The stdin payload: one compact JSON object whose keys keep the order they are written in.
//!
//! Key order is part of the compatibility surface (upstream writes `session_id`,
//! `transcript_path`, `cwd`, `hook_event_name` first, and snapshot tests compare bytes), while the
//! workspace's `serde_json` sorts object keys. So the top level is written by hand here; nested
//! values (`tool_input`, `tool_response`) are serialised by `serde_json` as they are.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::{Dialect, tools};
use crate::persistence::PersistenceHandle;
use dsh_session::SessionHeader;

/// A JSON object being written, keys in call order.
#[derive(Debug)]
pub(super) struct Payload {
    text: String,
}

impl Payload {
    /// An empty object.
    pub(super) fn new() -> Self {
        Self {
            text: String::from("{"),
        }
    }

    /// Appends `key: value`.
    pub(super) fn value(mut self, key: &str, value: &Value) -> Self {
        if self.text.len() > 1 {
            self.text.push(',');
        }
        // `Value`'s Display is compact JSON and infallible; writing to a String cannot fail.
        let _ = write!(self.text, "{}:{}", Value::from(key), value);
        self
    }

    /// Appends a string value.
    pub(super) fn str(self, key: &str, value: &str) -> Self {
        self.value(key, &Value::from(value))
    }

    /// Appends a string value, or `null`.
    pub(super) fn opt_str(self, key: &str, value: Option<&str>) -> Self {
        self.value(key, &value.map_or(Value::Null, Value::from))
    }

    /// Appends a number.
    pub(super) fn num(self, key: &str, value: u64) -> Self {
        self.value(key, &Value::from(value))
    }

    /// Appends a boolean value.
    pub(super) fn bool(self, key: &str, value: bool) -> Self {
        self.value(key, &Value::Bool(value))
    }

    /// Appends `tool_name` and `tool_input`: the tool as `dialect` names it and its input, of a
    /// call made in `cwd`, in that dialect's shape.
    pub(super) fn tool(self, dialect: Dialect, name: &str, arguments: &Value, cwd: &Path) -> Self {
        self.str("tool_name", tools::payload_name(dialect, name))
            .value("tool_input", &tools::input(dialect, name, arguments, cwd))
    }

    /// The object's bytes, with a trailing newline when asked.
    pub(super) fn finish(mut self, newline: bool) -> Vec<u8> {
        self.text.push('}');
        if newline {
            self.text.push('\n');
        }
        self.text.into_bytes()
    }
}

/// The session's transcript path as the active backend answers it right now (no I/O: `locate`
/// never creates, flushes or reads anything).
pub(super) fn transcript(
    persistence: &PersistenceHandle,
    header: &SessionHeader,
) -> Option<String> {
    // A database backend has no file to name (`path` is empty): no transcript path.
    persistence
        .locate(header)
        .filter(|l| l.database.is_none())
        .map(|l| l.path.to_string_lossy().into_owned())
}

/// A path as payload text (session cwds are UTF-8 by construction; anything else is lossy).
pub(super) fn path_text(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_and_values_are_escaped() {
        let bytes = Payload::new()
            .str("z", "a\"b\n")
            .opt_str("a", None)
            .bool("m", true)
            .value("n", &serde_json::json!({"y": 1, "x": [1, "2"]}))
            .finish(true);
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            "{\"z\":\"a\\\"b\\n\",\"a\":null,\"m\":true,\"n\":{\"x\":[1,\"2\"],\"y\":1}}\n"
        );
        assert_eq!(Payload::new().finish(false), b"{}");
    }
}
