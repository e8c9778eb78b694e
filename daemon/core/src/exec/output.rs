//! Output capture: one [`Collector`] per stream.
//!
//! Each stream keeps only its **tail** in memory (at most `output_cap_bytes`, trimmed byte-exactly,
//! so a multi-byte character can be cut at the start of the window). Output exactly at the cap is
//! not truncated and gets no spill file. On the first byte past the cap a spill file is created and
//! receives the whole stream from byte 0 (everything before the overflow is still in memory at that
//! moment) and every later chunk, up to `spill_cap_bytes`. Past the spill cap the file is closed and
//! kept: it then holds the head of the stream, the memory tail holds the end, and the outcome says
//! the spill is incomplete. If the spill cannot be written (disk full, bad directory) it is removed
//! and the outcome reports "truncated, no full copy"; capture itself never fails.
//!
//! Spill files live in one private directory (created 0700, checked to be a real directory owned
//! by us, tightened to 0700 if needed) and are created with `O_EXCL` and mode 0600 under a name with
//! the daemon's pid and a UUID v7 (random bits), so names are unique and not guessable. Spill files
//! are writes to the page cache of at most `spill_cap_bytes`, so they are done synchronously on the
//! reading task.
//!
//! A spill file lives as long as something can still read it, and no longer: an agent's foreground
//! spills until the agent closes (its model is handed the path and may read it in a later step);
//! a command run for no agent only until the call returns (nothing in the daemon will read it, so
//! its outcome reports no path); a background job's until its output has been read to the end
//! after it ended, it is forgotten, or its agent closes. Together they may hold at most
//! `spill_total_cap_bytes`: past that a stream gets no full copy, and the outcome and the log say
//! which setting to raise. Files of earlier daemon processes are removed at start.
//!
//! Background jobs read a collector incrementally with [`Collector::read_from`]: offsets are
//! whole-stream byte offsets, each read is bounded, and bytes before the memory window come from
//! the spill file, so a reader that reads to the end gets every byte the stream produced; only
//! what no copy holds (past `spill_cap_bytes`, or with no spill kept) is skipped, and said so.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::tap::{OutputStream, OutputTap, StreamTap, incomplete_utf8_suffix, lossy};
use crate::locks::lock;
use dsh_session::SessionId;

/// Where and how much to spill; shared by every collector of one executor.
#[derive(Debug)]
pub(crate) struct SpillTarget {
    dir: PathBuf,
    /// Bytes of one stream's spill at most.
    cap: u64,
    /// Bytes of all live spill files together at most.
    total_cap: u64,
    /// Bytes the live spill files hold now.
    used: AtomicU64,
    /// Foreground spills kept for an agent's model, removed when it closes.
    kept: Mutex<HashMap<SessionId, Vec<(PathBuf, u64)>>>,
}

impl SpillTarget {
    pub(crate) fn new(dir: PathBuf, cap: u64, total_cap: u64) -> Self {
        Self {
            dir,
            cap,
            total_cap,
            used: AtomicU64::new(0),
            kept: Mutex::new(HashMap::new()),
        }
    }

    /// Claims `n` bytes of the total; false when that would pass `total_cap`.
    fn reserve(&self, n: u64) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(n).filter(|&after| after <= self.total_cap)
            })
            .is_ok()
    }

    /// Removes a spill file and gives its bytes back.
    fn remove(&self, path: &Path, bytes: u64) {
        if let Err(error) = std::fs::remove_file(path)
            && error.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(%error, path = %path.display(), "cannot remove a spill file");
        }
        let _ = self
            .used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Keeps a finished foreground spill until `owner` closes.
    pub(crate) fn keep_for(&self, owner: &SessionId, spill: (PathBuf, u64)) {
        lock(&self.kept)
            .entry(owner.clone())
            .or_default()
            .push(spill);
    }

    /// Removes every spill kept for `owner`; returns how many.
    pub(crate) fn remove_kept(&self, owner: &SessionId) -> usize {
        let files = lock(&self.kept).remove(owner).unwrap_or_default();
        for (path, bytes) in &files {
            self.remove(path, *bytes);
        }
        files.len()
    }

    /// Bytes the live spill files hold.
    pub(crate) fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    /// Creates a new private spill file for `stream`.
    fn create(&self, stream: OutputStream) -> io::Result<(File, PathBuf)> {
        ensure_private_dir(&self.dir)?;
        let name = format!(
            "dsh-{}-{}-{}.log",
            std::process::id(),
            uuid::Uuid::now_v7().simple(),
            stream.as_str()
        );
        let path = self.dir.join(name);
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        Ok((file, path))
    }
}

