//! Support shared by the in-process benchmarks.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)] // Bench support: a failed step aborts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_core::{
    AgentRegistry, AgentServices, BackendKind, CheckpointPolicy, Event, ExecConfig, Executor,
    HookSettings, Hooks, ModelChoice, OpenAiConfig, OpenAiProvider, Persistence, PersistenceError,
    PersistenceHandle, ProviderFactory, SessionHeader, SessionId, SessionLocation, Skills,
    StoredSession, ToolSet,
};

/// A runtime like dshd's: multi-threaded with two workers.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A scratch directory for the bench's files and agents' working directory.
pub fn scratch() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dsh-bench-")
        .tempdir()
        .unwrap()
}

/// The scripted model replaying `script` (JSON text).
pub fn scripted(script: &str) -> ModelChoice {
    ModelChoice {
        provider: Some("scripted".into()),
        model: None,
        reasoning_effort: None,
        script: Some(script.to_owned()),
    }
}

/// A registry of scripted agents over `backend`, with no hook files and no tools (a call to any
/// tool is answered at once with an "unknown tool" error), as a default daemon would run them.
pub fn registry(
    backend: Arc<dyn Persistence>,
    policy: CheckpointPolicy,
    cwd: &Path,
    max_steps_per_turn: u32,
) -> Arc<AgentRegistry> {
    let handle = Arc::new(PersistenceHandle::new(backend));
    let executor = Arc::new(Executor::new(ExecConfig::default()).unwrap());
    // No hook files: the loop still asks the hook engine at every point, as in a default daemon.
    let hooks = Arc::new(Hooks::new(
        HookSettings::default(),
        executor.clone(),
        handle.clone(),
    ));
    let skills = Arc::new(Skills::new(cwd));
    let openai = OpenAiProvider::new(OpenAiConfig::default(), None).unwrap();
    let providers = ProviderFactory::new("scripted".into(), None, openai);
    AgentRegistry::new(providers, |_| {
        AgentServices::new(
            handle,
            executor,
            hooks,
            skills,
            policy,
            max_steps_per_turn,
            ToolSet::new(),
        )
    })
}

/// A backend that only counts what it is given: no I/O at all.
#[derive(Debug, Default)]
pub struct CountingBackend {
    stored: Mutex<HashMap<SessionId, u64>>,
}

#[async_trait::async_trait]
impl Persistence for CountingBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Jsonl
    }

    fn path(&self) -> PathBuf {
        PathBuf::from("/dev/null")
    }

    fn locate(&self, _header: &SessionHeader) -> Option<SessionLocation> {
        None
    }

    async fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        Ok(self.stored.lock().unwrap().get(id).copied())
    }

    async fn append(
        &self,
        header: &SessionHeader,
        events: &[Event],
    ) -> Result<(), PersistenceError> {
        *self
            .stored
            .lock()
            .unwrap()
            .entry(header.id.clone())
            .or_default() += events.len() as u64;
        Ok(())
    }

    async fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        Err(PersistenceError::NotFound(id.clone()))
    }

    async fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        Err(PersistenceError::NotFound(id.clone()))
    }

    async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        Ok(Vec::new())
    }

    async fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        match self.stored.lock().unwrap().remove(id) {
            Some(_) => Ok(()),
            None => Err(PersistenceError::NotFound(id.clone())),
        }
    }
}
