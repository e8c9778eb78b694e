//! `dsh.v1.Persistence`: the active backend, swapping it, and reading sessions.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsh_proto::v1::{self, persistence_server};
use tonic::{Request, Response, Status};

use super::convert::{agent_status, choice_status, event, header, persistence_status, session_id};
use super::session_list;
use crate::backends::{Backends, UseError};
use dsh_core::{
    AgentRegistry, BackendKind, Event, Persistence, PersistenceError, SessionHeader, SessionId,
    SessionMeta, StoredSession,
};

/// The `Persistence` service.
pub struct PersistenceService {
    /// The active backend and switching it.
    backends: Arc<Backends>,
    /// Live agents: their sessions are read from memory, not the backend.
    agents: Arc<AgentRegistry>,
}

impl PersistenceService {
    /// A service over `backends`, reading live sessions from `agents`.
    pub fn new(backends: Arc<Backends>, agents: Arc<AgentRegistry>) -> Self {
        Self { backends, agents }
    }

    fn describe(&self) -> v1::BackendDescription {
        describe(self.backends.handle().backend().as_ref())
    }

    /// A live session's header and events, or the stored ones (read-only, never repaired).
    async fn session(&self, id: &SessionId) -> Result<(SessionHeader, Option<Vec<Event>>), Status> {
        if let Ok(agent) = self.agents.get(id) {
            return Ok((agent.header().as_ref().clone(), None));
        }
        let stored = inspect(self.backends.handle().backend(), id.clone()).await?;
        Ok((stored.header, Some(stored.events)))
    }
}

fn metadata(id: &SessionId, meta: SessionMeta) -> v1::SessionMetadata {
    v1::SessionMetadata {
        session_id: id.as_str().to_owned(),
        title: meta.title.unwrap_or_default(),
        archived: meta.archived,
    }
}

fn describe(backend: &dyn Persistence) -> v1::BackendDescription {
    description(backend.kind(), &backend.path())
}

fn description(kind: BackendKind, path: &Path) -> v1::BackendDescription {
    v1::BackendDescription {
        name: kind.as_str().to_owned(),
        path: path.to_string_lossy().into_owned(),
    }
}

/// A refused `Use`. The location is the request's own here, so a location that cannot hold the
/// backend or cannot be read is INVALID_ARGUMENT naming the field; everything else maps as
/// anywhere.
fn use_status(field: &str, error: UseError) -> Status {
    match error {
        UseError::Persistence(
            e @ (PersistenceError::Io { .. }
            | PersistenceError::Sqlite { .. }
            | PersistenceError::BadLocation { .. }),
        ) => Status::invalid_argument(format!("{field}: {e}")),
        // A connection string that does not parse (the message never repeats it).
        UseError::Persistence(e @ PersistenceError::Config(_)) if field == "postgres.url" => {
            Status::invalid_argument(e.to_string())
        }
        UseError::Persistence(other) => persistence_status(other),
        error @ UseError::PasswordInUrl => Status::invalid_argument(error.to_string()),
        UseError::Choice(error) => {
            let status = choice_status(error);
            Status::new(
                status.code(),
                format!("the backend was not changed: {}", status.message()),
            )
        }
    }
}

async fn inspect(backend: Arc<dyn Persistence>, id: SessionId) -> Result<StoredSession, Status> {
    backend.inspect(&id).await.map_err(persistence_status)
}

