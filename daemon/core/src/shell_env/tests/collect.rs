//! Collection: built-in facts, contributor answers, refusals, locking and caching.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use serde_json::json;

use super::*;
use crate::shell_env::{CollectError, ManagedEnv};

fn pairs(env: &ManagedEnv) -> Vec<(&str, &str)> {
    env.iter().collect()
}

#[tokio::test]
async fn collect_without_agent_has_only_unconditional_facts() {
    let env = registry().collect(&exec(None)).await.unwrap();
    assert_eq!(pairs(&env), [("DSH_HOME", HOME), ("DSH_SHELL", "1")]);
    assert_eq!(env.get("DSH_SESSION_ID"), None);
}

#[tokio::test]
async fn collect_with_agent_adds_its_session_id() {
    let env = registry()
        .collect(&exec(Some(agent("session-a"))))
        .await
        .unwrap();
    assert_eq!(
        pairs(&env),
        [
            ("DSH_HOME", HOME),
            ("DSH_SESSION_ID", "session-a"),
            ("DSH_SHELL", "1")
        ]
    );
}

#[tokio::test]
async fn declared_key_left_out_is_absent() {
    let registry = registry();
    let _c = registry
        .register(fixed(
            "web",
            &["DSH_WEB_URL", "DSH_WEB_TOKEN_FILE"],
            &[("DSH_WEB_URL", "http://127.0.0.1:1")],
        ))
        .unwrap();
    let env = registry.collect(&exec(None)).await.unwrap();
    assert_eq!(env.get("DSH_WEB_URL"), Some("http://127.0.0.1:1"));
    assert!(!env.contains_key("DSH_WEB_TOKEN_FILE"));
    assert_eq!(env.len(), 3);
}

#[tokio::test]
async fn empty_value_is_present() {
    let registry = registry();
    let _c = registry
        .register(fixed("e", &["DSH_EMPTY"], &[("DSH_EMPTY", "")]))
        .unwrap();
    let env = registry.collect(&exec(None)).await.unwrap();
    assert_eq!(env.get("DSH_EMPTY"), Some(""));
}

#[tokio::test]
async fn async_resolver_answers_are_used() {
    let registry = registry();
    let _c = registry
        .register(later(
            "remote",
            &["DSH_REMOTE", "DSH_GONE"],
            json!({"DSH_REMOTE": "yes"}),
        ))
        .unwrap();
    let env = registry.collect(&exec(None)).await.unwrap();
    assert_eq!(env.get("DSH_REMOTE"), Some("yes"));
    assert!(!env.contains_key("DSH_GONE"));
}

#[tokio::test]
async fn undeclared_key_fails_naming_the_contributor() {
    let registry = registry();
    let _sync = registry
        .register(fixed(
            "drifted-provider",
            &["DSH_A"],
            &[("DSH_UNDECLARED", "x")],
        ))
        .unwrap();
    let err = registry.collect(&exec(None)).await.unwrap_err();
    assert_eq!(
        err,
        CollectError::UndeclaredKey {
            contributor: "drifted-provider".to_owned(),
            key: "DSH_UNDECLARED".to_owned()
        }
    );
    let msg = err.to_string();
    assert!(
        msg.contains("drifted-provider") && msg.contains("DSH_UNDECLARED"),
        "{msg}"
    );
    drop(_sync);

    let _async = registry
        .register(later("remote", &["DSH_A"], json!({"PATH": "/evil"})))
        .unwrap();
    assert_eq!(
        registry.collect(&exec(None)).await.unwrap_err(),
        CollectError::UndeclaredKey {
            contributor: "remote".to_owned(),
            key: "PATH".to_owned()
        }
    );
}

#[tokio::test]
async fn builtin_key_returned_by_a_contributor_is_undeclared() {
    let registry = registry();
    let _c = registry
        .register(fixed(
            "forger",
            &["DSH_A"],
            &[("DSH_SESSION_ID", "someone-else")],
        ))
        .unwrap();
    let err = registry
        .collect(&exec(Some(agent("me"))))
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        CollectError::UndeclaredKey { contributor, key }
            if contributor == "forger" && key == "DSH_SESSION_ID"
    ));
}

