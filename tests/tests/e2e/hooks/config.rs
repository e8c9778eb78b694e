//! Hook files the daemon refuses: an invalid regex matcher rejects the whole file, visibly, and
//! the daemon goes on serving with the files that did load.

use super::*;

#[test]
fn a_file_with_an_invalid_regex_matcher_is_rejected_as_a_whole_and_the_daemon_keeps_serving() {
    let bad_matcher = "Bash(";
    let w = World::new(|dir| Setup {
        claude_code: vec![
            // A valid group, then a group whose matcher is not a valid regex.
            hook_file(&[
                (
                    "UserPromptSubmit",
                    None,
                    &format!("cat > /dev/null; touch {}", dir.q("bad-ran")),
                ),
                (
                    "PreToolUse",
                    Some(bad_matcher),
                    &format!("cat > /dev/null; touch {}", dir.q("bad-ran")),
                ),
            ]),
            hook_file(&[(
                "UserPromptSubmit",
                None,
                &format!("cat > /dev/null; touch {}", dir.q("good-ran")),
            )]),
        ],
        ..Setup::default()
    });
    let bad = w.path("claude-code-0.json").display().to_string();
    let good = w.path("claude-code-1.json").display().to_string();

    let listed = w.daemon.dshctl_json(&["hooks", "list"]);
    let files = listed["files"].as_array().unwrap();
    assert_eq!(files.len(), 2, "{listed}");
    assert_eq!(files[0]["path"], bad.as_str());
    assert_eq!(files[0]["status"], "rejected", "{listed}");
    assert_eq!(files[0]["handlers"], json!([]), "nothing from it is active");
    let error = files[0]["error"].as_str().unwrap();
    assert!(
        error.contains("invalid claude-code regex matcher \"Bash(\"")
            && error.contains("PreToolUse"),
        "the error names the matcher and its event: {error}"
    );
    assert_eq!(files[1]["path"], good.as_str());
    assert_eq!(files[1]["status"], "loaded", "{listed}");
    // The human form says the same.
    let human = w.daemon.dshctl(&["hooks", "list"]);
    let human = String::from_utf8_lossy(&human.stdout);
    assert!(human.contains(&format!("{bad}: rejected")), "{human}");
    assert!(human.contains("Bash("), "{human}");

    // Prompts still run, the loaded file's hooks with them, and nothing from the rejected one.
    let agent = w.agent(&json!({"replies": [
        bash_reply("creating the marker", &format!("touch {}", w.q("marker"))),
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(w.path("marker").exists());
    assert!(w.path("good-ran").exists());
    assert!(
        !w.path("bad-ran").exists(),
        "a hook of the rejected file ran"
    );
    let events = w.events(&agent);
    let hook_events: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"].as_str().unwrap().starts_with("hook/"))
        .collect();
    assert_eq!(
        hook_events.len(),
        2,
        "the good file's invoked/result pair: {events:#?}"
    );
    for e in hook_events {
        let handler = e["data"]["handler"].as_str().unwrap();
        assert!(handler.starts_with(&format!("{good}#")), "{e}");
    }
}
