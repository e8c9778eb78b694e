//! What dshd serves a client inside an agent's command beyond the read-only rule
//! (`confined_clients`): only its own agent's jobs, a bounded share of the connections, and no
//! say in approvals.

use super::*;

/// `dshctl` on `daemon`'s socket, as a command line for a model's bash call.
fn dshctl_line(daemon: &TestDaemon) -> String {
    format!(
        "'{}' --socket '{}'",
        dsh_tests::dshctl_bin().display(),
        daemon.socket.display()
    )
}

/// Whether job `id` shows as running in `dshctl job list` (which consumes nothing).
fn job_running(daemon: &TestDaemon, id: &str) -> bool {
    let list = daemon.dshctl_json(&["job", "list"]);
    list["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["job_id"] == id)
        .unwrap_or_else(|| panic!("job {id} is not listed: {list}"))["running"]
        == true
}

/// The attack: agent B's confined command reads agent A's background job output with
/// `dshctl job output` (it used to get it, and consume it: the owner then read nothing). Now
/// another agent's job does not exist for B's commands (NOT_FOUND, not listed), and the owner
/// reads every byte afterwards. A's own commands still see A's job.
#[test]
fn a_command_of_one_agent_cannot_read_or_list_another_agents_jobs() {
    let daemon = TestDaemon::start();
    let dshctl = dshctl_line(&daemon);
    // A's one turn lists the jobs its command can see (consuming nothing).
    let a = agent(
        &daemon,
        &daemon.workdir("a"),
        &[],
        &[&format!("{dshctl} --json job list")],
    );
    let job =
        dsh_tests::shell::background(&daemon, &["--agent", &a, "--", "seq -f 'secret-%g' 2000"]);
    assert!(
        dsh_tests::eventually(std::time::Duration::from_secs(30), || !job_running(
            &daemon, &job
        )),
        "job {job} did not end"
    );

    let commands = [
        format!("{dshctl} --json job output {job}; echo rc=$?"),
        format!("{dshctl} --json job list; echo rc=$?"),
        format!("{dshctl} --json job list --agent {a}; echo rc=$?"),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let b = agent(
        &daemon,
        &daemon.workdir("b"),
        &["--sandbox", "read-only"],
        &commands,
    );
    let got = results(&daemon, &b);
    assert!(!got[0].content.contains("secret-"), "{:?}", got[0]);
    assert!(got[0].content.contains("rc=1"), "{:?}", got[0]);
    // Exactly what an unknown job gets.
    assert!(
        got[0].content.contains("\"not_found\"")
            && got[0].content.contains(&format!("no background job {job}")),
        "{:?}",
        got[0]
    );
    for listing in &got[1..] {
        assert!(
            !listing.content.contains(&job) && listing.content.contains("rc=0"),
            "{listing:?}"
        );
    }

    // A's own command sees its job.
    let mine = results(&daemon, &a);
    assert!(mine[0].content.contains(&job), "{:?}", mine[0]);

    let mut out = String::new();
    dsh_tests::shell::read_to_end(&daemon, &job, &mut out);
    let expected: String = (1..=2000).map(|i| format!("secret-{i}\n")).collect();
    assert_eq!(out, expected, "the owner did not read every byte");
}
