//! The framing of one file operation: dshd writes one [`FileRequest`] to the launcher's stdin,
//! the launcher writes one [`FileReply`] to its stdout. Both start with [`MAGIC`]; integers are
//! little-endian `u64`, byte strings a `u64` length and the bytes (paths are raw bytes: any but
//! NUL), digests 32 bytes. Both sides use this module, so the framing cannot drift.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use crate::sha256::Digest;

/// The first bytes of every request and reply (the framing's name and version).
pub const MAGIC: &[u8; 5] = b"DSHF2";

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileRequest {
    /// Read lines `offset..offset + limit` (0-based) of a regular file, at most `max_bytes` of
    /// them, and hash the whole file while it is at most `hash_limit` bytes.
    Read {
        /// The file (absolute).
        path: PathBuf,
        /// Lines to skip.
        offset: u64,
        /// Lines to return at most.
        limit: u64,
        /// Bytes to return at most.
        max_bytes: u64,
        /// The largest file that is hashed (and so can be edited).
        hash_limit: u64,
    },
    /// Replace (or create) a file atomically with `content`, if it is still as `expect` says.
    Write {
        /// The file (absolute); a symbolic link is written through to its target.
        path: PathBuf,
        /// The new content.
        content: Vec<u8>,
        /// What must be there now.
        expect: Expect,
    },
}

/// What a write expects to replace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No file: the write creates one.
    Absent,
    /// A regular file of this size and digest.
    Same {
        /// Its size in bytes.
        size: u64,
        /// Its SHA-256.
        digest: Digest,
    },
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileReply {
    /// What a read found.
    Read(ReadReply),
    /// A write happened.
    Written(WriteReply),
    /// The operation failed; nothing was changed.
    Failed(Failure),
}

/// What a read found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadReply {
    /// The file's size.
    pub size: u64,
    /// The selected lines, as bytes (their line ends included).
    pub bytes: Vec<u8>,
    /// The selection stopped at `max_bytes`, in the middle of a line or before its last line.
    pub cut: bool,
    /// The file has lines after the selection.
    pub more: bool,
    /// The whole file's digest, when it is at most `hash_limit` bytes.
    pub digest: Option<Digest>,
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReply {
    /// It did not exist before.
    pub created: bool,
    /// The mode bits the file has now.
    pub mode: u32,
}

/// Why an operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The kind, for dshd to word its answer to the model.
    pub kind: FailureKind,
    /// What the launcher saw, in words.
    pub message: String,
}

/// Kinds of [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The file (or a link's target) does not exist.
    NotFound,
    /// Not a regular file (a directory, FIFO, device, socket).
    NotRegular,
    /// Refused by the sandbox or by permissions.
    Denied,
    /// The parent directory of a new file does not exist or is not a directory.
    NoParent,
    /// The file is not what the write expected (changed, removed, or created meanwhile).
    Changed,
    /// Anything else (I/O errors, a request the launcher cannot read).
    Other,
}

impl FailureKind {
    fn code(self) -> u8 {
        match self {
            Self::NotFound => 1,
            Self::NotRegular => 2,
            Self::Denied => 3,
            Self::NoParent => 4,
            Self::Changed => 5,
            Self::Other => 6,
        }
    }

    fn from_code(code: u8) -> Option<Self> {
        Some(match code {
            1 => Self::NotFound,
            2 => Self::NotRegular,
            3 => Self::Denied,
            4 => Self::NoParent,
            5 => Self::Changed,
            6 => Self::Other,
            _ => return None,
        })
    }
}

/// Bytes that are not a request or reply of this framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(&'static str);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed file-operation message: {}", self.0)
    }
}

impl std::error::Error for WireError {}

struct Writer(Vec<u8>);

