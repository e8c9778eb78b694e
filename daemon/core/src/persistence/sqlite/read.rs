//! Reading and writing rows: one session's events, appends, headers and pages of headers.

use rusqlite::{Connection, OptionalExtension, params};

use super::SqliteBackend;
use super::schema::CWD;
use crate::persistence::{Order, Page, PageQuery, PersistenceError, parse_header, readable_header};
use dsh_session::{Event, SessionHeader, SessionId};

const INSERT_EVENT: &str =
    "INSERT INTO events(session_id, seq, type, time, data) VALUES (?1, ?2, ?3, ?4, ?5)";

/// The header of one session.
pub(super) const HEADER: &str = "SELECT header FROM sessions WHERE id = ?1";

impl SqliteBackend {
    /// Reads one session inside the caller's transaction.
    pub(super) fn read(
        &self,
        conn: &Connection,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<Event>), PersistenceError> {
        let header: Option<String> = conn
            .prepare_cached(HEADER)
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(self.sqlite())?;
        let header = header.ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let header = parse_header(&header)
            .and_then(|h| {
                if h.id == *id {
                    Ok(h)
                } else {
                    Err(format!("row of session {id} holds the header of {}", h.id))
                }
            })
            .map_err(|m| self.corrupt(0, format!("session {id}: {m}")))?;

        let mut stmt = conn
            .prepare_cached(
                "SELECT seq, type, time, data FROM events WHERE session_id = ?1 ORDER BY seq",
            )
            .map_err(self.sqlite())?;
        let mut rows = stmt.query([id.as_str()]).map_err(self.sqlite())?;
        let mut events = Vec::new();
        while let Some(row) = rows.next().map_err(self.sqlite())? {
            let expected = events.len() as u64;
            let line = usize::try_from(expected).map_or(usize::MAX, |e| e + 1);
            let bad = |m: String| self.corrupt(line, format!("session {id}: {m}"));
            let seq: i64 = row.get(0).map_err(|e| bad(format!("bad seq: {e}")))?;
            if u64::try_from(seq).ok() != Some(expected) {
                let line = usize::try_from(seq).map_or(0, |s| s.saturating_add(1));
                return Err(self.corrupt(
                    line,
                    format!("session {id}: expected seq {expected}, found {seq}"),
                ));
            }
            // Borrowed from the row, and parsed once, straight into the event's variant.
            let type_name = row
                .get_ref(1)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(|e| bad(format!("bad type: {e}")))?;
            let time: i64 = row.get(2).map_err(|e| bad(format!("bad time: {e}")))?;
            let data = row
                .get_ref(3)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(|e| bad(format!("bad data: {e}")))?;
            let event =
                crate::persistence::event_of_row(expected, time, type_name, data).map_err(bad)?;
            events.push(event);
        }
        Ok((header, events))
    }

    /// The stored header of `id`, from its row alone (the primary key's index).
    pub(super) fn header_of(
        &self,
        conn: &Connection,
        id: &SessionId,
    ) -> Result<Option<SessionHeader>, PersistenceError> {
        let text: Option<String> = conn
            .prepare_cached("SELECT header FROM sessions WHERE id = ?1")
            .and_then(|mut s| s.query_row([id.as_str()], |r| r.get(0)).optional())
            .map_err(self.sqlite())?;
        let Some(text) = text else {
            return Ok(None);
        };
        match parse_header(&text) {
            Ok(header) if header.id == *id => Ok(Some(header)),
            Ok(header) => Err(self.corrupt(
                0,
                format!("session {id}: row holds the header of {}", header.id),
            )),
            Err(message) => Err(self.corrupt(0, format!("session {id}: {message}"))),
        }
    }

