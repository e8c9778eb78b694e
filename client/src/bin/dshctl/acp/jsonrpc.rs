//! JSON-RPC 2.0 over newline-delimited stdio, as ACP frames it: one message per line, stdout
//! carries protocol messages only. Parsing never fails the connection: a line that is not a
//! message gets an error response and the next line is read (`lines.rs` reads the lines). A
//! request's id is kept as the client wrote it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::sync::{mpsc, oneshot};

/// A request id exactly as the client wrote it (a number, a string or `null`), echoed byte for
/// byte: an integer beyond 64 bits read as a number would come back as a float, and a string's
/// escapes would be rewritten.
pub type Id = Box<RawValue>;

/// The `null` id, for answers to lines whose id could not be read.
pub(super) fn null_id() -> Id {
    RawValue::NULL.to_owned()
}

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
    /// A request withdrawn with `$/cancel_request` (ACP's "Request Cancelled").
    pub const REQUEST_CANCELLED: i64 = -32800;
}

/// An error answer: a code, a message for a person, optional data.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    /// One of [`code`].
    pub code: i64,
    /// What went wrong, naming the field at fault for bad params.
    pub message: String,
    /// What a program can act on, for errors of the daemon.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<ErrorData>,
}

/// The `data` of an error that comes from a refusal of dshd's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorData {
    /// The gRPC status code's name, e.g. `FailedPrecondition`.
    pub grpc_code: String,
    /// The refusal's reason (docs/PROTOCOL.md, "Errors"), e.g. `AGENT_BUSY`, when dshd gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
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
}

/// Params or a result as the peer wrote them, read into a type by whoever needs them.
pub type Raw = Box<RawValue>;

/// One line read from the client.
#[derive(Debug)]
pub enum Incoming {
    /// A request to answer.
    Request {
        /// Its id (a number, a string or null), echoed in the answer.
        id: Id,
        /// The method.
        method: String,
        /// Its params, when it has any.
        params: Option<Raw>,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// Its params, when it has any.
        params: Option<Raw>,
    },
    /// The client's answer to one of our requests.
    Response {
        /// The id of our request.
        id: Id,
        /// The result, or the client's error.
        result: Result<Raw, RpcError>,
    },
    /// Not a message: answer with this error (and this id, `null` when it could not be read).
    Invalid {
        /// The id, if the line had a usable one.
        id: Id,
        /// Why the line is not a message.
        error: RpcError,
    },
}

/// A JSON-RPC message as written: every member kept as the client wrote it (a member written as
/// `null` is present, unlike an absent one), then read by [`parse`], which says which member is
/// at fault.
#[derive(Debug, Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// A member that is there, `null` included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The error object of a client's error answer.
#[derive(Debug, Deserialize)]
struct ErrorObject {
    #[serde(default = "internal_code")]
    code: i64,
    #[serde(default)]
    message: Option<String>,
}

fn internal_code() -> i64 {
    code::INTERNAL_ERROR
}

/// Reads one line as a JSON-RPC message.
pub fn parse(line: &str) -> Incoming {
    if let Err(e) = serde_json::from_str::<&RawValue>(line) {
        return Incoming::Invalid {
            id: null_id(),
            error: RpcError::new(code::PARSE_ERROR, format!("parse error: {e}")),
        };
    }
    // Valid JSON: an object starts with `{` (a struct would also be read from an array).
    if !line.trim_start().starts_with('{') {
        return invalid(null_id(), "a message must be a JSON object");
    }
    let message = match serde_json::from_str::<Envelope<'_>>(line) {
        Ok(message) => message,
        // A member given twice.
        Err(e) => return invalid(null_id(), &e.to_string()),
    };
    let id: Option<Id> = message.id.map(ToOwned::to_owned);
    if let Some(id) = &id
        && !matches!(
            id.get().as_bytes().first(),
            Some(b'"' | b'-' | b'0'..=b'9' | b'n')
        )
    {
        return invalid(null_id(), "id: must be a string, a number or null");
    }
    let version = message
        .jsonrpc
        .and_then(|v| serde_json::from_str::<std::borrow::Cow<'_, str>>(v.get()).ok());
    if version.as_deref() != Some("2.0") {
        return invalid(id.unwrap_or_else(null_id), "jsonrpc: must be \"2.0\"");
    }
    let params = message.params.map(ToOwned::to_owned);
    let method = message
        .method
        .map(|m| serde_json::from_str::<String>(m.get()));
    match (method, id) {
        (Some(Ok(method)), Some(id)) => Incoming::Request { id, method, params },
        (Some(Ok(method)), None) => Incoming::Notification { method, params },
        (Some(Err(_)), id) => invalid(id.unwrap_or_else(null_id), "method: must be a string"),
        (None, Some(id)) => {
            let result = match (message.result, message.error) {
                (Some(result), None) => Ok(result.to_owned()),
                (None, Some(error)) => {
                    let error = serde_json::from_str::<ErrorObject>(error.get()).ok();
                    Err(RpcError::new(
                        error.as_ref().map_or(code::INTERNAL_ERROR, |e| e.code),
                        error
                            .and_then(|e| e.message)
                            .unwrap_or_else(|| "the client answered with an error".to_owned()),
                    ))
                }
                _ => return invalid(id, "a response needs exactly one of result and error"),
            };
            Incoming::Response { id, result }
        }
        (None, None) => invalid(null_id(), "method: required"),
    }
}

