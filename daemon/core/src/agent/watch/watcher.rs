//! The watcher's end: reads what its queue announces from the logs, in seq order per session,
//! never twice (a cursor per session), and catches up from the logs after a lag.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};

use super::hub::WatchHub;
use super::queue::{Item, Missed, Next, Queue};
use super::{StreamEvent, WatchScope, WatchedBy};
use crate::agent::live::Agent;
use crate::persistence::PersistenceHandle;
use dsh_session::{Event, EventData, SessionId};

/// A live view of agents' events: replayed from the logs where asked, then live, in order per
/// session, without gaps or duplicates of logged events. Bounded: a watcher that falls too far
/// behind is told (`watch/lagged`) and catches up from the logs; it never slows an agent.
/// Dropping it unregisters it.
pub struct Watcher {
    hub: Arc<WatchHub>,
    queue: Arc<Queue>,
    persistence: Arc<PersistenceHandle>,
    /// Per session: the seq of the next logged event to hand out.
    cursors: HashMap<SessionId, u64>,
    /// Log ranges to hand out before the queue's next entry.
    work: VecDeque<Range>,
    /// For a turn's stream: the session and turn whose `turn/end` is the last event.
    end: Option<(SessionId, u32)>,
    done: bool,
    /// The types handed out; `None`: every type.
    filter: Option<super::EventFilter>,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher")
            .field("queue", &self.queue)
            .field("cursors", &self.cursors)
            .field("end", &self.end)
            .finish_non_exhaustive()
    }
}

/// Events of one session from the log, from the session's cursor (or `start` when the watcher
/// has none yet) up to `until` (or the log's end).
struct Range {
    id: SessionId,
    source: Source,
    start: u64,
    until: Option<u64>,
    /// Announce the first event with `watch/lagged`: these are events the watcher missed.
    lagged: bool,
}

enum Source {
    /// A live agent's log.
    Live(Arc<Agent>),
    /// A missed agent: live (its log) if it still is, else stored.
    Missed(Weak<Agent>),
    /// A stored session, loaded when first needed.
    Stored(Option<Arc<Vec<Event>>>),
}

impl Watcher {
    /// A watcher of `scope`, registered with `hub` now: it is told of everything published from
    /// now on (streamed text too when `deltas`), and reads stored sessions from `persistence`.
    pub(crate) fn register(
        hub: &Arc<WatchHub>,
        scope: WatchScope,
        deltas: bool,
        by: WatchedBy,
        persistence: Arc<PersistenceHandle>,
    ) -> Self {
        let queue = hub.register(scope, deltas, by);
        Self {
            hub: hub.clone(),
            queue,
            persistence,
            cursors: HashMap::new(),
            work: VecDeque::new(),
            end: None,
            done: false,
            filter: None,
        }
    }

    /// Hands out `id`'s events from `seq` on (what its queue announces from then).
    pub(crate) fn start_at(&mut self, id: SessionId, seq: u64) {
        self.cursors.insert(id, seq);
    }

    /// Replays the live `agent`'s log from `from` before anything else, then follows it.
    pub(crate) fn replay(&mut self, agent: Arc<Agent>, from: u64) {
        self.work.push_back(Range {
            id: agent.id().clone(),
            source: Source::Live(agent),
            start: from,
            until: None,
            lagged: false,
        });
    }

    /// Replays the stored session `id` from `from`, then follows it if it goes live.
    pub(crate) fn replay_stored(&mut self, id: SessionId, from: u64) {
        self.work.push_back(Range {
            id,
            source: Source::Stored(None),
            start: from,
            until: None,
            lagged: false,
        });
    }

    /// Makes `id`'s `turn/end` of `turn` the last event, handed out only once that turn has let
    /// the agent go (so the next prompt is never refused as "busy").
    pub(crate) fn until_turn_end(mut self, id: SessionId, turn: u32) -> Self {
        self.end = Some((id, turn));
        self
    }

    /// Hands out only events of the types `filter` admits (skipped ones still move the cursors).
    pub fn filtered(mut self, filter: Option<super::EventFilter>) -> Self {
        self.filter = filter;
        self
    }

    /// The next event; `None` once the stream is over (the turn ended, or the daemon shuts down).
    pub async fn recv(&mut self) -> Option<StreamEvent> {
        loop {
            let event = self.recv_any().await?;
            if self.filter.as_ref().is_none_or(|f| f.admits(&event.kind)) {
                return Some(event);
            }
        }
    }

