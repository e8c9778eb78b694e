//! `dshd`: the dsh daemon. Parses flags, reads the config, sets up logging and serves until SIGTERM,
//! SIGINT or `Daemon.Shutdown`.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use dsh_core::home::Ambient;
use dsh_daemon::config::{BackendName, Config, Flags, LogFormat};
use dsh_daemon::server::{self, Listener};

/// jemalloc rather than glibc's allocator: it gives freed memory back to the system (after a
/// resumed 100 MB session or ten long streams are closed), where glibc's arenas keep most of it
/// for good. See docs/DECISIONS.md and the measurements in docs/BENCHMARKS.md.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The dsh daemon: hosts coding agents for one user and serves gRPC on a user-only Unix socket.
const DSHD_AFTER_HELP: &str = "\
Examples:
  dshd                                  run on the defaults (home ~/.dsh, JSONL sessions)
  dshd --dsh-home ~/work/.dsh           another harness home
  dshd --persistence sqlite             keep sessions in <home>/sessions.sqlite3
  dshd --check-config ~/.dsh/config.toml  is this config valid? (starts nothing)
  RUST_LOG=debug dshd --log-format json  verbose, machine-readable logs
  systemctl --user start dshd           as a systemd user service (see deploy/README.md)

Talk to it with dshctl (dshctl status, dshctl agent new, dshctl prompt ...).

Exit status:
  0  stopped cleanly (or, with --check-config, the config is valid) (SIGTERM, SIGINT or dshctl shutdown) with every session saved
  1  could not start (bad config; with --check-config: the config is invalid, socket or home in use, ...) or a session could not be saved at
     shutdown; stderr says which and what to do";

