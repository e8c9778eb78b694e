//! The schema: what a dsh session database holds, telling one from anything else, and bringing
//! an older schema up to date.

use rusqlite::{Connection, ErrorCode};

use super::{APPLICATION_ID, SCHEMA_VERSION, SqliteBackend};
use crate::persistence::PersistenceError;

/// The tables of every schema version.
const TABLES_DDL: &str = "
CREATE TABLE sessions(
    id TEXT PRIMARY KEY,
    header TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE TABLE events(
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    time INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY(session_id, seq)
);
";

/// What version 2 adds: the indexes a page of sessions is read from, newest or oldest first, all
/// of them or one cwd's, so a page costs the same with a thousand sessions or a million. The cwd
/// is indexed as an expression of the header (JSON functions are deterministic), so no column
/// changes and a version-1 database is brought up to date by creating two indexes.
const INDEXES_DDL: &str = "
CREATE INDEX sessions_by_created ON sessions(created_at, id);
CREATE INDEX sessions_by_cwd ON sessions(json_extract(header, '$.cwd'), created_at, id);
";

/// The SQL expression for a session's cwd, exactly as indexed (`sessions_by_cwd`).
pub(super) const CWD: &str = "json_extract(header, '$.cwd')";

/// The schema version 2 grew from: read as it is, and migrated by the first connection that may
/// write the file.
const PREVIOUS_VERSION: i32 = 1;

/// The columns each table must have, in order; anything else is not our schema.
const TABLES: [(&str, &[&str]); 2] = [
    ("events", &["session_id", "seq", "type", "time", "data"]),
    ("sessions", &["id", "header", "created_at"]),
];

/// The indexes of the current version, by name.
const INDEXES: [&str; 2] = ["sessions_by_created", "sessions_by_cwd"];

/// What a database file turned out to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Identity {
    /// Empty: no schema, no ids. Safe to initialise.
    Fresh,
    /// A dsh session database of this schema version, or of the previous one (which is read as
    /// it is and migrated by a connection that may write).
    Ours {
        /// `PRAGMA user_version`.
        version: i32,
    },
    /// Something else, and why we think so.
    Foreign(String),
}

