//! JSON-RPC 2.0 over newline-delimited stdio, as ACP frames it: one message per line, stdout
//! carries protocol messages only. Parsing never fails the connection: a line that is not a
//! message gets an error response and the next line is read.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};

/// JSON-RPC's standard error codes, and ACP's.
pub mod code {
    /// The line is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// JSON, but not a JSON-RPC request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// The params do not fit the method.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The bridge or the daemon failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// ACP: authentication is required before this call (here: dshd has no model API key).
    pub const AUTH_REQUIRED: i64 = -32000;
    /// ACP: the resource (a session) does not exist.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
}

/// An error answer: a code, a message for a person, optional data.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// One of [`code`].
    pub code: i64,
    /// What went wrong, naming the field at fault for bad params.
    pub message: String,
    /// Extra detail (the gRPC status code, for errors of the daemon).
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// Bad params: `message` starts with the field.
    pub fn params(message: impl Into<String>) -> Self {
        Self::new(code::INVALID_PARAMS, message)
    }

    /// A failure of the bridge or the daemon.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(code::INTERNAL_ERROR, message)
    }

    fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }
}

/// One line read from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A request to answer.
    Request {
        /// Its id (a number or a string), echoed in the answer.
        id: Value,
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// Its params (`null` when absent).
        params: Value,
    },
    /// The client's answer to one of our requests.
    Response {
        /// The id of our request.
        id: Value,
        /// The result, or the client's error.
        result: Result<Value, RpcError>,
    },
    /// Not a message: answer with this error (and this id, `null` when it could not be read).
    Invalid {
        /// The id, if the line had a usable one.
        id: Value,
        /// Why the line is not a message.
        error: RpcError,
    },
}

/// Reads one line as a JSON-RPC message.
pub fn parse(line: &str) -> Incoming {
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(code::PARSE_ERROR, format!("parse error: {e}")),
            };
        }
    };
    let Value::Object(mut message) = value else {
        return invalid(Value::Null, "a message must be a JSON object");
    };
    let id = message.remove("id");
    if let Some(id) = &id
        && !(id.is_string() || id.is_number() || id.is_null())
    {
        return invalid(Value::Null, "id: must be a string, a number or null");
    }
    if message.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(id.unwrap_or(Value::Null), "jsonrpc: must be \"2.0\"");
    }
    let params = message.remove("params").unwrap_or(Value::Null);
    match (message.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Incoming::Request { id, method, params },
        (Some(Value::String(method)), None) => Incoming::Notification { method, params },
        (Some(_), id) => invalid(id.unwrap_or(Value::Null), "method: must be a string"),
        (None, Some(id)) => {
            let result = match (message.remove("result"), message.remove("error")) {
                (Some(result), None) => Ok(result),
                (None, Some(error)) => Err(RpcError {
                    code: error
                        .get("code")
                        .and_then(Value::as_i64)
                        .unwrap_or(code::INTERNAL_ERROR),
                    message: error
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the client answered with an error")
                        .to_owned(),
                    data: error.get("data").cloned(),
                }),
                _ => return invalid(id, "a response needs exactly one of result and error"),
            };
            Incoming::Response { id, result }
        }
        (None, None) => invalid(Value::Null, "method: required"),
    }
}

fn invalid(id: Value, message: &str) -> Incoming {
    Incoming::Invalid {
        id,
        error: RpcError::new(code::INVALID_REQUEST, format!("invalid request: {message}")),
    }
}

/// How many messages may wait for stdout before senders wait: a client that stops reading slows
/// the bridge's reading of the daemon's streams, never the daemon (which does not wait for us).
const OUTGOING_QUEUE: usize = 1024;

/// Our requests waiting for the client's answer, by id.
type Waiting = Mutex<HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>>;

/// The sending side of the connection: answers, notifications and our own requests to the
/// client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Peer {
    out: mpsc::Sender<String>,
    next_id: Arc<AtomicU64>,
    waiting: Arc<Waiting>,
}

