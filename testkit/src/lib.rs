//! Test support shared by dsh's crates: a mock of an OpenAI-compatible chat-completions server.
//!
//! The mock is an in-process HTTP/1.1 server on 127.0.0.1 that records each request and answers
//! with a scripted sequence of replies (plain responses, SSE streams that end cleanly, are cut, or
//! stall), or with what a function of the request says ([`Mock::start_with`], a model that reads
//! what it is sent). It may have a context window ([`Mock::set_context_window`]): a chat request
//! longer than it is refused as the real API refuses one ([`count_tokens`] is its counting rule).
//! A `GET …/models` is answered apart, as DeepSeek's API lists its models (or with what
//! [`Mock::set_models`] gave), so listing models never takes a scripted reply. No test reaches
//! the internet.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test support: a broken mock should fail loudly.

pub mod bench;
pub mod postgres;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the mock answers to one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A complete response with `content-length`.
    Plain {
        status: u16,
        headers: Vec<(&'static str, String)>,
        body: String,
    },
    /// A 200 event stream: each piece is written and flushed separately, then `end` happens.
    Stream { pieces: Vec<String>, end: End },
    /// A complete stream that pauses before its last piece, so the client has caught up and the
    /// time after that piece is the provider's own (overhead measurement).
    Paced { pieces: Vec<String> },
    /// A complete 200 event stream of [`huge_text`]`(bytes, fragment)`: one text delta per
    /// fragment, then `finish_reason: stop` and `[DONE]`, written in large chunks as fast as the
    /// client reads (a reply of tens of megabytes without building it in memory first).
    Huge { bytes: usize, fragment: usize },
    /// [`Reply::Huge`] at a steady pace, as a model produces text: the stream goes out in chunks
    /// of about `chunk` bytes, the i-th no earlier than `i × every` after the first (a late chunk
    /// does not push the later ones back).
    Metered {
        bytes: usize,
        fragment: usize,
        chunk: usize,
        every: Duration,
    },
    /// Reads the request, then never answers.
    Silent,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum End {
    /// Chunked encoding, properly terminated.
    Complete,
    /// Chunked encoding, connection closed without the terminating chunk.
    Cut,
    /// No framing: the body ends when the connection closes (HTTP/1.1 close-delimited).
    Close,
    /// Chunked encoding, then nothing more while the connection stays open.
    Stall,
}

/// One request as the mock saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// HTTP method.
    pub method: String,
    /// Request path.
    pub path: String,
    /// Headers, names lower-cased.
    pub headers: HashMap<String, String>,
    /// The JSON body (`null` when it was not JSON).
    pub body: Value,
    /// The body's length in bytes.
    pub body_bytes: usize,
}

impl Recorded {
    /// The request's size in tokens by the mock's rule ([`count_tokens`]).
    pub fn tokens(&self) -> u64 {
        count_tokens(self.body_bytes)
    }
}

/// The mock's token count of a request body of `bytes` bytes: one token per four bytes, rounded
/// up (about what BPE tokenizers give for English and code; a rule, so tests can reason about
/// it exactly).
pub fn count_tokens(bytes: usize) -> u64 {
    bytes.div_ceil(4) as u64
}

/// The refusal of a request of `tokens` tokens by a model whose context holds `window`: HTTP 400
/// with the body OpenAI-compatible APIs send (DeepSeek's, which carries no specific `code`).
pub fn context_exceeded(window: u64, tokens: u64) -> Reply {
    let message = format!(
        "This model's maximum context length is {window} tokens. However, you requested {tokens} \
         tokens ({tokens} in the messages, 0 in the completion). Please reduce the length of the \
         messages or completion."
    );
    let body = json!({"error": {"message": message, "type": "invalid_request_error",
        "param": null, "code": "invalid_request_error"}});
    status(400, vec![], &body.to_string())
}

/// Answers one request.
type Respond = dyn Fn(&Recorded) -> Reply + Send + Sync;

/// Where the mock's answers come from.
enum Replies {
    /// In order, then 500s.
    Queue(VecDeque<Reply>),
    /// What the function says of each request.
    Function(Arc<Respond>),
}

pub struct Mock {
    /// `http://127.0.0.1:<port>`.
    pub base_url: String,
    /// Every request seen so far (shared with the serving tasks).
    pub requests: Arc<Mutex<Vec<Recorded>>>,
    /// When the last piece of the latest stream was about to be written (overhead measurement).
    pub last_byte: Arc<Mutex<Option<Instant>>>,
    /// The answer to `GET …/models`.
    models: Arc<Mutex<Reply>>,
    /// Tokens a chat request may have (0: no limit).
    window: Arc<std::sync::atomic::AtomicU64>,
}

/// DeepSeek's answer to `GET /models`.
pub const DEEPSEEK_MODELS: &str = r#"{"object":"list","data":[{"id":"deepseek-v4-flash","object":"model","owned_by":"deepseek"},{"id":"deepseek-v4-pro","object":"model","owned_by":"deepseek"}]}"#;

