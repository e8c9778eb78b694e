//! README.md's tour, run as written: every line of the `sh` blocks of its "A tour with dshctl"
//! section, read from the README when the test runs (so the test fails when the README drifts),
//! in bash, in a copy of the repository's tracked files (as a fresh clone has them, with a commit
//! for `git log -1`), with a fresh `HOME` and a fresh dshd home, and `dshctl` on the PATH.
//!
//! A line's trailing comment says how it is run: `# another terminal: ...` in the background (a
//! `watch` that never ends by itself), `# fails: TEXT (...)` expecting a non-zero status and
//! TEXT in its output; every other line must exit 0.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use dsh_tests::{TestDaemon, dshctl_bin, wait_child};

/// How long the whole tour may take.
const TOUR_LIMIT: Duration = Duration::from_secs(180);

/// The commands of the `sh` blocks of README.md's tour section, in order.
fn tour_commands(readme: &str) -> Vec<String> {
    let start = readme
        .find("\n## A tour with dshctl")
        .expect("README.md has a section \"A tour with dshctl\"");
    let rest = &readme[start + 1..];
    let section = rest[3..].find("\n## ").map_or(rest, |end| &rest[..end + 3]);
    let mut commands = Vec::new();
    let mut in_block = false;
    for line in section.lines() {
        match (in_block, line.trim_end()) {
            (false, "```sh") => in_block = true,
            (true, "```") => in_block = false,
            (true, command) if !command.trim().is_empty() => commands.push(command.to_owned()),
            _ => {}
        }
    }
    commands
}

/// The command and its trailing comment (a `#` after whitespace, outside quotes).
fn split_comment(line: &str) -> (&str, &str) {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (at, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => {
                return (line[..at].trim_end(), line[at + 1..].trim());
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim_end(), "")
}

/// `text` as one single-quoted bash word.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The bash script that runs `commands` one by one and stops at the first that misbehaves.
fn script(commands: &[String]) -> String {
    let mut script = String::from("set -o pipefail\n");
    for (n, line) in commands.iter().enumerate() {
        let (command, comment) = split_comment(line);
        script.push_str(&format!("printf '+ %s\\n' {}\n", quoted(line)));
        if comment.starts_with("another terminal") {
            script.push_str(&format!("{{ {command}\n}} > background-{n}.out 2>&1 &\n"));
        } else if let Some(expected) = comment.strip_prefix("fails:") {
            let expected = expected.split('(').next().unwrap_or_default().trim();
            script.push_str(&format!(
                "out=$({command} 2>&1); st=$?; printf '%s\\n' \"$out\"\n\
                 if [ $st -eq 0 ] || ! grep -qF -- {} <<<\"$out\"; then echo \"TOUR FAILED (status $st, expected a failure showing {expected}): \"{}; exit 1; fi\n",
                quoted(expected),
                quoted(line),
            ));
        } else {
            script.push_str(&format!(
                "{command}\nst=$?; if [ $st -ne 0 ]; then echo \"TOUR FAILED (status $st): \"{}; exit 1; fi\n",
                quoted(line)
            ));
        }
    }
    // What was left in the background (a watch whose daemon has shut down ends by itself).
    script.push_str("kill $(jobs -p) 2>/dev/null; wait; echo TOUR DONE\n");
    script
}

/// A copy of the repository's tracked files at `to`, committed (a fresh clone of the work tree).
fn fresh_clone(repo: &Path, to: &Path) {
    let listed = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(repo)
        .output()
        .unwrap_or_else(|e| panic!("run git ({e}); install it: apt-get install git"));
    assert!(listed.status.success(), "git ls-files: {listed:?}");
    for name in listed.stdout.split(|b| *b == 0).filter(|n| !n.is_empty()) {
        let name = std::str::from_utf8(name).unwrap();
        let from = repo.join(name);
        if !from.is_file() {
            continue; // deleted in the work tree
        }
        let dest = to.join(name);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&from, &dest).unwrap_or_else(|e| panic!("copy {name}: {e}"));
    }
    for args in [
        &["init", "-q"][..],
        &["add", "-A"],
        &[
            "-c",
            "user.name=tour",
            "-c",
            "user.email=tour@localhost",
            "commit",
            "-qm",
            "tour",
        ],
    ] {
        let status = Command::new("git")
            .args(args)
            .current_dir(to)
            .status()
            .unwrap();
        assert!(status.success(), "git {args:?}");
    }
}

#[test]
fn every_command_of_the_readme_tour_runs_as_written() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let commands = tour_commands(&readme);
    assert!(commands.len() >= 20, "the tour's commands: {commands:?}");

    let daemon = TestDaemon::start();
    let clone = daemon.dir.path().join("dsh");
    fresh_clone(&repo, &clone);
    // The same HOME dshd was given (a fresh one, as for a new user).
    let home = daemon.dir.path().join("user");
    std::fs::create_dir_all(&home).unwrap();
    let bin_dir = dshctl_bin().parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = daemon.dir.path().join("tour.out");
    let mut bash = Command::new("bash")
        .arg("-c")
        .arg(script(&commands))
        .current_dir(&clone)
        .env("HOME", &home)
        .env("PATH", path)
        .env("DSH_SOCKET", &daemon.socket)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::from(
            std::fs::File::options().append(true).open(&output).unwrap(),
        ))
        .spawn()
        .unwrap_or_else(|e| panic!("run bash: {e}"));
    let status = wait_child(&mut bash, TOUR_LIMIT);
    if status.is_none() {
        let _ = bash.kill();
    }
    let shown = std::fs::read_to_string(&output).unwrap();
    assert!(
        status.is_some_and(|s| s.success()) && shown.ends_with("TOUR DONE\n"),
        "the tour stopped ({status:?}):\n{shown}\ndshd's log:\n{}",
        daemon.log_text()
    );
    // What the tour says the commands show.
    for promised in [
        "DSH_SHELL=1",
        "transcript: not written yet",
        "denied call facts",
        "has shut down",
    ] {
        assert!(shown.contains(promised), "no {promised:?} in:\n{shown}");
    }
}