impl SqliteBackend {
    pub(super) fn identify(&self, conn: &Connection) -> Result<Identity, PersistenceError> {
        let not_ours = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => Ok(Identity::Foreign("not an SQLite database".into())),
            _ => Err(self.sqlite()(e)),
        };
        let application_id: i32 =
            match conn.pragma_query_value(None, "application_id", |r| r.get(0)) {
                Ok(id) => id,
                Err(e) => return not_ours(e),
            };
        let user_version: i32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(self.sqlite())?;
        let mut objects: Vec<(String, String)> = conn
            .prepare("SELECT type, name FROM sqlite_schema WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name")
            .and_then(|mut s| {
                s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(self.sqlite())?;
        if application_id == 0 && user_version == 0 && objects.is_empty() {
            return Ok(Identity::Fresh);
        }
        if application_id != APPLICATION_ID {
            return Ok(Identity::Foreign(format!(
                "application_id is {application_id:#x}, expected {APPLICATION_ID:#x}"
            )));
        }
        if user_version != SCHEMA_VERSION && user_version != PREVIOUS_VERSION {
            return Ok(Identity::Foreign(format!(
                "schema version is {user_version}, this dshd reads versions {PREVIOUS_VERSION} \
                 and {SCHEMA_VERSION}"
            )));
        }
        let mut expected: Vec<(String, String)> = TABLES
            .iter()
            .map(|(name, _)| ("table".to_owned(), (*name).to_owned()))
            .collect();
        if user_version == SCHEMA_VERSION {
            expected.extend(
                INDEXES
                    .iter()
                    .map(|name| ("index".to_owned(), (*name).to_owned())),
            );
        }
        expected.sort();
        objects.sort();
        if objects != expected {
            return Ok(Identity::Foreign(format!(
                "unexpected schema objects {objects:?}"
            )));
        }
        for (table, columns) in TABLES {
            let found: Vec<String> = conn
                .prepare("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
                .and_then(|mut s| s.query_map([table], |r| r.get(0))?.collect())
                .map_err(self.sqlite())?;
            if found != columns {
                return Ok(Identity::Foreign(format!(
                    "table {table} has columns {found:?}, expected {columns:?}"
                )));
            }
        }
        Ok(Identity::Ours {
            version: user_version,
        })
    }

    /// Connection settings, and the schema when the database is fresh or of the previous version.
    /// Runs only after [`identify`](Self::identify) said the file is ours or empty, on a
    /// connection that may write.
    pub(super) fn configure(
        &self,
        conn: &Connection,
        identity: &Identity,
    ) -> Result<(), PersistenceError> {
        conn.pragma_update(None, "foreign_keys", "ON")
            .and_then(|()| conn.pragma_update(None, "synchronous", "FULL"))
            .map_err(self.sqlite())?;
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))
            .map_err(self.sqlite())?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(PersistenceError::Config(format!(
                "{}: SQLite refused WAL mode (got {mode})",
                self.path.display()
            )));
        }
        if *identity
            == (Identity::Ours {
                version: SCHEMA_VERSION,
            })
        {
            return Ok(());
        }
        // Another process may have initialised or migrated the file since we looked: decide
        // again under the write lock.
        conn.execute_batch("BEGIN IMMEDIATE")
            .map_err(self.sqlite())?;
        let result = (|| -> Result<(), PersistenceError> {
            let set_version = format!(
                "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {SCHEMA_VERSION};"
            );
            match self.identify(conn)? {
                Identity::Ours {
                    version: SCHEMA_VERSION,
                } => Ok(()),
                Identity::Ours { .. } => {
                    tracing::info!(
                        path = %self.path.display(),
                        "adding the session indexes of schema version {SCHEMA_VERSION}"
                    );
                    conn.execute_batch(&format!("{INDEXES_DDL}{set_version}"))
                        .map_err(self.sqlite())
                }
                Identity::Foreign(reason) => Err(PersistenceError::ForeignDatabase {
                    path: self.path.clone(),
                    reason,
                }),
                Identity::Fresh => conn
                    .execute_batch(&format!("{TABLES_DDL}{INDEXES_DDL}{set_version}"))
                    .map_err(self.sqlite()),
            }
        })();
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        let ended = conn.execute_batch(end).map_err(self.sqlite());
        result.and(ended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database written by the previous version is read as it is, and the first connection that
    /// may write adds the indexes; what was stored reads back unchanged.
    #[test]
    fn a_version_1_database_is_migrated_in_place() {
        use crate::persistence::BlockingPersistence;
        use dsh_session::{Event, EventData, SessionHeader, SessionId};

        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("old.sqlite3");
        {
            let conn = Connection::open(&db).unwrap();
            conn.execute_batch(&format!(
                "{TABLES_DDL} PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1;"
            ))
            .unwrap();
            let header = SessionHeader::new(SessionId::parse("old").unwrap(), "/w".into(), 5);
            conn.execute(
                "INSERT INTO sessions(id, header, created_at) VALUES ('old', ?1, 5)",
                [serde_json::to_string(&header).unwrap()],
            )
            .unwrap();
        }
        let backend = SqliteBackend::open(db.clone()).unwrap();
        let headers = backend.list().unwrap();
        assert_eq!(headers.len(), 1);
        let conn = Connection::open(&db).unwrap();
        let version: i32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let indexes: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE type = 'index' AND name LIKE 'sessions_by_%'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(indexes, 2);
        // The migrated database takes appends and lists the old session with the new one.
        let new = SessionHeader::new(SessionId::parse("new").unwrap(), "/w".into(), 9);
        let event = Event {
            seq: 0,
            time: 9,
            data: EventData::TurnStart { turn: 1 },
        };
        backend.append(&new, &[event]).unwrap();
        let ids: Vec<_> = backend
            .list()
            .unwrap()
            .into_iter()
            .map(|h| h.id.as_str().to_owned())
            .collect();
        assert_eq!(ids, ["old", "new"]);
    }
}
