//! A throwaway PostgreSQL server for tests and benchmarks: Debian's `postgresql` package
//! (`initdb` and `postgres` from `/usr/lib/postgresql/<version>/bin`), a fresh cluster in a
//! temporary directory, listening on a Unix socket in that directory only (no TCP, unless started
//! with TLS: then on 127.0.0.1 too), trusting local connections of the user `dsh`.
//!
//! `initdb` refuses to run as root, so when the tests run as root the server runs as `nobody`
//! (through `setpriv`, util-linux) in a directory handed to it. The server is stopped, and its
//! directory removed, when the [`PgServer`] is dropped; the shared one of [`shared`] lives as long
//! as the test binary: it is started under `setpriv --pdeathsig`, so the kernel stops it when the
//! process that started it exits, and the shell around it removes the directory.
//!
//! A missing install fails the test saying how to install it, like every other tool the tests
//! need.

use std::ffi::OsString;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod faults;

pub use faults::{Paused, SilentPath};

/// The superuser of every test cluster; local connections as it need no password.
pub const USER: &str = "dsh";

/// The uid and gid the server runs as when the tests run as root (`nobody`).
const NOBODY: u32 = 65534;

/// A running PostgreSQL server of its own cluster.
#[derive(Debug)]
pub struct PgServer {
    /// The cluster's directory: `data/` and the socket.
    dir: PathBuf,
    /// The port, which names the socket file (`.s.PGSQL.<port>`); nothing listens on TCP.
    port: u16,
    /// The `sh` that runs `postgres` and removes `dir` after it; `None` while stopped.
    child: Option<Child>,
    bin: PathBuf,
    /// Whether the server runs as `nobody` (the tests run as root).
    as_nobody: bool,
    /// Whether commits are fsynced (benchmarks); tests run without.
    durable: bool,
    /// Whether the server also listens on TCP (127.0.0.1:`port`) with TLS on.
    tls: bool,
}

/// The server shared by every test of this binary, started on first use.
pub fn shared() -> &'static PgServer {
    static SHARED: OnceLock<PgServer> = OnceLock::new();
    SHARED.get_or_init(|| {
        // `--pdeathsig` fires when the *thread* that started the child ends: start it from a
        // thread that lives as long as the process.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("postgres-keeper".into())
            .spawn(move || {
                let server = PgServer::start_inner(false);
                tx.send(server).unwrap();
                loop {
                    std::thread::park();
                }
            })
            .unwrap();
        rx.recv().unwrap()
    })
}

impl PgServer {
    /// A new cluster, started; stopped and removed on drop. Commits are not fsynced (a test
    /// server: a crash of the machine loses nothing anyone needs).
    pub fn start() -> Self {
        Self::start_inner(false)
    }

    /// A new cluster that also listens on `127.0.0.1` (at [`port`](Self::port)) with TLS on,
    /// presenting `tls`'s server certificate; local connections need no password there either.
    pub fn start_tls(tls: &TlsFiles) -> Self {
        let mut server = Self::create(false);
        // `localhost` in the socket's name would not do for TCP: take a free port.
        server.port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .unwrap()
            .port();
        // PostgreSQL wants its key private to the server's user.
        for (name, text) in [
            ("server.crt", &tls.server_cert),
            ("server.key", &tls.server_key),
        ] {
            let path = server.dir.join(name);
            std::fs::write(&path, text).unwrap();
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .unwrap();
            if server.as_nobody {
                std::os::unix::fs::chown(&path, Some(NOBODY), Some(NOBODY)).unwrap();
            }
        }
        server.tls = true;
        server.run();
        server
    }

    /// The TCP port (with [`start_tls`](Self::start_tls)); otherwise it only names the socket.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `db` over TCP at `host` (`localhost` or `127.0.0.1`), with `sslmode`.
    pub fn tcp_url(&self, host: &str, db: &str, sslmode: &str) -> String {
        format!(
            "postgresql://{USER}@{host}:{}/{db}?sslmode={sslmode}",
            self.port
        )
    }

