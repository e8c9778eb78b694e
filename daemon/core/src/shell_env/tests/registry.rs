//! Registration: refusals, their order, guards, and `list()`.

use super::*;
use crate::shell_env::{BUILTIN_CONTRIBUTOR, KeyError, RegisterError, VariableInfo};

fn keys(registry: &ShellEnvRegistry) -> Vec<(String, String)> {
    registry
        .list()
        .into_iter()
        .map(|v| (v.key.to_string(), v.contributor))
        .collect()
}

#[test]
fn blank_name_is_refused() {
    let registry = registry();
    for name in ["", " ", "\t\n "] {
        let err = registry.register(fixed(name, &["DSH_A"], &[])).unwrap_err();
        assert_eq!(err, RegisterError::BlankName);
        assert_eq!(
            err.to_string(),
            "shell env contributor name must be non-empty"
        );
    }
}

#[test]
fn duplicate_name_is_refused() {
    let registry = registry();
    let _first = registry.register(fixed("web", &["DSH_A"], &[])).unwrap();
    let err = registry
        .register(fixed("web", &["DSH_B"], &[]))
        .unwrap_err();
    assert_eq!(
        err,
        RegisterError::DuplicateName {
            name: "web".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        r#"shell env contributor "web" is already registered"#
    );
    // Names are compared exactly: no trimming, no case folding.
    let _spaced = registry.register(fixed(" web", &["DSH_C"], &[])).unwrap();
    let _upper = registry.register(fixed("WEB", &["DSH_D"], &[])).unwrap();
}

#[test]
fn builtin_name_is_refused() {
    let err = registry()
        .register(fixed(BUILTIN_CONTRIBUTOR, &["DSH_A"], &[]))
        .unwrap_err();
    assert!(matches!(err, RegisterError::DuplicateName { name } if name == "builtin"));
}

#[test]
fn malformed_key_is_refused() {
    let registry = registry();
    for (key, reason) in [
        ("dsh_invalid", KeyError::MissingPrefix),
        ("DSH_", KeyError::EmptySuffix),
        ("DSH_1X", KeyError::BadFirst('1')),
        ("DSH__A", KeyError::BadFirst('_')),
        ("DSH_É", KeyError::BadFirst('É')),
        ("DSH_A-B", KeyError::BadChar('-')),
    ] {
        let err = registry.register(fixed("bad", &[key], &[])).unwrap_err();
        let msg = err.to_string();
        assert_eq!(
            err,
            RegisterError::InvalidKey {
                contributor: "bad".to_owned(),
                key: key.to_owned(),
                reason,
            }
        );
        assert!(
            msg.contains(r#"contributor "bad" declared invalid key"#),
            "{msg}"
        );
        assert!(msg.contains(&format!("{key:?}")), "{msg}");
    }
}

#[test]
fn reserved_key_is_refused() {
    let registry = registry();
    for key in ["DSH_HOME", "DSH_SHELL", "DSH_SESSION_ID"] {
        let err = registry.register(fixed("thief", &[key], &[])).unwrap_err();
        assert_eq!(
            err,
            RegisterError::ReservedKey {
                contributor: "thief".to_owned(),
                key: key.to_owned()
            }
        );
        assert_eq!(
            err.to_string(),
            format!(r#"shell env contributor "thief" cannot own reserved key "{key}""#)
        );
    }
}

#[test]
fn blank_description_is_refused() {
    let registry = registry();
    for description in ["", "  ", "\n"] {
        let contributor = Contributor::new("mute", Resolver::sync(|_| Ok(BTreeMap::new())))
            .variable("DSH_A", description);
        let err = registry.register(contributor).unwrap_err();
        assert_eq!(
            err,
            RegisterError::BlankDescription {
                contributor: "mute".to_owned(),
                key: "DSH_A".to_owned()
            }
        );
        assert_eq!(
            err.to_string(),
            r#"shell env contributor "mute" must describe "DSH_A""#
        );
    }
}

#[test]
fn key_owned_by_another_contributor_is_refused() {
    let registry = registry();
    let _owner = registry
        .register(fixed("first", &["DSH_SHARED"], &[]))
        .unwrap();
    let err = registry
        .register(fixed("second", &["DSH_SHARED"], &[]))
        .unwrap_err();
    assert_eq!(
        err,
        RegisterError::KeyOwned {
            key: "DSH_SHARED".to_owned(),
            owner: "first".to_owned(),
            contributor: "second".to_owned()
        }
    );
    assert_eq!(
        err.to_string(),
        r#"shell env key "DSH_SHARED" is already owned by contributor "first"; contributor "second" cannot also own it"#
    );
}

#[test]
fn checks_run_in_the_documented_order() {
    let registry = registry();
    let _taken = registry
        .register(fixed("taken", &["DSH_OWNED"], &[]))
        .unwrap();
    // A blank name wins over a bad key.
    assert_eq!(
        registry.register(fixed(" ", &["bad"], &[])).unwrap_err(),
        RegisterError::BlankName
    );
    // A duplicate name wins over a bad key.
    assert!(matches!(
        registry
            .register(fixed("taken", &["bad"], &[]))
            .unwrap_err(),
        RegisterError::DuplicateName { .. }
    ));
    // Keys are checked in key order, all checks for one key before the next key: DSH_HOME
    // (reserved) sorts before DSH_OWNED (owned).
    assert!(matches!(
        registry
            .register(fixed("x", &["DSH_OWNED", "DSH_HOME"], &[]))
            .unwrap_err(),
        RegisterError::ReservedKey { key, .. } if key == "DSH_HOME"
    ));
    // Within one key, the pattern is checked before the description.
    let contributor =
        Contributor::new("x", Resolver::sync(|_| Ok(BTreeMap::new()))).variable("DSH_a", " ");
    assert!(matches!(
        registry.register(contributor).unwrap_err(),
        RegisterError::InvalidKey { .. }
    ));
    // ...and the description before ownership.
    let contributor =
        Contributor::new("x", Resolver::sync(|_| Ok(BTreeMap::new()))).variable("DSH_OWNED", "");
    assert!(matches!(
        registry.register(contributor).unwrap_err(),
        RegisterError::BlankDescription { .. }
    ));
}

#[test]
fn refused_registration_leaves_no_trace() {
    let registry = registry();
    let _owner = registry
        .register(fixed("owner", &["DSH_OWNED"], &[]))
        .unwrap();
    let before = registry.list();
    // Each refusal comes after DSH_A (a good key) has been checked, so a half-applied
    // registration would show up as DSH_A being owned.
    let refused = [
        untouchable("newcomer", "DSH_A").variable("DSH_Z-1", "bad key"),
        untouchable("newcomer", "DSH_A").variable("DSH_SHELL", "reserved"),
        untouchable("newcomer", "DSH_A").variable("DSH_B", " "),
        untouchable("newcomer", "DSH_A").variable("DSH_OWNED", "owned"),
    ];
    for contributor in refused {
        registry.register(contributor).unwrap_err();
        assert_eq!(registry.list(), before);
        assert!(!registry.is_registered("newcomer"));
        let again = registry
            .register(fixed("newcomer", &["DSH_A", "DSH_B"], &[]))
            .unwrap();
        drop(again);
    }
    assert_eq!(registry.list(), before);
}

#[test]
fn zero_variable_contributor_occupies_its_name() {
    let registry = registry();
    let _quiet = registry.register(fixed("quiet", &[], &[])).unwrap();
    assert!(registry.is_registered("quiet"));
    assert!(matches!(
        registry.register(fixed("quiet", &[], &[])).unwrap_err(),
        RegisterError::DuplicateName { .. }
    ));
}

#[test]
fn dropping_the_guard_removes_the_registration() {
    let registry = registry();
    let guard = registry
        .register(fixed("web", &["DSH_WEB_URL"], &[]))
        .unwrap();
    assert_eq!(guard.name(), "web");
    assert!(guard.is_active());
    assert!(keys(&registry).contains(&("DSH_WEB_URL".to_owned(), "web".to_owned())));
    drop(guard);
    assert!(!registry.is_registered("web"));
    assert!(!keys(&registry).iter().any(|(k, _)| k == "DSH_WEB_URL"));
    // Name and key are free again.
    let _other = registry
        .register(fixed("other", &["DSH_WEB_URL"], &[]))
        .unwrap();
    let _web = registry.register(fixed("web", &[], &[])).unwrap();
}

#[test]
fn unregister_is_idempotent() {
    let registry = registry();
    let guard = registry
        .register(fixed("web", &["DSH_WEB_URL"], &[]))
        .unwrap();
    assert!(guard.unregister());
    assert!(!guard.is_active());
    assert!(!guard.unregister());
    assert!(!registry.is_registered("web"));
    drop(guard);
}

#[test]
fn stale_guard_does_not_remove_a_newer_registration() {
    let registry = registry();
    let stale = registry
        .register(fixed("web", &["DSH_WEB_URL"], &[]))
        .unwrap();
    assert!(stale.unregister());
    let newer = registry
        .register(fixed("web", &["DSH_WEB_URL"], &[]))
        .unwrap();
    assert!(!stale.unregister());
    drop(stale);
    assert!(newer.is_active());
    assert!(keys(&registry).contains(&("DSH_WEB_URL".to_owned(), "web".to_owned())));
    drop(newer);
    assert!(!registry.is_registered("web"));
}

#[test]
fn guard_outliving_the_registry_is_harmless() {
    let registry = registry();
    let guard = registry
        .register(fixed("web", &["DSH_WEB_URL"], &[]))
        .unwrap();
    drop(registry);
    assert!(!guard.is_active());
    assert!(!guard.unregister());
    drop(guard);
}

#[test]
fn list_includes_builtins_sorted_and_runs_no_resolver() {
    let registry = registry();
    let _zeta = registry
        .register(untouchable("zeta", "DSH_A_FIRST"))
        .unwrap();
    let _alpha = registry
        .register(
            untouchable("alpha", "DSH_ZZ")
                .variable("DSH_SESSION_JSONL", "transcript")
                .variable("DSH_HOMEWORK", "sorts after DSH_HOME"),
        )
        .unwrap();
    let _remote = registry
        .register(
            Contributor::new("remote", Resolver::asynchronous(Never)).variable("DSH_R", "remote"),
        )
        .unwrap();
    let list = registry.list();
    let got: Vec<(&str, &str)> = list
        .iter()
        .map(|v| (v.key.as_str(), v.contributor.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("DSH_A_FIRST", "zeta"),
            ("DSH_HOME", "builtin"),
            ("DSH_HOMEWORK", "alpha"),
            ("DSH_R", "remote"),
            ("DSH_SESSION_ID", "builtin"),
            ("DSH_SESSION_JSONL", "alpha"),
            ("DSH_SHELL", "builtin"),
            ("DSH_ZZ", "alpha"),
        ]
    );
    assert!(list.contains(&VariableInfo {
        key: "DSH_HOMEWORK".parse().unwrap(),
        contributor: "alpha".to_owned(),
        description: "sorts after DSH_HOME".to_owned(),
    }));
    for info in &list {
        assert!(!info.description.trim().is_empty() && !info.description.contains('\n'));
    }
}

#[test]
fn empty_registry_lists_only_the_builtins() {
    let got: Vec<String> = keys(&registry()).into_iter().map(|(k, _)| k).collect();
    assert_eq!(got, ["DSH_HOME", "DSH_SESSION_ID", "DSH_SHELL"]);
}
