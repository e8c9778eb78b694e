//! `ListSessions` in pages over the real socket: 10,000 stored sessions walked page by page, both
//! ways, while new sessions are created — by a client of its own the whole time, and by the test
//! between pages — with no session listed twice and none of the stored ones skipped; and the
//! refusals of bad pages.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dsh_client::Client;
use dsh_core::{SessionHeader, SessionId};
use dsh_tests::{DaemonSpec, TestDaemon, private_dir, seed};

use super::*;

const STORED: usize = 10_000;
const PAGE: u32 = 500;

/// 10,000 sessions in five cwds, created over the last days, a few per millisecond (ties are
/// broken by id).
fn stored_sessions(work: &Path) -> Vec<(SessionHeader, Vec<dsh_core::Event>)> {
    let base = dsh_core::now_ms() - 10 * 24 * 3600 * 1000;
    (0..STORED)
        .map(|n| {
            let cwd = work.join(format!("p{}", n % 5));
            let at = base + i64::try_from(n / 3).unwrap();
            let header = SessionHeader::new(SessionId::new_v7(), cwd, at);
            (header, seed::short_turn(0, 1, at))
        })
        .collect()
}

fn scripted() -> Option<v1::ModelSpec> {
    Some(v1::ModelSpec {
        provider: "scripted".into(),
        script_json: r#"{"replies": [{"text": "ok"}]}"#.into(),
        reasoning_effort: String::new(),
        ..v1::ModelSpec::default()
    })
}

/// Creates an agent; with `store`, prompts it once and closes it, so its session is stored and no
/// longer live.
async fn new_session(client: &Client, cwd: &Path, store: bool) -> String {
    let mut agents = client.agents();
    let id = agents
        .create(v1::CreateAgentRequest {
            cwd: cwd.display().to_string(),
            model: scripted(),
            ..v1::CreateAgentRequest::default()
        })
        .await
        .unwrap()
        .into_inner()
        .agent_id;
    if store {
        let mut stream = agents
            .prompt(v1::PromptRequest {
                agent_id: id.clone(),
                text: "go".into(),
            })
            .await
            .unwrap()
            .into_inner();
        while stream.message().await.unwrap().is_some() {}
        agents
            .close(v1::CloseAgentRequest {
                agent_id: id.clone(),
            })
            .await
            .unwrap();
    }
    id
}

async fn page(
    client: &Client,
    order: v1::SessionOrder,
    token: &str,
) -> Result<v1::ListSessionsResponse, tonic::Status> {
    client
        .persistence()
        .list_sessions(v1::ListSessionsRequest {
            page_size: Some(PAGE),
            page_token: token.to_owned(),
            order: order as i32,
            cwd: String::new(),
            include_archived: false,
            host: String::new(),
        })
        .await
        .map(tonic::Response::into_inner)
}

async fn walk_while_creating(
    spec: DaemonSpec,
    seed_store: impl FnOnce(&Path, &[(SessionHeader, Vec<dsh_core::Event>)]),
) {
    let dir = private_dir();
    let work = dir.path().join("work");
    for n in 0..5 {
        std::fs::create_dir_all(work.join(format!("p{n}"))).unwrap();
    }
    let sessions = stored_sessions(&work);
    seed_store(&dir.path().join("home"), &sessions);
    let stored: HashSet<String> = sessions
        .iter()
        .map(|(h, _)| h.id.as_str().to_owned())
        .collect();
    let daemon = TestDaemon::spawn(spec, dir);
    daemon.wait_ready();
    let client = daemon.client().await;

    // Another client creates and stores sessions the whole time.
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    let creator = {
        let (client, stop, created, cwd) = (
            client.clone(),
            stop.clone(),
            created.clone(),
            work.join("p0"),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                new_session(&client, &cwd, true).await;
                created.fetch_add(1, Ordering::SeqCst);
            }
        })
    };

    for order in [v1::SessionOrder::NewestFirst, v1::SessionOrder::OldestFirst] {
        let mut seen: Vec<(i64, String, bool)> = Vec::new();
        let mut between_pages: Vec<String> = Vec::new();
        let mut token = String::new();
        let mut pages = 0;
        loop {
            let listed = page(&client, order, &token).await.unwrap();
            assert!(listed.sessions.len() <= PAGE as usize);
            assert_eq!(
                listed.others.is_empty(),
                pages > 0,
                "others are counted on the first page only"
            );
            pages += 1;
            seen.extend(listed.sessions.iter().map(|s| {
                let h = s.header.clone().unwrap();
                (h.created_at_ms, h.id, s.live)
            }));
            if listed.next_page_token.is_empty() {
                break;
            }
            token = listed.next_page_token;
            // A session created now is newer than every session listed so far; alternately left
            // live (listed from memory) and stored.
            let cwd = work.join(format!("p{}", pages % 5));
            between_pages.push(new_session(&client, &cwd, pages % 2 == 0).await);
        }
        assert!(pages >= STORED / PAGE as usize, "{pages} pages");

        let ids: Vec<&String> = seen.iter().map(|(_, id, _)| id).collect();
        let unique: HashSet<&String> = ids.iter().copied().collect();
        assert_eq!(
            unique.len(),
            ids.len(),
            "{order:?}: a session was listed twice"
        );
        let skipped = stored.iter().filter(|id| !unique.contains(id)).count();
        assert_eq!(
            skipped, 0,
            "{order:?}: {skipped} stored sessions were skipped"
        );
        let keys: Vec<(i64, &String)> = seen.iter().map(|(at, id, _)| (*at, id)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        if order == v1::SessionOrder::NewestFirst {
            sorted.reverse();
        }
        assert!(keys == sorted, "{order:?}: pages are out of order");
        match order {
            // Sessions created during the walk sort before the cursor: none is listed later.
            v1::SessionOrder::NewestFirst => {
                let late: Vec<_> = between_pages
                    .iter()
                    .filter(|id| unique.contains(id))
                    .collect();
                assert!(
                    late.is_empty(),
                    "listed after the cursor had passed them: {late:?}"
                );
            }
            // ... and after it oldest first: every one is listed, once, the live ones as live.
            v1::SessionOrder::OldestFirst => {
                for (n, id) in between_pages.iter().enumerate() {
                    let listed = seen.iter().find(|(_, s, _)| s == id);
                    let live = listed
                        .unwrap_or_else(|| panic!("{id} created mid-walk was skipped"))
                        .2;
                    assert_eq!(live, n % 2 == 0, "{id}");
                }
            }
        }
    }
    stop.store(true, Ordering::SeqCst);
    creator.await.unwrap();
    eprintln!(
        "another client created {} sessions during the walks",
        created.load(Ordering::SeqCst)
    );
}