impl Peer {
    /// A peer and the receiver that [`write_out`] drains to stdout.
    pub fn new() -> (Self, mpsc::Receiver<String>) {
        let (out, rx) = mpsc::channel(OUTGOING_QUEUE);
        let peer = Self {
            out,
            next_id: Arc::new(AtomicU64::new(0)),
            waiting: Arc::default(),
        };
        (peer, rx)
    }

    async fn send(&self, message: Value) {
        // The writer only goes away when stdout is closed; then nobody can be told anything.
        let _ = self.out.send(message.to_string()).await;
    }

    /// Answers request `id`.
    pub async fn respond(&self, id: Value, result: Result<Value, RpcError>) {
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}),
        };
        self.send(message).await;
    }

    /// Sends a notification.
    pub async fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Sends a request to the client and waits for its answer. An error when the client answers
    /// with one or the connection ends first.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        rx.await
            .unwrap_or_else(|_| Err(RpcError::internal("the client went away")))
    }

    /// Hands the client's answer to the request waiting for it; false when none waits.
    pub fn answered(&self, id: &Value, result: Result<Value, RpcError>) -> bool {
        let Some(tx) = id.as_u64().and_then(|id| self.lock().remove(&id)) else {
            return false;
        };
        let _ = tx.send(result);
        true
    }

    /// Fails every request still waiting for the client (its input ended).
    pub fn abandon(&self) {
        self.lock().clear();
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Writes queued messages to `out`, one per line, flushing whenever the queue is empty, until
/// every [`Peer`] is gone. An error when `out` is closed.
pub async fn write_out(
    mut rx: mpsc::Receiver<String>,
    out: impl AsyncWrite + Unpin,
) -> std::io::Result<()> {
    let mut out = BufWriter::new(out);
    while let Some(line) = rx.recv().await {
        out.write_all(line.as_bytes()).await?;
        out.write_all(b"\n").await?;
        while let Ok(line) = rx.try_recv() {
            out.write_all(line.as_bytes()).await?;
            out.write_all(b"\n").await?;
        }
        out.flush().await?;
    }
    out.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_requests_notifications_responses_or_errors() {
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#),
            Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({"a": 1})
            }
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","method":"session/cancel"}"#),
            Incoming::Notification {
                method: "session/cancel".into(),
                params: Value::Null
            }
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":3,"result":{"x":true}}"#),
            Incoming::Response {
                id: json!(3),
                result: Ok(json!({"x": true}))
            }
        );
        let Incoming::Response { result: Err(e), .. } =
            parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#)
        else {
            panic!("not an error response");
        };
        assert_eq!((e.code, e.message.as_str()), (-1, "no"));
        for (line, code, id) in [
            ("{not json", code::PARSE_ERROR, Value::Null),
            ("[1,2]", code::INVALID_REQUEST, Value::Null),
            (r#"{"id":7,"method":"x"}"#, code::INVALID_REQUEST, json!(7)),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":5}"#,
                code::INVALID_REQUEST,
                json!("a"),
            ),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
                code::INVALID_REQUEST,
                Value::Null,
            ),
            (r#"{"jsonrpc":"2.0"}"#, code::INVALID_REQUEST, Value::Null),
        ] {
            match parse(line) {
                Incoming::Invalid { id: got, error } => {
                    assert_eq!((error.code, got), (code, id), "{line}");
                }
                other => panic!("{line}: {other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_request_to_the_client_gets_the_answer_with_its_id() {
        let (peer, mut rx) = Peer::new();
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move { peer.request("session/request_permission", json!({})).await }
        });
        let sent: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(sent["method"], "session/request_permission");
        assert!(!peer.answered(&json!(999), Ok(json!(1))), "no such request");
        assert!(peer.answered(&sent["id"], Ok(json!({"ok": 1}))));
        assert_eq!(asking.await.unwrap(), Ok(json!({"ok": 1})));
    }
}
