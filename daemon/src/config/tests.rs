//! Unit tests of config loading.
use super::file::parse;
use super::*;

fn ambient(dsh_home: Option<&str>) -> Ambient {
    Ambient {
        dsh_home: dsh_home.map(OsString::from),
        user_home: Some(PathBuf::from("/home/ada")),
        cwd: Some(PathBuf::from("/work")),
        runtime_dir: None,
        config_home: None,
        credentials_dir: None,
    }
}

#[test]
fn unknown_top_level_key_names_line_and_key() {
    let err = parse("log_format = \"json\"\n\nsokcet = \"/x\"\n").unwrap_err();
    assert_eq!(err.line, 3);
    assert_eq!(err.key, "sokcet");
    assert!(
        err.message.contains("unknown field `sokcet`"),
        "{}",
        err.message
    );
}

#[test]
fn unknown_nested_key_names_the_dotted_path() {
    let err = parse("[skills.local]\ndsh_home = \"/a\"\nroot = 1\n").unwrap_err();
    assert_eq!(err.line, 3);
    assert_eq!(err.key, "skills.local.root");
}

#[test]
fn wrong_type_names_line_and_key() {
    let err = parse("\nshutdown_timeout_ms = \"soon\"\n").unwrap_err();
    assert_eq!(err.line, 2);
    assert_eq!(err.key, "shutdown_timeout_ms");
    let err = parse("log_format = \"xml\"\n").unwrap_err();
    assert_eq!(err.key, "log_format");
    assert!(err.message.contains("xml"), "{}", err.message);
}

#[test]
fn hooks_sandbox_is_auto_or_always_and_anything_else_names_its_line() {
    assert_eq!(
        parse("").unwrap().hooks.sandbox,
        dsh_core::HookSettings::default().sandbox
    );
    let always = parse("[hooks]\nsandbox = \"always\"\n").unwrap();
    assert_ne!(
        always.hooks.sandbox,
        dsh_core::HookSettings::default().sandbox
    );
    let err = parse("[hooks]\nproject_hooks = true\nsandbox = \"never\"\n").unwrap_err();
    assert_eq!((err.line, err.key.as_str()), (3, "hooks.sandbox"));
    assert!(
        err.message.contains("`auto`") && err.message.contains("`always`"),
        "{}",
        err.message
    );
}

#[test]
fn invalid_toml_names_the_line() {
    let err = parse("a = 1\nb = = 2\n").unwrap_err();
    assert_eq!(err.line, 2);
    assert_eq!(err.key, "");
}

#[test]
fn error_display_has_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "bogus = 1\n").unwrap();
    let flags = Flags {
        config: Some(path.clone()),
        ..Flags::default()
    };
    let msg = Config::load(&flags, &ambient(None))
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with(&format!(
            "{}:1: key `bogus`: unknown field `bogus`",
            path.display()
        )),
        "{msg}"
    );
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "dsh_home = \"/file/home\"\nsocket = \"/file/s.sock\"\nlog_format = \"json\"\n",
    )
    .unwrap();
    let from_file = Config::load(
        &Flags {
            config: Some(path.clone()),
            ..Flags::default()
        },
        &ambient(Some("/env")),
    )
    .unwrap();
    assert_eq!(from_file.home.path, PathBuf::from("/file/home"));
    assert_eq!(from_file.socket, PathBuf::from("/file/s.sock"));
    assert_eq!(from_file.log_format, LogFormat::Json);

    let flagged = Config::load(
        &Flags {
            config: Some(path),
            dsh_home: Some("/flag/home".into()),
            socket: Some("/flag/s.sock".into()),
            log_format: Some(LogFormat::Text),
            persistence: Some(BackendName::Sqlite),
        },
        &ambient(Some("/env")),
    )
    .unwrap();
    assert_eq!(flagged.home.path, PathBuf::from("/flag/home"));
    assert_eq!(flagged.socket, PathBuf::from("/flag/s.sock"));
    assert_eq!(flagged.log_format, LogFormat::Text);
    assert_eq!(flagged.persistence, BackendKind::Sqlite);
    assert_eq!(flagged.persistence_source, ValueSource::Flag);
}