    /// One page of headers, read through `sessions_by_created` (or `sessions_by_cwd` with a cwd
    /// filter): a range scan from the cursor that stops after `limit + 1` rows, so the cost does
    /// not grow with the number of sessions. A version-1 database read without migrating it
    /// (read-only) has no such index and is scanned whole.
    pub(super) fn page(
        &self,
        conn: &Connection,
        query: &PageQuery,
    ) -> Result<Page, PersistenceError> {
        let Some((sql, params)) = page_statement(query) else {
            return Ok(Page::default());
        };
        let rows: Vec<(String, String)> = conn
            .prepare_cached(&sql)
            .and_then(|mut s| {
                s.query_map(rusqlite::params_from_iter(params.iter()), |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?
                .collect::<Result<_, _>>()
            })
            .map_err(self.sqlite())?;
        let more = rows.len() > query.limit;
        let headers = rows
            .into_iter()
            .take(query.limit)
            .filter_map(|(id, text)| readable_header(&id, &text))
            .collect();
        Ok(Page {
            headers,
            more,
            creators: Default::default(),
        })
    }

    pub(super) fn insert_events(
        &self,
        conn: &Connection,
        id: &SessionId,
        events: &[Event],
    ) -> Result<(), PersistenceError> {
        let mut insert = conn.prepare_cached(INSERT_EVENT).map_err(self.sqlite())?;
        for event in events {
            insert
                .execute(params![
                    id.as_str(),
                    i64::try_from(event.seq).unwrap_or(i64::MAX),
                    event.data.type_name(),
                    event.time,
                    event.data_json(),
                ])
                .map_err(self.sqlite())?;
        }
        Ok(())
    }
}

/// The statement of one page and its parameters: `limit + 1` rows (the extra one says whether
/// more follow) from the cursor on, optionally of one cwd. `None` when nothing can match (a cwd
/// that is not UTF-8 is in no header: headers are JSON).
fn page_statement(query: &PageQuery) -> Option<(String, Vec<Box<dyn rusqlite::ToSql>>)> {
    let (compare, direction) = match query.order {
        Order::NewestFirst => ("<", "DESC"),
        Order::OldestFirst => (">", "ASC"),
    };
    let mut conditions = Vec::new();
    let mut params: Vec<Box<dyn rusqlite::ToSql>> = Vec::new();
    if let Some(cwd) = &query.cwd {
        conditions.push(format!("{CWD} = ?{}", params.len() + 1));
        params.push(Box::new(cwd.to_str()?.to_owned()));
    }
    if let Some(after) = &query.after {
        let n = params.len();
        conditions.push(format!(
            "(created_at, id) {compare} (?{}, ?{})",
            n + 1,
            n + 2
        ));
        params.push(Box::new(after.created_at));
        params.push(Box::new(after.id.as_str().to_owned()));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX - 1);
    let sql = format!(
        "SELECT id, header FROM sessions {filter} \
         ORDER BY created_at {direction}, id {direction} LIMIT {}",
        limit + 1
    );
    Some((sql, params))
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use super::*;
    use crate::persistence::BlockingPersistence;
    use dsh_session::EventData;
    use rusqlite::Connection;

    /// Every page query is a range scan of an index in index order: no full scan of `sessions`
    /// and no sort, whatever the order, cursor or cwd filter.
    #[test]
    fn pages_are_read_through_an_index_without_sorting() {
        use crate::persistence::ListKey;

        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("s.sqlite3");
        let backend = SqliteBackend::open(db.clone()).unwrap();
        let header = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 5);
        let event = Event {
            seq: 0,
            time: 5,
            data: EventData::TurnStart { turn: 1 },
        };
        backend.append(&header, &[event]).unwrap();
        let conn = Connection::open(&db).unwrap();
        for order in [Order::NewestFirst, Order::OldestFirst] {
            for after in [None, Some(ListKey::of(&header))] {
                for cwd in [None, Some(PathBuf::from("/w"))] {
                    let query = PageQuery {
                        after: after.clone(),
                        limit: 50,
                        order,
                        cwd: cwd.clone(),
                        host: None,
                    };
                    let (sql, params) = page_statement(&query).unwrap();
                    let plan: Vec<String> = conn
                        .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                        .unwrap()
                        .query_map(rusqlite::params_from_iter(params.iter()), |r| r.get(3))
                        .unwrap()
                        .collect::<Result<_, _>>()
                        .unwrap();
                    let plan = plan.join("; ");
                    let index = if cwd.is_some() {
                        "sessions_by_cwd"
                    } else {
                        "sessions_by_created"
                    };
                    assert!(plan.contains(index), "{query:?}: {plan}");
                    assert!(!plan.contains("TEMP B-TREE"), "{query:?} sorts: {plan}");
                    assert_eq!(
                        backend.page(&conn, &query).unwrap().headers.len(),
                        usize::from(after.is_none())
                    );
                }
            }
        }
    }

    /// The fallback a read-only home takes, run here on a writable directory (the suite runs as
    /// root, for whom nothing is read-only without a mount; the e2e test mounts one): the
    /// database is read as immutable through its URI, even from a path full of URI syntax.
    #[test]
    fn a_database_is_read_through_an_immutable_read_only_connection() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("odd ?#% dir");
        fs::create_dir(&dir).unwrap();
        let db = dir.join("s.sqlite3");
        let header = SessionHeader::new(
            SessionId::parse("ro").unwrap(),
            PathBuf::from("/work"),
            1_700_000_000_000,
        );
        let event = Event {
            seq: 0,
            time: 1_700_000_000_000,
            data: EventData::TurnStart { turn: 1 },
        };
        let writer = SqliteBackend::open(db.clone()).unwrap();
        writer.append(&header, &[event]).unwrap();
        drop(writer);

        let reader = SqliteBackend::open(db.clone()).unwrap();
        let conn = reader
            .read_only(true)
            .unwrap()
            .expect("a session is stored");
        let (read, events) = reader.read(&conn, &header.id).unwrap();
        assert_eq!(read, header);
        assert_eq!(events.len(), 1);
        // An empty database is "no sessions" read-only too, and is not initialised.
        let empty = dir.join("empty.sqlite3");
        fs::write(&empty, b"").unwrap();
        let reader = SqliteBackend::open(empty.clone()).unwrap();
        assert!(reader.read_only(true).unwrap().is_none());
        assert_eq!(fs::metadata(&empty).unwrap().len(), 0);
    }
}