    /// The next event of any type.
    async fn recv_any(&mut self) -> Option<StreamEvent> {
        loop {
            if self.done {
                return None;
            }
            if let Some(event) = self.next_from_logs().await {
                return Some(event);
            }
            match self.queue.next() {
                Next::Item(Item::Logged { agent, from, until }) => self.work.push_back(Range {
                    id: agent.id().clone(),
                    source: Source::Live(agent),
                    start: from,
                    until: Some(until),
                    lagged: false,
                }),
                Next::Item(Item::Preview {
                    agent,
                    what,
                    offset,
                    text,
                    time,
                }) => {
                    return Some(StreamEvent::preview(
                        agent.id().clone(),
                        time,
                        &what,
                        offset,
                        &text,
                    ));
                }
                Next::Lagged(missed) => self.catch_up(missed),
                Next::Wait => self.queue.wake.notified().await,
                Next::Closed => return None,
            }
        }
    }

    /// Queues a catch-up from the logs for every session the watcher missed events of. The
    /// session whose `turn/end` ends the stream goes last, so nothing of another session is cut
    /// off by it.
    fn catch_up(&mut self, mut missed: Vec<Missed>) {
        if let Some((end, _)) = &self.end {
            missed.sort_by_key(|m| m.id == *end);
        }
        for m in missed {
            self.work.push_back(Range {
                id: m.id,
                source: Source::Missed(m.agent),
                start: m.from,
                until: None,
                lagged: true,
            });
        }
    }

    /// The next event of the pending log ranges, if any.
    async fn next_from_logs(&mut self) -> Option<StreamEvent> {
        while let Some(range) = self.work.front_mut() {
            let next = *self.cursors.entry(range.id.clone()).or_insert(range.start);
            if range.until.is_some_and(|until| next >= until) {
                self.work.pop_front();
                continue;
            }
            if let Source::Missed(agent) = &range.source {
                range.source = match agent.upgrade() {
                    Some(agent) => Source::Live(agent),
                    None => Source::Stored(None),
                };
            }
            if let Source::Stored(None) = range.source {
                match load(&self.persistence, &range.id).await {
                    Ok(events) => range.source = Source::Stored(Some(events)),
                    Err(error) => {
                        tracing::warn!(session = %range.id, %error, "a watcher cannot read the stored session; skipping it");
                        let announce = range
                            .lagged
                            .then(|| StreamEvent::lagged(range.id.clone(), next));
                        self.work.pop_front();
                        match announce {
                            Some(marker) => return Some(marker),
                            None => continue,
                        }
                    }
                }
            }
            let end_turn = self
                .end
                .as_ref()
                .filter(|(id, _)| *id == range.id)
                .map(|(_, turn)| *turn);
            let found = match &range.source {
                Source::Live(agent) => agent.read_log(|log| {
                    let event = usize::try_from(next)
                        .ok()
                        .and_then(|i| log.events().get(i))?;
                    Some((
                        StreamEvent::logged(range.id.clone(), event),
                        ends(event, end_turn),
                    ))
                }),
                Source::Stored(Some(events)) => usize::try_from(next)
                    .ok()
                    .and_then(|i| events.get(i))
                    .map(|event| {
                        (
                            StreamEvent::logged(range.id.clone(), event),
                            ends(event, end_turn),
                        )
                    }),
                Source::Stored(None) | Source::Missed(_) => None,
            };
            let Some((event, last)) = found else {
                self.work.pop_front();
                continue;
            };
            if range.lagged {
                range.lagged = false;
                return Some(StreamEvent::lagged(range.id.clone(), next));
            }
            self.cursors.insert(range.id.clone(), next + 1);
            if last {
                if let (Source::Live(agent), Some(turn)) = (&range.source, end_turn) {
                    let agent = agent.clone();
                    agent.turn_released(turn).await;
                }
                self.done = true;
            }
            return Some(event);
        }
        None
    }
}

/// Whether `event` is the `turn/end` of `turn`.
fn ends(event: &Event, turn: Option<u32>) -> bool {
    matches!((&event.data, turn), (EventData::TurnEnd { turn: t, .. }, Some(turn)) if *t == turn)
}

/// A stored session's events.
async fn load(
    persistence: &Arc<PersistenceHandle>,
    id: &SessionId,
) -> Result<Arc<Vec<Event>>, crate::persistence::PersistenceError> {
    let backend = persistence.backend();
    backend
        .inspect(id)
        .await
        .map(|stored| Arc::new(stored.events))
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.hub.unregister(&self.queue);
    }
}
