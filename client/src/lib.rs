//! A client for dshd: finds the socket the way `dshd` does, connects over it, and hands out the typed
//! gRPC clients of every dsh service.
//!
//! Before a single byte is sent, every connection checks who serves the socket (`SO_PEERCRED`): a
//! socket served by another uid is refused. Without that check, another user who could replace the
//! socket file would receive our requests (prompts, commands, environment values).

pub mod events;
pub mod ids;
pub mod refusal;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use dsh_paths::home::{self, Ambient};
use dsh_proto::v1;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The environment variable that names the socket (set by dshd in every bash child it starts).
pub const SOCKET_ENV: &str = "DSH_SOCKET";

/// The environment variable dshd sets to `1` in every command it runs for a model.
pub const SHELL_ENV: &str = "DSH_SHELL";

/// Why a client could not reach the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing accepts connections on the path.
    #[error(
        "no dshd is listening on {}{looked}; start it with 'dshd' or 'systemctl --user start dshd'",
        path.display()
    )]
    NotListening {
        /// The socket path.
        path: PathBuf,
        /// Where the path came from and the other places looked at ([`places_looked`]), or
        /// empty.
        looked: String,
    },
    /// The socket exists but we may not connect to it (`connect()` failed with EACCES).
    #[error("permission denied on {}: {reason}", path.display())]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
        /// Why, as far as the socket file tells: another uid owns it, or its mode or a
        /// directory above it keeps us out.
        reason: String,
    },
    /// A sandbox refused to make the socket: dsh's sandbox with network off (a seccomp filter)
    /// answers `socket()` with EACCES, for unix sockets too.
    #[error(
        "cannot connect to {}: {}",
        path.display(),
        sandbox_refusal(*inside_dsh_command, error)
    )]
    SandboxRefused {
        /// The socket path.
        path: PathBuf,
        /// `DSH_SHELL=1`: this runs inside a command dshd started.
        inside_dsh_command: bool,
        /// What `socket()` said.
        error: String,
    },
    /// The socket is served by a process of another user; nothing was sent to it.
    #[error(
        "refusing to talk to {}: it is served by uid {server_uid}, not by you (uid {own_uid}); nothing was sent. Another user may be impersonating dshd: check who owns the socket and its directory",
        path.display()
    )]
    ForeignServer {
        /// The socket path.
        path: PathBuf,
        /// The uid of the process that serves the socket.
        server_uid: u32,
        /// Our effective uid.
        own_uid: u32,
    },
    /// The path cannot be used as a socket address.
    #[error("cannot connect to {}: {message}", path.display())]
    Other {
        /// The socket path.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The socket could not be determined.
    #[error("cannot find the dshd socket")]
    NoSocket(#[from] home::HomeError),
}

/// The socket a client should use: the explicit value, else `$DSH_SOCKET`, else the first of the
/// defaults, in dshd's order, where a socket exists (`<runtime dir>/dsh/dshd.sock`, the runtime
/// dir being `$XDG_RUNTIME_DIR` or `/run/user/<uid>`, then `<home>/run/dshd.sock`), else the
/// first default (which dshd itself would use).
pub fn resolve_socket(
    explicit: Option<&OsString>,
    ambient: &Ambient,
) -> Result<PathBuf, home::HomeError> {
    if let Some(value) = explicit {
        return home::absolutize(value, "--socket", ambient);
    }
    if let Some(value) = std::env::var_os(SOCKET_ENV).filter(|v| !v.is_empty()) {
        return home::absolutize(&value, "$DSH_SOCKET", ambient);
    }
    let home = home::resolve(None, None, ambient)?;
    let candidates = dsh_paths::socket_candidates(&home.path, ambient.runtime_dir.as_deref());
    let found = candidates.iter().find(|path| {
        std::fs::symlink_metadata(path).is_ok_and(|m| {
            use std::os::unix::fs::FileTypeExt;
            m.file_type().is_socket()
        })
    });
    Ok(found
        .or(candidates.first())
        .cloned()
        .unwrap_or_else(|| dsh_paths::default_socket_path(&home.path, None)))
}

/// Where [`resolve_socket`] found `socket`, and, when it was a default, the other defaults it
/// looked at and whether a dshd answers there (a socket file can outlive its daemon): appended to
/// "no dshd is listening on ...", so the message lists every place looked at.
pub async fn places_looked(
    socket: &Path,
    explicit: Option<&OsString>,
    ambient: &Ambient,
) -> String {
    if explicit.is_some() {
        return " (--socket)".to_owned();
    }
    if std::env::var_os(SOCKET_ENV).is_some_and(|v| !v.is_empty()) {
        return " ($DSH_SOCKET)".to_owned();
    }
    let Ok(home) = home::resolve(None, None, ambient) else {
        return String::new();
    };
    let in_home = dsh_paths::default_socket_path(&home.path, None);
    let label = |path: &Path| {
        if path == in_home {
            "<home>/run/dshd.sock"
        } else {
            "<runtime dir>/dsh/dshd.sock, the runtime dir being $XDG_RUNTIME_DIR or /run/user/<uid>"
        }
    };
    let mut said = format!(" ({})", label(socket));
    for other in dsh_paths::socket_candidates(&home.path, ambient.runtime_dir.as_deref()) {
        if other == socket {
            continue;
        }
        let there = match Client::connect(&other).await {
            Ok(_) => format!(
                "a dshd is listening there: dshctl --socket {0}, or export DSH_SOCKET={0}",
                other.display()
            ),
            Err(_) => "nothing there".to_owned(),
        };
        said.push_str(&format!(
            "; also looked at {} ({}): {there}",
            other.display(),
            label(&other)
        ));
    }
    said
}

/// [`Client::connect`] to the socket [`resolve_socket`] gave for `explicit`, with the places
/// looked at ([`places_looked`]) in a "no dshd is listening" error.
pub async fn connect_resolved(
    socket: &Path,
    explicit: Option<&OsString>,
    ambient: &Ambient,
) -> Result<Client, ConnectError> {
    match Client::connect(socket).await {
        Err(ConnectError::NotListening { path, .. }) => Err(ConnectError::NotListening {
            looked: places_looked(&path, explicit, ambient).await,
            path,
        }),
        other => other,
    }
}

/// This process's environment for `CreateAgentRequest.environment` (and resume, fork): the agents
/// a client makes live run their commands with the client's `PATH`, toolchains and locale rather
/// than dshd's; dshd scrubs it as it scrubs its own. Variables whose name or value is not UTF-8
/// are left out (the wire carries text).
pub fn client_environment() -> v1::ClientEnvironment {
    v1::ClientEnvironment {
        variables: std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect(),
    }
}

/// The largest message the `Agents` and `Persistence` clients accept. A message carries one logged
/// event, and an event is as large as the model's reply or a tool's captured output, which may well
/// pass tonic's default of 4 MiB; the server is our own uid's dshd (checked on every connection), so
/// the limit only guards against nonsense.
pub const MAX_MESSAGE_BYTES: usize = 1 << 30;

/// A connection to dshd.
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
    socket: PathBuf,
}

