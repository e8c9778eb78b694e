//! The JSONL line format and its reader (CONTRACTS §4.4, §4.5): line 1 is the header tagged
//! `"type":"session"`, each later line one event, every line ends with `\n`. Reading finds the
//! committed prefix and tells a torn tail (droppable) from corruption (refused).

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::persistence::{PersistenceError, Repair};
use dsh_session::{Event, FORMAT_VERSION, SessionHeader};

/// The longest header line `list` reads before giving up on a file: headers are a few hundred
/// bytes, so anything this long without a newline is not a session log.
const HEADER_LINE_LIMIT: u64 = 64 * 1024;

#[derive(Serialize)]
struct HeaderLine<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    header: &'a SessionHeader,
}

/// Line 1 of a log, newline included: the header with `"type":"session"` first.
pub(crate) fn header_line(header: &SessionHeader) -> Vec<u8> {
    let mut line = serde_json::to_vec(&HeaderLine {
        kind: "session",
        header,
    })
    // Our own header has only string keys and plain values: serialising it cannot fail.
    .unwrap_or_default();
    line.push(b'\n');
    line
}

/// Writes a whole log to `out`: its header line, then `events`.
pub(super) fn write_log<W: Write>(
    out: &mut W,
    header: &SessionHeader,
    events: &[Event],
) -> io::Result<()> {
    out.write_all(&header_line(header))?;
    write_event_lines(out, events)
}

