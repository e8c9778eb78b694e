//! The private temporary directories of confined commands of no agent: one each, empty when the
//! command starts, never shared by two running commands.
//!
//! Making a directory and removing it cost 100–250 µs each on a journaling disk, as much as the
//! rest of a confined launch, and most commands never write their `TMPDIR`. So a directory that
//! a command left as it was made (empty, a directory of this user's with mode 0700) waits for
//! the next command instead of being removed; one that was used is removed off the caller's path,
//! and the next command's made there ahead of it. A command takes the waiting directory only after
//! checking again that it is still as made (a command of no agent could have written into it
//! since, see `confine`), else it makes its own as before.
//!
//! Handing on an empty directory gives the next command nothing the first left, just as a new
//! one would; what it does not give is a name never used before.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};

use rustix::fs::{CWD, FileType, Mode, OFlags, RawDir};

use crate::sandbox::SandboxError;

use super::confine::remove_tmp;

/// The one directory waiting for the next command of no agent, if any.
#[derive(Debug, Default)]
pub(crate) struct CallDirs(Mutex<Option<PathBuf>>);

impl CallDirs {
    /// A directory in `parent` for one command: the waiting one while it is as it was made, else
    /// a new one.
    pub(crate) fn take(&self, parent: &Path) -> Result<PathBuf, SandboxError> {
        if let Some(dir) = self.slot().take() {
            if dir.parent() == Some(parent) && is_as_made(&dir) {
                return Ok(dir);
            }
            // Written into since, or of another parent (the settings changed).
            remove_tmp(&dir);
        }
        make(parent)
    }

    /// Keeps `dir`, whose command is over, for the next command when it is as it was made and no
    /// other waits; else gives it back, to be removed.
    pub(crate) fn hand_on(&self, dir: PathBuf) -> Option<PathBuf> {
        if !is_as_made(&dir) {
            return Some(dir);
        }
        let mut slot = self.slot();
        if slot.is_some() {
            return Some(dir);
        }
        *slot = Some(dir);
        None
    }

    /// Removes `used` (given back by [`Self::hand_on`]) and makes the next command's beside it.
    pub(crate) fn discard(&self, used: &Path) {
        remove_tmp(used);
        if let Some(parent) = used.parent() {
            self.restock(parent);
        }
    }

    /// Makes the next command's directory in `parent`, unless one is waiting. A failure is left
    /// to the next command, which makes its own and reports it.
    fn restock(&self, parent: &Path) {
        if self.slot().is_some() {
            return;
        }
        let Ok(dir) = make(parent) else {
            return;
        };
        if let Some(extra) = self.hand_on(dir) {
            // Another command's got there first: one is enough.
            remove_tmp(&extra);
        }
    }

    /// Forgets the waiting directory (its parent is being removed).
    pub(crate) fn forget(&self) {
        self.slot().take();
    }

    fn slot(&self) -> MutexGuard<'_, Option<PathBuf>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A new directory in `parent`: made here or not at all (never one someone else put there).
fn make(parent: &Path) -> Result<PathBuf, SandboxError> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = parent.join(uuid::Uuid::now_v7().simple().to_string());
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|source| SandboxError::Tmp {
            path: dir.clone(),
            source,
        })?;
    Ok(dir)
}

/// Whether `dir` is as [`make`] left it: a directory (not a link to one) of this user's, mode
/// 0700, with nothing in it. Bounded whatever a command did to it: an open, a stat and at most
/// two reads of entries.
fn is_as_made(dir: &Path) -> bool {
    let Ok(fd) = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    ) else {
        return false;
    };
    let Ok(stat) = rustix::fs::fstat(&fd) else {
        return false;
    };
    FileType::from_raw_mode(stat.st_mode) == FileType::Directory
        && stat.st_uid == rustix::process::getuid().as_raw()
        && stat.st_mode & 0o7777 == 0o700
        && is_empty(fd)
}

/// Whether the directory open at `fd` has no entry but `.` and `..`.
fn is_empty(fd: OwnedFd) -> bool {
    // Room for `.`, `..` and one entry of the longest name: the answer is in the first read, or
    // the second when a long first name did not fit beside the dots.
    let mut buf = [MaybeUninit::<u8>::uninit(); 1024];
    let mut entries = RawDir::new(fd, &mut buf);
    while let Some(entry) = entries.next() {
        match entry {
            Ok(entry) if matches!(entry.file_name().to_bytes(), b"." | b"..") => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    /// A directory is handed on only while it is as made, one at a time; anything a command did
    /// to it (an entry, a mode, a link in its place) has it removed instead, and the next command
    /// gets a new one.
    #[test]
    fn only_a_directory_left_as_made_is_handed_on() {
        let parent = tempfile::tempdir().unwrap();
        let dirs = CallDirs::default();
        let first = dirs.take(parent.path()).unwrap();
        assert!(is_as_made(&first));
        assert_eq!(dirs.hand_on(first.clone()), None, "kept for the next");
        assert_eq!(dirs.take(parent.path()).unwrap(), first, "handed on");

        let second = dirs.take(parent.path()).unwrap();
        assert_ne!(second, first, "two running commands never share one");
        assert_eq!(dirs.hand_on(first.clone()), None);
        assert_eq!(
            dirs.hand_on(second.clone()),
            Some(second.clone()),
            "one waits at a time"
        );

        let entry = dirs.take(parent.path()).unwrap();
        std::fs::write(entry.join(".hidden"), "").unwrap();
        assert_eq!(dirs.hand_on(entry.clone()), Some(entry.clone()));
        let long = entry.join("n".repeat(255));
        std::fs::remove_file(entry.join(".hidden")).unwrap();
        std::fs::create_dir(&long).unwrap();
        assert!(!is_as_made(&entry), "an entry past the dots");
        std::fs::remove_dir(&long).unwrap();
        assert!(is_as_made(&entry));
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!is_as_made(&entry), "a changed mode");

        // Written into while it waited: removed, and a new one made.
        let waiting = dirs.take(parent.path()).unwrap();
        assert_eq!(dirs.hand_on(waiting.clone()), None);
        std::fs::write(waiting.join("planted"), "").unwrap();
        let next = dirs.take(parent.path()).unwrap();
        assert_ne!(next, waiting);
        assert!(!waiting.exists(), "the written one is removed");
        assert!(is_as_made(&next));

        // A link put in its place.
        assert_eq!(dirs.hand_on(next.clone()), None);
        std::fs::remove_dir(&next).unwrap();
        std::os::unix::fs::symlink(parent.path(), &next).unwrap();
        let after = dirs.take(parent.path()).unwrap();
        assert_ne!(after, next);
        assert!(
            std::fs::symlink_metadata(&next).is_err(),
            "the link is removed"
        );
        assert!(parent.path().exists(), "not what it pointed to");
    }

    /// `restock` makes one directory ahead while none waits, and never a second.
    #[test]
    fn restock_makes_one_ahead() {
        let parent = tempfile::tempdir().unwrap();
        let dirs = CallDirs::default();
        dirs.restock(parent.path());
        dirs.restock(parent.path());
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
        let made = dirs.take(parent.path()).unwrap();
        assert!(is_as_made(&made));
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 1);
    }
}
