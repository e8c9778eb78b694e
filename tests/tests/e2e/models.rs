//! `Models.List` (`dshctl models`, the ACP model picker's list) against the local mock of an
//! OpenAI-compatible API.

use dsh_testkit::{Mock, ok_stream, status};
use dsh_tests::TestDaemon;
use serde_json::Value;

use crate::openai::{KEY, daemon};

/// `Models.List` (`dshctl models`): the provider's own `GET /models` with the key, the configured
/// default first; when the provider refuses, the configured model alone and why; `[model] models`
/// from the config instead of asking; without a key, what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_are_listed_from_the_provider_else_the_config_else_the_default_with_why() {
    let mock = Mock::start(vec![]).await;
    let listed = |daemon: TestDaemon| async move {
        tokio::task::spawn_blocking(move || (daemon.dshctl_json(&["models"]), daemon))
            .await
            .unwrap()
    };
    let names = |list: &Value| -> Vec<(String, bool)> {
        list["models"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                assert_eq!(m["provider"], "openai", "{list}");
                (
                    m["model"].as_str().unwrap().to_owned(),
                    m["default"].as_bool().unwrap(),
                )
            })
            .collect()
    };
    let owned = |pairs: &[(&str, bool)]| -> Vec<(String, bool)> {
        pairs.iter().map(|(m, d)| ((*m).to_owned(), *d)).collect()
    };

    // The configured default is deepseek-v4-pro here, so the provider's order is not the answer's.
    let (list, _daemon) = listed(daemon(&mock, true, "model = \"deepseek-v4-pro\"\n")).await;
    assert_eq!(list["source"], "provider", "{list}");
    assert_eq!(list["problem"], "", "{list}");
    assert_eq!(
        names(&list),
        owned(&[("deepseek-v4-pro", true), ("deepseek-v4-flash", false)])
    );
    let asked: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/models")
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].method, "GET");
    assert_eq!(asked[0].headers["authorization"], format!("Bearer {KEY}"));

    mock.set_models(status(
        401,
        vec![],
        r#"{"error":{"message":"key revoked"}}"#,
    ));
    let (list, _daemon) = listed(daemon(&mock, true, "")).await;
    assert_eq!(list["source"], "default", "{list}");
    let problem = list["problem"].as_str().unwrap();
    assert!(
        problem.contains("DEEPSEEK_API_KEY") && problem.contains("key revoked"),
        "{problem}"
    );
    assert_eq!(names(&list), owned(&[("deepseek-v4-flash", true)]));

    let before = mock.requests().len();
    let (list, _daemon) = listed(daemon(
        &mock,
        true,
        "models = [\"deepseek-v4-pro\", \"deepseek-v4-flash\", \"my-finetune\"]\n",
    ))
    .await;
    assert_eq!(list["source"], "config", "{list}");
    assert_eq!(
        names(&list),
        owned(&[
            ("deepseek-v4-flash", true),
            ("deepseek-v4-pro", false),
            ("my-finetune", false)
        ])
    );
    assert_eq!(mock.requests().len(), before, "the provider was asked");

    let (list, _daemon) = listed(daemon(&mock, false, "")).await;
    assert_eq!(list["source"], "default", "{list}");
    assert!(
        list["problem"]
            .as_str()
            .unwrap()
            .starts_with("no API key: set DEEPSEEK_API_KEY"),
        "{list}"
    );
}

/// `--reasoning-effort` on the command line: `agent new` and `agent set` ask for it (the model
/// request carries it, `agent show` says it), `default` takes it back, and the scripted model
/// refuses one naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reasoning_effort_is_chosen_shown_changed_and_refused_where_it_means_nothing() {
    let mock = Mock::start(vec![ok_stream("one"), ok_stream("two")]).await;
    let daemon = daemon(&mock, true, "");
    let sent = tokio::task::spawn_blocking(move || {
        let cwd = daemon.dir.path().to_str().unwrap().to_owned();
        let created = daemon.dshctl_json(&[
            "agent",
            "new",
            "--model",
            "openai",
            "--reasoning-effort",
            "high",
            "--cwd",
            &cwd,
        ]);
        assert_eq!(created["reasoning_effort"], "high", "{created}");
        let id = created["agent_id"].as_str().unwrap().to_owned();
        let shown = daemon.dshctl(&["agent", "show", &id]);
        let text = String::from_utf8_lossy(&shown.stdout);
        assert!(text.contains("(reasoning effort high)"), "{text}");
        assert!(
            daemon
                .dshctl(&["prompt", "--agent", &id, "hi"])
                .status
                .success()
        );
        let set = daemon.dshctl_json(&["agent", "set", &id, "--reasoning-effort", "default"]);
        assert_eq!(set["reasoning_effort"], Value::Null, "{set}");
        assert!(
            daemon
                .dshctl(&["prompt", "--agent", &id, "again"])
                .status
                .success()
        );

        let script = daemon.dir.path().join("script.json");
        std::fs::write(&script, r#"{"replies": [{"text": "hi"}]}"#).unwrap();
        let refused = daemon.dshctl(&[
            "agent",
            "new",
            "--script",
            script.to_str().unwrap(),
            "--reasoning-effort",
            "max",
            "--cwd",
            &cwd,
        ]);
        assert!(!refused.status.success());
        let said = String::from_utf8_lossy(&refused.stderr);
        assert!(
            said.contains(
                "model.reasoning_effort: a reasoning effort is only for the openai provider"
            ),
            "{said}"
        );
    })
    .await;
    sent.unwrap();
    let asked: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/chat/completions")
        .map(|r| {
            r.body
                .get("reasoning_effort")
                .cloned()
                .unwrap_or(Value::Null)
        })
        .collect();
    assert_eq!(asked, [Value::from("high"), Value::Null]);
}