impl Mock {
    /// Starts a mock answering requests with `replies`, in order (then 500s).
    pub async fn start(replies: Vec<Reply>) -> Self {
        Self::serving(Replies::Queue(VecDeque::from(replies))).await
    }

    /// Starts a mock answering each request with what `respond` says of it.
    pub async fn start_with(respond: impl Fn(&Recorded) -> Reply + Send + Sync + 'static) -> Self {
        Self::serving(Replies::Function(Arc::new(respond))).await
    }

    /// From now on a chat request of more than `tokens` tokens ([`count_tokens`]) is refused
    /// with [`context_exceeded`] (and recorded, as the real API sees it).
    pub fn set_context_window(&self, tokens: u64) {
        self.window
            .store(tokens, std::sync::atomic::Ordering::Relaxed);
    }

    async fn serving(replies: Replies) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let last_byte = Arc::new(Mutex::new(None));
        let replies = Arc::new(Mutex::new(replies));
        let models = Arc::new(Mutex::new(status(200, vec![], DEEPSEEK_MODELS)));
        let window = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (log, stamp, listing) = (requests.clone(), last_byte.clone(), models.clone());
        let limit = window.clone();
        tokio::spawn(async move {
            loop {
                let Ok((socket, _)) = listener.accept().await else {
                    return;
                };
                let (log, stamp, replies) = (log.clone(), stamp.clone(), replies.clone());
                let (listing, limit) = (listing.clone(), limit.clone());
                tokio::spawn(async move {
                    serve(socket, log, stamp, replies, listing, limit).await;
                });
            }
        });
        Self {
            base_url,
            requests,
            last_byte,
            models,
            window,
        }
    }

    /// Answers `GET …/models` with `reply` from now on.
    pub fn set_models(&self, reply: Reply) {
        *self.models.lock().unwrap() = reply;
    }

    /// Every request seen so far.
    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

async fn serve(
    mut socket: TcpStream,
    log: Arc<Mutex<Vec<Recorded>>>,
    stamp: Arc<Mutex<Option<Instant>>>,
    replies: Arc<Mutex<Replies>>,
    models: Arc<Mutex<Reply>>,
    window: Arc<std::sync::atomic::AtomicU64>,
) {
    // Without it, Nagle's algorithm delays the small SSE writes and the overhead measurement
    // would time TCP instead of the provider.
    let _ = socket.set_nodelay(true);
    let Some(request) = read_request(&mut socket).await else {
        return;
    };
    let listing = request.method == "GET" && request.path.ends_with("/models");
    let window = window.load(std::sync::atomic::Ordering::Relaxed);
    let next = if listing {
        Some(models.lock().unwrap().clone())
    } else if window > 0 && request.tokens() > window {
        Some(context_exceeded(window, request.tokens()))
    } else {
        let mut replies = replies.lock().unwrap();
        match &mut *replies {
            Replies::Queue(queue) => queue.pop_front(),
            Replies::Function(respond) => Some(respond(&request)),
        }
    };
    log.lock().unwrap().push(request);
    let reply = next.unwrap_or(Reply::Plain {
        status: 500,
        headers: vec![],
        body: "mock: no reply scripted".into(),
    });
    match reply {
        Reply::Plain {
            status,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {status} Mock\r\ncontent-length: {}\r\nconnection: close\r\n",
                body.len()
            );
            for (name, value) in headers {
                head.push_str(&format!("{name}: {value}\r\n"));
            }
            head.push_str("\r\n");
            head.push_str(&body);
            let _ = socket.write_all(head.as_bytes()).await;
        }
        Reply::Paced { pieces } => {
            stream(&mut socket, pieces, End::Complete, Some(&stamp)).await;
        }
        Reply::Stream { pieces, end } => {
            stream(&mut socket, pieces, end, None).await;
        }
        Reply::Huge { bytes, fragment } => {
            huge(&mut socket, bytes, fragment, 256 * 1024, None).await;
        }
        Reply::Metered {
            bytes,
            fragment,
            chunk,
            every,
        } => huge(&mut socket, bytes, fragment, chunk, Some(every)).await,
        Reply::Silent => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
    }
    let _ = socket.shutdown().await;
}

async fn stream(
    socket: &mut TcpStream,
    pieces: Vec<String>,
    end: End,
    stamp: Option<&Mutex<Option<Instant>>>,
) {
    let framing = if end == End::Close {
        ""
    } else {
        "transfer-encoding: chunked\r\n"
    };
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n{framing}\r\n"
    );
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let count = pieces.len();
    for (i, piece) in pieces.into_iter().enumerate() {
        if i + 1 == count
            && let Some(stamp) = stamp
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
            *stamp.lock().unwrap() = Some(Instant::now());
        }
        let bytes = if end == End::Close {
            piece.into_bytes()
        } else {
            format!("{:x}\r\n{piece}\r\n", piece.len()).into_bytes()
        };
        if socket.write_all(&bytes).await.is_err() || socket.flush().await.is_err() {
            return;
        }
    }
    match end {
        End::Complete => {
            let _ = socket.write_all(b"0\r\n\r\n").await;
            let _ = socket.flush().await;
        }
        End::Cut | End::Close => {}
        End::Stall => tokio::time::sleep(Duration::from_secs(3600)).await,
    }
}

