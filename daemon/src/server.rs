//! Serving: the listener, the peer check, connection limits, the gRPC services, readiness and
//! graceful shutdown.
//!
//! [`run`] is the one entry that `dshd` and the tests share: give it a configuration, a listener and
//! a shutdown future, and it serves until the future resolves or a client calls `Daemon.Shutdown`.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::layer::layer_fn;

use crate::config::Config;
use crate::connection::{self, Admission, Occupancy, Tracked};
use crate::daemon::Daemon;
use crate::rpc;
use crate::socket::{self, SocketError, SocketGuard};

/// A listening Unix socket and, when we bound it ourselves, the guard that owns its path.
#[derive(Debug)]
pub struct Listener {
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    /// `None` under socket activation: systemd owns that path and its lifetime.
    guard: Option<SocketGuard>,
}

impl Listener {
    /// Takes `path` (see [`socket::bind`]).
    pub fn bind(path: &Path) -> Result<Self, SocketError> {
        let (listener, guard) = socket::bind(path)?;
        Ok(Self {
            listener,
            path: path.to_owned(),
            guard: Some(guard),
        })
    }

    /// The socket systemd passed in, if the daemon was socket-activated.
    pub fn from_systemd() -> std::io::Result<Option<Self>> {
        Ok(socket::from_systemd()?.map(|(listener, path)| Self {
            listener,
            path,
            guard: None,
        }))
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Why serving failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The listener could not be handed to tokio.
    #[error("cannot use the listening socket")]
    Listener(#[source] std::io::Error),
    /// The gRPC server failed.
    #[error("gRPC server failed")]
    Transport(#[from] tonic::transport::Error),
    /// The daemon's core could not be assembled.
    #[error(transparent)]
    Start(#[from] crate::daemon::StartError),
    /// The task winding the core down failed (a bug): sessions may not have been saved.
    #[error("winding down the core failed; sessions may not have been saved")]
    WindDown(#[source] tokio::task::JoinError),
    /// Shutdown could not save every session to its backend.
    #[error("{}", describe_unsaved(.0))]
    Unsaved(Vec<dsh_core::Unsaved>),
}

fn describe_unsaved(unsaved: &[dsh_core::Unsaved]) -> String {
    let mut text = format!(
        "{} session(s) could not be saved to the persistence backend at shutdown:",
        unsaved.len()
    );
    for u in unsaved {
        match &u.rescue {
            Ok(path) => text.push_str(&format!(
                "\n  {}: {}; its whole log was written to {} (resume it after copying it back, or read it with jq)",
                u.id,
                u.error,
                path.display()
            )),
            Err(rescue) => text.push_str(&format!(
                "\n  {}: {}; no rescue copy either: {rescue}",
                u.id, u.error
            )),
        }
    }
    text
}

/// Serves the daemon on `listener` until `shutdown` resolves or `Daemon.Shutdown` is called, then
/// stops accepting, lets in-flight calls finish within the configured deadline, and releases the
/// socket.
pub async fn run(
    config: Config,
    listener: Listener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let Listener {
        listener,
        path,
        guard,
    } = listener;
    listener
        .set_nonblocking(true)
        .map_err(ServeError::Listener)?;
    let listener = UnixListener::from_std(listener).map_err(ServeError::Listener)?;

    let token = CancellationToken::new();
    let daemon = Arc::new(Daemon::new(&config, path.clone(), token.clone())?);
    // The daemon's own background tasks, waited for before `run` returns (each ends with the
    // token).
    let tasks = TaskTracker::new();
    // One deadline for the stop, counted from when shutdown begins: the drain of in-flight calls
    // and the core's wind-down run beside each other within it.
    let deadline = config.shutdown_timeout;

    // Turns and child processes wind down as soon as shutdown begins, so streaming calls (a
    // running Prompt) end and tonic's drain can finish.
    let wind_down = {
        let daemon = daemon.clone();
        let token = token.clone();
        tasks.spawn(async move {
            token.cancelled().await;
            let began = Instant::now();
            // Said here, not in tonic's shutdown future: tonic may stop on the end of the
            // incoming stream (the accept loop also watches the token) without ever polling it.
            notify_systemd(sd_notify::NotifyState::Stopping);
            tracing::info!("shutting down: no new connections; letting in-flight calls finish");
            let unsaved = daemon.wind_down().await;
            if began.elapsed() > deadline {
                tracing::warn!(
                    deadline_ms = deadline.as_millis(),
                    "saving sessions and stopping processes ran past the shutdown deadline"
                );
            }
            unsaved
        })
    };

    // Whatever ends the daemon (signal or RPC) cancels the one token.
    let external = token.clone();
    tasks.spawn(async move {
        tokio::select! {
            () = shutdown => external.cancel(),
            () = external.cancelled() => {}
        }
    });

    let (health, health_service) = tonic_health::server::health_reporter();
    let open_files = crate::open_files::soft_limit();
    let max_connections = connection::effective_max_connections(config.max_connections, open_files);
    if max_connections < config.max_connections {
        // The default lowered under a low hard limit is routine; a value someone configured that
        // cannot be honoured deserves a warning (raise `LimitNOFILE=`/`ulimit -Hn`).
        if config.max_connections == connection::DEFAULT_MAX_CONNECTIONS {
            tracing::info!(
                default = config.max_connections,
                used = max_connections,
                open_file_limit = open_files,
                "max_connections lowered to half dshd's open-file limit"
            );
        } else {
            tracing::warn!(
                configured = config.max_connections,
                used = max_connections,
                open_file_limit = open_files,
                "max_connections lowered to half dshd's open-file limit; raise the hard limit (LimitNOFILE=, ulimit -Hn) to allow more"
            );
        }
    }
    let occupancy = Occupancy::new(max_connections);
    let services = rpc::Services::new(&daemon, occupancy.clone());
    services.mark_serving(&health).await;

    let command_share = connection::command_share(config.max_command_connections, max_connections);
    let admission = Admission::new(occupancy, config.connection_idle_timeout, token.clone())
        .with_command_share(command_share);
    let incoming = accept_own_user(listener, admission, token.clone(), &tasks);
    let server = tonic::transport::Server::builder()
        .layer(layer_fn(|inner| connection::TrackRequests { inner }))
        .layer(layer_fn(|inner| crate::access_log::AccessLog { inner }))
        .layer(layer_fn(|inner| crate::confined_clients::ConfinedClients {
            inner,
        }));
    let router = services
        .router(server, health_service)
        .map_err(ServeError::Listener)?;

    notify_systemd(sd_notify::NotifyState::Ready);
    if std::env::var_os("NOTIFY_SOCKET").is_some() {
        tasks.spawn(report_status(daemon.clone(), token.clone()));
    }
    tracing::info!(
        version = %env!("CARGO_PKG_VERSION"),
        socket = %path.display(),
        home = %daemon.home.display(),
        pid = std::process::id(),
        max_connections,
        max_command_connections = command_share,
        idle_timeout_ms = config.connection_idle_timeout.as_millis(),
        "dshd is serving"
    );

    let drain = token.clone();
    let serve = router.serve_with_incoming_shutdown(incoming, async move {
        drain.cancelled().await;
    });
    tokio::pin!(serve);
    let result = tokio::select! {
        result = &mut serve => result,
        () = async { token.cancelled().await; tokio::time::sleep(deadline).await } => {
            tracing::warn!(deadline_ms = deadline.as_millis(), "in-flight calls did not finish before the shutdown deadline; abandoning them");
            Ok(())
        }
    };
    health
        .set_not_serving::<dsh_proto::v1::daemon_server::DaemonServer<rpc::DaemonService>>()
        .await;
    // The core's wind-down began with the shutdown, beside the drain. It is awaited to its end
    // even past the deadline: it is what saves the sessions, and it ends (turns are cancelled,
    // processes killed), so only how long the disk takes is left to wait for.
    token.cancel();
    let unsaved = wind_down.await.map_err(ServeError::WindDown)?;
    tasks.close();
    tasks.wait().await;
    drop(guard);
    if !unsaved.is_empty() {
        return Err(ServeError::Unsaved(unsaved));
    }
    tracing::info!("dshd stopped");
    result.map_err(ServeError::from)
}

/// Accepts connections and hands over only those whose peer runs as our own uid, while admission
/// has a free slot (a connection beyond the limit is closed at once, so this loop never waits for
/// one). Stops (dropping the listener, so new connections are refused) when shutdown begins.
fn accept_own_user(
    listener: UnixListener,
    mut admission: Admission,
    token: CancellationToken,
    tasks: &TaskTracker,
) -> ReceiverStream<Result<Tracked<UnixStream>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(16);
    let own_uid = rustix::process::geteuid().as_raw();
    tasks.spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = token.cancelled() => break,
                accepted = listener.accept() => accepted,
            };
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // Transient (e.g. EMFILE): log and keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            match stream.peer_cred() {
                Ok(cred) if cred.uid() == own_uid => {
                    let Some(peer) = crate::peer::Peer::place(&stream, cred.pid(), cred.uid())
                    else {
                        // Whoever has its pid now is somebody else: nobody to serve.
                        tracing::warn!(
                            peer_pid = cred.pid(),
                            "dropped a connection whose client exited before it could be placed"
                        );
                        continue;
                    };
                    let Some(stream) = admission.admit(stream, peer) else {
                        continue;
                    };
                    if tx.send(Ok(stream)).await.is_err() {
                        break;
                    }
                }
                Ok(cred) => tracing::warn!(
                    peer_uid = cred.uid(),
                    peer_pid = cred.pid(),
                    "dropped a connection from another user"
                ),
                Err(error) => tracing::warn!(%error, "dropped a connection whose peer is unknown"),
            }
        }
    });
    ReceiverStream::new(rx)
}

/// How often the `STATUS=` line is brought up to date (sent only when it changed).
const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// Keeps the `STATUS=` line `systemctl --user status dshd` shows up to date until shutdown: how
/// many agents are live and how many of them are running a turn. Polled rather than pushed, so
/// the core needs no hook for it; a second's staleness is fine for a human reading `status`.
async fn report_status(daemon: Arc<Daemon>, shutdown: CancellationToken) {
    let mut interval = tokio::time::interval(STATUS_INTERVAL);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = String::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = interval.tick() => {}
        }
        let line = daemon.status_line();
        if line != last {
            notify_systemd(sd_notify::NotifyState::Status(&line));
            last = line;
        }
    }
}

fn notify_systemd(state: sd_notify::NotifyState<'_>) {
    if std::env::var_os("NOTIFY_SOCKET").is_some()
        && let Err(error) = sd_notify::notify(&[state])
    {
        tracing::warn!(%error, "cannot notify systemd");
    }
}