impl Client {
    /// Connects to the daemon listening on `socket`, after checking that the process serving it
    /// runs as our own uid (every reconnection is checked again).
    pub async fn connect(socket: &Path) -> Result<Self, ConnectError> {
        let path = socket.to_owned();
        let connector = tower::service_fn(move |_: Uri| dial(path.clone()));
        // The URI is not dialled (the connector is); it only gives requests the plain `:authority`
        // `localhost` that dshd's HTTP/2 layer accepts.
        let channel = Endpoint::from_static("http://localhost")
            .connect_with_connector(connector)
            .await
            .map_err(|e| connect_error(socket, &e))?;
        Ok(Self {
            channel,
            socket: socket.to_owned(),
        })
    }

    /// The socket this client is connected to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The underlying channel, for services this crate does not wrap.
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// `dsh.v1.Daemon`.
    pub fn daemon(&self) -> v1::daemon_client::DaemonClient<Channel> {
        v1::daemon_client::DaemonClient::new(self.channel.clone())
    }

    /// `dsh.v1.Agents`.
    pub fn agents(&self) -> v1::agents_client::AgentsClient<Channel> {
        v1::agents_client::AgentsClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// `dsh.v1.Shell`.
    pub fn shell(&self) -> v1::shell_client::ShellClient<Channel> {
        v1::shell_client::ShellClient::new(self.channel.clone())
    }

    /// `dsh.v1.ShellEnv`.
    pub fn shell_env(&self) -> v1::shell_env_client::ShellEnvClient<Channel> {
        v1::shell_env_client::ShellEnvClient::new(self.channel.clone())
    }

    /// `dsh.v1.Persistence`.
    pub fn persistence(&self) -> v1::persistence_client::PersistenceClient<Channel> {
        v1::persistence_client::PersistenceClient::new(self.channel.clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// `dsh.v1.Skills`.
    pub fn skills(&self) -> v1::skills_client::SkillsClient<Channel> {
        v1::skills_client::SkillsClient::new(self.channel.clone())
    }

    /// The full id `value` stands for, when it is a unique prefix of an id of `kind` (see
    /// [`ids`]); a full id is returned as it is, without a call.
    pub async fn resolve(
        &self,
        kind: ids::IdKind,
        value: &str,
    ) -> Result<String, ids::ResolveError> {
        ids::resolve(self.channel.clone(), kind, value).await
    }

    /// The call id `value` stands for among `agent`'s calls waiting for approval (see
    /// [`ids::resolve_call`]).
    pub async fn resolve_call(
        &self,
        agent: &str,
        value: &str,
    ) -> Result<String, ids::ResolveError> {
        ids::resolve_call(self.channel.clone(), agent, value).await
    }

    /// `dsh.v1.Hooks`.
    pub fn hooks(&self) -> v1::hooks_client::HooksClient<Channel> {
        v1::hooks_client::HooksClient::new(self.channel.clone())
    }

    /// A client for `dsh.v1.Models`.
    pub fn models(&self) -> v1::models_client::ModelsClient<Channel> {
        v1::models_client::ModelsClient::new(self.channel.clone())
    }
}

/// What a [`ConnectError::SandboxRefused`] says after the path.
fn sandbox_refusal(inside_dsh_command: bool, error: &str) -> String {
    if inside_dsh_command {
        format!(
            "this runs inside a dsh command whose sandbox has network off, and the sandbox refuses \
             new sockets (socket(): {error}); run dshctl outside it, or give the agent (or \
             `dshctl run`) `--network on`"
        )
    } else {
        format!(
            "a sandbox with network off refused to make a socket (socket(): {error}); run dshctl \
             outside it"
        )
    }
}

/// Why one connection attempt failed.
#[derive(Debug, thiserror::Error)]
enum DialError {
    /// `socket()` failed: nothing was tried yet.
    #[error("socket(): {0}")]
    Socket(std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("the socket is served by uid {server_uid}, not by uid {own_uid}")]
    ForeignServer { server_uid: u32, own_uid: u32 },
}

/// How long a connection attempt waits for room in a full listen queue.
const FULL_QUEUE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connects to `path` and hands the stream to tonic only if its server runs as our effective uid.
async fn dial(path: PathBuf) -> Result<TokioIo<tokio::net::UnixStream>, DialError> {
    let stream = connect_waiting(&path).await?;
    check_server(&stream)?;
    Ok(TokioIo::new(stream))
}

/// `connect(2)` as a blocking socket does it: a full listen queue (a burst of clients, dshd busy
/// accepting) is waited out, for up to [`FULL_QUEUE_WAIT`], instead of failing at once with
/// EAGAIN as a non-blocking connect does. The socket is made apart from the connect, so that a
/// sandbox refusing `socket()` is told from a socket file refusing `connect()`.
async fn connect_waiting(path: &Path) -> Result<tokio::net::UnixStream, DialError> {
    let started = tokio::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        let socket = tokio::net::UnixSocket::new_stream().map_err(DialError::Socket)?;
        match socket.connect(path).await {
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    && started.elapsed() < FULL_QUEUE_WAIT =>
            {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            other => return Ok(other?),
        }
    }
}

/// The server's credentials are those it had when it called `listen`, recorded by the kernel: they
/// cannot be forged by the server and are known before anything is sent.
fn check_server(stream: &tokio::net::UnixStream) -> Result<(), DialError> {
    let server_uid = rustix::net::sockopt::socket_peercred(stream)
        .map_err(std::io::Error::from)?
        .uid
        .as_raw();
    let own_uid = rustix::process::geteuid().as_raw();
    if server_uid == own_uid {
        Ok(())
    } else {
        Err(DialError::ForeignServer {
            server_uid,
            own_uid,
        })
    }
}

fn connect_error(socket: &Path, error: &tonic::transport::Error) -> ConnectError {
    let path = socket.to_owned();
    let mut kind = None;
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = current {
        match e.downcast_ref::<DialError>() {
            Some(&DialError::ForeignServer {
                server_uid,
                own_uid,
            }) => {
                return ConnectError::ForeignServer {
                    path,
                    server_uid,
                    own_uid,
                };
            }
            Some(DialError::Socket(io)) => return socket_refused(path, io, inside_dsh_command()),
            // `transparent` hides the io::Error from `source()`, so look inside.
            Some(DialError::Io(io)) => kind = kind.or(Some(io.kind())),
            None => {}
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            kind = kind.or(Some(io.kind()));
        }
        current = e.source();
    }
    match kind {
        Some(std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
            ConnectError::NotListening {
                path,
                looked: String::new(),
            }
        }
        Some(std::io::ErrorKind::PermissionDenied) => ConnectError::PermissionDenied {
            reason: permission_reason(&path, rustix::process::geteuid().as_raw()),
            path,
        },
        _ => ConnectError::Other {
            path,
            message: error_chain(error),
        },
    }
}

/// `DSH_SHELL=1`: this process runs inside a command dshd started for a model.
fn inside_dsh_command() -> bool {
    std::env::var_os(SHELL_ENV).is_some_and(|v| v == "1")
}

/// The error for a `socket()` that failed: refused by a sandbox (EACCES or EPERM, as seccomp
/// filters answer), or something else (no descriptors left, ...).
fn socket_refused(path: PathBuf, error: &std::io::Error, inside_dsh_command: bool) -> ConnectError {
    if error.kind() == std::io::ErrorKind::PermissionDenied {
        ConnectError::SandboxRefused {
            path,
            inside_dsh_command,
            error: error.to_string(),
        }
    } else {
        ConnectError::Other {
            path,
            message: format!("socket(): {error}"),
        }
    }
}

/// Why `connect()` to `path` was refused, as far as the socket file tells: another uid owns it,
/// or it is ours and its mode or a directory above it keeps us (`own_uid`) out.
fn permission_reason(path: &Path, own_uid: u32) -> String {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(meta) if meta.uid() != own_uid => format!(
            "the socket belongs to another user (uid {}, not you: uid {own_uid})",
            meta.uid()
        ),
        Ok(meta) => format!(
            "the socket is yours but its mode ({:o}) does not let you connect",
            meta.mode() & 0o7777
        ),
        Err(e) => format!("a directory above it does not let you in ({e})"),
    }
}

/// An error and its sources, joined with ": ".
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut current = error.source();
    while let Some(e) = current {
        let text = e.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        current = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `socket()` refused with EACCES is the sandbox's doing, never another user's; inside a
    /// dsh command the message says whose sandbox it is.
    #[test]
    fn a_refused_socket_names_the_sandbox() {
        let path = PathBuf::from("/run/user/1/dsh/dshd.sock");
        let denied = std::io::Error::from_raw_os_error(13);
        let inside = socket_refused(path.clone(), &denied, true).to_string();
        assert!(
            inside.starts_with(
                "cannot connect to /run/user/1/dsh/dshd.sock: this runs inside a dsh command whose \
                 sandbox has network off"
            ) && inside.contains("socket(): Permission denied (os error 13)"),
            "{inside}"
        );
        let outside = socket_refused(path.clone(), &denied, false).to_string();
        assert!(
            outside.contains("a sandbox with network off refused") && !outside.contains("dsh "),
            "{outside}"
        );
        for message in [inside, outside] {
            assert!(!message.contains("another user"), "{message}");
        }
        let no_descriptors = std::io::Error::from_raw_os_error(24);
        assert!(matches!(
            socket_refused(path, &no_descriptors, true),
            ConnectError::Other { .. }
        ));
    }

    /// A refused `connect()` says another user owns the socket only when one does.
    #[test]
    fn a_refused_connect_names_another_user_only_when_one_owns_the_socket() {
        let dir = std::env::temp_dir().join(format!("dsh-client-perm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s");
        std::fs::write(&file, "").unwrap();
        let own = rustix::process::geteuid().as_raw();
        let mine = permission_reason(&file, own);
        assert!(mine.starts_with("the socket is yours"), "{mine}");
        let theirs = permission_reason(&file, own + 1);
        assert_eq!(
            theirs,
            format!(
                "the socket belongs to another user (uid {own}, not you: uid {})",
                own + 1
            )
        );
        let hidden = permission_reason(&dir.join("missing/s"), own);
        assert!(hidden.starts_with("a directory above it"), "{hidden}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A full listen queue is waited out: the attempt succeeds once the server accepts one.
    #[tokio::test]
    async fn a_connection_waits_for_room_in_a_full_listen_queue() {
        let dir = std::env::temp_dir().join(format!("dsh-client-queue-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.sock");
        let _ = std::fs::remove_file(&path);
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let mut queued = Vec::new();
        let full = loop {
            match tokio::net::UnixStream::connect(&path).await {
                Ok(stream) => queued.push(stream),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(e) => panic!("{e}"),
            }
            if queued.len() > 100_000 {
                break false;
            }
        };
        assert!(full, "the listen queue never filled");
        let waiting = tokio::spawn({
            let path = path.clone();
            async move { connect_waiting(&path).await }
        });
        // One turn of this single-threaded runtime: the attempt meets the full queue and waits.
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "{:?}", waiting.await);
        let (_accepted, _) = listener.accept().unwrap();
        waiting.await.unwrap().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
