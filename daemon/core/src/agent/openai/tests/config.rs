//! The `[model]` settings: defaults, TOML keys, validation.

use serde::Deserialize;

use super::*;

#[test]
fn config_defaults_and_toml_keys() {
    let defaults = OpenAiConfig::default();
    assert_eq!(defaults.base_url, "https://api.deepseek.com");
    assert_eq!(defaults.model, "deepseek-v4-flash");
    assert_eq!(defaults.api_key_env, "DEEPSEEK_API_KEY");
    assert_eq!(defaults.request_timeout, Duration::from_secs(300));
    assert_eq!(defaults.idle_timeout, Duration::from_secs(120));
    assert_eq!(defaults.retries, 3);
    assert_eq!(defaults.max_backoff, Duration::from_secs(30));
    assert_eq!(toml::from_str::<OpenAiConfig>("").unwrap(), defaults);

    let parsed: OpenAiConfig = toml::from_str(
        r#"
        base_url = "https://api.openai.com/v1"
        model = "gpt-4.1"
        models = ["gpt-4.1", "o3"]
        api_key_env = "OPENAI_API_KEY"
        request_timeout_ms = 1500
        idle_timeout_ms = 250
        retries = 0
        max_backoff_ms = 10
        "#,
    )
    .unwrap();
    assert_eq!(
        parsed,
        OpenAiConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4.1".into(),
            models: vec!["gpt-4.1".into(), "o3".into()],
            api_key_env: "OPENAI_API_KEY".into(),
            request_timeout: Duration::from_millis(1500),
            idle_timeout: Duration::from_millis(250),
            retries: 0,
            max_backoff: Duration::from_millis(10),
            context_window: None,
            context_windows: Default::default(),
        }
    );
    assert!(toml::from_str::<OpenAiConfig>("idle_timeout = 5").is_err());
    // The context window: per model, then for every model, then the shipped table.
    let windows: OpenAiConfig =
        toml::from_str("context_window = 1000\n[context_windows]\nsmall = 10\n").unwrap();
    assert_eq!(windows.context_window_of("small"), Some(10));
    assert_eq!(windows.context_window_of("deepseek-chat"), Some(1000));
    let shipped = OpenAiConfig::default();
    assert_eq!(
        shipped.context_window_of("deepseek-v4-flash"),
        Some(1_000_000)
    );
    assert_eq!(
        shipped.context_window_of("deepseek-v4-pro"),
        Some(1_000_000)
    );
    assert_eq!(shipped.context_window_of("deepseek-chat"), None);
    assert_eq!(shipped.context_window_of("someone-elses-model"), None);
    assert!(toml::from_str::<OpenAiConfig>("request_timeout_ms = \"soon\"").is_err());
}

/// How the daemon's `[model]` table can embed this config next to `provider`.
#[test]
fn config_embeds_in_a_tagged_model_table() {
    #[derive(Debug, Deserialize)]
    #[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
    enum ModelConfig {
        Scripted { script: String },
        Openai(OpenAiConfig),
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        model: ModelConfig,
    }
    let file: File =
        toml::from_str("[model]\nprovider = \"openai\"\nmodel = \"deepseek-reasoner\"\n").unwrap();
    let ModelConfig::Openai(openai) = file.model else {
        panic!("not openai: {file:?}");
    };
    assert_eq!(openai.model, "deepseek-reasoner");
    assert_eq!(openai.base_url, DEFAULT_BASE_URL);
    let typo = toml::from_str::<File>("[model]\nprovider = \"openai\"\nmodle = \"x\"\n");
    assert!(typo.unwrap_err().to_string().contains("modle"));
    let scripted: File =
        toml::from_str("[model]\nprovider = \"scripted\"\nscript = \"s.json\"\n").unwrap();
    assert!(matches!(scripted.model, ModelConfig::Scripted { script } if script == "s.json"));
}

#[test]
fn construction_validates_the_config() {
    let bad = |c: OpenAiConfig| OpenAiProvider::new(c, None).unwrap_err();
    let base = OpenAiConfig::default();
    for url in [
        "",
        "api.deepseek.com",
        "ftp://x",
        "https://x?q=1",
        "https://u:p@x",
    ] {
        assert!(
            matches!(
                bad(OpenAiConfig {
                    base_url: url.into(),
                    ..base.clone()
                }),
                OpenAiSetupError::BaseUrl { .. }
            ),
            "{url}"
        );
    }
    assert_eq!(
        bad(OpenAiConfig {
            idle_timeout: Duration::ZERO,
            ..base.clone()
        }),
        OpenAiSetupError::ZeroTimeout {
            key: "idle_timeout_ms"
        }
    );
    assert_eq!(
        bad(OpenAiConfig {
            model: " ".into(),
            ..base.clone()
        }),
        OpenAiSetupError::Empty { key: "model" }
    );
    let blank = bad(OpenAiConfig {
        models: vec!["deepseek-chat".into(), "".into()],
        ..base.clone()
    });
    assert_eq!(blank, OpenAiSetupError::BlankModel { index: 1 });
    assert!(
        blank.to_string().starts_with("model.models[1] is blank"),
        "{blank}"
    );
    let err = OpenAiProvider::new(base.clone(), Some("sk-a\nb".into())).unwrap_err();
    assert_eq!(
        err,
        OpenAiSetupError::InvalidKey {
            variable: "DEEPSEEK_API_KEY".into()
        }
    );
    assert!(!err.to_string().contains("sk-a"));

    let provider = OpenAiProvider::new(base, Some("sk-very-secret".into())).unwrap();
    assert_eq!(
        provider.endpoint(),
        "https://api.deepseek.com/chat/completions"
    );
    let debug = format!("{provider:?}");
    assert!(!debug.contains("sk-very-secret"), "{debug}");
    assert!(debug.contains("has_key: true"), "{debug}");
    let v1 = OpenAiProvider::new(
        OpenAiConfig {
            base_url: "https://api.openai.com/v1/".into(),
            ..OpenAiConfig::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(v1.endpoint(), "https://api.openai.com/v1/chat/completions");
}
