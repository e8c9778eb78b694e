//! The metadata of a page of sessions in one statement: a listing asks it once per page, where
//! asking session by session would cost a round trip (and a transaction) for each.

use std::collections::BTreeMap;

use super::Inner;
use crate::persistence::{Metas, PersistenceError, event_of_row, parse_header};
use dsh_session::{Event, EventData, MetaBuilder, SessionId, SessionMeta};

/// How many of a session's first user messages are read: its title when none was set is the
/// first prompt a user typed, and one of the first few nearly always is. A session whose first
/// [`PROMPTS`] give no title is read whole (exact, and rare).
const PROMPTS: i64 = 4;

/// Each session's header, its `session/title` and `session/archived` events (read through the
/// primary key's range of the session), and its first [`PROMPTS`] `user/message` events, in seq
/// order; a session with none of them has one row with no event.
const METAS: &str = "\
    SELECT s.id, s.header, e.seq, e.type, e.time, e.data \
    FROM sessions s LEFT JOIN LATERAL ( \
        SELECT seq, type, time, data FROM events \
        WHERE session_id = s.id AND type IN ('session/title', 'session/archived') \
        UNION ALL \
        (SELECT seq, type, time, data FROM events \
         WHERE session_id = s.id AND type = 'user/message' ORDER BY seq LIMIT $2) \
    ) e ON true \
    WHERE s.id = ANY($1::text[]) \
    ORDER BY s.id, e.seq";

/// One session's rows.
#[derive(Default)]
struct Rows {
    header: String,
    events: Vec<Result<Event, String>>,
}

impl Inner {
    /// The metadata of each stored session of `ids` (see [`Persistence::metas`]).
    ///
    /// [`Persistence::metas`]: crate::persistence::Persistence::metas
    pub(super) async fn metas(&self, ids: &[SessionId]) -> Result<Metas, PersistenceError> {
        let client = self.client().await?;
        let stmt = client.prepare_cached(METAS).await.map_err(|e| self.pg(e))?;
        let names: Vec<&str> = ids.iter().map(SessionId::as_str).collect();
        let rows = client
            .query(&stmt, &[&names, &PROMPTS])
            .await
            .map_err(|e| self.pg(e))?;
        let mut sessions: BTreeMap<String, Rows> = BTreeMap::new();
        for row in rows {
            let session = sessions.entry(row.get(0)).or_default();
            session.header = row.get(1);
            let Some(seq) = row.get::<_, Option<i64>>(2) else {
                continue;
            };
            let seq = u64::try_from(seq).unwrap_or(0);
            session
                .events
                .push(event_of_row(seq, row.get(4), row.get(3), row.get(5)));
        }
        let mut out = Metas::new();
        for (name, rows) in sessions {
            let Ok(id) = SessionId::parse(name) else {
                continue;
            };
            let meta = match self.meta_of(&id, &rows) {
                Ok(Some(meta)) => Ok(meta),
                // The first prompts have no title: read the whole log.
                Ok(None) => self
                    .inspect(&id)
                    .await
                    .map(|stored| SessionMeta::of(&stored.header, &stored.events)),
                Err(error) => Err(error),
            };
            out.insert(id, meta);
        }
        Ok(out)
    }

    /// The metadata the rows of `id` give, or `None` when they cannot tell the title (every
    /// prompt read had none, and more may follow).
    fn meta_of(
        &self,
        id: &SessionId,
        rows: &Rows,
    ) -> Result<Option<SessionMeta>, PersistenceError> {
        let header = parse_header(&rows.header)
            .map_err(|m| self.corrupt(0, format!("session {id}: {m}")))?;
        let mut builder = MetaBuilder::new(&header);
        let mut prompts = 0;
        for event in &rows.events {
            let event = event
                .as_ref()
                .map_err(|m| self.corrupt(0, format!("session {id}: {m}")))?;
            if matches!(event.data, EventData::UserMessage { .. }) {
                prompts += 1;
            }
            builder.observe(event);
        }
        let meta = builder.finish();
        if meta.title.is_none() && prompts >= PROMPTS {
            return Ok(None);
        }
        Ok(Some(meta))
    }
}