/// Removes spill files that earlier daemon processes left in `dir` (their names carry the pid of
/// the process that wrote them), so a long-lived home does not collect them forever. Files of this
/// process and anything not named like a spill file are left alone. Returns how many were removed.
pub fn remove_stale_spills(dir: &Path) -> usize {
    let own = format!("dsh-{}-", std::process::id());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.starts_with("dsh-")
                && name.ends_with(".log")
                && !name.starts_with(&own)
                && entry.file_type().is_ok_and(|t| t.is_file())
        })
        .filter(|entry| std::fs::remove_file(entry.path()).is_ok())
        .count()
}

/// Makes sure `dir` is a directory only we can use: create it 0700 if missing; refuse a symlink,
/// a non-directory or a directory owned by someone else (a shared temp dir may hold a planted one);
/// tighten its mode to 0700 otherwise.
pub(crate) fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.file_type().is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a directory", dir.display()),
        ));
    }
    if meta.uid() != rustix::process::getuid().as_raw() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("directory {} is owned by another user", dir.display()),
        ));
    }
    if meta.mode() & 0o777 != 0o700 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

#[derive(Debug)]
enum Spill {
    /// Not needed yet (the stream is within the memory cap).
    Idle,
    /// Receiving every chunk.
    Open {
        file: File,
        path: PathBuf,
        written: u64,
    },
    /// Closed at the end of the stream, holding all of it.
    Complete { path: PathBuf, written: u64 },
    /// Reached the spill cap: the file holds the first `cap` bytes and is closed.
    Capped { path: PathBuf, written: u64 },
    /// Could not be created or written; no full copy exists.
    Failed,
    /// Refused: the live spill files already hold `spill_total_cap_bytes`.
    NoRoom,
    /// Removed because nothing can read it any more.
    Released,
}

/// What a finished (or current) stream looks like, for a [`super::CommandOutcome`].
#[derive(Debug, Clone, Default)]
pub(crate) struct StreamSnapshot {
    /// The retained tail.
    pub bytes: Vec<u8>,
    /// Bytes the stream produced in total.
    pub total: u64,
    /// `total` exceeded the memory cap.
    pub truncated: bool,
    /// The spill file, if one exists.
    pub spill: Option<PathBuf>,
    /// The spill file stopped at the spill cap.
    pub spill_capped: bool,
    /// No full copy because the spill files' total cap was reached.
    pub spill_no_room: bool,
}

/// One incremental read: the next bytes of a stream from an offset, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StreamRead {
    /// The bytes, starting at whole-stream offset `start`.
    pub bytes: Vec<u8>,
    /// Whole-stream offset of the first byte of `bytes`.
    pub start: u64,
    /// Bytes between the offset asked for and `start` that no copy holds (past the spill cap, or
    /// no spill file could be kept): skipped, and said so, never silently.
    pub missing: u64,
    /// Offset to pass to the next read.
    pub next: u64,
    /// More bytes are there already, past `next`.
    pub more: bool,
}

/// Captures one stream: a byte-exact tail in memory plus the spill file.
#[derive(Debug)]
pub(crate) struct Collector {
    stream: OutputStream,
    cap: usize,
    tail: VecDeque<u8>,
    total: u64,
    spill: Spill,
    target: Arc<SpillTarget>,
    finished: bool,
    /// Where the output also goes as it is read (live output), if anywhere.
    tap: Option<StreamTap>,
}