/// Writes `events` to `out` as JSON lines, each ending in `\n`. Each event is serialised straight
/// into `out`: a checkpoint may hold a reply of tens of megabytes, and building its line in memory
/// first would hold that reply once more.
pub(crate) fn write_event_lines<W: Write>(out: &mut W, events: &[Event]) -> io::Result<()> {
    for event in events {
        serde_json::to_writer(&mut *out, event)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// Parses and validates a header line (without its newline).
pub(crate) fn parse_header(line: &[u8]) -> Result<SessionHeader, String> {
    let value: Value =
        serde_json::from_slice(line).map_err(|e| format!("header is not JSON: {e}"))?;
    let Value::Object(mut map) = value else {
        return Err("header is not a JSON object".to_owned());
    };
    match map.remove("type") {
        Some(Value::String(kind)) if kind == "session" => {}
        other => return Err(format!("line 1 is not a session header (type {other:?})")),
    }
    // A newer format's header may carry members this dshd does not know: it is read as far as
    // this dshd understands it, and the log is then only read, never written (`writable`).
    let newer = map
        .get("version")
        .and_then(Value::as_u64)
        .is_some_and(|v| v > u64::from(FORMAT_VERSION));
    if newer {
        map.retain(|key, _| SessionHeader::MEMBERS.contains(&key.as_str()));
    }
    let header: SessionHeader = serde_json::from_value(Value::Object(map))
        .map_err(|e| format!("invalid session header: {e}"))?;
    if !newer {
        header.validate().map_err(|e| e.to_string())?;
    }
    Ok(header)
}

/// Refuses to write a log whose header says a newer format wrote it: this dshd would write lines
/// that format may not expect.
pub(super) fn writable(path: &Path, header: &SessionHeader) -> Result<(), PersistenceError> {
    if header.version > FORMAT_VERSION {
        return Err(PersistenceError::NewerFormat {
            path: path.to_owned(),
            version: header.version,
        });
    }
    Ok(())
}

/// Reads only the header of the log at `path` (for `list`).
pub(super) fn read_header(path: &Path) -> Result<SessionHeader, String> {
    let file = File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    let mut line = Vec::new();
    BufReader::new(file)
        .take(HEADER_LINE_LIMIT)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("cannot read: {e}"))?;
    if line.pop() != Some(b'\n') {
        return Err("header line is missing or incomplete".to_owned());
    }
    parse_header(&line)
}

/// What a log holds, as far as it is committed.
#[derive(Debug)]
pub(super) struct Scan {
    /// The header.
    pub header: SessionHeader,
    /// The committed events, contiguous from seq 0.
    pub events: Vec<Event>,
    /// Length in bytes of the committed prefix (header and events, newlines included).
    pub committed: u64,
    /// The torn tail after the committed prefix, if any.
    pub torn: Option<Repair>,
}

/// Splits a log into its committed prefix and torn tail, or reports damage (CONTRACTS §4.5).
///
/// Only a final line without `\n` is a torn tail: a write that a crash cut short. Every complete
/// line was written whole by someone, so it is never dropped: a line of an event type (or with
/// members) this dshd does not know is kept as [`EventData::Unknown`](dsh_session::EventData),
/// and a complete line that is not an event at all (not JSON, no envelope, a seq out of order) is
/// damage, named by its 1-based line, which nothing repairs without being asked.
pub(super) fn scan(path: &Path, bytes: &[u8]) -> Result<Scan, PersistenceError> {
    let corrupt = |line: usize, message: String| PersistenceError::Corrupt {
        path: path.to_owned(),
        line,
        message,
    };
    let mut lines = Lines { bytes, pos: 0 };
    let header = match lines.next() {
        Some((line, true)) => parse_header(line).map_err(|m| corrupt(1, m))?,
        Some((_, false)) => return Err(corrupt(1, "header line has no newline".to_owned())),
        None => return Err(corrupt(1, "empty session log".to_owned())),
    };
    let mut committed = lines.pos;
    let mut events: Vec<Event> = Vec::new();
    let mut torn = None;
    let mut number = 1;
    while let Some((line, complete)) = lines.next() {
        number += 1;
        if !complete {
            torn = Some(Repair::TornTail {
                from_line: number,
                lines: 1,
            });
            break;
        }
        let event = Event::from_line(line).map_err(|why| corrupt(number, why))?;
        let expected = events.len() as u64;
        if event.seq != expected {
            return Err(corrupt(
                number,
                format!("expected seq {expected}, found {}", event.seq),
            ));
        }
        events.push(event);
        committed = lines.pos;
    }
    Ok(Scan {
        header,
        events,
        committed: committed as u64,
        torn,
    })
}

/// The byte offset where 1-based line `line` of `bytes` starts (the end when there are fewer).
pub(super) fn line_start(bytes: &[u8], line: usize) -> usize {
    if line <= 1 {
        return 0;
    }
    bytes
        .iter()
        .enumerate()
        .filter(|&(_, &b)| b == b'\n')
        .nth(line - 2)
        .map_or(bytes.len(), |(at, _)| at + 1)
}

/// Lines of a byte buffer: each item is the line without its newline and whether it had one.
struct Lines<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = (&'a [u8], bool);

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.bytes.get(self.pos..).filter(|r| !r.is_empty())?;
        match rest.iter().position(|&b| b == b'\n') {
            Some(end) => {
                self.pos += end + 1;
                Some((&rest[..end], true))
            }
            None => {
                self.pos = self.bytes.len();
                Some((rest, false))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{EventData, SessionId, TurnEndReason};

    fn header() -> SessionHeader {
        SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 7)
    }

    fn line(event: EventData, seq: u64) -> String {
        let mut buf = Vec::new();
        write_event_lines(
            &mut buf,
            &[Event {
                seq,
                time: 1,
                data: event,
            }],
        )
        .unwrap();
        String::from_utf8(buf).unwrap()
    }

    fn turn(n: u32, seq: u64) -> String {
        line(EventData::TurnStart { turn: n }, seq)
            + &line(
                EventData::TurnEnd {
                    turn: n,
                    reason: TurnEndReason::Completed,
                    answer_seq: None,
                    usage: None,
                },
                seq + 1,
            )
    }

    fn log(body: &str) -> Vec<u8> {
        let mut bytes = header_line(&header());
        bytes.extend_from_slice(body.as_bytes());
        bytes
    }

    #[test]
    fn header_line_is_tagged_first() {
        let text = String::from_utf8(header_line(&header())).unwrap();
        assert_eq!(
            text,
            "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":7,\"cwd\":\"/w\",\"delegationDepth\":0}\n"
        );
        assert_eq!(parse_header(text.trim_end().as_bytes()).unwrap(), header());
        assert!(parse_header(b"{\"version\":0}").is_err());
        assert!(parse_header(br#"{"type":"turn/start","seq":0,"time":0,"data":{}}"#).is_err());
    }

    #[test]
    fn clean_log_has_no_tail() {
        let bytes = log(&turn(1, 0));
        let scan = scan(Path::new("/x"), &bytes).unwrap();
        assert_eq!(scan.events.len(), 2);
        assert_eq!(scan.committed, bytes.len() as u64);
        assert!(scan.torn.is_none());
    }

    /// Only a last line without its newline is torn: a write a crash cut short.
    #[test]
    fn only_an_incomplete_last_line_is_torn() {
        let good = turn(1, 0);
        for tail in [
            "{\"type\":\"turn/st",
            "garbage",
            "{\"type\":\"x/y\",\"seq\":2,\"time\":1,\"data\":{}}",
        ] {
            let bytes = log(&(good.clone() + tail));
            let scan = scan(Path::new("/x"), &bytes).unwrap();
            assert_eq!(scan.events.len(), 2, "{tail:?}");
            assert_eq!(scan.committed, log(&good).len() as u64);
            assert_eq!(
                scan.torn,
                Some(Repair::TornTail {
                    from_line: 4,
                    lines: 1
                }),
                "{tail:?}"
            );
        }
    }

    /// A complete line was written whole by someone: one that is not an event is damage, named
    /// by its line, wherever it is; never a tail to drop.
    #[test]
    fn a_complete_line_that_is_no_event_is_damage() {
        let good = turn(1, 0);
        for (tail, message) in [
            ("garbage\n", "bad event line"),
            ("garbage\n{\"partial", "bad event line"),
            ("\n", "bad event line"),
            ("{\"seq\":2,\"time\":1,\"data\":{}}\n", "bad event line"),
            (
                "{\"type\":\"turn/start\",\"seq\":2,\"time\":1,\"data\":{\"turn\":\"two\"}}\n",
                "bad event line",
            ),
            (
                line(EventData::TurnStart { turn: 2 }, 5).as_str(),
                "expected seq 2, found 5",
            ),
        ] {
            match scan(Path::new("/x"), &log(&(good.clone() + tail))) {
                Err(PersistenceError::Corrupt {
                    line, message: m, ..
                }) => {
                    assert_eq!(line, 4, "{tail:?}");
                    assert!(m.contains(message), "{tail:?}: {m}");
                }
                other => panic!("{tail:?}: {other:?}"),
            }
        }
        for bad in [&b""[..], b"{\"type\":\"session\"", b"not json\n"] {
            assert!(matches!(
                scan(Path::new("/x"), bad),
                Err(PersistenceError::Corrupt { line: 1, .. })
            ));
        }
    }

    /// A line of a type this dshd does not know, or with members it does not know, is an event
    /// kept as written: it counts in the seq order and is written back unchanged.
    #[test]
    fn unknown_events_are_kept_as_written() {
        let foreign = [
            r#"{"type":"note/added","seq":2,"time":5,"data":{"text":"from a newer dsh"}}"#,
            r#"{"seq":3,"type":"turn/start","time":6,"data":{"turn":2,"newField":[1,2]},"extra":true}"#,
        ];
        let body = turn(1, 0) + &foreign.join("\n") + "\n" + &turn(2, 4);
        let bytes = log(&body);
        let scan = scan(Path::new("/x"), &bytes).unwrap();
        assert_eq!(scan.events.len(), 6);
        assert!(scan.torn.is_none());
        for (event, text) in scan.events[2..4].iter().zip(foreign) {
            let EventData::Unknown(unknown) = &event.data else {
                panic!("{event:?}");
            };
            assert_eq!(unknown.line(), text);
            assert_eq!(event.to_json(), text, "written back unchanged");
        }
        assert_eq!(scan.events[2].data.type_name(), "note/added");
        assert_eq!(scan.events[2].data_json(), r#"{"text":"from a newer dsh"}"#);
        let mut again = header_line(&header());
        write_event_lines(&mut again, &scan.events).unwrap();
        assert_eq!(again, bytes, "a copy of the log is the log");
    }

    /// A header of a newer format is read as far as this dshd knows it; writing is refused.
    #[test]
    fn a_newer_format_is_read_not_written() {
        let newer = br#"{"type":"session","version":3,"id":"s","createdAt":7,"cwd":"/w","delegationDepth":0,"team":"x"}"#;
        let header = parse_header(newer).unwrap();
        assert_eq!(header.version, 3);
        assert!(matches!(
            writable(Path::new("/x"), &header),
            Err(PersistenceError::NewerFormat { version: 3, .. })
        ));
        assert!(writable(Path::new("/x"), &self::header()).is_ok());
        // Unknown members of the current version's header are still damage.
        assert!(parse_header(br#"{"type":"session","version":0,"id":"s","createdAt":7,"cwd":"/w","delegationDepth":0,"team":"x"}"#).is_err());
    }

    #[test]
    fn line_starts() {
        let bytes = b"a\nbb\nccc";
        assert_eq!(line_start(bytes, 1), 0);
        assert_eq!(line_start(bytes, 2), 2);
        assert_eq!(line_start(bytes, 3), 5);
        assert_eq!(line_start(bytes, 4), 8);
    }

    mod properties {
        use proptest::prelude::*;

        use super::super::*;
        use dsh_session::strategies::{events, text};
        use dsh_session::{SessionId, check_contiguous};

        fn written(header: &SessionHeader, events: &[Event]) -> Vec<u8> {
            let mut bytes = Vec::new();
            write_log(&mut bytes, header, events).unwrap();
            bytes
        }

        /// Any header the daemon could write (the reader refuses invalid ones, as it should).
        fn header_strategy() -> impl Strategy<Value = SessionHeader> {
            let id = "[a-zA-Z0-9._~-]{1,40}";
            (
                (id, "/[^\u{0}]{0,30}", 0..=i64::MAX, any::<u32>()),
                (prop::option::of(id), any::<Option<u64>>(), any::<bool>()),
            )
                .prop_map(|((id, cwd, created, depth), (parent, seed, child))| {
                    let mut header =
                        SessionHeader::new(SessionId::parse(&id).unwrap(), cwd.into(), created);
                    header.delegation_depth = depth;
                    header.parent_session = parent.map(|p| SessionId::parse(&p).unwrap());
                    header.seed_length = seed;
                    header.origin = child.then_some(dsh_session::Origin::Subagent);
                    header
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            /// What the writer wrote, the reader reads back identically, with nothing torn.
            #[test]
            fn written_logs_read_back_identical(header in header_strategy(), events in events(12)) {
                let bytes = written(&header, &events);
                let scan = scan(Path::new("/x"), &bytes).unwrap();
                prop_assert_eq!(scan.header, header);
                prop_assert_eq!(scan.events, events);
                prop_assert_eq!(scan.committed, bytes.len() as u64);
                prop_assert!(scan.torn.is_none());
            }

            /// A log cut anywhere (a crash mid-write) reads as the lines complete before the cut,
            /// with the rest a torn tail; a cut inside the header is corruption of line 1.
            #[test]
            fn a_log_cut_anywhere_keeps_its_complete_lines(
                header in header_strategy(),
                events in events(8),
                cut in any::<prop::sample::Index>(),
            ) {
                let bytes = written(&header, &events);
                let cut = cut.index(bytes.len() + 1);
                let header_len = header_line(&header).len();
                match scan(Path::new("/x"), &bytes[..cut]) {
                    Ok(scan) => {
                        prop_assert!(cut >= header_len);
                        let complete = bytes[header_len..cut].iter().filter(|&&b| b == b'\n').count();
                        prop_assert_eq!(&scan.events[..], &events[..complete]);
                        prop_assert!(scan.committed <= cut as u64);
                        prop_assert_eq!(scan.torn.is_some(), scan.committed < cut as u64);
                    }
                    Err(PersistenceError::Corrupt { line, .. }) => {
                        prop_assert!(cut < header_len);
                        prop_assert_eq!(line, 1);
                    }
                    Err(other) => prop_assert!(false, "{other}"),
                }
            }

            /// Damage anywhere after the header (bytes overwritten or inserted) never panics; what
            /// is read is contiguous from seq 0 and never past the damage.
            #[test]
            fn damaged_logs_never_panic_and_keep_an_intact_prefix(
                header in header_strategy(),
                events in events(8),
                at in any::<prop::sample::Index>(),
                junk in proptest::collection::vec(any::<u8>(), 0..16),
                overwrite in any::<bool>(),
            ) {
                let bytes = written(&header, &events);
                let header_len = header_line(&header).len();
                let at = header_len + at.index(bytes.len() - header_len + 1);
                let mut damaged = bytes[..at].to_vec();
                damaged.extend_from_slice(&junk);
                let resume = if overwrite { (at + junk.len()).min(bytes.len()) } else { at };
                damaged.extend_from_slice(&bytes[resume..]);
                if let Ok(scan) = scan(Path::new("/x"), &damaged) {
                    prop_assert!(check_contiguous(&scan.events).is_ok());
                    prop_assert!(scan.committed <= damaged.len() as u64);
                    let intact = bytes[header_len..at].iter().filter(|&&b| b == b'\n').count();
                    prop_assert_eq!(&scan.events[..intact.min(scan.events.len())], &events[..intact.min(scan.events.len())]);
                }
            }

            /// Loading repairs whatever a crash or damage left (a torn tail, an open turn) on disk,
            /// so loading again reads exactly what the first load returned and repairs nothing.
            #[test]
            fn load_repairs_once_and_the_repair_reads_back(
                events in events(10),
                cut in any::<prop::sample::Index>(),
                junk in proptest::collection::vec(any::<u8>(), 0..12),
            ) {
                use crate::persistence::BlockingPersistence;

                let dir = tempfile::tempdir().unwrap();
                let backend = crate::persistence::jsonl::JsonlBackend::new(dir.path().to_owned()).unwrap();
                let header = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 1);
                let bytes = written(&header, &events);
                let header_len = header_line(&header).len();
                let cut = header_len + cut.index(bytes.len() - header_len + 1);
                let mut damaged = bytes[..cut].to_vec();
                damaged.extend_from_slice(&junk);
                let path = crate::persistence::jsonl::log_path(dir.path(), &header);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &damaged).unwrap();

                match backend.load(&header.id) {
                    Ok(first) => {
                        prop_assert!(check_contiguous(&first.events).is_ok());
                        prop_assert!(dsh_session::repair::close_open_turn(&first.events).is_empty());
                        backend.release(&header.id);
                        let again = backend.load(&header.id).unwrap();
                        prop_assert_eq!(again.events, first.events);
                        prop_assert!(again.repairs.is_empty(), "{:?}", again.repairs);
                    }
                    // Junk that ends a line is a complete line that is no event: damage, refused.
                    Err(PersistenceError::Corrupt { .. }) => {}
                    Err(other) => prop_assert!(false, "{other}"),
                }
            }

            /// Arbitrary bytes, and arbitrary lines after a valid header, never panic the reader.
            #[test]
            fn arbitrary_bytes_never_panic(
                bytes in proptest::collection::vec(any::<u8>(), 0..512),
                lines in proptest::collection::vec(text(), 0..6),
            ) {
                let _ = scan(Path::new("/x"), &bytes);
                let _ = parse_header(&bytes);
                let mut log = header_line(&SessionHeader::new(
                    SessionId::parse("s").unwrap(),
                    "/w".into(),
                    0,
                ));
                for line in lines {
                    log.extend_from_slice(line.as_bytes());
                    log.push(b'\n');
                }
                let _ = scan(Path::new("/x"), &log);
            }
        }
    }
}
