//! Bounding the daemon's connections, so that idle sockets cannot starve it of descriptors.
//!
//! Three parts work together:
//!
//! - [`effective_max_connections`] keeps connections to half of dshd's soft `RLIMIT_NOFILE` (raised
//!   to the hard limit at start, `open_files`), so the other half stays for session logs, command
//!   pipes and hooks.
//! - [`Admission`] admits at most that many connections at once; a connection beyond it is closed
//!   at once (with a rate-limited warning), so the accept loop never waits for a slot.
//! - Each admitted connection is wrapped in [`Tracked`], which reports end of file to the HTTP/2
//!   server once the connection has had no open request and no bytes in either direction for the
//!   idle timeout; the server then closes it. [`TrackRequests`] counts a connection's open
//!   requests, from the call until its response body is dropped, so a `Prompt` stream whose model
//!   is silent for minutes, or a unary `Shell.Run` of a long command, is never cut. A client that
//!   connects and sends nothing is closed after the same timeout. Once shutdown begins, a
//!   connection that has not sent a single byte ends at once: the HTTP/2 server's graceful
//!   shutdown cannot close a connection still waiting for the client's preface, so it would hold
//!   the drain until the shutdown deadline. Connections that did talk are left to that graceful
//!   shutdown (GOAWAY, then close once their calls end), which never cuts a response being sent.
//!
//! HTTP/2 keepalive pings would not help here: on a Unix socket a peer that dies closes its end
//! anyway, and a live peer that merely holds connections open answers pings.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

use crate::peer::Peer;

/// Default for [`crate::config::Config::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Default for [`crate::config::Config::connection_idle_timeout`].
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// How often at most the "connection limit reached" warning is logged.
const REFUSAL_WARNING_INTERVAL: Duration = Duration::from_secs(10);

/// Connections beyond the command share that are served at once, each only to be told why it is
/// refused (every call `RESOURCE_EXHAUSTED`); beyond these a refused connection is closed unheard.
const REFUSALS_SERVED: usize = 16;

/// How long a refused connection is served for its client to hear why.
const REFUSAL_IDLE_TIMEOUT: Duration = Duration::from_secs(1);

/// The share of connections clients inside dshd's commands may hold: the configured one, else a
/// quarter of `max` (the limit in use), never more than half of it, so the user's own clients
/// always keep at least half the slots.
pub fn command_share(configured: Option<usize>, max: usize) -> usize {
    configured.unwrap_or(max / 4).min(max / 2)
}

/// The share of the command share one agent's commands may hold: a quarter of it (at least one),
/// so one agent's job that opens connections in a loop leaves the other agents' commands (and
/// the hooks that call `dshctl`) room.
pub fn agent_share(command_share: usize) -> usize {
    (command_share / 4).max(1)
}

/// Whose commands a client inside one runs in, for [`agent_share`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Bucket {
    /// An agent's commands (its model's calls and jobs, a client's `Shell.Run` naming it).
    Agent(dsh_core::SessionId),
    /// Commands of no agent: hooks, a client's `Shell.Run` without one.
    NoAgent,
    /// Processes that cannot be placed (orphans, a kernel without peer pidfds).
    Unplaced,
}

impl Bucket {
    fn of(provenance: &dsh_core::Provenance) -> Self {
        match provenance {
            dsh_core::Provenance::Command(origin) => {
                origin.agent.clone().map_or(Self::NoAgent, Self::Agent)
            }
            dsh_core::Provenance::Outside | dsh_core::Provenance::Unknown(_) => Self::Unplaced,
        }
    }
}

/// The connection limit actually used: the configured one, but at most half the open-file limit
/// (and at least 1), so connections alone can never exhaust the daemon's descriptors.
pub fn effective_max_connections(configured: usize, open_file_limit: Option<u64>) -> usize {
    let cap = open_file_limit
        .map(|limit| usize::try_from(limit / 2).unwrap_or(usize::MAX))
        .unwrap_or(usize::MAX);
    configured.min(cap).max(1)
}

/// What one connection is doing, shared by its IO wrapper and its requests.
#[derive(Debug)]
pub struct ConnectionState {
    /// Requests whose response (body included) has not ended yet.
    open_requests: AtomicUsize,
    /// The origin of `last_activity_ms`.
    born: Instant,
    /// Milliseconds after `born` of the last byte read or written, or request begun or ended.
    last_activity_ms: AtomicU64,
}

