//! Session metadata (title, archived) and deleting a session, for every backend.

use super::*;
use crate::persistence::{Order, PageQuery};
use dsh_session::SessionMeta;

macro_rules! contract {
    ($($test:ident),* $(,)?) => {
        mod jsonl_meta {
            $( #[tokio::test] async fn $test() { super::$test::<super::Jsonl>().await; } )*
        }
        mod sqlite_meta {
            $( #[tokio::test] async fn $test() { super::$test::<super::Sqlite>().await; } )*
        }
        mod postgres_meta {
            $( #[tokio::test] async fn $test() { super::$test::<super::Postgres>().await; } )*
        }
    };
}

contract!(
    metas_of_a_page_answer_as_meta_does,
    metadata_travels_in_the_log,
    delete_removes_the_session_and_nothing_else,
    missing_sessions_are_not_found,
);

async fn listed_ids(backend: &dyn Persistence) -> Vec<String> {
    let page = backend
        .list_page(&PageQuery {
            after: None,
            limit: 100,
            order: Order::OldestFirst,
            cwd: None,
            host: None,
        })
        .await
        .unwrap();
    page.headers
        .iter()
        .map(|h| h.id.as_str().to_owned())
        .collect()
}

/// `metas` (one call for a listing's page) answers for each session what `meta` does: a title
/// set by hand, an archived session, a title from the first prompt, one from a prompt past the
/// first few (their text has no title), and nothing for a session not stored.
async fn metas_of_a_page_answer_as_meta_does<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let plain = header("plain");
    backend.append(&plain, &turn(0, 1)).await.unwrap();
    let named = header("named");
    backend.append(&named, &turn(0, 1)).await.unwrap();
    backend.set_title(&named.id, "By hand").await.unwrap();
    backend.set_archived(&named.id, true).await.unwrap();
    let late = header("late");
    let mut events = Vec::new();
    for n in 1..=6u32 {
        let mut data = turn_data(n);
        if let EventData::UserMessage { message } = &mut data[2] {
            message.text = if n < 6 {
                " \n".to_owned()
            } else {
                "the sixth".to_owned()
            };
        }
        events.extend(events_from(events.len() as u64, data));
    }
    backend.append(&late, &events).await.unwrap();
    let ids = [plain.id, named.id, late.id, id("never-stored")];
    let metas = backend.metas(&ids).await.unwrap();
    assert_eq!(metas.len(), 3, "{metas:?}");
    for id in &ids[..3] {
        let one = backend.meta(id).await.unwrap().unwrap();
        assert_eq!(metas[id].as_ref().unwrap(), &one, "{id}");
    }
    assert_eq!(
        metas[&ids[1]].as_ref().unwrap().title.as_deref(),
        Some("By hand")
    );
    assert!(metas[&ids[1]].as_ref().unwrap().archived);
    assert_eq!(
        metas[&ids[2]].as_ref().unwrap().title.as_deref(),
        Some("the sixth")
    );
}

async fn metadata_travels_in_the_log<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let h = header("meta");
    backend.append(&h, &turn(0, 1)).await.unwrap();
    assert_eq!(
        backend.meta(&h.id).await.unwrap(),
        Some(SessionMeta {
            title: Some("prompt 1 \u{fc} \"quoted\"".to_owned()),
            archived: false,
        }),
        "the title is the first prompt's first line"
    );
    backend.set_title(&h.id, "Named by hand").await.unwrap();
    backend.set_archived(&h.id, true).await.unwrap();
    assert_eq!(backend.stored_len(&h.id).await.unwrap(), Some(10));
    let stored = backend.inspect(&h.id).await.unwrap();
    assert_eq!(
        stored.events[8].data,
        EventData::SessionTitle {
            title: "Named by hand".to_owned()
        }
    );
    assert_eq!(
        stored.events[9].data,
        EventData::SessionArchived { archived: true }
    );
    // A fresh instance reads the same from the store alone.
    let again = F::open(&s.dir);
    let expected = SessionMeta {
        title: Some("Named by hand".to_owned()),
        archived: true,
    };
    assert_eq!(again.meta(&h.id).await.unwrap(), Some(expected.clone()));
    // Appends go on after the metadata events, and resuming keeps them.
    again.append(&h, &turn(10, 2)).await.unwrap();
    let loaded = again.load(&h.id).await.unwrap();
    assert_eq!(loaded.events.len(), 18);
    assert_eq!(SessionMeta::of(&loaded.header, &loaded.events), expected);
    again.set_archived(&h.id, false).await.unwrap();
    assert!(!F::open(&s.dir).meta(&h.id).await.unwrap().unwrap().archived);
}

async fn delete_removes_the_session_and_nothing_else<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let gone = header("gone");
    let kept = header("kept");
    backend.append(&gone, &turn(0, 1)).await.unwrap();
    backend.append(&kept, &turn(0, 1)).await.unwrap();
    // A torn tail set aside by a load is derived from the log: it goes with it.
    if F::tear(&s.dir, &gone).is_some() {
        let loaded = backend.load(&gone.id).await.unwrap();
        assert!(!loaded.repairs.is_empty());
    }
    let kept_before = backend.inspect(&kept.id).await.unwrap();
    assert_eq!(listed_ids(backend.as_ref()).await, ["gone", "kept"]);

    backend.delete(&gone.id).await.unwrap();

    for b in [backend.clone(), F::open(&s.dir)] {
        assert!(matches!(
            b.inspect(&gone.id).await,
            Err(PersistenceError::NotFound(_))
        ));
        assert!(matches!(
            b.load(&gone.id).await,
            Err(PersistenceError::NotFound(_))
        ));
        assert_eq!(b.header(&gone.id).await.unwrap(), None);
        assert_eq!(b.stored_len(&gone.id).await.unwrap(), None);
        assert_eq!(b.meta(&gone.id).await.unwrap(), None);
        assert_eq!(b.list().await.unwrap(), vec![kept.clone()]);
        assert_eq!(listed_ids(b.as_ref()).await, ["kept"]);
        assert_eq!(b.inspect(&kept.id).await.unwrap(), kept_before);
        assert!(matches!(
            b.delete(&gone.id).await,
            Err(PersistenceError::NotFound(_))
        ));
    }
    // The id can be used again from scratch.
    backend.append(&gone, &turn(0, 1)).await.unwrap();
    assert_eq!(backend.stored_len(&gone.id).await.unwrap(), Some(8));
}

