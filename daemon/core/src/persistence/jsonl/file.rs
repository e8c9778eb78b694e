//! Durable file operations for the JSONL backend (CONTRACTS §4.4): private directories, atomic
//! creation that never overwrites, and appends that leave no partial write behind.

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, BufWriter, ErrorKind, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::persistence::{PersistenceError, write_error};

fn io_error(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> PersistenceError {
    let path = path.to_owned();
    move |source| PersistenceError::Io {
        action,
        path,
        error: source,
    }
}

/// Fsyncs a directory, making the entries created in it durable.
pub(super) fn sync_dir(dir: &Path) -> Result<(), PersistenceError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_error("sync directory", dir))
}

/// Creates `dir` and any missing ancestors with mode 0700, fsyncing each new directory's parent so
/// the new entry survives a crash. Existing directories are left as they are.
pub(super) fn create_private_dirs(dir: &Path) -> Result<(), PersistenceError> {
    let mut missing: Vec<&Path> = Vec::new();
    let mut cursor = Some(dir);
    while let Some(path) = cursor {
        match fs::metadata(path) {
            Ok(meta) if meta.is_dir() => break,
            Ok(_) => {
                return Err(PersistenceError::Io {
                    action: "create directory",
                    path: path.to_owned(),
                    error: io::Error::from(ErrorKind::NotADirectory),
                });
            }
            Err(e) if e.kind() == ErrorKind::NotFound => missing.push(path),
            Err(e) => return Err(io_error("inspect", path)(e)),
        }
        cursor = path.parent();
    }
    for path in missing.into_iter().rev() {
        match DirBuilder::new().mode(0o700).create(path) {
            Ok(()) => {}
            // Another writer made it between our stat and mkdir: just as good.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(write_error("create directory", path, e)),
        }
        if let Some(parent) = path.parent() {
            sync_dir(parent)?;
        }
    }
    Ok(())
}

/// Refuses a directory that is not ours or that group or others may write: a file created there
/// could be read or replaced by someone else. Used for directories outside the home (rescue copies
/// in the temporary directory).
pub(super) fn check_private_dir(dir: &Path) -> Result<(), PersistenceError> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::symlink_metadata(dir).map_err(io_error("inspect", dir))?;
    let ours = meta.uid() == rustix::process::geteuid().as_raw();
    if !meta.is_dir() || !ours || meta.mode() & 0o022 != 0 {
        return Err(PersistenceError::Io {
            action: "use",
            path: dir.to_owned(),
            error: io::Error::new(
                ErrorKind::PermissionDenied,
                "not a private directory of ours (owner, mode or a link)",
            ),
        });
    }
    Ok(())
}

/// What the log's content is written through: bytes go to the file at an advancing offset, in
/// pieces of at most [`WRITE_BUFFER`] bytes, and a single write larger than that (a huge event's
/// text) goes from the caller's memory to the file without a copy.
pub(super) type LogWriter<'a> = BufWriter<WriteAt<'a>>;

/// Small events are gathered into writes of this size; the common checkpoint (a few dozen small
/// events) is still one `pwrite`.
const WRITE_BUFFER: usize = 64 * 1024;

/// Writes to a file at an advancing offset (`pwrite`), counting the bytes written.
pub(super) struct WriteAt<'a> {
    file: &'a File,
    offset: u64,
    written: u64,
}

impl Write for WriteAt<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write_at(buf, self.offset + self.written)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Runs `write` on a [`LogWriter`] that starts at `offset` of `file` and returns how many bytes
/// reached the file. Not durable yet: the caller syncs. On failure, whatever is still buffered is
/// dropped rather than written, so the bytes past `offset` are a prefix of what was meant and the
/// caller's cut-back covers them.
fn write_through(
    file: &File,
    offset: u64,
    write: impl FnOnce(&mut LogWriter<'_>) -> io::Result<()>,
) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(
        WRITE_BUFFER,
        WriteAt {
            file,
            offset,
            written: 0,
        },
    );
    let result = write(&mut out).and_then(|()| out.flush());
    // `into_parts`, not drop: dropping a BufWriter writes out its buffer, after a failure too.
    let (at, _unwritten) = out.into_parts();
    result.map(|()| at.written)
}

