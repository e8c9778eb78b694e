//! The RPC access log: a span per call (so everything the call logs carries its method) and a
//! line for each call refused with an error status, with the code and the message the client got:
//! INFO for the caller's mistakes, WARN for the rest. Streams that fail after they started report in their own spans.

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
        let span = tracing::info_span!("rpc", method = %request.uri().path());
        let call = self.inner.call(request);
        Box::pin(
            async move {
                let result = call.await;
                if let Ok(response) = &result {
                    log_refusal(response.headers());
                }
                result
            }
            .instrument(span),
        )
    }
}

/// A handler's error comes back as a response whose headers carry `grpc-status` (a
/// "trailers-only" response); 0 is OK.
fn log_refusal(headers: &http::HeaderMap) {
    let Some(code) = headers.get("grpc-status").and_then(|v| v.to_str().ok()) else {
        return;
    };
    if code == "0" {
        return;
    }
    let parsed = code.parse::<i32>().ok().map(tonic::Code::from);
    let code = parsed.map_or_else(|| code.to_owned(), |c| format!("{c:?}"));
    let message = headers
        .get("grpc-message")
        .map(|v| percent_decode(v.as_bytes()))
        .unwrap_or_default();
    // The method is the `rpc` span's field: the line carries it once.
    if parsed.is_some_and(is_the_callers_mistake) {
        tracing::info!(code, reason = message, "refused a call");
    } else {
        tracing::warn!(code, reason = message, "refused a call");
    }
}

/// Refusals that are the caller's own doing (a typo, an unknown id, a busy agent, an unknown
/// method) are ordinary events of a working daemon: INFO. What an operator should look at stays
/// WARN: dshd's own failures (internal, unavailable, data loss, unknown), a limit reached
/// (resource exhausted, deadline), and permission refusals, which may be an attack.
fn is_the_callers_mistake(code: tonic::Code) -> bool {
    use tonic::Code;
    matches!(
        code,
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unimplemented
            | Code::Cancelled
    )
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