async fn missing_sessions_are_not_found<F: Fixture>() {
    let s = scratch();
    let backend = F::open(&s.dir);
    let h = header("never");
    assert_eq!(backend.meta(&h.id).await.unwrap(), None);
    assert!(matches!(
        backend.set_title(&h.id, "x").await,
        Err(PersistenceError::NotFound(_))
    ));
    assert!(matches!(
        backend.set_archived(&h.id, true).await,
        Err(PersistenceError::NotFound(_))
    ));
    assert!(matches!(
        backend.delete(&h.id).await,
        Err(PersistenceError::NotFound(_))
    ));
    assert!(
        listing(&s.dir).is_empty(),
        "a refused call on a missing session creates nothing"
    );
}

/// Deleting a JSONL session removes its log and what was set aside from it, and leaves a file
/// dshd did not write (and so the directory holding it) in place.
#[tokio::test]
async fn jsonl_delete_leaves_files_it_did_not_write() {
    let s = scratch();
    let backend = Jsonl::open(&s.dir);
    let h = header("foreign");
    backend.append(&h, &turn(0, 1)).await.unwrap();
    Jsonl::tear(&s.dir, &h);
    backend.load(&h.id).await.unwrap();
    let log = jsonl::log_path(&jsonl_root(&s.dir), &h);
    let dir = log.parent().unwrap().to_owned();
    let names = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    assert_eq!(names(&dir).len(), 2, "the log and its torn tail");
    fs::write(dir.join("notes.txt"), "mine").unwrap();
    backend.delete(&h.id).await.unwrap();
    assert_eq!(names(&dir), ["notes.txt"]);

    let other = header("plain");
    backend.append(&other, &turn(0, 1)).await.unwrap();
    let other_dir = jsonl::log_path(&jsonl_root(&s.dir), &other)
        .parent()
        .unwrap()
        .to_owned();
    backend.delete(&other.id).await.unwrap();
    assert!(!other_dir.exists(), "an emptied session directory goes too");
}
