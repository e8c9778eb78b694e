//! The shipped contributors, against a private persistence double.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

use super::*;
use crate::persistence::{
    BackendKind, Persistence, PersistenceError, PersistenceHandle, SessionLocation, StoredSession,
};
use crate::shell_env::builtin::{
    DAEMON, DSH_AGENT_DEPTH, DSH_PARENT_SESSION_ID, DSH_ROOT_SESSION_ID, DSH_SESSION_JSONL,
    DSH_SOCKET, DSH_TOOL_CALL_ID, DSH_TURN, LINEAGE, SESSION_PERSISTENCE, TOOL_CALL,
};
use crate::shell_env::{CollectError, RegisterError, Registration, register_builtins};
use dsh_session::Event;

const SOCKET: &str = "/run/user/1000/dsh/dshd.sock";

/// A backend that only answers `locate`: `kind` `None` means "no honest per-session file".
#[derive(Debug)]
struct Locator {
    kind: Option<&'static str>,
    root: PathBuf,
}

impl Locator {
    fn jsonl(root: &str) -> Arc<Self> {
        Arc::new(Self {
            kind: Some("jsonl"),
            root: root.into(),
        })
    }

    fn kind(kind: Option<&'static str>) -> Arc<Self> {
        Arc::new(Self {
            kind,
            root: "/db".into(),
        })
    }
}

fn unsupported() -> PersistenceError {
    PersistenceError::Config("test double: only locate is implemented".to_owned())
}

#[async_trait::async_trait]
impl Persistence for Locator {
    fn kind(&self) -> BackendKind {
        if self.kind == Some("jsonl") {
            BackendKind::Jsonl
        } else {
            BackendKind::Sqlite
        }
    }

    fn path(&self) -> PathBuf {
        self.root.clone()
    }

    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        self.kind.map(|kind| SessionLocation {
            kind,
            path: self.root.join(header.id.as_str()).join("session.jsonl"),
            database: None,
        })
    }

    async fn stored_len(&self, _id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        Err(unsupported())
    }

    async fn append(
        &self,
        _header: &SessionHeader,
        _events: &[Event],
    ) -> Result<(), PersistenceError> {
        Err(unsupported())
    }

    async fn load(&self, _id: &SessionId) -> Result<StoredSession, PersistenceError> {
        Err(unsupported())
    }

    async fn inspect(&self, _id: &SessionId) -> Result<StoredSession, PersistenceError> {
        Err(unsupported())
    }

    async fn delete(&self, _id: &SessionId) -> Result<(), PersistenceError> {
        Err(unsupported())
    }

    async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        Err(unsupported())
    }
}

fn shipped(
    backend: Arc<dyn Persistence>,
) -> (ShellEnvRegistry, Arc<PersistenceHandle>, Vec<Registration>) {
    let registry = registry();
    let handle = Arc::new(PersistenceHandle::new(backend));
    let guards = register_builtins(&registry, handle.clone(), SOCKET.into()).unwrap();
    (registry, handle, guards)
}

#[tokio::test]
async fn shipped_collect_without_agent() {
    let (registry, _handle, _guards) = shipped(Locator::jsonl("/sessions"));
    let env = registry.collect(&exec(None)).await.unwrap();
    let got: Vec<(&str, &str)> = env.iter().collect();
    assert_eq!(
        got,
        [
            ("DSH_HOME", HOME),
            ("DSH_SHELL", "1"),
            ("DSH_SOCKET", SOCKET),
            ("DSH_TOOL_CALL_ID", "call-1"),
        ]
    );
}

