//! Reading headers alone and listing in pages (CONTRACTS §4.3), for every backend.

use std::collections::HashSet;

use super::*;
use crate::persistence::{ListKey, Order, Page, PageQuery};

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod jsonl_pages {
            $( #[tokio::test] async fn $test() { super::$test::<super::Jsonl>().await; } )*
        }
        mod sqlite_pages {
            $( #[tokio::test] async fn $test() { super::$test::<super::Sqlite>().await; } )*
        }
        mod postgres_pages {
            $( #[tokio::test] async fn $test() { super::$test::<super::Postgres>().await; } )*
        }
    };
}

contract!(
    header_is_read_without_the_events,
    pages_walk_every_session_once,
    pages_filter_by_exact_cwd,
    sessions_created_during_a_walk_never_disturb_it,
    an_empty_store_has_one_empty_page,
);

fn query(after: Option<ListKey>, limit: usize, order: Order, cwd: Option<&str>) -> PageQuery {
    PageQuery {
        after,
        limit,
        order,
        cwd: cwd.map(PathBuf::from),
        host: None,
    }
}

/// Every page from the start, following the cursor until the backend says there is no more.
async fn walk(
    backend: &dyn Persistence,
    limit: usize,
    order: Order,
    cwd: Option<&str>,
) -> Vec<String> {
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = backend
            .list_page(&query(after.clone(), limit, order, cwd))
            .await
            .unwrap();
        assert!(page.headers.len() <= limit);
        seen.extend(page.headers.iter().map(|h| h.id.as_str().to_owned()));
        match page.headers.last() {
            Some(last) if page.more => after = Some(ListKey::of(last)),
            _ => return seen,
        }
    }
}

/// Sessions with creation times that tie (broken by id), in three cwds, two of which share a
/// JSONL project directory (`/w/a-b/c` and `/w/a/b-c` have the same lossy project key).
async fn stored(backend: &dyn Persistence) -> Vec<SessionHeader> {
    let cwds = ["/w/a-b/c", "/w/a/b-c", "/elsewhere"];
    let headers: Vec<SessionHeader> = (0..23)
        .map(|n| {
            let mut h = header(&format!("s{:02}", (n * 7) % 23));
            h.created_at = 1_000 + n / 3;
            h.cwd = PathBuf::from(cwds[usize::try_from(n).unwrap() % 3]);
            h
        })
        .collect();
    for h in &headers {
        backend.append(h, &turn(0, 1)).await.unwrap();
    }
    headers
}

fn ids_in(headers: &[SessionHeader], order: Order, cwd: Option<&str>) -> Vec<String> {
    let mut headers: Vec<&SessionHeader> = headers
        .iter()
        .filter(|h| cwd.is_none_or(|c| h.cwd == Path::new(c)))
        .collect();
    headers.sort_by(|a, b| crate::persistence::page::listed_before(a, b, order));
    headers.iter().map(|h| h.id.as_str().to_owned()).collect()
}

async fn header_is_read_without_the_events<F: Fixture>() {
    let s = scratch();
    let h = header("long");
    let backend = F::open(&s.dir);
    assert_eq!(backend.header(&h.id).await.unwrap(), None);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    backend.append(&h, &turn(8, 2)).await.unwrap();
    assert_eq!(backend.header(&h.id).await.unwrap(), Some(h.clone()));
    drop(backend);
    // With an event damaged, reading the whole session fails; the header alone still reads,
    // which it could not if it read the events.
    F::damage(&s.dir, &h, 3);
    let backend = F::open(&s.dir);
    assert!(matches!(
        backend.inspect(&h.id).await,
        Err(PersistenceError::Corrupt { .. })
    ));
    assert_eq!(backend.header(&h.id).await.unwrap(), Some(h));
    assert_eq!(backend.header(&id("missing")).await.unwrap(), None);
}