impl ConnectionState {
    fn new() -> Self {
        Self {
            open_requests: AtomicUsize::new(0),
            born: Instant::now(),
            last_activity_ms: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_activity_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last_activity(&self) -> Instant {
        self.born + Duration::from_millis(self.last_activity_ms.load(Ordering::Relaxed))
    }

    fn open_requests(&self) -> usize {
        self.open_requests.load(Ordering::Acquire)
    }

    /// Counts a request as open until the returned guard is dropped.
    fn begin_request(self: &Arc<Self>) -> RequestGuard {
        self.open_requests.fetch_add(1, Ordering::AcqRel);
        self.touch();
        RequestGuard {
            state: self.clone(),
        }
    }
}

/// An open request; dropping it ends it (and restarts the connection's idle clock).
#[derive(Debug)]
struct RequestGuard {
    state: Arc<ConnectionState>,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.state.touch();
        self.state.open_requests.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The connect info tonic puts into every request's extensions, so [`TrackRequests`] finds
/// the connection a request arrived on.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    state: Arc<ConnectionState>,
    /// Who the client is and where it runs: a client inside a command is served less
    /// ([`crate::confined_clients`], jobs, approvals).
    pub peer: Arc<Peer>,
    /// Set when the connection is served only to tell its client why it is refused (beyond
    /// `max_command_connections`): every call gets this `RESOURCE_EXHAUSTED` message.
    pub refused: Option<Arc<str>>,
}

#[cfg(test)]
impl ConnectionInfo {
    /// The info of a connection from `peer` that no [`Tracked`] watches.
    pub(crate) fn detached(peer: Peer) -> Self {
        Self {
            state: Arc::new(ConnectionState::new()),
            peer: Arc::new(peer),
            refused: None,
        }
    }
}

/// A connection whose reads end (EOF) once it has been idle for the timeout: no open request and
/// no bytes in either direction. It holds the connection's admission slot until dropped.
#[derive(Debug)]
pub struct Tracked<IO> {
    io: IO,
    /// Who the client is and where it runs, told once when the connection was accepted.
    peer: Arc<Peer>,
    state: Arc<ConnectionState>,
    idle_timeout: Duration,
    /// Armed at the moment the connection would become idle; re-armed lazily when it fires early.
    timer: Pin<Box<Sleep>>,
    /// Set once the idle timeout has ended the connection; every later read is EOF too.
    expired: bool,
    /// Resolves when the daemon begins shutting down (`None`: never, or already seen).
    shutdown: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    shutting_down: bool,
    /// Whether the client has sent anything yet.
    heard_from: bool,
    /// Why every call on this connection is refused, if it is.
    refused: Option<Arc<str>>,
    _slot: Option<OwnedSemaphorePermit>,
    /// A slot of the command share and one of its agent's share, for a client inside a command.
    _share: Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)>,
}

impl<IO> Tracked<IO> {
    /// Wraps `io`, a connection from a client that runs where `peer` says; the idle clock starts
    /// now. The connection holds `slot` until dropped, and ends as soon as it is idle once
    /// `shutdown` is cancelled. Must be called inside the tokio runtime.
    pub fn new(
        io: IO,
        peer: Peer,
        idle_timeout: Duration,
        slot: Option<OwnedSemaphorePermit>,
        shutdown: Option<CancellationToken>,
    ) -> Self {
        Self {
            io,
            peer: Arc::new(peer),
            state: Arc::new(ConnectionState::new()),
            idle_timeout,
            timer: Box::pin(tokio::time::sleep(idle_timeout)),
            expired: false,
            shutdown: shutdown.map(|token| Box::pin(token.cancelled_owned())),
            shutting_down: false,
            heard_from: false,
            refused: None,
            _slot: slot,
            _share: None,
        }
    }

    /// The same connection also holding `share`, a slot of the command share and one of its
    /// agent's share.
    fn sharing(mut self, share: (OwnedSemaphorePermit, OwnedSemaphorePermit)) -> Self {
        self._share = Some(share);
        self
    }

