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

/// A confined background job opens 5,000 connections to dshd's socket and holds them (it used to
/// take every slot, and the user's `dshctl status` failed with "transport error"). Clients inside
/// commands get a share of the slots (a quarter by default), and one agent's commands a quarter of
/// that; beyond it they are refused, and one that asks is told why (RESOURCE_EXHAUSTED naming
/// `max_command_connections`), while another agent's command and the user's own `dshctl status`
/// answer.
#[test]
fn a_command_holding_thousands_of_connections_leaves_the_user_slots() {
    const FLOOD: usize = 5000;
    let daemon = TestDaemon::start();
    let max = daemon.dshctl_json(&["status"])["max_connections"]
        .as_u64()
        .unwrap();
    assert!(
        (FLOOD as u64) > max,
        "the flood must exceed max_connections ({max}) to mean anything"
    );
    let flood = format!(
        r#"python3 - <<'PY'
import socket, subprocess, time
held = []
for _ in range({FLOOD}):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect("{socket}")
    held.append(s)
print("connected", len(held), flush=True)
# The last refused connections are still being served their refusal for a moment; asking
# again once they ended is the client's own business.
for _ in range(100):
    asked = subprocess.run(["{dshctl}", "--socket", "{socket}", "status"], capture_output=True, text=True)
    if "max_command_connections" in asked.stderr:
        break
    time.sleep(0.1)
print("inside:", asked.returncode, asked.stderr.strip(), flush=True)
print("flooded", flush=True)
time.sleep(120)
PY"#,
        socket = daemon.socket.display(),
        dshctl = dsh_tests::dshctl_bin().display(),
    );
    let id = agent(
        &daemon,
        &daemon.workdir("flood"),
        &["--sandbox", "read-only"],
        &[],
    );
    let job = dsh_tests::shell::background(&daemon, &["--agent", &id, "--", &flood]);
    let mut out = String::new();
    assert!(
        dsh_tests::eventually(std::time::Duration::from_secs(120), || {
            let doc = dsh_tests::shell::job_output(&daemon, &job);
            out.push_str(doc["stdout"].as_str().unwrap());
            out.push_str(doc["stderr"].as_str().unwrap());
            out.contains("flooded") || doc["running"] == false
        }),
        "the flood did not finish: {out}"
    );
    assert!(out.contains(&format!("connected {FLOOD}")), "{out}");
    assert!(
        out.contains("inside: 1") && out.contains("max_command_connections"),
        "{out}"
    );

    // Another agent's command still reaches dshd: one agent's commands hold only their own
    // share of the command share (it used to be "transport error" for every other agent).
    let dshctl = dshctl_line(&daemon);
    let other = agent(
        &daemon,
        &daemon.workdir("other"),
        &["--sandbox", "read-only"],
        &[&format!("{dshctl} --json status >/dev/null; echo rc=$?")],
    );
    let got = results(&daemon, &other);
    assert_eq!(got[0].content, "rc=0\n", "{:?}", got[0]);
    assert!(out.contains("this agent's commands"), "{out}");

    let status = daemon.dshctl(&["--json", "status"]);
    assert!(
        status.status.success(),
        "the user's status failed while a command held {FLOOD} connections: {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(
        doc["connections"].as_u64().unwrap() <= max / 4 + 1,
        "commands hold more than their share: {doc}"
    );
    assert_eq!(daemon.dshctl_json(&["job", "kill", &job])["killed"], true);
    assert!(daemon.log_text().contains("max_command_connections"));
}