fn invalid(id: Id, message: &str) -> Incoming {
    Incoming::Invalid {
        id,
        error: RpcError::new(code::INVALID_REQUEST, format!("invalid request: {message}")),
    }
}

/// How many messages may wait for stdout before senders wait: a client that stops reading slows
/// the bridge's reading of the daemon's streams, never the daemon (which does not wait for us).
const OUTGOING_QUEUE: usize = 1024;

/// Our requests waiting for the client's answer, by id.
type Waiting = Mutex<HashMap<u64, oneshot::Sender<Result<Raw, RpcError>>>>;

/// JSON-RPC's version, the only one: written as `"2.0"`.
#[derive(Debug, Clone, Copy)]
struct V2;

impl Serialize for V2 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("2.0")
    }
}

/// A request the bridge sends.
#[derive(Debug, Serialize)]
struct Request<'a, P> {
    jsonrpc: V2,
    id: u64,
    method: &'a str,
    params: P,
}

/// A notification the bridge sends.
#[derive(Debug, Serialize)]
struct Notification<'a, P> {
    jsonrpc: V2,
    method: &'a str,
    params: P,
}

/// An answer: exactly one of `result` and `error`, with the request's id as it was written.
#[derive(Debug, Serialize)]
struct Response<'a> {
    jsonrpc: V2,
    id: &'a RawValue,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a RpcError>,
}

/// A message as JSON text: our own types, which always serialise.
fn to_text<T: Serialize>(message: &T) -> String {
    serde_json::to_string(message).unwrap_or_default()
}

/// `value` as JSON text to answer with, or the error that it could not be written.
pub fn to_raw<T: Serialize>(value: &T) -> Result<Raw, RpcError> {
    serde_json::value::to_raw_value(value)
        .map_err(|e| RpcError::internal(format!("cannot write the answer: {e}")))
}

