//! The daemon foundation end to end: status, the socket's locks and doors, shutdown, home
//! precedence, config errors, health, reflection, systemd readiness and socket activation.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

#[path = "daemon/deploy.rs"]
mod deploy;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixDatagram, UnixListener};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::{Duration, Instant};

use dsh_proto::v1;
use dsh_tests::{
    DaemonSpec, TestDaemon, daemon_command, dshctl_at, dshctl_bin, eventually, needs_root,
    private_dir, wait_child,
};
use rustix::process::Signal;

#[tokio::test]
async fn status_reports_normalised_home_pid_and_socket() {
    let dir = private_dir();
    let messy_home = format!("{}/a/../home/./", dir.path().display());
    let daemon = TestDaemon::start_with(DaemonSpec {
        args: vec!["--dsh-home".into(), messy_home.into()],
        no_home_flag: true,
        ..DaemonSpec::default()
    });
    let status = daemon
        .client()
        .await
        .daemon()
        .status(v1::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.pid, daemon.child.id());
    assert_eq!(status.dsh_home, format!("{}/home", dir.path().display()));
    assert_eq!(status.socket, daemon.socket.display().to_string());
    assert_eq!(status.protocol_version, dsh_proto::PROTOCOL_VERSION);
    assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(status.persistence, "jsonl");
    assert_eq!(status.agents, 0);
    assert!(status.started_at_ms > 0);

    let json = daemon.dshctl_json(&["status"]);
    for key in [
        "version",
        "protocol_version",
        "pid",
        "dsh_home",
        "socket",
        "persistence",
        "agents",
    ] {
        assert!(json.get(key).is_some(), "status JSON lacks {key}: {json}");
    }
    assert_eq!(json["pid"], daemon.child.id());
    assert_eq!(json["dsh_home"], status.dsh_home);
}

