//! The contract every backend must keep, written once and instantiated for each backend.

use super::*;

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod jsonl_contract {
            $( #[tokio::test] async fn $test() { super::$test::<super::Jsonl>().await; } )*
        }
        mod sqlite_contract {
            $( #[tokio::test] async fn $test() { super::$test::<super::Sqlite>().await; } )*
        }
        mod postgres_contract {
            $( #[tokio::test] async fn $test() { super::$test::<super::Postgres>().await; } )*
        }
    };
}

contract!(
    creation_is_lazy,
    checkpoint_is_durable,
    a_huge_event_round_trips,
    list_is_oldest_first,
    locate_is_pure_and_follows_identity,
    torn_tail_is_kept_aside,
    unknown_events_are_kept,
    repair_sets_damage_aside_only_when_asked,
    corruption_before_last_turn_end_is_refused,
    open_turn_is_closed,
    seq_mismatch_is_refused,
    hostile_ids_stay_inside_and_round_trip,
    concurrent_sessions_do_not_mix,
);

async fn creation_is_lazy<F: Fixture>() {
    let s = scratch();
    let before = F::footprint(&s.dir);
    let backend = F::open(&s.dir);
    let h = header("s1");
    let _ = backend.locate(&h);
    assert_eq!(backend.stored_len(&h.id).await.unwrap(), None);
    assert!(backend.list().await.unwrap().is_empty());
    assert!(matches!(
        backend.inspect(&h.id).await,
        Err(PersistenceError::NotFound(_))
    ));
    assert!(matches!(
        backend.load(&h.id).await,
        Err(PersistenceError::NotFound(_))
    ));
    backend.append(&h, &[]).await.unwrap();
    assert_eq!(
        F::footprint(&s.dir),
        before,
        "nothing may exist before the first append"
    );

    backend.append(&h, &turn(0, 1)).await.unwrap();
    assert_ne!(F::footprint(&s.dir), before);
    assert_eq!(backend.stored_len(&h.id).await.unwrap(), Some(8));
    assert_eq!(backend.list().await.unwrap(), vec![h.clone()]);
    if let Some(location) = backend.locate(&h).filter(|l| l.database.is_none()) {
        assert!(
            location.path.is_file(),
            "the first append creates the located file"
        );
    }
}

async fn checkpoint_is_durable<F: Fixture>() {
    let s = scratch();
    let h = header("durable");
    let mut all = turn(0, 1);
    {
        let backend = F::open(&s.dir);
        backend.append(&h, &all[..3]).await.unwrap();
        backend.append(&h, &all[3..]).await.unwrap();
        let more = turn(8, 2);
        backend.append(&h, &more).await.unwrap();
        all.extend(more);
    }
    let backend = F::open(&s.dir);
    assert_eq!(backend.stored_len(&h.id).await.unwrap(), Some(16));
    let inspected = backend.inspect(&h.id).await.unwrap();
    let loaded = backend.load(&h.id).await.unwrap();
    assert_eq!(inspected, loaded);
    assert_eq!(loaded.header, h);
    assert_eq!(loaded.events, all);
    assert!(loaded.repairs.is_empty());
    // The reopened store keeps taking appends where the log ended.
    backend.append(&h, &turn(16, 3)).await.unwrap();
    assert_eq!(F::open(&s.dir).load(&h.id).await.unwrap().events.len(), 24);
}

/// A tool result of megabytes, larger than any buffer an append writes through: in the batch that
/// creates the session and in a later one. What follows each lands where it ended.
async fn a_huge_event_round_trips<F: Fixture>() {
    let s = scratch();
    let h = header("huge");
    let huge_turn = |start: u64, turn: u32| {
        let mut data = turn_data(turn);
        if let EventData::ToolResult { content, .. } = &mut data[5] {
            *content = "a line, \"quoted\" \u{fc}\n".repeat(200_000);
        }
        events_from(start, data)
    };
    let mut all = huge_turn(0, 1);
    {
        let backend = F::open(&s.dir);
        backend.append(&h, &all).await.unwrap();
        for more in [huge_turn(8, 2), turn(16, 3)] {
            backend.append(&h, &more).await.unwrap();
            all.extend(more);
        }
    }
    let loaded = F::open(&s.dir).load(&h.id).await.unwrap();
    assert_eq!(loaded.events.len(), all.len());
    // Not assert_eq: a failure would print megabytes.
    assert!(loaded.events == all, "the events read back differ");
    assert!(loaded.repairs.is_empty());
}

async fn list_is_oldest_first<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let mut newest = header("a-newest");
    newest.created_at += 10;
    newest.cwd = "/other/place".into();
    let mut child = header("b-child");
    child.parent_session = Some(id("c-oldest"));
    child.origin = Some(Origin::Subagent);
    child.delegation_depth = 1;
    let oldest = {
        let mut h = header("c-oldest");
        h.created_at -= 10;
        h.cwd = "/".into();
        h
    };
    let tie = header("a-tie");
    for h in [&newest, &child, &oldest, &tie] {
        backend.append(h, &turn(0, 1)).await.unwrap();
    }
    let expected = vec![oldest, tie, child, newest];
    assert_eq!(backend.list().await.unwrap(), expected);
    assert_eq!(F::open(&s.dir).list().await.unwrap(), expected);
}

