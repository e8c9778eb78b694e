//! The one place dsh talks MCP: a client connection to one server over its stdin and stdout, on
//! the official Rust SDK (`rmcp`). Everything past this file sees plain JSON (tool schemas and
//! results as the MCP specification writes them), so an SDK release that renames its types
//! changes this file only.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CancelledNotificationParam, ClientRequest};
use rmcp::service::{PeerRequestOptions, RoleClient, RunningService, ServiceError, ServiceExt};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport};
use serde_json::{Map, Value};
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;

/// Longest JSON-RPC line dsh reads from a server. A longer one (a 100 MB result) is dropped by
/// the SDK, never buffered whole; the call it answered then ends at its timeout.
const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One tool as a server lists it.
#[derive(Debug, Clone)]
pub(crate) struct RemoteTool {
    /// Its name on the server.
    pub name: String,
    /// Its description, if it gave one.
    pub description: Option<String>,
    /// Its input JSON Schema, as given.
    pub input_schema: Map<String, Value>,
}

/// Why talking to a server failed, in words for the model and for `dshctl mcp list`.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum McpError {
    /// It did not answer in time.
    #[error("no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
    /// The connection is gone (it exited, or wrote something that is not MCP).
    #[error("the connection to the server is closed")]
    Closed,
    /// The call was cancelled (the turn was).
    #[error("cancelled")]
    Cancelled,
    /// The server answered with an error, or the exchange failed otherwise.
    #[error("{0}")]
    Protocol(String),
}

impl From<ServiceError> for McpError {
    fn from(error: ServiceError) -> Self {
        match error {
            ServiceError::Timeout { timeout } => Self::Timeout(timeout),
            ServiceError::TransportClosed => Self::Closed,
            ServiceError::McpError(data) => Self::Protocol(format!(
                "the server answered error {}: {}",
                data.code.0, data.message
            )),
            other => Self::Protocol(other.to_string()),
        }
    }
}

/// A live, initialized connection.
#[derive(Debug)]
pub(crate) struct Connection {
    service: RunningService<RoleClient, ()>,
}

impl Connection {
    /// Initializes MCP over the pipes and lists the server's tools, all within `timeout`.
    pub(crate) async fn open(
        stdin: ChildStdin,
        stdout: ChildStdout,
        timeout: Duration,
    ) -> Result<(Self, Vec<RemoteTool>), McpError> {
        let transport =
            AsyncRwTransport::new_client(stdout, stdin).with_max_line_length(MAX_LINE_BYTES);
        Self::initialize(transport, timeout).await
    }

    /// Initializes MCP with the streamable HTTP server at `url`, sending `headers` (and the
    /// bearer token) with every request, and lists its tools, all within `timeout`.
    pub(crate) async fn open_http(
        url: &str,
        headers: &BTreeMap<String, String>,
        bearer_token: Option<&str>,
        timeout: Duration,
    ) -> Result<(Self, Vec<RemoteTool>), McpError> {
        let mut custom = HashMap::new();
        for (name, value) in headers {
            let bad = |what: &str| McpError::Protocol(format!("header {name:?}: {what}"));
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad("not a header name"))?;
            let value =
                http::HeaderValue::from_str(value).map_err(|_| bad("not a header value"))?;
            custom.insert(name, value);
        }
        // The SDK's HTTP client is built without a crypto provider (so none is compiled in twice):
        // dsh's, ring, is the process default. Installed once; a second install changes nothing.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut config = StreamableHttpClientTransportConfig::with_uri(url).custom_headers(custom);
        if let Some(token) = bearer_token {
            config = config.auth_header(token);
        }
        Self::initialize(StreamableHttpClientTransport::from_config(config), timeout).await
    }

    async fn initialize<T, E, A>(
        transport: T,
        timeout: Duration,
    ) -> Result<(Self, Vec<RemoteTool>), McpError>
    where
        T: IntoTransport<RoleClient, E, A>,
        E: std::error::Error + Send + Sync + 'static,
    {
        let opened = async {
            let service = ()
                .serve(transport)
                .await
                .map_err(|e| McpError::Protocol(format!("initialize failed: {e}")))?;
            let tools = service.list_all_tools().await?;
            Ok::<_, McpError>((service, tools))
        };
        let (service, tools) = tokio::time::timeout(timeout, opened)
            .await
            .map_err(|_| McpError::Timeout(timeout))??;
        let tools = tools
            .into_iter()
            .map(|t| RemoteTool {
                name: t.name.into_owned(),
                description: t.description.map(|d| d.into_owned()),
                input_schema: (*t.input_schema).clone(),
            })
            .collect();
        Ok((Self { service }, tools))
    }

    /// False once the connection closed.
    pub(crate) fn is_open(&self) -> bool {
        !self.service.is_closed() && !self.service.peer().is_transport_closed()
    }

    /// Calls `tool` and returns its `CallToolResult` as JSON. On `cancel` the server is sent
    /// `notifications/cancelled` for the request, as the specification asks.
    pub(crate) async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<Value, McpError> {
        let mut params = CallToolRequestParams::new(tool.to_owned());
        params.arguments = Some(arguments);
        let request = ClientRequest::CallToolRequest(rmcp::model::Request::new(params));
        let mut options = PeerRequestOptions::no_options();
        options.timeout = Some(timeout);
        let peer = self.service.peer();
        let handle = peer.send_cancellable_request(request, options).await?;
        let id = handle.id.clone();
        let response = tokio::select! {
            response = handle.await_response() => response?,
            () = cancel.cancelled() => {
                let cancelled = CancelledNotificationParam::new(
                    Some(id),
                    Some("the turn was cancelled".into()),
                );
                let _ = peer.notify_cancelled(cancelled).await;
                return Err(McpError::Cancelled);
            }
        };
        serde_json::to_value(response).map_err(|e| McpError::Protocol(e.to_string()))
    }
}
