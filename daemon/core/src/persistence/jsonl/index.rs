//! The JSONL backend's index for listing: every stored session's key `(createdAt, id)` and
//! project directory, kept in memory so that a page of sessions costs the same with a thousand
//! sessions or a hundred thousand. The logs stay the only record; the index is rebuilt from them
//! by the first listing after the daemon starts, and kept true afterwards:
//!
//! - sessions this backend creates are added as their log is published;
//! - anything else (another process, a log copied in by hand, a directory removed) is found by
//!   comparing the modification time of the root and of each project directory with the one seen
//!   at the last scan: adding or removing a session directory changes its project directory's
//!   time, and only a directory whose time changed is read again.
//!
//! A time is trusted only once it is [`RACY`](super::projects::RACY) older than the scan that read it: file-system clocks
//! tick coarsely (a jiffy on Linux), so a change in the same tick as an earlier scan could leave
//! the time as it was; until then the directory is read again at every listing (git's "racily
//! clean" rule). A session directory whose log does not exist yet (being created) is kept as
//! *pending* and looked at again by every listing, because publishing the log changes the session
//! directory, not the project directory.
//!
//! Memory: about 150 bytes per session (one shared copy of the id, two ordered sets).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::io;
use super::layout::{LOG_FILE, log_path, project_dir_name, session_dir_name};
use super::projects::{Stamp, project_dirs};
use super::read::read_header;
use crate::persistence::{ListKey, Order, Page, PageQuery, PersistenceError};
use dsh_session::{SessionHeader, SessionId};

/// A session's place in the order: `(createdAt, id)`, with the id shared between the sets.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key(i64, Arc<str>);

impl Key {
    fn of(key: &ListKey) -> Self {
        Self(key.created_at, Arc::from(key.id.as_str()))
    }
}

/// One project directory (`--<projectKey>--`) and the sessions found in it.
#[derive(Debug, Default)]
struct Project {
    stamp: Stamp,
    sessions: BTreeSet<Key>,
    /// Entries without a readable log yet, by directory name: looked at again by every refresh.
    pending: HashSet<OsString>,
}

/// The index. Built by the first [`refresh`](Index::refresh).
#[derive(Debug, Default)]
pub(super) struct Index {
    built: bool,
    root: Stamp,
    projects: HashMap<OsString, Project>,
    /// Every indexed session, with its project directory's name.
    all: BTreeMap<Key, Arc<OsString>>,
    /// The project names, shared by the entries of `all`.
    names: HashMap<OsString, Arc<OsString>>,
}

impl Index {
    /// Whether the index has been built (so that [`insert`](Self::insert) is worth doing).
    pub(super) fn is_built(&self) -> bool {
        self.built
    }

    /// Adds a session whose log this backend has just published.
    pub(super) fn insert(&mut self, header: &SessionHeader) {
        let name = OsString::from(project_dir_name(&header.cwd));
        let key = Key::of(&ListKey::of(header));
        let shared = self.shared_name(&name);
        let project = self.projects.entry(name).or_default();
        project
            .pending
            .remove(std::ffi::OsStr::new(&session_dir_name(header.id.as_str())));
        project.sessions.insert(key.clone());
        self.all.insert(key, shared);
    }

    /// Drops a session this backend has just deleted.
    pub(super) fn remove(&mut self, header: &SessionHeader) {
        let name = OsString::from(project_dir_name(&header.cwd));
        let key = Key::of(&ListKey::of(header));
        if let Some(project) = self.projects.get_mut(&name) {
            project.sessions.remove(&key);
        }
        self.all.remove(&key);
    }

    fn shared_name(&mut self, name: &OsString) -> Arc<OsString> {
        self.names
            .entry(name.clone())
            .or_insert_with(|| Arc::new(name.clone()))
            .clone()
    }

