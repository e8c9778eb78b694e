//! Upstream's surface (the ordered messages its model is sent), followed while an upstream log is
//! imported so that its compactions become dsh's. Upstream never rewrites its log either: a
//! compaction appends a node that replaces a range of the surface (`surfaceOp: {op: "replace",
//! start, end}`), which dsh's `compaction/end` can say in two cases, the two upstream's own
//! compaction plugins write:
//!
//! - a `user/message` replacing the surface from its first node (`dsh-compaction-basic`'s summary
//!   checkpoint) is a `summary` replacing every dsh event up to the one that stands for the last
//!   replaced node; the summary is the `compaction/summary` record's (the checkpoint's text, with
//!   upstream's framing, when there is none), framed as dsh frames its own;
//! - a `tool/result` replacing one `tool/result` (`dsh-compaction-tool-result-pruner`'s shorter
//!   copy) prunes that call's result to the copy's length (dsh keeps a head and a tail of it, as
//!   upstream's copy does, in other proportions).
//!
//! Any other replacement is refused by name. Upstream's `compaction/start` and `compaction/end`
//! become dsh's, where upstream logged them: in the turn an automatic compaction ran in, between
//! turns for a manual one (dsh runs its own manual compactions as turns; making one here would
//! take a turn number upstream's later turns already use).

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use super::TransferError;
use super::blocks::text_of;
use super::context::Context;
use dsh_session::{CompactionTrigger, EventData};

/// The surface of the log read so far, and the compaction in progress.
#[derive(Debug, Default)]
pub(super) struct Surface {
    /// The surface's nodes in order, by position key: each upstream seq with the seq of the dsh
    /// event standing for it (the last event its conversion logged; for a summary, the
    /// `compaction/end`). An appended node takes the next key; a replacement takes the key of
    /// the first node it replaced, so the order holds without shifting anything.
    nodes: BTreeMap<u64, (u64, u64)>,
    /// The position key of each upstream seq on the surface: a replacement finds its range in
    /// logarithmic time, however long the conversation and however many replacements a file has.
    keys: HashMap<u64, u64>,
    next_key: u64,
    /// A dsh `compaction/start` logged and not yet ended, with its trigger.
    started: Option<CompactionTrigger>,
    /// The summary of the upstream compaction in progress (`compaction/summary`).
    summary: Option<String>,
}

/// What a dsh `compaction/end` of an imported compaction says.
#[derive(Default)]
struct Terms {
    summary: Option<String>,
    replaces_through: Option<u64>,
    pruned: Vec<String>,
    keep_bytes: u64,
    error: Option<String>,
}

impl Surface {
    /// Upstream event `seq` joined the surface's tail as the last dsh event logged.
    pub(super) fn appended(&mut self, seq: Option<u64>, cx: &Context<'_>) {
        if let (Some(seq), Some(dsh)) = (seq, cx.builder.last_seq()) {
            self.place(self.next_key, seq, dsh);
            self.next_key += 1;
        }
    }

    /// Upstream's `compaction/start`: `turn` is null for a manual compaction.
    pub(super) fn start(
        &mut self,
        cx: &mut Context<'_>,
        data: &Value,
        time: i64,
    ) -> Result<(), TransferError> {
        let trigger = if data.get("turn").is_none_or(Value::is_null) {
            CompactionTrigger::Manual
        } else {
            CompactionTrigger::Auto
        };
        self.summary = None;
        self.open(cx, trigger, time)
    }

    /// Upstream's `compaction/summary`: the summary its checkpoint frames.
    pub(super) fn summarised(&mut self, data: &Value) {
        self.summary = Some(text_of(data.get("summary")));
    }

