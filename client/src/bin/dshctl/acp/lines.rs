//! Reading the client's lines: one JSON-RPC message per line, as ACP frames it, read up to
//! [`MAX_LINE`] bytes and no further. A line that is not a message is answered and the next one
//! read; only the end of input ends the reading.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

use super::jsonrpc::{Incoming, RpcError, code, null_id, parse};

/// The longest line read as a message: 64 MiB. dshd takes 4 MiB per gRPC message, and JSON's
/// escapes make a text at most six times longer, so every prompt dshd could accept fits; an image
/// of several MB, base64-encoded, fits too, and is refused by name (`-32602`) rather than as a
/// long line. Beyond it, the line is answered `-32700` and skipped without being held: an editor
/// (or anything on stdin) cannot make the bridge hold more than this.
pub const MAX_LINE: usize = 64 << 20;

/// Reads the client's lines as messages, [`MAX_LINE`] bytes of a line at most.
#[derive(Debug)]
pub struct Reader<R> {
    input: R,
    /// The longest line read ([`MAX_LINE`]; tests use less).
    cap: usize,
    /// The line being read was too long and answered: its rest is skipped up to its newline.
    skipping: bool,
}

impl<R: AsyncBufRead + Unpin> Reader<R> {
    /// Reads messages from `input`.
    pub fn new(input: R) -> Self {
        Self {
            input,
            cap: MAX_LINE,
            skipping: false,
        }
    }

    /// The next message (blank lines are skipped); `None` at the end of input, or when it cannot
    /// be read any more.
    pub async fn next(&mut self) -> Option<Incoming> {
        loop {
            let line = match self.line().await {
                Ok(Some(Line::Read(line))) => line,
                Ok(Some(Line::TooLong)) => return Some(too_long(self.cap)),
                // An unreadable stdin is as good as a closed one: nobody is there to answer.
                Ok(None) | Err(_) => return None,
            };
            let Ok(text) = String::from_utf8(line) else {
                return Some(Incoming::Invalid {
                    id: null_id(),
                    error: RpcError::new(code::PARSE_ERROR, "parse error: the line is not UTF-8"),
                });
            };
            if !text.trim().is_empty() {
                return Some(parse(&text));
            }
        }
    }

    /// The next line, without its line end; `None` at the end of input. A line that passes
    /// [`MAX_LINE`] is [`Line::TooLong`] as soon as it does (its newline may never come), and what
    /// follows of it is consumed by the next calls without being kept.
    async fn line(&mut self) -> std::io::Result<Option<Line>> {
        let mut line = Vec::new();
        loop {
            let available = self.input.fill_buf().await?;
            if available.is_empty() {
                // The end: a last line without its newline still counts.
                let last = !std::mem::take(&mut self.skipping) && !line.is_empty();
                return Ok(last.then_some(Line::Read(line)));
            }
            let newline = available.iter().position(|&b| b == b'\n');
            let end = newline.unwrap_or(available.len());
            let used = newline.map_or(end, |at| at + 1);
            if self.skipping {
                self.input.consume(used);
                self.skipping = newline.is_none();
                continue;
            }
            if line.len() + end > self.cap {
                self.skipping = true;
                return Ok(Some(Line::TooLong));
            }
            line.extend_from_slice(&available[..end]);
            self.input.consume(used);
            if newline.is_some() {
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                return Ok(Some(Line::Read(line)));
            }
        }
    }
}

/// One line of input.
#[derive(Debug)]
enum Line {
    /// A line of at most [`MAX_LINE`] bytes.
    Read(Vec<u8>),
    /// A longer one, not kept.
    TooLong,
}

/// The answer to a line longer than `cap` bytes.
fn too_long(cap: usize) -> Incoming {
    Incoming::Invalid {
        id: null_id(),
        error: RpcError::new(
            code::PARSE_ERROR,
            format!(
                "line too long: a message may take at most {} MiB ({cap} bytes) on one line; the \
                 rest of the line is skipped",
                cap >> 20
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_are_read_up_to_the_cap_and_the_rest_of_a_long_one_is_skipped() {
        let input: &[u8] = b"{\"jsonrpc\":\"2.0\",\"method\":\"a\"}\r\n\
            xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n\
            \n\xff\n{\"jsonrpc\":\"2.0\",\"method\":\"b\"}";
        // Three bytes at a time: lines and the cap fall in the middle of reads.
        let mut reader = Reader {
            input: tokio::io::BufReader::with_capacity(3, input),
            cap: 40,
            skipping: false,
        };
        let mut got = Vec::new();
        while let Some(message) = reader.next().await {
            got.push(match message {
                Incoming::Notification { method, .. } => method,
                Incoming::Invalid { id, error } => {
                    format!("{} {} {}", id.get(), error.code, error.message)
                }
                other => panic!("{other:?}"),
            });
        }
        assert_eq!(
            got,
            [
                "a".to_owned(),
                "null -32700 line too long: a message may take at most 0 MiB (40 bytes) on one line; the rest of the line is skipped".to_owned(),
                "null -32700 parse error: the line is not UTF-8".to_owned(),
                "b".to_owned(),
            ]
        );
    }
}