async fn locate_is_pure_and_follows_identity<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let parent = header("parent");
    backend.append(&parent, &turn(0, 1)).await.unwrap();
    let resumed = F::open(&s.dir).load(&parent.id).await.unwrap().header;
    let before = snapshot(&s.dir);

    let fork = SessionHeader {
        id: id("fork"),
        parent_session: Some(parent.id.clone()),
        seed_length: Some(8),
        ..parent.clone()
    };
    let spawn = SessionHeader {
        id: id("spawn"),
        parent_session: Some(parent.id.clone()),
        origin: Some(Origin::Subagent),
        delegation_depth: 1,
        ..parent.clone()
    };
    let here = backend.locate(&parent);
    assert_eq!(backend.locate(&resumed), here, "resume keeps the location");
    assert_eq!(
        F::open(&s.dir).locate(&parent),
        here,
        "stable across instances"
    );
    for h in [&fork, &spawn, &header("never-written")] {
        let other = backend.locate(h);
        match (&here, &other) {
            (Some(a), Some(b)) if a.database.is_some() => {
                // A database: the same one for every session (the session is the header's id).
                assert_eq!(a, b, "{}", h.id);
                assert_eq!(b.kind, backend.kind().as_str());
                assert_eq!(b.database.as_deref(), backend.path().to_str());
            }
            (Some(a), Some(b)) => {
                assert_ne!(a.path, b.path, "{} gets its own location", h.id);
                assert_eq!(b.kind, "jsonl");
                assert!(!b.path.exists(), "locate creates nothing");
            }
            (None, None) => assert_eq!(backend.kind(), BackendKind::Sqlite),
            other => panic!("inconsistent locations {other:?}"),
        }
    }
    assert_eq!(snapshot(&s.dir), before, "locate did I/O");
}

async fn torn_tail_is_kept_aside<F: Fixture>() {
    let s = scratch();
    let h = header("torn");
    let backend = F::open(&s.dir);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    let clean = snapshot(&s.dir);
    drop(backend);
    let Some(tail) = F::tear(&s.dir, &h) else {
        return;
    };
    let torn = snapshot(&s.dir);
    let backend = F::open(&s.dir);
    let inspected = backend.inspect(&h.id).await.unwrap();
    assert_eq!(inspected.events, turn(0, 1));
    assert_eq!(snapshot(&s.dir), torn, "inspect never writes");

    let loaded = backend.load(&h.id).await.unwrap();
    assert_eq!(loaded.events, turn(0, 1));
    assert_eq!(
        loaded.repairs,
        vec![Repair::TornTail {
            from_line: 10,
            lines: 1
        }]
    );
    let (aside, log): (BTreeMap<_, _>, BTreeMap<_, _>) = snapshot(&s.dir)
        .into_iter()
        .partition(|(path, _)| path.to_string_lossy().contains("session.jsonl.torn-"));
    assert_eq!(log, clean, "load cut the tail from the log");
    assert_eq!(
        aside.into_values().collect::<Vec<_>>(),
        vec![Some(tail)],
        "and kept its bytes beside it"
    );
    assert!(
        F::open(&s.dir)
            .load(&h.id)
            .await
            .unwrap()
            .repairs
            .is_empty()
    );
    backend.append(&h, &turn(8, 2)).await.unwrap();
    assert_eq!(F::open(&s.dir).load(&h.id).await.unwrap().events.len(), 16);
}

/// An event of a type this dshd does not know (a newer dsh's) is stored, loaded and listed like
/// any other, unchanged, and later appends continue after it.
async fn unknown_events_are_kept<F: Fixture>() {
    let s = scratch();
    let h = header("newer");
    let backend = F::open(&s.dir);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    let line = r#"{"type":"note/added","seq":8,"time":1700000000008,"data":{"text":"from a newer dsh","tags":["a"]}}"#;
    let foreign = Event::from_line(line.as_bytes()).unwrap();
    assert_eq!(foreign.data.type_name(), "note/added");
    backend
        .append(&h, std::slice::from_ref(&foreign))
        .await
        .unwrap();
    backend.append(&h, &turn(9, 2)).await.unwrap();
    drop(backend);
    let backend = F::open(&s.dir);
    for stored in [
        backend.inspect(&h.id).await.unwrap(),
        backend.load(&h.id).await.unwrap(),
    ] {
        assert_eq!(stored.events.len(), 17);
        assert_eq!(stored.events[8], foreign);
        assert_eq!(stored.events[8].to_json(), line);
        assert!(stored.repairs.is_empty(), "{:?}", stored.repairs);
    }
}