#[test]
fn default_file_is_read_from_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("h");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("config.toml"), "shutdown_timeout_ms = 1500\n").unwrap();
    let cfg = Config::load(&Flags::default(), &ambient(Some(home.to_str().unwrap()))).unwrap();
    assert_eq!(cfg.file, Some(home.join("config.toml")));
    assert_eq!(cfg.shutdown_timeout, Duration::from_millis(1500));
}

#[test]
fn default_file_cannot_move_the_home() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("h");
    std::fs::create_dir(&home).unwrap();
    std::fs::write(home.join("config.toml"), "dsh_home = \"/elsewhere\"\n").unwrap();
    let err = Config::load(&Flags::default(), &ambient(Some(home.to_str().unwrap()))).unwrap_err();
    assert!(matches!(err, ConfigError::HomeMismatch { .. }), "{err}");
}

#[test]
fn conflicting_homes_in_the_file_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "dsh_home = \"/a\"\n[skills.local]\ndsh_home = \"/b\"\n",
    )
    .unwrap();
    let err = Config::load(
        &Flags {
            config: Some(path),
            ..Flags::default()
        },
        &ambient(None),
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("resolves to /a") && msg.contains("resolves to /b"),
        "{msg}"
    );
}

#[test]
fn explicit_empty_home_in_the_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "dsh_home = \"\"\n").unwrap();
    let err = Config::load(
        &Flags {
            config: Some(path),
            ..Flags::default()
        },
        &ambient(None),
    )
    .unwrap_err();
    assert!(
        matches!(err, ConfigError::Home(HomeError::Empty { .. })),
        "{err}"
    );
}

#[test]
fn missing_explicit_file_is_an_error() {
    let err = Config::load(
        &Flags {
            config: Some("/nonexistent/dsh.toml".into()),
            ..Flags::default()
        },
        &ambient(None),
    )
    .unwrap_err();
    assert!(err.to_string().contains("/nonexistent/dsh.toml"), "{err}");
}

#[test]
fn sections_have_defaults_under_the_home() {
    let cfg = Config::load(&Flags::default(), &ambient(Some("/h"))).unwrap();
    assert_eq!(cfg.persistence, BackendKind::Jsonl);
    assert_eq!(cfg.persistence_source, ValueSource::Default);
    assert_eq!(cfg.jsonl_root, PathBuf::from("/h/sessions"));
    assert_eq!(cfg.sqlite_path, PathBuf::from("/h/sessions.sqlite3"));
    assert_eq!(cfg.checkpoint, CheckpointPolicy::Step);
    assert_eq!(cfg.default_provider, "scripted");
    assert_eq!(cfg.max_steps_per_turn, DEFAULT_MAX_STEPS_PER_TURN);
    assert_eq!(cfg.exec.spill_dir, PathBuf::from("/h/run/spill"));
    assert_eq!(cfg.default_cwd, PathBuf::from("/work"));
    assert_eq!(cfg.resolve_timeout, DEFAULT_RESOLVE_TIMEOUT);
    assert_eq!(cfg.max_connections, connection::DEFAULT_MAX_CONNECTIONS);
    assert_eq!(
        cfg.connection_idle_timeout,
        connection::DEFAULT_IDLE_TIMEOUT
    );
}

#[test]
fn connection_limits_are_read_and_zero_is_refused_at_its_line() {
    let cfg = parse("max_connections = 64\nconnection_idle_timeout_ms = 1500\n").unwrap();
    assert_eq!(
        cfg.max_connections.map(std::num::NonZeroUsize::get),
        Some(64)
    );
    assert_eq!(
        cfg.connection_idle_timeout_ms
            .map(std::num::NonZeroU64::get),
        Some(1500)
    );
    for (text, line, key) in [
        ("max_connections = 0\n", 1, "max_connections"),
        (
            "log_format = \"text\"\nconnection_idle_timeout_ms = 0\n",
            2,
            "connection_idle_timeout_ms",
        ),
        ("max_connections = -3\n", 1, "max_connections"),
    ] {
        let err = parse(text).unwrap_err();
        assert_eq!(
            (err.line, err.key.as_str()),
            (line, key),
            "{text:?}: {err:?}"
        );
    }
}

