//! The backend's operations, as they run on its runtime: each one connection from the pool, and
//! for whatever writes, one transaction that first takes or keeps the session's lease.

use super::{Inner, lease};
use crate::locks::lock;
use crate::persistence::{PersistenceError, StoredSession, open_turn_closers};
use dsh_session::{Event, SessionHeader, SessionId};

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

/// One append, one statement (one round trip, one implicit transaction). Every part reads the
/// snapshot taken when the statement starts, so the checks come first and everything else hangs
/// on them: the lease is upserted only when the stored tail is `$6` and the stored header is `$7`
/// (or nothing is stored), and the session's row and the events are written only when the lease
/// was granted. A daemon refused the lease waits for the holder's row lock, finds it still held
/// and writes nothing; the primary key of `events` refuses any seq written twice whatever
/// happens. Returns whether it wrote (the lease was granted), the stored header and length as the
/// statement found them, and whether another daemon held the lease then: what says why when it
/// did not write.
const APPEND: &str = concat!(
    "WITH stored AS (SELECT header, events FROM sessions WHERE id = $1), \
     fits AS (SELECT 1 WHERE COALESCE((SELECT events FROM stored), 0) = $6 \
                         AND COALESCE((SELECT header FROM stored), $7) = $7), \
     lease AS (",
    lease::take_lease!("FROM fits"),
    "), \
     created AS ( \
         INSERT INTO sessions (id, header, created_at, cwd, host, daemon, events) \
         SELECT $1, $7, $8, $9, $3, $2, $10 FROM lease WHERE NOT EXISTS (SELECT 1 FROM stored)), \
     counted AS (UPDATE sessions SET events = $10 WHERE id = $1 AND EXISTS (SELECT 1 FROM lease)), \
     appended AS ( \
         INSERT INTO events (session_id, seq, type, time, data) \
         SELECT $1, u.* FROM lease, UNNEST($11::int8[], $12::text[], $13::int8[], $14::text[]) AS u) \
     SELECT EXISTS (SELECT 1 FROM lease), (SELECT header FROM stored), (SELECT events FROM stored), \
         EXISTS (SELECT 1 FROM leases WHERE session_id = $1 AND daemon <> $2 AND expires_at >= now())"
);

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

    /// Appends `rows` after the stored tail in one statement, so one round trip: the tail and
    /// header checks, the lease, the session's row and the events ([`APPEND`]). When it wrote
    /// nothing, what it read back says why. A stored header whose text differs from this
    /// daemon's serialisation but means the same (an older dsh wrote it) is accepted by asking
    /// again with that text.
    pub(super) async fn append(
        &self,
        header: &SessionHeader,
        header_json: String,
        first: u64,
        rows: Rows,
    ) -> Result<(), PersistenceError> {
        let id = &header.id;
        let client = self.client().await?;
        let append = client
            .prepare_cached(APPEND)
            .await
            .map_err(|e| self.pg(e))?;
        let first_seq = i64::try_from(first).unwrap_or(i64::MAX);
        let len = first_seq.saturating_add(rows.seqs.len() as i64);
        let cwd = header.cwd.to_string_lossy();
        let pid = i64::from(self.holder.pid);
        let mut expected_header = header_json;
        for _ in 0..2 {
            let row = client
                .query_one(
                    &append,
                    &[
                        &id.as_str(),
                        &self.holder.daemon,
                        &self.holder.host,
                        &pid,
                        &lease::lease_ms(self.lease),
                        &first_seq,
                        &expected_header,
                        &header.created_at,
                        &cwd.as_ref(),
                        &len,
                        &rows.seqs,
                        &rows.types,
                        &rows.times,
                        &rows.datas,
                    ],
                )
                .await
                .map_err(|e| self.pg(e))?;
            let (leased, stored_header, stored_len, held_by_another): (
                bool,
                Option<String>,
                Option<i64>,
                bool,
            ) = (row.get(0), row.get(1), row.get(2), row.get(3));
            if leased {
                lock(&self.held).insert(id.clone());
                return Ok(());
            }
            // A live holder first: its appends are what moved the tail.
            if held_by_another {
                return Err(lease::refusal(self, &client, id).await);
            }
            if let Some(text) = stored_header.filter(|text| *text != expected_header) {
                if crate::persistence::parse_header(&text).ok().as_ref() != Some(header) {
                    return Err(PersistenceError::Config(format!(
                        "session {id} is stored in {} with a different header",
                        self.target.shown()
                    )));
                }
                expected_header = text;
                continue;
            }
            let expected = stored_len.and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
            if first != expected {
                return Err(PersistenceError::SeqMismatch {
                    id: id.clone(),
                    expected,
                    got: first,
                });
            }
            return Err(lease::refusal(self, &client, id).await);
        }
        Err(PersistenceError::Config(format!(
            "session {id}: its stored header changed while it was appended to"
        )))
    }

    pub(super) async fn load(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.pg(e))?;
        lease::take(self, &tx, id).await?;
        let (header, mut events) = self.read(&tx, id).await?;
        let mut repairs = Vec::new();
        if let Some((closers, repair)) = open_turn_closers(&events) {
            let len = (events.len() + closers.len()) as i64;
            self.insert(&tx, id, &Rows::of(&closers), len).await?;
            repairs.push(repair);
            events.extend(closers);
        }
        tx.commit().await.map_err(|e| self.pg(e))?;
        lock(&self.held).insert(id.clone());
        Ok(StoredSession {
            header,
            events,
            repairs,
        })
    }

    pub(super) async fn inspect(&self, id: &SessionId) -> Result<StoredSession, PersistenceError> {
        let mut client = self.client().await?;
        let tx = client
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(|e| self.pg(e))?;
        let (header, events) = self.read(&tx, id).await?;
        tx.commit().await.map_err(|e| self.pg(e))?;
        Ok(StoredSession {
            header,
            events,
            repairs: Vec::new(),
        })
    }

    pub(super) async fn stored_len(&self, id: &SessionId) -> Result<Option<u64>, PersistenceError> {
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
    pub(super) async fn delete(&self, id: &SessionId) -> Result<(), PersistenceError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(|e| self.pg(e))?;
        lease::take(self, &tx, id).await?;
        tx.execute("DELETE FROM events WHERE session_id = $1", &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        let removed = tx
            .execute("DELETE FROM sessions WHERE id = $1", &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        if removed == 0 {
            // Nothing was stored: the transaction (and the lease it took) is rolled back.
            return Err(PersistenceError::NotFound(id.clone()));
        }
        tx.execute("DELETE FROM leases WHERE session_id = $1", &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        tx.commit().await.map_err(|e| self.pg(e))?;
        lock(&self.held).remove(id);
        Ok(())
    }

    pub(super) async fn header(
        &self,
        id: &SessionId,
    ) -> Result<Option<SessionHeader>, PersistenceError> {
        let client = self.client().await?;
        self.header_in(&client, id).await
    }
}