#[tokio::test]
async fn non_string_value_fails_naming_the_contributor_and_key() {
    for value in [
        json!(42),
        json!(null),
        json!(true),
        json!({"a": "b"}),
        json!(["x"]),
    ] {
        let registry = registry();
        let _c = registry
            .register(later("typed", &["DSH_NUM"], json!({ "DSH_NUM": value })))
            .unwrap();
        let err = registry.collect(&exec(None)).await.unwrap_err();
        assert_eq!(
            err,
            CollectError::NonStringValue {
                contributor: "typed".to_owned(),
                key: "DSH_NUM".to_owned()
            }
        );
        let msg = err.to_string();
        assert!(
            msg.contains(r#""typed""#) && msg.contains("non-string") && msg.contains("DSH_NUM"),
            "{msg}"
        );
    }
}

#[tokio::test]
async fn undeclared_key_is_checked_before_the_value_type() {
    let registry = registry();
    let _c = registry
        .register(later("typed", &["DSH_NUM"], json!({"DSH_OTHER": 42})))
        .unwrap();
    assert!(matches!(
        registry.collect(&exec(None)).await.unwrap_err(),
        CollectError::UndeclaredKey { .. }
    ));
}

#[tokio::test]
async fn resolver_error_fails_naming_the_contributor() {
    let registry = registry();
    let failing = Contributor::new("broken", Resolver::sync(|_| Err("disk on fire".to_owned())))
        .variable("DSH_A", "a");
    let guard = registry.register(failing).unwrap();
    let err = registry.collect(&exec(None)).await.unwrap_err();
    assert_eq!(
        err,
        CollectError::Failed {
            contributor: "broken".to_owned(),
            message: "disk on fire".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        r#"shell env contributor "broken" failed: disk on fire"#
    );
    drop(guard);

    let failing = Contributor::new(
        "remote",
        Resolver::asynchronous(Later(|| Err("client said no".to_owned()))),
    )
    .variable("DSH_A", "a");
    let _guard = registry.register(failing).unwrap();
    assert_eq!(
        registry.collect(&exec(None)).await.unwrap_err(),
        CollectError::Failed {
            contributor: "remote".to_owned(),
            message: "client said no".to_owned()
        }
    );
}

#[tokio::test]
async fn async_resolver_timeout_fails_naming_the_contributor() {
    let timeout = Duration::from_millis(30);
    let registry = ShellEnvRegistry::new(HOME.into(), timeout);
    assert_eq!(registry.resolve_timeout(), timeout);
    let _slow = registry
        .register(
            Contributor::new("slowpoke", Resolver::asynchronous(Never)).variable("DSH_A", "a"),
        )
        .unwrap();
    let err = registry.collect(&exec(None)).await.unwrap_err();
    assert_eq!(
        err,
        CollectError::TimedOut {
            contributor: "slowpoke".to_owned(),
            timeout
        }
    );
    assert!(
        err.to_string()
            .contains(r#""slowpoke" did not answer within 30ms"#),
        "{err}"
    );
}

#[tokio::test]
async fn cancelled_call_stops_waiting_for_an_async_resolver() {
    let registry = ShellEnvRegistry::new(HOME.into(), Duration::from_secs(3600));
    let _slow = registry
        .register(
            Contributor::new("slowpoke", Resolver::asynchronous(Never)).variable("DSH_A", "a"),
        )
        .unwrap();
    let call = exec(None);
    let cancel = call.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        cancel.cancel();
    });
    assert_eq!(
        registry.collect(&call).await.unwrap_err(),
        CollectError::Cancelled {
            contributor: "slowpoke".to_owned()
        }
    );
}

#[tokio::test]
async fn nul_in_value_is_refused_naming_the_contributor() {
    let registry = registry();
    let _c = registry
        .register(fixed("nul", &["DSH_A"], &[("DSH_A", "a\0b")]))
        .unwrap();
    assert_eq!(
        registry.collect(&exec(None)).await.unwrap_err(),
        CollectError::NulInValue {
            contributor: "nul".to_owned(),
            key: "DSH_A".to_owned()
        }
    );
}

#[tokio::test]
async fn failure_of_one_contributor_fails_the_whole_collection() {
    let registry = registry();
    let _good = registry
        .register(fixed("a-good", &["DSH_GOOD"], &[("DSH_GOOD", "1")]))
        .unwrap();
    let _bad = registry
        .register(fixed("b-bad", &["DSH_BAD"], &[("DSH_WORSE", "1")]))
        .unwrap();
    assert!(matches!(
        registry.collect(&exec(None)).await,
        Err(CollectError::UndeclaredKey { contributor, .. }) if contributor == "b-bad"
    ));
}

#[tokio::test]
async fn contributors_resolve_in_byte_order_of_their_names() {
    let registry = registry();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut guards = Vec::new();
    for (name, key) in [
        ("b", "DSH_B"),
        ("_", "DSH_U"),
        ("a", "DSH_A"),
        ("B", "DSH_BB"),
    ] {
        let order = order.clone();
        let contributor = Contributor::new(
            name,
            Resolver::sync(move |_| {
                order.lock().unwrap().push(name);
                Ok(BTreeMap::new())
            }),
        )
        .variable(key, "order probe");
        guards.push(registry.register(contributor).unwrap());
    }
    registry.collect(&exec(None)).await.unwrap();
    assert_eq!(*order.lock().unwrap(), ["B", "_", "a", "b"]);
}

#[test]
fn resolvers_run_outside_the_registry_lock() {
    let registry = registry();
    let inner = registry.clone();
    let reentrant = Contributor::new(
        "reentrant",
        Resolver::sync(move |_| {
            // Both a read and a write of the registry from inside a resolver.
            let listed = inner.list().len();
            let guard = inner
                .register(fixed("nested", &["DSH_NESTED"], &[]))
                .map_err(|e| e.to_string())?;
            drop(guard);
            Ok(BTreeMap::from([(
                "DSH_LISTED".to_owned(),
                listed.to_string(),
            )]))
        }),
    )
    .variable("DSH_LISTED", "how many keys the resolver saw");
    let _guard = registry.register(reentrant).unwrap();
    let (tx, rx) = mpsc::channel();
    let worker = registry.clone();
    std::thread::spawn(move || {
        let _ = tx.send(collect_blocking(&worker, &exec(None)));
    });
    let env = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("collect deadlocked: a resolver ran under the registry lock")
        .unwrap();
    assert_eq!(env.get("DSH_LISTED"), Some("4"));
    assert!(!registry.is_registered("nested"));
}

#[tokio::test]
async fn nothing_is_cached_across_calls() {
    let registry = registry();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let _c = registry
        .register(
            Contributor::new(
                "counter",
                Resolver::sync(move |_| {
                    let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok(BTreeMap::from([("DSH_COUNT".to_owned(), n.to_string())]))
                }),
            )
            .variable("DSH_COUNT", "calls so far"),
        )
        .unwrap();
    let first = registry.collect(&exec(None)).await.unwrap();
    let second = registry.collect(&exec(None)).await.unwrap();
    assert_eq!(first.get("DSH_COUNT"), Some("1"));
    assert_eq!(second.get("DSH_COUNT"), Some("2"));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    // A snapshot is a value: it does not change after the fact.
    assert_eq!(first.get("DSH_COUNT"), Some("1"));
    assert_eq!(first.clone().into_inner().len(), 3);
}

#[tokio::test]
async fn unregistered_contributor_is_not_asked_again() {
    let registry = registry();
    let guard = registry
        .register(fixed("web", &["DSH_WEB_URL"], &[("DSH_WEB_URL", "u")]))
        .unwrap();
    assert!(
        registry
            .collect(&exec(None))
            .await
            .unwrap()
            .contains_key("DSH_WEB_URL")
    );
    drop(guard);
    assert!(
        !registry
            .collect(&exec(None))
            .await
            .unwrap()
            .contains_key("DSH_WEB_URL")
    );
}

#[tokio::test]
async fn non_utf8_home_fails_every_collection_naming_it() {
    let home = PathBuf::from(OsStr::from_bytes(b"/home/\xff/.dsh"));
    let registry = ShellEnvRegistry::new(home.clone(), Duration::from_secs(1));
    let err = registry.collect(&exec(None)).await.unwrap_err();
    assert_eq!(err, CollectError::HomeNotUtf8 { home });
    assert!(err.to_string().contains("DSH_HOME"), "{err}");
    // list() does not depend on the home.
    assert_eq!(registry.list().len(), 3);
}

#[test]
fn collect_future_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let registry = registry();
    let call = exec(None);
    let future = registry.collect(&call);
    assert_send(&future);
}
