//! `dshctl job list` (Shell.ListJobs): every job with its owner, command, state and start time.

use super::*;

fn now_ms() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

fn background(daemon: &TestDaemon, args: &[&str]) -> String {
    let mut full = vec!["run", "--background"];
    full.extend_from_slice(args);
    daemon.dshctl_json(&full)["job_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn jobs(daemon: &TestDaemon, args: &[&str]) -> Vec<Value> {
    let mut full = vec!["job", "list"];
    full.extend_from_slice(args);
    daemon.dshctl_json(&full)["jobs"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn job_list_shows_each_jobs_owner_command_state_and_start() {
    let daemon = TestDaemon::start();
    assert!(jobs(&daemon, &[]).is_empty());
    assert_eq!(
        text(&daemon.dshctl(&["job", "list"]).stdout),
        "no background jobs\n"
    );
    let agent = daemon.new_agent(
        &daemon.workdir("owner"),
        &json!({"replies": [{"text": "ok"}]}),
    );

    let before = now_ms();
    let mine = background(&daemon, &["--agent", &agent, "--", "sleep 300"]);
    let nobodys = background(&daemon, &["--", "exit 7"]);
    let after = now_ms();
    assert!(
        eventually(PATIENCE, || {
            jobs(&daemon, &[])
                .iter()
                .any(|j| j["job_id"] == nobodys && j["running"] == false)
        }),
        "`exit 7` never ended"
    );

    let listed = jobs(&daemon, &[]);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (first, second) = (&listed[0], &listed[1]);
    assert_eq!(first["job_id"], mine, "oldest first: {listed:?}");
    assert_eq!(first["agent_id"], agent);
    assert_eq!(first["command"], "sleep 300");
    assert_eq!(first["state"], "running");
    assert_eq!(second["job_id"], nobodys);
    assert_eq!(second["agent_id"], Value::Null);
    assert_eq!(second["command"], "exit 7");
    assert_eq!(second["state"], "exited 7");
    assert_eq!(second["exit_code"], 7);
    for job in &listed {
        let started = job["started_at_ms"].as_i64().unwrap();
        assert!((before..=after).contains(&started), "{job}");
    }

    // Only the agent's, by a prefix of its id.
    let only = jobs(&daemon, &["--agent", &agent[..agent.len() - 4]]);
    assert_eq!(only.len(), 1, "{only:?}");
    assert_eq!(only[0]["job_id"], mine);

    // The human table names them too.
    let table = text(&daemon.dshctl(&["job", "list"]).stdout);
    assert!(table.starts_with(" JOB"), "{table}");
    for needle in [
        mine.as_str(),
        nobodys.as_str(),
        "sleep 300",
        "exited 7",
        // The owner in its short form (`…` and its last 8 characters), which ids accept.
        &format!("…{}", &agent[agent.len() - 8..]),
    ] {
        assert!(table.contains(needle), "{needle} missing:\n{table}");
    }

    // A job id prefix (with or without `job-`) works for kill and output; the list shows the kill.
    let shared = common_prefix(&mine, &nobodys);
    let unique = &mine[..shared.len() + 1];
    let killed = daemon.dshctl_json(&["job", "kill", unique]);
    assert_eq!(killed, json!({"job_id": mine, "killed": true}));
    assert!(
        eventually(PATIENCE, || { jobs(&daemon, &[])[0]["running"] == false }),
        "the killed job still runs"
    );
    let listed = jobs(&daemon, &[]);
    assert_eq!(listed[0]["killed"], true, "{listed:?}");
    assert!(
        listed[0]["state"].as_str().unwrap().starts_with("killed"),
        "{listed:?}"
    );
    let output = daemon.dshctl_json(&["job", "output", unique.trim_start_matches("job-")]);
    assert_eq!(output["job_id"], mine);
}

#[test]
fn job_list_of_an_unknown_agent_is_refused() {
    let daemon = TestDaemon::start();
    let out = daemon.dshctl(&[
        "--json",
        "job",
        "list",
        "--agent",
        "01234567-89ab-7def-8123-456789abcdef",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "not_found", "{doc}");
}
