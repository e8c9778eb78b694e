//! The README's editor settings, copied verbatim from "Use from your editor", give a working
//! first prompt on a machine without a model key: the bridge started with exactly those
//! arguments (only the socket comes from the environment, as the test's dshd is not at the
//! default place) answers `end_turn`, having run a command, confined as the settings say.

use super::*;

/// The `args` of each JSON block of the README's "Use from your editor" section.
fn readme_settings() -> Vec<Vec<String>> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    let start = readme
        .find("\n## Use from your editor")
        .expect("README.md has a section \"Use from your editor\"");
    let section = &readme[start + 1..];
    let section = section[3..]
        .find("\n## ")
        .map_or(section, |end| &section[..end + 3]);
    let mut blocks = Vec::new();
    let mut rest = section;
    while let Some(at) = rest.find("```json\n") {
        let body = &rest[at + 8..];
        let end = body.find("\n```").unwrap();
        let settings: Value = serde_json::from_str(&body[..end])
            .unwrap_or_else(|e| panic!("a README json block is not JSON ({e}): {}", &body[..end]));
        let server = &settings["agent_servers"]["dsh"];
        let args = server["args"].as_array().unwrap();
        blocks.push(
            args.iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect(),
        );
        rest = &body[end..];
    }
    blocks
}

#[test]
fn the_readme_editor_settings_answer_a_first_prompt_without_a_key() {
    let blocks = readme_settings();
    assert!(
        blocks.len() >= 2,
        "Zed's and JetBrains' settings: {blocks:?}"
    );
    let daemon = TestDaemon::start();
    let status = daemon.dshctl_json(&["status"]);
    assert_eq!(status["model_key_configured"], false, "{status}");
    for args in blocks {
        let child = Command::new(dshctl_bin())
            .args(&args)
            .env("DSH_SOCKET", &daemon.socket)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut acp = Acp::over(child);
        // A project directory apart from dshd's home (which the sandbox keeps read-only).
        let project = daemon.dir.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let id = acp.ready_session(&project);
        let (before, answer) = acp.call("session/prompt", prompt(&id, "hello"));
        assert_eq!(answer["stopReason"], "end_turn", "{args:?}: {answer}");
        let seen = updates(&before);
        let finished: Vec<&Value> = seen
            .iter()
            .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
            .collect();
        assert_eq!(finished.len(), 1, "{args:?}: one command ran: {seen:?}");
        assert!(
            text_of(&seen, "agent_message_chunk").contains("keyless demo"),
            "{args:?}: {seen:?}"
        );
        // Confined as the settings say.
        let shown = daemon.dshctl_json(&["agent", "show", &id]);
        assert_eq!(
            shown["sandbox"],
            json!({"mode": "workspace-write", "network": "off"}),
            "{shown}"
        );
        assert_eq!(shown["approval"], "on-request", "{shown}");
        assert_eq!(acp.finish().code(), Some(0));
    }
}