#[test]
fn socket_is_0600_in_a_0700_directory() {
    let daemon = TestDaemon::start();
    let sock = std::fs::metadata(&daemon.socket)
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(sock & 0o777, 0o600);
    let dir = std::fs::metadata(daemon.socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(dir & 0o777, 0o700);
}

#[test]
#[ignore = "needs root"]
fn a_client_running_as_another_uid_cannot_talk_to_the_daemon() {
    needs_root("run a client as another uid");
    let daemon = TestDaemon::start();
    let nobody = 65534;
    let as_nobody = |socket: &std::path::Path| {
        Command::new(dshctl_bin())
            .arg("--socket")
            .arg(socket)
            .arg("status")
            .uid(nobody)
            .gid(nobody)
            .output()
            .unwrap()
    };
    // The file modes alone keep another user out.
    let out = as_nobody(&daemon.socket);
    assert!(!out.status.success(), "another uid reached the daemon");

    // Defence in depth: even with the modes opened up, the peer-credential check drops the
    // connection, logs it, and the daemon keeps serving its own user. The binary must be reachable
    // by that user too.
    let bin_dir = dshctl_bin().parent().unwrap().to_path_buf();
    assert!(bin_dir.exists());
    std::fs::set_permissions(daemon.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(
        daemon.socket.parent().unwrap(),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    std::fs::set_permissions(&daemon.socket, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = as_nobody(&daemon.socket);
    assert!(
        !out.status.success(),
        "peer check let another uid through: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        eventually(Duration::from_secs(5), || daemon
            .log_text()
            .contains("dropped a connection from another user")),
        "no log line for the dropped connection:\n{}",
        daemon.log_text()
    );
    assert!(daemon.log_text().contains(&format!("peer_uid={nobody}")));
    assert!(
        daemon.dshctl(&["status"]).status.success(),
        "daemon stopped serving its user"
    );
}

/// Starts a second dshd on `home` and `socket`, expects it to exit non-zero within 5 s, and
/// returns its stderr.
fn refused_second(
    dir: &tempfile::TempDir,
    home: &std::path::Path,
    socket: &std::path::Path,
) -> String {
    let mut second = daemon_command(dir)
        .arg("--dsh-home")
        .arg(home)
        .arg("--socket")
        .arg(socket)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_child(&mut second, Duration::from_secs(5))
        .expect("second dshd still running after 5 s");
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(second.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    stderr
}

#[test]
fn a_second_daemon_on_the_same_socket_exits_and_the_first_keeps_serving() {
    let first = TestDaemon::start();
    let dir = private_dir();
    let stderr = refused_second(&dir, &dir.path().join("home"), &first.socket);
    let want = format!(
        "dshd is already running on {} (pid {})",
        first.socket.display(),
        first.child.id()
    );
    assert!(stderr.contains(&want), "stderr was: {stderr}");
    assert!(first.dshctl(&["status"]).status.success());
    assert!(first.socket.exists());
}

/// Two logins with different runtime directories start two daemons on one home: the second is
/// refused before it takes any socket, naming the first one's pid and socket.
#[test]
fn a_second_daemon_on_the_same_home_is_refused_whatever_its_socket() {
    let first = TestDaemon::start();
    let dir = private_dir();
    let other_socket = dir.path().join("run/other.sock");
    let stderr = refused_second(&dir, &first.home, &other_socket);
    let want = format!(
        "another dshd is running on home {} (pid {}, socket {})",
        first.home.display(),
        first.child.id(),
        first.socket.display()
    );
    assert!(stderr.contains(&want), "stderr was: {stderr}");
    assert!(
        !other_socket.exists(),
        "the refused daemon bound its socket"
    );
    assert!(first.dshctl(&["status"]).status.success());
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let dir = private_dir();
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    // A listener that dies leaves its socket file behind, as a crashed daemon would.
    drop(UnixListener::bind(run.join("dshd.sock")).unwrap());
    assert!(run.join("dshd.sock").exists());
    let daemon = TestDaemon::spawn(DaemonSpec::default(), dir);
    daemon.wait_ready();
    assert!(daemon.log_text().contains("replacing stale socket file"));
}

#[test]
fn sigterm_and_sigint_exit_zero_and_remove_the_socket() {
    for signal in [Signal::TERM, Signal::INT] {
        let mut daemon = TestDaemon::start();
        let started = Instant::now();
        let status = daemon.signal_and_wait(signal, Duration::from_secs(5));
        assert!(
            status.success(),
            "{signal:?}: exit {status:?}\n{}",
            daemon.log_text()
        );
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(!daemon.socket.exists(), "{signal:?}: socket left behind");
    }
}

#[test]
fn dshctl_shutdown_stops_the_daemon() {
    let mut daemon = TestDaemon::start();
    let out = daemon.dshctl(&["shutdown"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = daemon.wait_exit(Duration::from_secs(5));
    assert!(status.success());
    assert!(!daemon.socket.exists());
    assert!(daemon.log_text().contains("shutdown requested over gRPC"));
}

#[test]
fn dshctl_without_a_daemon_says_how_to_start_one() {
    let dir = private_dir();
    let socket = dir.path().join("nothing.sock");
    let out = dshctl_at(&socket, &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let want = format!(
        "no dshd is listening on {} (--socket); start it with 'dshd' or 'systemctl --user start dshd'",
        socket.display()
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains(&want));
    let out = dshctl_at(&socket, &["--json", "status"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "not_listening");
}

/// Starts a daemon with `env` and no `--dsh-home`, returning the home `dshctl --json status` reports.
fn home_reported(
    dir: tempfile::TempDir,
    args: Vec<std::ffi::OsString>,
    env: Vec<(&str, String)>,
) -> String {
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            args,
            env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
            no_home_flag: true,
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    daemon.dshctl_json(&["status"])["dsh_home"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn home_precedence_flag_env_blank_env_default() {
    let dir = private_dir();
    let root = dir.path().display().to_string();
    assert_eq!(
        home_reported(
            dir,
            vec!["--dsh-home".into(), format!("{root}/flag").into()],
            vec![("DSH_HOME", format!("{root}/env"))]
        ),
        format!("{root}/flag")
    );

    let dir = private_dir();
    let root = dir.path().display().to_string();
    assert_eq!(
        home_reported(dir, vec![], vec![("DSH_HOME", format!("{root}/env/"))]),
        format!("{root}/env")
    );

    // Blank DSH_HOME counts as unset: the default under HOME applies.
    let dir = private_dir();
    let root = dir.path().display().to_string();
    assert_eq!(
        home_reported(dir, vec![], vec![("DSH_HOME", "   ".into())]),
        format!("{root}/user/.dsh")
    );

    let dir = private_dir();
    let root = dir.path().display().to_string();
    assert_eq!(
        home_reported(dir, vec![], vec![]),
        format!("{root}/user/.dsh")
    );
}

fn failing_start(args: &[&str], files: &[(&str, &str)]) -> String {
    let dir = private_dir();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let mut cmd = daemon_command(&dir);
    if !args.contains(&"--socket") {
        cmd.arg("--socket").arg(dir.path().join("s.sock"));
    }
    let mut child = cmd
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = wait_child(&mut child, Duration::from_secs(5)).expect("dshd did not exit");
    assert!(!status.success(), "dshd started with {args:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!dir.path().join("s.sock").exists());
    stderr
}

#[test]
fn explicit_empty_home_and_two_homes_are_refused() {
    let err = failing_start(&["--dsh-home", ""], &[]);
    assert!(err.contains("--dsh-home is empty"), "{err}");

    let err = failing_start(
        &["--config", "c.toml"],
        &[(
            "c.toml",
            "dsh_home = \"/tmp/a\"\n[skills.local]\ndsh_home = \"/tmp/b\"\n",
        )],
    );
    assert!(err.contains("two harness homes"), "{err}");
    assert!(
        err.contains("resolves to /tmp/a") && err.contains("resolves to /tmp/b"),
        "{err}"
    );
}

#[test]
fn config_errors_name_file_line_and_key() {
    let err = failing_start(
        &["--config", "c.toml"],
        &[(
            "c.toml",
            "log_format = \"text\"\nshutdown_timeout_ms = 10\nsocekt = \"/x\"\n",
        )],
    );
    assert!(err.contains("c.toml:3: key `socekt`"), "{err}");

    let err = failing_start(
        &["--config", "c.toml"],
        &[("c.toml", "\n\nshutdown_timeout_ms = \"soon\"\n")],
    );
    assert!(err.contains("c.toml:3: key `shutdown_timeout_ms`"), "{err}");
}

#[test]
fn overlong_socket_path_names_the_limit() {
    let long = format!("/tmp/{}/dshd.sock", "d".repeat(110));
    let err = failing_start(&["--socket", &long], &[]);
    assert!(err.contains("107-byte limit"), "{err}");
}

#[tokio::test]
async fn health_is_serving_and_reflection_lists_the_services() {
    use tokio_stream::StreamExt;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::{HealthCheckRequest, health_check_response::ServingStatus};

    let daemon = TestDaemon::start();
    let channel = daemon.client().await.channel();
    let mut health = HealthClient::new(channel.clone());
    for service in ["", "dsh.v1.Daemon", "dsh.v1.Agents", "dsh.v1.Persistence"] {
        let status = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status;
        assert_eq!(status, ServingStatus::Serving as i32, "service {service:?}");
    }

    // v1
    {
        use tonic_reflection::pb::v1::ServerReflectionRequest;
        use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
        let mut client = ServerReflectionClient::new(channel.clone());
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.next().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("unexpected reflection answer");
        };
        let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
        for want in dsh_daemon::rpc::SERVICE_NAMES {
            assert!(
                names.iter().any(|n| n == want),
                "v1 reflection lacks {want}: {names:?}"
            );
        }
    }
    // v1alpha
    {
        use tonic_reflection::pb::v1alpha::ServerReflectionRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient;
        use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest;
        use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse;
        let mut client = ServerReflectionClient::new(channel);
        let request = ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        };
        let mut stream = client
            .server_reflection_info(tokio_stream::iter([request]))
            .await
            .unwrap()
            .into_inner();
        let response = stream.next().await.unwrap().unwrap();
        let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
            panic!("unexpected reflection answer");
        };
        let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
        assert!(
            names.iter().any(|n| n == "dsh.v1.Daemon"),
            "v1alpha: {names:?}"
        );
    }
}

#[test]
fn systemd_readiness_status_and_stopping_are_notified() {
    let dir = private_dir();
    let notify = dir.path().join("notify.sock");
    let listener = UnixDatagram::bind(&notify).unwrap();
    listener
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut daemon = TestDaemon::spawn(
        DaemonSpec {
            env: vec![("NOTIFY_SOCKET".into(), notify.clone().into())],
            ..DaemonSpec::default()
        },
        dir,
    );
    let mut buf = [0u8; 512];
    let mut next = |what: &str| {
        let n = listener
            .recv(&mut buf)
            .unwrap_or_else(|e| panic!("no {what} from dshd: {e}"));
        String::from_utf8_lossy(&buf[..n]).into_owned()
    };
    assert!(next("READY=1").contains("READY=1"));
    // Ready means serving: the very next call answers.
    assert!(daemon.dshctl(&["status"]).status.success());
    // The status line `systemctl status` shows follows the live agents.
    let first = next("STATUS=");
    assert!(
        first.contains("STATUS=serving ") && first.contains("0 agents, 0 running turns"),
        "{first}"
    );
    let created = daemon.dshctl(&["--json", "agent", "new", "--cwd", "/"]);
    assert!(created.status.success(), "{created:?}");
    let second = next("STATUS= after create");
    assert!(second.contains("1 agent, 0 running turns"), "{second}");
    daemon.signal_and_wait(Signal::TERM, Duration::from_secs(5));
    let mut stopping = next("STOPPING=1");
    while stopping.starts_with("STATUS=") {
        stopping = next("STOPPING=1");
    }
    assert!(stopping.contains("STOPPING=1"), "{stopping}");
}

#[test]
fn socket_activation_uses_the_passed_listener_and_leaves_its_path() {
    // Plays systemd: bind the socket, pass it as fd 3 with LISTEN_FDS/LISTEN_PID, exec dshd.
    let dir = private_dir();
    let socket = dir.path().join("activated.sock");
    let script = r#"
import os, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(sys.argv[1]); s.listen(16)
os.dup2(s.fileno(), 3); os.set_inheritable(3, True)
os.environ["LISTEN_FDS"] = "1"; os.environ["LISTEN_PID"] = str(os.getpid())
os.execv(sys.argv[2], [sys.argv[2], "--dsh-home", sys.argv[3], "--socket", "/nonexistent/unused.sock"])
"#;
    let python = dsh_tests::on_path("python3", "apt-get install python3");
    let log = std::fs::File::create(dir.path().join("log")).unwrap();
    let mut cmd = daemon_command(&dir);
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .arg(&socket)
        .arg(cmd.get_program())
        .arg(dir.path().join("home"))
        .envs(cmd.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .env_remove("DSH_HOME")
        .stderr(log)
        .spawn()
        .unwrap();
    let _ = &mut cmd;
    assert!(
        eventually(Duration::from_secs(20), || dshctl_at(&socket, &["status"])
            .status
            .success()),
        "activated dshd never answered: {}",
        std::fs::read_to_string(dir.path().join("log")).unwrap_or_default()
    );
    let out = dshctl_at(&socket, &["--json", "status"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["socket"], socket.display().to_string());
    assert!(dshctl_at(&socket, &["shutdown"]).status.success());
    let status = wait_child(&mut child, Duration::from_secs(5)).expect("dshd did not exit");
    assert!(status.success());
    assert!(
        socket.exists(),
        "the activated socket belongs to systemd and must stay"
    );
}

#[test]
fn json_logs_and_no_ansi_when_not_a_terminal() {
    let mut daemon = TestDaemon::start_with(DaemonSpec {
        args: vec!["--log-format".into(), "json".into()],
        ..DaemonSpec::default()
    });
    daemon.signal_and_wait(Signal::TERM, Duration::from_secs(5));
    let log = daemon.log_text();
    let lines: Vec<_> = log.lines().collect();
    assert!(!lines.is_empty());
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(
            v.get("level").is_some() && v.get("fields").is_some(),
            "{line}"
        );
    }

    let mut text = TestDaemon::start();
    text.signal_and_wait(Signal::TERM, Duration::from_secs(5));
    let log = text.log_text();
    assert!(log.contains("dshd is serving"));
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a non-terminal log"
    );
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(dshctl_bin())
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("dshctl"),
            "{shell}"
        );
    }
    let out = Command::new(dshctl_bin())
        .args(["--json", "completions", "bash"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["shell"], "bash");
    assert!(doc["script"].as_str().unwrap().contains("dshctl"));
}

#[test]
fn a_startup_failure_names_each_cause_once() {
    let dir = private_dir();
    // A directory where the config file should be: reading it fails with an OS error.
    let config = dir.path().join("config.toml");
    std::fs::create_dir(&config).unwrap();
    let mut child = Command::new(dsh_tests::dshd_bin())
        .arg("--dsh-home")
        .arg(dir.path().join("home"))
        .arg("--socket")
        .arg(dir.path().join("dshd.sock"))
        .arg("--config")
        .arg(&config)
        .env_remove("DSH_HOME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = dsh_tests::wait_child(&mut child, Duration::from_secs(30))
        .expect("dshd did not exit on an unreadable config");
    assert!(!status.success());
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let line = stderr
        .lines()
        .find(|l| l.starts_with("dshd: error: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    assert!(line.contains(&config.display().to_string()), "{line}");
    assert_eq!(
        line.matches("os error").count(),
        1,
        "the cause is printed more than once: {line}"
    );
}
