//! The RPC access log: a span per call (so everything the call logs carries its method) and a
//! line for each call refused with an error status, with the code and the message the client got:
//! INFO for the caller's mistakes, WARN for the rest. Streams that fail after they started report in their own spans.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tracing::Instrument;

/// The access log around a gRPC service (a tower service, layered over every one).
#[derive(Debug, Clone)]
pub struct AccessLog<S> {
    /// The service it wraps.
    pub(crate) inner: S,
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
/// "trailers-only" response); tonic reads them back (code, and the percent-decoded message).
fn log_refusal(headers: &http::HeaderMap) {
    let Some(status) = tonic::Status::from_header_map(headers) else {
        return;
    };
    let code = status.code();
    if code == tonic::Code::Ok {
        return;
    }
    // The method is the `rpc` span's field: the line carries it once.
    if is_the_callers_mistake(code) {
        tracing::info!(?code, reason = status.message(), "refused a call");
    } else {
        tracing::warn!(?code, reason = status.message(), "refused a call");
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
