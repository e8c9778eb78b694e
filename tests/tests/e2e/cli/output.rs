//! What dshctl prints and how it exits: streams as JSON lines, `run`'s status under `--json`, JSON
//! usage errors, a closed stdout, and help with examples and exit codes.

use super::*;

#[test]
fn session_events_under_json_are_one_object_per_line_in_seq_order() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(
        &daemon.workdir("lines"),
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": "echo hi"}}]},
            {"text": "done"}
        ]}),
    );
    daemon.prompt(&id, "go").assert_completed();

    let out = daemon.dshctl(&["--json", "session", "events", &id]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert!(lines.len() > 5, "{stdout}");
    for (i, line) in lines.iter().enumerate() {
        assert!(line.is_object(), "{line}");
        assert_eq!(line["seq"], i as u64, "{line}");
        assert!(
            line["type"].is_string() && line.get("data").is_some(),
            "{line}"
        );
    }
    assert_eq!(lines.last().unwrap()["type"], "turn/end");

    // --from starts further on.
    let from = daemon.dshctl_json_lines(&["session", "events", &id, "--from", "3"]);
    assert_eq!(from.first().unwrap()["seq"], 3);
    assert_eq!(from.len(), lines.len() - 3);
}

#[test]
fn run_exits_with_the_commands_status_under_json_too() {
    let daemon = TestDaemon::start();
    for (command, code, signal) in [
        ("exit 3", 3, Value::Null),
        ("true", 0, Value::Null),
        ("kill -TERM $$", 128 + 15, json!("SIGTERM")),
    ] {
        let out = daemon.dshctl(&["--json", "run", "--", command]);
        assert_eq!(out.status.code(), Some(code), "{command}: {out:?}");
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["signal"], signal, "{command}: {doc}");
        if signal.is_null() {
            assert_eq!(doc["exit_code"], code, "{command}: {doc}");
        }
        // The human form exits the same way.
        let human = daemon.dshctl(&["run", "--", command]);
        assert_eq!(human.status.code(), Some(code), "{command}");
    }
}

#[test]
fn usage_errors_under_json_are_a_json_object_on_stderr_and_exit_2() {
    // Usage is checked before anything is sent: no daemon is needed.
    let nowhere = Path::new("/nonexistent/dshd.sock");
    let dshctl = |args: &[&str]| dsh_tests::dshctl_at(nowhere, args);
    for args in [
        &["--json", "nonsense"][..],
        &["--json", "run"],
        &["agent", "new", "--json", "--bogus"],
        &["--json", "prompt", "--agent"],
        &["--json", "session", "events", "x", "--from", "minus-one"],
        &["--json", "job"],
    ] {
        let out = dshctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
        let stderr = text(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        let doc: Value = serde_json::from_str(&stderr).unwrap_or_else(|e| panic!("{e}: {stderr}"));
        assert_eq!(doc["error"]["kind"], "usage", "{doc}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(!message.is_empty() && !message.contains('\n'), "{doc}");
        assert!(
            doc["error"]["usage"]
                .as_str()
                .unwrap()
                .starts_with("dshctl"),
            "{doc}"
        );
    }
    // Without --json (and with --json only after `--`, where it belongs to the command), clap's
    // text.
    for args in [&["nonsense"][..], &["nonsense", "--", "--json"], &["job"]] {
        let out = dshctl(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("Usage: dshctl"), "{args:?}: {stderr}");
        assert!(serde_json::from_str::<Value>(&stderr).is_err(), "{stderr}");
    }
    // Asking for help is not an error.
    let help = dshctl(&["--json", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    assert!(text(&help.stdout).contains("Usage: dshctl"));
}

#[test]
fn a_reader_that_stops_early_ends_a_stream_quietly() {
    let daemon = TestDaemon::start();
    // Three calls of 64 KB each: the log is several times what a pipe buffers, so dshctl is still
    // writing when `head` has gone and its writes fail with EPIPE.
    let call =
        json!({"name": "bash", "arguments": {"command": "head -c 64000 /dev/zero | tr '\\0' x"}});
    let id = daemon.new_agent(
        &daemon.workdir("pipe"),
        &json!({"replies": [{"tool_calls": [call, call, call]}, {"text": "done"}]}),
    );
    // (Not the JSON helper: it reads the output only after the exit, and this output fills a pipe.)
    let prompted = daemon.dshctl(&["prompt", "--agent", &id, "go"]);
    assert!(prompted.status.success(), "{}", text(&prompted.stderr));

    for json_flag in ["", "--json"] {
        let script = format!(
            "\"$0\" --socket \"$1\" {json_flag} session events \"$2\" | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\""
        );
        let out = Command::new("bash")
            .args(["-c", &script])
            .arg(dshctl_bin())
            .arg(&daemon.socket)
            .arg(&id)
            .env_remove("DSH_SOCKET")
            .output()
            .unwrap();
        assert_eq!(text(&out.stdout), "0\n", "dshctl {json_flag}: {out:?}");
        assert_eq!(text(&out.stderr), "", "dshctl {json_flag} printed an error");
    }
}

#[test]
fn help_says_what_each_command_is_with_examples_and_exit_codes() {
    let help = |args: &[&str]| {
        let out = dsh_tests::dshctl_at(Path::new("/nonexistent/dshd.sock"), args);
        assert_eq!(out.status.code(), Some(0), "{args:?}");
        text(&out.stdout)
    };
    let top = help(&["--help"]);
    for needle in [
        "Examples:",
        "Exit status:",
        "130",
        "doctor",
        "unique prefix",
    ] {
        assert!(
            top.contains(needle),
            "dshctl --help lacks {needle:?}:\n{top}"
        );
    }
    for (args, needles) in [
        (
            &["prompt", "--help"][..],
            &["Examples:", "Exit status:", "130", "stdin", "Ctrl-C"][..],
        ),
        (&["doctor", "--help"], &["Examples:", "Exit status:", "✗"]),
        (&["job", "--help"], &["Examples:", "Exit status:", "list"]),
        (&["run", "--help"], &["Examples:", "Exit status:", "--json"]),
        (
            &["session", "events", "--help"],
            &["Examples:", "JSON object per line"],
        ),
    ] {
        let text = help(args);
        for needle in needles {
            assert!(text.contains(needle), "{args:?} lacks {needle:?}:\n{text}");
        }
    }
}

#[test]
fn shutdown_without_a_daemon_is_already_done_and_approve_names_both_decisions() {
    let dir = dsh_tests::private_dir();
    let socket = dir.path().join("none.sock");
    let out = dsh_tests::dshctl_at(&socket, &["shutdown"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stderr).contains("nothing to shut down"),
        "{out:?}"
    );
    let out = dsh_tests::dshctl_at(&socket, &["--json", "shutdown"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["stopped"], false, "{doc}");
    assert_eq!(doc["running"], false, "{doc}");

    // A missing decision names both flags; --always only goes with --allow.
    let out = dsh_tests::dshctl_at(&socket, &["approve", "a", "c1"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("<--allow|--deny>"), "{out:?}");
    let out = dsh_tests::dshctl_at(&socket, &["approve", "a", "c1", "--deny", "--always"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");

    // --json's help names every stream.
    let help = text(&dsh_tests::dshctl_at(&socket, &["--help"]).stdout);
    assert!(
        help.contains("streams (prompt, watch, session events)"),
        "{help}"
    );
}
