//! The human form of the event streams (`prompt`, `watch`): one line per event worth a line,
//! streamed text as it comes, and the events of other agents (children) marked with their id.
//! Everything is written through [`crate::safe`]: the models', commands' and hooks' text shows
//! escaped on a terminal, and only dshctl's own dimming and erasing act on it.

use std::collections::HashMap;
use std::io::Write;

use dsh_proto::v1;
use serde_json::Value;

use crate::safe::{self, Control, Terminal};
use crate::wire;

/// Lines of one call's live output shown at most; the rest is in its result.
const LIVE_LINES: usize = 20;
/// Bytes of one call's live output shown at most (long lines count too).
const LIVE_BYTES: usize = 4096;

/// What has been shown of one call's live output.
#[derive(Debug, Default)]
struct Shown {
    lines: usize,
    bytes: usize,
    /// The cap was reached: nothing more is shown.
    capped: bool,
    /// Per stream (stdout, stderr), the offset the next piece should start at.
    next: [u64; 2],
}

/// What has been printed of the streaming text, and whose lines are marked.
#[derive(Debug, Default)]
pub struct Screen {
    /// The agent whose events print unmarked (`None`: every line is marked).
    main: Option<String>,
    /// The last line is unfinished, and whose text it is.
    mid_line: Option<String>,
    /// Per session: the step whose text is on screen, and how many of its bytes were printed.
    printed: HashMap<String, ((u64, u64), u64)>,
    /// Per session and call: what was shown of its live output.
    outputs: HashMap<(String, String), Shown>,
    /// Live output is dimmed (a terminal, and `NO_COLOR` unset).
    dim: bool,
    /// A transient status line (see [`status`](Self::status)) is on screen.
    status_shown: bool,
    /// What the main agent waits on since its last event, for the status line.
    activity: Option<String>,
}

impl Screen {
    /// A screen on which `main`'s events print unmarked and other agents' with their id.
    pub fn new(main: Option<String>) -> Self {
        Self {
            main,
            dim: crate::output::color(),
            ..Self::default()
        }
    }

    /// Prints `event` in its human form.
    pub fn show(&mut self, event: &v1::Event) -> anyhow::Result<()> {
        let mut w = safe::stdout();
        let result = self.write(&mut w, event).and_then(|()| w.flush());
        crate::output::finish(result)
    }

    /// What the main agent is waiting on, for a status line, once nothing came for a while.
    pub fn activity(&self) -> Option<&str> {
        self.activity.as_deref()
    }

    /// Shows `text` on a transient status line, replacing the previous one, unless a line is
    /// being written (streamed text or output). Only for a terminal: it uses a carriage return
    /// and an erase; the next event clears it.
    pub fn status(&mut self, text: &str) -> anyhow::Result<()> {
        if self.mid_line.is_some() {
            return Ok(());
        }
        let mut w = safe::stdout();
        self.status_shown = true;
        let result = w
            .control(Control::EraseLine)
            .and_then(|()| dimmed(&mut w, self.dim, text))
            .and_then(|()| w.flush());
        crate::output::finish(result)
    }

    /// Erases the status line, if one is shown (before anything else is printed).
    pub fn clear_status(&mut self) -> anyhow::Result<()> {
        if !std::mem::take(&mut self.status_shown) {
            return Ok(());
        }
        let mut w = safe::stdout();
        crate::output::finish(w.control(Control::EraseLine).and_then(|()| w.flush()))
    }

