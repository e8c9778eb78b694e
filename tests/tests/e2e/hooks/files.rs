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

/// soundbluemusic/public-monorepo's `.claude` setup, unchanged (tests/fixtures/hooks/SOURCES.md):
/// its PreToolUse `Edit|Write` guard (`protect-files.sh`, exit 2 for `.env` and lock files) and
/// its PostToolUse `Edit|Write` formatter (`biome-format.sh`: `pnpm exec biome check --write` on
/// a `.ts` file, from `$CLAUDE_PROJECT_DIR`). `pnpm` here is a stand-in on `PATH` that formats
/// the way Biome would for this input and records how it was run: the hook script is the real
/// one, the formatter it calls is not installed by the tests. The formatter's change is on disk
/// after the write; the write to `.env` never happens; an edit after the formatter ran is refused
/// as stale until the file is read again.
#[test]
fn a_real_projects_write_guard_and_formatter_run_on_file_tools() {
    dsh_core::test_support::require_jq();
    let w = World::new(|dir| {
        let bin = dir.path("bin");
        std::fs::create_dir(&bin).unwrap();
        dir.script(
            "bin/pnpm",
            &format!(
                "#!/bin/sh\nprintf '%s|%s\\n' \"$(pwd)\" \"$*\" >> {log}\n\
                 [ \"$1 $2 $3 $4\" = 'exec biome check --write' ] || exit 1\n\
                 sed -i -E 's/^(let|const) ([a-z]+)=([0-9]+)$/\\1 \\2 = \\3;/' \"$5\"\n",
                log = dir.q("pnpm.log")
            ),
        );
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Setup {
            hooks_toml: "project_hooks = true".into(),
            env: vec![("PATH".into(), path)],
            ..Setup::default()
        }
    });
    let claude = w.cwd.join(".claude");
    for (from, to) in [
        ("public-monorepo/settings.json", "settings.json"),
        (
            "public-monorepo/hooks/protect-files.sh",
            "hooks/protect-files.sh",
        ),
        (
            "public-monorepo/hooks/biome-format.sh",
            "hooks/biome-format.sh",
        ),
        ("public-monorepo/hooks/on-failure.sh", "hooks/on-failure.sh"),
        (
            "public-monorepo/hooks/response-rules.sh",
            "hooks/response-rules.sh",
        ),
        (
            "public-monorepo/hooks/session-start.sh",
            "hooks/session-start.sh",
        ),
    ] {
        super::upstream::install(from, &claude.join(to));
    }
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let agent = w.agent(&json!({"replies": [
        call("write", json!({"file_path": "src/app.ts", "content": "const x=1\n"})),
        call("write", json!({"file_path": ".env", "content": "TOKEN=1\n"})),
        call("edit", json!({"file_path": "src/app.ts", "old_string": "x", "new_string": "y"})),
        {"text": "done"},
    ]}));
    std::fs::create_dir(w.cwd.join("src")).unwrap();
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(
        std::fs::read_to_string(w.cwd.join("src/app.ts")).unwrap(),
        "const x = 1;\n",
        "the formatter's change is on disk after the write (and the stale edit changed nothing)"
    );
    // (Its SessionStart hook asks `pnpm --version` too.)
    let log = w.read("pnpm.log");
    let ran: String = log
        .lines()
        .filter(|l| l.contains("biome"))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        ran,
        format!(
            "{}|exec biome check --write {}\n",
            w.cwd.display(),
            w.cwd.join("src/app.ts").display()
        ),
        "the hook ran the formatter once, from the project, on the written file"
    );
    assert!(
        !w.cwd.join(".env").exists(),
        "the guard let .env be written"
    );
    let results = turn.tool_results();
    assert_eq!(results[1]["isError"], true, "{}", results[1]);
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("보호된 파일입니다"),
        "the model is told why: {}",
        results[1]
    );
    assert_eq!(results[2]["isError"], true, "{}", results[2]);
    assert!(
        results[2]["content"]
            .as_str()
            .unwrap()
            .contains("has changed since you last read it"),
        "{}",
        results[2]
    );
}