#[test]
fn every_section_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("s.json");
    std::fs::write(&script, r#"{"replies": [{"text": "hi"}]}"#).unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        format!(
            "persistence = \"sqlite\"\ncheckpoint = \"turn\"\n[jsonl]\nroot = \"/j\"\n[sqlite]\npath = \"db\"\n\
             [model]\nprovider = \"scripted\"\nscript = \"{}\"\n[agent]\nmax_steps_per_turn = 7\n\
             [shell]\nsecret_pattern = \"HIDDEN\"\ndefault_timeout_ms = 1000\nmax_timeout_ms = 2000\n\
             kill_grace_ms = 50\noutput_cap_bytes = 10\nspill_cap_bytes = 20\nspill_dir = \"/sp\"\ncwd = \"/c\"\n\
             [shell_env]\nresolve_timeout_ms = 300\n",
            script.display()
        ),
    )
    .unwrap();
    let cfg = Config::load(
        &Flags {
            config: Some(path),
            ..Flags::default()
        },
        &ambient(Some("/h")),
    )
    .unwrap();
    assert_eq!(cfg.persistence, BackendKind::Sqlite);
    assert_eq!(cfg.persistence_source, ValueSource::File);
    assert_eq!(cfg.checkpoint, CheckpointPolicy::Turn);
    assert_eq!(cfg.jsonl_root, PathBuf::from("/j"));
    assert_eq!(cfg.sqlite_path, PathBuf::from("/work/db"));
    assert_eq!(cfg.default_script.unwrap().replies.len(), 1);
    assert_eq!(cfg.max_steps_per_turn, 7);
    assert_eq!(cfg.exec.secret_pattern, "HIDDEN");
    assert_eq!(cfg.exec.default_timeout, Duration::from_millis(1000));
    assert_eq!(cfg.exec.max_timeout, Duration::from_millis(2000));
    assert_eq!(cfg.exec.kill_grace, Duration::from_millis(50));
    assert_eq!(cfg.exec.output_cap_bytes, 10);
    assert_eq!(cfg.exec.spill_cap_bytes, 20);
    assert_eq!(cfg.exec.spill_dir, PathBuf::from("/sp"));
    assert_eq!(cfg.default_cwd, PathBuf::from("/c"));
    assert_eq!(cfg.resolve_timeout, Duration::from_millis(300));
}

#[test]
fn bad_values_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[shell]\nsecret_pattern = \"(\"\n", "shell.secret_pattern"),
        (
            "[shell]\ndefault_timeout_ms = 5000\nmax_timeout_ms = 10\n",
            "shell.default_timeout_ms",
        ),
        (
            "[agent]\nmax_steps_per_turn = 0\n",
            "agent.max_steps_per_turn",
        ),
        ("[model]\nprovider = \"gpt\"\n", "model.provider"),
        ("[model]\nscript = \"/nonexistent.json\"\n", "model.script"),
        ("persistence = \"mysql\"\n", "persistence"),
        ("checkpoint = \"never\"\n", "checkpoint"),
        ("[jsonl]\nroot = 5\n", "jsonl.root"),
        // A verifying sslmode needs the CA's certificate; the error names the missing key.
        (
            "[postgres]\nurl = \"postgresql://u@db/x?sslmode=verify-full\"\n",
            "postgres.ca_file",
        ),
        ("[postgres]\nca_file = 5\n", "postgres.ca_file"),
        // The core's lease rule is config's: a lease the backend could not renew in time is
        // refused at start, naming the key it is set by.
        ("[postgres]\nlease_ms = 299\n", "postgres.lease_ms"),
        ("[postgres]\ntimeout_ms = 0\n", "postgres.timeout_ms"),
    ];
    for (text, key) in cases {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let err = Config::load(
            &Flags {
                config: Some(path),
                ..Flags::default()
            },
            &ambient(None),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains(key), "{text:?}: {err}");
    }
}

mod properties {
    use proptest::collection::vec;
    use proptest::prelude::*;

    use super::*;