#[derive(Debug, Parser)]
#[command(
    name = "dshd",
    version,
    about = "The dsh daemon: hosts coding agents for you and serves them over a private Unix socket.",
    after_help = DSHD_AFTER_HELP
)]
struct Args {
    /// Config file (TOML). Default: <home>/config.toml when it exists.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Harness home. Default: $DSH_HOME, else ~/.dsh.
    #[arg(long, value_name = "DIR")]
    dsh_home: Option<std::ffi::OsString>,
    /// Socket path. Default: <runtime dir>/dsh/dshd.sock (the runtime dir: $XDG_RUNTIME_DIR, else
    /// /run/user/<uid> when it is yours), else <home>/run/dshd.sock.
    #[arg(long, value_name = "PATH")]
    socket: Option<std::ffi::OsString>,
    /// Log format on stderr. Filter with RUST_LOG (default: info, and h2::server=debug for streams
    /// refused before any handler, e.g. a malformed :authority).
    #[arg(long, value_enum, value_name = "FORMAT")]
    log_format: Option<LogFormatArg>,
    /// Persistence backend at start (swappable later with `dshctl persistence use`).
    #[arg(long, value_enum, value_name = "BACKEND")]
    persistence: Option<BackendArg>,
    /// Check a config file and exit, starting nothing: FILE, else the one dshd would read
    /// (--config, else <home>/config.toml). Exit 0 when it is valid, 1 with the key or line at
    /// fault.
    #[arg(long, value_name = "FILE", num_args = 0..=1)]
    check_config: Option<Option<PathBuf>>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum BackendArg {
    Jsonl,
    Sqlite,
    Postgres,
}

impl Args {
    /// The flags the config is loaded with.
    fn flags(self) -> Flags {
        Flags {
            config: self.config,
            dsh_home: self.dsh_home,
            socket: self.socket,
            log_format: self.log_format.map(LogFormat::from),
            persistence: self.persistence.map(BackendName::from),
        }
    }
}

impl From<BackendArg> for BackendName {
    fn from(arg: BackendArg) -> Self {
        match arg {
            BackendArg::Jsonl => Self::Jsonl,
            BackendArg::Sqlite => Self::Sqlite,
            BackendArg::Postgres => Self::Postgres,
        }
    }
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormatArg {
    Text,
    Json,
}

impl From<LogFormatArg> for LogFormat {
    fn from(arg: LogFormatArg) -> Self {
        match arg {
            LogFormatArg::Text => Self::Text,
            LogFormatArg::Json => Self::Json,
        }
    }
}

fn main() -> ExitCode {
    // dshd starts every command through itself as the launcher (`/proc/self/exe` with this
    // `argv[0]`): decided first, before any runtime, logging or configuration.
    if std::env::args_os()
        .next()
        .is_some_and(|arg0| arg0 == dsh_launch::ARG0)
    {
        dsh_launch::main();
    }
    // First, before any secret is read: a non-dumpable process's /proc files (environ, mem, maps)
    // belong to root, so the user's other processes, its agents' commands included, cannot read
    // the model key out of dshd's environment or memory, nor attach to it.
    if let Err(error) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        eprintln!("dshd: error: cannot make dshd non-dumpable (PR_SET_DUMPABLE): {error}");
        return ExitCode::FAILURE;
    }
    let mut args = Args::parse();
    if let Some(file) = args.check_config.take() {
        return check_config(args.flags(), file);
    }
    let allocator = tune_allocator();
    match run(args.flags(), allocator) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("dshd: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// `dshd --check-config [FILE]`: loads the config as a start would (the same checks, the same
/// messages) and says what it found, without binding, locking or creating anything.
fn check_config(mut flags: Flags, file: Option<PathBuf>) -> ExitCode {
    flags.config = file.or(flags.config);
    match Config::load(&flags, &Ambient::from_process()) {
        Ok(config) => {
            let what = match &config.file {
                Some(file) => format!("{}: valid", file.display()),
                None => format!(
                    "no config file ({} does not exist): every key at its default",
                    config.home.path.join("config.toml").display()
                ),
            };
            println!(
                "dshd: {what} (home {}, socket {}, model provider {})",
                config.home.path.display(),
                config.socket.display(),
                config.default_provider
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("dshd: error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(flags: Flags, allocator: tikv_jemalloc_ctl::Result<()>) -> anyhow::Result<()> {
    let mut config = Config::load(&flags, &Ambient::from_process())?;
    init_logging(config.log_format);
    // Before the first child, so every command gets the limit dshd was started with back.
    config.exec.child_open_files = dsh_daemon::open_files::raise();
    if let Err(error) = allocator {
        tracing::warn!(%error, "cannot tune the allocator; freed memory may go back to the system later");
    }
    // Before the first child: processes that leave their group (`setsid`, a double fork) are
    // re-parented to dshd, which kills them when their owner ends (see exec::reaper).
    dsh_core::adopt_orphans().context("cannot become the subreaper of child processes")?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // One daemon per home, whatever socket each would serve: taken before the socket, held until
    // exit.
    let _home = dsh_daemon::socket::lock_home(&config.home.path, &config.socket)?;
    runtime.block_on(async {
        let listener = match Listener::from_systemd().context("cannot use the socket systemd passed")? {
            Some(listener) => {
                tracing::info!(socket = %listener.path().display(), "using the socket passed by systemd");
                listener
            }
            None => Listener::bind(&config.socket)?,
        };
        server::run(config, listener, shutdown_signal()).await?;
        Ok(())
    })
}

/// The log filter without `RUST_LOG`: INFO, and h2's DEBUG lines for the streams it refuses
/// before any handler sees them (a malformed `:authority`, e.g. a socket path sent by grpcurl or
/// gRPC-core clients): its only DEBUG events, one per refused stream, each with the reason. The
/// MCP SDK's own INFO lines (every session it opens and ends) are left out: dsh logs what
/// matters of a server (a failed start, a crash) itself.
const DEFAULT_LOG_FILTER: &str = "info,h2::server=debug,rmcp=warn";

fn init_logging(format: LogFormat) {
    let filter = || {
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER))
    };
    // Under systemd stderr is the journal: text lines there would carry a second timestamp and
    // all land at one priority, so records go to journald natively instead (WARN as warning,
    // ERROR as err, fields kept).
    if format == LogFormat::Text && stderr_is_journal() {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        match tracing_journald::layer() {
            Ok(journal) => {
                tracing_subscriber::registry()
                    .with(filter())
                    .with(journal.with_syslog_identifier("dshd".into()))
                    .init();
                return;
            }
            Err(error) => eprintln!("dshd: cannot log to journald ({error}); logging to stderr"),
        }
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(color_allowed()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// Colour in text logs only on a terminal, and never with `NO_COLOR` set to anything but the
/// empty string (<https://no-color.org>).
fn color_allowed() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// True when stderr is the journal stream systemd connected: `JOURNAL_STREAM` names its device
/// and inode, and stderr is still that file (not redirected by whoever started dshd), as
/// systemd.exec(5) says to check.
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(std::io::stderr()) else {
        return false;
    };
    is_journal_stream(&stream.to_string_lossy(), stat.st_dev, stat.st_ino)
}

/// Whether `JOURNAL_STREAM`'s `device:inode` names the file with `dev` and `ino`.
fn is_journal_stream(value: &str, dev: u64, ino: u64) -> bool {
    value
        .split_once(':')
        .and_then(|(d, i)| Some((d.parse::<u64>().ok()?, i.parse::<u64>().ok()?)))
        == Some((dev, ino))
}

/// Sets jemalloc up for a daemon, before any other thread exists: pages freed after a load go back
/// to the system after about a second (jemalloc's default is 10 s, during which a burst of
/// resumes or streams piles its freed pages onto its peak), returned by jemalloc's own background
/// thread even when dshd then allocates nothing more (left alone, jemalloc purges only when an
/// allocation happens). One such thread is enough: purging is rare.
fn tune_allocator() -> tikv_jemalloc_ctl::Result<()> {
    use tikv_jemalloc_ctl::{Access, AsName};
    /// How long freed pages are kept for reuse before they are returned, in milliseconds.
    const DIRTY_DECAY_MS: isize = 1_000;
    // The arenas that exist already (the main thread's), then the default of those made later.
    b"arena.0.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS)?;
    b"arenas.dirty_decay_ms\0".name().write(DIRTY_DECAY_MS)?;
    tikv_jemalloc_ctl::max_background_threads::write(1)?;
    tikv_jemalloc_ctl::background_thread::write(true)
}

/// Installs the SIGTERM and SIGINT handlers now, and returns what resolves at the first of them.
/// Installed before dshd says it is serving (a handler installed when the future is first polled
/// would leave a moment after that line in which a signal still kills dshd outright, exit 130).
/// Must be called inside the runtime.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let handlers = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot install signal handlers; only Daemon.Shutdown will stop dshd");
            std::future::pending::<()>().await;
            return;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM received"),
            _ = int.recv() => tracing::info!("SIGINT received"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::is_journal_stream;

    #[test]
    fn the_journal_stream_is_recognised_by_device_and_inode_only() {
        assert!(is_journal_stream("8:4242", 8, 4242));
        assert!(!is_journal_stream("8:4243", 8, 4242), "another inode");
        assert!(!is_journal_stream("9:4242", 8, 4242), "another device");
        assert!(!is_journal_stream("", 8, 4242));
        assert!(!is_journal_stream("8", 8, 4242));
        assert!(!is_journal_stream("x:y", 8, 4242));
    }
}
