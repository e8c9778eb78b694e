//! What is particular to the PostgreSQL backend: one writer per session across daemons (leases),
//! the host and daemon recorded with each session, and a database that goes away and comes back.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::*;
use crate::persistence::postgres::{Holder, PostgresBackend, PostgresOptions};
use crate::persistence::{Order, PageQuery};

/// A backend on `url` held by a daemon of its own (`name`, pid `pid`), with a short lease.
fn daemon(url: &str, name: &str, pid: u32, lease: Duration) -> Arc<PostgresBackend> {
    let mut options = PostgresOptions::new(url).unwrap();
    options.holder = Holder {
        daemon: format!("daemon-{name}"),
        host: format!("host-{name}"),
        pid,
    };
    options.lease = lease;
    Arc::new(PostgresBackend::open(options).unwrap())
}

fn shared_url() -> (String, String) {
    let server = dsh_testkit::postgres::shared();
    let db = server.fresh_database();
    (server.url(&db), db)
}

/// The user message of a turn: who appended it, and which attempt.
fn marked_turn(start: u64, turn_no: u32, mark: &str) -> Vec<Event> {
    let mut data = turn_data(turn_no);
    if let EventData::UserMessage { message } = &mut data[2] {
        message.text = mark.to_owned();
    }
    events_from(start, data)
}

#[tokio::test]
async fn a_session_live_in_one_daemon_is_refused_to_another_naming_the_holder() {
    let (url, _) = shared_url();
    let a = daemon(&url, "a", 111, Duration::from_secs(30));
    let b = daemon(&url, "b", 222, Duration::from_secs(30));
    let h = header("leased");
    a.append(&h, &turn(0, 1)).await.unwrap();
    for refused in [
        b.load(&h.id).await.map(drop),
        b.append(&h, &turn(8, 2)).await,
    ] {
        match refused {
            Err(e @ PersistenceError::Leased { .. }) => {
                let text = e.to_string();
                assert!(
                    text.contains("host host-a") && text.contains("pid 111"),
                    "{text}"
                );
            }
            other => panic!("expected a lease refusal, got {other:?}"),
        }
    }
    // Reading is not writing: the other daemon lists and inspects it.
    assert_eq!(b.inspect(&h.id).await.unwrap().events, turn(0, 1));
    assert_eq!(b.list().await.unwrap(), vec![h.clone()]);
    // Released (the agent closed): the other daemon may resume it.
    a.release(&h.id).await;
    assert_eq!(b.load(&h.id).await.unwrap().events, turn(0, 1));
    assert!(matches!(
        a.load(&h.id).await,
        Err(PersistenceError::Leased { .. })
    ));
}

/// An append checks the stored header by its text in the database and, when the text differs,
/// by what it means: a header another dsh wrote with other spacing is the same header, and one
/// that differs (here its cwd) refuses the append, writing nothing.
#[tokio::test]
async fn a_stored_header_is_compared_by_meaning_not_by_text() {
    let (url, db) = shared_url();
    let server = dsh_testkit::postgres::shared();
    let a = daemon(&url, "a", 1, Duration::from_secs(30));
    let h = header("spaced");
    a.append(&h, &turn(0, 1)).await.unwrap();
    let id = h.id.as_str();
    server.sql(
        &db,
        &format!("UPDATE sessions SET header = replace(header, ',', ', ') WHERE id = '{id}'"),
    );
    a.append(&h, &turn(8, 2)).await.unwrap();
    let spaced = server.sql(
        &db,
        &format!("SELECT header FROM sessions WHERE id = '{id}'"),
    );
    assert!(
        spaced.contains(", "),
        "the stored text is left as it was: {spaced}"
    );

    server.sql(
        &db,
        &format!(
            "UPDATE sessions SET header = regexp_replace(header, '\"cwd\": ?\"[^\"]*\"', '\"cwd\":\"/elsewhere\"') WHERE id = '{id}'"
        ),
    );
    match a.append(&h, &turn(16, 3)).await {
        Err(PersistenceError::Config(message)) => {
            assert!(message.contains("different header"), "{message}")
        }
        other => panic!("expected a different-header refusal, got {other:?}"),
    }
    let mut both = turn(0, 1);
    both.extend(turn(8, 2));
    assert_eq!(a.inspect(&h.id).await.unwrap().events, both);
}