impl Collector {
    pub(crate) fn new(stream: OutputStream, cap: usize, target: Arc<SpillTarget>) -> Self {
        Self {
            stream,
            cap: cap.max(1),
            tail: VecDeque::new(),
            total: 0,
            spill: Spill::Idle,
            target,
            finished: false,
            tap: None,
        }
    }

    /// The same collector, also handing every chunk to `tap` as it is read.
    pub(crate) fn with_tap(mut self, tap: Option<OutputTap>) -> Self {
        self.tap = tap.map(|tap| StreamTap::new(tap, self.stream));
        self
    }

    /// Appends a chunk read from the pipe.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if chunk.is_empty() || self.finished {
            return;
        }
        if let Some(tap) = &mut self.tap {
            tap.push(chunk);
        }
        self.total = self.total.saturating_add(chunk.len() as u64);
        match self.spill {
            Spill::Idle if self.total > self.cap as u64 => {
                // First overflow: nothing has been trimmed yet, so memory holds bytes 0.. exactly.
                match self.target.create(self.stream) {
                    Ok((file, path)) => {
                        self.spill = Spill::Open {
                            file,
                            path,
                            written: 0,
                        };
                        let (a, b) = self.tail.as_slices();
                        let (a, b) = (a.to_vec(), b.to_vec());
                        self.spill_write(&a);
                        self.spill_write(&b);
                        self.spill_write(chunk);
                    }
                    Err(error) => {
                        tracing::warn!(%error, stream = self.stream.as_str(), "cannot create spill file");
                        self.spill = Spill::Failed;
                    }
                }
            }
            Spill::Open { .. } => self.spill_write(chunk),
            _ => {}
        }
        if chunk.len() >= self.cap {
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - self.cap..]);
        } else {
            self.tail.extend(chunk);
            let excess = self.tail.len().saturating_sub(self.cap);
            self.tail.drain(..excess);
        }
    }

    fn spill_write(&mut self, data: &[u8]) {
        let cap = self.target.cap;
        let Spill::Open {
            file,
            path,
            written,
        } = &mut self.spill
        else {
            return;
        };
        let room = usize::try_from(cap.saturating_sub(*written)).unwrap_or(usize::MAX);
        let take = data.len().min(room);
        if !self.target.reserve(take as u64) {
            tracing::warn!(
                total_cap = self.target.total_cap,
                "spill files hold shell.spill_total_cap_bytes; this stream keeps no full copy"
            );
            let (path, written) = (std::mem::take(path), *written);
            self.target.remove(&path, written);
            self.spill = Spill::NoRoom;
            return;
        }
        if let Err(error) = file.write_all(&data[..take]) {
            tracing::warn!(%error, path = %path.display(), "spill write failed; dropping the spill");
            let (path, written) = (std::mem::take(path), *written + take as u64);
            self.target.remove(&path, written);
            self.spill = Spill::Failed;
            return;
        }
        *written += take as u64;
        if take < data.len() {
            let (path, written) = (std::mem::take(path), *written);
            self.spill = Spill::Capped { path, written };
        }
    }

    /// The finished spill file (path and size), for someone else to remove later.
    pub(crate) fn spill_file(&self) -> Option<(PathBuf, u64)> {
        match &self.spill {
            Spill::Complete { path, written } | Spill::Capped { path, written } => {
                Some((path.clone(), *written))
            }
            _ => None,
        }
    }

    /// Removes the spill file now: nothing will read it any more.
    pub(crate) fn release_spill(&mut self) {
        if let Spill::Open { path, written, .. }
        | Spill::Complete { path, written }
        | Spill::Capped { path, written } = std::mem::replace(&mut self.spill, Spill::Released)
        {
            self.target.remove(&path, written);
        }
    }

    /// The stream ended (EOF, or the process is gone and the pipe was abandoned): close the spill.
    pub(crate) fn finish(&mut self) {
        self.finished = true;
        if let Some(tap) = &mut self.tap {
            tap.finish();
        }
        if let Spill::Open { path, written, .. } = &mut self.spill {
            // Replacing the state drops the File, which closes it; page-cache writes have nothing
            // left to report at close.
            let (path, written) = (std::mem::take(path), *written);
            self.spill = Spill::Complete { path, written };
        }
    }

    pub(crate) fn snapshot(&self) -> StreamSnapshot {
        StreamSnapshot {
            bytes: self.tail.iter().copied().collect(),
            total: self.total,
            truncated: self.total > self.cap as u64,
            spill: self.spill_held().map(|(path, _)| path.to_owned()),
            spill_capped: matches!(self.spill, Spill::Capped { .. }),
            spill_no_room: matches!(self.spill, Spill::NoRoom),
        }
    }

    /// At most `limit` bytes from whole-stream offset `offset`, in order: from the spill file
    /// while the offset lies before the memory window (the spill holds the stream from its first
    /// byte), else from memory. Bytes that no copy holds are skipped and counted in `missing`.
    /// While the stream is still open, a trailing incomplete UTF-8 sequence is held back for the
    /// next read, so a character split across two reads is not turned into two replacement
    /// characters.
    pub(crate) fn read_from(&self, offset: u64, limit: usize) -> StreamRead {
        let window_start = self.total - self.tail.len() as u64;
        let mut start = offset.min(self.total);
        let mut missing = 0;
        let mut bytes = Vec::new();
        if start < window_start {
            match self.read_spill(start, window_start, limit) {
                Some(read) => bytes = read,
                // The spill holds a prefix of the stream: what it lacks before the window, no
                // copy holds.
                None => {
                    missing = window_start - start;
                    start = window_start;
                }
            }
        }
        if bytes.is_empty() && start >= window_start {
            let skip = usize::try_from(start - window_start).unwrap_or(usize::MAX);
            bytes = self.tail.iter().skip(skip).take(limit).copied().collect();
        }
        let end = start + bytes.len() as u64;
        if !(self.finished && end == self.total) {
            let keep = bytes.len() - incomplete_utf8_suffix(&bytes);
            bytes.truncate(keep);
        }
        let next = start + bytes.len() as u64;
        StreamRead {
            bytes,
            start,
            missing,
            next,
            more: next < self.total,
        }
    }

    /// The spill file and how many leading bytes of the stream it holds.
    fn spill_held(&self) -> Option<(&Path, u64)> {
        match &self.spill {
            Spill::Open { path, written, .. }
            | Spill::Complete { path, written }
            | Spill::Capped { path, written } => Some((path, *written)),
            _ => None,
        }
    }

    /// Bytes `from..` of the stream, before `until` and at most `limit`, from the spill file;
    /// `None` when it holds none of them or cannot be read.
    fn read_spill(&self, from: u64, until: u64, limit: usize) -> Option<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let (path, written) = self.spill_held()?;
        let end = until.min(written).min(from.saturating_add(limit as u64));
        if end <= from {
            return None;
        }
        let mut buf = vec![0; usize::try_from(end - from).ok()?];
        let file = File::open(path).ok()?;
        file.read_exact_at(&mut buf, from).ok()?;
        Some(buf)
    }

    /// Why bytes of this stream are missing from every copy, naming the setting, if they are.
    pub(crate) fn missing_reason(&self) -> &'static str {
        match self.spill {
            Spill::Capped { .. } => "its spill file stopped at shell.spill_cap_bytes",
            Spill::NoRoom => {
                "the spill files of all commands together reached shell.spill_total_cap_bytes"
            }
            Spill::Failed => "its spill file could not be written (see dshd's log)",
            _ => "they were released",
        }
    }
}

