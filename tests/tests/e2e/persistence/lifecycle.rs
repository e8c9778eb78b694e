//! Fork, spawn and resume: new ids and paths, headers, copied prefixes, end-seed markers.

use super::*;

#[test]
fn fork_copies_the_completed_prefix_into_a_new_file_after_an_end_seed() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("fork");
    let source = daemon.new_agent(&cwd, &text_replies(&["first", "late"]));
    daemon.prompt(&source, "one").assert_completed();
    let source_path = daemon.located_path(&source);
    let source_bytes = std::fs::read(&source_path).unwrap();
    let prefix = daemon.events(&source);

    let fork = daemon.agent_with_script(&["fork", &source], &text_replies(&["forked"]));
    let fork_id = fork["agent_id"].as_str().unwrap().to_owned();
    assert_ne!(fork_id, source);
    assert_eq!(fork["header"]["parent_session"], source.as_str());
    assert_eq!(fork["header"]["seed_length"], prefix.len());
    assert_eq!(fork["header"]["cwd"], cwd.to_str().unwrap());

    let fork_path = daemon.located_path(&fork_id);
    assert_ne!(fork_path, source_path);
    assert_eq!(
        fork_path.parent().unwrap().parent(),
        source_path.parent().unwrap().parent()
    );
    let stored = file(&fork_path);
    assert_eq!(stored.header["id"], fork_id.as_str());
    assert_eq!(stored.header["parentSession"], source.as_str());
    assert_eq!(stored.header["seedLength"], prefix.len());
    assert_eq!(stored.events[..prefix.len()], prefix[..], "copied prefix");
    assert_eq!(stored.events[prefix.len()]["type"], "session/end-seed");
    assert_eq!(stored.events[prefix.len()]["seq"], prefix.len());
    assert_eq!(stored.events.len(), prefix.len() + 1);

    let prompted = daemon.prompt(&fork_id, "two");
    prompted.assert_completed();
    assert_eq!(
        prompted.turn_started(),
        2,
        "turn numbers continue in a fork"
    );
    assert_contiguous(&file(&fork_path).events);
    assert_eq!(
        std::fs::read(&source_path).unwrap(),
        source_bytes,
        "forking wrote to the source"
    );
}

#[test]
fn fork_of_a_running_agent_copies_only_its_completed_turns() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("fork-running");
    let source = daemon.new_agent(
        &cwd,
        &json!({"replies": [{"text": "done"}, {"text": "never", "delay_ms": 600_000}]}),
    );
    daemon.prompt(&source, "one").assert_completed();
    let completed = daemon.events(&source);
    let running = daemon.prompt_in_background(&source, "two");
    daemon.wait_for_events(&source, "turn 2 waiting for the model", |e| {
        has_step_start(e, 2, 1)
    });

    let fork = daemon.agent_with_script(&["fork", &source], &text_replies(&["x"]));
    let fork_id = fork["agent_id"].as_str().unwrap();
    assert_eq!(fork["header"]["seed_length"], completed.len());
    let stored = file(&daemon.located_path(fork_id));
    assert_eq!(stored.events[..completed.len()], completed[..]);
    assert_eq!(
        types(&stored.events[completed.len()..]),
        ["session/end-seed"]
    );

    daemon.dshctl_json(&["agent", "cancel", &source]);
    let ended = dsh_tests::agents::finish_prompt(running);
    assert_eq!(ended.reason().0, "aborted");
}

#[test]
fn fork_of_a_stored_session_after_a_restart_reads_it_from_the_backend() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("fork-stored");
    let source = daemon.new_agent(&cwd, &text_replies(&["kept"]));
    daemon.prompt(&source, "one").assert_completed();
    let stored = file(&daemon.located_path(&source)).events;
    stop_gracefully(&mut daemon);
    daemon.restart_with(DaemonSpec::default());

    let fork = daemon.agent_with_script(&["fork", &source], &text_replies(&["x"]));
    let fork_id = fork["agent_id"].as_str().unwrap();
    assert_eq!(fork["header"]["parent_session"], source.as_str());
    let copy = file(&daemon.located_path(fork_id)).events;
    assert_eq!(copy[..stored.len()], stored[..]);
    assert_eq!(copy[stored.len()]["type"], "session/end-seed");
}

