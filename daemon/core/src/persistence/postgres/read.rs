//! Reading rows: one session's header and events, headers alone, and pages of headers.

use std::collections::HashMap;

use tokio_postgres::types::ToSql;

use super::Inner;
use crate::persistence::{
    Creator, Order, Page, PageQuery, PersistenceError, parse_header, readable_header,
};
use dsh_session::{Event, SessionHeader, SessionId};

/// The header of one session.
pub(super) const HEADER: &str = "SELECT header FROM sessions WHERE id = $1";

impl Inner {
    /// Reads one session inside the caller's transaction (one snapshot).
    pub(super) async fn read(
        &self,
        tx: &deadpool_postgres::Transaction<'_>,
        id: &SessionId,
    ) -> Result<(SessionHeader, Vec<Event>), PersistenceError> {
        let header = self
            .header_in(tx, id)
            .await?
            .ok_or_else(|| PersistenceError::NotFound(id.clone()))?;
        let stmt = tx
            .prepare_cached(
                "SELECT seq, type, time, data FROM events WHERE session_id = $1 ORDER BY seq",
            )
            .await
            .map_err(|e| self.pg(e))?;
        let rows = tx
            .query(&stmt, &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        let mut events = Vec::with_capacity(rows.len());
        for row in rows {
            let expected = events.len() as u64;
            let line = usize::try_from(expected).map_or(usize::MAX, |e| e + 1);
            let bad = |m: String| self.corrupt(line, format!("session {id}: {m}"));
            let seq: i64 = row.get(0);
            if u64::try_from(seq).ok() != Some(expected) {
                let line = usize::try_from(seq).map_or(0, |s| s.saturating_add(1));
                return Err(self.corrupt(
                    line,
                    format!("session {id}: expected seq {expected}, found {seq}"),
                ));
            }
            let type_name: &str = row.get(1);
            let time: i64 = row.get(2);
            let data: &str = row.get(3);
            let event =
                crate::persistence::event_of_row(expected, time, type_name, data).map_err(bad)?;
            events.push(event);
        }
        Ok((header, events))
    }

    /// The stored header of `id`, from its row alone. The statement is prepared once per
    /// connection: a plain query would be parsed anew each time, one more round trip for the
    /// first `Locate` of every session.
    pub(super) async fn header_in(
        &self,
        client: &impl deadpool_postgres::GenericClient,
        id: &SessionId,
    ) -> Result<Option<SessionHeader>, PersistenceError> {
        let stmt = client
            .prepare_cached(HEADER)
            .await
            .map_err(|e| self.pg(e))?;
        let row = client
            .query_opt(&stmt, &[&id.as_str()])
            .await
            .map_err(|e| self.pg(e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let text: &str = row.get(0);
        match parse_header(text) {
            Ok(header) if header.id == *id => Ok(Some(header)),
            Ok(header) => Err(self.corrupt(
                0,
                format!("session {id}: row holds the header of {}", header.id),
            )),
            Err(message) => Err(self.corrupt(0, format!("session {id}: {message}"))),
        }
    }

    /// Every header, oldest first.
    pub(super) async fn list(&self) -> Result<Vec<SessionHeader>, PersistenceError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT id, header FROM sessions ORDER BY created_at, id",
                &[],
            )
            .await
            .map_err(|e| self.pg(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| readable_header(r.get(0), r.get(1)))
            .collect())
    }

    /// One page of headers: a range scan of `sessions_by_created` (`sessions_by_cwd`,
    /// `sessions_by_host` with a filter) from the cursor, `limit + 1` rows.
    pub(super) async fn page(&self, query: &PageQuery) -> Result<Page, PersistenceError> {
        let Some(cwd) = query
            .cwd
            .as_ref()
            .map(|c| c.to_str().map(str::to_owned))
            .map_or(Some(None), |c| c.map(Some))
        else {
            // A cwd that is not UTF-8 is in no header: headers are JSON.
            return Ok(Page::default());
        };
        let (sql, values) = page_statement(query, cwd);
        let params: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| v.as_param()).collect();
        let client = self.client().await?;
        let rows = client.query(&sql, &params).await.map_err(|e| self.pg(e))?;
        let more = rows.len() > query.limit;
        let mut headers = Vec::new();
        let mut creators = HashMap::new();
        for row in rows.iter().take(query.limit) {
            let Some(header) = readable_header(row.get(0), row.get(1)) else {
                continue;
            };
            creators.insert(
                header.id.clone(),
                Creator {
                    host: row.get(2),
                    daemon: row.get(3),
                },
            );
            headers.push(header);
        }
        Ok(Page {
            headers,
            more,
            creators,
        })
    }
}

/// A parameter of a page statement.
pub(super) enum Value {
    Text(String),
    Int(i64),
}

impl Value {
    fn as_param(&self) -> &(dyn ToSql + Sync) {
        match self {
            Self::Text(t) => t,
            Self::Int(i) => i,
        }
    }
}

/// The statement of one page and its parameters.
pub(super) fn page_statement(query: &PageQuery, cwd: Option<String>) -> (String, Vec<Value>) {
    let (compare, direction) = match query.order {
        Order::NewestFirst => ("<", "DESC"),
        Order::OldestFirst => (">", "ASC"),
    };
    let mut conditions = Vec::new();
    let mut values = Vec::new();
    if let Some(cwd) = cwd {
        values.push(Value::Text(cwd));
        conditions.push(format!("cwd = ${}", values.len()));
    }
    if let Some(host) = &query.host {
        values.push(Value::Text(host.clone()));
        conditions.push(format!("host = ${}", values.len()));
    }
    if let Some(after) = &query.after {
        values.push(Value::Int(after.created_at));
        values.push(Value::Text(after.id.as_str().to_owned()));
        let n = values.len();
        conditions.push(format!("(created_at, id) {compare} (${}, ${n})", n - 1));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    let limit = i64::try_from(query.limit).unwrap_or(i64::MAX - 1);
    let sql = format!(
        "SELECT id, header, host, daemon FROM sessions {filter} \
         ORDER BY created_at {direction}, id {direction} LIMIT {}",
        limit + 1
    );
    (sql, values)
}
