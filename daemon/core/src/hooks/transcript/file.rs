//! Where a projection is written, and how: only into a directory that is dshd's own, and never
//! through a name someone else put there (issue 39, item 11). The projection holds the model's
//! text; a link planted under a session's name (session ids are known to every client) would
//! turn each hook run into an append to the link's target.
//!
//! The directory is opened with `O_NOFOLLOW` and must be this user's, closed to group and others;
//! files are opened relative to it with `O_NOFOLLOW`. A projection's first write unlinks its name
//! and creates the file exclusively; later writes refuse anything but a regular file of this
//! user's with one link (`O_NONBLOCK`, so a FIFO cannot hang the hook), and the caller then writes
//! the projection again from the session's first event.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{AtFlags, Mode, OFlags};
use rustix::io::Errno;

/// Makes `dir` a private directory of this user's (a link or file in its place is removed, not
/// followed). What is in it stays: a projection is kept while its session is stored, and its
/// first write by a dshd replaces whatever has its name (`create`), so nothing planted there is
/// ever written through.
pub(super) fn prepare(dir: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Ok(meta) if !meta.is_dir() => std::fs::remove_file(dir)?,
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    crate::exec::ensure_private_dir(dir)
}

/// Removes `dir` and everything in it, links not followed (projections are not kept: a dshd
/// that writes none leaves none of an earlier one's behind).
pub(super) fn clear(dir: &Path) {
    let removed = match std::fs::symlink_metadata(dir) {
        Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(dir),
        Ok(_) => std::fs::remove_file(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    if let Err(error) = removed {
        tracing::warn!(dir = %dir.display(), %error, "cannot remove old Claude Code transcript projections");
    }
}

/// The projection directory, opened without following a link, and only when it is still dshd's
/// own: this user's, with no access for group or others.
pub(super) fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| with_context(e, "the projection directory cannot be opened (a link?)"))?;
    let stat = rustix::fs::fstat(&fd)?;
    if stat.st_uid != rustix::process::getuid().as_raw() || stat.st_mode & 0o077 != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            "the projection directory is not dshd's own (another owner, or open to group or others)",
        ));
    }
    Ok(fd)
}

/// A projection dshd wrote, opened to append: refused when the name is now a link (`O_NOFOLLOW`),
/// not a regular file (never blocking on a FIFO), another user's, or a file with other names
/// (a hard link to someone's file).
pub(super) fn open_existing(dir: &OwnedFd, name: &str) -> io::Result<File> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let stat = rustix::fs::fstat(&fd)?;
    let regular =
        rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile;
    if !regular || stat.st_nlink != 1 || stat.st_uid != rustix::process::getuid().as_raw() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not the regular file dshd wrote",
        ));
    }
    Ok(File::from(fd))
}

/// A new projection (0600): whatever has the name now is removed first, not followed.
pub(super) fn create(dir: &OwnedFd, name: &str) -> io::Result<File> {
    match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => {}
        // A directory in the way: only an empty one can go this way; anything else is refused
        // by the exclusive create below.
        Err(Errno::ISDIR) => {
            let _ = rustix::fs::unlinkat(dir, name, AtFlags::REMOVEDIR);
        }
        Err(e) => return Err(e.into()),
    }
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::EXCL
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    )?;
    Ok(File::from(fd))
}

fn with_context(error: Errno, what: &str) -> io::Error {
    io::Error::new(io::Error::from(error).kind(), format!("{what}: {error}"))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use serde_json::{Value, json};

    use super::super::{SessionEvents, Transcripts};
    use super::*;
    use dsh_session::{Event, EventData, MessageSource, SessionHeader, SessionId, UserMessage};

    struct Log(Vec<Event>);

    impl SessionEvents for Log {
        fn events_from(&self, seq: u64) -> Vec<Event> {
            self.0.iter().filter(|e| e.seq >= seq).cloned().collect()
        }
    }

    fn event(seq: u64, data: EventData) -> Event {
        Event {
            seq,
            time: 1_764_680_400_123,
            data,
        }
    }

    fn said(text: &str, seq: u64) -> Event {
        event(
            seq,
            EventData::UserMessage {
                message: UserMessage {
                    text: text.into(),
                    source: MessageSource::User,
                },
            },
        )
    }

    fn lines(path: &Path) -> Vec<Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn links_and_strangers_at_a_projection_are_replaced_never_written_through() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let header = SessionHeader::new(SessionId::parse("s-1").unwrap(), PathBuf::from("/p"), 2);
        let transcripts = Transcripts::new(dir.path().join("t"));
        let path = transcripts.path(&header.id);
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine\n").unwrap();
        let mut log = Log(vec![said("one", 0)]);

        // Planted before the first write.
        symlink(&victim, &path).unwrap();
        transcripts.sync(&header, "m", &log);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(lines(&path).len(), 1);

        // Swapped in after it: the whole projection is written again in the link's place.
        std::fs::remove_file(&path).unwrap();
        symlink(&victim, &path).unwrap();
        log.0.push(said("two", 1));
        transcripts.sync(&header, "m", &log);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        let texts: Vec<Value> = lines(&path)
            .iter()
            .map(|r| r["message"]["content"].clone())
            .collect();
        assert_eq!(texts, [json!("one"), json!("two")]);

        // A hard link to someone's file, then a FIFO (opening it must not block).
        std::fs::remove_file(&path).unwrap();
        std::fs::hard_link(&victim, &path).unwrap();
        log.0.push(said("three", 2));
        transcripts.sync(&header, "m", &log);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine\n");
        assert_eq!(lines(&path).len(), 3);
        std::fs::remove_file(&path).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .unwrap();
        log.0.push(said("four", 3));
        transcripts.sync(&header, "m", &log);
        assert_eq!(lines(&path).len(), 4);
    }

    #[test]
    fn the_directory_is_made_private_keeps_its_projections_and_a_link_to_it_is_not_followed() {
        use std::os::unix::fs::{PermissionsExt as _, symlink};
        let tmp = tempfile::tempdir().unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("kept"), "kept").unwrap();

        // A link where the directory goes is removed, not followed.
        let dir = tmp.path().join("t");
        symlink(&elsewhere, &dir).unwrap();
        let transcripts = Transcripts::new(dir.clone());
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("kept")).unwrap(),
            "kept"
        );
        drop(transcripts);

        // What is in it stays (projections outlive their dshd); a link at a session's name is
        // replaced at its first write, never followed (the test above).
        std::fs::write(dir.join("s-1.jsonl"), "{}").unwrap();
        symlink(&elsewhere, dir.join("s-2.jsonl")).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let transcripts = Transcripts::new(dir.clone());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("kept")).unwrap(),
            "kept"
        );

        // Opened to group or others later, it is no longer written to.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let header = SessionHeader::new(SessionId::parse("s-1").unwrap(), PathBuf::from("/p"), 2);
        transcripts.sync(&header, "m", &Log(vec![said("one", 0)]));
        assert_eq!(
            std::fs::read_to_string(transcripts.path(&header.id)).unwrap(),
            "{}"
        );

        // With projections off, an earlier dshd's are removed all the same.
        clear(&dir);
        assert!(!dir.exists());
    }
}
