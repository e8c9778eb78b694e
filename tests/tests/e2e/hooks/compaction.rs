//! Claude Code's compaction hooks (issue 44): PreCompact before a compaction (`trigger`,
//! `custom_instructions`), PostCompact after it (`compact_summary`), then SessionStart with
//! `source: "compact"`, each once, with the common fields; and a transcript backup written the
//! way users write PreCompact hooks runs unchanged and copies the transcript it is pointed at.

use super::*;

/// An agent whose first turn runs one command with a long output (a summary of it is shorter);
/// the summary request takes the script's last reply.
fn agent(w: &World) -> String {
    w.agent(&json!({"replies": [
        bash_reply("", "echo listing; head -c 6000 /dev/zero | tr '\\0' x"),
        {"text": "listed"},
        {"text": "Summary: the files were listed."},
    ]}))
}

#[test]
fn compaction_hooks_fire_once_each_with_claude_codes_fields() {
    let w = World::new(|dir| {
        let log = |name: &str| {
            dir.script(
                &format!("{name}.sh"),
                &format!(
                    "#!/bin/sh\ncat >> {f}\necho >> {f}\n",
                    f = dir.q(&format!("{name}.jsonl"))
                ),
            )
        };
        let (pre, post, start) = (log("pre"), log("post"), log("start"));
        Setup::claude_code(hook_file(&[
            ("PreCompact", Some("manual"), &pre),
            ("PostCompact", Some("manual|auto"), &post),
            ("SessionStart", Some("compact"), &start),
        ]))
    });
    let agent = agent(&w);
    assert_eq!(w.prompt(&agent, "list the files").kind(), "completed");
    let out = w
        .daemon
        .dshctl(&["--json", "compact", &agent, "keep the file names"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let once = |name: &str| {
        let lines = parse_lines(&w.read(&format!("{name}.jsonl")));
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        let payload = lines.into_iter().next().unwrap();
        assert_eq!(payload["session_id"], agent.as_str(), "{payload}");
        assert!(payload["transcript_path"].is_string(), "{payload}");
        assert_eq!(payload["cwd"], w.cwd.to_str().unwrap(), "{payload}");
        payload
    };
    let pre = once("pre");
    assert_eq!(pre["hook_event_name"], "PreCompact");
    assert_eq!(pre["trigger"], "manual");
    assert_eq!(pre["custom_instructions"], "keep the file names");
    let post = once("post");
    assert_eq!(post["hook_event_name"], "PostCompact");
    assert_eq!(post["trigger"], "manual");
    assert_eq!(post["compact_summary"], "Summary: the files were listed.");
    let start = once("start");
    assert_eq!(start["hook_event_name"], "SessionStart");
    assert_eq!(start["source"], "compact");
    // In that order, around the compaction.
    let events = w.events(&agent);
    let order: Vec<String> = events
        .iter()
        .filter_map(|e| match e["type"].as_str().unwrap() {
            "hook/invoked" => Some(e["data"]["event"].as_str().unwrap().to_owned()),
            kind @ ("compaction/start" | "compaction/end") => Some(kind.to_owned()),
            _ => None,
        })
        .skip_while(|name| name != "compaction/start")
        .collect();
    assert_eq!(
        order,
        [
            "compaction/start",
            "PreCompact",
            "compaction/end",
            "PostCompact",
            "SessionStart"
        ]
    );
}

/// A transcript backup in the shape users publish (tests/fixtures/hooks/own/, see SOURCES.md):
/// `jq` reads `transcript_path`, the file is copied under the repository root.
#[test]
fn a_transcript_backup_pre_compact_hook_copies_the_transcript() {
    dsh_core::test_support::require_jq();
    let backup = super::upstream::run_fixture("own/pre-compact-backup.sh", "");
    let w = World::new(|_| Setup::claude_code(hook_file(&[("PreCompact", None, &backup)])));
    std::fs::create_dir(w.cwd.join(".git")).unwrap();
    let agent = agent(&w);
    assert_eq!(w.prompt(&agent, "list the files").kind(), "completed");
    let transcript = w
        .locate(&agent)
        .expect("the JSONL backend has a transcript");
    let before = std::fs::read_to_string(&transcript).unwrap();
    assert!(w.daemon.dshctl(&["compact", &agent]).status.success());
    let dir = w.cwd.join(".claude/transcript-backups");
    let copies: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    let name = copies[0].file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with(&format!("{agent}_manual_")), "{name}");
    let copy = std::fs::read_to_string(&copies[0]).unwrap();
    assert!(
        copy.starts_with(&before),
        "the copy holds the transcript as it was"
    );
    assert!(copy.contains("listing"), "{copy}");
}

/// Claude Code's PreCompact can block (exit 2, or `decision: "block"` with a reason): a manual
/// compaction then ends its turn with the reason, the history is as it was and PostCompact does
/// not fire. Codex's PreCompact observes (upstream's compact output has no decision): its exit
/// 2 is a failed hook, and it gets upstream's compact fields (`turn_id`, no `permission_mode`).
#[test]
fn a_claude_code_pre_compact_block_stops_a_manual_compaction_and_codex_only_observes() {
    let w = World::new(|dir| {
        let block = dir.script(
            "block.sh",
            "#!/bin/sh\ncat > /dev/null\necho '{\"decision\":\"block\",\"reason\":\"not while the release is cut\"}'\n",
        );
        let codex = dir.script(
            "codex.sh",
            &format!(
                "#!/bin/sh\ncat >> {f}\necho >> {f}\necho 'codex says no' >&2\nexit 2\n",
                f = dir.q("codex.jsonl")
            ),
        );
        let post = dir.script(
            "post.sh",
            &format!("#!/bin/sh\ncat >> {f}\n", f = dir.q("post.jsonl")),
        );
        Setup {
            claude_code: vec![hook_file(&[
                ("PreCompact", None, &block),
                ("PostCompact", None, &post),
            ])],
            codex: vec![hook_file(&[("PreCompact", None, &codex)])],
            ..Setup::default()
        }
    });
    let agent = agent(&w);
    assert_eq!(w.prompt(&agent, "list the files").kind(), "completed");
    let out = w.daemon.dshctl(&["--json", "compact", &agent]);
    assert!(!out.status.success());
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("a PreCompact hook blocked it: not while the release is cut"),
        "{printed}"
    );
    let events = w.events(&agent);
    let end = events
        .iter()
        .rfind(|e| e["type"] == "compaction/end")
        .expect("the compaction's end is logged");
    assert!(end["data"]["summary"].is_null(), "{end}");
    assert!(
        end["data"]["error"]
            .as_str()
            .unwrap()
            .contains("not while the release is cut")
    );
    assert!(!w.path("post.jsonl").exists(), "PostCompact fired");

    let codex = parse_lines(&w.read("codex.jsonl"));
    assert_eq!(codex.len(), 1, "{codex:?}");
    let p = &codex[0];
    let mut keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "cwd",
            "hook_event_name",
            "model",
            "session_id",
            "transcript_path",
            "trigger",
            "turn_id"
        ],
        "{p}"
    );
    assert_eq!(p["turn_id"], "2");
    assert_eq!(p["trigger"], "manual");
    let results = super::upstream::results_of(&events, "PreCompact");
    assert!(
        results.iter().any(|r| r.0 == "codex" && r.1 == "error"),
        "{results:?}"
    );
}
