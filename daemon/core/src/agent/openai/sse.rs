//! A minimal server-sent-events parser: enough of the WHATWG rules for chat-completion streams.
//!
//! Bytes arrive in arbitrary pieces (a line, or even a CRLF, may be split across reads), so the
//! parser keeps the unfinished line and the current event's data in two buffers that are reused
//! for the whole stream. Only `data` fields matter here; `event`, `id`, `retry` and `:` comments
//! (keep-alives) are skipped.

use super::ModelError;
use super::stream::Flow;

/// Incremental SSE parser. Feed it the body's pieces; it calls back with each event's data.
#[derive(Debug, Default)]
pub(super) struct Parser {
    /// Bytes not yet consumed: at most one unfinished line after `feed` returns.
    pending: Vec<u8>,
    /// How much of `pending` is known to hold no line terminator, so it is not scanned again.
    scanned: usize,
    /// The current event's data lines, joined with `\n`.
    data: Vec<u8>,
    /// Whether the current event has a `data` field (possibly empty).
    has_data: bool,
}

impl Parser {
    /// Consumes one piece of the body, calling `on_data` for each complete event. Stops early, and
    /// returns [`Flow::Done`], when `on_data` does.
    pub(super) fn feed(
        &mut self,
        bytes: &[u8],
        mut on_data: impl FnMut(&[u8]) -> Result<Flow, ModelError>,
    ) -> Result<Flow, ModelError> {
        self.pending.extend_from_slice(bytes);
        let mut start = 0;
        let mut flow = Flow::More;
        loop {
            let from = start + self.scanned;
            let Some(offset) = self.pending[from..]
                .iter()
                .position(|&b| b == b'\n' || b == b'\r')
            else {
                self.scanned = self.pending.len() - start;
                break;
            };
            let end = from + offset;
            let next = match self.pending[end] {
                b'\r' => match self.pending.get(end + 1) {
                    Some(b'\n') => end + 2,
                    Some(_) => end + 1,
                    // A CR at the very end may be the first half of a CRLF: wait for more.
                    None => {
                        self.scanned = end - start;
                        break;
                    }
                },
                _ => end + 1,
            };
            self.scanned = 0;
            flow = line(
                &self.pending[start..end],
                &mut self.data,
                &mut self.has_data,
                &mut on_data,
            )?;
            start = next;
            if flow == Flow::Done {
                break;
            }
        }
        if start > 0 {
            self.pending.drain(..start);
        }
        Ok(flow)
    }

    /// At the end of the body: a trailing CR ends its line, and an event whose lines are complete
    /// but that lacks the final blank line is still delivered (servers that close right after the
    /// last `data:` line). An unterminated last line is a cut-off fragment and is dropped.
    pub(super) fn finish(
        &mut self,
        mut on_data: impl FnMut(&[u8]) -> Result<Flow, ModelError>,
    ) -> Result<Flow, ModelError> {
        if self.pending.last() == Some(&b'\r') {
            let end = self.pending.len() - 1;
            let flow = line(
                &self.pending[..end],
                &mut self.data,
                &mut self.has_data,
                &mut on_data,
            )?;
            if flow == Flow::Done {
                return Ok(flow);
            }
        }
        self.pending.clear();
        self.scanned = 0;
        if self.has_data {
            self.has_data = false;
            return on_data(&self.data);
        }
        Ok(Flow::More)
    }
}

