//! Processes that leave their command's process group — `setsid cmd &`, `setsid -f`, a double
//! fork, one that also clears its environment — still end with their owner: the foreground call,
//! the background job (its kill or its agent's close), the hook, the daemon. After `kill -9` of
//! dshd they survive (nothing could clean up), and the next dshd of the same home kills them
//! before it answers, while leaving unrelated processes alone.

use std::path::Path;
use std::time::Duration;

use dsh_tests::shell::{alive, bash_call, new_agent, prompt, workdir};
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::json;

use super::{HOLD, background, read_pid, read_to_end};

/// Starts four processes that the group kill alone would miss, each writing its pid to a file in
/// the working directory, and waits until all four have written it:
/// - `a`: `setsid sleep &` (a new session; its parent, the shell, exits first);
/// - `b`: `setsid -f` (forks, so the escapee's parent exits at once);
/// - `c`: a double fork whose child calls `setsid` (parent gone, new session);
/// - `d`: a double fork that stays in the group (parent gone).
///
/// Each sleeps with a distinctive argument so a reused pid is not mistaken for it.
const ESCAPE: &str = "\
setsid sleep 31337 & echo $! > a
setsid -f sh -c 'echo $$ > b; exec sleep 31338'
( (setsid sh -c 'echo $$ > c; exec sleep 31339' &) & )
( (sh -c 'echo $$ > d; exec sleep 31340' &) & )
while ! { [ -s a ] && [ -s b ] && [ -s c ] && [ -s d ]; }; do sleep 0.01; done";

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn escapees(dir: &Path) -> Vec<i32> {
    NAMES.iter().map(|n| read_pid(&dir.join(n))).collect()
}

/// Starts `command` as a background job in `cwd`; returns the job id.
fn job_in(daemon: &TestDaemon, cwd: &Path, command: &str) -> String {
    background(daemon, &["--cwd", cwd.to_str().unwrap(), "--", command])
}

fn assert_gone(pids: &[i32], owner: &str) {
    let left: Vec<i32> = pids.iter().copied().filter(|&p| alive(p)).collect();
    assert!(
        left.is_empty(),
        "{owner} ended but {left:?} of {pids:?} survived"
    );
}

#[test]
fn a_foreground_calls_escapees_are_gone_when_it_returns() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let out = daemon.dshctl(&["run", "--cwd", cwd.to_str().unwrap(), "--", ESCAPE]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The call answers only after its owner was closed: no waiting here.
    assert_gone(&escapees(&cwd), "the Shell.Run call");
}

#[test]
fn an_agent_bash_calls_escapees_are_gone_when_the_turn_ends() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(
        &daemon,
        &cwd,
        &json!({"replies": [{"tool_calls": [bash_call(ESCAPE)]}, {"text": "done"}]}),
    );
    prompt(&daemon, &agent, "go");
    assert_gone(&escapees(&cwd), "the agent's bash call");
}

#[test]
fn a_background_jobs_escapees_live_with_the_job_and_die_with_its_kill() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let job = job_in(&daemon, &cwd, &format!("{ESCAPE}\n{HOLD}"));
    let pids = escapees(&cwd);
    read_pid(&cwd.join("shell"));
    // While the job runs its processes are its own business.
    assert!(pids.iter().all(|&p| alive(p)), "{pids:?}");
    // The periodic sweep must not take them either.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        pids.iter().all(|&p| alive(p)),
        "swept while the job ran: {pids:?}"
    );

    daemon.dshctl_json(&["job", "kill", &job]);
    read_to_end(&daemon, &job, &mut String::new());
    assert_gone(&pids, "the killed job");
}

#[test]
fn closing_an_agent_ends_its_jobs_escapees() {
    let daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    let agent = new_agent(&daemon, &cwd, &json!({"replies": []}));
    let job = background(
        &daemon,
        &["--agent", &agent, "--", &format!("{ESCAPE}\n{HOLD}")],
    );
    let pids = escapees(&cwd);
    daemon.dshctl_json(&["agent", "close", &agent]);
    read_to_end(&daemon, &job, &mut String::new());
    assert_gone(&pids, "the closed agent's job");
}

#[test]
fn a_hooks_escapees_are_gone_when_the_hook_returns() {
    let dir = dsh_tests::private_dir();
    let cwd = dir.path().join("proj");
    std::fs::create_dir(&cwd).unwrap();
    let settings = dir.path().join("settings.json");
    let hook = format!("cd '{}' && {{ {ESCAPE}\n}} >/dev/null", cwd.display());
    std::fs::write(
        &settings,
        json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": hook}]}]}})
            .to_string(),
    )
    .unwrap();
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "[hooks]\nclaude_code = [{:?}]\n",
            settings.display().to_string()
        )),
        ..DaemonSpec::default()
    });
    let agent = new_agent(&daemon, &cwd, &json!({"replies": [{"text": "hi"}]}));
    prompt(&daemon, &agent, "go");
    assert_gone(&escapees(&cwd), "the UserPromptSubmit hook");
}

