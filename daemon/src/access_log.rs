//! The RPC access log: a span per call (so everything the call logs carries its method) and a
//! warning for each call refused with an error status, naming the method, the code and the
//! message the client got. Streams that fail after they started report in their own spans.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Instrument;

/// A tower layer adding the access log to every gRPC service.
#[derive(Debug, Clone, Copy, Default)]
pub struct AccessLogLayer;

impl<S> tower::Layer<S> for AccessLogLayer {
    type Service = AccessLog<S>;

    fn layer(&self, inner: S) -> AccessLog<S> {
        AccessLog { inner }
    }
}

/// The service of [`AccessLogLayer`].
#[derive(Debug, Clone)]
pub struct AccessLog<S> {
    inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for AccessLog<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let method = request.uri().path().to_owned();
        let span = tracing::info_span!("rpc", method = %method);
        let call = self.inner.call(request);
        Box::pin(
            async move {
                let result = call.await;
                if let Ok(response) = &result {
                    log_refusal(&method, response.headers());
                }
                result
            }
            .instrument(span),
        )
    }
}

/// A handler's error comes back as a response whose headers carry `grpc-status` (a
/// "trailers-only" response); 0 is OK.
fn log_refusal(method: &str, headers: &http::HeaderMap) {
    let Some(code) = headers.get("grpc-status").and_then(|v| v.to_str().ok()) else {
        return;
    };
    if code == "0" {
        return;
    }
    let code = code.parse::<i32>().map_or_else(
        |_| code.to_owned(),
        |c| format!("{:?}", tonic::Code::from(c)),
    );
    let message = headers
        .get("grpc-message")
        .map(|v| percent_decode(v.as_bytes()))
        .unwrap_or_default();
    tracing::warn!(method, code, reason = message, "refused a call");
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2).
fn percent_decode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (
            bytes[i],
            bytes.get(i + 1).copied(),
            bytes.get(i + 2).copied(),
        ) {
            (b'%', Some(h), Some(l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(percent_decode(b"no%20session%20x"), "no session x");
        assert_eq!(percent_decode(b"100%"), "100%");
        assert_eq!(percent_decode(b"%zz%41"), "%zzA");
        assert_eq!(percent_decode("é%C3%A9".as_bytes()), "éé");
    }
}