    /// [`start`](Self::start) with PostgreSQL's durable defaults (`fsync=on`,
    /// `synchronous_commit=on`): what a benchmark compares with SQLite's `synchronous=FULL`.
    pub fn start_durable() -> Self {
        Self::start_inner(true)
    }

    fn start_inner(durable: bool) -> Self {
        let mut server = Self::create(durable);
        server.run();
        server
    }

    /// A new cluster, not started.
    fn create(durable: bool) -> Self {
        let bin = bin_dir();
        let as_nobody = rustix::process::geteuid().is_root();
        let base = tempfile::Builder::new()
            .prefix("dsh-pg-")
            .tempdir()
            .unwrap()
            .keep();
        let dir = base.join("cluster");
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        if as_nobody {
            let id = Some(NOBODY);
            std::os::unix::fs::chown(&base, id, id).unwrap();
            std::os::unix::fs::chown(&dir, id, id).unwrap();
        }
        let out = user_command(as_nobody, false, &bin.join("initdb"))
            .args(["--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C"])
            .arg(format!("--username={USER}"))
            .arg("-D")
            .arg(dir.join("data"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Self {
            dir,
            port: 5432,
            child: None,
            bin,
            as_nobody,
            durable,
            tls: false,
        }
    }

    /// Starts `postgres` on the cluster (again, after [`stop`](Self::stop)) and waits until it
    /// takes connections.
    pub fn run(&mut self) {
        assert!(self.child.is_none(), "the server is running already");
        let postgres = self.bin.join("postgres");
        // `sh` runs the server in the background and forwards a TERM (the parent-death signal)
        // as a fast shutdown; when the server has gone, it removes the cluster unless told that
        // the server is only being stopped (the `keep` file).
        // Arguments past the fourth are the server's own.
        let script = r#"
postgres=$1 dir=$2 port=$3 fsync=$4; shift 4
"$postgres" -D "$dir/data" -k "$dir" -p "$port" -c fsync="$fsync" -c max_connections=300 -c log_min_messages=warning "$@" &
pid=$!
trap 'kill -INT $pid' TERM INT
wait $pid; wait $pid
[ -e "$dir/keep" ] || rm -rf "$(dirname "$dir")"
"#;
        let listen: Vec<String> = if self.tls {
            [
                "listen_addresses=127.0.0.1".to_owned(),
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", self.dir.join("server.crt").display()),
                format!("ssl_key_file={}", self.dir.join("server.key").display()),
            ]
            .to_vec()
        } else {
            vec!["listen_addresses=".to_owned()]
        };
        let log = std::fs::File::create(self.dir.join("server.log")).unwrap();
        if self.as_nobody {
            let id = Some(NOBODY);
            std::os::unix::fs::chown(self.dir.join("server.log"), id, id).unwrap();
        }
        let child = user_command(self.as_nobody, true, Path::new("/bin/sh"))
            .arg("-c")
            .arg(script)
            .arg("sh")
            .arg(&postgres)
            .arg(&self.dir)
            .arg(self.port.to_string())
            .arg(if self.durable { "on" } else { "off" })
            .args(listen.iter().flat_map(|setting| ["-c", setting]))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
        let _ = std::fs::remove_file(self.dir.join("keep"));
        self.wait_ready();
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self
                .psql("postgres")
                .arg("-c")
                .arg("SELECT 1")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().unwrap()) {
                panic!(
                    "postgres exited with {status}: {}",
                    std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
                );
            }
            assert!(
                Instant::now() < deadline,
                "postgres did not take connections within a minute: {}",
                std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (a fast shutdown: sessions are disconnected), keeping the cluster for a
    /// later [`run`](Self::run).
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        std::fs::write(self.dir.join("keep"), b"").unwrap();
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        );
        child.wait().unwrap();
    }

    /// The directory holding the socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The key-value connection string of database `db` as [`USER`].
    pub fn url(&self, db: &str) -> String {
        format!(
            "host={} port={} user={USER} dbname={db}",
            self.dir.display(),
            self.port
        )
    }

    /// The URL form of [`url`](Self::url): `postgresql://dsh@/<db>?host=<dir>&port=<port>`.
    pub fn uri(&self, db: &str) -> String {
        format!(
            "postgresql://{USER}@/{db}?host={}&port={}",
            self.dir.display(),
            self.port
        )
    }

    /// Creates database `name` (a plain identifier), if it does not exist yet.
    pub fn create_database(&self, name: &str) {
        assert!(
            name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
            "{name}: use a plain identifier"
        );
        let out = self
            .psql("postgres")
            .arg("-c")
            .arg(format!("CREATE DATABASE {name}"))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() || err.contains("already exists"),
            "CREATE DATABASE {name}: {err}"
        );
    }

