//! Claude Code hooks on the file tools (issue 42): they see `Read`/`Write`/`Edit` with Claude
//! Code's `tool_input`, so a `Write|Edit` matcher fires (a formatter's change lands on disk
//! after the write) and a PreToolUse deny on `Edit` leaves the file untouched.

use super::*;

#[test]
fn write_edit_matchers_fire_and_a_deny_stops_the_edit() {
    let w = World::new(|dir| {
        // A "formatter": finds the file in the payload and appends a line to it, as a real
        // formatter rewrites it.
        let format = dir.script(
            "format.sh",
            &format!(
                "#!/bin/sh\ncat > {post}\nfile=$(sed -n 's/.*\"file_path\":\"\\([^\"]*\\)\".*/\\1/p' {post})\necho formatted >> \"$file\"\n",
                post = dir.q("post.json")
            ),
        );
        let deny = json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "no edits here"
        }});
        let guard = dir.script(
            "guard.sh",
            &format!("#!/bin/sh\ncat > {}\necho '{deny}'\n", dir.q("pre.json")),
        );
        Setup::claude_code(hook_file(&[
            ("PostToolUse", Some("Write|Edit"), &format),
            ("PreToolUse", Some("Edit"), &guard),
        ]))
    });
    std::fs::write(w.cwd.join("keep.txt"), "one\n").unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let agent = w.agent(&json!({"replies": [
        call("write", json!({"file_path": "new.txt", "content": "x\n"})),
        call("read", json!({"file_path": "keep.txt"})),
        call("edit", json!({"file_path": "keep.txt", "old_string": "one", "new_string": "1"})),
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(
        std::fs::read_to_string(w.cwd.join("new.txt")).unwrap(),
        "x\nformatted\n",
        "the PostToolUse formatter ran after the write"
    );
    let post = parse(&w.read("post.json"));
    assert_eq!(post["tool_name"], "Write", "{post}");
    assert_eq!(post["tool_input"]["content"], "x\n", "{post}");
    assert_eq!(post["tool_response"]["type"], "create", "{post}");

    let pre = parse(&w.read("pre.json"));
    assert_eq!(pre["tool_name"], "Edit", "{pre}");
    assert_eq!(pre["tool_input"]["old_string"], "one", "{pre}");
    assert_eq!(pre["tool_input"]["new_string"], "1", "{pre}");
    let results = turn.tool_results();
    assert_eq!(results[2]["isError"], true, "{}", results[2]);
    assert_eq!(
        std::fs::read_to_string(w.cwd.join("keep.txt")).unwrap(),
        "one\n",
        "the denied edit changed the file"
    );
}
