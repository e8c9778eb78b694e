//! The systemd units in `deploy/`: systemd accepts every line of them, and the tour works under the
//! hardening they apply. A real user manager does not run in CI's container, so the options
//! dshd's children feel directly (no new privileges, a private umask) are applied here by hand.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use dsh_tests::shell::{bash_call, new_agent, prompt, prompt_results};
use dsh_tests::{TestDaemon, daemon_command, dshd_bin, private_dir};
use serde_json::json;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `systemd-analyze verify` exits 0 even for unknown keys and bad values; its warnings on stderr
/// are what tell. The units name `%h/.cargo/bin/dshd`; point them at the binary under test.
#[test]
fn the_service_units_pass_systemd_analyze_verify() {
    let analyze = dsh_tests::on_path("systemd-analyze", "apt-get install systemd");
    let dir = private_dir();
    let deploy = deploy_dir();
    let units = [
        ("dshd.service", deploy.join("dshd.service")),
        ("dshd.socket", deploy.join("socket-activation/dshd.socket")),
        (
            "dshd-activated.service",
            deploy.join("socket-activation/dshd.service"),
        ),
    ];
    for (name, source) in &units {
        let text = std::fs::read_to_string(source).unwrap();
        assert!(
            !name.ends_with(".service") || text.contains("NoNewPrivileges=yes"),
            "{name} lost its hardening"
        );
        let text = text
            .replace("%h/.cargo/bin/dshd", dshd_bin().to_str().unwrap())
            .replace("Requires=dshd.socket", "")
            .replace("Also=dshd.socket", "");
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    for (name, _) in &units {
        let out = Command::new(&analyze)
            .arg("verify")
            .arg(dir.path().join(name))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && stderr.trim().is_empty(),
            "systemd-analyze verify {name}: {:?}\n{stderr}",
            out.status
        );
    }
}

#[test]
fn the_tour_works_with_no_new_privileges_and_a_private_umask() {
    let setpriv = dsh_tests::on_path("setpriv", "apt-get install util-linux");
    let dir = private_dir();
    let plain = daemon_command(&dir);
    let home = dir.path().join("home");
    let socket = dir.path().join("run/dshd.sock");
    let log = dir.path().join("dshd.log");
    // What `NoNewPrivileges=yes` and `UMask=0077` do to the service, around the same command line.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("umask 077; exec \"$@\"")
        .arg("sh")
        .arg(&setpriv)
        .arg("--no-new-privs")
        .arg(plain.get_program())
        .arg("--dsh-home")
        .arg(&home)
        .arg("--socket")
        .arg(&socket)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (key, value) in plain.get_envs() {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let daemon = TestDaemon {
        child: cmd.spawn().unwrap(),
        dir,
        home,
        socket,
        log,
        user: None,
    };
    daemon.wait_ready();

    let cwd = daemon.dir.path().join("proj");
    std::fs::create_dir(&cwd).unwrap();
    let command = "grep NoNewPrivs /proc/self/status; echo $DSH_SHELL; touch made; echo ok";
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(command)]}, {"text": "done"}]}),
    );
    let results = prompt_results(&prompt(&daemon, &agent, "go"));
    let text = &results[0].content;
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("\n1\n") && text.ends_with("ok\n"), "{text}");
    let mode = std::fs::metadata(cwd.join("made"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "the unit's umask reaches the agent's files"
    );
    // And the transcript the tour points at is there and private.
    let located = daemon.dshctl(&["session", "locate", &agent]);
    let path = String::from_utf8_lossy(&located.stdout);
    let path = path.split_whitespace().nth(1).unwrap();
    let mode = std::fs::metadata(path).unwrap().permissions().mode();
    assert_eq!(mode & 0o077, 0, "{path}");
}