    /// Brings the index up to date with the directories under `root`: reads only the root and
    /// the project directories whose modification time changed (all of them the first time),
    /// and the headers of sessions not seen before.
    pub(super) fn refresh(&mut self, root: &Path) -> Result<(), PersistenceError> {
        let scan = SystemTime::now();
        let mtime = match fs::metadata(root) {
            Ok(meta) => meta.modified().map_err(|e| io("inspect", root, e))?,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                *self = Self {
                    built: true,
                    ..Self::default()
                };
                return Ok(());
            }
            Err(e) => return Err(io("inspect", root, e)),
        };
        if !self.built || !self.root.holds(mtime) {
            let found = project_dirs(root)?;
            let gone: Vec<OsString> = self
                .projects
                .keys()
                .filter(|name| !found.contains(*name))
                .cloned()
                .collect();
            for name in gone {
                self.remove_project(&name);
            }
            for name in found {
                self.projects.entry(name).or_default();
            }
            self.root = Stamp::new(mtime, scan);
        }
        let names: Vec<OsString> = self.projects.keys().cloned().collect();
        for name in names {
            let dir = root.join(&name);
            let mtime = match fs::metadata(&dir) {
                Ok(meta) if meta.is_dir() => meta.modified().map_err(|e| io("inspect", &dir, e))?,
                Ok(_) => {
                    self.remove_project(&name);
                    continue;
                }
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
                    self.remove_project(&name);
                    continue;
                }
                Err(e) => return Err(io("inspect", &dir, e)),
            };
            let holds = self
                .projects
                .get(&name)
                .is_some_and(|p| p.stamp.holds(mtime));
            if holds {
                self.retry_pending(root, &name);
            } else {
                self.rescan(root, &name, scan, mtime)?;
            }
        }
        self.built = true;
        Ok(())
    }

    /// Reads a project directory again: sessions whose directory is gone are dropped, new ones
    /// read (their header only).
    fn rescan(
        &mut self,
        root: &Path,
        name: &OsString,
        scan: SystemTime,
        mtime: SystemTime,
    ) -> Result<(), PersistenceError> {
        let dir = root.join(name);
        let mut entries: HashSet<OsString> = HashSet::new();
        match fs::read_dir(&dir) {
            Ok(read) => {
                for entry in read {
                    entries.insert(
                        entry
                            .map_err(|e| io("read directory", &dir, e))?
                            .file_name(),
                    );
                }
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {
                self.remove_project(name);
                return Ok(());
            }
            Err(e) => return Err(io("read directory", &dir, e)),
        }
        let Some(project) = self.projects.get_mut(name) else {
            return Ok(());
        };
        let mut known: HashSet<OsString> = HashSet::with_capacity(project.sessions.len());
        let mut gone = Vec::new();
        for key in &project.sessions {
            let dir_name = OsString::from(session_dir_name(&key.1));
            if entries.contains(&dir_name) {
                known.insert(dir_name);
            } else {
                gone.push(key.clone());
            }
        }
        for key in gone {
            project.sessions.remove(&key);
            self.all.remove(&key);
        }
        project.pending.clear();
        project.stamp = Stamp::new(mtime, scan);
        let new: Vec<OsString> = entries.into_iter().filter(|e| !known.contains(e)).collect();
        for entry in new {
            self.look_at(root, name, entry);
        }
        Ok(())
    }

    /// Looks again at the entries of a project that had no readable log when last seen.
    fn retry_pending(&mut self, root: &Path, name: &OsString) {
        let Some(project) = self.projects.get_mut(name) else {
            return;
        };
        if project.pending.is_empty() {
            return;
        }
        let pending: Vec<OsString> = project.pending.drain().collect();
        for entry in pending {
            self.look_at(root, name, entry);
        }
    }

    /// Indexes the session directory `entry` of project `name` if it holds a log whose header
    /// belongs there; otherwise keeps it pending.
    fn look_at(&mut self, root: &Path, name: &OsString, entry: OsString) {
        let path = root.join(name).join(&entry).join(LOG_FILE);
        let header = match read_header(&path) {
            Ok(header) if log_path(root, &header) == path => header,
            Ok(header) => {
                tracing::warn!(
                    path = %path.display(),
                    id = %header.id,
                    "not listing a session log whose header belongs elsewhere"
                );
                self.keep_pending(name, entry);
                return;
            }
            Err(reason) => {
                // A log still being created is the common case; say so quietly.
                tracing::debug!(path = %path.display(), %reason, "no listable session log yet");
                self.keep_pending(name, entry);
                return;
            }
        };
        let key = Key::of(&ListKey::of(&header));
        let shared = self.shared_name(name);
        if let Some(project) = self.projects.get_mut(name) {
            project.sessions.insert(key.clone());
        }
        self.all.insert(key, shared);
    }

    fn keep_pending(&mut self, name: &OsString, entry: OsString) {
        if let Some(project) = self.projects.get_mut(name) {
            project.pending.insert(entry);
        }
    }

    fn remove_project(&mut self, name: &OsString) {
        if let Some(project) = self.projects.remove(name) {
            for key in project.sessions {
                self.all.remove(&key);
            }
        }
        self.names.remove(name);
    }

    /// The sessions a page may hold, in the query's order, from its cursor on: the indexed keys
    /// of the query's cwd's project (or of every project), each with the path of its log.
    /// Lazy: a page reads only as many as it takes.
    pub(super) fn candidates<'a>(
        &'a self,
        root: &'a Path,
        query: &PageQuery,
    ) -> Box<dyn Iterator<Item = (ListKey, PathBuf)> + 'a> {
        let lower = match (&query.after, query.order) {
            (Some(after), Order::OldestFirst) => Bound::Excluded(Key::of(after)),
            _ => Bound::Unbounded,
        };
        let upper = match (&query.after, query.order) {
            (Some(after), Order::NewestFirst) => Bound::Excluded(Key::of(after)),
            _ => Bound::Unbounded,
        };
        let path = move |key: &Key, project: &OsString| {
            let mut path = root.join(project);
            path.push(session_dir_name(&key.1));
            path.push(LOG_FILE);
            path
        };
        let list_key = |key: &Key| {
            SessionId::parse(&*key.1).ok().map(|id| ListKey {
                created_at: key.0,
                id,
            })
        };
        match &query.cwd {
            Some(cwd) => {
                let name = OsString::from(project_dir_name(cwd));
                let Some(project) = self.projects.get(&name) else {
                    return Box::new(std::iter::empty());
                };
                let range = project.sessions.range((lower, upper));
                let keys: Box<dyn Iterator<Item = &Key>> = match query.order {
                    Order::NewestFirst => Box::new(range.rev()),
                    Order::OldestFirst => Box::new(range),
                };
                Box::new(keys.filter_map(move |key| Some((list_key(key)?, path(key, &name)))))
            }
            None => {
                let range = self.all.range((lower, upper));
                let entries: Box<dyn Iterator<Item = (&Key, &Arc<OsString>)>> = match query.order {
                    Order::NewestFirst => Box::new(range.rev()),
                    Order::OldestFirst => Box::new(range),
                };
                Box::new(
                    entries.filter_map(move |(key, name)| Some((list_key(key)?, path(key, name)))),
                )
            }
        }
    }

    /// Forgets what is known about the project holding `path`, so the next refresh reads it again
    /// (a listed log turned out to be gone or changed).
    pub(super) fn distrust(&mut self, path: &Path) {
        let project = path
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map(OsString::from);
        if let Some(project) = project.and_then(|name| self.projects.get_mut(&name)) {
            project.stamp = Stamp::default();
        }
    }
}

