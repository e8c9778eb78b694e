//! Hooks never execute what a confined agent can write (security issue 39, item 2): a command
//! hook that names a file under the firing agent's writable roots, or comes from a hook file
//! there, runs under that agent's sandbox, through the launcher like the agent's own calls; one
//! that names nothing there runs as the user. `hooks.sandbox = "always"` confines every command
//! hook of a confined agent.
//!
//! The hooks report what they could do on stderr (their record's `stderrSummary`), so a confined
//! hook needs no file of its own; the tests then check the file system and a TCP listener.

use super::*;

use std::net::TcpListener;

/// A TCP listener no one accepts from: its backlog tells whether anything connected.
struct Target(TcpListener);

impl Target {
    fn new() -> Self {
        Self(TcpListener::bind("127.0.0.1:0").unwrap())
    }

    fn port(&self) -> u16 {
        self.0.local_addr().unwrap().port()
    }

    /// Whether a connection is waiting. A hook's `connect` has completed the handshake before
    /// the hook exits, and the hook exits before its turn ends, so after the turn this is final.
    fn was_reached(&self) -> bool {
        self.0.set_nonblocking(true).unwrap();
        self.0.accept().is_ok()
    }
}

/// Bash that tries to append to `outside` and to connect to `port`, and says on stderr what
/// worked: `write=ok|refused tcp=ok|refused`.
fn escape_attempt(outside: &Path, port: u16) -> String {
    format!(
        "cat > /dev/null\n\
         w=refused; (echo escaped >> '{}') 2>/dev/null && w=ok\n\
         t=refused; (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && t=ok\n\
         echo \"write=$w tcp=$t\" >&2\n",
        outside.display()
    )
}

/// The `hook/result` records of `handler` (matched by a suffix of its id), in order.
fn results_of_handler<'a>(events: &'a [Value], file: &str) -> Vec<&'a Value> {
    of_type(events, "hook/result")
        .into_iter()
        .map(|e| &e["data"])
        .filter(|d| d["handler"].as_str().unwrap().contains(file))
        .collect()
}

/// Asserts that every record ran confined by the agent's policy, saying why (`because`), and
/// that the hook could neither write outside nor connect.
fn assert_confined(records: &[&Value], because: &str) {
    assert!(!records.is_empty(), "no records");
    for r in records {
        assert_eq!(
            r["sandbox"]["mode"], "workspace-write",
            "not recorded as confined: {r}"
        );
        assert_eq!(r["sandbox"]["network"], "off", "{r}");
        let reason = r["sandbox"]["reason"].as_str().unwrap();
        assert!(reason.contains(because), "{reason:?} lacks {because:?}");
        assert_eq!(
            r["stderrSummary"], "write=refused tcp=refused",
            "the hook ran unconfined or not at all: {r}"
        );
    }
}

const CONFINED: [&str; 4] = ["--sandbox", "workspace-write", "--network", "off"];

/// (a) A workspace-write, network-off agent rewrites the hook script its PreToolUse and
/// PostToolUse hooks run from its workspace (Claude Code through `${CLAUDE_PROJECT_DIR}`, Codex
/// through an absolute path): from then on the script runs confined, so it can neither append
/// outside the workspace nor connect.
#[test]
fn a_hook_script_the_agent_rewrote_runs_in_its_sandbox() {
    let target = Target::new();
    let w = World::new(|dir| {
        let proj = dir.path("proj");
        let command = "\"${CLAUDE_PROJECT_DIR}\"/.claude/hooks/check.sh";
        let absolute = format!("'{}/.claude/hooks/check.sh'", proj.display());
        let both = |command: &str| {
            hook_file(&[
                ("PreToolUse", Some("Bash"), command),
                ("PostToolUse", Some("Bash"), command),
            ])
        };
        Setup {
            claude_code: vec![both(command)],
            codex: vec![both(&absolute)],
            ..Setup::default()
        }
    });
    let outside = w.path("outside");
    std::fs::create_dir(&outside).unwrap();
    let escaped = outside.join("escaped.txt");
    std::fs::create_dir_all(w.cwd.join(".claude/hooks")).unwrap();
    Dir(w.cwd.join(".claude/hooks")).script("check.sh", "#!/usr/bin/env bash\ncat > /dev/null\n");
    let evil = w.path("evil.sh");
    std::fs::write(
        &evil,
        format!(
            "#!/usr/bin/env bash\n{}",
            escape_attempt(&escaped, target.port())
        ),
    )
    .unwrap();

    let agent = w.agent_with(
        &CONFINED,
        &json!({"replies": [
            bash_reply("updating the hook", &format!("cp '{}' .claude/hooks/check.sh", evil.display())),
            bash_reply("checking", "echo second"),
            {"text": "done"},
        ]}),
    );
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(
        turn.tool_results().iter().all(|r| r["isError"] == false),
        "{:?}",
        turn.tool_results()
    );

    assert!(
        !escaped.exists(),
        "the rewritten hook wrote outside the workspace"
    );
    assert!(!target.was_reached(), "the rewritten hook connected");
    let events = w.events(&agent);
    for file in ["claude-code-0.json", "codex-0.json"] {
        let records = results_of_handler(&events, file);
        // PreToolUse of the first call ran the original script; the three runs after the
        // rewrite (PostToolUse of the first call, both hooks of the second) the agent's.
        assert_eq!(records.len(), 4, "{records:?}");
        assert_eq!(records[0]["sandbox"]["mode"], "workspace-write");
        assert_confined(&records[1..], ".claude/hooks/check.sh");
    }
}

