//! The swap logic of the handle, and what is particular to each backend.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::*;
use crate::persistence::OnBlockingPool;

// ---------------------------------------------------------------------------------------------
// The swappable handle

#[tokio::test]
async fn checkpoint_writes_what_the_active_backend_lacks() {
    let s = scratch();
    let jsonl = crate::persistence::open(BackendKind::Jsonl, jsonl_root(&s.dir)).unwrap();
    let sqlite = crate::persistence::open(BackendKind::Sqlite, sqlite_db(&s.dir)).unwrap();
    let handle = PersistenceHandle::new(jsonl.clone());
    let h = header("swapped");
    let mut log = SessionLog::new(h.clone());
    let mut cursor = DurableCursor::default();
    let add_turn = |log: &mut SessionLog, n: u32| {
        for data in turn_data(n) {
            log.append_at(data, 5);
        }
    };

    add_turn(&mut log, 1);
    checkpoint(&handle, &log, &mut cursor).await.unwrap();
    assert_eq!(jsonl.stored_len(&h.id).await.unwrap(), Some(8));
    assert_eq!(sqlite.stored_len(&h.id).await.unwrap(), None);

    handle.swap(sqlite.clone());
    add_turn(&mut log, 2);
    checkpoint(&handle, &log, &mut cursor).await.unwrap();
    let in_sqlite = sqlite.inspect(&h.id).await.unwrap();
    assert_eq!(in_sqlite.header, h, "the new backend got the header");
    assert_eq!(
        in_sqlite.events,
        log.events(),
        "and every event, not only the new ones"
    );
    assert_eq!(jsonl.stored_len(&h.id).await.unwrap(), Some(8));

    handle.swap(jsonl.clone());
    add_turn(&mut log, 3);
    checkpoint(&handle, &log, &mut cursor).await.unwrap();
    checkpoint(&handle, &log, &mut cursor).await.unwrap();
    let in_jsonl = jsonl.inspect(&h.id).await.unwrap();
    assert_eq!(
        in_jsonl.events,
        log.events(),
        "only the missing events were appended"
    );
    let location = handle.locate(&h).unwrap();
    let lines = fs::read_to_string(&location.path).unwrap().lines().count();
    assert_eq!(lines, 1 + 24, "header plus each event exactly once");
    assert_eq!(sqlite.stored_len(&h.id).await.unwrap(), Some(16));
    assert_eq!(cursor.stored(), 24);
}

// ---------------------------------------------------------------------------------------------
// JSONL specifics

#[tokio::test]
async fn jsonl_file_format_and_permissions() {
    let s = scratch();
    let backend = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap());
    let h = header("fmt");
    backend.append(&h, &turn(0, 1)).await.unwrap();
    let path = backend.locate(&h).unwrap().path;
    assert_eq!(
        path,
        jsonl_root(&s.dir)
            .join("--work-project--")
            .join("fmt")
            .join("session.jsonl")
    );
    let text = fs::read_to_string(&path).unwrap();
    let mut lines = text.split_inclusive('\n');
    assert_eq!(
        lines.next(),
        Some(
            "{\"type\":\"session\",\"version\":0,\"id\":\"fmt\",\"createdAt\":1700000000000,\
             \"cwd\":\"/work/project\",\"delegationDepth\":0}\n"
        )
    );
    for (event, line) in turn(0, 1).iter().zip(lines) {
        assert_eq!(line, format!("{}\n", event.to_json()));
    }
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    for dir in path.ancestors().skip(1).take(4) {
        assert_eq!(mode(dir), 0o700, "{}", dir.display());
    }
    assert_eq!(
        fs::read_dir(path.parent().unwrap()).unwrap().count(),
        1,
        "no temporary file left behind"
    );
}

#[tokio::test]
async fn jsonl_refuses_relative_root_and_duplicate_ids() {
    assert!(matches!(
        JsonlBackend::new("relative/root".into()),
        Err(PersistenceError::Config(_))
    ));
    let s = scratch();
    let backend = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap());
    let h = header("twice");
    backend.append(&h, &turn(0, 1)).await.unwrap();
    let path = backend.locate(&h).unwrap().path;
    let copy = jsonl_root(&s.dir).join("--elsewhere--").join("twice");
    fs::create_dir_all(&copy).unwrap();
    fs::copy(&path, copy.join("session.jsonl")).unwrap();
    let err = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap())
        .load(&h.id)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("more than one project directory"),
        "{err}"
    );
}

