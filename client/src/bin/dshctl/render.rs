//! The human form of the event streams (`prompt`, `watch`): one line per event worth a line,
//! streamed text as it comes, and the events of other agents (children) marked with their id.

use std::collections::HashMap;
use std::io::Write;

use dsh_proto::v1;
use serde_json::Value;

use crate::wire;

/// What has been printed of the streaming text, and whose lines are marked.
#[derive(Debug, Default)]
pub struct Screen {
    /// The agent whose events print unmarked (`None`: every line is marked).
    main: Option<String>,
    /// The last line is unfinished, and whose text it is.
    mid_line: Option<String>,
    /// Per session: the step whose text is on screen, and how many of its bytes were printed.
    printed: HashMap<String, ((u64, u64), u64)>,
}

impl Screen {
    /// A screen on which `main`'s events print unmarked and other agents' with their id.
    pub fn new(main: Option<String>) -> Self {
        Self {
            main,
            ..Self::default()
        }
    }

    /// Prints `event` in its human form.
    pub fn show(&mut self, event: &v1::Event) -> anyhow::Result<()> {
        let stdout = std::io::stdout();
        let mut w = stdout.lock();
        let result = self.write(&mut w, event).and_then(|()| w.flush());
        crate::output::finish(result)
    }

    fn write(&mut self, w: &mut dyn Write, e: &v1::Event) -> std::io::Result<()> {
        let data = wire::event_data(e);
        let text = |key: &str| data[key].as_str().unwrap_or_default().to_owned();
        let num = |key: &str| data[key].as_u64().unwrap_or_default();
        match e.r#type.as_str() {
            "turn/start" => self.line(w, e, format!("── turn {}", num("turn"))),
            "user/message" if data["message"]["source"]["kind"] == "user" && self.main.is_none() => {
                let said = data["message"]["text"].as_str().unwrap_or_default();
                self.line(w, e, format!("› {}", indent(said)))
            }
            "text/delta" => self.delta(w, e, &data),
            "assistant/message" => self.full(w, e, &data),
            "tool/call" => self.line(w, e, format!("▶ {} {}", text("name"), data["arguments"])),
            "tool/result" => {
                let marker = if data["isError"] == true { "✗" } else { "◀" };
                self.line(w, e, format!("{marker} {}", indent(&text("content"))))
            }
            "hook/result" => {
                self.line(
                    w,
                    e,
                    format!("· {} hook {} → {}", text("dialect"), text("event"), text("decision")),
                )?;
                // A hook's systemMessage is for the user: shown on its own line, as both
                // harnesses show it as a warning.
                match data["systemMessage"].as_str() {
                    Some(message) => self.line(w, e, format!("⚠ {}", indent(message))),
                    None => Ok(()),
                }
            }
            "approval/request" => self.line(
                w,
                e,
                format!(
                    "? approval needed for {} call {}: {}\n  in {}\n  why: {}\n  answer: dshctl approve {} {} --allow|--deny",
                    text("tool"),
                    text("callId"),
                    indent(&text("command")),
                    text("cwd"),
                    indent(&text("reason")),
                    e.session_id,
                    text("callId"),
                ),
            ),
            "approval/decision" => {
                let verdict = if data["decision"] == "allow" { "✓ allowed" } else { "✗ denied" };
                let why = data["reason"]
                    .as_str()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                let until = if data["scope"] == "session" {
                    ", and the same request for this session"
                } else {
                    ""
                };
                let by = answered_by(&data);
                self.line(w, e, format!("{verdict} call {} ({by}{until}){why}", text("callId")))
            }
            "turn/end" => {
                let reason = &data["reason"];
                let kind = reason["kind"].as_str().unwrap_or_default();
                let detail = reason_detail(reason);
                let detail = if detail.is_empty() { String::new() } else { format!(": {detail}") };
                self.line(w, e, format!("── turn {} {kind}{detail}", num("turn")))
            }
            "watch/lagged" => self.line(
                w,
                e,
                format!(
                    "… fell behind; streamed text was skipped, events from seq {} re-read from the log",
                    num("fromSeq")
                ),
            ),
            _ => Ok(()),
        }
    }

    /// A mark for lines of agents other than the main one: the last 8 characters of the id (the
    /// first ones of a UUIDv7 are its creation time, the same for agents created together).
    fn mark(&self, e: &v1::Event) -> String {
        if self.main.as_deref() == Some(e.session_id.as_str()) {
            return String::new();
        }
        let id = &e.session_id;
        let tail = id
            .char_indices()
            .rev()
            .nth(7)
            .map_or(id.as_str(), |(at, _)| &id[at..]);
        format!("[…{tail}] ")
    }

    fn line(&mut self, w: &mut dyn Write, e: &v1::Event, text: String) -> std::io::Result<()> {
        if self.mid_line.take().is_some() {
            writeln!(w)?;
        }
        writeln!(w, "{}{text}", self.mark(e))
    }

    /// Prints a streamed fragment. A fragment past what was printed means dshd skipped text while
    /// we were slow: nothing more of the step is printed until its full text arrives.
    fn delta(&mut self, w: &mut dyn Write, e: &v1::Event, data: &Value) -> std::io::Result<()> {
        let step = (
            data["turn"].as_u64().unwrap_or(0),
            data["step"].as_u64().unwrap_or(0),
        );
        let offset = data["offset"].as_u64().unwrap_or(0);
        let text = data["text"].as_str().unwrap_or_default();
        let entry = self.printed.entry(e.session_id.clone()).or_default();
        if entry.0 != step {
            *entry = (step, 0);
        }
        if offset != entry.1 || text.is_empty() {
            return Ok(());
        }
        entry.1 += text.len() as u64;
        self.text(w, e, text)
    }

    /// The step's full text: prints whatever the deltas did not.
    fn full(&mut self, w: &mut dyn Write, e: &v1::Event, data: &Value) -> std::io::Result<()> {
        let step = (
            data["turn"].as_u64().unwrap_or(0),
            data["step"].as_u64().unwrap_or(0),
        );
        let full = data["message"]["text"].as_str().unwrap_or_default();
        let entry = self.printed.entry(e.session_id.clone()).or_default();
        let printed = if entry.0 == step {
            usize::try_from(entry.1).unwrap_or(usize::MAX)
        } else {
            0
        };
        *entry = (step, full.len() as u64);
        let rest = full.get(printed..).unwrap_or_default();
        if rest.is_empty() {
            return Ok(());
        }
        self.text(w, e, rest)
    }

    /// Streams `text` of `e`'s agent, starting a marked line when another agent's text (or
    /// nothing) is on the current one.
    fn text(&mut self, w: &mut dyn Write, e: &v1::Event, text: &str) -> std::io::Result<()> {
        if self.mid_line.as_deref() != Some(e.session_id.as_str()) {
            if self.mid_line.is_some() {
                writeln!(w)?;
            }
            write!(w, "{}", self.mark(e))?;
        }
        write!(w, "{text}")?;
        self.mid_line = (!text.ends_with('\n')).then(|| e.session_id.clone());
        Ok(())
    }
}