/// Decodes a captured tail for a model. When the head was trimmed, up to three leading
/// continuation bytes of a cut character are skipped rather than shown as replacement characters.
pub(crate) fn decode_tail(bytes: &[u8], truncated: bool) -> String {
    let mut start = 0;
    if truncated {
        while start < bytes.len().min(3) && bytes[start] & 0xC0 == 0x80 {
            start += 1;
        }
    }
    lossy(&bytes[start..]).into_owned()
}

#[cfg(test)]
mod stale_tests {
    use super::*;

    #[test]
    fn stale_spills_of_other_processes_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let own = dir
            .path()
            .join(format!("dsh-{}-x-stdout.log", std::process::id()));
        let stale = dir.path().join("dsh-1-x-stdout.log");
        let other = dir.path().join("notes.txt");
        for path in [&own, &stale, &other] {
            std::fs::write(path, "x").unwrap();
        }
        assert_eq!(remove_stale_spills(dir.path()), 1);
        assert!(own.exists() && other.exists() && !stale.exists());
        assert_eq!(remove_stale_spills(&dir.path().join("missing")), 0);
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn target(dir: &Path, cap: u64) -> Arc<SpillTarget> {
        Arc::new(SpillTarget::new(dir.join("spill"), cap, u64::MAX))
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn keeps_a_byte_exact_tail_and_spills_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Collector::new(OutputStream::Stdout, 10, target(tmp.path(), 1 << 20));
        c.push(b"0123456");
        c.push(b"789");
        assert!(!c.snapshot().truncated);
        c.push(b"abc");
        c.push(b"defghijklmnopq");
        c.finish();
        let s = c.snapshot();
        assert_eq!(s.bytes, b"hijklmnopq");
        assert_eq!(s.total, 27);
        assert!(s.truncated);
        assert!(!s.spill_capped);
        let path = s.spill.unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            b"0123456789abcdefghijklmnopq".as_slice()
        );
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        assert!(
            path.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with("-stdout.log")
        );
    }

    #[test]
    fn output_exactly_at_the_cap_is_not_truncated_and_not_spilled() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Collector::new(OutputStream::Stderr, 8, target(tmp.path(), 1 << 20));
        c.push(b"1234");
        c.push(b"5678");
        c.finish();
        let s = c.snapshot();
        assert_eq!(s.bytes, b"12345678");
        assert!(!s.truncated);
        assert_eq!(s.spill, None);
        assert!(!tmp.path().join("spill").exists(), "no spill dir needed");
    }

    #[test]
    fn one_oversized_chunk_keeps_its_own_tail() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Collector::new(OutputStream::Stdout, 4, target(tmp.path(), 1 << 20));
        c.push(b"ab");
        c.push(b"cdefghij");
        let s = c.snapshot();
        assert_eq!(s.bytes, b"ghij");
        assert_eq!(std::fs::read(s.spill.unwrap()).unwrap(), b"abcdefghij");
    }

    #[test]
    fn spill_stops_at_its_cap_and_says_so() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Collector::new(OutputStream::Stdout, 4, target(tmp.path(), 10));
        for chunk in [b"01234".as_slice(), b"56789", b"abcde", b"fghij"] {
            c.push(chunk);
        }
        c.finish();
        let s = c.snapshot();
        assert_eq!(s.bytes, b"ghij");
        assert!(s.truncated && s.spill_capped);
        assert_eq!(std::fs::read(s.spill.unwrap()).unwrap(), b"0123456789");
    }

    #[test]
    fn spill_names_are_unique() {
        let tmp = tempfile::tempdir().unwrap();
        let t = target(tmp.path(), 100);
        let mut paths = Vec::new();
        for _ in 0..3 {
            let mut c = Collector::new(OutputStream::Stdout, 1, t.clone());
            c.push(b"xy");
            paths.push(c.snapshot().spill.unwrap());
        }
        paths.dedup();
        assert_eq!(paths.len(), 3);
    }

    #[test]
    fn an_unusable_spill_dir_leaves_capture_intact() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, b"").unwrap();
        let t = Arc::new(SpillTarget::new(file, 100, u64::MAX));
        let mut c = Collector::new(OutputStream::Stdout, 2, t);
        c.push(b"abcd");
        let s = c.snapshot();
        assert_eq!(s.bytes, b"cd");
        assert!(s.truncated);
        assert_eq!(s.spill, None);
    }

    #[test]
    fn private_dir_is_tightened_and_links_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let loose = tmp.path().join("loose");
        std::fs::create_dir(&loose).unwrap();
        std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&loose).unwrap();
        assert_eq!(mode(&loose), 0o700);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&loose, &link).unwrap();
        assert!(ensure_private_dir(&link).is_err());
    }

    #[test]
    fn incremental_reads_never_repeat_and_page_through_the_spill() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Collector::new(OutputStream::Stdout, 4, target(tmp.path(), 100));
        c.push(b"ab");
        let r = c.read_from(0, 64);
        assert_eq!(
            (r.bytes.as_slice(), r.start, r.missing, r.next, r.more),
            (b"ab".as_slice(), 0, 0, 2, false)
        );
        let r2 = c.read_from(r.next, 64);
        assert_eq!((r2.bytes.len(), r2.next), (0, 2));
        c.push(b"cdefgh"); // memory holds "efgh" (4..8); the spill holds all of it
        let r3 = c.read_from(1, 2);
        assert_eq!(
            (r3.bytes.as_slice(), r3.start, r3.missing, r3.next, r3.more),
            (b"bc".as_slice(), 1, 0, 3, true)
        );
        // A page ends where the spill's part ends and memory's begins.
        let r4 = c.read_from(r3.next, 64);
        assert_eq!((r4.bytes.as_slice(), r4.next), (b"d".as_slice(), 4));
        let r5 = c.read_from(r4.next, 64);
        assert_eq!(
            (r5.bytes.as_slice(), r5.next, r5.more),
            (b"efgh".as_slice(), 8, false)
        );
    }

    /// Past the spill cap no copy holds the middle of the stream: a reader skips it, and is told.
    #[test]
    fn bytes_no_copy_holds_are_skipped_and_counted() {
        let tmp = tempfile::tempdir().unwrap();
        let target = Arc::new(SpillTarget::new(tmp.path().join("spill"), 6, 1000));
        let mut c = Collector::new(OutputStream::Stdout, 4, target);
        c.push(b"0123456789abcdef"); // spill keeps 0..6, memory 12..16
        let r = c.read_from(0, 64);
        assert_eq!((r.bytes.as_slice(), r.next), (b"012345".as_slice(), 6));
        let r = c.read_from(r.next, 64);
        assert_eq!(
            (r.bytes.as_slice(), r.start, r.missing, r.next),
            (b"cdef".as_slice(), 12, 6, 16)
        );
        assert!(c.missing_reason().contains("shell.spill_cap_bytes"));
    }

    #[test]
    fn open_streams_hold_back_a_split_character() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Collector::new(OutputStream::Stdout, 64, target(tmp.path(), 100));
        let euro = "€".as_bytes(); // e2 82 ac
        c.push(b"x");
        c.push(&euro[..2]);
        let r = c.read_from(0, 64);
        assert_eq!((r.bytes.as_slice(), r.next), (b"x".as_slice(), 1));
        // Only half a character waiting: nothing yet, and the offset stays.
        let half = c.read_from(r.next, 64);
        assert_eq!((half.bytes.len(), half.next), (0, 1));
        c.push(&euro[2..]);
        let r = c.read_from(r.next, 64);
        assert_eq!(r.bytes, euro);
        // A page boundary inside a character moves it to the next page.
        assert_eq!(c.read_from(0, 2).bytes, b"x");
        // Once finished, whatever is left is handed out as is.
        c.push(&euro[..1]);
        c.finish();
        assert_eq!(c.read_from(4, 64).bytes, &euro[..1]);
    }

    #[test]
    fn utf8_helpers() {
        assert_eq!(incomplete_utf8_suffix(b"abc"), 0);
        assert_eq!(incomplete_utf8_suffix("é".as_bytes()), 0);
        assert_eq!(incomplete_utf8_suffix(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_utf8_suffix(&"𝄞".as_bytes()[..3]), 3);
        assert_eq!(incomplete_utf8_suffix(b"\xff"), 0);
        let cut = &"ab€".as_bytes()[3..]; // starts mid-character
        assert_eq!(decode_tail(cut, true), "");
        assert_eq!(decode_tail(cut, false), "\u{fffd}\u{fffd}");
    }
}