#[tokio::test]
async fn jsonl_list_skips_unreadable_headers() {
    let s = scratch();
    let backend = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap());
    let good = header("good");
    backend.append(&good, &turn(0, 1)).await.unwrap();
    let project = jsonl_root(&s.dir).join("--work-project--");
    for (dir, content) in [
        ("bad", "not a header\n"),
        ("empty", ""),
        ("partial", "{\"type\""),
    ] {
        fs::create_dir(project.join(dir)).unwrap();
        fs::write(project.join(dir).join("session.jsonl"), content).unwrap();
    }
    // A log whose header names another session is not listed under the wrong name either.
    fs::create_dir(project.join("impostor")).unwrap();
    fs::copy(
        project.join("good").join("session.jsonl"),
        project.join("impostor").join("session.jsonl"),
    )
    .unwrap();
    fs::write(jsonl_root(&s.dir).join("stray-file"), "x").unwrap();
    assert_eq!(backend.list().await.unwrap(), vec![good]);
    assert!(matches!(
        backend.load(&id("impostor")).await,
        Err(PersistenceError::Corrupt { line: 1, .. })
    ));
}

#[tokio::test]
async fn jsonl_append_after_torn_tail_cuts_it_first() {
    let s = scratch();
    let h = header("resumed-writer");
    OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap())
        .append(&h, &turn(0, 1))
        .await
        .unwrap();
    Jsonl::tear(&s.dir, &h);
    let backend = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap());
    assert_eq!(backend.stored_len(&h.id).await.unwrap(), Some(8));
    backend.append(&h, &turn(8, 2)).await.unwrap();
    let reread = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap())
        .load(&h.id)
        .await
        .unwrap();
    assert!(reread.repairs.is_empty());
    assert_eq!(reread.events.len(), 16);
}

#[tokio::test]
async fn jsonl_release_closes_the_log_and_the_next_append_continues_it() {
    let s = scratch();
    let backend = OnBlockingPool::new(JsonlBackend::new(jsonl_root(&s.dir)).unwrap());
    let h = header("released");
    backend.append(&h, &turn(0, 1)).await.unwrap();
    let open_logs = || {
        fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| fs::read_link(fd.unwrap().path()).ok())
            .filter(|target| target.starts_with(&s.dir))
            .count()
    };
    assert_eq!(open_logs(), 1, "the writer keeps its log open");
    backend.release(&h.id).await;
    assert_eq!(open_logs(), 0, "release closes it");
    backend.release(&id("never-seen")).await;
    backend.append(&h, &turn(8, 2)).await.unwrap();
    assert_eq!(backend.load(&h.id).await.unwrap().events.len(), 16);
}

// ---------------------------------------------------------------------------------------------
// SQLite specifics

#[tokio::test]
async fn sqlite_refuses_foreign_files_without_touching_them() {
    let s = scratch();
    let db = sqlite_db(&s.dir);
    fs::create_dir(db.parent().unwrap()).unwrap();
    let h = header("x");

    fs::write(&db, b"just some text, not a database at all".repeat(200)).unwrap();
    let before = snapshot(&s.dir);
    let backend = OnBlockingPool::new(SqliteBackend::open(db.clone()).unwrap());
    assert!(matches!(
        backend.list().await,
        Err(PersistenceError::ForeignDatabase { .. })
    ));
    assert!(matches!(
        backend.append(&h, &turn(0, 1)).await,
        Err(PersistenceError::ForeignDatabase { .. })
    ));
    assert_eq!(snapshot(&s.dir), before);
    fs::remove_file(&db).unwrap();

    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        conn.execute_batch("PRAGMA application_id = 7; CREATE TABLE t(x);")
            .unwrap();
    }
    let before = snapshot(&s.dir);
    let err = OnBlockingPool::new(SqliteBackend::open(db.clone()).unwrap())
        .append(&h, &turn(0, 1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("application_id"), "{err}");
    assert_eq!(snapshot(&s.dir), before);
    fs::remove_file(&db).unwrap();

    // Our application id but another schema version.
    let backend = OnBlockingPool::new(SqliteBackend::open(db.clone()).unwrap());
    backend.append(&h, &turn(0, 1)).await.unwrap();
    drop(backend);
    rusqlite::Connection::open(&db)
        .unwrap()
        .execute_batch("PRAGMA user_version = 3")
        .unwrap();
    let err = OnBlockingPool::new(SqliteBackend::open(db).unwrap())
        .load(&h.id)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("schema version is 3"), "{err}");
}