/// The human detail of a turn's end reason: the abort cause, error message, or hook's reason.
pub fn reason_detail(reason: &Value) -> String {
    ["cause", "message", "reason"]
        .iter()
        .find_map(|k| reason[k].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn indent(text: &str) -> String {
    let text = text.trim_end();
    text.replace('\n', "\n  ")
}

/// Who decided an `approval/decision`: `by`, and for a client what dshd saw of it (pid, uid,
/// whether it had a terminal), e.g. `client pid 4242, uid 1000, at a terminal`.
fn answered_by(data: &serde_json::Value) -> String {
    let by = data["by"].as_str().unwrap_or_default();
    let client = &data["client"];
    if !client.is_object() {
        return by.to_owned();
    }
    let mut parts = Vec::new();
    if let Some(pid) = client["pid"].as_i64() {
        parts.push(format!("pid {pid}"));
    }
    if let Some(uid) = client["uid"].as_u64() {
        parts.push(format!("uid {uid}"));
    }
    match client["terminal"].as_bool() {
        Some(true) => parts.push("at a terminal".to_owned()),
        Some(false) => parts.push("no terminal".to_owned()),
        None => {}
    }
    format!("{by} {}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn event(kind: &str, session: &str, data: Value) -> v1::Event {
        v1::Event {
            session_id: session.to_owned(),
            r#type: kind.to_owned(),
            seq: None,
            time_ms: 0,
            data_json: data.to_string(),
        }
    }

    fn delta(step: u64, offset: u64, text: &str) -> v1::Event {
        event(
            "text/delta",
            "a",
            serde_json::json!({"turn": 1, "step": step, "offset": offset, "text": text}),
        )
    }

    fn full(step: u64, text: &str) -> v1::Event {
        event(
            "assistant/message",
            "a",
            serde_json::json!({"turn": 1, "step": step, "message": {"text": text}}),
        )
    }

    fn render(screen: &mut Screen, events: &[v1::Event]) -> String {
        let mut out = Vec::new();
        for e in events {
            screen.write(&mut out, e).unwrap();
        }
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_decision_says_who_answered() {
        let json = |v: Value| v;
        assert_eq!(
            answered_by(&json(serde_json::json!({"by": "timeout"}))),
            "timeout"
        );
        assert_eq!(
            answered_by(&json(
                serde_json::json!({"by": "client", "client": {"pid": 42, "uid": 1000, "terminal": true}})
            )),
            "client pid 42, uid 1000, at a terminal"
        );
        assert_eq!(
            answered_by(&json(
                serde_json::json!({"by": "client", "client": {"uid": 0, "terminal": false}})
            )),
            "client uid 0, no terminal"
        );
    }

    #[test]
    fn skipped_text_is_taken_from_the_full_text() {
        let mut screen = Screen::new(Some("a".into()));
        // dshd skipped "big " while we were slow: nothing after the gap is printed out of place.
        let out = render(
            &mut screen,
            &[
                delta(1, 0, "Hello, "),
                delta(1, 11, "world"),
                full(1, "Hello, big world"),
            ],
        );
        assert_eq!(out, "Hello, big world");
    }

    #[test]
    fn a_step_streamed_whole_is_printed_once() {
        let mut screen = Screen::new(Some("a".into()));
        let out = render(
            &mut screen,
            &[
                delta(1, 0, "one"),
                full(1, "one"),
                delta(2, 0, "two"),
                delta(2, 3, "!"),
                full(2, "two!"),
            ],
        );
        assert_eq!(out, "onetwo!");
        assert!(screen.mid_line.is_some());
    }

    #[test]
    fn other_agents_are_marked_with_their_id() {
        let mut screen = Screen::new(Some("a".into()));
        let child = "0198c0de-0000-7000-8000-00000000beef";
        let out = render(
            &mut screen,
            &[
                event("turn/start", "a", serde_json::json!({"turn": 1})),
                event("turn/start", child, serde_json::json!({"turn": 1})),
            ],
        );
        assert_eq!(out, "── turn 1\n[…0000beef] ── turn 1\n");
    }
}