/// Publishes a new log at `path` holding exactly what `write` writes: written to a temporary file
/// in the same directory, fsynced, then hard-linked to the final name. `link` fails if the name
/// exists, so an existing log is never overwritten, and a crash leaves either no log or the whole
/// one. Returns the file, open for reading and writing, for later appends, and its length.
pub(super) fn create_new_log(
    path: &Path,
    write: impl FnOnce(&mut LogWriter<'_>) -> io::Result<()>,
) -> Result<(File, u64), PersistenceError> {
    let dir = path.parent().ok_or_else(|| {
        PersistenceError::Config(format!("log path {} has no parent", path.display()))
    })?;
    create_private_dirs(dir)?;
    // The final name existing is the common refusal; check it first to spare a temp file.
    if fs::symlink_metadata(path).is_ok() {
        return Err(exists(path));
    }
    let tmp = temp_name(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| write_error("create a file in", dir, e))?;
    let published = write_through(&file, 0, write)
        .and_then(|len| file.sync_all().map(|()| len))
        .map_err(|e| write_error("write", &tmp, e))
        .and_then(|len| {
            fs::hard_link(&tmp, path).map(|()| len).map_err(|e| {
                if e.kind() == ErrorKind::AlreadyExists {
                    exists(path)
                } else {
                    io_error("link", path)(e)
                }
            })
        });
    // The temporary name goes whether or not the link was made; the inode lives on under the
    // final name (and in `file`) when it was.
    if let Err(e) = fs::remove_file(&tmp) {
        tracing::warn!(path = %tmp.display(), error = %e, "could not remove a temporary log file");
    }
    let len = published?;
    sync_dir(dir)?;
    Ok((file, len))
}

fn exists(path: &Path) -> PersistenceError {
    PersistenceError::Io {
        action: "create",
        path: path.to_owned(),
        error: io::Error::new(
            ErrorKind::AlreadyExists,
            "a session log already exists there; it is never overwritten",
        ),
    }
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    path.with_file_name(format!(".{name}.{}.tmp", uuid::Uuid::now_v7().simple()))
}

/// Opens an existing log for reading and appending. A log this process may not write (a
/// read-only home) is [`PersistenceError::NotWritable`]: reading it needs no such open.
pub(super) fn open_log(path: &Path) -> Result<File, PersistenceError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| write_error("open for writing", path, e))
}

/// Checks that the log at `path` is still the file we hold open and still `len` bytes long: one
/// writer per session is an invariant, and this catches a second one (another daemon on the same
/// home) before an append would overwrite what it wrote at the same offset.
pub(super) fn check_unchanged(file: &File, path: &Path, len: u64) -> Result<(), PersistenceError> {
    use std::os::unix::fs::MetadataExt;
    let ours = file.metadata().map_err(io_error("inspect", path))?;
    let diverged = |reason: String| PersistenceError::Diverged {
        path: path.to_owned(),
        reason,
    };
    let named = match fs::metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => return Err(io_error("inspect", path)(e)),
    };
    if ours.nlink() == 0 || named.is_none_or(|n| (n.dev(), n.ino()) != (ours.dev(), ours.ino())) {
        return Err(diverged(
            "the log was removed or replaced by another file".to_owned(),
        ));
    }
    if ours.len() != len {
        return Err(diverged(format!(
            "the log is {} bytes but this daemon wrote {len}: another writer changed it",
            ours.len()
        )));
    }
    Ok(())
}