/// One page from the index: reads the header of each candidate (one line of each log) until
/// `limit` are found, skipping logs that are gone or belong elsewhere, and checks the cwd exactly
/// (project keys are lossy).
pub(super) fn page(index: &mut Index, root: &Path, query: &PageQuery) -> Page {
    let mut headers = Vec::with_capacity(query.limit.min(64));
    let mut distrusted = Vec::new();
    let mut more = false;
    for (key, path) in index.candidates(root, query) {
        if headers.len() == query.limit {
            more = true;
            break;
        }
        match read_header(&path) {
            Ok(header) if ListKey::of(&header) == key && log_path(root, &header) == path => {
                if query.admits(&header) {
                    headers.push(header);
                }
            }
            Ok(_) | Err(_) => distrusted.push(path),
        }
    }
    for path in distrusted {
        tracing::debug!(path = %path.display(), "an indexed session log changed; reading its project again");
        index.distrust(&path);
    }
    Page {
        headers,
        more,
        creators: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use std::fs::{File, FileTimes};
    use std::time::Duration;

    use super::*;
    use crate::persistence::BlockingPersistence;
    use crate::persistence::jsonl::{JsonlBackend, store_one as store};

    fn header(id: &str, cwd: &str, created_at: i64) -> SessionHeader {
        SessionHeader::new(SessionId::parse(id).unwrap(), cwd.into(), created_at)
    }

    fn listed(backend: &JsonlBackend) -> Vec<String> {
        let query = PageQuery {
            after: None,
            limit: 100,
            order: Order::OldestFirst,
            cwd: None,
            host: None,
        };
        let page = backend.list_page(&query).unwrap();
        page.headers
            .iter()
            .map(|h| h.id.as_str().to_owned())
            .collect()
    }

    /// Sets the modification time of `dir` and every directory under it an hour back, so the
    /// index trusts the times it reads (they are older than [`RACY`]).
    fn age(dir: &Path) {
        let past = SystemTime::now() - Duration::from_secs(3600);
        File::open(dir)
            .unwrap()
            .set_times(FileTimes::new().set_modified(past))
            .unwrap();
        for entry in fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                age(&entry.path());
            }
        }
    }

    #[test]
    fn sessions_another_writer_adds_or_removes_are_seen() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("sessions");
        let ours = JsonlBackend::new(root.clone()).unwrap();
        let theirs = JsonlBackend::new(root.clone()).unwrap();
        store(&ours, &header("a", "/p", 1));
        assert_eq!(listed(&ours), ["a"]);
        // Times an hour old are trusted: from here on only a changed directory is read again.
        age(&root);
        assert_eq!(listed(&ours), ["a"]);
        store(&theirs, &header("b", "/p", 2));
        store(&theirs, &header("c", "/q", 3));
        assert_eq!(listed(&ours), ["a", "b", "c"]);
        age(&root);
        assert_eq!(listed(&ours), ["a", "b", "c"]);
        let gone = log_path(&root, &header("b", "/p", 2));
        fs::remove_dir_all(gone.parent().unwrap()).unwrap();
        assert_eq!(listed(&ours), ["a", "c"]);
        fs::remove_dir_all(root.join(project_dir_name(Path::new("/q")))).unwrap();
        assert_eq!(listed(&ours), ["a"]);
    }

    /// Publishing a log changes its session directory, not the project directory: a session
    /// directory first seen without its log is looked at again by every listing.
    #[test]
    fn a_log_published_after_its_directory_was_seen_is_listed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("sessions");
        let ours = JsonlBackend::new(root.clone()).unwrap();
        let theirs = JsonlBackend::new(root.clone()).unwrap();
        store(&ours, &header("a", "/p", 1));
        let late = header("late", "/p", 2);
        let dir = log_path(&root, &late);
        let dir = dir.parent().unwrap();
        fs::create_dir(dir).unwrap();
        age(&root);
        assert_eq!(
            listed(&ours),
            ["a"],
            "a directory without a log is not listed"
        );
        // Not aged again: the project directory's time is the trusted one of the last listing.
        store(&theirs, &late);
        assert_eq!(listed(&ours), ["a", "late"]);
    }
}
