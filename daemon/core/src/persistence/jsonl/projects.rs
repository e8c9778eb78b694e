//! The project directories under the JSONL root (`--<projectKey>--`), and when a listing of them
//! can be trusted without reading the root again.
//!
//! Finding a stored session's log needs them: its path is `<root>/<project>/<session>/` and the
//! project comes from a cwd the caller does not give. Listing the root for every first look-up
//! (an open, two reads of entries and a close) cost as much as reading the header itself, so the
//! names are kept with the root's modification time and listed again only when that time moved
//! (a project directory made or removed changes it), by the rule in [`Stamp`].

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs;
use std::io::ErrorKind;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::io;
use super::layout::is_project_dir_name;
use crate::locks::lock;
use crate::persistence::PersistenceError;

/// How much older than a scan a directory's modification time must be to be trusted.
pub(super) const RACY: Duration = Duration::from_secs(1);

/// What a directory looked like when it was last read.
///
/// A time is trusted only once it is [`RACY`] older than the scan that read it: file-system
/// clocks tick coarsely (a jiffy on Linux), so a change in the same tick as an earlier scan could
/// leave the time as it was; until then the directory is read again every time (git's "racily
/// clean" rule).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Stamp {
    /// Its modification time, when it is old enough to be trusted; `None`: read it again.
    trusted: Option<SystemTime>,
}

impl Stamp {
    /// The stamp of a directory whose modification time was `mtime` when a scan that started at
    /// `scan` read it.
    pub(super) fn new(mtime: SystemTime, scan: SystemTime) -> Self {
        let old_enough = mtime
            .checked_add(RACY)
            .is_some_and(|trusted| trusted < scan);
        Self {
            trusted: old_enough.then_some(mtime),
        }
    }

    /// Whether a directory whose time is now `mtime` can be skipped.
    pub(super) fn holds(&self, mtime: SystemTime) -> bool {
        self.trusted == Some(mtime)
    }
}

/// The project directories under `root` (none when it does not exist).
pub(super) fn project_dirs(root: &Path) -> Result<HashSet<OsString>, PersistenceError> {
    let mut found = HashSet::new();
    let entries = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(io("read directory", root, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| io("read directory", root, e))?;
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        if is_dir && entry.file_name().to_str().is_some_and(is_project_dir_name) {
            found.insert(entry.file_name());
        }
    }
    Ok(found)
}

/// The project directories as last listed, for finding a session's log.
#[derive(Debug, Default)]
pub(super) struct ProjectDirs(Mutex<Option<(Stamp, Arc<[OsString]>)>>);

impl ProjectDirs {
    /// The project directories under `root` now: the kept listing while the root's time holds,
    /// else a new one (kept in its place). A stat of the root in the common case.
    pub(super) fn now(&self, root: &Path) -> Result<Arc<[OsString]>, PersistenceError> {
        // Before the listing: a change made while it runs moves the time past this one.
        let scan = SystemTime::now();
        let mtime = match fs::metadata(root) {
            Ok(meta) => meta.modified().map_err(|e| io("inspect", root, e))?,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Arc::from([])),
            Err(e) => return Err(io("inspect", root, e)),
        };
        if let Some((stamp, names)) = &*self.kept()
            && stamp.holds(mtime)
        {
            return Ok(names.clone());
        }
        let mut names: Vec<OsString> = project_dirs(root)?.into_iter().collect();
        // Looked in, in this order: the same order every time.
        names.sort();
        let names: Arc<[OsString]> = names.into();
        *self.kept() = Some((Stamp::new(mtime, scan), names.clone()));
        Ok(names)
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Option<(Stamp, Arc<[OsString]>)>> {
        lock(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::persistence::BlockingPersistence;
    use crate::persistence::jsonl::{JsonlBackend, log_path, store_one};
    use dsh_session::{SessionHeader, SessionId};

    #[test]
    fn a_racy_time_is_not_trusted() {
        let now = SystemTime::now();
        assert!(Stamp::new(now, now).trusted.is_none());
        assert!(Stamp::new(now - RACY, now).trusted.is_none());
        let old = now - RACY - Duration::from_millis(1);
        assert!(Stamp::new(old, now).holds(old));
        assert!(!Stamp::default().holds(old));
    }

    /// The kept listing is used only while the root's time holds: a project directory made or
    /// removed after it is seen at once, with the root's time put back to an old one (as a
    /// change in the same tick as the listing would leave it) included.
    #[test]
    fn the_listing_is_kept_only_while_the_root_is_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("sessions");
        let dirs = ProjectDirs::default();
        assert!(dirs.now(&root).unwrap().is_empty(), "no root yet");
        std::fs::create_dir_all(root.join("--a--")).unwrap();
        std::fs::create_dir_all(root.join("not-a-project")).unwrap();
        age(&root);
        let names = |dirs: &ProjectDirs| -> Vec<String> {
            dirs.now(&root)
                .unwrap()
                .iter()
                .map(|n| n.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(names(&dirs), ["--a--"]);

        std::fs::create_dir(root.join("--b--")).unwrap();
        assert_eq!(names(&dirs), ["--a--", "--b--"], "a new project");
        // Made in the same tick as a listing: that listing's time was never trusted.
        age(&root);
        assert_eq!(names(&dirs), ["--a--", "--b--"]);
        std::fs::remove_dir(root.join("--a--")).unwrap();
        age(&root);
        assert_eq!(
            names(&dirs),
            ["--a--", "--b--"],
            "trusted: the kept listing"
        );
        std::fs::create_dir(root.join("--c--")).unwrap();
        assert_eq!(names(&dirs), ["--b--", "--c--"], "a time that moved");
    }

    fn stored(backend: &JsonlBackend, id: &str, cwd: &Path) -> SessionHeader {
        let header = SessionHeader::new(SessionId::parse(id).unwrap(), cwd.to_owned(), 1);
        store_one(backend, &header);
        header
    }

    /// Sets `dir`'s modification time to one fixed moment long past, so a listing of it is
    /// trusted and kept, and setting it again puts back the very time that listing saw.
    fn age(dir: &Path) {
        let past = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        fs::File::open(dir).unwrap().set_modified(past).unwrap();
    }

    /// A session another process stores in a project directory this backend has not seen is
    /// found at once, and so is one in a project directory that was removed and made again: the
    /// kept listing of project directories never hides one.
    #[test]
    fn a_session_in_a_new_project_directory_is_found_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("sessions");
        let ours = JsonlBackend::new(root.clone()).unwrap();
        let theirs = JsonlBackend::new(root.clone()).unwrap();
        let first = stored(&theirs, "first", Path::new("/work/a"));
        age(&root);
        assert_eq!(ours.header(&first.id).unwrap(), Some(first.clone()));
        assert_eq!(ours.header(&first.id).unwrap(), Some(first.clone()));
        for n in 0..20 {
            let later = stored(
                &theirs,
                &format!("later-{n}"),
                Path::new(&format!("/work/p{n}")),
            );
            assert_eq!(ours.header(&later.id).unwrap(), Some(later), "{n}");
        }
        age(&root);
        assert_eq!(ours.header(&first.id).unwrap(), Some(first.clone()));
        let gone = log_path(&root, &first);
        fs::remove_dir_all(gone.parent().unwrap().parent().unwrap()).unwrap();
        assert_eq!(
            ours.header(&first.id).unwrap(),
            None,
            "its project was removed"
        );
        let again = stored(&theirs, "again", Path::new("/work/a"));
        assert_eq!(ours.header(&again.id).unwrap(), Some(again));
    }
}