#[tokio::test]
async fn sqlite_creates_a_private_wal_database() {
    let s = scratch();
    let db = sqlite_db(&s.dir);
    let backend = OnBlockingPool::new(SqliteBackend::open(db.clone()).unwrap());
    assert!(backend.locate(&header("x")).is_none());
    backend.append(&header("x"), &turn(0, 1)).await.unwrap();
    let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&db), 0o600);
    assert_eq!(mode(db.parent().unwrap()), 0o700);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let pragma = |name: &str| -> i64 { conn.pragma_query_value(None, name, |r| r.get(0)).unwrap() };
    assert_eq!(
        pragma("application_id"),
        i64::from(crate::persistence::sqlite::APPLICATION_ID)
    );
    assert_eq!(
        pragma("user_version"),
        i64::from(crate::persistence::sqlite::SCHEMA_VERSION)
    );
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let rows: i64 = conn
        .query_row(
            "SELECT count(*) FROM events WHERE session_id = 'x'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(rows, 8);
    assert!(matches!(
        SqliteBackend::open("rel.sqlite3".into()),
        Err(PersistenceError::Config(_))
    ));
}

#[tokio::test]
async fn sqlite_seq_gap_is_corruption() {
    let s = scratch();
    let h = header("gap");
    let backend = Sqlite::open(&s.dir);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    rusqlite::Connection::open(sqlite_db(&s.dir))
        .unwrap()
        .execute("DELETE FROM events WHERE seq = 2", [])
        .unwrap();
    match backend.load(&h.id).await {
        Err(PersistenceError::Corrupt { line, message, .. }) => {
            assert_eq!(line, 4, "{message}");
            assert!(message.contains("expected seq 2"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

/// Two backends on one database — a swapped-out backend finishing its last checkpoints while the
/// new one starts, or another process — must wait for each other's write lock, never fail an
/// append with "database is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_connections_to_one_file_wait_for_each_other() {
    const THREADS: u32 = 8;
    const TURNS: u32 = 25;
    let s = scratch();
    let backends: Vec<Arc<dyn Persistence>> = (0..2).map(|_| Sqlite::open(&s.dir)).collect();
    // Created (and initialised) once, so the threads race only on appends.
    backends[0]
        .append(&header("seed"), &turn(0, 1))
        .await
        .unwrap();
    let mut writers = tokio::task::JoinSet::new();
    for t in 0..THREADS {
        let backends = backends.clone();
        writers.spawn(async move {
            let h = header(&format!("writer-{t}"));
            for n in 0..TURNS {
                // Alternate connections, so each session's appends also cross them.
                let backend = &backends[usize::try_from(n + t).unwrap() % 2];
                backend
                    .append(&h, &turn(u64::from(n) * 8, n + 1))
                    .await
                    .unwrap_or_else(|e| panic!("writer {t}, turn {}: {e}", n + 1));
            }
        });
    }
    while let Some(done) = writers.join_next().await {
        done.unwrap();
    }
    let fresh = Sqlite::open(&s.dir);
    for t in 0..THREADS {
        let h = header(&format!("writer-{t}"));
        let stored = fresh.inspect(&h.id).await.unwrap();
        assert_eq!(stored.events.len(), usize::try_from(TURNS * 8).unwrap());
    }
}

#[tokio::test]
async fn sqlite_refuses_locations_that_are_not_regular_files() {
    use super::super::sqlite::check_location;
    let s = scratch();
    let fifo = s.dir.join("fifo");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from(0o600),
        0,
    )
    .unwrap();
    let missing_dir = s.dir.join("no-such-dir").join("db.sqlite3");
    for (path, reason) in [
        (Path::new("/dev/null"), "is a character device"),
        (Path::new("/dev/zero"), "is a character device"),
        (Path::new("/proc/self/status"), "pseudo-file"),
        (s.dir.as_path(), "is a directory"),
        (fifo.as_path(), "is a FIFO"),
        (missing_dir.as_path(), "neither does its directory"),
    ] {
        match check_location(path) {
            Err(e @ PersistenceError::BadLocation { .. }) => {
                let message = e.to_string();
                assert!(
                    message.starts_with(&format!("{}: ", path.display())),
                    "{message}"
                );
                assert!(message.contains(reason), "{message}");
            }
            other => panic!("{}: {other:?}", path.display()),
        }
    }
    let empty = s.dir.join("empty.sqlite3");
    fs::write(&empty, b"").unwrap();
    check_location(&empty).unwrap();
    check_location(&s.dir.join("new.sqlite3")).unwrap();

    // A backend configured on such a path refuses every use and leaves it as it was.
    let backend = OnBlockingPool::new(SqliteBackend::open("/dev/null".into()).unwrap());
    assert!(matches!(
        backend.list().await,
        Err(PersistenceError::BadLocation { .. })
    ));
    assert!(matches!(
        backend.append(&header("x"), &turn(0, 1)).await,
        Err(PersistenceError::BadLocation { .. })
    ));
    use std::os::unix::fs::FileTypeExt;
    assert!(
        fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    let fifo_backend = OnBlockingPool::new(SqliteBackend::open(fifo.clone()).unwrap());
    assert!(matches!(
        fifo_backend.stored_len(&id("x")).await,
        Err(PersistenceError::BadLocation { .. })
    ));
}