/// Two daemons race to append to one session; the holder is cut off (no renewals, no appends)
/// until its lease runs out and the other, racing all along, takes over; then the first one's
/// appends resume and race the new holder's. Every
/// append either was acknowledged or wrote nothing: the stored log is exactly the acknowledged
/// appends, each once, in order, with no gap.
#[tokio::test]
async fn racing_daemons_never_store_an_acknowledged_event_twice_or_lose_one() {
    let (url, _) = shared_url();
    let lease = Duration::from_millis(600);
    let a = daemon(&url, "a", 1, lease);
    let b = daemon(&url, "b", 2, lease);
    let h = header("raced");
    a.append(&h, &marked_turn(0, 1, "a-0")).await.unwrap();
    let acknowledged = Mutex::new(vec![(0u64, "a-0".to_owned())]);
    let took_over = std::sync::atomic::AtomicBool::new(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    let race = |name: &'static str, backend: Arc<PostgresBackend>| {
        let acknowledged = &acknowledged;
        let took_over = &took_over;
        let h = &h;
        async move {
            let mut attempt = 0u32;
            // Each daemon keeps going until b has appended three times after taking over.
            while acknowledged
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, m)| m.starts_with("b-"))
                .count()
                < 3
            {
                assert!(Instant::now() < deadline, "b never took over");
                attempt += 1;
                if name == "a" && attempt == 5 {
                    // Cut off: no renewal and no appends until b has taken over (b keeps
                    // racing meanwhile); then a's writes come back, too late.
                    backend.pause_heartbeat_for_tests(true);
                    while !took_over.load(std::sync::atomic::Ordering::SeqCst) {
                        assert!(Instant::now() < deadline, "b never took over");
                        tokio::task::yield_now().await;
                    }
                }
                let start = backend.stored_len(&h.id).await.unwrap().unwrap();
                let mark = format!("{name}-{attempt}");
                let turn_no = u32::try_from(start / 8).unwrap() + 1;
                match backend.append(h, &marked_turn(start, turn_no, &mark)).await {
                    Ok(()) => {
                        if name == "b" {
                            took_over.store(true, std::sync::atomic::Ordering::SeqCst);
                        }
                        acknowledged.lock().unwrap().push((start, mark));
                    }
                    Err(PersistenceError::Leased { .. } | PersistenceError::SeqMismatch { .. }) => {
                    }
                    Err(other) => panic!("{name}: {other}"),
                }
            }
        }
    };
    // Both race on this task, interleaved at every wait on the database.
    tokio::join!(race("a", a.clone()), race("b", b.clone()));
    assert!(took_over.load(std::sync::atomic::Ordering::SeqCst));
    let mut acknowledged = acknowledged.into_inner().unwrap();
    acknowledged.sort();
    let stored = b.inspect(&h.id).await.unwrap().events;
    assert_eq!(stored.len(), acknowledged.len() * 8, "{acknowledged:?}");
    for (n, (start, mark)) in acknowledged.iter().enumerate() {
        assert_eq!(*start, n as u64 * 8, "{acknowledged:?}");
        let expected = marked_turn(*start, u32::try_from(n).unwrap() + 1, mark);
        assert_eq!(
            stored[n * 8..n * 8 + 8],
            expected[..],
            "append {mark} at {start}"
        );
    }
    // And a, having lost the lease, is refused from now on.
    assert!(matches!(
        a.append(&h, &marked_turn(stored.len() as u64, 99, "late"))
            .await,
        Err(PersistenceError::Leased { .. })
    ));
}