    /// Notes what the main agent waits on after `e`.
    fn note_activity(&mut self, e: &v1::Event, data: &Value) {
        if self
            .main
            .as_deref()
            .is_some_and(|main| main != e.session_id)
        {
            return;
        }
        self.activity = match e.r#type.as_str() {
            "step/start" | "tool/result" => Some("waiting for the model".to_owned()),
            "model/retry" => Some("waiting to retry".to_owned()),
            "text/delta" | "tool/output" => return,
            "tool/call" | "approval/decision" => {
                let name = data["name"].as_str().unwrap_or("the call");
                Some(format!("running {name}"))
            }
            _ => None,
        };
    }

    fn write(&mut self, w: &mut dyn Terminal, e: &v1::Event) -> std::io::Result<()> {
        let data = wire::event_data(e);
        if std::mem::take(&mut self.status_shown) {
            w.control(Control::EraseLine)?;
        }
        self.note_activity(e, &data);
        let text = |key: &str| data[key].as_str().unwrap_or_default().to_owned();
        let num = |key: &str| data[key].as_u64().unwrap_or_default();
        match e.r#type.as_str() {
            "turn/start" => self.line(w, e, format!("── turn {}", num("turn"))),
            "user/message" if data["message"]["source"]["kind"] == "user" && self.main.is_none() => {
                let said = data["message"]["text"].as_str().unwrap_or_default();
                self.line(w, e, format!("› {}", indent(said)))
            }
            "user/message" if data["message"]["source"]["kind"] == "steer" => {
                let said = data["message"]["text"].as_str().unwrap_or_default();
                self.line(w, e, format!("↪ steered: {}", indent(said)))
            }
            "text/delta" => self.delta(w, e, &data),
            "tool/output" => self.output(w, e, &data),
            "model/retry" => {
                let delay = std::time::Duration::from_millis(num("delayMs"));
                self.line(
                    w,
                    e,
                    format!("⟳ retrying in {} ({})", seconds(delay), text("reason")),
                )
            }
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
                let usage = usage_text(&data["usage"]);
                self.line(w, e, format!("── turn {} {kind}{detail}{usage}", num("turn")))
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
        format!("[{}] ", crate::output::short_id(&e.session_id))
    }

    fn line(&mut self, w: &mut dyn Terminal, e: &v1::Event, text: String) -> std::io::Result<()> {
        if self.mid_line.take().is_some() {
            writeln!(w)?;
        }
        writeln!(w, "{}{text}", self.mark(e))
    }

    /// Prints a streamed fragment. A fragment past what was printed means dshd skipped text while
    /// we were slow: nothing more of the step is printed until its full text arrives.
    fn delta(&mut self, w: &mut dyn Terminal, e: &v1::Event, data: &Value) -> std::io::Result<()> {
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

    /// Prints a piece of a call's live output, dimmed and indented, up to [`LIVE_LINES`] lines
    /// and [`LIVE_BYTES`] bytes per call (its result follows with the whole output).
    fn output(&mut self, w: &mut dyn Terminal, e: &v1::Event, data: &Value) -> std::io::Result<()> {
        let call = data["callId"].as_str().unwrap_or_default().to_owned();
        let stderr = usize::from(data["stream"] == "stderr");
        let offset = data["offset"].as_u64().unwrap_or(0);
        let text = data["text"].as_str().unwrap_or_default();
        let key = format!("{}\u{0}{call}", e.session_id);
        let mark = self.mark(e);
        let dim = self.dim;
        let shown = self
            .outputs
            .entry((e.session_id.clone(), call))
            .or_default();
        if shown.capped || offset < shown.next[stderr] {
            return Ok(());
        }
        let gap = offset - shown.next[stderr];
        shown.next[stderr] = offset + text.len() as u64;
        let skipped = (gap > 0).then(|| format!("[… {gap} bytes not shown]\n"));
        for piece in skipped
            .iter()
            .map(String::as_str)
            .chain(text.split_inclusive('\n'))
        {
            if shown.lines >= LIVE_LINES || shown.bytes >= LIVE_BYTES {
                shown.capped = true;
                if self.mid_line.take().is_some() {
                    writeln!(w)?;
                }
                write!(w, "{mark}  ")?;
                dimmed(w, dim, "… (more output; the result shows it)")?;
                return writeln!(w);
            }
            if self.mid_line.as_deref() != Some(key.as_str()) {
                if self.mid_line.take().is_some() {
                    writeln!(w)?;
                }
                write!(w, "{mark}  ")?;
            }
            let line = piece.strip_suffix('\n');
            dimmed(w, dim, line.unwrap_or(piece))?;
            shown.bytes += piece.len();
            if line.is_some() {
                writeln!(w)?;
                shown.lines += 1;
                self.mid_line = None;
            } else {
                self.mid_line = Some(key.clone());
            }
        }
        Ok(())
    }

    /// The step's full text: prints whatever the deltas did not.
    fn full(&mut self, w: &mut dyn Terminal, e: &v1::Event, data: &Value) -> std::io::Result<()> {
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
    fn text(&mut self, w: &mut dyn Terminal, e: &v1::Event, text: &str) -> std::io::Result<()> {
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

/// Writes `text`, dimmed when `dim`.
fn dimmed(w: &mut dyn Terminal, dim: bool, text: &str) -> std::io::Result<()> {
    if dim {
        w.control(Control::Dim)?;
    }
    write!(w, "{text}")?;
    if dim {
        w.control(Control::Undim)?;
    }
    Ok(())
}

/// A wait in seconds as a person reads it: `3 s`, `0.5 s`.
fn seconds(wait: std::time::Duration) -> String {
    let ms = wait.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", wait.as_secs_f64())
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
    // A PermissionRequest hook's answer names the hooks that gave it.
    if let Some(handlers) = data["handlers"].as_array().filter(|h| !h.is_empty()) {
        let ids: Vec<&str> = handlers.iter().filter_map(|h| h.as_str()).collect();
        return format!("{by} {}", ids.join(", "));
    }
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

/// A turn's usage for its end line, e.g. ` · 1,200 tokens in (800 cached), 35 out`; empty when
/// the turn has none (the provider reported nothing: never shown as zero).
fn usage_text(usage: &serde_json::Value) -> String {
    if !usage.is_object() {
        return String::new();
    }
    let n = |key: &str| usage[key].as_u64();
    let input = n("inputTokens").unwrap_or(0);
    let cached = n("cacheReadTokens");
    let prompt = input + cached.unwrap_or(0);
    let cached = cached.map(|c| format!(" ({c} cached)")).unwrap_or_default();
    format!(
        " · tokens: {prompt} in{cached}, {} out",
        n("outputTokens").unwrap_or(0)
    )
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

    /// What `events` show on a terminal.
    fn render(screen: &mut Screen, events: &[v1::Event]) -> String {
        let mut out = Vec::new();
        {
            let mut w = safe::SafeWriter::new(&mut out, true);
            for e in events {
                screen.write(&mut w, e).unwrap();
            }
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
        assert_eq!(
            answered_by(&json(
                serde_json::json!({"by": "hook", "handlers": ["/h/settings.json#PermissionRequest[0][0]"]})
            )),
            "hook /h/settings.json#PermissionRequest[0][0]"
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

    fn output(call: &str, stream: &str, offset: u64, text: &str) -> v1::Event {
        event(
            "tool/output",
            "a",
            serde_json::json!({"turn": 1, "step": 1, "callId": call, "stream": stream, "offset": offset, "text": text}),
        )
    }

    #[test]
    fn live_output_is_indented_escaped_and_capped_per_call() {
        let mut screen = Screen::new(Some("a".into()));
        let many: String = (0..30).map(|i| format!("{i}\n")).collect();
        let out = render(
            &mut screen,
            &[
                output("c1", "stdout", 0, "one\ntw"),
                output("c1", "stdout", 6, "o\x1b[2J\n"),
                output("c1", "stderr", 4, "late\n"),
                output("c2", "stdout", 0, &many),
                output("c2", "stdout", 81, "never shown\n"),
            ],
        );
        let mut expected = "  one\n  two\\x1b[2J\n  [… 4 bytes not shown]\n  late\n".to_owned();
        for i in 0..20 {
            expected.push_str(&format!("  {i}\n"));
        }
        expected.push_str("  … (more output; the result shows it)\n");
        assert_eq!(out, expected);
    }

    #[test]
    fn a_retry_says_how_long_and_why() {
        let mut screen = Screen::new(Some("a".into()));
        let retry = |ms: u64| {
            event(
                "model/retry",
                "a",
                serde_json::json!({"turn": 1, "step": 1, "attempt": 1, "delayMs": ms, "reason": "429"}),
            )
        };
        let out = render(&mut screen, &[retry(3000), retry(500)]);
        assert_eq!(out, "⟳ retrying in 3 s (429)\n⟳ retrying in 0.5 s (429)\n");
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
