//! One server tool as an agent's tool: `mcp__<server>__<tool>`, its schema made acceptable to
//! the provider, its result made text the model reads.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::client::RemoteTool;
use super::config::MCP_PREFIX;
use super::server::Server;
use crate::call::{BoxFuture, Tool, ToolExecution, ToolOutput, ToolSchema};

/// Longest tool name the providers dsh speaks to accept (OpenAI's function names: 64).
const MAX_NAME: usize = 64;

/// Largest result text the model is given; the rest is cut, and the cut said.
const MAX_RESULT_BYTES: usize = 256 * 1024;

/// `mcp__<server>__<tool>`, or why that name cannot be offered.
pub(crate) fn tool_name(server: &str, tool: &str) -> Result<String, String> {
    let name = format!("{MCP_PREFIX}{server}__{tool}");
    if !tool
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        || tool.is_empty()
    {
        return Err(format!(
            "tool {tool:?}: a provider accepts only ASCII letters, digits, '_' and '-' in a tool name"
        ));
    }
    if name.len() > MAX_NAME {
        return Err(format!(
            "tool {tool:?}: {name} is {} characters, more than the {MAX_NAME} a provider accepts",
            name.len()
        ));
    }
    Ok(name)
}

/// The server's input schema as a provider takes it: an object schema at the top (some servers
/// send `{}` or leave out `type` or `properties` for a tool without arguments).
pub(crate) fn provider_schema(schema: &Map<String, Value>) -> Result<Value, String> {
    let mut schema = schema.clone();
    // A dialect marker some servers send (`draft-07`); providers validate against their own.
    schema.remove("$schema");
    match schema.get("type") {
        None => {
            schema.insert("type".into(), json!("object"));
        }
        Some(Value::String(t)) if t == "object" => {}
        Some(other) => {
            return Err(format!(
                "its input schema has type {other}, and a tool's arguments must be an object"
            ));
        }
    }
    schema.entry("properties").or_insert_with(|| json!({}));
    Ok(Value::Object(schema))
}

/// One server tool, offered to the agents of one server connection.
#[derive(Debug)]
pub(crate) struct McpTool {
    /// The server it belongs to.
    pub server: Arc<Server>,
    /// Its name on the server.
    pub remote: String,
    /// What the model is shown.
    pub schema: ToolSchema,
}

impl McpTool {
    /// The agent's tool for `remote` of `server`, or why it cannot be offered.
    pub(crate) fn new(server: Arc<Server>, remote: &RemoteTool) -> Result<Self, String> {
        let name = tool_name(&server.config.name, &remote.name)?;
        let parameters = provider_schema(&remote.input_schema)
            .map_err(|e| format!("tool {:?}: {e}", remote.name))?;
        let description = remote.description.clone().unwrap_or_else(|| {
            format!("Tool {} of MCP server {}", remote.name, server.config.name)
        });
        Ok(Self {
            schema: ToolSchema {
                name,
                description,
                parameters,
            },
            remote: remote.name.clone(),
            server,
        })
    }
}

impl Tool for McpTool {
    fn schema(&self) -> ToolSchema {
        self.schema.clone()
    }

    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let name = &self.schema.name;
            let arguments = match arguments {
                Value::Object(map) => map.clone(),
                Value::Null => Map::new(),
                other => {
                    return ToolOutput::refused(format!(
                        "Error: {name}: the arguments must be a JSON object, not {other}"
                    ));
                }
            };
            match self
                .server
                .call(&self.remote, arguments, &exec.cancel)
                .await
            {
                Ok(result) => render(&result),
                Err(error) => ToolOutput::error(format!("Error: {name}: {error}")),
            }
        })
    }
}

/// A `CallToolResult` as the model reads it: text blocks as they are, structured content as
/// JSON when there is no text, and every other block described (never dropped silently).
pub(crate) fn render(result: &Value) -> ToolOutput {
    let mut parts = Vec::new();
    let blocks = result["content"].as_array().map_or(&[][..], Vec::as_slice);
    for block in blocks {
        let part = match block["type"].as_str() {
            Some("text") => block["text"].as_str().unwrap_or_default().to_owned(),
            Some(kind @ ("image" | "audio")) => format!(
                "[{kind} content ({}, {} bytes of base64) not shown: dsh gives the model text only]",
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map_or(0, str::len)
            ),
            Some("resource") => match block["resource"]["text"].as_str() {
                Some(text) => format!(
                    "[resource {}]\n{text}",
                    block["resource"]["uri"].as_str().unwrap_or("")
                ),
                None => format!(
                    "[binary resource {} not shown]",
                    block["resource"]["uri"].as_str().unwrap_or("")
                ),
            },
            Some("resource_link") => format!(
                "[resource link {} ({})]",
                block["uri"].as_str().unwrap_or(""),
                block["name"].as_str().unwrap_or("")
            ),
            other => format!("[content of type {} not shown]", other.unwrap_or("unknown")),
        };
        parts.push(part);
    }
    if parts.iter().all(String::is_empty)
        && let Some(structured) = result.get("structuredContent")
    {
        parts = vec![structured.to_string()];
    }
    let mut text = parts.join("\n");
    if text.len() > MAX_RESULT_BYTES {
        let mut end = MAX_RESULT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let total = text.len();
        text.truncate(end);
        text.push_str(&format!(
            "\n[result cut: {total} bytes, the first {end} shown]"
        ));
    }
    if result["isError"].as_bool() == Some(true) {
        ToolOutput::error(text)
    } else {
        ToolOutput::ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_schemas_are_made_acceptable_or_refused_with_a_reason() {
        assert_eq!(
            tool_name("gh", "list_issues").unwrap(),
            "mcp__gh__list_issues"
        );
        assert!(
            tool_name("gh", "a.b")
                .unwrap_err()
                .contains("ASCII letters")
        );
        assert!(tool_name("gh", &"x".repeat(60)).unwrap_err().contains("64"));
        let marked = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"m": {"type": "string"}}});
        assert_eq!(
            provider_schema(marked.as_object().unwrap()).unwrap(),
            json!({"type": "object", "properties": {"m": {"type": "string"}}})
        );
        let empty = Map::new();
        assert_eq!(
            provider_schema(&empty).unwrap(),
            json!({"type": "object", "properties": {}})
        );
        let array = json!({"type": "array"}).as_object().unwrap().clone();
        assert!(
            provider_schema(&array)
                .unwrap_err()
                .contains("must be an object")
        );
    }

    #[test]
    fn every_block_is_shown_or_described() {
        let out = render(&json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "mimeType": "image/png", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "body"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
        ]}));
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "hello\n[image content (image/png, 4 bytes of base64) not shown: dsh gives the model text only]\n[resource file:///a]\nbody\n[resource link file:///b (b)]"
        );
        let structured =
            render(&json!({"content": [], "structuredContent": {"n": 1}, "isError": true}));
        assert!(structured.is_error);
        assert_eq!(structured.content, "{\"n\":1}");
        let big =
            render(&json!({"content": [{"type": "text", "text": "é".repeat(MAX_RESULT_BYTES)}]}));
        assert!(big.content.len() < MAX_RESULT_BYTES + 100);
        assert!(
            big.content.ends_with("the first 262144 shown]"),
            "{}",
            &big.content[big.content.len() - 60..]
        );
    }
}