/// A damaged log (a complete line that is no event) is refused until a person asks for a repair;
/// a dry run changes nothing, and the repair keeps the intact prefix and sets the rest aside.
async fn repair_sets_damage_aside_only_when_asked<F: Fixture>() {
    let s = scratch();
    let h = header("repair");
    let backend = F::open(&s.dir);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    backend.append(&h, &turn(8, 2)).await.unwrap();
    let clean = backend.repair(&h.id, false).await.unwrap();
    assert!(clean.findings.is_empty() && !clean.applied, "{clean:?}");
    assert!(matches!(
        backend.repair(&id("nobody"), false).await,
        Err(PersistenceError::NotFound(_))
    ));
    drop(backend);
    let (_, line) = F::damage(&s.dir, &h, 10);
    let damaged = snapshot(&s.dir);
    let backend = F::open(&s.dir);
    let dry = backend.repair(&h.id, false).await.unwrap();
    if dry.findings.is_empty() {
        // A backend whose damage `load` reports without a repair of its own (SQLite: a row
        // cannot be set aside as a line can).
        return;
    }
    assert!(dry.findings[0].contains(&format!("line {line}")), "{dry:?}");
    assert!(!dry.applied && !dry.actions.is_empty(), "{dry:?}");
    assert_eq!(snapshot(&s.dir), damaged, "a dry run changes nothing");
    assert!(backend.load(&h.id).await.is_err(), "still refused");

    let done = backend.repair(&h.id, true).await.unwrap();
    assert!(done.applied, "{done:?}");
    let loaded = backend.load(&h.id).await.unwrap();
    assert_eq!(
        loaded.events[..10],
        events_from(0, [turn_data(1), turn_data(2)].concat())[..10]
    );
    let after = snapshot(&s.dir);
    let aside: Vec<_> = after
        .iter()
        .filter(|(path, _)| path.to_string_lossy().contains("session.jsonl.damaged-"))
        .collect();
    assert_eq!(aside.len(), 1, "the damaged lines are kept: {after:?}");
    let kept = aside[0].1.as_ref().unwrap();
    assert!(String::from_utf8_lossy(kept).starts_with("{\"type\":\"oops\"}\n"));
}

async fn corruption_before_last_turn_end_is_refused<F: Fixture>() {
    let s = scratch();
    let h = header("damaged");
    let backend = F::open(&s.dir);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    backend.append(&h, &turn(8, 2)).await.unwrap();
    drop(backend);
    let (path, line) = F::damage(&s.dir, &h, 3);
    let damaged = snapshot(&s.dir);
    let backend = F::open(&s.dir);
    for result in [backend.load(&h.id).await, backend.inspect(&h.id).await] {
        match result {
            Err(PersistenceError::Corrupt {
                path: p, line: l, ..
            }) => {
                assert_eq!((p, l), (path.clone(), line));
            }
            other => panic!("expected corruption, got {other:?}"),
        }
    }
    let err = backend.load(&h.id).await.unwrap_err().to_string();
    assert!(err.contains(&format!("{}:{line}", path.display())), "{err}");
    assert_eq!(snapshot(&s.dir), damaged, "a corrupt log is left as it is");
}