    /// Upstream's `compaction/end`: a failed compaction is a failed one in dsh too; one that
    /// replaced nothing ends having changed nothing.
    pub(super) fn end(
        &mut self,
        cx: &mut Context<'_>,
        data: &Value,
        time: i64,
    ) -> Result<(), TransferError> {
        let error = data.get("error").filter(|e| !e.is_null()).map(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .map_or_else(|| e.to_string(), str::to_owned)
        });
        if self.started.is_some() || error.is_some() {
            let trigger = self.started.unwrap_or(CompactionTrigger::Auto);
            self.open(cx, trigger, time)?;
            self.close(
                cx,
                time,
                Terms {
                    error,
                    ..Terms::default()
                },
            )?;
        }
        self.summary = None;
        Ok(())
    }

    /// Event `seq` of `kind` replaces the surface's nodes `op` names.
    pub(super) fn replace(
        &mut self,
        cx: &mut Context<'_>,
        (seq, kind, data): (Option<u64>, &str, &Value),
        op: &Value,
        time: i64,
        bad: &dyn Fn(&str) -> String,
    ) -> Result<(), TransferError> {
        let bound = |key: &str| op.get(key).and_then(Value::as_u64);
        let (Some(start), Some(end)) = (bound("start"), bound("end")) else {
            return Err(cx.bad(bad("a surface replacement without its start and end")));
        };
        let (Some(&first), Some(&last)) = (self.keys.get(&start), self.keys.get(&end)) else {
            return Err(cx.bad(bad(&format!(
                "a surface replacement of seq {start} to {end}, which are not both in the conversation"
            ))));
        };
        if first > last {
            return Err(cx.bad(bad(&format!(
                "a surface replacement from seq {start} back to {end}"
            ))));
        }
        let seq = seq.unwrap_or(u64::MAX);
        let begins = self.nodes.first_key_value().map(|(&key, _)| key) == Some(first);
        match kind {
            "user/message" if begins => {
                let summary = self
                    .summary
                    .take()
                    .unwrap_or_else(|| text_of(data.get("content")));
                let trigger = self.started.unwrap_or(match cx.builder.turn() {
                    Some(_) => CompactionTrigger::Auto,
                    None => CompactionTrigger::Manual,
                });
                self.open(cx, trigger, time)?;
                self.close(cx, time, Terms {
                    summary: Some(summary),
                    replaces_through: self.nodes.get(&last).map(|&(_, dsh)| dsh),
                    ..Terms::default()
                })?;
                let standing = cx.builder.last_seq().unwrap_or_default();
                let kept = self.nodes.split_off(&(last + 1));
                for (replaced, _) in std::mem::replace(&mut self.nodes, kept).into_values() {
                    self.keys.remove(&replaced);
                }
                self.place(first, seq, standing);
                Ok(())
            }
            "tool/result" if first == last => {
                let block = data
                    .get("message")
                    .and_then(|m| m.get("content"))
                    .and_then(Value::as_array)
                    .and_then(|c| c.first());
                let call = block
                    .and_then(|b| b.get("toolCallId"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let kept = text_of(block.and_then(|b| b.get("content")));
                let trigger = self.started.unwrap_or(CompactionTrigger::Auto);
                self.open(cx, trigger, time)?;
                self.close(cx, time, Terms {
                    pruned: vec![call.to_owned()],
                    keep_bytes: kept.len() as u64,
                    ..Terms::default()
                })?;
                // The model still sees the call's result, shrunk.
                if let Some((replaced, dsh)) = self.nodes.remove(&first) {
                    self.keys.remove(&replaced);
                    self.place(first, seq, dsh);
                }
                Ok(())
            }
            _ => Err(cx.bad(bad(&format!(
                "a surface replacement of seq {start} to {end} by a {kind}, which dsh's compactions cannot say (they replace the conversation's beginning with a summary, or shorten one tool result)"
            )))),
        }
    }

    /// Puts upstream node `seq`, standing as dsh event `dsh`, at position `key` (a seq the source
    /// repeats names its latest node).
    fn place(&mut self, key: u64, seq: u64, dsh: u64) {
        if let Some(old) = self.keys.insert(seq, key) {
            self.nodes.remove(&old);
        }
        self.nodes.insert(key, (seq, dsh));
    }

    /// Logs a dsh `compaction/start` unless one is open.
    fn open(
        &mut self,
        cx: &mut Context<'_>,
        trigger: CompactionTrigger,
        time: i64,
    ) -> Result<(), TransferError> {
        if self.started.is_some() {
            return Ok(());
        }
        self.started = Some(trigger);
        cx.builder.push(
            time,
            EventData::CompactionStart {
                trigger,
                instructions: None,
            },
        )
    }

    /// Logs the open compaction's `compaction/end` with `terms`.
    fn close(
        &mut self,
        cx: &mut Context<'_>,
        time: i64,
        terms: Terms,
    ) -> Result<(), TransferError> {
        let trigger = self.started.take().unwrap_or(CompactionTrigger::Auto);
        cx.builder.push(
            time,
            EventData::CompactionEnd {
                trigger,
                summary: terms.summary,
                replaces_through: terms.replaces_through,
                keeps: None,
                pruned: terms.pruned,
                keep_bytes: terms.keep_bytes,
                // dshd's estimates of a request it never built.
                tokens_before: 0,
                tokens_after: 0,
                error: terms.error,
            },
        )
    }
}