    /// The same connection, served only to refuse every call with `reason`.
    fn refusing(mut self, reason: Arc<str>) -> Self {
        self.refused = Some(reason);
        self
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &IO {
        &self.io
    }

    /// Whether the connection is idle past its timeout now; if not, arms the timer for the next
    /// moment it could be (and registers `cx` to be woken then).
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(shutdown) = &mut self.shutdown
            && shutdown.as_mut().poll(cx).is_ready()
        {
            self.shutdown = None;
            self.shutting_down = true;
        }
        if self.shutting_down && !self.heard_from {
            return Poll::Ready(());
        }
        loop {
            let now = Instant::now();
            let deadline = if self.state.open_requests() > 0 {
                // A request is open: look again a whole timeout later.
                now + self.idle_timeout
            } else {
                self.state.last_activity() + self.idle_timeout
            };
            if deadline <= now {
                return Poll::Ready(());
            }
            self.timer.as_mut().reset(deadline);
            if self.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Tracked<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.expired {
            return Poll::Ready(Ok(()));
        }
        let filled = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(result) => {
                if buf.filled().len() > filled {
                    this.heard_from = true;
                    this.state.touch();
                }
                return Poll::Ready(result);
            }
            Poll::Pending => {}
        }
        ready!(this.poll_idle(cx));
        this.expired = true;
        tracing::debug!(
            idle_ms = this.idle_timeout.as_millis(),
            "closing an idle connection"
        );
        // End of file: the HTTP/2 server ends the connection and drops this stream.
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Tracked<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = ready!(Pin::new(&mut this.io).poll_write(cx, buf));
        if matches!(result, Ok(n) if n > 0) {
            this.state.touch();
        }
        Poll::Ready(result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let result = ready!(Pin::new(&mut this.io).poll_write_vectored(cx, bufs));
        if matches!(result, Ok(n) if n > 0) {
            this.state.touch();
        }
        Poll::Ready(result)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<IO> Connected for Tracked<IO> {
    type ConnectInfo = ConnectionInfo;

    fn connect_info(&self) -> ConnectionInfo {
        ConnectionInfo {
            state: self.state.clone(),
            peer: self.peer.clone(),
            refused: self.refused.clone(),
        }
    }
}

/// How many connections hold a slot now, out of how many: what [`Admission`] counts, shared with
/// `Status` so an operator (or a test) sees how close the daemon is to refusing connections.
#[derive(Debug, Clone)]
pub struct Occupancy {
    /// One permit per free slot; an admitted connection holds one until its stream is dropped.
    slots: Arc<Semaphore>,
    max: usize,
}

impl Occupancy {
    /// `max` slots, all free.
    pub fn new(max: usize) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max)),
            max,
        }
    }

    /// Connections holding a slot now. A client that has closed its end still counts until the
    /// server has noticed and dropped the stream.
    pub fn open(&self) -> usize {
        self.max.saturating_sub(self.slots.available_permits())
    }

    /// The most connections admitted at once.
    pub fn max(&self) -> usize {
        self.max
    }
}

/// Admits connections up to a maximum: each admitted one holds a slot until its stream is dropped.
/// Clients inside dshd's commands also hold a slot of a smaller share, so however many they open,
/// the user's own clients keep the rest.
#[derive(Debug)]
pub struct Admission {
    occupancy: Occupancy,
    /// One permit per free slot of the command share.
    commands: Arc<Semaphore>,
    command_max: usize,
    /// Each agent's share of the command share ([`agent_share`] permits each). A bucket whose
    /// permits are all back is dropped when the next one is made, so the map holds the agents
    /// whose commands hold connections now, not every agent there ever was.
    agents: std::collections::HashMap<Bucket, Arc<Semaphore>>,
    agent_max: usize,
    /// One permit per refused connection that may be served to hear why.
    refusals: Arc<Semaphore>,
    idle_timeout: Duration,
    shutdown: CancellationToken,
    refused_since_warning: u64,
    last_warning: Option<Instant>,
    commands_refused_since_warning: u64,
    last_command_warning: Option<Instant>,
}

impl Admission {
    /// At most `occupancy.max()` connections at once, each closed after `idle_timeout` of
    /// idleness, or when idle once `shutdown` is cancelled.
    pub fn new(occupancy: Occupancy, idle_timeout: Duration, shutdown: CancellationToken) -> Self {
        Self {
            commands: Arc::new(Semaphore::new(occupancy.max)),
            command_max: occupancy.max,
            agents: std::collections::HashMap::new(),
            agent_max: agent_share(occupancy.max),
            occupancy,
            refusals: Arc::new(Semaphore::new(REFUSALS_SERVED)),
            idle_timeout,
            shutdown,
            refused_since_warning: 0,
            last_warning: None,
            commands_refused_since_warning: 0,
            last_command_warning: None,
        }
    }