impl Writer {
    fn new(tag: u8) -> Self {
        let mut out = MAGIC.to_vec();
        out.push(tag);
        Self(out)
    }
    fn u64(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }
    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }
    fn flag(&mut self, b: bool) {
        self.0.push(u8::from(b));
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn open(bytes: &'a [u8]) -> Result<(Self, u8), WireError> {
        let rest = bytes
            .strip_prefix(MAGIC.as_slice())
            .ok_or(WireError("no magic"))?;
        let mut r = Self(rest);
        let tag = r.u8()?;
        Ok((r, tag))
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError("too short"));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn flag(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError("bad flag")),
        }
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(b))
    }
    fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = usize::try_from(self.u64()?).map_err(|_| WireError("length too large"))?;
        self.take(n)
    }
    fn digest(&mut self) -> Result<Digest, WireError> {
        let mut d = [0u8; 32];
        d.copy_from_slice(self.take(32)?);
        Ok(d)
    }
    fn path(&mut self) -> Result<PathBuf, WireError> {
        let raw = self.bytes()?;
        if raw.is_empty() || raw.contains(&0) {
            return Err(WireError("bad path"));
        }
        Ok(PathBuf::from(OsString::from_vec(raw.to_vec())))
    }
    fn end(self) -> Result<(), WireError> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(WireError("trailing bytes"))
        }
    }
}

fn path_bytes(path: &std::path::Path) -> Vec<u8> {
    path.as_os_str().to_owned().into_vec()
}

impl FileRequest {
    /// The request's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Read {
                path,
                offset,
                limit,
                max_bytes,
                hash_limit,
            } => {
                let mut w = Writer::new(b'R');
                w.bytes(&path_bytes(path));
                for n in [offset, limit, max_bytes, hash_limit] {
                    w.u64(*n);
                }
                w.0
            }
            Self::Write {
                path,
                content,
                expect,
            } => {
                let mut w = Writer::new(b'W');
                w.bytes(&path_bytes(path));
                w.bytes(content);
                match expect {
                    Expect::Absent => w.0.push(0),
                    Expect::Same { size, digest } => {
                        w.0.push(1);
                        w.u64(*size);
                        w.0.extend_from_slice(digest);
                    }
                }
                w.0
            }
        }
    }

    /// Reads what [`Self::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let (mut r, tag) = Reader::open(bytes)?;
        let request = match tag {
            b'R' => Self::Read {
                path: r.path()?,
                offset: r.u64()?,
                limit: r.u64()?,
                max_bytes: r.u64()?,
                hash_limit: r.u64()?,
            },
            b'W' => Self::Write {
                path: r.path()?,
                content: r.bytes()?.to_vec(),
                expect: match r.u8()? {
                    0 => Expect::Absent,
                    1 => Expect::Same {
                        size: r.u64()?,
                        digest: r.digest()?,
                    },
                    _ => return Err(WireError("bad expectation")),
                },
            },
            _ => return Err(WireError("unknown operation")),
        };
        r.end()?;
        Ok(request)
    }
}

impl FileReply {
    /// The reply's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Self::Read(read) => {
                let mut w = Writer::new(b'r');
                w.u64(read.size);
                w.bytes(&read.bytes);
                w.flag(read.cut);
                w.flag(read.more);
                match &read.digest {
                    None => w.0.push(0),
                    Some(d) => {
                        w.0.push(1);
                        w.0.extend_from_slice(d);
                    }
                }
                w.0
            }
            Self::Written(written) => {
                let mut w = Writer::new(b'w');
                w.flag(written.created);
                w.u64(u64::from(written.mode));
                w.0
            }
            Self::Failed(failure) => {
                let mut w = Writer::new(b'f');
                w.0.push(failure.kind.code());
                w.bytes(failure.message.as_bytes());
                w.0
            }
        }
    }

    /// Reads what [`Self::encode`] wrote.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let (mut r, tag) = Reader::open(bytes)?;
        let reply = match tag {
            b'r' => Self::Read(ReadReply {
                size: r.u64()?,
                bytes: r.bytes()?.to_vec(),
                cut: r.flag()?,
                more: r.flag()?,
                digest: if r.flag()? { Some(r.digest()?) } else { None },
            }),
            b'w' => Self::Written(WriteReply {
                created: r.flag()?,
                mode: u32::try_from(r.u64()?).map_err(|_| WireError("bad mode"))?,
            }),
            b'f' => Self::Failed(Failure {
                kind: FailureKind::from_code(r.u8()?).ok_or(WireError("bad failure kind"))?,
                message: String::from_utf8_lossy(r.bytes()?).into_owned(),
            }),
            _ => return Err(WireError("unknown reply")),
        };
        r.end()?;
        Ok(reply)
    }
}
