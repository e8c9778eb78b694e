//! `dshctl doctor`: is dsh ready to use? One line per check, each failed one with its fix.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::ExitCode;

use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::Output;

pub const AFTER_HELP: &str = "\
Checks, in order: the socket (found, private to you, served by your own uid), the daemon (answers,
same protocol), its home, the persistence backend (readable), the model API key (as dshd sees
it), the config file and the hook files. ✓ passed, ✗ failed (with the fix), ! works but limited
(e.g. no model key: only the keyless scripted model), · not checked (needs a running dshd).
A check fails when something will fail: no key while the configured provider (model.provider) is
openai, a config file that cannot be read or changed (or appeared) since dshd read it (check it
with dshd --check-config FILE). Without a daemon, the socket line lists the places looked at.

Examples:
  dshctl doctor
  dshctl --json doctor | jq -r '.checks[] | select(.status == \"error\") | .fix'

Exit status:
  0    every check passed (warnings allowed)
  1    at least one check failed
  2    bad usage";

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Ok,
    /// Works, with a limitation worth knowing.
    Warn,
    Fail,
    /// Not checked: it needs something that failed before.
    Skipped,
}

impl Level {
    fn mark(self) -> &'static str {
        match self {
            Self::Ok => "✓",
            Self::Warn => "!",
            Self::Fail => "✗",
            Self::Skipped => "·",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Warn => "warning",
            Self::Fail => "error",
            Self::Skipped => "skipped",
        }
    }
}

#[derive(Debug)]
struct Check {
    name: &'static str,
    level: Level,
    detail: String,
    fix: Option<String>,
}

impl Check {
    fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            level: Level::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            name,
            level: Level::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            level: Level::Warn,
            ..Self::fail(name, detail, fix)
        }
    }

    fn skipped(name: &'static str) -> Self {
        Self {
            name,
            level: Level::Skipped,
            detail: "not checked: needs a running dshd".to_owned(),
            fix: None,
        }
    }
}

/// Runs every check and prints them; exit 0 when none failed.
pub async fn run(socket: &Path, looked: &str, out: Output) -> anyhow::Result<ExitCode> {
    let checks = checks(socket, looked).await;
    let healthy = checks.iter().all(|c| c.level != Level::Fail);
    let doc = json!({
        "healthy": healthy,
        "checks": checks.iter().map(|c| json!({
            "check": c.name,
            "status": c.level.word(),
            "detail": c.detail,
            "fix": c.fix,
        })).collect::<Vec<_>>(),
    });
    out.emit(&doc, |w| {
        for c in &checks {
            match &c.fix {
                Some(fix) => writeln!(
                    w,
                    "{} {:<12} {} — fix: {fix}",
                    c.level.mark(),
                    c.name,
                    c.detail
                )?,
                None => writeln!(w, "{} {:<12} {}", c.level.mark(), c.name, c.detail)?,
            }
        }
        Ok(())
    })?;
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

const AFTER_DAEMON: [&str; 7] = [
    "home",
    "persistence",
    "model key",
    "config",
    "launcher",
    "hooks",
    "mcp",
];

async fn checks(socket: &Path, looked: &str) -> Vec<Check> {
    let mut checks = Vec::new();
    if let Some(problem) = socket_problem(socket, looked) {
        checks.push(problem);
        checks.push(Check::skipped("daemon"));
        checks.extend(AFTER_DAEMON.map(Check::skipped));
        return checks;
    }
    let status = match Client::connect(socket).await {
        Ok(client) => match client.daemon().status(v1::StatusRequest {}).await {
            Ok(status) => Ok((client, status.into_inner())),
            Err(e) => Err(Check::fail(
                "daemon",
                format!(
                    "dshd on {} refused Status: {}",
                    socket.display(),
                    e.message()
                ),
                "restart it: systemctl --user restart dshd (or stop it and run dshd)",
            )),
        },
        Err(dsh_client::ConnectError::NotListening { path, .. }) => {
            let e = dsh_client::ConnectError::NotListening {
                path,
                looked: looked.to_owned(),
            };
            Err(Check::fail("socket", e.to_string(), connect_fix(&e)))
        }
        Err(e) => Err(Check::fail("socket", e.to_string(), connect_fix(&e))),
    };
    let (client, status) = match status {
        Ok(found) => found,
        Err(problem) => {
            let socket_failed = problem.name == "socket";
            checks.push(problem);
            if socket_failed {
                checks.push(Check::skipped("daemon"));
            }
            checks.extend(AFTER_DAEMON.map(Check::skipped));
            return checks;
        }
    };
    checks.push(Check::ok(
        "socket",
        format!("{}: private, served by your uid", socket.display()),
    ));
    checks.push(daemon(&status));
    checks.push(home(Path::new(&status.dsh_home)));
    checks.extend(persistence(&client).await);
    checks.push(model_key(&status));
    checks.push(config(&status));
    checks.push(launcher(&status));
    checks.extend(hooks(&client).await);
    checks.extend(mcp(&client, &status).await);
    checks
}

/// Problems visible before connecting: the socket is missing, not a socket, not ours, or in a
/// directory others could replace it in.
fn socket_problem(socket: &Path, looked: &str) -> Option<Check> {
    let me = rustix::process::geteuid().as_raw();
    let start = "start dshd: dshd, or systemctl --user start dshd";
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Some(Check::fail(
                "socket",
                format!(
                    "no dshd is listening on {}: the socket does not exist{looked}",
                    socket.display()
                ),
                format!("{start} (or point --socket/$DSH_SOCKET at the right one)"),
            ));
        }
        Err(e) => {
            return Some(Check::fail(
                "socket",
                format!("cannot inspect {}: {e}", socket.display()),
                "check the permissions of the directories above it",
            ));
        }
    };
    if !meta.file_type().is_socket() {
        return Some(Check::fail(
            "socket",
            format!("{} is not a socket", socket.display()),
            format!("remove it, then {start}"),
        ));
    }
    if meta.uid() != me {
        return Some(Check::fail(
            "socket",
            format!(
                "{} belongs to uid {}, not to you (uid {me}); nothing was sent to it",
                socket.display(),
                meta.uid()
            ),
            "find out who created it; use your own socket (--socket or $DSH_SOCKET)",
        ));
    }
    let dir = socket.parent().unwrap_or(Path::new("/"));
    match std::fs::symlink_metadata(dir) {
        Ok(d) if d.file_type().is_symlink() || d.uid() != me || d.mode() & 0o022 != 0 => {
            Some(Check::fail(
                "socket",
                format!(
                    "{} is not a private directory of yours (owner uid {}, mode {:o}): another user could replace the socket",
                    dir.display(),
                    d.uid(),
                    d.mode() & 0o7777
                ),
                format!("chmod 700 {} (and make sure you own it)", dir.display()),
            ))
        }
        Ok(_) => None,
        Err(e) => Some(Check::fail(
            "socket",
            format!("cannot inspect {}: {e}", dir.display()),
            "check the permissions of the directories above it",
        )),
    }
}

