//! The launcher's file-operation mode (`dsh-launch [PLAN] --file-op`): after confining itself
//! exactly as for a command, the launcher reads one [`FileRequest`] from stdin, performs it with
//! std, writes one [`FileReply`] to stdout and exits. dshd's file tools run every read and write
//! this way, so a file tool reaches exactly what the agent's commands could: the kernel (Landlock)
//! decides, symbolic links, `..`, hard links and `/proc/self/root` included.
//!
//! - A read opens with `O_NONBLOCK` and checks `fstat` before reading, so a FIFO or a device is
//!   refused instead of blocking; it streams the file, keeping at most `max_bytes` of it, so a
//!   file larger than memory costs a bounded buffer.
//! - A write goes to a temporary file in the target's directory (created with `O_EXCL`), gets
//!   the old file's mode (and owner, where permitted), is fsynced and renamed over the target;
//!   the directory is fsynced after. The old file is checked against what dshd expects just
//!   before, so a file changed since the agent read it is not replaced.

mod wire;

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::sha256::{Digest, Sha256};
pub use wire::{
    Expect, Failure, FailureKind, FileReply, FileRequest, MAGIC, ReadReply, WireError, WriteReply,
};

/// The largest request the launcher accepts (a write's content and its framing).
pub const MAX_REQUEST_BYTES: u64 = 64 * 1024 * 1024;

/// Reads one request from stdin, performs it, and writes the reply to stdout.
pub(crate) fn serve() -> Result<(), String> {
    let mut request = Vec::new();
    io::stdin()
        .lock()
        .take(MAX_REQUEST_BYTES + 1)
        .read_to_end(&mut request)
        .map_err(|e| format!("cannot read the file operation: {e}"))?;
    let reply = if request.len() as u64 > MAX_REQUEST_BYTES {
        failed(FailureKind::Other, "the request is too large".to_owned())
    } else {
        match FileRequest::decode(&request) {
            Ok(request) => perform(&request),
            Err(error) => failed(FailureKind::Other, error.to_string()),
        }
    };
    let reply = reply.encode();
    let mut out = io::stdout().lock();
    // A pipe holds 64 KiB by default: a large reply (a read for an edit) would go across in
    // many wake-ups of dshd. Room for all of it where the system allows (1 MiB unprivileged by
    // default); a stdout that is not a pipe, or a refusal, changes nothing.
    if reply.len() > 64 * 1024 {
        let _ = rustix::pipe::fcntl_setpipe_size(&out, reply.len());
    }
    out.write_all(&reply)
        .and_then(|()| out.flush())
        .map_err(|e| format!("cannot write the reply: {e}"))
}

/// Performs one request (in whatever confinement this process has).
pub fn perform(request: &FileRequest) -> FileReply {
    let result = match request {
        FileRequest::Read {
            path,
            offset,
            limit,
            max_bytes,
            hash_limit,
        } => read(path, *offset, *limit, *max_bytes, *hash_limit).map(FileReply::Read),
        FileRequest::Write {
            path,
            content,
            expect,
        } => write(path, content, *expect).map(FileReply::Written),
    };
    result.unwrap_or_else(FileReply::Failed)
}

fn failed(kind: FailureKind, message: String) -> FileReply {
    FileReply::Failed(Failure { kind, message })
}

fn io_failure(what: &str, error: &io::Error) -> Failure {
    let kind = match error.kind() {
        io::ErrorKind::NotFound => FailureKind::NotFound,
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => FailureKind::Denied,
        io::ErrorKind::IsADirectory => FailureKind::NotRegular,
        _ => FailureKind::Other,
    };
    Failure {
        kind,
        message: format!("{what}: {error}"),
    }
}

/// Opens an existing file without blocking (a FIFO with no writer would block a plain open) and
/// refuses anything but a regular file before a byte is read.
fn open_regular(path: &Path) -> Result<(File, std::fs::Metadata), Failure> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOCTTY).bits() as i32)
        .open(path)
        .map_err(|e| io_failure("cannot open the file", &e))?;
    let meta = file
        .metadata()
        .map_err(|e| io_failure("cannot inspect the file", &e))?;
    let ft = meta.file_type();
    if !ft.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if ft.is_dir() {
            "a directory"
        } else if ft.is_fifo() {
            "a FIFO (named pipe)"
        } else if ft.is_char_device() {
            "a character device"
        } else if ft.is_block_device() {
            "a block device"
        } else if ft.is_socket() {
            "a socket"
        } else {
            "not a regular file"
        };
        return Err(Failure {
            kind: FailureKind::NotRegular,
            message: format!("it is {what}, not a regular file"),
        });
    }
    Ok((file, meta))
}