#[tokio::test]
async fn shipped_collect_with_a_child_agent_inside_a_turn() {
    let (registry, _handle, _guards) = shipped(Locator::jsonl("/sessions"));
    let mut call = exec(Some(child("kid", "parent", "root")));
    call.turn = Some(3);
    call.step = Some(1);
    let env = registry.collect(&call).await.unwrap();
    let got: Vec<(&str, &str)> = env.iter().collect();
    assert_eq!(
        got,
        [
            (DSH_AGENT_DEPTH, "1"),
            ("DSH_HOME", HOME),
            (DSH_PARENT_SESSION_ID, "parent"),
            (DSH_ROOT_SESSION_ID, "root"),
            ("DSH_SESSION_ID", "kid"),
            (DSH_SESSION_JSONL, "/sessions/kid/session.jsonl"),
            ("DSH_SHELL", "1"),
            (DSH_SOCKET, SOCKET),
            (DSH_TOOL_CALL_ID, "call-1"),
            (DSH_TURN, "3"),
        ]
    );
}

#[tokio::test]
async fn shipped_collect_with_a_top_level_agent_outside_a_turn() {
    let (registry, _handle, _guards) = shipped(Locator::jsonl("/sessions"));
    let env = registry.collect(&exec(Some(agent("top")))).await.unwrap();
    assert_eq!(env.get("DSH_SESSION_ID"), Some("top"));
    assert_eq!(env.get(DSH_ROOT_SESSION_ID), Some("top"));
    assert_eq!(env.get(DSH_AGENT_DEPTH), Some("0"));
    assert_eq!(env.get(DSH_PARENT_SESSION_ID), None);
    assert_eq!(env.get(DSH_TURN), None);
}

#[tokio::test]
async fn session_jsonl_absent_when_locate_answers_none() {
    let (registry, _handle, _guards) = shipped(Locator::kind(None));
    let env = registry.collect(&exec(Some(agent("s")))).await.unwrap();
    assert_eq!(env.get("DSH_SESSION_ID"), Some("s"));
    assert!(!env.contains_key(DSH_SESSION_JSONL));
}

#[tokio::test]
async fn session_jsonl_absent_for_another_kind_with_a_path() {
    let (registry, _handle, _guards) = shipped(Locator::kind(Some("sqlite")));
    let env = registry.collect(&exec(Some(agent("s")))).await.unwrap();
    assert!(!env.contains_key(DSH_SESSION_JSONL));
}

#[tokio::test]
async fn session_jsonl_follows_a_backend_swap_on_the_next_call() {
    let (registry, handle, _guards) = shipped(Locator::jsonl("/one"));
    let call = exec(Some(agent("s")));
    let first = registry.collect(&call).await.unwrap();
    assert_eq!(first.get(DSH_SESSION_JSONL), Some("/one/s/session.jsonl"));
    handle.swap(Locator::kind(None));
    assert!(
        !registry
            .collect(&call)
            .await
            .unwrap()
            .contains_key(DSH_SESSION_JSONL)
    );
    handle.swap(Locator::jsonl("/two"));
    assert_eq!(
        registry
            .collect(&call)
            .await
            .unwrap()
            .get(DSH_SESSION_JSONL),
        Some("/two/s/session.jsonl")
    );
    // The first snapshot is unaffected by later swaps.
    assert_eq!(first.get(DSH_SESSION_JSONL), Some("/one/s/session.jsonl"));
}

#[tokio::test]
async fn non_utf8_paths_fail_naming_the_contributor() {
    let registry = registry();
    let handle = Arc::new(PersistenceHandle::new(Arc::new(Locator {
        kind: Some("jsonl"),
        root: PathBuf::from(OsStr::from_bytes(b"/s\xff")),
    })));
    let socket = PathBuf::from(OsStr::from_bytes(b"/run/\xfe.sock"));
    let _guards = register_builtins(&registry, handle, socket).unwrap();
    // Without an agent the transcript is not asked for, so the socket fails first.
    assert!(matches!(
        registry.collect(&exec(None)).await.unwrap_err(),
        CollectError::Failed { contributor, message }
            if contributor == DAEMON && message.contains("not valid UTF-8")
    ));
    // Byte order of names: "daemon" < "lineage" < "session-persistence" < "tool-call".
    assert!(matches!(
        registry.collect(&exec(Some(agent("s")))).await.unwrap_err(),
        CollectError::Failed { contributor, .. } if contributor == DAEMON
    ));
}