fn connect_fix(error: &dsh_client::ConnectError) -> String {
    match error {
        dsh_client::ConnectError::NotListening { .. } => {
            "start dshd: dshd, or systemctl --user start dshd (a stale socket file is replaced)"
                .to_owned()
        }
        dsh_client::ConnectError::ForeignServer { .. }
        | dsh_client::ConnectError::PermissionDenied { .. } => {
            "check who owns the socket and its directory; use your own (--socket or $DSH_SOCKET)"
                .to_owned()
        }
        dsh_client::ConnectError::SandboxRefused { .. } => {
            "run dshctl outside the sandbox, or in a command with network on (--network on)"
                .to_owned()
        }
        _ => "check the socket path (--socket or $DSH_SOCKET)".to_owned(),
    }
}

fn daemon(s: &v1::StatusResponse) -> Check {
    let ours = dsh_proto::PROTOCOL_VERSION;
    if s.protocol_version != ours {
        return Check::fail(
            "daemon",
            format!(
                "dshd {} speaks protocol {}, this dshctl protocol {ours}",
                s.version, s.protocol_version
            ),
            "install dshd and dshctl from the same release, then restart dshd",
        );
    }
    Check::ok(
        "daemon",
        format!(
            "dshd {} (protocol {}), pid {}",
            s.version, s.protocol_version, s.pid
        ),
    )
}

fn home(path: &Path) -> Check {
    let me = rustix::process::geteuid().as_raw();
    match std::fs::metadata(path) {
        Ok(m) if !m.is_dir() => Check::fail(
            "home",
            format!("{} is not a directory", path.display()),
            "move it away and restart dshd, which creates its home",
        ),
        Ok(m) if m.uid() != me => Check::fail(
            "home",
            format!(
                "{} belongs to uid {}, not to you (uid {me})",
                path.display(),
                m.uid()
            ),
            format!("chown -R {me} {}", path.display()),
        ),
        Ok(m) if m.mode() & 0o022 != 0 => Check::fail(
            "home",
            format!(
                "{} is writable by group or others (mode {:o})",
                path.display(),
                m.mode() & 0o7777
            ),
            format!("chmod go-w {}", path.display()),
        ),
        Ok(_) => Check::ok("home", path.display().to_string()),
        Err(e) => Check::fail(
            "home",
            format!("cannot read {}: {e}", path.display()),
            "restart dshd, which creates its home, or fix the permissions above it",
        ),
    }
}

