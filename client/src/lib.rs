//! A client for dshd: finds the socket the way `dshd` does, connects over it, and hands out the typed
//! gRPC clients of every dsh service.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use dsh_daemon::home::{self, Ambient};
use dsh_proto::v1;
use tonic::transport::{Channel, Endpoint};

/// The environment variable that names the socket (set by dshd in every bash child it starts).
pub const SOCKET_ENV: &str = "DSH_SOCKET";

/// Why a client could not reach the daemon.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Nothing accepts connections on the path.
    #[error(
        "no dshd is listening on {}; start it with 'dshd' or 'systemctl --user start dshd'",
        path.display()
    )]
    NotListening {
        /// The socket path.
        path: PathBuf,
    },
    /// The socket exists but we may not use it.
    #[error("permission denied on {}: the socket belongs to another user", path.display())]
    PermissionDenied {
        /// The socket path.
        path: PathBuf,
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
    #[error("cannot find the dshd socket: {0}")]
    NoSocket(#[from] home::HomeError),
}

/// The socket a client should use: the explicit value, else `$DSH_SOCKET`, else the default that
/// `dshd` itself uses (`$XDG_RUNTIME_DIR/dsh/dshd.sock`, else `<home>/run/dshd.sock`).
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
    Ok(dsh_daemon::socket::default_path(
        &home.path,
        ambient.runtime_dir.as_deref(),
    ))
}

/// A connection to dshd.
#[derive(Debug, Clone)]
pub struct Client {
    channel: Channel,
    socket: PathBuf,
}

impl Client {
    /// Connects to the daemon listening on `socket`.
    pub async fn connect(socket: &Path) -> Result<Self, ConnectError> {
        let uri = format!("unix://{}", socket.display());
        let other = |message: String| ConnectError::Other {
            path: socket.to_owned(),
            message,
        };
        let endpoint = Endpoint::try_from(uri).map_err(|e| other(e.to_string()))?;
        let channel = endpoint.connect().await.map_err(|e| match io_kind(&e) {
            Some(std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused) => {
                ConnectError::NotListening {
                    path: socket.to_owned(),
                }
            }
            Some(std::io::ErrorKind::PermissionDenied) => ConnectError::PermissionDenied {
                path: socket.to_owned(),
            },
            _ => other(error_chain(&e)),
        })?;
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
    }

    /// `dsh.v1.Skills`.
    pub fn skills(&self) -> v1::skills_client::SkillsClient<Channel> {
        v1::skills_client::SkillsClient::new(self.channel.clone())
    }

    /// `dsh.v1.Hooks`.
    pub fn hooks(&self) -> v1::hooks_client::HooksClient<Channel> {
        v1::hooks_client::HooksClient::new(self.channel.clone())
    }
}

fn io_kind(error: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        current = e.source();
    }
    None
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