#[tokio::test]
async fn sessions_record_their_host_and_pages_filter_by_it() {
    let (url, db) = shared_url();
    let a = daemon(&url, "a", 1, Duration::from_secs(30));
    let b = daemon(&url, "b", 2, Duration::from_secs(30));
    for (n, backend) in [&a, &b, &a].into_iter().enumerate() {
        let mut h = header(&format!("s{n}"));
        h.created_at += i64::try_from(n).unwrap();
        backend.append(&h, &turn(0, 1)).await.unwrap();
    }
    let recorded = dsh_testkit::postgres::shared().sql(
        &db,
        "SELECT id || ' ' || host || ' ' || daemon FROM sessions ORDER BY id",
    );
    assert_eq!(
        recorded.lines().collect::<Vec<_>>(),
        [
            "s0 host-a daemon-a",
            "s1 host-b daemon-b",
            "s2 host-a daemon-a"
        ]
    );
    let page = async |host: Option<&str>| {
        b.list_page(&PageQuery {
            after: None,
            limit: 10,
            order: Order::OldestFirst,
            cwd: None,
            host: host.map(str::to_owned),
        })
        .await
        .unwrap()
        .headers
        .into_iter()
        .map(|h| h.id.as_str().to_owned())
        .collect::<Vec<_>>()
    };
    assert_eq!(page(None).await, ["s0", "s1", "s2"]);
    assert_eq!(page(Some("host-a")).await, ["s0", "s2"]);
    assert_eq!(page(Some("host-b")).await, ["s1"]);
    assert!(page(Some("elsewhere")).await.is_empty());
    // Each page says who created each of its sessions.
    let listed = b
        .list_page(&PageQuery {
            after: None,
            limit: 10,
            order: Order::OldestFirst,
            cwd: None,
            host: None,
        })
        .await
        .unwrap();
    let creators: Vec<String> = listed
        .headers
        .iter()
        .map(|h| {
            let c = &listed.creators[&h.id];
            format!("{} {} {}", h.id.as_str(), c.host, c.daemon)
        })
        .collect();
    assert_eq!(creators, recorded.lines().collect::<Vec<_>>());
    assert_eq!(
        b.creator().map(|c| (c.host, c.daemon)),
        Some(("host-b".to_owned(), "daemon-b".to_owned()))
    );
}

/// A database that is down: the backend opens (it connects to nothing), every call is refused
/// as unavailable and says so; once the server is back, the same backend works, and a second
/// migration finds nothing to do. On a runtime with workers, as in dshd: the pooled connection
/// learns that the server went away while this test's thread waits for the server to stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_is_down_is_unavailable_until_it_is_back() {
    let mut server = dsh_testkit::postgres::PgServer::start();
    let db = server.fresh_database();
    let url = server.url(&db);
    server.stop();
    let backend = daemon(&url, "a", 1, Duration::from_secs(30));
    let h = header("waits");
    match backend.append(&h, &turn(0, 1)).await {
        Err(e @ PersistenceError::Unavailable { .. }) => {
            assert!(e.to_string().contains(&format!("/{db}")), "{e}");
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert!(backend.unavailable().is_some());
    server.run();
    backend.append(&h, &turn(0, 1)).await.unwrap();
    assert!(backend.unavailable().is_none());
    // Lost mid-session and back: the next append continues the log.
    server.stop();
    assert!(matches!(
        backend.append(&h, &turn(8, 2)).await,
        Err(PersistenceError::Unavailable { .. })
    ));
    server.run();
    backend.append(&h, &turn(8, 2)).await.unwrap();
    let other = daemon(&url, "b", 2, Duration::from_secs(30));
    assert_eq!(other.inspect(&h.id).await.unwrap().events.len(), 16);
    let versions = server.sql(&db, "SELECT version FROM dsh_migrations");
    assert_eq!(versions.trim(), "1");
}