    /// The same admission with at most `max` connections from clients inside dshd's commands
    /// (see [`command_share`]).
    pub fn with_command_share(mut self, max: usize) -> Self {
        self.commands = Arc::new(Semaphore::new(max));
        self.command_max = max;
        self.agent_max = agent_share(max);
        self
    }

    /// A slot of `bucket`'s share, if one is free.
    fn agent_slot(&mut self, bucket: Bucket) -> Option<OwnedSemaphorePermit> {
        let max = self.agent_max;
        if !self.agents.contains_key(&bucket) {
            self.agents.retain(|_, s| s.available_permits() < max);
        }
        let share = self
            .agents
            .entry(bucket)
            .or_insert_with(|| Arc::new(Semaphore::new(max)));
        share.clone().try_acquire_owned().ok()
    }

    /// Wraps `io` (from a client running where `peer` says) if a slot is free; otherwise drops it
    /// (closing the connection at once) and returns `None`. A client inside a command beyond the
    /// command share is served only to be told so, while few such are; otherwise dropped too.
    /// Never waits.
    pub fn admit<IO>(&mut self, io: IO, peer: Peer) -> Option<Tracked<IO>> {
        let share = if peer.provenance.is_outside() {
            None
        } else {
            let Some(agent) = self.agent_slot(Bucket::of(&peer.provenance)) else {
                let reason = format!(
                    "too many connections from inside this agent's commands: its share, {} of max_command_connections ({}), is in use; close some, or raise max_command_connections in dshd's config",
                    self.agent_max, self.command_max
                );
                return self.refuse_command(io, peer, reason);
            };
            match self.commands.clone().try_acquire_owned() {
                Ok(share) => Some((share, agent)),
                Err(_) => {
                    let reason = format!(
                        "too many connections from inside dshd's commands: max_command_connections ({}) are open; close some, or raise max_command_connections in dshd's config",
                        self.command_max
                    );
                    return self.refuse_command(io, peer, reason);
                }
            }
        };
        match self.occupancy.slots.clone().try_acquire_owned() {
            Ok(slot) => {
                let tracked = Tracked::new(
                    io,
                    peer,
                    self.idle_timeout,
                    Some(slot),
                    Some(self.shutdown.clone()),
                );
                Some(match share {
                    Some(share) => tracked.sharing(share),
                    None => tracked,
                })
            }
            Err(_) => {
                self.refused_since_warning += 1;
                let due = self
                    .last_warning
                    .is_none_or(|at| at.elapsed() >= REFUSAL_WARNING_INTERVAL);
                if due {
                    tracing::warn!(
                        max_connections = self.occupancy.max,
                        refused = self.refused_since_warning,
                        "connection limit reached: refusing new connections until some end (idle ones close after connection_idle_timeout_ms)"
                    );
                    self.last_warning = Some(Instant::now());
                    self.refused_since_warning = 0;
                }
                let reason = format!(
                    "dshd's connection limit is reached: {} connections are open (max_connections, at most half of dshd's open-file limit); close idle clients, or raise max_connections in dshd's config (and LimitNOFILE= or ulimit -Hn if that is what holds it)",
                    self.occupancy.max
                );
                self.serve_refusal(io, peer, reason)
            }
        }
    }

    /// A client inside a command found the command share full: served to hear why (while few
    /// are), else closed; a warning names the setting, at most every 10 s.
    fn refuse_command<IO>(&mut self, io: IO, peer: Peer, reason: String) -> Option<Tracked<IO>> {
        self.commands_refused_since_warning += 1;
        let due = self
            .last_command_warning
            .is_none_or(|at| at.elapsed() >= REFUSAL_WARNING_INTERVAL);
        if due {
            tracing::warn!(
                max_command_connections = self.command_max,
                refused = self.commands_refused_since_warning,
                client_pid = peer.pid,
                client = %peer.provenance,
                "connections from inside dshd's commands reached max_command_connections: refusing more until some end; the user's own clients keep their slots"
            );
            self.last_command_warning = Some(Instant::now());
            self.commands_refused_since_warning = 0;
        }
        self.serve_refusal(io, peer, reason)
    }