fn read(
    path: &Path,
    offset: u64,
    limit: u64,
    max_bytes: u64,
    hash_limit: u64,
) -> Result<ReadReply, Failure> {
    let (mut file, meta) = open_regular(path)?;
    let max_bytes = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let end = offset.saturating_add(limit);
    let mut hasher = (meta.len() <= hash_limit).then(Sha256::new);
    let mut hashed: u64 = 0;
    let mut line: u64 = 0;
    let wanted = usize::try_from(meta.len())
        .unwrap_or(usize::MAX)
        .min(max_bytes);
    let mut bytes = Vec::with_capacity(wanted);
    let (mut cut, mut more, mut selecting) = (false, false, limit > 0);
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io_failure("cannot read the file", &e)),
        };
        let chunk = &buf[..n];
        if let Some(h) = &mut hasher {
            hashed += n as u64;
            // The file grew past the limit while being read: no digest rather than a wrong one.
            if hashed > hash_limit {
                hasher = None;
            } else {
                h.update(chunk);
            }
        }
        // Line by line (a slice each), not byte by byte: a 1 MB file is read in about the time
        // it takes to hash it.
        let mut rest = chunk;
        while selecting && !rest.is_empty() {
            if line >= end {
                more = true;
                selecting = false;
                break;
            }
            let (piece, ended) = match rest.iter().position(|&b| b == b'\n') {
                Some(i) => (&rest[..=i], true),
                None => (rest, false),
            };
            if line >= offset {
                let room = max_bytes - bytes.len();
                if piece.len() > room {
                    bytes.extend_from_slice(&piece[..room]);
                    cut = true;
                    selecting = false;
                    break;
                }
                bytes.extend_from_slice(piece);
            }
            rest = &rest[piece.len()..];
            if ended {
                line += 1;
            }
        }
        if limit == 0 && n > 0 {
            more = true;
        }
        if !selecting && hasher.is_none() {
            break;
        }
    }
    Ok(ReadReply {
        size: meta.len(),
        bytes,
        cut,
        more,
        digest: hasher.map(Sha256::finish),
    })
}

/// The digest of an open file of `size` bytes, read to its end.
fn digest_of(file: &mut File) -> Result<(u64, Digest), Failure> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n as u64;
                hasher.update(&buf[..n]);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_failure("cannot read the file", &e)),
        }
    }
    Ok((total, hasher.finish()))
}

/// The file a write replaces: a symbolic link is written through to its target, as `>` would.
fn target_of(path: &Path) -> Result<PathBuf, Failure> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            std::fs::canonicalize(path).map_err(|e| Failure {
                kind: FailureKind::NotFound,
                message: format!("it is a symbolic link whose target cannot be resolved: {e}"),
            })
        }
        _ => Ok(path.to_owned()),
    }
}

fn write(path: &Path, content: &[u8], expect: Expect) -> Result<WriteReply, Failure> {
    let target = target_of(path)?;
    let parent = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("/"),
    };
    match std::fs::metadata(&parent) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Failure {
                kind: FailureKind::NoParent,
                message: format!("{} is not a directory", parent.display()),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Failure {
                kind: FailureKind::NoParent,
                message: format!("the directory {} does not exist", parent.display()),
            });
        }
        Err(e) => return Err(io_failure("cannot inspect the parent directory", &e)),
    }
    let existing = match open_regular(&target) {
        Ok(found) => Some(found),
        Err(f) if f.kind == FailureKind::NotFound => None,
        Err(f) => return Err(f),
    };
    let changed = |message: &str| Failure {
        kind: FailureKind::Changed,
        message: message.to_owned(),
    };
    let mode = match (expect, existing) {
        (Expect::Absent, None) => None,
        (Expect::Absent, Some(_)) => return Err(changed("the file exists now")),
        (Expect::Same { .. }, None) => return Err(changed("the file no longer exists")),
        (Expect::Same { size, digest }, Some((mut file, meta))) => {
            if meta.len() != size || digest_of(&mut file)? != (size, digest) {
                return Err(changed("the file's content is not what was read"));
            }
            Some(meta)
        }
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let tmp = parent.join(format!(".{name}.dsh-{}-{nanos}.tmp", std::process::id()));
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if mode.is_some() { 0o600 } else { 0o666 })
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)
        .map_err(|e| io_failure("cannot create a temporary file beside it", &e))?;
    let finish = |file: &mut File| -> io::Result<u32> {
        file.write_all(content)?;
        if let Some(meta) = &mode {
            // The owner first: a chown clears set-user-id bits the chmod then restores. Not
            // permitted unless privileged; the file then belongs to whoever writes it.
            let _ = std::os::unix::fs::fchown(&*file, Some(meta.uid()), Some(meta.gid()));
            file.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        }
        file.sync_all()?;
        Ok(file.metadata()?.mode() & 0o7777)
    };
    let result = finish(&mut file).and_then(|mode| {
        std::fs::rename(&tmp, &target)?;
        Ok(mode)
    });
    let mode = match result {
        Ok(mode) => mode,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(io_failure("cannot write the file", &e));
        }
    };
    // The rename is durable once the directory is; a failure here leaves a complete file.
    if let Ok(dir) = File::open(&parent) {
        let _ = dir.sync_all();
    }
    Ok(WriteReply {
        created: matches!(expect, Expect::Absent),
        mode,
    })
}

#[cfg(test)]
mod tests;
