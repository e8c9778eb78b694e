//! `dshctl prompt`: Ctrl-C cancels the turn; a busy agent names `agent cancel`; `-` reads stdin.

use rustix::process::{Pid, Signal, kill_process};

use super::*;

/// Sends SIGINT to `child`, as a terminal's Ctrl-C does.
fn interrupt(child: &Child) {
    kill_process(Pid::from_child(child), Signal::INT).unwrap();
}

fn assert_turn_aborted_and_agent_idle(daemon: &TestDaemon, id: &str) {
    let events = daemon.events(id);
    let end = events
        .iter()
        .rev()
        .find(|e| e["type"] == "turn/end")
        .unwrap_or_else(|| panic!("no turn/end in {events:?}"));
    assert_eq!(
        end["data"]["reason"],
        json!({"kind": "aborted", "cause": "user"})
    );
    assert_eq!(daemon.dshctl_json(&["agent", "show", id])["state"], "idle");
}

#[test]
fn ctrl_c_during_a_long_tool_call_cancels_the_turn_and_exits_130() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("running");
    let id = blocking_agent(&daemon, "ctrl-c", &marker);
    let prompt = spawn_dshctl(&daemon, &["prompt", "--agent", &id, "run it"]);
    assert!(
        eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );

    interrupt(&prompt);
    let out = finish(prompt);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(130), "{stdout}\n{stderr}");
    assert!(stderr.contains("dshctl: turn cancelled"), "{stderr}");
    assert!(stdout.contains("── turn 1 aborted: user"), "{stdout}");
    assert!(
        stdout.contains("[aborted]") && !stdout.contains("◀ finished"),
        "the command ran on: {stdout}"
    );
    assert_turn_aborted_and_agent_idle(&daemon, &id);

    // The agent takes the next prompt at once: its script goes on with the next reply.
    let next = daemon.prompt(&id, "again");
    next.assert_completed();
}

#[test]
fn ctrl_c_under_json_ends_the_lines_with_the_aborted_turn() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("running");
    let id = blocking_agent(&daemon, "ctrl-c-json", &marker);
    let prompt = spawn_dshctl(&daemon, &["--json", "prompt", "--agent", &id, "run it"]);
    assert!(
        eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );

    interrupt(&prompt);
    let out = finish(prompt);
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("turn cancelled"));
    let lines: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn/end", "{lines:?}");
    assert_eq!(last["data"]["reason"]["kind"], "aborted");
    assert_turn_aborted_and_agent_idle(&daemon, &id);
}

#[test]
fn a_prompt_refused_as_busy_names_the_command_that_cancels_the_turn() {
    let daemon = TestDaemon::start();
    let marker = daemon.dir.path().join("running");
    let id = blocking_agent(&daemon, "busy", &marker);
    let first = daemon.prompt_in_background(&id, "run it");
    assert!(
        eventually(PATIENCE, || marker.exists()),
        "the bash call never started"
    );

    let second = daemon.dshctl(&["prompt", "--agent", &id, "me too"]);
    let stderr = text(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("busy"), "{stderr}");
    assert!(
        stderr.contains(&format!("dshctl agent cancel {id}")),
        "{stderr}"
    );

    // The named command does what it says.
    assert_eq!(
        daemon.dshctl_json(&["agent", "cancel", &id])["cancelled"],
        true
    );
    let first = dsh_tests::agents::finish_prompt(first);
    assert_eq!(first.reason().0, "aborted");
}

#[test]
fn a_dash_reads_the_prompt_from_stdin() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(
        &daemon.workdir("stdin"),
        &json!({"replies": [{"text": "read it"}]}),
    );
    let text_in = "a prompt with \"quotes\",\nseveral lines\nand no argument limits\n";
    let mut prompt = spawn_dshctl(&daemon, &["--json", "prompt", "--agent", &id, "-"]);
    prompt
        .stdin
        .take()
        .unwrap()
        .write_all(text_in.as_bytes())
        .unwrap();
    let out = finish(prompt);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let events = daemon.events(&id);
    let message = events
        .iter()
        .find(|e| e["type"] == "user/message")
        .unwrap_or_else(|| panic!("no user/message in {events:?}"));
    // The text as piped in, without the final newline (as `$(...)` would take it).
    assert_eq!(
        message["data"]["message"]["text"],
        text_in.trim_end_matches('\n')
    );
}

#[test]
fn an_empty_stdin_is_refused_before_anything_is_sent() {
    let daemon = TestDaemon::start();
    let id = daemon.new_agent(
        &daemon.workdir("empty"),
        &json!({"replies": [{"text": "never"}]}),
    );
    let out = finish(spawn_dshctl(&daemon, &["prompt", "--agent", &id, "-"]));
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("the prompt read from stdin is empty"),
        "{stderr}"
    );
    assert_eq!(daemon.dshctl_json(&["agent", "show", &id])["turns"], 0);
}
