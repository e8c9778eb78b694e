//! Listing sessions one page at a time (CONTRACTS §4.3): the order, the key a page continues from,
//! and what a backend answers.
//!
//! Pages are keyset pages, never offsets: a page starts strictly after the key of the last session
//! of the previous one. Keys are `(createdAt, id)`, which never change (headers are immutable) and
//! are unique (ids are), so a session stored for the whole walk is returned exactly once, whatever
//! is created or removed meanwhile; a session created during the walk is returned at most once.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::PathBuf;

use dsh_session::{SessionHeader, SessionId};

/// The most sessions one page may ask for: a bound on the work and the reply of one call.
pub const MAX_PAGE_SIZE: usize = 1000;

/// Which way a listing runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Largest `(createdAt, id)` first: the most recent sessions.
    #[default]
    NewestFirst,
    /// Smallest `(createdAt, id)` first.
    OldestFirst,
}

/// Where a session sorts in a listing: its creation time, then its id (ties of the same
/// millisecond are broken by id, so no two sessions share a key).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ListKey {
    /// `createdAt` of the header, Unix milliseconds.
    pub created_at: i64,
    /// The session id.
    pub id: SessionId,
}

impl ListKey {
    /// The key of `header`.
    pub fn of(header: &SessionHeader) -> Self {
        Self {
            created_at: header.created_at,
            id: header.id.clone(),
        }
    }

    /// Whether a session with key `self` belongs on a page that continues after `cursor` in
    /// `order` (strictly after: the cursor's own session was on the previous page).
    pub fn follows(&self, cursor: Option<&ListKey>, order: Order) -> bool {
        cursor.is_none_or(|cursor| match order {
            Order::NewestFirst => self < cursor,
            Order::OldestFirst => self > cursor,
        })
    }
}

/// Compares two headers as `order` lists them: the one listed first is `Less`.
pub fn listed_before(a: &SessionHeader, b: &SessionHeader, order: Order) -> Ordering {
    let ordering = (a.created_at, &a.id).cmp(&(b.created_at, &b.id));
    match order {
        Order::NewestFirst => ordering.reverse(),
        Order::OldestFirst => ordering,
    }
}

/// One page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    /// Continue strictly after this key (`None`: from the start).
    pub after: Option<ListKey>,
    /// At most this many headers (1 ..= [`MAX_PAGE_SIZE`]; callers check).
    pub limit: usize,
    /// Which way.
    pub order: Order,
    /// Only sessions whose header's `cwd` is exactly this path.
    pub cwd: Option<PathBuf>,
    /// Only sessions created on this host (by its host name). Only the PostgreSQL backend records
    /// hosts; the file backends hold this machine's sessions alone, which [`PageQuery::admits`]
    /// compares with this machine's host name.
    pub host: Option<String>,
}

impl PageQuery {
    /// Whether the query asks for another machine's sessions only: a file backend, which holds
    /// this machine's sessions alone, answers an empty page.
    pub fn elsewhere(&self) -> bool {
        self.host
            .as_ref()
            .is_some_and(|host| *host != super::postgres::lease::host_name())
    }

    /// Whether `header` passes the query's filter and lies after its cursor.
    pub fn admits(&self, header: &SessionHeader) -> bool {
        self.cwd.as_ref().is_none_or(|cwd| *cwd == header.cwd)
            && !self.elsewhere()
            && ListKey::of(header).follows(self.after.as_ref(), self.order)
    }
}

/// One page of stored sessions.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Page {
    /// At most `limit` headers, in the query's order.
    pub headers: Vec<SessionHeader>,
    /// Whether the backend may hold more sessions after the last one here. A backend may say
    /// `true` when the rest turns out to be empty (e.g. a log removed meanwhile), never `false`
    /// when more follow.
    pub more: bool,
    /// Who created each listed session, where the backend records it (PostgreSQL); empty for
    /// the file backends, whose sessions are all this machine's.
    pub creators: HashMap<SessionId, Creator>,
}

/// The machine and the daemon that created a session (recorded by the PostgreSQL backend).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Creator {
    /// The machine's host name.
    pub host: String,
    /// The daemon's instance id (one per dshd process).
    pub daemon: String,
}

/// Makes a page out of headers from anywhere (the generic path, and tests): filters, sorts and
/// cuts them.
pub(crate) fn page_of(headers: impl IntoIterator<Item = SessionHeader>, query: &PageQuery) -> Page {
    let mut headers: Vec<SessionHeader> = headers.into_iter().filter(|h| query.admits(h)).collect();
    headers.sort_by(|a, b| listed_before(a, b, query.order));
    let more = headers.len() > query.limit;
    headers.truncate(query.limit);
    Page {
        headers,
        more,
        creators: HashMap::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(id: &str, created_at: i64) -> SessionHeader {
        SessionHeader::new(
            SessionId::parse(id).unwrap(),
            PathBuf::from(format!("/w/{}", created_at % 2)),
            created_at,
        )
    }

    #[test]
    fn pages_walk_every_session_once_in_both_orders() {
        let all: Vec<_> = (0..25)
            .map(|i| h(&format!("s{:02}", i % 7), i / 3))
            .collect();
        for order in [Order::NewestFirst, Order::OldestFirst] {
            let mut seen = Vec::new();
            let mut after = None;
            loop {
                let query = PageQuery {
                    after: after.clone(),
                    limit: 4,
                    order,
                    cwd: None,
                    host: None,
                };
                let page = page_of(all.clone(), &query);
                seen.extend(page.headers.iter().cloned());
                after = page.headers.last().map(ListKey::of);
                if !page.more {
                    break;
                }
            }
            let mut expected = all.clone();
            expected.sort_by(|a, b| listed_before(a, b, order));
            expected.dedup_by(|a, b| ListKey::of(a) == ListKey::of(b));
            assert_eq!(seen, expected, "{order:?}");
        }
    }

    #[test]
    fn the_cwd_filter_is_exact() {
        let all = vec![h("a", 1), h("b", 2), h("c", 3)];
        let query = PageQuery {
            after: None,
            limit: 10,
            order: Order::NewestFirst,
            cwd: Some("/w/1".into()),
            host: None,
        };
        let page = page_of(all, &query);
        let ids: Vec<_> = page.headers.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["c", "a"]);
        assert!(!page.more);
    }
}