#[test]
fn shutdown_takes_escapees_that_cleared_their_environment() {
    let mut daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    // `env -i` drops the owner marker: only the adoption by dshd still ties it to the daemon.
    job_in(
        &daemon,
        &cwd,
        &format!(
            "env -i /bin/sh -c 'setsid -f sh -c \"echo \\$\\$ > e; exec sleep 31341\"'\n\
                 while [ ! -s e ]; do sleep 0.01; done\n{HOLD}"
        ),
    );
    let pid = read_pid(&cwd.join("e"));
    assert!(alive(pid));
    let status = daemon.signal_and_wait(rustix::process::Signal::TERM, Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", daemon.log_text());
    assert_gone(&[pid], "the daemon");
}

#[test]
fn after_kill_9_the_next_daemon_kills_what_the_last_one_left_and_nothing_else() {
    let mut daemon = TestDaemon::start();
    let cwd = workdir(&daemon, "w");
    job_in(&daemon, &cwd, &format!("{ESCAPE}\n{HOLD}"));
    let mut pids = escapees(&cwd);
    pids.push(read_pid(&cwd.join("shell")));
    pids.push(read_pid(&cwd.join("pid")));

    // Bystanders: a process of the same user without a marker, and one whose marker names
    // another home (what a daemon of that home would leave).
    let spawn = |env: &[(&str, &str)]| {
        std::process::Command::new("sleep")
            .arg("31342")
            .envs(env.iter().copied())
            .spawn()
            .unwrap()
    };
    let mut unmarked = spawn(&[]);
    let mut other_home = spawn(&[("DSHD_OWNER", "0123456789abcdef:1.1:1")]);

    daemon.kill9();
    assert!(
        pids.iter().all(|&p| alive(p)),
        "a crashed daemon cannot clean up, yet something did: {pids:?}"
    );
    daemon.restart_with(DaemonSpec::default());
    // `restart_with` returned once `dshctl status` answered: the sweep ran before that.
    assert_gone(&pids, "the killed daemon");
    for bystander in [&mut unmarked, &mut other_home] {
        assert!(
            bystander.try_wait().unwrap().is_none(),
            "a process that was not the daemon's was killed"
        );
        bystander.kill().unwrap();
        bystander.wait().unwrap();
    }
    let log = daemon.log_text();
    assert!(
        log.contains("earlier dshd"),
        "the restart does not say what it killed:\n{log}"
    );
}

/// `clone-parent FILE SECONDS HOLD`: a process made with `clone(CLONE_PARENT)` becomes a sibling
/// of its maker. Run as the shell itself (`exec`), its maker is dshd's child, so the sibling is a
/// child of the dshd thread that spawned the shell (a worker, not the main thread). The sibling
/// leaves the command's session and group, keeps the owner marker, writes its pid to FILE and
/// sleeps SECONDS; the maker waits for FILE, then holds HOLD seconds (the command's life).
const CLONE_PARENT: &str = r#"
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
    if (pid < 0) { perror("clone"); return 1; }
    if (pid == 0) {
        setsid();
        FILE *f = fopen(argv[1], "w");
        if (!f) _exit(1);
        fprintf(f, "%d\n", getpid());
        fclose(f);
        execlp("sleep", "sleep", argv[2], (char *)0);
        _exit(1);
    }
    struct stat st;
    while (stat(argv[1], &st) != 0 || st.st_size == 0) usleep(10000);
    sleep(atoi(argv[3]));
    return 0;
}
"#;

/// The shell becomes the `CLONE_PARENT` program (its sibling writes `p`), held `hold` seconds.
fn clone_parent_command(bin: &Path, seconds: &str, hold: u32) -> String {
    format!("exec '{}' p {seconds} {hold}", bin.display())
}

#[test]
fn a_sibling_made_with_clone_parent_ends_with_its_call_job_and_daemon() {
    let mut daemon = TestDaemon::start();
    let bin = dsh_tests::compile_c(daemon.dir.path(), "clone-parent", CLONE_PARENT);

    // A foreground call: gone when the call returns.
    let cwd = workdir(&daemon, "fg");
    let out = daemon.dshctl(&[
        "run",
        "--cwd",
        cwd.to_str().unwrap(),
        "--",
        &clone_parent_command(&bin, "31344", 0),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_gone(&[read_pid(&cwd.join("p"))], "the Shell.Run call");

    // A background job: alive while it runs, gone with its kill.
    let cwd = workdir(&daemon, "job");
    let job = job_in(&daemon, &cwd, &clone_parent_command(&bin, "31345", 300));
    let pid = read_pid(&cwd.join("p"));
    assert!(alive(pid));
    daemon.dshctl_json(&["job", "kill", &job]);
    read_to_end(&daemon, &job, &mut String::new());
    assert_gone(&[pid], "the killed job");

    // Still running at shutdown: gone with the daemon.
    let cwd = workdir(&daemon, "stop");
    job_in(&daemon, &cwd, &clone_parent_command(&bin, "31346", 300));
    let pid = read_pid(&cwd.join("p"));
    let status = daemon.signal_and_wait(rustix::process::Signal::TERM, Duration::from_secs(20));
    assert!(status.success(), "{status:?}\n{}", daemon.log_text());
    assert_gone(&[pid], "the daemon");
}