/// Slow (ten thousand stored sessions; 29 s on the shared 2-core machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_jsonl_sessions_page_without_gap_or_duplicate_while_sessions_are_created() {
    walk_while_creating(DaemonSpec::default(), |home, sessions| {
        seed::jsonl(&home.join("sessions"), sessions);
    })
    .await;
}

/// Slow (ten thousand stored sessions; 9 s on the shared 2-core machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_sqlite_sessions_page_without_gap_or_duplicate_while_sessions_are_created() {
    let spec = DaemonSpec {
        args: vec!["--persistence".into(), "sqlite".into()],
        ..DaemonSpec::default()
    };
    walk_while_creating(spec, |home, sessions| {
        std::fs::create_dir_all(home).unwrap();
        seed::sqlite(&home.join("sessions.sqlite3"), sessions);
    })
    .await;
}

#[tokio::test]
async fn bad_pages_are_refused_naming_the_field() {
    let daemon = TestDaemon::start();
    let client = daemon.client().await;
    let work = daemon.workdir("w");
    for n in 0..3 {
        new_session(&client, &work, n == 0).await;
    }
    let ask = |request: v1::ListSessionsRequest| {
        let client = client.clone();
        async move { client.persistence().list_sessions(request).await }
    };
    let first = ask(v1::ListSessionsRequest {
        page_size: Some(2),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner();
    assert_eq!(first.sessions.len(), 2);
    assert!(!first.next_page_token.is_empty());
    let cases = [
        (Some(0), String::new(), 0, String::new(), "page_size: "),
        (Some(1001), String::new(), 0, String::new(), "page_size: "),
        (None, "garbage".into(), 0, String::new(), "page_token: "),
        (
            None,
            format!("{}0", first.next_page_token),
            0,
            String::new(),
            "page_token: ",
        ),
        // A token of a newest-first listing asked oldest first, or for one cwd.
        (
            None,
            first.next_page_token.clone(),
            1,
            String::new(),
            "page_token: ",
        ),
        (
            None,
            first.next_page_token.clone(),
            0,
            work.display().to_string(),
            "page_token: ",
        ),
        (None, String::new(), 9, String::new(), "order: "),
        (None, String::new(), 0, "relative/dir".into(), "cwd: "),
    ];
    for (page_size, page_token, order, cwd, field) in cases {
        let status = ask(v1::ListSessionsRequest {
            page_size,
            page_token: page_token.clone(),
            order,
            cwd,
            include_archived: false,
            host: String::new(),
        })
        .await
        .unwrap_err();
        assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{page_token:?}"
        );
        assert!(status.message().starts_with(field), "{status:?}");
    }
    // The token works with the query it came from: the rest is the third session.
    let rest = ask(v1::ListSessionsRequest {
        page_size: Some(2),
        page_token: first.next_page_token,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner();
    assert_eq!(rest.sessions.len(), 1);
    assert!(rest.next_page_token.is_empty());

    // dshctl pages too: one page with a hint, or every page with --all.
    let one = daemon.dshctl_json(&["session", "list", "--page-size", "1"]);
    assert_eq!(one["sessions"].as_array().unwrap().len(), 1);
    let token = one["next_page_token"].as_str().unwrap().to_owned();
    let next = daemon.dshctl_json(&[
        "session",
        "list",
        "--page-size",
        "1",
        "--page-token",
        &token,
    ]);
    assert_ne!(next["sessions"][0], one["sessions"][0]);
    let all = daemon.dshctl_json(&["session", "list", "--page-size", "1", "--all"]);
    assert_eq!(all["sessions"].as_array().unwrap().len(), 3);
    assert_eq!(all["next_page_token"], "");
    let human = daemon.dshctl(&["session", "list", "--page-size", "2"]);
    let text = String::from_utf8(human.stdout).unwrap();
    assert!(
        text.lines()
            .next()
            .unwrap()
            .ends_with("2 sessions on this page"),
        "{text}"
    );
    assert!(
        text.contains("more: dshctl session list --page-token "),
        "{text}"
    );
    let bad = daemon.dshctl(&["session", "list", "--page-size", "0"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("page_size"),
        "{bad:?}"
    );
}