/// Writes what `write` writes at `offset` (the end of the committed log), waits until it is
/// durable and returns its length. On any failure (of the file, or of `write` itself) the file is
/// cut back to `offset`, so no partial line is left for the next append to land after; a crash
/// midway leaves a torn tail past `offset`, which the next load drops.
pub(super) fn append_durably(
    file: &File,
    path: &Path,
    offset: u64,
    write: impl FnOnce(&mut LogWriter<'_>) -> io::Result<()>,
) -> Result<u64, PersistenceError> {
    let written = write_through(file, offset, write).and_then(|len| file.sync_data().map(|()| len));
    written.map_err(|source| {
        if let Err(rollback) = truncate_durably(file, path, offset) {
            tracing::error!(
                path = %path.display(),
                error = %rollback,
                "could not cut a failed append back; the next load will treat it as a torn tail"
            );
        }
        write_error("append to", path, source)
    })
}

/// Cuts the file to `len` bytes and waits until that is durable.
pub(super) fn truncate_durably(file: &File, path: &Path, len: u64) -> Result<(), PersistenceError> {
    file.set_len(len)
        .and_then(|()| file.sync_all())
        .map_err(io_error("truncate", path))
}

/// Moves the bytes of the log past `from` into a new private file beside it,
/// `<log>.<what>-<unix ms>`, durably, then cuts the log back to `from`. Nothing dshd did not write
/// is ever just dropped: a torn last line, or what a user's repair moves out of the way, stays
/// where a person can look at it. Returns the new file's path.
pub(super) fn set_aside(
    file: &File,
    path: &Path,
    from: u64,
    what: &str,
) -> Result<PathBuf, PersistenceError> {
    let len = file.metadata().map_err(io_error("inspect", path))?.len();
    let mut tail = vec![0; usize::try_from(len.saturating_sub(from)).unwrap_or(0)];
    file.read_exact_at(&mut tail, from)
        .map_err(io_error("read", path))?;
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let stamp = dsh_session::now_ms();
    let mut attempt = 0;
    let aside = loop {
        let suffix = if attempt == 0 {
            String::new()
        } else {
            format!("-{attempt}")
        };
        let aside = path.with_file_name(format!("{name}.{what}-{stamp}{suffix}"));
        match create_new_log(&aside, |out| out.write_all(&tail)) {
            Ok(_) => break aside,
            // Two set-asides in one millisecond: the next name.
            Err(PersistenceError::Io { error: source, .. })
                if source.kind() == ErrorKind::AlreadyExists && attempt < 100 =>
            {
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    };
    truncate_durably(file, path, from)?;
    Ok(aside)
}

/// Reads the whole log; `Ok(None)` when it does not exist.
pub(super) fn read_log(path: &Path) -> Result<Option<Vec<u8>>, PersistenceError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_error("read", path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn bytes(bytes: &[u8]) -> impl FnOnce(&mut LogWriter<'_>) -> io::Result<()> + '_ {
        move |out| out.write_all(bytes)
    }

    #[test]
    fn create_never_overwrites() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("a").join("b").join("session.jsonl");
        create_new_log(&path, bytes(b"first\n")).unwrap();
        let err = create_new_log(&path, bytes(b"second\n")).unwrap_err();
        assert!(
            matches!(&err, PersistenceError::Io { error: source, .. } if source.kind() == ErrorKind::AlreadyExists),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"first\n");
        let dir = path.parent().unwrap();
        assert_eq!(
            fs::read_dir(dir).unwrap().count(),
            1,
            "temp files are removed"
        );
        assert_eq!(
            fs::metadata(dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }

    #[test]
    fn a_log_changed_by_another_writer_is_noticed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        let file = create_new_log(&path, bytes(b"h\n")).unwrap().0;
        check_unchanged(&file, &path, 2).unwrap();
        // Another writer appends a line.
        let mut other = OpenOptions::new().append(true).open(&path).unwrap();
        io::Write::write_all(&mut other, b"theirs\n").unwrap();
        let err = check_unchanged(&file, &path, 2).unwrap_err();
        assert!(
            matches!(&err, PersistenceError::Diverged { reason, .. } if reason.contains("9 bytes")),
            "{err}"
        );
        // Replaced by another file of the same length.
        let fresh = tmp.path().join("fresh");
        fs::write(&fresh, b"h\ntheirs\n").unwrap();
        fs::rename(&fresh, &path).unwrap();
        let err = check_unchanged(&file, &path, 9).unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        fs::remove_file(&path).unwrap();
        let err = check_unchanged(&file, &path, 9).unwrap_err();
        assert!(err.to_string().contains("removed"), "{err}");
    }

    #[test]
    fn appends_land_at_the_committed_end() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        let file = create_new_log(&path, bytes(b"h\n")).unwrap().0;
        // Bytes past the committed end (a torn tail) are overwritten, not appended after.
        append_durably(&file, &path, 2, bytes(b"torn")).unwrap();
        append_durably(&file, &path, 2, bytes(b"ok\n")).unwrap();
        truncate_durably(&file, &path, 5).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"h\nok\n");
        assert_eq!(read_log(&tmp.path().join("missing")).unwrap(), None);
    }

    #[test]
    fn an_append_is_counted_whole_and_a_failed_one_is_cut_back() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("log");
        let (file, len) = create_new_log(&path, bytes(b"h\n")).unwrap();
        assert_eq!(len, 2);
        // Small pieces around one larger than the buffer, which bypasses it.
        let big = vec![b'x'; 3 * WRITE_BUFFER + 5];
        let written = append_durably(&file, &path, len, |out| {
            out.write_all(b"a")?;
            out.write_all(&big)?;
            out.write_all(b"\n")
        })
        .unwrap();
        assert_eq!(written, big.len() as u64 + 2);
        let committed = len + written;
        let mut expected = b"h\na".to_vec();
        expected.extend_from_slice(&big);
        expected.push(b'\n');
        assert_eq!(fs::read(&path).unwrap(), expected);

        // Part of the append reaches the file before the writer fails.
        let err = append_durably(&file, &path, committed, |out| {
            out.write_all(&big)?;
            out.write_all(b"partial")?;
            Err(io::Error::other("serialisation failed"))
        })
        .unwrap_err();
        assert!(
            matches!(
                &err,
                PersistenceError::Io {
                    action: "append to",
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            fs::read(&path).unwrap(),
            expected,
            "cut back to the committed end"
        );
    }
}
