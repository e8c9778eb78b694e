//! JSONL backend (CONTRACTS §4.4, §4.5): one plain `.jsonl` file per session, at
//! `<root>/--<projectKey(cwd)>--/<escape(id)>/session.jsonl`, readable with `tail`, `grep` and `jq`.
//!
//! Each session has one writer: the backend keeps the file of every session it has touched open,
//! with its committed length, so a steady-state append is one positioned write and one
//! `fdatasync`, nothing more.

mod file;
mod index;
mod layout;
mod projects;
mod read;

use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

#[cfg(feature = "test-support")]
pub use layout::project_dir_name;
pub(crate) use layout::{LOG_FILE, is_project_dir_name, session_file_name};
pub use layout::{log_path, session_dir_name};
pub(crate) use read::{header_line, parse_header as parse_header_line, write_event_lines};

use super::{
    BackendKind, BlockingPersistence, Page, PageQuery, PersistenceError, Repair, RepairReport,
    SessionLocation, StoredSession, batch_start, open_turn_closers,
};
use crate::locks::lock;
use dsh_session::{Event, MetaBuilder, SessionHeader, SessionId, SessionMeta};
use read::Scan;

/// Whether `magic` (`statfs`'s `f_type`) names a file system on a local device or in memory,
/// where a read never waits on a network or another process. An allowlist: any other, NFS, SMB,
/// FUSE and those not known here alike, counts as possibly slow.
fn is_local_file_system(magic: rustix::fs::FsWord) -> bool {
    // The kernel's magic numbers (linux/magic.h, and ZFS's own).
    const LOCAL: [u32; 10] = [
        0xEF53,      // ext2, ext3, ext4
        0x5846_5342, // XFS
        0x9123_683E, // Btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0xF2F5_2010, // F2FS
        0x2FC1_2FC1, // ZFS
        0xCA45_1A4E, // bcachefs
        0x0000_4D44, // FAT
        0x5346_544E, // NTFS (ntfs3)
    ];
    u32::try_from(magic).is_ok_and(|magic| LOCAL.contains(&magic))
}

/// The JSONL backend. Creates nothing until a session's first append.
#[derive(Debug)]
pub struct JsonlBackend {
    root: PathBuf,
    /// One slot per session this backend has touched. The outer lock is held only to find a
    /// slot; I/O happens under the slot's own lock, so sessions do not wait for each other's
    /// fsyncs while each session still has exactly one writer.
    sessions: Mutex<HashMap<SessionId, Arc<Mutex<Slot>>>>,
    /// What `list_page` reads instead of every log (see [`index`]).
    index: Mutex<index::Index>,
    /// What `find` looks in, without listing the root each time (see [`projects`]).
    projects: projects::ProjectDirs,
    /// Whether the root is on a file system known to be local (see [`Self::on_local_disk`]).
    local: OnceLock<bool>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The open log, once it has been created or read; `None` after a failure, so the next use
    /// reads the file again instead of trusting a stale length.
    open: Option<OpenLog>,
}

#[derive(Debug)]
struct OpenLog {
    file: fs::File,
    path: PathBuf,
    header: SessionHeader,
    /// Length of the committed prefix: where the next append goes.
    committed: u64,
    /// Length of the file, larger than `committed` while a torn tail is still on disk.
    file_len: u64,
    /// Events in the committed prefix.
    events: u64,
}

impl JsonlBackend {
    /// A backend rooted at `root`, which must be absolute. Touches nothing on disk: the root is
    /// created (0700) by the first append.
    pub fn new(root: PathBuf) -> Result<Self, PersistenceError> {
        if !root.is_absolute() {
            return Err(PersistenceError::Config(format!(
                "jsonl root {} is not an absolute path",
                root.display()
            )));
        }
        Ok(Self {
            root,
            sessions: Mutex::new(HashMap::new()),
            index: Mutex::new(index::Index::default()),
            projects: projects::ProjectDirs::default(),
            local: OnceLock::new(),
        })
    }

    fn slot(&self, id: &SessionId) -> Arc<Mutex<Slot>> {
        let mut sessions = lock(&self.sessions);
        sessions.entry(id.clone()).or_default().clone()
    }

    /// Whether the root is on a file system known to be local (ext4, XFS, Btrfs, tmpfs, ...),
    /// where reading a header takes microseconds; a network or FUSE file system, or one not
    /// known, may take a round trip or hang. Asked of the kernel (`statfs`) once the root exists;
    /// false until then.
    fn on_local_disk(&self) -> bool {
        if let Some(&local) = self.local.get() {
            return local;
        }
        match rustix::fs::statfs(&self.root) {
            Ok(stat) => *self.local.get_or_init(|| is_local_file_system(stat.f_type)),
            Err(_) => false,
        }
    }