async fn huge(
    socket: &mut TcpStream,
    bytes: usize,
    fragment: usize,
    chunk_bytes: usize,
    every: Option<Duration>,
) {
    let start = tokio::time::Instant::now();
    let mut sent = 0u32;
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n";
    if socket.write_all(head.as_bytes()).await.is_err() {
        return;
    }
    let mut chunk = String::with_capacity(chunk_bytes + 1024);
    let tail = [finish("stop"), DONE.to_owned()];
    let pieces = huge_fragments(bytes, fragment)
        .map(|text| text_delta(&text))
        .chain(tail);
    for piece in pieces {
        chunk.push_str(&piece);
        if chunk.len() >= chunk_bytes {
            if let Some(every) = every {
                tokio::time::sleep_until(start + every * sent).await;
                sent += 1;
            }
            let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
            if socket.write_all(framed.as_bytes()).await.is_err() {
                return;
            }
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        let framed = format!("{:x}\r\n{chunk}\r\n", chunk.len());
        if socket.write_all(framed.as_bytes()).await.is_err() {
            return;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let _ = socket.flush().await;
}

/// The fragments of [`Reply::Huge`]: `bytes` bytes of ASCII text in pieces of `fragment` bytes
/// (the last one shorter), each starting with its index in brackets so that a piece out of place
/// is visible.
pub fn huge_fragments(bytes: usize, fragment: usize) -> impl Iterator<Item = String> {
    const FILL: &str = "abcdefghijklmnopqrstuvwxyz ";
    let fragment = fragment.max(1);
    (0..bytes.div_ceil(fragment)).map(move |i| {
        let len = fragment.min(bytes - i * fragment);
        let mut text = format!("[{i}]");
        while text.len() < len {
            text.push_str(FILL);
        }
        text.truncate(len);
        text
    })
}

/// The whole text of [`Reply::Huge`]`{ bytes, fragment }`.
pub fn huge_text(bytes: usize, fragment: usize) -> String {
    huge_fragments(bytes, fragment).collect()
}

async fn read_request(socket: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut piece = [0_u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = socket.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&piece[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: HashMap<String, String> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_owned()))
        .collect();
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut piece).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&piece[..n]);
    }
    Some(Recorded {
        method,
        path,
        headers,
        body_bytes: body.len(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

/// An SSE event carrying `value`.
pub fn event(value: Value) -> String {
    format!("data: {value}\n\n")
}

pub fn text_delta(text: &str) -> String {
    event(json!({
        "id": "c1", "object": "chat.completion.chunk", "model": "deepseek-chat",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": null}]
    }))
}

/// A stream event carrying the model's reasoning (`reasoning_content`, as DeepSeek's reasoner
/// streams it).
pub fn reasoning_delta(text: &str) -> String {
    event(json!({
        "id": "c1", "object": "chat.completion.chunk", "model": "deepseek-reasoner",
        "choices": [{"index": 0, "delta": {"reasoning_content": text}, "finish_reason": null}]
    }))
}

pub fn finish(reason: &str) -> String {
    event(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]}))
}

pub fn usage_event(prompt: u64, completion: u64, cached: u64) -> String {
    event(json!({
        "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "prompt_cache_hit_tokens": cached, "prompt_cache_miss_tokens": prompt - cached}
    }))
}

pub const DONE: &str = "data: [DONE]\n\n";

pub fn ok_stream(text: &str) -> Reply {
    Reply::Stream {
        pieces: vec![text_delta(text), finish("stop"), DONE.into()],
        end: End::Complete,
    }
}

pub fn status(status: u16, headers: Vec<(&'static str, String)>, body: &str) -> Reply {
    Reply::Plain {
        status,
        headers,
        body: body.into(),
    }
}

/// A streamed tool call whose arguments arrive in `fragments`, then `finish_reason: tool_calls`.
pub fn tool_call_stream(id: &str, name: &str, fragments: &[&str]) -> Vec<String> {
    let mut pieces = vec![event(json!({
        "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": id, "type": "function",
            "function": {"name": name, "arguments": ""}}]}, "finish_reason": null}]
    }))];
    for fragment in fragments {
        pieces.push(event(json!({
            "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0,
                "function": {"arguments": fragment}}]}, "finish_reason": null}]
        })));
    }
    pieces.push(finish("tool_calls"));
    pieces
}
