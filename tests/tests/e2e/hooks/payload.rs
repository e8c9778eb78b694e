//! The stdin payload through the daemon: `transcript_path` from the active backend's `locate()` at
//! invocation time, and each dialect's key order.

use super::*;

const CC_KEYS: [&str; 9] = [
    "session_id",
    "prompt_id",
    "transcript_path",
    "cwd",
    "permission_mode",
    "hook_event_name",
    "tool_name",
    "tool_input",
    "tool_use_id",
];

const CODEX_KEYS: [&str; 10] = [
    "session_id",
    "turn_id",
    "transcript_path",
    "cwd",
    "hook_event_name",
    "model",
    "permission_mode",
    "tool_name",
    "tool_input",
    "tool_use_id",
];

/// A PreToolUse hook that saves its stdin to `<dir>/<name>.json` and records in `<name>.exists`
/// whether the file its `transcript_path` names exists while it runs.
fn saving_hook(dir: &Dir, name: &str) -> Value {
    let payload = dir.q(&format!("{name}.json"));
    let exists = dir.q(&format!("{name}.exists"));
    let command = format!(
        "cat > {payload}; T=$(jq -r .transcript_path {payload}); \
         if [ -e \"$T\" ]; then echo present; else echo absent; fi > {exists}"
    );
    hook_file(&[("PreToolUse", Some("Bash"), &command)])
}

/// Both dialects save their PreToolUse payloads; the daemon starts on the default JSONL backend.
fn world() -> World {
    dsh_core::test_support::require_jq();
    World::new(|dir| Setup {
        claude_code: vec![saving_hook(dir, "cc")],
        codex: vec![saving_hook(dir, "codex")],
        ..Setup::default()
    })
}

/// A bash call (id `call-<n>`) that records whether the transcript the Claude Code hook was
/// given exists when the tool runs, i.e. after the hooks and before the step's checkpoint.
fn probe_call(w: &World, n: u32) -> Value {
    let command = format!(
        "T=$(jq -r .transcript_path {}); if [ -e \"$T\" ]; then echo present; else echo absent; fi > {}",
        w.q("cc.json"),
        w.q("tool.exists")
    );
    json!({"text": "probing", "tool_calls": [{
        "id": format!("call-{n}"),
        "name": "bash",
        "arguments": {"command": command, "description": "probe"},
    }]})
}

#[test]
fn a_first_turns_transcript_path_is_the_located_jsonl_file_and_exists_for_its_hooks() {
    let w = world();
    let agent = w.agent(&json!({"replies": [probe_call(&w, 1), {"text": "done"}]}));
    let located = w
        .locate(&agent)
        .expect("the JSONL backend locates every session");
    assert!(
        !Path::new(&located).exists(),
        "a new session has no file before its first checkpoint"
    );

    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);

    let cc = parse(&w.read("cc.json"));
    let codex = parse(&w.read("codex.json"));
    assert_eq!(cc["transcript_path"], located.as_str());
    assert_eq!(codex["transcript_path"], located.as_str());
    // The session was stored before its first hook ran: every hook, and the tool after them,
    // found the file at the path they were given.
    assert_eq!(w.read("cc.exists"), "present\n");
    assert_eq!(w.read("codex.exists"), "present\n");
    assert_eq!(w.read("tool.exists"), "present\n");
    // The turn's checkpoints wrote the session exactly there.
    assert!(Path::new(&located).is_file(), "no transcript at {located}");
    assert_eq!(w.locate(&agent).as_deref(), Some(located.as_str()));
}

#[test]
fn payload_keys_come_in_each_dialects_upstream_order() {
    let w = world();
    let agent = w.agent(&json!({"replies": [probe_call(&w, 1), {"text": "done"}]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");
    let located = w.locate(&agent).unwrap();
    let command = format!(
        "T=$(jq -r .transcript_path {}); if [ -e \"$T\" ]; then echo present; else echo absent; fi > {}",
        w.q("cc.json"),
        w.q("tool.exists")
    );

    let cc_text = w.read("cc.json");
    assert_eq!(keys(&cc_text), CC_KEYS);
    assert!(
        cc_text.ends_with("}\n"),
        "Claude Code: one line: {cc_text:?}"
    );
    let cc = parse(&cc_text);
    assert_eq!(cc["session_id"], agent.as_str());
    assert_eq!(cc["prompt_id"], format!("{agent}-prompt-1"));
    assert_eq!(cc["transcript_path"], located.as_str());
    assert_eq!(cc["cwd"], w.cwd.to_str().unwrap());
    assert_eq!(cc["hook_event_name"], "PreToolUse");
    assert_eq!(cc["permission_mode"], "default");
    assert_eq!(cc["tool_name"], "Bash");
    assert_eq!(
        cc["tool_input"],
        json!({"command": command, "description": "probe"}),
        "Claude Code gets its Bash input"
    );
    assert_eq!(cc["tool_use_id"], "call-1");

    let codex_text = w.read("codex.json");
    assert_eq!(keys(&codex_text), CODEX_KEYS);
    assert!(
        codex_text.ends_with('}'),
        "Codex: no trailing newline: {codex_text:?}"
    );
    let codex = parse(&codex_text);
    assert_eq!(codex["session_id"], agent.as_str());
    assert_eq!(codex["transcript_path"], located.as_str());
    assert_eq!(codex["cwd"], w.cwd.to_str().unwrap());
    assert_eq!(codex["hook_event_name"], "PreToolUse");
    assert_eq!(codex["model"], "script");
    assert_eq!(codex["permission_mode"], "default");
    assert_eq!(codex["turn_id"], "1");
    assert_eq!(codex["tool_name"], "Bash");
    assert_eq!(
        codex["tool_input"],
        json!({"command": command}),
        "Codex gets its shell shape"
    );
    assert_eq!(codex["tool_use_id"], "call-1");
}

#[test]
fn without_a_per_session_file_claude_code_gets_an_empty_string_and_codex_null() {
    let w = world();
    let agent = w.agent(&json!({"replies": [
        probe_call(&w, 1), {"text": "first"},
        probe_call(&w, 2), {"text": "second"},
    ]}));
    assert_eq!(w.prompt(&agent, "on jsonl").kind(), "completed");
    assert!(w.locate(&agent).is_some());

    // Swap the backend under the live agent: the location is asked at each invocation.
    let backend = w.daemon.dshctl_json(&["persistence", "use", "sqlite"]);
    assert_eq!(backend["name"], "sqlite", "{backend}");
    assert_eq!(w.locate(&agent), None);
    assert_eq!(w.prompt(&agent, "on sqlite").kind(), "completed");

    let cc_text = w.read("cc.json");
    let codex_text = w.read("codex.json");
    let (cc, codex) = (parse(&cc_text), parse(&codex_text));
    assert_eq!(cc["tool_use_id"], "call-2", "the second turn's payload");
    assert_eq!(codex["tool_use_id"], "call-2", "the second turn's payload");
    assert_eq!(cc["transcript_path"], json!(""));
    assert_eq!(codex["transcript_path"], Value::Null);
    assert_eq!(codex["turn_id"], "2");
    // Same shapes without a file.
    assert_eq!(keys(&cc_text), CC_KEYS);
    assert_eq!(keys(&codex_text), CODEX_KEYS);
}
