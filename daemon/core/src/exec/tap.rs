//! Live output: a command's output handed on as it is produced, besides its capture.
//!
//! An [`OutputTap`] is called from the task that reads the command's pipes, with each chunk as
//! text. It must never wait: whoever listens (an agent's watchers, a streaming `Shell.Run`) keeps
//! what it has not sent yet in a bounded buffer and drops what does not fit, so a slow reader loses
//! live output and never slows the command. The full output is still in the outcome.
//!
//! Offsets are byte offsets in the stream's output **as text**: the output decoded as UTF-8 with
//! each invalid byte replaced by U+FFFD (3 bytes). For the usual, valid output they are the raw
//! byte offsets. A character split across two pipe reads is held back until it is whole, so it is
//! never shown as two replacement characters.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use crate::locks::lock;
use tokio::sync::Notify;

/// Which stream of a command a piece of output comes from: the session vocabulary's, since
/// `tool/output` events name it.
pub use dsh_session::OutputStream;

/// A piece of live output: `text` starts at byte `offset` of `stream`'s output as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputChunk {
    /// Which stream.
    pub stream: OutputStream,
    /// Where `text` starts in the stream's output (see the module docs).
    pub offset: u64,
    /// The output.
    pub text: String,
}

type TapFn = dyn Fn(OutputStream, u64, &str) + Send + Sync;

/// Where a command's output goes as it is produced: called with the stream, the offset and the
/// text of each piece. Called on the pipe reader's task: it must return at once.
#[derive(Clone)]
pub struct OutputTap(Arc<TapFn>);

impl OutputTap {
    /// A tap calling `f(stream, offset, text)` for each piece of output.
    pub fn new(f: impl Fn(OutputStream, u64, &str) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl fmt::Debug for OutputTap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OutputTap")
    }
}

/// One stream's tap, as its collector drives it: decodes the bytes read from the pipe into text
/// with the offsets of the module docs.
#[derive(Debug)]
pub(crate) struct StreamTap {
    tap: OutputTap,
    stream: OutputStream,
    /// Bytes of an incomplete character at the end of the last read.
    pending: Vec<u8>,
    /// Offset of the next text handed on.
    offset: u64,
}

impl StreamTap {
    pub(crate) fn new(tap: OutputTap, stream: OutputStream) -> Self {
        Self {
            tap,
            stream,
            pending: Vec::new(),
            offset: 0,
        }
    }

    /// Hands on `chunk` (holding back an incomplete character at its end).
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        if self.pending.is_empty() {
            let keep = chunk.len() - incomplete_utf8_suffix(chunk);
            self.emit(&chunk[..keep]);
            self.pending.extend_from_slice(&chunk[keep..]);
        } else {
            let mut joined = std::mem::take(&mut self.pending);
            joined.extend_from_slice(chunk);
            let keep = joined.len() - incomplete_utf8_suffix(&joined);
            self.emit(&joined[..keep]);
            self.pending = joined.split_off(keep);
        }
    }

    /// The stream ended: hands on what was held back.
    pub(crate) fn finish(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        self.emit(&rest);
    }

    fn emit(&mut self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let text = lossy(bytes);
        (self.tap.0)(self.stream, self.offset, &text);
        self.offset = self.offset.saturating_add(text.len() as u64);
    }
}

/// A bounded buffer between a tap and one reader that sends at its own pace: pieces of one
/// stream that follow each other merge, at most `budget` bytes wait, and what does not fit is
/// dropped (the next piece's offset shows the gap). [`OutputFeed::tap`] fills it;
/// [`OutputFeed::next`] empties it.
#[derive(Debug, Clone)]
pub struct OutputFeed {
    shared: Arc<Feed>,
}

#[derive(Debug)]
struct Feed {
    budget: usize,
    state: Mutex<FeedState>,
    wake: Notify,
}

#[derive(Debug, Default)]
struct FeedState {
    chunks: VecDeque<OutputChunk>,
    bytes: usize,
    closed: bool,
}

impl OutputFeed {
    /// A feed holding at most `budget` bytes of waiting output.
    pub fn new(budget: usize) -> Self {
        Self {
            shared: Arc::new(Feed {
                budget,
                state: Mutex::new(FeedState::default()),
                wake: Notify::new(),
            }),
        }
    }

