//! Secrets a confined command cannot read, though they are the same user's files (Landlock, not
//! file modes, keeps it out): the model key file, dshd's config file and state directory, the
//! PostgreSQL URL file, systemd's user configuration (where a drop-in may set the key) and the
//! unit's credentials. Everything else stays readable, listings of those directories included.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// Writes `text` to `path` (parents made), mode 0600.
fn secret(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

#[test]
fn confined_commands_cannot_read_dshds_secrets_and_read_everything_else() {
    let dir = dsh_tests::private_dir();
    let base = dir.path().to_owned();
    let user = base.join("user");
    let key = base.join("keys/model-key");
    let pg = base.join("keys/pg-url");
    let creds = base.join("creds");
    let dropin = user.join(".config/systemd/user/dshd.service.d/key.conf");
    secret(&key, "sk-secret-file\n");
    secret(&pg, "postgresql://dsh:sk-secret-pg@db/dsh\n");
    secret(&creds.join("dsh-model-api-key"), "sk-secret-credential\n");
    secret(
        &dropin,
        "[Service]\nEnvironment=DEEPSEEK_API_KEY=sk-secret-dropin\n",
    );
    let notes = user.join("notes.txt");
    secret(&notes, "readable notes\n");
    let daemon = TestDaemon::spawn(
        DaemonSpec {
            config: Some(format!(
                "# sk-secret-config\n[model]\napi_key_file = {:?}\n[postgres]\nurl_file = {:?}\n",
                key.to_str().unwrap(),
                pg.to_str().unwrap()
            )),
            env: vec![("CREDENTIALS_DIRECTORY".into(), creds.clone().into())],
            ..DaemonSpec::default()
        },
        dir,
    );
    daemon.wait_ready();
    // The backend choice under the home's state directory.
    daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    let state = daemon.home.join("state/persistence.json");
    assert!(state.exists());
    let config = base.join("config.toml");
    let secrets = [
        &key,
        &pg,
        &creds.join("dsh-model-api-key"),
        &dropin,
        &config,
        &state,
    ];

    let reads: Vec<String> = secrets
        .iter()
        .map(|path| format!("cat '{}' 2>&1; echo rc=$?", path.display()))
        .collect();
    let controls = format!(
        "cat '{}' && head -c 4 /etc/passwd && echo && ls '{}' '{}' && \
         cd \"${{TMPDIR:-.}}\" && mkdir -p a b && echo moved > a/f && mv a/f b/f && cat b/f",
        notes.display(),
        daemon.home.join("state").display(),
        dropin.parent().unwrap().display()
    );
    let mut commands: Vec<&str> = reads.iter().map(String::as_str).collect();
    commands.push(&controls);
    let policies: [&[&str]; 4] = [
        &["--sandbox", "read-only"],
        &["--sandbox", "workspace-write"],
        &["--sandbox", "off", "--network", "off"],
        &["--sandbox", "off", "--network", "on"],
    ];
    for (n, flags) in policies.iter().enumerate() {
        let id = agent(&daemon, &daemon.workdir(&format!("w{n}")), flags, &commands);
        let got = results(&daemon, &id);
        let unconfined = n == 3;
        for (path, read) in secrets.iter().zip(&got) {
            if unconfined {
                // The control: the same user reads them all, so a confined command would too
                // were it not kept out.
                assert!(
                    read.content.ends_with("rc=0\n"),
                    "{flags:?} {}: {read:?}",
                    path.display()
                );
            } else {
                assert!(
                    !read.content.contains("sk-secret")
                        && read.content.contains("Permission denied"),
                    "{flags:?} read {}: {read:?}",
                    path.display()
                );
            }
        }
        let control = &got[secrets.len()];
        assert!(
            control.content.contains("readable notes")
                && control.content.contains("root")
                && control.content.contains("persistence.json")
                && control.content.contains("key.conf")
                && control.content.ends_with("moved\n"),
            "{flags:?}: {control:?}"
        );
    }
}

/// `persistence use postgres --url` saves the choice in the home, so a URL with a password is
/// refused (the home keeps no secret), saying where the password goes instead.
#[test]
fn a_postgres_url_with_a_password_is_not_saved_in_the_home() {
    let daemon = TestDaemon::start();
    let out = daemon.dshctl(&[
        "--json",
        "persistence",
        "use",
        "postgres",
        "--url",
        "postgresql://dsh:hunter2@127.0.0.1:1/dsh",
    ]);
    assert!(!out.status.success());
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "invalid_argument", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("password") && message.contains("postgres.url_file"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
    assert!(!daemon.home.join("state/persistence.json").exists());
}