    /// A refused connection, served only to answer every call `RESOURCE_EXHAUSTED` with `reason`
    /// for about a second, while few such are (a refusal can only be said in HTTP/2, after
    /// accepting); beyond those it is closed unheard, so a flood cannot hold descriptors this way.
    fn serve_refusal<IO>(&mut self, io: IO, peer: Peer, reason: String) -> Option<Tracked<IO>> {
        let Ok(permit) = self.refusals.clone().try_acquire_owned() else {
            drop(io);
            return None;
        };
        Some(
            Tracked::new(
                io,
                peer,
                REFUSAL_IDLE_TIMEOUT,
                Some(permit),
                Some(self.shutdown.clone()),
            )
            .refusing(Arc::from(reason)),
        )
    }
}

/// A tower service that counts each connection's open requests (see [`Tracked`]); layered over
/// every gRPC service.
#[derive(Debug, Clone)]
pub struct TrackRequests<S> {
    /// The service it wraps.
    pub(crate) inner: S,
}

impl<S, ReqBody, ResBody> tower::Service<http::Request<ReqBody>> for TrackRequests<S>
where
    S: tower::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>,
{
    type Response = http::Response<TrackedBody<ResBody>>;
    type Error = S::Error;
    type Future = TrackedResponse<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<ReqBody>) -> Self::Future {
        let guard = request
            .extensions()
            .get::<ConnectionInfo>()
            .map(|info| info.state.begin_request());
        TrackedResponse {
            inner: Box::pin(self.inner.call(request)),
            guard,
        }
    }
}

/// The response future of [`TrackRequests`]: the request stays open while it runs.
pub struct TrackedResponse<F> {
    inner: Pin<Box<F>>,
    guard: Option<RequestGuard>,
}

impl<F, ResBody, E> Future for TrackedResponse<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>>,
{
    type Output = Result<http::Response<TrackedBody<ResBody>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let result = ready!(this.inner.as_mut().poll(cx));
        let guard = this.guard.take();
        Poll::Ready(result.map(|response| {
            response.map(|body| TrackedBody {
                body,
                _guard: guard,
            })
        }))
    }
}

/// A response body that keeps its request open until it is dropped (fully sent, or abandoned when
/// the client cancels or the connection ends).
pub struct TrackedBody<B> {
    body: B,
    _guard: Option<RequestGuard>,
}