fn absolute(field: &str, value: String) -> Result<Option<PathBuf>, Status> {
    if value.is_empty() {
        return Ok(None);
    }
    let path = PathBuf::from(&value);
    if !path.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "{field}: {value:?} is not an absolute path"
        )));
    }
    Ok(Some(dsh_core::home::normalize(&path)))
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl persistence_server::Persistence for PersistenceService {
    type ReadEventsStream = super::agents::EventStream;
    type ExportStream = super::transfer::ExportStream;

    async fn describe(
        &self,
        _request: Request<v1::DescribeBackendRequest>,
    ) -> Reply<v1::BackendDescription> {
        Ok(Response::new(self.describe()))
    }

    async fn r#use(
        &self,
        request: Request<v1::UseBackendRequest>,
    ) -> Reply<v1::BackendDescription> {
        let mut url = None;
        let (kind, field, path) = match request.into_inner().backend {
            Some(v1::use_backend_request::Backend::Jsonl(j)) => (
                BackendKind::Jsonl,
                "jsonl.root",
                absolute("jsonl.root", j.root)?,
            ),
            Some(v1::use_backend_request::Backend::Sqlite(s)) => (
                BackendKind::Sqlite,
                "sqlite.path",
                absolute("sqlite.path", s.path)?,
            ),
            Some(v1::use_backend_request::Backend::Postgres(p)) => {
                url = (!p.url.is_empty()).then(|| dsh_core::SecretUrl::new(p.url));
                (BackendKind::Postgres, "postgres.url", None)
            }
            None => {
                return Err(Status::invalid_argument(
                    "backend: give jsonl, sqlite or postgres",
                ));
            }
        };
        let selected = match kind {
            BackendKind::Postgres => self.backends.use_postgres(url).await,
            _ => self.backends.use_backend(kind, path).await,
        }
        .map_err(|error| use_status(field, error))?;
        let description = describe(selected.backend.as_ref());
        if selected.changed {
            tracing::info!(backend = %description.name, path = %description.path, "persistence backend swapped");
        } else {
            tracing::info!(backend = %description.name, path = %description.path, "persistence backend selected again; it was active already");
        }
        Ok(Response::new(description))
    }

    async fn locate(&self, request: Request<v1::LocateRequest>) -> Reply<v1::LocateResponse> {
        let id = session_id("session_id", request.into_inner().session_id)?;
        let location = match self.agents.get(&id) {
            Ok(agent) => self.backends.handle().locate(agent.header()),
            Err(_) => {
                // A stored session: its header alone, whatever the length of its log, and read
                // once (headers never change; a swap forgets what was read).
                let handle = &self.backends.handle();
                let header = match handle.known_header(&id) {
                    Some(header) => header,
                    None => {
                        let (backend, generation) = handle.current();
                        let header = backend
                            .header(&id)
                            .await
                            .map_err(persistence_status)?
                            .ok_or_else(|| persistence_status(PersistenceError::NotFound(id)))?;
                        handle.remember_header(generation, header.clone());
                        Arc::new(header)
                    }
                };
                self.backends.handle().locate(&header)
            }
        };
        Ok(Response::new(v1::LocateResponse {
            location: location.map(super::convert::location),
        }))
    }

    async fn list_sessions(
        &self,
        request: Request<v1::ListSessionsRequest>,
    ) -> Reply<v1::ListSessionsResponse> {
        let request = request.into_inner();
        let query = session_list::query(&request)?;
        let include_archived = request.include_archived;
        let listed_from = self.backends.handle().backend();
        let (mut stored, mut metas) =
            session_list::stored_page(listed_from.as_ref(), &query, include_archived)
                .await
                .map_err(persistence_status)?;
        let mut live: Vec<SessionHeader> = Vec::new();
        for agent in self.agents.list() {
            let meta = agent.read_log(|log| SessionMeta::of(log.header(), log.events()));
            if meta.archived && !include_archived {
                continue;
            }
            live.push(agent.header().as_ref().clone());
            metas.insert(agent.id().clone(), meta);
        }
        // A live session that is not on the stored page has not been stored yet: it is this
        // daemon's own, created here.
        let mut creators = std::mem::take(&mut stored.creators);
        let this_daemon = listed_from.creator();
        let (page, next_page_token) = session_list::merge(&query, stored, &live);
        let others = if request.page_token.is_empty() {
            let live = live.into_iter().map(|h| h.id).collect();
            self.backends
                .other_backends(live)
                .await
                .into_iter()
                .map(|other| {
                    let (unlisted, error) = match other.unlisted {
                        Ok(n) => (u64::try_from(n).unwrap_or(u64::MAX), String::new()),
                        Err(e) => (0, e.to_string()),
                    };
                    v1::OtherBackend {
                        backend: Some(description(other.kind, &other.path)),
                        unlisted_sessions: unlisted,
                        error,
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let sessions = page
            .iter()
            .map(|(h, live)| {
                let meta = metas.remove(&h.id).unwrap_or_default();
                let creator = creators
                    .remove(&h.id)
                    .or_else(|| (*live).then(|| this_daemon.clone()).flatten())
                    .unwrap_or_default();
                v1::SessionSummary {
                    header: Some(header(h)),
                    live: *live,
                    title: meta.title.unwrap_or_default(),
                    archived: meta.archived,
                    host: creator.host,
                    daemon: creator.daemon,
                }
            })
            .collect();
        Ok(Response::new(v1::ListSessionsResponse {
            sessions,
            backend: Some(describe(listed_from.as_ref())),
            others,
            next_page_token,
        }))
    }

    async fn repair(&self, request: Request<v1::RepairRequest>) -> Reply<v1::RepairResponse> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        if self.agents.get(&id).is_ok() {
            return Err(Status::failed_precondition(format!(
                "session {id} is live: close its agent (dshctl agent close {id}) before repairing its log"
            )));
        }
        let backend = self.backends.handle().backend();
        let report = backend
            .repair(&id, req.apply)
            .await
            .map_err(persistence_status)?;
        Ok(Response::new(v1::RepairResponse {
            path: report.path.to_string_lossy().into_owned(),
            findings: report.findings,
            actions: report.actions,
            applied: report.applied,
        }))
    }

    async fn set_title(&self, request: Request<v1::SetTitleRequest>) -> Reply<v1::SessionMetadata> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let meta = self
            .agents
            .set_title(&id, &req.title)
            .await
            .map_err(agent_status)?;
        Ok(Response::new(metadata(&id, meta)))
    }

    async fn set_archived(
        &self,
        request: Request<v1::SetArchivedRequest>,
    ) -> Reply<v1::SessionMetadata> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let meta = self
            .agents
            .set_archived(&id, req.archived)
            .await
            .map_err(agent_status)?;
        Ok(Response::new(metadata(&id, meta)))
    }

    async fn delete(
        &self,
        request: Request<v1::DeleteSessionRequest>,
    ) -> Reply<v1::DeleteSessionResponse> {
        let id = session_id("session_id", request.into_inner().session_id)?;
        let backend = self.describe();
        self.agents.delete(&id).await.map_err(agent_status)?;
        Ok(Response::new(v1::DeleteSessionResponse {
            backend: Some(backend),
        }))
    }

    async fn read_events(
        &self,
        request: Request<v1::ReadEventsRequest>,
    ) -> Reply<Self::ReadEventsStream> {
        let by = crate::connection::peer_of(&request).watched_by();
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        if req.follow {
            // Live or stored alike: the log from `from_seq`, then whatever it logs from then on.
            let watcher = self
                .agents
                .follow(&id, req.from_seq, by)
                .await
                .map_err(agent_status)?;
            return Ok(Response::new(super::agents::event_stream(watcher, false)));
        }
        let events = match self.agents.get(&id) {
            Ok(agent) => agent.events_from(req.from_seq),
            Err(_) => {
                let (_, events) = self.session(&id).await?;
                let from = usize::try_from(req.from_seq).unwrap_or(usize::MAX);
                events.unwrap_or_default().into_iter().skip(from).collect()
            }
        };
        let stream = tokio_stream::iter(events.into_iter().map(move |e| Ok(event(&id, &e))));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn export(&self, request: Request<v1::ExportRequest>) -> Reply<Self::ExportStream> {
        let stream = super::transfer::export(&self.agents, request.into_inner()).await?;
        Ok(Response::new(stream))
    }

    async fn import(&self, request: Request<v1::ImportRequest>) -> Reply<v1::ImportResponse> {
        let backend = self.describe();
        let handle = self.backends.handle();
        let imported = super::transfer::import(handle, request.into_inner()).await?;
        Ok(Response::new(v1::ImportResponse {
            session_id: imported.id.as_str().to_owned(),
            format: imported.format.to_owned(),
            original_id: imported.original_id.unwrap_or_default(),
            events: imported.events,
            skipped: imported.skipped,
            backend: Some(backend),
        }))
    }
}