async fn open_turn_is_closed<F: Fixture>() {
    let s = scratch();
    let h = header("crashed");
    let backend = F::open(&s.dir);
    backend.append(&h, &turn(0, 1)).await.unwrap();
    backend.append(&h, &open_turn(8, 2)).await.unwrap();
    drop(backend);

    let backend = F::open(&s.dir);
    assert_eq!(
        backend.inspect(&h.id).await.unwrap().events.len(),
        11,
        "inspect adds nothing"
    );
    let loaded = backend.load(&h.id).await.unwrap();
    assert_eq!(
        loaded.repairs,
        vec![Repair::ClosedOpenTurn { turn: 2, events: 3 }]
    );
    let closers = &loaded.events[11..];
    assert_eq!(
        closers.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [11, 12, 13]
    );
    match &closers[0].data {
        EventData::ToolResult {
            call_id,
            is_error: true,
            code: Some(code),
            ..
        } => assert_eq!(
            (call_id.as_str(), code.as_str()),
            ("lost", TOOL_OUTCOME_UNKNOWN)
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(closers[1].data, EventData::StepEnd { turn: 2, step: 1 });
    assert_eq!(
        closers[2].data,
        EventData::TurnEnd {
            turn: 2,
            reason: TurnEndReason::Interrupted,
            answer_seq: None,
            usage: None,
        }
    );
    // The repair is durable: a fresh instance finds a closed log and repairs nothing.
    let again = F::open(&s.dir).load(&h.id).await.unwrap();
    assert!(again.repairs.is_empty());
    assert_eq!(again.events, loaded.events);
    assert_eq!(backend.stored_len(&h.id).await.unwrap(), Some(14));
    backend.append(&h, &turn(14, 3)).await.unwrap();
    assert_eq!(
        F::open(&s.dir).inspect(&h.id).await.unwrap().events.len(),
        22
    );
}

async fn seq_mismatch_is_refused<F: Fixture>() {
    let s = scratch();
    let h = header("gaps");
    let backend = F::open(&s.dir);
    let expect_mismatch =
        |result: Result<(), PersistenceError>, expected: u64, got: u64| match result {
            Err(PersistenceError::SeqMismatch {
                id,
                expected: e,
                got: g,
            }) => assert_eq!((id, e, g), (h.id.clone(), expected, got)),
            other => panic!("expected a seq mismatch, got {other:?}"),
        };
    expect_mismatch(backend.append(&h, &turn(2, 1)).await, 0, 2);
    assert_eq!(
        backend.stored_len(&h.id).await.unwrap(),
        None,
        "a refused first append creates nothing"
    );
    backend.append(&h, &turn(0, 1)).await.unwrap();
    expect_mismatch(backend.append(&h, &turn(10, 2)).await, 8, 10);
    expect_mismatch(backend.append(&h, &turn(7, 2)).await, 8, 7);
    expect_mismatch(backend.append(&h, &turn(0, 1)).await, 8, 0);
    let mut gappy = turn(8, 2);
    gappy[3].seq = 12;
    expect_mismatch(backend.append(&h, &gappy).await, 11, 12);
    assert_eq!(
        F::open(&s.dir).inspect(&h.id).await.unwrap().events,
        turn(0, 1)
    );
    backend.append(&h, &turn(8, 2)).await.unwrap();
    assert_eq!(F::open(&s.dir).stored_len(&h.id).await.unwrap(), Some(16));
}

async fn hostile_ids_stay_inside_and_round_trip<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let store = backend.path();
    let long = "x".repeat(256);
    let wide = "\u{fc}".repeat(128);
    let ids = [
        "../../x",
        "a/b",
        ".",
        "..",
        "~",
        "\u{fc}/..",
        "/etc/passwd",
        "a\\b",
        "-",
        "--x--",
        " ",
        "\n",
        &long,
        &wide,
    ];
    let mut headers = Vec::new();
    for (n, raw) in ids.iter().enumerate() {
        let mut h = header(raw);
        h.created_at += i64::try_from(n).unwrap();
        backend.append(&h, &turn(0, 1)).await.unwrap();
        if let Some(location) = backend.locate(&h).filter(|l| l.database.is_none()) {
            assert!(location.path.starts_with(&store), "{raw:?} -> {location:?}");
            assert_eq!(
                location.path.components().count(),
                store.components().count() + 3,
                "{raw:?} -> {location:?}"
            );
            assert!(location.path.is_file(), "{raw:?} -> {location:?}");
        }
        headers.push(h);
    }
    let fresh = F::open(&s.dir);
    for h in &headers {
        let loaded = fresh.load(&h.id).await.unwrap();
        assert_eq!((&loaded.header, loaded.events.len()), (h, 8));
    }
    assert_eq!(fresh.list().await.unwrap(), headers);
    // Nothing was written outside the store: its root, or the database and its WAL files.
    for path in listing(&s.dir) {
        let inside = path.starts_with(&store)
            || path
                .to_string_lossy()
                .starts_with(&*store.to_string_lossy())
            || store.starts_with(&path);
        assert!(inside, "{} is outside {}", path.display(), store.display());
    }
}

async fn concurrent_sessions_do_not_mix<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let mut workers = tokio::task::JoinSet::new();
    for n in 0..4 {
        let backend = backend.clone();
        workers.spawn(async move {
            let h = header(&format!("worker-{n}"));
            for t in 0..5u32 {
                backend
                    .append(&h, &turn(u64::from(t) * 8, t + 1))
                    .await
                    .unwrap();
            }
        });
    }
    while let Some(done) = workers.join_next().await {
        done.unwrap();
    }
    let fresh = F::open(&s.dir);
    for n in 0..4 {
        let events = fresh
            .load(&id(&format!("worker-{n}")))
            .await
            .unwrap()
            .events;
        let expected: Vec<Event> = (0..5u32)
            .flat_map(|t| turn(u64::from(t) * 8, t + 1))
            .collect();
        assert_eq!(events, expected);
    }
}