    /// The log of `id`, wherever its cwd put it: `<root>/*/<dir(id)>/session.jsonl`.
    fn find(&self, id: &SessionId) -> Result<Option<PathBuf>, PersistenceError> {
        let name = session_dir_name(id.as_str());
        let mut found = Vec::new();
        for project in self.projects.now(&self.root)?.iter() {
            let candidate = self.root.join(project).join(&name).join(LOG_FILE);
            match fs::metadata(&candidate) {
                Ok(meta) if meta.is_file() => found.push(candidate),
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {}
                Err(source) => return Err(io("inspect", &candidate, source)),
            }
        }
        found.sort();
        match found.len() {
            0 => Ok(None),
            1 => Ok(found.pop()),
            _ => Err(PersistenceError::Corrupt {
                path: found[1].clone(),
                line: 0,
                message: format!(
                    "session {id} appears in more than one project directory (also {}); \
                     remove or rename one of them",
                    found[0].display()
                ),
            }),
        }
    }

    /// Reads and checks the stored log of `id`.
    fn read_stored(&self, id: &SessionId) -> Result<(PathBuf, Scan), PersistenceError> {
        let path = self
            .find(id)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let scan = self.read_at(id, &path)?;
        Ok((path, scan))
    }

    /// Reads and checks the log of `id` at `path`.
    fn read_at(&self, id: &SessionId, path: &Path) -> Result<Scan, PersistenceError> {
        let bytes = file::read_log(path)?.ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let scan = read::scan(path, &bytes)?;
        self.check_identity(id, path, &scan.header)?;
        Ok(scan)
    }

    /// A log must sit where its own header says it belongs; anything else (a hash collision of
    /// long ids, a file copied by hand) is refused rather than served as another session.
    fn check_identity(
        &self,
        id: &SessionId,
        path: &Path,
        header: &SessionHeader,
    ) -> Result<(), PersistenceError> {
        let expected = log_path(&self.root, header);
        if header.id != *id || expected != path {
            return Err(PersistenceError::Corrupt {
                path: path.to_owned(),
                line: 1,
                message: format!(
                    "header names session {} (log {}), not {id}",
                    header.id,
                    expected.display()
                ),
            });
        }
        Ok(())
    }

    /// Opens the stored log of `id` for appending, if there is one. A torn tail is remembered,
    /// not cut: that is a write, and it is left to the next append or load.
    fn open_stored(&self, id: &SessionId) -> Result<Option<OpenLog>, PersistenceError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        let scan = self.read_at(id, &path)?;
        read::writable(&path, &scan.header)?;
        let file = file::open_log(&path)?;
        let file_len = file.metadata().map_err(|e| io("inspect", &path, e))?.len();
        Ok(Some(OpenLog {
            file,
            path,
            header: scan.header,
            committed: scan.committed,
            file_len,
            events: scan.events.len() as u64,
        }))
    }
}

fn io(action: &'static str, path: &Path, source: std::io::Error) -> PersistenceError {
    PersistenceError::Io {
        action,
        path: path.to_owned(),
        error: source,
    }
}