impl<B: http_body::Body + Unpin> http_body::Body for TrackedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The client that sent `request` ([`Peer::in_process`] for a request of no connection).
pub fn peer_of<T>(request: &tonic::Request<T>) -> Arc<Peer> {
    request
        .extensions()
        .get::<ConnectionInfo>()
        .map_or_else(|| Arc::new(Peer::in_process()), |info| info.peer.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// The default, as it is: the tests that wait on it run in paused time (`start_paused`),
    /// where the runtime's clock jumps to the next timer whenever every task waits, so a wait
    /// costs nothing and lasts exactly as long as asked.
    const IDLE: Duration = DEFAULT_IDLE_TIMEOUT;
    /// A limit for "it ends": far beyond anything else pending.
    const EVENTUALLY: Duration = Duration::from_secs(24 * 3600);

    #[test]
    fn the_connection_cap_is_half_the_descriptors() {
        assert_eq!(effective_max_connections(4096, Some(1_048_576)), 4096);
        assert_eq!(effective_max_connections(4096, Some(1024)), 512);
        assert_eq!(effective_max_connections(4096, None), 4096);
        assert_eq!(effective_max_connections(10, Some(1)), 1);
    }

    /// Reads until EOF or until `limit` passes; `None` when the read did not end.
    async fn read_to_eof<R: AsyncRead + Unpin>(reader: &mut R, limit: Duration) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        tokio::time::timeout(limit, reader.read_to_end(&mut out))
            .await
            .ok()
            .map(|r| {
                r.unwrap();
                out
            })
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_ends_after_the_idle_timeout() {
        let (server, _client) = tokio::io::duplex(64);
        let started = Instant::now();
        let mut tracked = Tracked::new(server, Peer::in_process(), IDLE, None, None);
        assert_eq!(
            read_to_eof(&mut tracked, EVENTUALLY).await,
            Some(Vec::new())
        );
        assert_eq!(started.elapsed(), IDLE, "not closed at the idle timeout");
        // It stays ended.
        assert_eq!(tracked.read(&mut [0u8; 4]).await.unwrap(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn bytes_in_either_direction_restart_the_idle_clock() {
        let (server, mut client) = tokio::io::duplex(64);
        let mut tracked = Tracked::new(server, Peer::in_process(), IDLE, None, None);
        let mut buf = [0u8; 8];
        client.write_all(b"ping").await.unwrap();
        assert_eq!(tracked.read(&mut buf).await.unwrap(), 4);
        tokio::time::sleep(IDLE / 2).await;
        tracked.write_all(b"pong").await.unwrap();
        let last_byte = Instant::now();
        assert_eq!(
            read_to_eof(&mut tracked, EVENTUALLY).await,
            Some(Vec::new())
        );
        assert_eq!(
            last_byte.elapsed(),
            IDLE,
            "not closed a timeout after the last byte"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_request_keeps_a_silent_connection_until_it_ends() {
        let (server, _client) = tokio::io::duplex(64);
        let mut tracked = Tracked::new(server, Peer::in_process(), IDLE, None, None);
        let request = tracked.connect_info().state.begin_request();
        // The scenario: a request silent for several idle timeouts.
        assert!(read_to_eof(&mut tracked, IDLE * 4).await.is_none());
        drop(request);
        let ended = Instant::now();
        assert_eq!(
            read_to_eof(&mut tracked, EVENTUALLY).await,
            Some(Vec::new())
        );
        assert_eq!(
            ended.elapsed(),
            IDLE,
            "not closed a whole idle timeout after the request ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn at_shutdown_a_connection_that_never_spoke_ends_at_once_and_others_are_left() {
        let long = Duration::from_secs(3600);
        let token = CancellationToken::new();
        let (silent, _a) = tokio::io::duplex(64);
        let (spoke, mut client) = tokio::io::duplex(64);
        let mut silent = Tracked::new(silent, Peer::in_process(), long, None, Some(token.clone()));
        let mut spoke = Tracked::new(spoke, Peer::in_process(), long, None, Some(token.clone()));
        client.write_all(b"PRI").await.unwrap();
        assert_eq!(spoke.read(&mut [0u8; 8]).await.unwrap(), 3);
        token.cancel();
        let cancelled = Instant::now();
        assert_eq!(read_to_eof(&mut silent, EVENTUALLY).await, Some(Vec::new()));
        assert_eq!(cancelled.elapsed(), Duration::ZERO, "not ended at once");
        // The HTTP/2 server closes this one gracefully; the wrapper does not cut it.
        assert!(read_to_eof(&mut spoke, IDLE * 2).await.is_none());
    }

    #[tokio::test]
    async fn admission_refuses_beyond_the_maximum_until_a_slot_frees() {
        let occupancy = Occupancy::new(2);
        let mut admission = Admission::new(occupancy.clone(), IDLE, CancellationToken::new());
        assert_eq!((occupancy.open(), occupancy.max()), (0, 2));
        let first = admission
            .admit(tokio::io::duplex(8).0, Peer::in_process())
            .unwrap();
        let _second = admission
            .admit(tokio::io::duplex(8).0, Peer::in_process())
            .unwrap();
        assert_eq!(occupancy.open(), 2);
        // Served to hear why, while few are; then closed unheard.
        let mut heard = Vec::new();
        for _ in 0..REFUSALS_SERVED {
            let refused = admission
                .admit(tokio::io::duplex(8).0, Peer::in_process())
                .unwrap();
            let reason = refused.connect_info().refused.unwrap();
            assert!(
                reason.contains("connection limit is reached")
                    && reason.contains("max_connections"),
                "{reason}"
            );
            heard.push(refused);
        }
        let (refused, mut peer) = tokio::io::duplex(8);
        assert!(admission.admit(refused, Peer::in_process()).is_none());
        assert_eq!(occupancy.open(), 2, "a refused connection holds no slot");
        // The refused connection was closed: its peer reads EOF at once.
        let mut out = Vec::new();
        assert_eq!(peer.read_to_end(&mut out).await.unwrap(), 0);
        drop(heard);
        drop(first);
        assert_eq!(occupancy.open(), 1);
        assert!(
            admission
                .admit(tokio::io::duplex(8).0, Peer::in_process())
                .is_some()
        );
    }

    /// Clients inside commands hold a slot of their share as well: beyond it they are refused
    /// (served a few to hear why, then closed unheard) while the user's own clients are admitted.
    #[tokio::test]
    async fn commands_beyond_their_share_are_refused_and_the_user_keeps_slots() {
        // Each connection from another agent's command: the agents' own shares are not the point.
        let command = || command_of(Some(dsh_core::SessionId::new_v7()));
        assert_eq!(command_share(None, 4096), 1024);
        assert_eq!(command_share(Some(3000), 4096), 2048);
        assert_eq!(command_share(Some(8), 4096), 8);
        assert_eq!(command_share(None, 1), 0);
        let occupancy = Occupancy::new(8);
        let mut admission = Admission::new(occupancy.clone(), IDLE, CancellationToken::new())
            .with_command_share(command_share(None, 8));
        let admitted: Vec<_> = (0..2)
            .map(|_| admission.admit(tokio::io::duplex(8).0, command()).unwrap())
            .collect();
        assert!(admitted.iter().all(|t| t.refused.is_none()));
        assert_eq!(occupancy.open(), 2);
        let mut heard = Vec::new();
        for _ in 0..REFUSALS_SERVED {
            let refused = admission.admit(tokio::io::duplex(8).0, command()).unwrap();
            let reason = refused.connect_info().refused.unwrap();
            assert!(reason.contains("max_command_connections (2)"), "{reason}");
            heard.push(refused);
        }
        assert_eq!(occupancy.open(), 2, "a refused connection holds no slot");
        let (unheard, mut peer) = tokio::io::duplex(8);
        assert!(admission.admit(unheard, command()).is_none());
        assert_eq!(peer.read_to_end(&mut Vec::new()).await.unwrap(), 0);
        // The user's own clients take every other slot.
        let own: Vec<_> = (2..8)
            .map(|_| admission.admit(tokio::io::duplex(8).0, Peer::in_process()))
            .collect();
        assert!(own.iter().all(Option::is_some));
        drop(heard);
        drop(admitted);
        assert!(admission.admit(tokio::io::duplex(8).0, command()).is_some());
    }

    fn command_of(agent: Option<dsh_core::SessionId>) -> Peer {
        Peer::at(dsh_core::Provenance::Command(dsh_core::CommandOrigin {
            sandbox: dsh_core::SandboxPolicy::UNCONFINED,
            agent,
        }))
    }

    /// One agent's commands hold at most a quarter of the command share: the rest stays for the
    /// other agents' commands (and the commands of no agent), each with a share of its own.
    #[tokio::test]
    async fn one_agents_commands_leave_the_other_agents_room() {
        assert_eq!(
            (agent_share(128), agent_share(3), agent_share(0)),
            (32, 1, 1)
        );
        let occupancy = Occupancy::new(64);
        let mut admission = Admission::new(occupancy.clone(), IDLE, CancellationToken::new())
            .with_command_share(16);
        let greedy = dsh_core::SessionId::new_v7();
        let held: Vec<_> = (0..4)
            .map(|_| admission.admit(tokio::io::duplex(8).0, command_of(Some(greedy.clone()))))
            .map(|t| t.unwrap())
            .collect();
        assert!(held.iter().all(|t| t.refused.is_none()));
        let refused = admission
            .admit(tokio::io::duplex(8).0, command_of(Some(greedy.clone())))
            .unwrap();
        let reason = refused.connect_info().refused.unwrap();
        assert!(
            reason.contains("this agent's commands")
                && reason.contains("4 of max_command_connections (16)"),
            "{reason}"
        );
        let others: Vec<_> = [
            command_of(Some(dsh_core::SessionId::new_v7())),
            command_of(None),
        ]
        .into_iter()
        .map(|peer| admission.admit(tokio::io::duplex(8).0, peer).unwrap())
        .collect();
        assert!(others.iter().all(|t| t.refused.is_none()));
        assert_eq!(occupancy.open(), 6);
        drop(held);
        let again = admission
            .admit(tokio::io::duplex(8).0, command_of(Some(greedy)))
            .unwrap();
        assert!(again.refused.is_none());
    }

    #[tokio::test]
    async fn the_layer_counts_a_request_until_its_body_is_dropped() {
        use tower::{Service, ServiceExt};
        let state = Arc::new(ConnectionState::new());
        let mut service = TrackRequests {
            inner: tower::service_fn(|_: http::Request<()>| async {
                Ok::<_, std::convert::Infallible>(http::Response::new(tonic::body::Body::empty()))
            }),
        };
        let mut request = http::Request::new(());
        request.extensions_mut().insert(ConnectionInfo {
            state: state.clone(),
            peer: Arc::new(Peer::in_process()),
            refused: None,
        });
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(state.open_requests(), 1, "the body is still to be sent");
        drop(response);
        assert_eq!(state.open_requests(), 0);
    }
}