#[tokio::test]
async fn non_utf8_transcript_path_fails_naming_session_persistence() {
    let handle = Arc::new(PersistenceHandle::new(Arc::new(Locator {
        kind: Some("jsonl"),
        root: PathBuf::from(OsStr::from_bytes(b"/s\xff")),
    })));
    let registry = registry();
    let _guards = register_builtins(&registry, handle, SOCKET.into()).unwrap();
    assert!(registry.collect(&exec(None)).await.is_ok());
    assert!(matches!(
        registry.collect(&exec(Some(agent("s")))).await.unwrap_err(),
        CollectError::Failed { contributor, .. } if contributor == SESSION_PERSISTENCE
    ));
}

#[test]
fn shipped_declarations_are_listed_with_one_line_descriptions() {
    let (registry, _handle, guards) = shipped(Locator::jsonl("/sessions"));
    let names: Vec<&str> = guards.iter().map(Registration::name).collect();
    assert_eq!(names, [SESSION_PERSISTENCE, LINEAGE, TOOL_CALL, DAEMON]);
    let list = registry.list();
    let got: Vec<(&str, &str)> = list
        .iter()
        .map(|v| (v.key.as_str(), v.contributor.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (DSH_AGENT_DEPTH, LINEAGE),
            ("DSH_HOME", "builtin"),
            (DSH_PARENT_SESSION_ID, LINEAGE),
            (DSH_ROOT_SESSION_ID, LINEAGE),
            ("DSH_SESSION_ID", "builtin"),
            (DSH_SESSION_JSONL, SESSION_PERSISTENCE),
            ("DSH_SHELL", "builtin"),
            (DSH_SOCKET, DAEMON),
            (DSH_TOOL_CALL_ID, TOOL_CALL),
            (DSH_TURN, TOOL_CALL),
        ]
    );
    for info in &list {
        assert!(!info.description.trim().is_empty(), "{}", info.key);
        assert!(!info.description.contains('\n'), "{}", info.key);
    }
    drop(guards);
    assert_eq!(registry.list().len(), 3);
}

#[test]
fn register_builtins_is_all_or_nothing() {
    let registry = registry();
    let _squatter = registry
        .register(fixed("squatter", &[DSH_SOCKET], &[]))
        .unwrap();
    let handle = Arc::new(PersistenceHandle::new(Locator::jsonl("/s")));
    let err = register_builtins(&registry, handle, SOCKET.into()).unwrap_err();
    assert_eq!(
        err,
        RegisterError::KeyOwned {
            key: DSH_SOCKET.to_owned(),
            owner: "squatter".to_owned(),
            contributor: DAEMON.to_owned()
        }
    );
    for name in [SESSION_PERSISTENCE, LINEAGE, TOOL_CALL, DAEMON] {
        assert!(!registry.is_registered(name), "{name} left behind");
    }
    assert_eq!(registry.list().len(), 4);
}

#[test]
fn concurrent_collects_each_see_only_their_own_session() {
    let (registry, _handle, _guards) = shipped(Locator::jsonl("/sessions"));
    let threads: Vec<_> = (0..8)
        .map(|t| {
            let registry = registry.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap();
                let me = format!("agent-{t}");
                let mut call = exec(Some(child(
                    &me,
                    &format!("parent-{t}"),
                    &format!("root-{t}"),
                )));
                call.call_id = format!("call-{t}");
                let transcript = format!("/sessions/{me}/session.jsonl");
                for _ in 0..1000 {
                    let env = runtime.block_on(registry.collect(&call)).unwrap();
                    assert_eq!(env.get("DSH_SESSION_ID"), Some(me.as_str()));
                    assert_eq!(env.get(DSH_SESSION_JSONL), Some(transcript.as_str()));
                    assert_eq!(
                        env.get(DSH_ROOT_SESSION_ID),
                        Some(format!("root-{t}").as_str())
                    );
                    assert_eq!(env.get(DSH_TOOL_CALL_ID), Some(call.call_id.as_str()));
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
}