async fn pages_walk_every_session_once<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let headers = stored(backend.as_ref()).await;
    for order in [Order::NewestFirst, Order::OldestFirst] {
        let expected = ids_in(&headers, order, None);
        for limit in [1, 4, 23, 100] {
            assert_eq!(
                walk(backend.as_ref(), limit, order, None).await,
                expected,
                "{order:?} {limit}"
            );
            // A fresh instance (the JSONL index rebuilt from the logs) pages the same.
            assert_eq!(
                walk(F::open(&s.dir).as_ref(), limit, order, None).await,
                expected
            );
        }
    }
    let first = backend
        .list_page(&query(None, 5, Order::NewestFirst, None))
        .await
        .unwrap();
    assert!(first.more);
    assert_eq!(first.headers[0].created_at, 1_007, "newest first");
    for listed in &first.headers {
        assert!(
            headers.contains(listed),
            "whole headers are listed: {listed:?}"
        );
    }
}

async fn pages_filter_by_exact_cwd<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let headers = stored(backend.as_ref()).await;
    for cwd in ["/w/a-b/c", "/w/a/b-c", "/elsewhere", "/nowhere"] {
        for order in [Order::NewestFirst, Order::OldestFirst] {
            let expected = ids_in(&headers, order, Some(cwd));
            assert_eq!(
                walk(backend.as_ref(), 3, order, Some(cwd)).await,
                expected,
                "{cwd}"
            );
        }
    }
    assert_eq!(
        walk(backend.as_ref(), 3, Order::NewestFirst, Some("/w/a-b/c"))
            .await
            .len(),
        8
    );
}

async fn sessions_created_during_a_walk_never_disturb_it<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let headers = stored(backend.as_ref()).await;
    let before: HashSet<String> = headers.iter().map(|h| h.id.as_str().to_owned()).collect();
    for order in [Order::NewestFirst, Order::OldestFirst] {
        let mut seen = Vec::new();
        let mut after: Option<ListKey> = None;
        let mut added = 0;
        loop {
            let page = backend
                .list_page(&query(after.clone(), 4, order, None))
                .await
                .unwrap();
            seen.extend(page.headers.iter().map(|h| h.id.as_str().to_owned()));
            // New sessions land everywhere: newer than everything, older than everything, and
            // at the cursor's own time (a tie broken by id, on either side of it).
            if let Some(last) = page.headers.last() {
                for (created_at, name) in [
                    (9_999, "new-late"),
                    (1, "new-early"),
                    (last.created_at, "s00-tie"),
                    (last.created_at, "zz-tie"),
                ] {
                    let mut h = header(&format!("{name}-{order:?}-{added}"));
                    h.created_at = created_at;
                    backend.append(&h, &turn(0, 1)).await.unwrap();
                    added += 1;
                }
            }
            match page.headers.last() {
                Some(last) if page.more => after = Some(ListKey::of(last)),
                _ => break,
            }
        }
        let unique: HashSet<&String> = seen.iter().collect();
        assert_eq!(
            unique.len(),
            seen.len(),
            "a session was listed twice: {seen:?}"
        );
        let missing: Vec<_> = before.iter().filter(|id| !unique.contains(id)).collect();
        assert!(missing.is_empty(), "{order:?}: {missing:?} were skipped");
        // The walk is still in order, sessions created meanwhile included.
        let mut keys: Vec<(i64, String)> = Vec::new();
        for id in &seen {
            let h = backend.header(&super::id(id)).await.unwrap().unwrap();
            keys.push((h.created_at, id.clone()));
        }
        let mut sorted = keys.clone();
        sorted.sort();
        if order == Order::NewestFirst {
            sorted.reverse();
        }
        assert_eq!(keys, sorted);
    }
}

async fn an_empty_store_has_one_empty_page<F: Fixture>() {
    let s = scratch();
    let before = listing(&s.dir);
    let backend = F::open(&s.dir);
    for order in [Order::NewestFirst, Order::OldestFirst] {
        assert_eq!(
            backend
                .list_page(&query(None, 10, order, None))
                .await
                .unwrap(),
            Page::default()
        );
    }
    assert_eq!(listing(&s.dir), before, "listing creates nothing");
}