    /// A fresh database with a unique name; returns the name (see [`url`](Self::url)).
    pub fn fresh_database(&self) -> String {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let name = format!("t{}_{n}", std::process::id());
        self.create_database(&name);
        name
    }

    /// `psql` connected to database `db`, stopping at the first error, quiet.
    pub fn psql(&self, db: &str) -> Command {
        let psql = self.bin.join("psql");
        let mut cmd = Command::new(if psql.is_file() {
            psql
        } else {
            PathBuf::from("psql")
        });
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-At"])
            .arg("-h")
            .arg(&self.dir)
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-U")
            .arg(USER)
            .arg("-d")
            .arg(db)
            .stdin(Stdio::null());
        cmd
    }

    /// Runs `sql` in database `db` with `psql`; returns its output (unaligned, tuples only).
    pub fn sql(&self, db: &str, sql: &str) -> String {
        let out = self.psql(db).arg("-c").arg(sql).output().unwrap();
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = rustix::process::kill_process(
                rustix::process::Pid::from_child(&child),
                rustix::process::Signal::TERM,
            );
            let _ = child.wait();
        } else {
            let _ = std::fs::remove_dir_all(self.dir.parent().unwrap_or(&self.dir));
        }
    }
}

/// `program` as the server's user: `nobody` when the tests run as root; with `pdeathsig`, killed
/// (TERM) when the thread that started it ends.
fn user_command(as_nobody: bool, pdeathsig: bool, program: &Path) -> Command {
    let mut words: Vec<OsString> = Vec::new();
    if as_nobody {
        words.extend(
            [
                format!("--reuid={NOBODY}"),
                format!("--regid={NOBODY}"),
                "--clear-groups".to_owned(),
            ]
            .map(OsString::from),
        );
    }
    if pdeathsig {
        words.push("--pdeathsig=TERM".into());
    }
    if words.is_empty() {
        return Command::new(program);
    }
    let mut cmd = Command::new(setpriv());
    cmd.args(words).arg("--").arg(program);
    cmd
}

fn setpriv() -> PathBuf {
    on_path("setpriv").unwrap_or_else(|| {
        panic!("setpriv is needed to run the test PostgreSQL server: apt-get install util-linux")
    })
}

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb` and `postgres`, or the test
/// fails saying how to install them.
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "the PostgreSQL tests need a PostgreSQL server (initdb and postgres under \
             /usr/lib/postgresql/<version>/bin): apt-get install postgresql"
        )
    })
}

/// A CA and a server certificate it signed, for a server started with
/// [`PgServer::start_tls`]: PEM text, made fresh for each test.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// The CA's certificate: what a client trusts (`postgres.ca_file`).
    pub ca_cert: String,
    /// The server's certificate, naming `localhost` only (not `127.0.0.1`, so that a test can
    /// connect to a host it does not name).
    pub server_cert: String,
    /// The server's private key.
    pub server_key: String,
}

impl TlsFiles {
    /// A new CA and a certificate for `localhost` signed by it.
    pub fn generate() -> Self {
        let mut ca = rcgen::CertificateParams::new(Vec::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, "dsh test CA");
        ca.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let ca_cert = ca.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca, ca_key);

        let mut server = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        server
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        server.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = rcgen::KeyPair::generate().unwrap();
        let server_cert = server.signed_by(&server_key, &issuer).unwrap();
        Self {
            ca_cert: ca_cert.pem(),
            server_cert: server_cert.pem(),
            server_key: server_key.serialize_pem(),
        }
    }
}