/// Watchers inside dshd's commands (a confined one with `dshctl watch`, an unconfined one's
/// `dshctl prompt`) see an agent's approval request but cannot answer it, so they do not count
/// as watching: with no person following the agent, the request is denied at once as unwatched
/// (it used to wait out the approval timeout).
#[test]
fn watchers_inside_commands_do_not_hold_an_approval_for_a_person() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[approvals]\ntimeout_ms = 120000\n".into()),
        ..DaemonSpec::default()
    });
    let dshctl = dshctl_line(&daemon);
    let work = daemon.workdir("asker");
    let marker = work.join("marker");
    let asker = scripted_agent(
        &daemon,
        &work,
        &["--approval", "always"],
        &json!({"replies": [
            {"text": "hello"},
            {"tool_calls": [bash_call(&format!("touch '{}'", marker.display()))]},
            {"text": "done"},
        ]}),
    );
    // A first turn, so a watcher replaying from seq 0 shows it is registered by printing it.
    prompt(&daemon, &asker, "hi");
    let watcher = agent(
        &daemon,
        &daemon.workdir("watcher"),
        &["--sandbox", "read-only"],
        &[],
    );
    let watching = dsh_tests::shell::background(
        &daemon,
        &[
            "--agent",
            &watcher,
            "--",
            &format!("{dshctl} --json watch {asker} --from 0"),
        ],
    );
    let mut seen = String::new();
    assert!(
        dsh_tests::eventually(std::time::Duration::from_secs(30), || {
            let doc = dsh_tests::shell::job_output(&daemon, &watching);
            seen.push_str(doc["stdout"].as_str().unwrap());
            seen.contains("turn/end")
        }),
        "the confined watcher never showed the first turn: {seen}"
    );
    // The second turn, prompted from an unconfined command of a third agent.
    let prompter = agent(
        &daemon,
        &daemon.workdir("prompter"),
        &[],
        &[&format!("{dshctl} --json prompt --agent {asker} go")],
    );
    results(&daemon, &prompter);
    let events = daemon.dshctl_json_lines(&["session", "events", &asker]);
    let decided = events
        .iter()
        .find(|e| e["type"] == "approval/decision")
        .unwrap_or_else(|| panic!("no decision: {events:?}"));
    assert_eq!(decided["data"]["by"], "unwatched", "{decided}");
    assert!(!marker.exists());
    // The confined watcher saw the request.
    assert!(
        dsh_tests::eventually(std::time::Duration::from_secs(30), || {
            let doc = dsh_tests::shell::job_output(&daemon, &watching);
            seen.push_str(doc["stdout"].as_str().unwrap());
            seen.contains("approval/request")
        }),
        "the confined watcher never showed the request: {seen}"
    );
    daemon.dshctl_json(&["job", "kill", &watching]);
}

/// Issue 39, item 12: `dshctl` inside a command whose sandbox has network off cannot make a
/// socket (the seccomp filter answers `socket()` with EACCES). It used to say that the socket
/// belongs to another user; it says the sandbox refused it, and that this is a dsh command's
/// sandbox when `DSH_SHELL=1` says so.
#[test]
fn dshctl_in_a_command_with_network_off_says_the_sandbox_refused_it() {
    let daemon = TestDaemon::start();
    let dshctl = dshctl_line(&daemon);
    let commands = [
        format!("{dshctl} status; echo rc=$?"),
        format!("{dshctl} --json status"),
        format!("env -u DSH_SHELL {dshctl} status"),
    ];
    let commands: Vec<&str> = commands.iter().map(String::as_str).collect();
    let id = agent(
        &daemon,
        &daemon.workdir("off"),
        &["--network", "off"],
        &commands,
    );
    let got = results(&daemon, &id);
    let said = &got[0].content;
    assert!(
        said.contains("this runs inside a dsh command whose sandbox has network off")
            && said.contains("Permission denied")
            && said.contains("rc=1"),
        "{said}"
    );
    for result in &got {
        assert!(!result.content.contains("another user"), "{result:?}");
    }
    let doc: serde_json::Value = serde_json::from_str(
        got[1]
            .content
            .lines()
            .find(|l| l.starts_with('{'))
            .unwrap_or_else(|| panic!("no JSON: {:?}", got[1])),
    )
    .unwrap();
    assert_eq!(doc["error"]["kind"], "sandbox_refused", "{doc}");
    let outside = &got[2].content;
    assert!(
        outside.contains("a sandbox with network off refused") && !outside.contains("dsh command"),
        "{outside}"
    );
}
