//! `dshctl status` and `dshctl shutdown`.

use std::path::PathBuf;
use std::time::Duration;

use dsh_client::Client;
use dsh_proto::v1;
use serde_json::json;

use crate::output::{Output, human_duration, now_ms};

pub async fn status(client: &Client, out: Output) -> anyhow::Result<()> {
    let s = client
        .daemon()
        .status(v1::StatusRequest {})
        .await?
        .into_inner();
    let now = now_ms();
    let uptime = Duration::from_millis(u64::try_from(now - s.started_at_ms).unwrap_or(0));
    let doc = json!({
        "version": s.version,
        "protocol_version": s.protocol_version,
        "pid": s.pid,
        "dsh_home": s.dsh_home,
        "socket": s.socket,
        "started_at_ms": s.started_at_ms,
        "persistence": s.persistence,
        "persistence_unavailable": (!s.persistence_unavailable.is_empty()).then_some(&s.persistence_unavailable),
        "agents": s.agents,
        "running_turns": s.running_turns,
        "jobs": s.jobs,
        "model_key_configured": s.model_key_configured,
        "model_key_env": s.model_key_env,
        "config_file": (!s.config_file.is_empty()).then_some(&s.config_file),
        "landlock_abi": s.landlock_abi,
        "landlock": s.landlock,
        "launcher": (!s.launcher.is_empty()).then_some(&s.launcher),
        "connections": s.connections,
        "max_connections": s.max_connections,
    });
    out.emit(&doc, |w| {
        writeln!(
            w,
            "dshd {} (protocol {}), pid {}",
            s.version, s.protocol_version, s.pid
        )?;
        writeln!(w, "home         {}", s.dsh_home)?;
        writeln!(w, "socket       {}", s.socket)?;
        writeln!(w, "uptime       {}", human_duration(uptime))?;
        if s.persistence_unavailable.is_empty() {
            writeln!(w, "persistence  {}", s.persistence)?;
        } else {
            writeln!(
                w,
                "persistence  {} (unavailable: {})",
                s.persistence, s.persistence_unavailable
            )?;
        }
        writeln!(
            w,
            "agents       {} ({} running a turn)",
            s.agents, s.running_turns
        )?;
        writeln!(w, "jobs         {} running", s.jobs)?;
        writeln!(
            w,
            "connections  {} of {} (this one included)",
            s.connections, s.max_connections
        )?;
        let config = if s.config_file.is_empty() {
            "none (defaults)"
        } else {
            &s.config_file
        };
        writeln!(w, "config       {config}")?;
        let key = if s.model_key_configured {
            "set"
        } else {
            "not set; only the scripted model works"
        };
        writeln!(w, "model key    {} ({key})", s.model_key_env)?;
        writeln!(w, "landlock     {}", s.landlock)?;
        if s.launcher.is_empty() {
            writeln!(
                w,
                "launcher     dshd's own binary (install dsh-launch beside dshd to start commands sooner)"
            )
        } else {
            writeln!(w, "launcher     {}", s.launcher)
        }
    })
}

pub async fn shutdown(client: &Client, out: Output) -> anyhow::Result<()> {
    let pid = client
        .daemon()
        .status(v1::StatusRequest {})
        .await?
        .into_inner()
        .pid;
    client.daemon().shutdown(v1::ShutdownRequest {}).await?;
    // Wait for the process itself to go (socket activation keeps the path, so it is no signal).
    let exited = wait_for_exit(pid, Duration::from_secs(30)).await;
    anyhow::ensure!(
        exited,
        "dshd (pid {pid}) accepted shutdown but is still running after 30 s"
    );
    let doc = json!({ "stopped": true, "pid": pid, "socket": PathBuf::from(client.socket()) });
    out.emit(&doc, |w| writeln!(w, "dshd (pid {pid}) has shut down"))
}

/// `shutdown` with no daemon listening: nothing to do, said on stderr (the places looked at, as
/// an error would name them, in case the daemon meant is elsewhere); `--json`: `stopped: false`.
pub fn not_running(out: Output, socket: &std::path::Path, looked: &str) -> anyhow::Result<()> {
    let doc = json!({ "stopped": false, "running": false, "socket": socket });
    crate::safe::eprintln(format_args!(
        "dshctl: no dshd is listening on {}{looked}; nothing to shut down",
        socket.display()
    ));
    out.emit(&doc, |_| Ok(()))
}

async fn wait_for_exit(pid: u32, limit: Duration) -> bool {
    let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return true;
    };
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if rustix::process::test_kill_process(pid).is_err() || is_zombie(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A process that has exited but not been reaped by its parent yet still answers `kill(pid, 0)`.
fn is_zombie(pid: rustix::process::Pid) -> bool {
    std::fs::read_to_string(format!("/proc/{}/stat", pid.as_raw_nonzero()))
        .ok()
        .and_then(|stat| {
            let after_name = stat.rsplit_once(')')?.1;
            after_name
                .split_whitespace()
                .next()
                .map(|state| state == "Z")
        })
        .unwrap_or(false)
}