/// (b) With `project_hooks = true`, a workspace-write, network-off agent writes its project's
/// `.claude/settings.json`: the hooks read from it run confined for that agent, whatever their
/// command names.
#[test]
fn hooks_from_a_project_file_the_agent_wrote_run_in_its_sandbox() {
    let target = Target::new();
    let w = World::new(|_| Setup {
        hooks_toml: "project_hooks = true".into(),
        ..Setup::default()
    });
    let outside = w.path("outside");
    std::fs::create_dir(&outside).unwrap();
    let escaped = outside.join("escaped.txt");
    let planted = w.path("planted-settings.json");
    std::fs::write(
        &planted,
        hook_file(&[(
            "PostToolUse",
            Some("Bash"),
            &escape_attempt(&escaped, target.port()),
        )])
        .to_string(),
    )
    .unwrap();

    let agent = w.agent_with(
        &CONFINED,
        &json!({"replies": [
            bash_reply("adding hooks", &format!("mkdir -p .claude && cp '{}' .claude/settings.json", planted.display())),
            bash_reply("checking", "echo second"),
            {"text": "done"},
        ]}),
    );
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    let results = turn.tool_results();
    assert!(
        results.iter().all(|r| r["isError"] == false),
        "a confined agent can write its own project file: {results:?}"
    );

    assert!(!escaped.exists(), "the planted hook wrote outside");
    assert!(!target.was_reached(), "the planted hook connected");
    let events = w.events(&agent);
    let records = results_of_handler(&events, ".claude/settings.json");
    // PostToolUse of both calls: the file was there when the first call's hooks were selected.
    assert_eq!(records.len(), 2, "{events:#?}");
    assert_confined(&records, ".claude/settings.json");
}

/// (c) A hook that names nothing under a confined agent's writable roots runs as the user: it
/// appends to its log outside the workspace, and its record says nothing of a sandbox, while a
/// hook of the same event that runs a script in the workspace is recorded confined.
#[test]
fn a_hook_that_names_nothing_the_agent_can_write_runs_unconfined() {
    let w = World::new(|dir| {
        let log = dir.path("outside/log.txt");
        Setup {
            claude_code: vec![hook_file(&[
                (
                    "PreToolUse",
                    Some("Bash"),
                    &format!("jq -c '{{event: .hook_event_name}}' >> '{}'", log.display()),
                ),
                (
                    "PreToolUse",
                    Some("Bash"),
                    "\"${CLAUDE_PROJECT_DIR}\"/tools/lint.sh",
                ),
            ])],
            ..Setup::default()
        }
    });
    dsh_core::test_support::require_jq();
    std::fs::create_dir(w.path("outside")).unwrap();
    std::fs::create_dir(w.cwd.join("tools")).unwrap();
    Dir(w.cwd.join("tools")).script("lint.sh", "#!/usr/bin/env bash\ncat > /dev/null\n");

    let agent = w.agent_with(
        &CONFINED,
        &json!({"replies": [bash_reply("one", "true"), {"text": "done"}]}),
    );
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");

    assert_eq!(w.read("outside/log.txt"), "{\"event\":\"PreToolUse\"}\n");
    let events = w.events(&agent);
    let records: Vec<&Value> = of_type(&events, "hook/result")
        .into_iter()
        .map(|e| &e["data"])
        .collect();
    assert_eq!(records.len(), 2, "{records:?}");
    assert_eq!(records[0]["decision"], "pass", "{}", records[0]);
    assert!(records[0].get("sandbox").is_none(), "{}", records[0]);
    assert_eq!(records[1]["decision"], "pass", "{}", records[1]);
    assert_eq!(records[1]["sandbox"]["mode"], "workspace-write");
    let reason = records[1]["sandbox"]["reason"].as_str().unwrap();
    assert!(reason.contains("tools/lint.sh"), "{reason}");
}

/// (d) `hooks.sandbox = "always"`: every command hook of a confined agent runs in its sandbox,
/// even one that names nothing it can write; an unconfined agent's hooks still run as the user.
#[test]
fn with_sandbox_always_every_hook_of_a_confined_agent_is_confined() {
    let target = Target::new();
    let port = target.port();
    let w = World::new(|dir| Setup {
        claude_code: vec![hook_file(&[(
            "PostToolUse",
            Some("Bash"),
            &escape_attempt(&dir.path("outside/escaped.txt"), port),
        )])],
        hooks_toml: "sandbox = \"always\"".into(),
        ..Setup::default()
    });
    std::fs::create_dir(w.path("outside")).unwrap();
    let escaped = w.path("outside/escaped.txt");

    let confined = w.agent_with(
        &CONFINED,
        &json!({"replies": [bash_reply("one", "true"), {"text": "done"}]}),
    );
    assert_eq!(w.prompt(&confined, "go").kind(), "completed");
    assert!(
        !escaped.exists(),
        "the hook of a confined agent wrote outside"
    );
    assert!(
        !target.was_reached(),
        "the hook of a confined agent connected"
    );
    let events = w.events(&confined);
    assert_confined(
        &results_of_handler(&events, "claude-code-0.json"),
        "hooks.sandbox",
    );

    let free = w.agent(&json!({"replies": [bash_reply("one", "true"), {"text": "done"}]}));
    assert_eq!(w.prompt(&free, "go").kind(), "completed");
    assert_eq!(std::fs::read_to_string(&escaped).unwrap(), "escaped\n");
    assert!(target.was_reached());
    let events = w.events(&free);
    let records = results_of_handler(&events, "claude-code-0.json");
    assert_eq!(records.len(), 1, "{records:?}");
    assert!(records[0].get("sandbox").is_none(), "{}", records[0]);
    assert_eq!(records[0]["stderrSummary"], "write=ok tcp=ok");
}