/// EffortlessMetrics/tokmd's `.claude` formatter, unchanged (tests/fixtures/hooks/SOURCES.md):
/// PostToolUse `Edit|Write` runs `format-rust.sh`, which runs the real `rustfmt` on the `.rs` file
/// named by `tool_input.file_path`. Rustfmt's change is on disk after the write, and the next edit
/// of the file is refused as stale (the formatter changed it after the agent's write) until the
/// agent reads it again; the edit after that read is made on the formatted text.
#[test]
fn a_real_rustfmt_hook_formats_the_file_the_agent_wrote() {
    dsh_core::test_support::require_jq();
    dsh_core::test_support::require_rustfmt();
    let w = World::new(|_| Setup {
        hooks_toml: "project_hooks = true".into(),
        ..Setup::default()
    });
    let claude = w.cwd.join(".claude");
    for (from, to) in [
        ("tokmd/settings.json", "settings.json"),
        ("tokmd/hooks/format-rust.sh", "hooks/format-rust.sh"),
    ] {
        super::upstream::install(from, &claude.join(to));
    }
    std::fs::create_dir(w.cwd.join("src")).unwrap();
    let call = |name: &str, arguments: Value| json!({"tool_calls": [{"name": name, "arguments": arguments}]});
    let edit = json!({"file_path": "src/lib.rs", "old_string": "x + 1", "new_string": "x + 2"});
    let agent = w.agent(&json!({"replies": [
        call("write", json!({"file_path": "src/lib.rs", "content": "pub fn next(x:u32)->u32{x+1}\n"})),
        call("edit", edit.clone()),
        call("read", json!({"file_path": "src/lib.rs"})),
        call("edit", edit),
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    let results = turn.tool_results();
    assert_eq!(results[1]["isError"], true, "{}", results[1]);
    assert!(
        results[1]["content"]
            .as_str()
            .unwrap()
            .contains("has changed since you last read it"),
        "{}",
        results[1]
    );
    assert_eq!(results[3]["isError"], false, "{}", results[3]);
    assert_eq!(
        std::fs::read_to_string(w.cwd.join("src/lib.rs")).unwrap(),
        "pub fn next(x: u32) -> u32 {\n    x + 2\n}\n",
        "rustfmt's change is on disk, and the edit after the read was made on it"
    );
}

/// Claude Code's InstructionsLoaded fires once per instructions file the first turn loads, with
/// Claude Code's fields (`file_path`, `memory_type` `User` for the home's and `Project` for the
/// repository's, `load_reason` `session_start`, the matcher's subject), and not again later.
#[test]
fn instructions_loaded_fires_per_file_with_claude_codes_fields() {
    let w = World::new(|dir| {
        let log = dir.script(
            "loaded.sh",
            &format!(
                "#!/bin/sh\ncat >> {}\necho >> {}\n",
                dir.q("loaded.jsonl"),
                dir.q("loaded.jsonl")
            ),
        );
        Setup::claude_code(hook_file(&[(
            "InstructionsLoaded",
            Some("session_start"),
            &log,
        )]))
    });
    std::fs::create_dir(w.cwd.join(".git")).unwrap();
    std::fs::write(w.cwd.join("AGENTS.md"), "Use tabs.\n").unwrap();
    std::fs::write(w.daemon.home.join("AGENTS.md"), "Be brief.\n").unwrap();
    let agent = w.agent(&json!({"replies": [{"text": "one"}, {"text": "two"}]}));
    for text in ["go", "again"] {
        assert_eq!(w.prompt(&agent, text).kind(), "completed");
    }
    let seen: Vec<(String, String, String)> = w
        .read("loaded.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let p = parse(l);
            assert_eq!(p["hook_event_name"], "InstructionsLoaded", "{p}");
            let field = |k: &str| p[k].as_str().unwrap().to_owned();
            (
                field("file_path"),
                field("memory_type"),
                field("load_reason"),
            )
        })
        .collect();
    let path = |p: PathBuf| p.to_str().unwrap().to_owned();
    assert_eq!(
        seen,
        [
            (
                path(w.daemon.home.join("AGENTS.md")),
                "User".into(),
                "session_start".into()
            ),
            (
                path(w.cwd.join("AGENTS.md")),
                "Project".into(),
                "session_start".into()
            ),
        ]
    );
}