/// Handles one line (without its terminator).
fn line(
    line: &[u8],
    data: &mut Vec<u8>,
    has_data: &mut bool,
    on_data: &mut impl FnMut(&[u8]) -> Result<Flow, ModelError>,
) -> Result<Flow, ModelError> {
    if line.is_empty() {
        if !*has_data {
            return Ok(Flow::More);
        }
        *has_data = false;
        let flow = on_data(data);
        data.clear();
        return flow;
    }
    if line[0] == b':' {
        return Ok(Flow::More);
    }
    let (field, value) = match line.iter().position(|&b| b == b':') {
        Some(colon) => {
            let value = &line[colon + 1..];
            (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
        }
        None => (line, &[][..]),
    };
    if field == b"data" {
        if *has_data {
            data.push(b'\n');
        }
        data.extend_from_slice(value);
        *has_data = true;
    }
    Ok(Flow::More)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` and returns the events' data, as strings.
    /// The events the parser yields for `pieces` fed in order, each decoded by `decode`.
    fn parse<P: AsRef<[u8]>>(pieces: &[P], decode: fn(&[u8]) -> String) -> Vec<String> {
        let mut parser = Parser::default();
        let mut out = Vec::new();
        let mut collect = |data: &[u8]| {
            out.push(decode(data));
            Ok(if data == b"[DONE]" {
                Flow::Done
            } else {
                Flow::More
            })
        };
        for piece in pieces {
            if parser.feed(piece.as_ref(), &mut collect).unwrap() == Flow::Done {
                return out;
            }
        }
        parser.finish(&mut collect).unwrap();
        out
    }

    fn events(pieces: &[&[u8]]) -> Vec<String> {
        parse(pieces, |data| String::from_utf8(data.to_vec()).unwrap())
    }

    const STREAM: &[u8] = b": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\nid: 3\ndata:{\"b\":2}\n\ndata: one\ndata: two\n\n\n\rdata\r\rdata: [DONE]\n\ndata: after\n\n";

    #[test]
    fn parses_lf_crlf_cr_comments_and_multiline_data() {
        assert_eq!(
            events(&[STREAM]),
            ["{\"a\":1}", "{\"b\":2}", "one\ntwo", "", "[DONE]"]
        );
    }

    #[test]
    fn any_split_of_the_stream_gives_the_same_events() {
        let whole = events(&[STREAM]);
        for cut in 0..=STREAM.len() {
            let (a, b) = STREAM.split_at(cut);
            assert_eq!(events(&[a, b]), whole, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(events(&bytes), whole, "byte by byte");
    }

    #[test]
    fn end_of_body_keeps_complete_lines_and_drops_a_fragment() {
        assert_eq!(events(&[b"data: [DONE]\n"]), ["[DONE]"]);
        assert_eq!(events(&[b"data: [DONE]\r"]), ["[DONE]"]);
        assert!(events(&[b"data: {\"choices\":[{\"del"]).is_empty());
        assert_eq!(events(&[b"data: x\n\ndata: {\"cho"]), ["x"]);
    }

    mod properties {
        use proptest::collection::vec;
        use proptest::prelude::*;

        /// Streams made of the pieces that matter to the parser, and anything else.
        fn stream() -> impl Strategy<Value = Vec<u8>> {
            let token = prop_oneof![
                Just(b"data:".to_vec()),
                Just(b"data: ".to_vec()),
                Just(b"data".to_vec()),
                Just(b":".to_vec()),
                Just(b": keep-alive".to_vec()),
                Just(b"event: x".to_vec()),
                Just(b"id: 7".to_vec()),
                Just(b"\n".to_vec()),
                Just(b"\r".to_vec()),
                Just(b"\r\n".to_vec()),
                Just(b"\n\n".to_vec()),
                Just(b"[DONE]".to_vec()),
                Just(b"{\"a\":1}".to_vec()),
                vec(any::<u8>(), 0..6),
            ];
            vec(token, 0..40).prop_map(|tokens| tokens.concat())
        }

        /// `bytes` cut at `cuts` (positions taken modulo its length).
        fn pieces(bytes: &[u8], cuts: &[prop::sample::Index]) -> Vec<Vec<u8>> {
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            at.push(0);
            at.push(bytes.len());
            at.sort_unstable();
            at.windows(2).map(|w| bytes[w[0]..w[1]].to_vec()).collect()
        }

        /// Events of `pieces`, as lossy strings (arbitrary bytes need not be UTF-8).
        fn lossy(pieces: &[Vec<u8>]) -> Vec<String> {
            super::parse(pieces, |data| String::from_utf8_lossy(data).into_owned())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// However the body is cut into reads, the events are those of the whole body.
            #[test]
            fn any_chunking_gives_the_same_events(
                bytes in stream(),
                cuts in vec(any::<prop::sample::Index>(), 0..8),
            ) {
                let whole = lossy(std::slice::from_ref(&bytes));
                prop_assert_eq!(lossy(&pieces(&bytes, &cuts)), whole.clone());
                let single: Vec<Vec<u8>> = bytes.iter().map(|b| vec![*b]).collect();
                prop_assert_eq!(lossy(&single), whole);
            }

            /// Arbitrary bytes in arbitrary reads never panic the parser.
            #[test]
            fn arbitrary_bytes_never_panic(
                bytes in vec(any::<u8>(), 0..512),
                cuts in vec(any::<prop::sample::Index>(), 0..8),
            ) {
                let _ = lossy(&pieces(&bytes, &cuts));
            }
        }
    }
}