    /// Every key the file knows, with its section (`""` for the top level), plus one it does not.
    const KEYS: &[(&str, &str)] = &[
        ("", "dsh_home"),
        ("", "socket"),
        ("", "log_format"),
        ("", "shutdown_timeout_ms"),
        ("", "persistence"),
        ("", "checkpoint"),
        ("", "bogus"),
        ("jsonl", "root"),
        ("sqlite", "path"),
        ("model", "provider"),
        ("model", "base_url"),
        ("model", "model"),
        ("model", "models"),
        ("model", "api_key_env"),
        ("model", "request_timeout_ms"),
        ("model", "idle_timeout_ms"),
        ("model", "retries"),
        ("model", "max_backoff_ms"),
        ("agent", "max_steps_per_turn"),
        ("agent", "max_depth"),
        ("agent", "max_live_agents"),
        ("shell", "secret_pattern"),
        ("shell", "default_timeout_ms"),
        ("shell", "max_timeout_ms"),
        ("shell", "kill_grace_ms"),
        ("shell", "output_cap_bytes"),
        ("shell", "spill_cap_bytes"),
        ("shell", "spill_dir"),
        ("shell", "cwd"),
        ("shell_env", "resolve_timeout_ms"),
        ("skills.local", "dsh_home"),
        ("hooks", "claude_code"),
        ("hooks", "codex"),
        ("hooks", "project_hooks"),
        ("hooks", "default_timeout_ms"),
        ("hooks", "stop_continuation_cap"),
        ("hooks", "stderr_summary_chars"),
        ("hooks", "claude_code_transcript"),
        ("hooks", "sandbox"),
        ("instructions", "files"),
        ("instructions", "max_bytes"),
    ];

    /// Values of every TOML type, biased to the edges and to words the keys accept.
    fn value() -> impl Strategy<Value = toml::Value> {
        let words = prop::sample::select(vec![
            "jsonl",
            "sqlite",
            "json",
            "text",
            "step",
            "turn",
            "openai",
            "scripted",
            "/abs/path",
            "rel/path",
            "",
            "http://127.0.0.1:1/v1",
            "not a url",
            "(",
            "session",
            "claude",
            "auto",
            "always",
        ]);
        let scalar = prop_oneof![
            prop::sample::select(vec![0, 1, -1, i64::MAX, i64::MIN, 1 << 32, 1 << 53])
                .prop_map(toml::Value::Integer),
            any::<i64>().prop_map(toml::Value::Integer),
            any::<f64>().prop_map(toml::Value::Float),
            any::<bool>().prop_map(toml::Value::Boolean),
            words.prop_map(|w| toml::Value::String(w.to_owned())),
            "(?s).{0,16}".prop_map(toml::Value::String),
        ];
        prop_oneof![
            4 => scalar.clone(),
            1 => vec(scalar, 0..3).prop_map(toml::Value::Array),
        ]
    }

