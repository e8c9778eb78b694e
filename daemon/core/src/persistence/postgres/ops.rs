//! The backend's operations, as they run on its runtime: each one connection from the pool, and
//! for whatever writes, one transaction that first takes or keeps the session's lease.

use super::{Inner, lease};
use crate::persistence::{PersistenceError, Repair, StoredSession};
use crate::session::repair::close_open_turn;
use crate::session::{Event, EventData, SessionHeader, SessionId};

/// The rows of an append batch, serialised on the caller's thread.
pub(super) struct Rows {
    seqs: Vec<i64>,
    types: Vec<String>,
    times: Vec<i64>,
    datas: Vec<String>,
}

impl Rows {
    pub(super) fn of(events: &[Event]) -> Self {
        Self {
            seqs: events
                .iter()
                .map(|e| i64::try_from(e.seq).unwrap_or(i64::MAX))
                .collect(),
            types: events
                .iter()
                .map(|e| e.data.type_name().to_owned())
                .collect(),
            times: events.iter().map(|e| e.time).collect(),
            datas: events.iter().map(Event::data_json).collect(),
        }
    }
}

impl Inner {
    /// Inserts `rows` after the stored tail and records the new length, inside `tx`.
    async fn insert(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: &SessionId,
        rows: &Rows,
        len: i64,
    ) -> Result<(), PersistenceError> {
        let insert = tx
            .prepare_cached(
                "INSERT INTO events (session_id, seq, type, time, data) \
                 SELECT $1, * FROM UNNEST($2::int8[], $3::text[], $4::int8[], $5::text[])",
            )
            .await
            .map_err(|e| self.pg(e))?;
        tx.execute(
            &insert,
            &[
                &id.as_str(),
                &rows.seqs,
                &rows.types,
                &rows.times,
                &rows.datas,
            ],
        )
        .await
        .map_err(|e| self.pg(e))?;
        let update = tx
            .prepare_cached("UPDATE sessions SET events = $2 WHERE id = $1")
            .await
            .map_err(|e| self.pg(e))?;
        tx.execute(&update, &[&id.as_str(), &len])
            .await
            .map_err(|e| self.pg(e))?;
        Ok(())
    }

    pub(super) async fn append(
        &self,
        header: SessionHeader,
        header_json: String,
        first: u64,
        rows: Rows,
    ) -> Result<(), PersistenceError> {
        let id = &header.id;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.pg(e))?;
        lease::take(self, &tx, id).await?;
        let select = tx
            .prepare_cached("SELECT header, events FROM sessions WHERE id = $1")
            .await
            .map_err(|e| self.pg(e))?;
        let stored = tx
            .query_opt(&select, &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        let expected = match &stored {
            None => 0,
            Some(row) => {
                if crate::persistence::parse_header(row.get(0)).ok().as_ref() != Some(&header) {
                    return Err(PersistenceError::Config(format!(
                        "session {id} is stored in {} with a different header",
                        self.target.shown()
                    )));
                }
                u64::try_from(row.get::<_, i64>(1)).unwrap_or(0)
            }
        };
        if first != expected {
            return Err(PersistenceError::SeqMismatch {
                id: id.clone(),
                expected,
                got: first,
            });
        }
        if stored.is_none() {
            let create = tx
                .prepare_cached(
                    "INSERT INTO sessions (id, header, created_at, cwd, host, daemon) \
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .await
                .map_err(|e| self.pg(e))?;
            let cwd = header.cwd.to_string_lossy();
            tx.execute(
                &create,
                &[
                    &id.as_str(),
                    &header_json,
                    &header.created_at,
                    &cwd.as_ref(),
                    &self.holder.host,
                    &self.holder.daemon,
                ],
            )
            .await
            .map_err(|e| self.pg(e))?;
        }
        let len = i64::try_from(first).unwrap_or(i64::MAX) + rows.seqs.len() as i64;
        self.insert(&tx, id, &rows, len).await?;
        tx.commit().await.map_err(|e| self.pg(e))?;
        self.lock_held().insert(id.clone());
        Ok(())
    }

    pub(super) async fn load(&self, id: SessionId) -> Result<StoredSession, PersistenceError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.pg(e))?;
        lease::take(self, &tx, &id).await?;
        let (header, mut events) = self.read(&tx, &id).await?;
        let mut repairs = Vec::new();
        let closers = close_open_turn(&events);
        if let Some(Event {
            data: EventData::TurnEnd { turn, .. },
            ..
        }) = closers.last()
        {
            let len = (events.len() + closers.len()) as i64;
            self.insert(&tx, &id, &Rows::of(&closers), len).await?;
            repairs.push(Repair::ClosedOpenTurn {
                turn: *turn,
                events: closers.len(),
            });
            events.extend(closers);
        }
        tx.commit().await.map_err(|e| self.pg(e))?;
        self.lock_held().insert(id);
        Ok(StoredSession {
            header,
            events,
            repairs,
        })
    }

    pub(super) async fn inspect(&self, id: SessionId) -> Result<StoredSession, PersistenceError> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| self.pg(e))?;
        let (header, events) = self.read(&tx, &id).await?;
        tx.commit().await.map_err(|e| self.pg(e))?;
        Ok(StoredSession {
            header,
            events,
            repairs: Vec::new(),
        })
    }

    pub(super) async fn stored_len(&self, id: SessionId) -> Result<Option<u64>, PersistenceError> {
        let client = self.client().await?;
        let stmt = client
            .prepare_cached("SELECT events FROM sessions WHERE id = $1")
            .await
            .map_err(|e| self.pg(e))?;
        let row = client
            .query_opt(&stmt, &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        Ok(row.map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0)))
    }

    /// Deletes the session's rows and its lease in one transaction, refused (naming the holder)
    /// while another daemon has it live.
    pub(super) async fn delete(&self, id: SessionId) -> Result<(), PersistenceError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.pg(e))?;
        lease::take(self, &tx, &id).await?;
        tx.execute("DELETE FROM events WHERE session_id = $1", &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        let removed = tx
            .execute("DELETE FROM sessions WHERE id = $1", &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        if removed == 0 {
            // Nothing was stored: the transaction (and the lease it took) is rolled back.
            return Err(PersistenceError::NotFound(id));
        }
        tx.execute("DELETE FROM leases WHERE session_id = $1", &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        tx.commit().await.map_err(|e| self.pg(e))?;
        self.lock_held().remove(&id);
        Ok(())
    }

    pub(super) async fn header(
        &self,
        id: SessionId,
    ) -> Result<Option<SessionHeader>, PersistenceError> {
        let client = self.client().await?;
        self.header_in(&client, &id).await
    }
}