async fn persistence(client: &Client) -> Vec<Check> {
    let listed = match client
        .persistence()
        // The first page says whether the store can be read; counting all would read it all.
        .list_sessions(v1::ListSessionsRequest::default())
        .await
    {
        Ok(listed) => listed.into_inner(),
        Err(e) => {
            return vec![Check::fail(
                "persistence",
                format!("the active backend cannot be read: {}", e.message()),
                "fix what the message names (start the database server, if it names one), or switch: dshctl persistence use jsonl|sqlite|postgres",
            )];
        }
    };
    let backend = listed.backend.clone().unwrap_or_default();
    let stored = listed.sessions.iter().filter(|s| !s.live).count();
    let more = if listed.next_page_token.is_empty() {
        ""
    } else {
        " (first page; more)"
    };
    let mut checks = vec![Check::ok(
        "persistence",
        format!(
            "{} {}: {stored} stored session{}{more}",
            backend.name,
            backend.path,
            if stored == 1 { "" } else { "s" }
        ),
    )];
    for other in listed.others.iter().filter(|o| !o.error.is_empty()) {
        let b = other.backend.clone().unwrap_or_default();
        checks.push(Check::warn(
            "persistence",
            format!(
                "{} {} (not active) cannot be read: {}",
                b.name, b.path, other.error
            ),
            "fix it if you mean to switch to it; the active backend is unaffected",
        ));
    }
    checks
}

fn model_key(s: &v1::StatusResponse) -> Check {
    let set_key = format!(
        "set {} (or the variable [model] api_key_env names, or model.api_key_file) for dshd, e.g. systemctl --user edit dshd, then restart it",
        if s.model_key_env.is_empty() {
            "DEEPSEEK_API_KEY"
        } else {
            &s.model_key_env
        }
    );
    if s.model_key_configured {
        Check::ok("model key", "configured: --model openai can be used")
    } else if s.default_provider == "scripted" && !s.default_script {
        // An agent created without --model/--script (an editor's `dshctl acp` as most set-ups
        // have it) runs the scripted model with an empty script: its first prompt fails.
        Check::fail(
            "model key",
            "not set, and no model.script: an agent created without --script has no model to answer with (its first prompt fails: the script is exhausted)",
            format!(
                "{set_key}, and start agents with --model openai (or set model.provider = \"openai\"); to try dsh without a key, use the keyless demo: dshctl acp --demo, dshctl agent new --demo"
            ),
        )
    } else if s.default_provider == "openai" {
        // Not a limitation but a failure: every agent created without --model/--script asks for
        // the openai provider, and dshd refuses it without a key.
        Check::fail(
            "model key",
            "not set, and the configured provider (model.provider) is openai: every `dshctl agent new` without --script fails",
            format!("{set_key}; or set model.provider = \"scripted\" in the config"),
        )
    } else {
        Check::warn(
            "model key",
            "not set in dshd's environment: only the keyless scripted model works",
            set_key,
        )
    }
}

/// A warning, not a failure: without the installed launcher every command still runs, confined
/// as asked, only about a millisecond later.
fn launcher(s: &v1::StatusResponse) -> Check {
    if s.launcher.is_empty() {
        Check::warn(
            "launcher",
            "commands start through dshd's own binary, about a millisecond slower each",
            "install dsh-launch beside dshd (cargo install --locked --path daemon/launch) and restart dshd; if one is there, dshd's log says why it was not used",
        )
    } else {
        Check::ok("launcher", format!("commands start through {}", s.launcher))
    }
}

fn config(s: &v1::StatusResponse) -> Check {
    if s.config_file.is_empty() {
        let candidate = Path::new(&s.dsh_home).join("config.toml");
        if candidate.exists() {
            // Written since dshd started: the next start reads it, and refuses it if it is bad.
            return Check::fail(
                "config",
                format!(
                    "{} appeared after dshd started: the running daemon uses the defaults, and the file is not checked",
                    candidate.display()
                ),
                format!(
                    "check it with dshd --check-config {}, then restart dshd: systemctl --user restart dshd",
                    candidate.display()
                ),
            );
        }
        return Check::ok(
            "config",
            format!(
                "no config file: every key at its default ({} would be read)",
                candidate.display()
            ),
        );
    }
    let path = Path::new(&s.config_file);
    let restart = format!(
        "check it with dshd --check-config {}, then restart dshd to apply it: systemctl --user restart dshd",
        path.display()
    );
    match std::fs::metadata(path).and_then(|m| m.modified()) {
        Ok(modified) => {
            let modified_ms = modified
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
            if modified_ms > s.started_at_ms {
                Check::fail(
                    "config",
                    format!(
                        "{} changed after dshd started: the running daemon uses the older version, and the new one is not checked",
                        path.display()
                    ),
                    restart,
                )
            } else {
                Check::ok(
                    "config",
                    format!("{}: valid (dshd read it at start)", path.display()),
                )
            }
        }
        Err(e) => Check::fail(
            "config",
            format!(
                "{} (read by dshd at start) cannot be read now: {e}",
                path.display()
            ),
            format!("restore it, or {restart}"),
        ),
    }
}