#[test]
fn spawn_writes_a_subagent_header_in_the_parents_project_directory() {
    let daemon = TestDaemon::start();
    let cwd = daemon.workdir("spawn");
    let parent = daemon.new_agent(&cwd, &text_replies(&["parent"]));
    daemon.prompt(&parent, "p").assert_completed();
    let parent_events = daemon.events(&parent);

    let child = daemon.agent_with_script(&["spawn", "--parent", &parent], &text_replies(&["kid"]));
    let child_id = child["agent_id"].as_str().unwrap().to_owned();
    assert_eq!(child["parent_agent_id"], parent.as_str());
    assert_eq!(child["header"]["parent_session"], parent.as_str());
    assert_eq!(child["header"]["origin"], "subagent");
    assert_eq!(child["header"]["delegation_depth"], 1);
    assert_eq!(child["header"]["cwd"], cwd.to_str().unwrap());

    let parent_path = daemon.located_path(&parent);
    let child_path = daemon.located_path(&child_id);
    assert_eq!(
        child_path.parent().unwrap().parent(),
        parent_path.parent().unwrap().parent(),
        "child and parent must share the project directory"
    );
    assert!(!child_path.exists());

    daemon.prompt(&child_id, "c").assert_completed();
    let stored = file(&child_path);
    assert_eq!(stored.header["parentSession"], parent.as_str());
    assert_eq!(stored.header["origin"], "subagent");
    assert_eq!(stored.header["delegationDepth"], 1);
    assert_eq!(stored.header["cwd"], cwd.to_str().unwrap());
    assert_eq!(types(&stored.events), ONE_TURN);
    assert_eq!(
        file(&parent_path).events,
        parent_events,
        "the child wrote to its parent's log"
    );
}

#[test]
fn resume_after_a_restart_continues_the_id_location_and_turn_numbers() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("resume");
    let id = daemon.new_agent(&cwd, &text_replies(&["one", "two"]));
    daemon.prompt(&id, "1").assert_completed();
    daemon.prompt(&id, "2").assert_completed();
    let location = daemon.locate(&id);
    let before = file(&daemon.located_path(&id));
    stop_gracefully(&mut daemon);
    let path = PathBuf::from(location["path"].as_str().unwrap());
    assert_eq!(
        file(&path).events,
        before.events,
        "a graceful stop changed a closed log"
    );

    daemon.restart_with(DaemonSpec::default());
    let resumed = daemon.agent_with_script(&["resume", &id], &text_replies(&["three"]));
    assert_eq!(resumed["agent_id"], id.as_str());
    assert_eq!(resumed["turns"], 2);
    assert_eq!(daemon.locate(&id), location);

    let prompted = daemon.prompt(&id, "3");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 3);

    let after = file(&daemon.located_path(&id));
    assert_eq!(after.header, before.header, "the header changed on resume");
    assert_contiguous(&after.events);
    let n = before.events.len();
    assert_eq!(after.events[..n], before.events[..]);
    assert_eq!(after.events[n]["type"], "session/end-seed");
    assert_eq!(count(&after.events, "session/end-seed"), 1);
    assert_eq!(types(&after.events[n + 1..]), ONE_TURN);
}

#[test]
fn resuming_twice_without_a_prompt_appends_a_single_end_seed() {
    let mut daemon = TestDaemon::start();
    let cwd = daemon.workdir("twice");
    let id = daemon.new_agent(&cwd, &text_replies(&["one"]));
    daemon.prompt(&id, "1").assert_completed();
    let path = daemon.located_path(&id);
    let turn_one = file(&path).events;

    for round in 0..2 {
        stop_gracefully(&mut daemon);
        daemon.restart_with(DaemonSpec::default());
        daemon.agent_with_script(&["resume", &id], &text_replies(&[]));
        let live = daemon.events(&id);
        assert_eq!(live.len(), turn_one.len() + 1, "round {round}: {live:?}");
        assert_eq!(live.last().unwrap()["type"], "session/end-seed");
    }
    // The second graceful stop wrote nothing new: the log already ended with the marker.
    stop_gracefully(&mut daemon);
    let stored = file(&path).events;
    assert_eq!(stored.len(), turn_one.len() + 1);
    assert_eq!(count(&stored, "session/end-seed"), 1);

    daemon.restart_with(DaemonSpec::default());
    daemon.agent_with_script(&["resume", &id], &text_replies(&["two"]));
    let prompted = daemon.prompt(&id, "2");
    prompted.assert_completed();
    assert_eq!(prompted.turn_started(), 2);
    let stored = file(&path).events;
    assert_contiguous(&stored);
    assert_eq!(count(&stored, "session/end-seed"), 1);
}
