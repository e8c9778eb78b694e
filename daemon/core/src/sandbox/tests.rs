use std::path::{Path, PathBuf};

use super::plan::new as plan_of;
use super::plan::{MIN_FS_ABI, MIN_NET_ABI, canonical, check_exposure, needed_abi, resolve};
use super::*;

fn policy(mode: SandboxMode, network: Network) -> SandboxPolicy {
    SandboxPolicy { mode, network }
}

#[test]
fn the_needed_abi_follows_the_policy_and_the_configured_floor() {
    let ww = policy(SandboxMode::WorkspaceWrite, Network::On);
    let offline = policy(SandboxMode::Off, Network::Off);
    assert_eq!(needed_abi(&ww, None).0, MIN_FS_ABI);
    assert_eq!(needed_abi(&offline, None).0, MIN_NET_ABI);
    assert_eq!(needed_abi(&ww, Some(6)).0, 6);
    assert_eq!(needed_abi(&offline, Some(1)).0, MIN_NET_ABI);
    assert!(!SandboxPolicy::UNCONFINED.is_confined());
    assert!(offline.is_confined());
}

fn settings(home: &Path) -> SandboxSettings {
    SandboxSettings {
        protected: vec![home.to_owned()],
        ..SandboxSettings::default()
    }
}

/// Fails closed: an ABI below the policy's, no Landlock at all, or an ABI this build does not
/// know, each refused with what is missing and how to run unconfined.
#[test]
fn an_unenforceable_policy_is_refused_naming_what_is_missing() {
    let tmp = tempfile::tempdir().unwrap();
    let ww = policy(SandboxMode::WorkspaceWrite, Network::Off);
    let s = settings(&tmp.path().join("home"));
    for support in [
        LandlockSupport::Abi(3),
        LandlockSupport::NotImplemented,
        LandlockSupport::NotEnabled,
    ] {
        let err = plan_of(&ww, &s, support, tmp.path(), None).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("needs Landlock ABI 4"), "{text}");
        assert!(text.contains(&support.to_string()), "{text}");
        assert!(text.contains("nothing was run"), "{text}");
        assert!(text.contains("sandbox mode \"off\""), "{text}");
    }
    let high = SandboxSettings {
        landlock_abi: Some(KNOWN_ABI + 1),
        ..s
    };
    let err = plan_of(&ww, &high, LandlockSupport::Abi(99), tmp.path(), None).unwrap_err();
    assert!(err.to_string().contains("knows ABIs up to"), "{err}");
}

/// The home can never become writable: not as the workspace, not inside it, not through a link
/// or a `..` spelling, and not when it does not exist yet.
#[test]
fn a_writable_root_may_neither_contain_nor_lie_inside_a_protected_path() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(home.join("sessions")).unwrap();
    let ww = policy(SandboxMode::WorkspaceWrite, Network::On);
    let s = settings(&home);
    let support = LandlockSupport::Abi(7);
    let exposed = |workspace: &Path| {
        matches!(
            plan_of(&ww, &s, support, workspace, None),
            Err(SandboxError::Exposed { .. })
        )
    };
    assert!(exposed(tmp.path()), "a workspace holding the home");
    assert!(
        exposed(&home.join("sessions")),
        "a workspace inside the home"
    );
    std::os::unix::fs::symlink(&home, tmp.path().join("link")).unwrap();
    assert!(exposed(&tmp.path().join("link")), "a link to the home");
    assert!(exposed(&tmp.path().join("link/../home/sessions")), "dots");

    let extra = SandboxSettings {
        writable_roots: vec![tmp.path().join("link")],
        ..s.clone()
    };
    std::fs::create_dir_all(tmp.path().join("work")).unwrap();
    let err = plan_of(&ww, &extra, support, &tmp.path().join("work"), None).unwrap_err();
    assert!(err.to_string().contains("cannot keep"), "{err}");

    let future_home = tmp.path().join("work/not-yet/home");
    assert_eq!(
        resolve(&future_home),
        tmp.path().canonicalize().unwrap().join("work/not-yet/home")
    );
    assert!(check_exposure(&tmp.path().join("work"), false, &[resolve(&future_home)]).is_err());
    assert!(check_exposure(Path::new("/a/b"), false, &[PathBuf::from("/a/bc")]).is_ok());
}

/// The one-walk answer of `canonical` and `resolve` is the slow way's on every kind of path: a
/// link anywhere on it (the last component, a middle one, a dangling one), dots, a missing tail,
/// a file where a directory should be, and a relative path.
#[test]
fn resolving_without_links_agrees_with_canonicalize() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    std::fs::create_dir_all(base.join("real/sub")).unwrap();
    std::fs::write(base.join("real/file"), "").unwrap();
    std::os::unix::fs::symlink(base.join("real"), base.join("link")).unwrap();
    std::os::unix::fs::symlink(base.join("real/sub"), base.join("real/sublink")).unwrap();
    std::os::unix::fs::symlink(base.join("gone"), base.join("dangling")).unwrap();
    let existing = [
        "real",
        "real/sub",
        "real/file",
        "link",
        "link/sub",
        "real/sublink",
        "real/./sub",
        "real/sub/..",
        "link/sub/../file",
        "real//sub/",
    ];
    for name in existing {
        let path = base.join(name);
        assert_eq!(
            canonical(&path).unwrap(),
            path.canonicalize().unwrap(),
            "{name}"
        );
    }
    for name in ["missing", "real/missing", "dangling", "real/file/below"] {
        assert!(canonical(&base.join(name)).is_err(), "{name}");
    }
    assert_eq!(
        canonical(Path::new(".")).unwrap(),
        Path::new(".").canonicalize().unwrap()
    );

    let real = base.join("real");
    for (name, expected) in [
        ("real/sub", real.join("sub")),
        ("real/not/yet", real.join("not/yet")),
        ("link/not/yet", real.join("not/yet")),
        ("real/sublink/x", real.join("sub/x")),
        ("dangling/x", base.join("dangling/x")),
        ("real/file/below", real.join("file/below")),
        ("link/../real/sub", real.join("sub")),
    ] {
        assert_eq!(resolve(&base.join(name)), expected, "{name}");
    }
}

/// The private temporary directory is dshd's own, made fresh: it may lie inside the protected
/// home (`<home>/run/sandbox/...`), but never contain a protected path.
#[test]
fn the_temporary_directory_may_lie_inside_the_home_but_not_hold_it() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let private = home.join("run/sandbox/agent");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::create_dir_all(tmp.path().join("work")).unwrap();
    let ro = policy(SandboxMode::ReadOnly, Network::On);
    let s = settings(&home);
    let support = LandlockSupport::Abi(7);
    let plan = plan_of(&ro, &s, support, &tmp.path().join("work"), Some(&private)).unwrap();
    assert_eq!(plan.tmp, Some(private.canonicalize().unwrap()));
    assert_eq!(plan.kernel_abi, 7);
    assert!(matches!(
        plan_of(&ro, &s, support, &tmp.path().join("work"), Some(tmp.path())),
        Err(SandboxError::Exposed { .. })
    ));
}