/// `$/cancel_request`'s params: which of our requests is withdrawn.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CancelRequest {
    request_id: u64,
}

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

    async fn send_text(&self, message: String) {
        // The writer only goes away when stdout is closed; then nobody can be told anything.
        let _ = self.out.send(message).await;
    }

    /// Answers request `id` (written back as the client wrote it).
    pub async fn respond(&self, id: Id, result: Result<Raw, RpcError>) {
        let (result, error) = match &result {
            Ok(result) => (Some(&**result), None),
            Err(error) => (None, Some(error)),
        };
        self.send_text(to_text(&Response {
            jsonrpc: V2,
            id: &id,
            result,
            error,
        }))
        .await;
    }

    /// Sends a notification.
    pub async fn notify<P: Serialize>(&self, method: &str, params: P) {
        self.send_text(to_text(&Notification {
            jsonrpc: V2,
            method,
            params,
        }))
        .await;
    }

    /// Sends a request to the client and waits for its answer, read as `R`. An error when the
    /// client answers with one, with something else, or the connection ends first, and
    /// (`-32800`, [`code::REQUEST_CANCELLED`]) when `withdrawn` completes first: the client is then
    /// sent `$/cancel_request` for it.
    /// The client still answers a withdrawn request (ACP asks it to); that answer is taken and
    /// dropped.
    pub async fn request_until<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: P,
        withdrawn: impl std::future::Future<Output = ()>,
    ) -> Result<R, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        self.send_text(to_text(&Request {
            jsonrpc: V2,
            id,
            method,
            params,
        }))
        .await;
        let answer = tokio::select! {
            answer = rx => answer
                .unwrap_or_else(|_| Err(RpcError::internal("the client went away")))?,
            () = withdrawn => {
                self.notify("$/cancel_request", CancelRequest { request_id: id }).await;
                return Err(RpcError::new(
                    code::REQUEST_CANCELLED,
                    format!("{method} withdrawn: decided elsewhere"),
                ));
            }
        };
        serde_json::from_str(answer.get())
            .map_err(|e| RpcError::params(format!("the answer to {method}: {e}")))
    }

    /// Hands the client's answer to the request waiting for it; false when none waits.
    pub fn answered(&self, id: &RawValue, result: Result<Raw, RpcError>) -> bool {
        let ours = id.get().parse::<u64>().ok();
        let Some(tx) = ours.and_then(|id| self.lock().remove(&id)) else {
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
    ) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<Result<Raw, RpcError>>>> {
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
    use serde_json::{Value, json};

    fn raw(json: Value) -> Raw {
        serde_json::value::to_raw_value(&json).unwrap()
    }

    fn text(raw: Option<Raw>) -> Option<String> {
        raw.map(|r| r.get().to_owned())
    }

    /// The id and error of an answer the line gets, or what else it is.
    fn refused(line: &str) -> (String, i64) {
        match parse(line) {
            Incoming::Invalid { id, error } => (id.get().to_owned(), error.code),
            other => panic!("{line}: {other:?}"),
        }
    }

    #[test]
    fn lines_are_requests_notifications_responses_or_errors() {
        let Incoming::Request { id, method, params } =
            parse(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#)
        else {
            panic!("not a request");
        };
        assert_eq!(
            (id.get(), method.as_str(), text(params).as_deref()),
            ("1", "initialize", Some(r#"{"a":1}"#))
        );
        let Incoming::Notification { method, params } =
            parse(r#"{"jsonrpc":"2.0","method":"session/cancel"}"#)
        else {
            panic!("not a notification");
        };
        assert_eq!((method.as_str(), text(params)), ("session/cancel", None));
        let Incoming::Response { id, result } =
            parse(r#"{"jsonrpc":"2.0","id":3,"result":{"x":true}}"#)
        else {
            panic!("not a response");
        };
        assert_eq!(
            (id.get(), result.map(|r| r.get().to_owned())),
            ("3", Ok(r#"{"x":true}"#.to_owned()))
        );
        let Incoming::Response { result: Err(e), .. } =
            parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#)
        else {
            panic!("not an error response");
        };
        assert_eq!((e.code, e.message.as_str()), (-1, "no"));
        for (line, code, id) in [
            ("{not json", code::PARSE_ERROR, "null"),
            ("[1,2]", code::INVALID_REQUEST, "null"),
            (r#"{"id":7,"method":"x"}"#, code::INVALID_REQUEST, "7"),
            (
                r#"{"jsonrpc":"2.0","id":"a","method":5}"#,
                code::INVALID_REQUEST,
                r#""a""#,
            ),
            (
                r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#,
                code::INVALID_REQUEST,
                "null",
            ),
            (r#"{"jsonrpc":"2.0"}"#, code::INVALID_REQUEST, "null"),
        ] {
            assert_eq!(refused(line), (id.to_owned(), code), "{line}");
        }
    }

    #[test]
    fn ids_are_kept_as_written() {
        for id in [
            "18446744073709551616",
            "-0.0",
            "1e400",
            r#""\u00e9\"""#,
            "null",
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m"}}"#);
            let Incoming::Request { id: got, .. } = parse(&line) else {
                panic!("{line}: not a request");
            };
            assert_eq!(got.get(), id);
        }
    }

    #[tokio::test]
    async fn a_request_to_the_client_gets_the_answer_with_its_id() {
        let (peer, mut rx) = Peer::new();
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move {
                peer.request_until::<_, Value>(
                    "session/request_permission",
                    json!({}),
                    std::future::pending(),
                )
                .await
            }
        });
        let sent: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(sent["method"], "session/request_permission");
        let unknown = RawValue::from_string("999".to_owned()).unwrap();
        assert!(
            !peer.answered(&unknown, Ok(raw(json!(1)))),
            "no such request"
        );
        let id = RawValue::from_string(sent["id"].to_string()).unwrap();
        assert!(peer.answered(&id, Ok(raw(json!({"ok": 1})))));
        assert_eq!(asking.await.unwrap(), Ok(json!({"ok": 1})));
    }

    #[tokio::test]
    async fn a_withdrawn_request_is_cancelled_by_id_and_its_late_answer_taken_quietly() {
        let (peer, mut rx) = Peer::new();
        let (withdraw, withdrawn) = oneshot::channel::<()>();
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move {
                let withdrawn = async {
                    let _ = withdrawn.await;
                };
                peer.request_until::<_, Value>("m", json!({}), withdrawn)
                    .await
            }
        });
        let sent: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        withdraw.send(()).unwrap();
        let cancel: Value = serde_json::from_str(&rx.recv().await.unwrap()).unwrap();
        assert_eq!(cancel["method"], "$/cancel_request");
        assert_eq!(cancel["params"]["requestId"], sent["id"]);
        let error = asking.await.unwrap().unwrap_err();
        assert_eq!(error.code, code::REQUEST_CANCELLED);
        let id = RawValue::from_string(sent["id"].to_string()).unwrap();
        assert!(peer.answered(&id, Err(RpcError::new(-32800, "cancelled"))));
    }

    #[tokio::test]
    async fn an_answer_carries_the_id_as_it_was_written() {
        let (peer, mut rx) = Peer::new();
        let id = RawValue::from_string("18446744073709551616".to_owned()).unwrap();
        peer.respond(id, Ok(raw(json!({"a": 1})))).await;
        assert_eq!(
            rx.recv().await.unwrap(),
            r#"{"jsonrpc":"2.0","id":18446744073709551616,"result":{"a":1}}"#
        );
    }
}