async fn hooks(client: &Client) -> Vec<Check> {
    let files = match client.hooks().list(v1::ListHooksRequest {}).await {
        Ok(files) => files.into_inner().files,
        Err(e) => {
            return vec![Check::fail(
                "hooks",
                format!("dshd did not list its hooks: {}", e.message()),
                "restart dshd",
            )];
        }
    };
    let broken: Vec<Check> = files
        .iter()
        .filter(|f| f.status != "loaded")
        .map(|f| {
            let fix = if f.status == "missing" {
                "create the file, or remove it from [hooks] in the config; then dshctl hooks reload"
            } else {
                "fix the file, then dshctl hooks reload (dshctl hooks list shows the details)"
            };
            let error = if f.error.is_empty() {
                String::new()
            } else {
                format!(": {}", f.error)
            };
            Check::fail(
                "hooks",
                format!("{} {} is {}{error}", f.dialect, f.path, f.status),
                fix,
            )
        })
        .collect();
    if !broken.is_empty() {
        return broken;
    }
    let handlers: usize = files.iter().map(|f| f.handlers.len()).sum();
    vec![Check::ok(
        "hooks",
        match files.len() {
            0 => "none configured".to_owned(),
            n => format!(
                "{n} file{} loaded, {handlers} handler{}",
                if n == 1 { "" } else { "s" },
                if handlers == 1 { "" } else { "s" }
            ),
        },
    )]
}

/// The configured MCP servers start: a throwaway scripted agent in the harness home takes one
/// turn (which starts them, as any agent's first turn does), says where each stands, and is
/// closed and its session deleted. Nothing is made when none is configured, or when the store
/// cannot be reached (the throwaway session could not be deleted then).
async fn mcp(client: &Client, status: &v1::StatusResponse) -> Vec<Check> {
    if status.mcp_servers.is_empty() {
        return vec![Check::ok("mcp", "none configured")];
    }
    if !status.persistence_unavailable.is_empty() {
        return vec![Check::warn(
            "mcp",
            format!(
                "not checked while the store is unavailable: {}",
                status.mcp_servers.join(", ")
            ),
            "check again once the persistence check passes",
        )];
    }
    let home = Path::new(&status.dsh_home);
    // The probe itself failing (a read-only home, say) says nothing about the servers.
    let failed = |what: &str, e: tonic::Status| {
        vec![Check::warn(
            "mcp",
            format!("could not try the MCP servers: {what}: {}", e.message()),
            "start an agent and look at dshctl mcp list",
        )]
    };
    let mut agents = client.agents();
    let created = agents
        .create(v1::CreateAgentRequest {
            cwd: home.display().to_string(),
            model: Some(v1::ModelSpec {
                provider: "scripted".into(),
                script_json: r#"{"replies": [{"text": "dshctl doctor"}]}"#.into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await;
    let agent_id = match created {
        Ok(info) => info.into_inner().agent_id,
        Err(e) => return failed("Agents.Create", e),
    };
    let turn = async {
        let mut stream = agents
            .prompt(v1::PromptRequest {
                agent_id: agent_id.clone(),
                text: "dshctl doctor".into(),
            })
            .await?
            .into_inner();
        while stream.message().await?.is_some() {}
        let info = agents
            .get(v1::GetAgentRequest {
                agent_id: agent_id.clone(),
            })
            .await?;
        Ok::<_, tonic::Status>(info.into_inner().mcp_servers)
    };
    let servers = turn.await;
    forget(client, &agent_id).await;
    let servers = match servers {
        Ok(servers) => servers,
        Err(e) => return failed("a turn", e),
    };
    servers
        .iter()
        .map(|s| match v1::McpServerState::try_from(s.state) {
            Ok(v1::McpServerState::Running) => Check::ok(
                "mcp",
                format!("{}: started, {} tools", s.name, s.tools.len()),
            ),
            // The error names the server: "NAME did not start: why".
            _ => Check::fail(
                "mcp",
                s.last_error
                    .clone()
                    .unwrap_or_else(|| format!("{} did not start", s.name)),
                "fix [mcp_servers.NAME] in the config (try its command by hand), then restart dshd",
            ),
        })
        .collect()
}

/// Closes the throwaway agent and deletes its session: the check leaves nothing behind.
async fn forget(client: &Client, agent_id: &str) {
    let _ = client
        .agents()
        .close(v1::CloseAgentRequest {
            agent_id: agent_id.to_owned(),
        })
        .await;
    let _ = client
        .persistence()
        .delete(v1::DeleteSessionRequest {
            session_id: agent_id.to_owned(),
        })
        .await;
}