impl BlockingPersistence for JsonlBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Jsonl
    }

    fn path(&self) -> PathBuf {
        self.root.clone()
    }

    fn locate(&self, header: &SessionHeader) -> Option<SessionLocation> {
        Some(SessionLocation {
            kind: BackendKind::Jsonl.as_str(),
            path: log_path(&self.root, header),
            database: None,
        })
    }

    fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
        let slot = self.slot(id);
        let mut slot = lock(&slot);
        if slot.open.is_none() {
            slot.open = self.open_stored(id)?;
        }
        Ok(slot.open.as_ref().map(|open| open.events))
    }

    fn append(&self, header: &SessionHeader, events: &[Event]) -> Result<(), PersistenceError> {
        let id = &header.id;
        if events.is_empty() {
            return Ok(());
        }
        let first = batch_start(id, events)?;
        header
            .validate()
            .map_err(|e| PersistenceError::Config(format!("session {id}: invalid header: {e}")))?;

        let slot = self.slot(id);
        let mut slot = lock(&slot);
        if slot.open.is_none() {
            slot.open = self.open_stored(id)?;
        }
        let Some(open) = slot.open.as_mut() else {
            if first != 0 {
                return Err(PersistenceError::SeqMismatch {
                    id: id.clone(),
                    expected: 0,
                    got: first,
                });
            }
            let path = log_path(&self.root, header);
            let (file, len) =
                file::create_new_log(&path, |out| read::write_log(out, header, events))?;
            let mut index = lock(&self.index);
            if index.is_built() {
                index.insert(header);
            }
            drop(index);
            slot.open = Some(OpenLog {
                file,
                path,
                header: header.clone(),
                committed: len,
                file_len: len,
                events: events.len() as u64,
            });
            return Ok(());
        };

        if open.header != *header {
            return Err(PersistenceError::Config(format!(
                "session {id} is stored at {} with a different header",
                open.path.display()
            )));
        }
        if first != open.events {
            return Err(PersistenceError::SeqMismatch {
                id: id.clone(),
                expected: open.events,
                got: first,
            });
        }
        let result = (|| {
            file::check_unchanged(&open.file, &open.path, open.file_len)?;
            if open.file_len > open.committed {
                // A torn last line from a crash is still on disk; the new lines must not land
                // after it. Its bytes are kept beside the log.
                let aside = file::set_aside(&open.file, &open.path, open.committed, "torn")?;
                tracing::warn!(path = %open.path.display(), kept = %aside.display(), "moved a torn last line (no newline) aside before appending");
                open.file_len = open.committed;
            }
            file::append_durably(&open.file, &open.path, open.committed, |out| {
                read::write_event_lines(out, events)
            })
        })();
        let written = match result {
            Ok(written) => written,
            Err(e) => {
                slot.open = None;
                return Err(e);
            }
        };
        open.committed += written;
        open.file_len = open.committed;
        open.events += events.len() as u64;
        Ok(())
    }

    fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let slot = self.slot(id);
        let mut slot = lock(&slot);
        // Whatever is cached is re-read: load is the moment the file is checked and repaired.
        slot.open = None;
        let (path, scan) = self.read_stored(id)?;
        let Scan {
            header,
            mut events,
            committed,
            torn,
        } = scan;
        read::writable(&path, &header)?;
        let file = file::open_log(&path)?;
        let mut repairs = Vec::new();
        if let Some(torn) = torn {
            let aside = file::set_aside(&file, &path, committed, "torn")?;
            tracing::warn!(path = %path.display(), kept = %aside.display(), ?torn, "moved a torn last line (no newline) aside");
            repairs.push(torn);
        }
        let mut len = committed;
        if let Some((closers, repair)) = open_turn_closers(&events) {
            len += file::append_durably(&file, &path, len, |out| {
                read::write_event_lines(out, &closers)
            })?;
            repairs.push(repair);
            events.extend(closers);
        }
        slot.open = Some(OpenLog {
            file,
            path,
            header: header.clone(),
            committed: len,
            file_len: len,
            events: events.len() as u64,
        });
        Ok(StoredSession {
            header,
            events,
            repairs,
        })
    }

    fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        // Wait for a writer of this session, if there is one, so the snapshot is not mid-append;
        // but do not make slots for ids nobody writes (inspect takes ids from outside).
        let existing = lock(&self.sessions).get(id).cloned();
        let _writer = existing.as_ref().map(|slot| lock(slot));
        let (_, scan) = self.read_stored(id)?;
        Ok(StoredSession {
            header: scan.header,
            events: scan.events,
            repairs: Vec::new(),
        })
    }

    fn repair(&self, id: &SessionId, apply: bool) -> Result<RepairReport, PersistenceError> {
        let slot = self.slot(id);
        let mut slot = lock(&slot);
        // Whatever is cached is stale once the file is cut.
        slot.open = None;
        let path = self
            .find(id)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let bytes = file::read_log(&path)?.ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let mut report = RepairReport {
            path: path.clone(),
            ..RepairReport::default()
        };
        let (line, message) = match read::scan(&path, &bytes) {
            Ok(scan) => {
                read::writable(&path, &scan.header)?;
                if let Some(Repair::TornTail { from_line, .. }) = scan.torn {
                    report.findings.push(format!(
                        "line {from_line} has no newline: a write a crash cut short"
                    ));
                    report.actions.push(format!(
                        "the next resume moves it to {}.torn-<time>",
                        path.display()
                    ));
                }
                return Ok(report);
            }
            Err(PersistenceError::Corrupt { line, message, .. }) => (line, message),
            Err(other) => return Err(other),
        };
        report.findings.push(format!("line {line}: {message}"));
        if line <= 1 {
            report.findings.push(
                "the header is damaged, so nothing of the log can be trusted; it is left as it is"
                    .to_owned(),
            );
            return Ok(report);
        }
        let from = read::line_start(&bytes, line);
        let total = bytes[from..].iter().filter(|&&b| b == b'\n').count()
            + usize::from(bytes.last().is_some_and(|&b| b != b'\n'));
        report.actions.push(format!(
            "keep lines 1-{} ({} events); move lines {line}-{} ({} bytes) to {}.damaged-<time>, \
             where they stay for you to read",
            line - 1,
            line - 2,
            line - 1 + total,
            bytes.len() - from,
            path.display()
        ));
        if apply {
            let file = file::open_log(&path)?;
            file::check_unchanged(&file, &path, bytes.len() as u64)?;
            let aside = file::set_aside(&file, &path, from as u64, "damaged")?;
            tracing::warn!(path = %path.display(), kept = %aside.display(), line, "repaired a damaged log on request");
            report.actions.push(format!("moved to {}", aside.display()));
            report.applied = true;
        }
        Ok(report)
    }

    fn meta(&self, id: &SessionId) -> Result<Option<SessionMeta>, PersistenceError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        let Some(bytes) = file::read_log(&path)? else {
            return Ok(None);
        };
        let mut lines = bytes.split(|&b| b == b'\n');
        let header = read::parse_header(lines.next().unwrap_or_default()).map_err(|message| {
            PersistenceError::Corrupt {
                path: path.clone(),
                line: 1,
                message,
            }
        })?;
        self.check_identity(id, &path, &header)?;
        let mut builder = MetaBuilder::new(&header);
        // Only these types say anything about metadata, and this backend writes every event
        // with its type first: other lines are skipped unparsed, so a listing does not parse
        // whole logs. A line that does not read (a torn tail) says nothing either.
        for line in lines {
            let wanted = line.starts_with(br#"{"type":"session/"#)
                || line.starts_with(br#"{"type":"user/message""#);
            if let Some(event) = wanted.then(|| Event::from_line(line).ok()).flatten() {
                builder.observe(&event);
            }
        }
        Ok(Some(builder.finish()))
    }

    fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        let slot = self.slot(id);
        let mut slot = lock(&slot);
        slot.open = None;
        let path = self
            .find(id)?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let header = read::read_header(&path).map_err(|message| PersistenceError::Corrupt {
            path: path.clone(),
            line: 1,
            message,
        })?;
        self.check_identity(id, &path, &header)?;
        let Some(dir) = path.parent() else {
            return Err(PersistenceError::NotFound(id.clone()));
        };
        // The log first: once it is gone the session is, whatever happens to the rest.
        fs::remove_file(&path).map_err(|e| super::write_error("remove", &path, e))?;
        // Then what was set aside from it (`session.jsonl.torn-<ms>`, `.damaged-<ms>`): bytes of
        // this log. Anything else in the directory is not ours and stays, and so does the
        // directory then.
        let aside_prefix = format!("{LOG_FILE}.");
        let entries = fs::read_dir(dir).map_err(|e| io("read directory", dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| io("read directory", dir, e))?;
            let name = entry.file_name();
            let ours = name
                .to_str()
                .is_some_and(|n| n.starts_with(&aside_prefix) && !n.contains('/'));
            if ours && entry.file_type().is_ok_and(|t| t.is_file()) {
                let aside = entry.path();
                fs::remove_file(&aside).map_err(|e| super::write_error("remove", &aside, e))?;
            }
        }
        match fs::remove_dir(dir) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::DirectoryNotEmpty => {
                tracing::info!(dir = %dir.display(), "deleted session's directory holds files dshd did not write; left in place");
            }
            Err(e) => return Err(super::write_error("remove", dir, e)),
        }
        if let Some(project) = dir.parent() {
            file::sync_dir(project)?;
        }
        drop(slot);
        self.release(id);
        lock(&self.index).remove(&header);
        Ok(())
    }

    /// Asks the kernel once whether the root is local and lists its project directories, which
    /// the first `header` would do.
    fn warm(&self) {
        self.on_local_disk();
        let _ = self.projects.now(&self.root);
    }

    fn release(&self, id: &SessionId) {
        // Dropping the slot closes the file (once any reader holding the slot is done with it).
        lock(&self.sessions).remove(id);
    }

    fn header(&self, id: &SessionId) -> Result<Option<SessionHeader>, PersistenceError> {
        let Some(path) = self.find(id)? else {
            return Ok(None);
        };
        let header = read::read_header(&path).map_err(|message| PersistenceError::Corrupt {
            path: path.clone(),
            line: 1,
            message,
        })?;
        self.check_identity(id, &path, &header)?;
        Ok(Some(header))
    }

    fn header_now(
        &self,
        id: &SessionId,
    ) -> Option<Result<Option<SessionHeader>, PersistenceError>> {
        // A directory listing, a `stat` and one short read, under no lock of the backend's.
        self.on_local_disk().then(|| self.header(id))
    }

    fn list_page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        if query.elsewhere() {
            return Ok(Page::default());
        }
        let mut index = lock(&self.index);
        index.refresh(&self.root)?;
        Ok(index::page(&mut index, &self.root, query))
    }

    fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        let projects = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(io("read directory", &self.root, source)),
        };
        let mut headers = Vec::new();
        for project in projects {
            let project = project.map_err(|e| io("read directory", &self.root, e))?;
            let is_dir = project.file_type().is_ok_and(|t| t.is_dir());
            if !is_dir
                || !project
                    .file_name()
                    .to_str()
                    .is_some_and(is_project_dir_name)
            {
                continue;
            }
            let project = project.path();
            let sessions = fs::read_dir(&project).map_err(|e| io("read directory", &project, e))?;
            for session in sessions {
                let session = session.map_err(|e| io("read directory", &project, e))?;
                let path = session.path().join(LOG_FILE);
                if !path.is_file() {
                    continue;
                }
                match read::read_header(&path) {
                    Ok(header) if log_path(&self.root, &header) == path => headers.push(header),
                    Ok(header) => tracing::warn!(
                        path = %path.display(),
                        id = %header.id,
                        "skipping a session log whose header belongs elsewhere"
                    ),
                    Err(reason) => tracing::warn!(
                        path = %path.display(),
                        %reason,
                        "skipping a session log with an unreadable header"
                    ),
                }
            }
        }
        headers.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(headers)
    }
}

