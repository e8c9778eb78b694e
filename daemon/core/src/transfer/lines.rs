//! Reading a source a line at a time with a bound on each line, so that a file of any size (a
//! 2 GiB log, or 2 GiB without a newline) is read in bounded memory.

use std::io::BufRead;

/// The longest line read. An event holds at most one model reply or tool output, which dshd
/// caps far below this; a longer line is not a log line.
pub(super) const MAX_LINE: u64 = 256 * 1024 * 1024;

/// Why a line could not be read.
#[derive(Debug)]
pub(super) enum LineError {
    /// Reading failed (a damaged compressed stream says so here).
    Io(std::io::Error),
    /// Line `line` is longer than [`MAX_LINE`].
    TooLong { line: u64 },
}

/// A line: its number (from 1), its bytes without the newline, and how many bytes of the
/// source it took.
pub(super) type Line<'a> = (u64, &'a [u8], usize);

/// The lines of a reader, numbered from 1, each without its `\n`; a last line without one is
/// returned as it is (its parser decides whether it is whole).
pub(super) struct Lines<R> {
    reader: R,
    number: u64,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    pub(super) fn new(reader: R) -> Self {
        Self {
            reader,
            number: 0,
            buf: Vec::new(),
        }
    }

    /// The next line: its number and bytes, and the bytes it took from the source (for
    /// batching); `None` at the end.
    pub(super) fn next_line(&mut self) -> Result<Option<Line<'_>>, LineError> {
        self.buf.clear();
        let mut read = 0usize;
        let mut whole = false;
        while !whole {
            let available = self.reader.fill_buf().map_err(LineError::Io)?;
            if available.is_empty() {
                break;
            }
            let take = match available.iter().position(|&b| b == b'\n') {
                Some(end) => {
                    whole = true;
                    end + 1
                }
                None => available.len(),
            };
            if (self.buf.len() + take) as u64 > MAX_LINE {
                return Err(LineError::TooLong {
                    line: self.number + 1,
                });
            }
            grow(&mut self.buf, take);
            self.buf.extend_from_slice(&available[..take]);
            self.reader.consume(take);
            read += take;
        }
        if read == 0 {
            return Ok(None);
        }
        self.number += 1;
        let mut line: &[u8] = &self.buf;
        if whole {
            line = &line[..line.len() - 1];
        }
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
        }
        Ok(Some((self.number, line, read)))
    }
}

/// Makes room for `more` bytes in `buf`, doubling as a `Vec` would but never past
/// [`MAX_LINE`]: a doubling past it would hold twice the bound (and, while it copies, three
/// times).
fn grow(buf: &mut Vec<u8>, more: usize) {
    let needed = buf.len() + more;
    if needed <= buf.capacity() {
        return;
    }
    let bound = usize::try_from(MAX_LINE).unwrap_or(usize::MAX);
    let target = (buf.capacity() * 2).max(needed).min(bound).max(needed);
    buf.reserve_exact(target - buf.len());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_numbered_and_a_last_line_without_newline_is_kept() {
        let mut lines = Lines::new(&b"a\nbc\r\nd"[..]);
        let mut got = Vec::new();
        while let Some((n, line, _)) = lines.next_line().unwrap() {
            got.push((n, line.to_vec()));
        }
        assert_eq!(
            got,
            vec![(1, b"a".to_vec()), (2, b"bc".to_vec()), (3, b"d".to_vec())]
        );
    }
}