    /// A config file: some of the keys, each with any value, as valid TOML.
    fn document() -> impl Strategy<Value = String> {
        vec((prop::sample::select(KEYS), value()), 0..8).prop_map(|entries| {
            let mut root = toml::Table::new();
            for ((section, key), value) in entries {
                let mut table = &mut root;
                for name in section.split('.').filter(|s| !s.is_empty()) {
                    let entry = table
                        .entry(name)
                        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                    let toml::Value::Table(inner) = entry else {
                        unreachable!("sections are only ever tables")
                    };
                    table = inner;
                }
                table.insert(key.to_owned(), value);
            }
            toml::to_string(&root).unwrap()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Any text at all parses or fails with a line inside the text, never a panic.
        #[test]
        fn any_text_parses_or_names_a_line(text in "(?s).{0,200}") {
            if let Err(failure) = parse(&text) {
                prop_assert!(failure.line <= text.lines().count() + 1, "{failure:?}");
            }
        }

        /// Any well-formed file of known keys with values of any type loads or is refused with
        /// the key at fault (and the line, when the value is at fault), never a panic.
        #[test]
        fn any_document_loads_or_names_its_key(text in document()) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("config.toml");
            std::fs::write(&path, &text).unwrap();
            let flags = Flags {
                config: Some(path),
                ..Flags::default()
            };
            match Config::load(&flags, &ambient(None)) {
                Ok(config) => {
                    prop_assert!(config.home.path.is_absolute());
                    prop_assert!(config.socket.is_absolute());
                }
                Err(ConfigError::Invalid { key, line, .. }) => {
                    prop_assert!(!key.is_empty(), "a valid TOML document was refused without a key:\n{}", text);
                    prop_assert!(line >= 1 && line <= text.lines().count(), "line {} of:\n{}", line, text);
                }
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
        }
    }
}

/// Helper: loads `text` as the config file of a temporary home.
fn load_text(text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(
        &Flags {
            config: Some(path),
            ..Flags::default()
        },
        &ambient(Some(dir.path().to_str().unwrap())),
    )
}

#[test]
fn the_command_share_of_connections_is_at_most_half_and_named_when_not() {
    assert_eq!(load_text("").unwrap().max_command_connections, None);
    let cfg = load_text("max_connections = 64\nmax_command_connections = 32\n").unwrap();
    assert_eq!(cfg.max_command_connections, Some(32));
    let err = load_text("max_connections = 64\nmax_command_connections = 33\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("max_command_connections")
            && err.contains("more than half of max_connections (64)"),
        "{err}"
    );
    let err = load_text("max_command_connections = 0\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("max_command_connections"), "{err}");
}

#[test]
fn mcp_servers_are_read_and_bad_ones_name_their_key() {
    let cfg = load_text(
        "[mcp_servers.gh]\ncommand = \"gh-mcp\"\nargs = [\"--stdio\"]\nenv = {GH_HOST = \"x\"}\ntool_timeout_ms = 5000\ndisabled_tools = [\"delete_repo\"]\n\n[mcp_servers.off]\ncommand = \"x\"\nenabled = false\n",
    )
    .unwrap();
    assert_eq!(cfg.mcp_servers.len(), 1, "a disabled server is left out");
    let gh = &cfg.mcp_servers[0];
    assert_eq!(gh.name, "gh");
    assert_eq!(
        gh.transport,
        dsh_core::McpTransport::Stdio {
            command: "gh-mcp".into(),
            args: vec!["--stdio".into()],
            env: [("GH_HOST".to_owned(), "x".to_owned())].into(),
            cwd: None,
        }
    );
    assert_eq!(gh.tool_timeout, Duration::from_millis(5000));
    assert_eq!(gh.startup_timeout, dsh_core::MCP_DEFAULT_STARTUP_TIMEOUT);
    assert_eq!(gh.disabled_tools, ["delete_repo"]);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let cfg = load_text(&format!(
        "[mcp_servers.web]\nurl = \"https://mcp.example.com/mcp\"\nhttp_headers = {{X-Team = \"a\"}}\nbearer_token_file = {:?}\n",
        token.display().to_string()
    ))
    .unwrap();
    assert_eq!(
        cfg.mcp_servers[0].transport,
        dsh_core::McpTransport::Http {
            url: "https://mcp.example.com/mcp".into(),
            headers: [("X-Team".to_owned(), "a".to_owned())].into(),
            bearer_token: Some("s3cret".into()),
        }
    );
    for (text, says) in [
        (
            "[mcp_servers.\"a.b\"]\ncommand = \"x\"\n",
            "mcp_servers.a.b",
        ),
        ("[mcp_servers.a__b]\ncommand = \"x\"\n", "no \"__\""),
        ("[mcp_servers.s]\nargs = []\n", "mcp_servers.s.command"),
        (
            "[mcp_servers.s]\nurl = \"ftp://h/mcp\"\n",
            "mcp_servers.s.url",
        ),
        (
            "[mcp_servers.s]\ncommand = \"x\"\nurl = \"http://h/mcp\"\n",
            "not both",
        ),
        (
            "[mcp_servers.s]\nurl = \"http://h/mcp\"\nargs = [\"a\"]\n",
            "is for stdio servers only",
        ),
        (
            "[mcp_servers.s]\ncommand = \"x\"\nhttp_headers = {A = \"b\"}\n",
            "mcp_servers.s.http_headers",
        ),
        (
            "[mcp_servers.s]\nurl = \"http://h/mcp\"\nbearer_token_env_var = \"DSH_TEST_NO_SUCH_TOKEN_VAR\"\n",
            "mcp_servers.s.bearer_token_env_var",
        ),
        (
            "[mcp_servers.s]\nurl = \"http://h/mcp\"\nbearer_token_file = \"/nonexistent/token\"\n",
            "mcp_servers.s.bearer_token_file",
        ),
        (
            "[mcp_servers.s]\ncommand = \"x\"\nenv = {DSH_SESSION_ID = \"f\"}\n",
            "mcp_servers.s.env",
        ),
        (
            "[mcp_servers.s]\ncommand = \"x\"\nstartup_timeout_ms = 0\n",
            "mcp_servers.s.startup_timeout_ms",
        ),
        (
            "[mcp_servers.s]\ncommand = \"x\"\ntransport = \"sse\"\n",
            "transport",
        ),
    ] {
        let err = load_text(text).unwrap_err().to_string();
        assert!(err.contains(says), "{text:?}: {err}");
    }
}