/// [`rescue_copy`] on the blocking pool.
pub(crate) async fn rescue(
    dirs: &[PathBuf],
    header: SessionHeader,
    events: Vec<Event>,
) -> Result<PathBuf, PersistenceError> {
    let dirs = dirs.to_vec();
    tokio::task::spawn_blocking(move || rescue_copy(&dirs, &header, &events))
        .await
        .unwrap_or_else(|join| {
            Err(PersistenceError::Task {
                what: "rescue copy",
                message: join.to_string(),
            })
        })
}

/// Writes a whole session (header and every event) as a new JSONL log in the first of `dirs` that
/// takes it: the last resort when a session cannot be saved to its backend at shutdown, so its
/// events are on disk somewhere. A directory is used only if it is ours and private (created 0700
/// when missing); the file is new (never overwrites), 0600, fsynced. Returns its path.
pub(crate) fn rescue_copy(
    dirs: &[PathBuf],
    header: &SessionHeader,
    events: &[Event],
) -> Result<PathBuf, PersistenceError> {
    let name = format!(
        "{}-{}.jsonl",
        layout::escape_id(header.id.as_str()),
        dsh_session::now_ms()
    );
    let mut last = PersistenceError::Config("no rescue directory configured".into());
    for dir in dirs {
        let attempt = file::create_private_dirs(dir)
            .and_then(|()| file::check_private_dir(dir))
            .and_then(|()| {
                file::create_new_log(&dir.join(&name), |out| read::write_log(out, header, events))
            });
        match attempt {
            Ok(_file) => return Ok(dir.join(&name)),
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// Stores `header` with one event, as a session's first checkpoint does (tests of this backend).
#[cfg(test)]
fn store_one(backend: &JsonlBackend, header: &SessionHeader) {
    let event = Event {
        seq: 0,
        time: 1,
        data: dsh_session::EventData::TurnStart { turn: 1 },
    };
    backend.append(header, &[event]).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_read_at_once_on_local_file_systems_only() {
        assert!(is_local_file_system(0xEF53), "ext4");
        assert!(is_local_file_system(0x0102_1994), "tmpfs");
        assert!(!is_local_file_system(0x6969), "NFS");
        assert!(!is_local_file_system(0x6573_5546), "FUSE");
        assert!(!is_local_file_system(0xFF53_4D42), "CIFS");
        assert!(!is_local_file_system(0), "unknown");
    }

    #[test]
    fn header_now_answers_on_a_local_root_and_not_before_the_root_exists() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sessions");
        let backend = JsonlBackend::new(root.clone()).unwrap();
        let id = SessionId::parse("s").unwrap();
        assert!(
            backend.header_now(&id).is_none(),
            "no root yet: not known to be local"
        );
        fs::create_dir(&root).unwrap();
        let local = rustix::fs::statfs(&root)
            .map(|stat| is_local_file_system(stat.f_type))
            .unwrap();
        match backend.header_now(&id) {
            Some(answer) => {
                assert!(local);
                assert!(matches!(answer, Ok(None)), "{answer:?}");
            }
            None => assert!(!local),
        }
    }
}
