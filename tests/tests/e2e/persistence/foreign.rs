//! Bytes dshd did not write: lines of event types it does not know, a torn last line, damage, and
//! a log of a newer format. dshd keeps all of them; it never deletes what it did not write.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// A line as a newer dsh (or a user's tool) would append it: well-formed, newline-terminated, of
/// an event type this dshd does not know.
fn note(seq: usize) -> String {
    format!(
        r#"{{"type":"note/added","seq":{seq},"time":1700000000000,"data":{{"text":"checked by a person","by":{{"tool":"review"}}}}}}"#
    )
}

/// The files beside `log` whose name starts with `session.jsonl.<what>-`.
fn set_aside(log: &Path, what: &str) -> Vec<PathBuf> {
    let prefix = format!("session.jsonl.{what}-");
    std::fs::read_dir(log.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .collect()
}

#[test]
fn an_unknown_event_appended_behind_dshds_back_survives_every_later_turn() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("foreign");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "first").assert_completed();
    let path = daemon.located_path(&id);
    let line = note(file(&path).events.len());
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&line);
    text.push('\n');
    std::fs::write(&path, &text).unwrap();

    // The live agent notices another writer and stops, without touching the line.
    let second = daemon.prompt(&id, "second");
    assert_eq!(second.reason().0, "error", "{:?}", second.lines);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), text);

    // Restarted, the session resumes with the line in its place and goes on after it.
    let _ = daemon.dshctl(&["shutdown"]);
    daemon.wait_exit(Duration::from_secs(20));
    daemon.restart_with(DaemonSpec::default());
    daemon.agent_with_script(&["resume", &id], &text_replies(&["three", "four"]));
    daemon.prompt(&id, "third").assert_completed();
    daemon.prompt(&id, "fourth").assert_completed();
    let after = std::fs::read_to_string(&path).unwrap();
    assert!(
        after.starts_with(&text),
        "the log before and including the foreign line changed:\n{after}"
    );
    assert_contiguous(&file(&path).events);

    // Every stream shows it with its own type and data.
    let events = daemon.events(&id);
    let shown: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "note/added")
        .collect();
    assert_eq!(shown.len(), 1, "{events:?}");
    assert_eq!(shown[0]["data"]["text"], "checked by a person");
    assert_eq!(count(&events, "turn/end"), 3, "{events:?}");

    // A fork copies it as written.
    let fork = daemon.agent_with_script(&["fork", &id], &text_replies(&["five"]));
    let fork_id = fork["agent_id"].as_str().unwrap();
    daemon.prompt(fork_id, "fifth").assert_completed();
    let forked = std::fs::read_to_string(daemon.located_path(fork_id)).unwrap();
    assert!(forked.contains(&line), "{forked}");
}

#[test]
fn a_torn_last_line_is_kept_beside_the_log_and_the_log_goes_on() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("torn");
    let id = daemon.new_agent(&cwd, &text_replies(&["one"]));
    daemon.prompt(&id, "1").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);
    let clean = std::fs::read(&path).unwrap();
    let tail = br#"{"type":"turn/start","seq":6,"ti"#;
    let mut torn = clean.clone();
    torn.extend_from_slice(tail);
    std::fs::write(&path, &torn).unwrap();

    daemon.restart_with(DaemonSpec::default());
    daemon.agent_with_script(&["resume", &id], &text_replies(&["two"]));
    assert_eq!(
        std::fs::read(&path).unwrap(),
        clean,
        "the torn line is still in the log"
    );
    let aside = set_aside(&path, "torn");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read(&aside[0]).unwrap(),
        tail,
        "its bytes are not kept"
    );
    let mode = std::fs::metadata(&aside[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    assert!(
        daemon.log_text().contains(aside[0].to_str().unwrap()),
        "the log does not say where the line went:\n{}",
        daemon.log_text()
    );
    let prompted = daemon.prompt(&id, "2");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 2);
    assert_contiguous(&file(&path).events);
}

#[test]
fn a_damaged_line_is_data_loss_until_a_person_asks_for_the_repair() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("damaged");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "1").assert_completed();
    daemon.prompt(&id, "2").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);
    // Line 4 (the third event) becomes text that is not JSON; the lines after it stay intact.
    let lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .split_inclusive('\n')
        .map(str::to_owned)
        .collect();
    let mut damaged = lines.clone();
    damaged[3] = "this is not json\n".to_owned();
    std::fs::write(&path, damaged.concat()).unwrap();

    daemon.restart_with(DaemonSpec::default());
    let script = daemon.write_script(&text_replies(&["three"]));
    let resume = ["agent", "resume", &id, "--script", script.to_str().unwrap()];
    let (kind, message) = refused(&daemon, &resume);
    assert_eq!(kind, "data_loss", "{message}");
    assert!(
        message.contains(&format!("{}:4", path.display())),
        "{message}"
    );

    // A dry run says what it would do, changes nothing, and exits 1.
    let dry = daemon.dshctl(&["session", "repair", &id]);
    assert_eq!(dry.status.code(), Some(1), "{dry:?}");
    let said = String::from_utf8_lossy(&dry.stdout);
    assert!(said.contains("line 4"), "{said}");
    assert!(said.contains("--apply"), "{said}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), damaged.concat());
    assert!(set_aside(&path, "damaged").is_empty());

    let done = daemon.dshctl_json(&["session", "repair", &id, "--apply"]);
    assert_eq!(done["applied"], true, "{done}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), lines[..3].concat());
    let aside = set_aside(&path, "damaged");
    assert_eq!(aside.len(), 1, "{aside:?}");
    assert_eq!(
        std::fs::read_to_string(&aside[0]).unwrap(),
        damaged[3..].concat(),
        "the lines taken out are not all kept"
    );
    daemon.dshctl_json(&resume);
    daemon.prompt(&id, "3").assert_completed();
    assert_contiguous(&file(&path).events);
}

#[test]
fn a_log_of_a_newer_format_is_read_never_written() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("newer");
    let id = daemon.new_agent(&cwd, &text_replies(&["one"]));
    daemon.prompt(&id, "1").assert_completed();
    let path = daemon.located_path(&id);
    stop_gracefully(&mut daemon);
    let text = std::fs::read_to_string(&path).unwrap();
    let (header, rest) = text.split_once('\n').unwrap();
    let mut newer: Value = serde_json::from_str(header).unwrap();
    newer["version"] = json!(2);
    newer["workspaceId"] = json!("w-1");
    let newer_text = format!("{newer}\n{rest}");
    std::fs::write(&path, &newer_text).unwrap();

    daemon.restart_with(DaemonSpec::default());
    let events = daemon.events(&id);
    assert_eq!(count(&events, "turn/end"), 1, "it can be read: {events:?}");
    let script = daemon.write_script(&text_replies(&["two"]));
    let (kind, message) = refused(
        &daemon,
        &["agent", "resume", &id, "--script", script.to_str().unwrap()],
    );
    assert_eq!(kind, "failed_precondition", "{message}");
    assert!(
        message.contains("newer dsh") && message.contains("version 2"),
        "{message}"
    );
    let repair = daemon.dshctl(&["session", "repair", &id, "--apply"]);
    assert_eq!(repair.status.code(), Some(1), "{repair:?}");
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        newer_text,
        "a newer format's log was written"
    );
}