    /// The tap that fills this feed.
    pub fn tap(&self) -> OutputTap {
        let feed = self.shared.clone();
        OutputTap::new(move |stream, offset, text| feed.push(stream, offset, text))
    }

    /// No more output will come: [`next`](Self::next) returns `None` once the feed is empty.
    pub fn close(&self) {
        lock(&self.shared.state).closed = true;
        self.shared.wake.notify_one();
    }

    /// Whatever waits, oldest first; waits while nothing does. `None` once closed and empty.
    pub async fn next(&self) -> Option<Vec<OutputChunk>> {
        loop {
            {
                let mut state = lock(&self.shared.state);
                if !state.chunks.is_empty() {
                    state.bytes = 0;
                    return Some(state.chunks.drain(..).collect());
                }
                if state.closed {
                    return None;
                }
            }
            self.shared.wake.notified().await;
        }
    }
}

impl Feed {
    fn push(&self, stream: OutputStream, offset: u64, text: &str) {
        {
            let mut state = lock(&self.state);
            if state.bytes.saturating_add(text.len()) > self.budget {
                return;
            }
            state.bytes += text.len();
            let merged = state.chunks.iter_mut().rev().find(|c| c.stream == stream);
            match merged {
                Some(last) if last.offset + last.text.len() as u64 == offset => {
                    last.text.push_str(text);
                }
                _ => state.chunks.push_back(OutputChunk {
                    stream,
                    offset,
                    text: text.to_owned(),
                }),
            }
        }
        self.wake.notify_one();
    }
}

/// `bytes` as text, each invalid sequence replaced by U+FFFD, exactly as
/// `String::from_utf8_lossy` gives it, but checked with `str::from_utf8` first: the lossy decoder
/// walks valid input about ten times slower (0.5 ms against 0.04 ms a MB of ASCII here), and
/// command output, which every call's result and preview decodes, is nearly always valid.
pub(crate) fn lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// Length of a trailing, so far valid but incomplete, multi-byte UTF-8 sequence (0 to 3).
pub(crate) fn incomplete_utf8_suffix(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue;
        }
        let need = match byte {
            0xC2..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF4 => 4,
            _ => return 0,
        };
        return if back < need { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    type Seen = Arc<Mutex<Vec<(u64, String)>>>;

    fn recording() -> (OutputTap, Seen) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let tap = OutputTap::new(move |_, offset, text| {
            sink.lock().unwrap().push((offset, text.to_owned()));
        });
        (tap, seen)
    }

    proptest::proptest! {
        #[test]
        fn lossy_decodes_as_from_utf8_lossy(
            text in ".*",
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            for input in [text.as_bytes(), &bytes] {
                proptest::prop_assert_eq!(lossy(input), String::from_utf8_lossy(input));
            }
        }
    }

    #[test]
    fn a_split_character_is_handed_on_whole_and_offsets_count_text_bytes() {
        let (tap, seen) = recording();
        let mut stream = StreamTap::new(tap, OutputStream::Stdout);
        let euro = "€".as_bytes();
        stream.push(b"a");
        stream.push(&euro[..1]);
        stream.push(&euro[1..]);
        stream.push(b"\xffb");
        stream.push(&euro[..2]);
        stream.finish();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            vec![
                (0, "a".to_owned()),
                (1, "€".to_owned()),
                (4, "\u{fffd}b".to_owned()),
                (8, "\u{fffd}".to_owned()),
            ]
        );
    }

    #[tokio::test]
    async fn a_feed_merges_per_stream_and_drops_beyond_its_budget() {
        let feed = OutputFeed::new(8);
        let tap = feed.tap();
        (tap.0)(OutputStream::Stdout, 0, "abc");
        (tap.0)(OutputStream::Stderr, 0, "E");
        (tap.0)(OutputStream::Stdout, 3, "def");
        (tap.0)(OutputStream::Stdout, 6, "too long"); // past the budget: dropped
        (tap.0)(OutputStream::Stdout, 14, "g");
        let got = feed.next().await.unwrap();
        let got: Vec<_> = got
            .into_iter()
            .map(|c| (c.stream, c.offset, c.text))
            .collect();
        assert_eq!(
            got,
            vec![
                (OutputStream::Stdout, 0, "abcdef".to_owned()),
                (OutputStream::Stderr, 0, "E".to_owned()),
                (OutputStream::Stdout, 14, "g".to_owned()),
            ]
        );
        feed.close();
        assert!(feed.next().await.is_none());
    }
}
