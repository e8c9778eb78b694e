//! Context compaction against the repository's mock of an OpenAI-compatible API with a context
//! window (`dsh_testkit::count_tokens`: a token per four bytes of request body; a longer request
//! is refused as DeepSeek refuses one): a long turn keeps working, every original output stays in
//! the log, an overflow is recovered once, `compaction.auto = false` and a summary that does not
//! shrink end clearly, and a resumed or forked session sends what the live agent would.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use dsh_testkit::{
    DONE, End, Mock, Recorded, Reply, finish, text_delta, tool_call_stream, usage_event,
};
use dsh_tests::TestDaemon;
use serde_json::{Value, json};

use crate::openai::{daemon, new_agent};

/// The words every summary request of dsh starts with (docs/CONTRACTS.md §7.1).
const SUMMARY_REQUEST: &str = "Compact the conversation so far";

/// The words a summary is sent after, in the history that replaces the older messages.
const SUMMARY_PREFIX: &str = "The conversation so far was compacted";

/// The instructions file the agents below work under.
const RULE: &str = "Project rule: keep every answer short.";

/// The user-role texts of a chat request, in order.
fn user_texts(request: &Recorded) -> Vec<String> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Whether `request` is one of dsh's summary requests.
fn is_summary_request(request: &Recorded) -> bool {
    user_texts(request)
        .last()
        .is_some_and(|t| t.contains(SUMMARY_REQUEST))
}

fn chat_requests(mock: &Mock) -> Vec<Recorded> {
    mock.requests()
        .into_iter()
        .filter(|r| r.path == "/chat/completions")
        .collect()
}

/// A reply streaming `pieces`, reporting `request`'s size as its prompt tokens (as the API
/// does).
fn reply(request: &Recorded, mut pieces: Vec<String>) -> Reply {
    pieces.push(usage_event(request.tokens(), 20, 0));
    pieces.push(DONE.into());
    Reply::Stream {
        pieces,
        end: End::Complete,
    }
}

fn text(request: &Recorded, words: &str) -> Reply {
    reply(request, vec![text_delta(words), finish("stop")])
}

/// A model that calls `bash` `steps` times, each printing `bytes` bytes, then says "Done.";
/// a summary request is answered by `summary`.
fn model(
    steps: u32,
    bytes: usize,
    summary: impl Fn(&Recorded) -> String + Send + Sync + 'static,
) -> impl Fn(&Recorded) -> Reply + Send + Sync + 'static {
    let calls = Arc::new(AtomicU32::new(0));
    move |request| {
        if is_summary_request(request) {
            return text(request, &summary(request));
        }
        let n = calls.fetch_add(1, Ordering::SeqCst);
        if n >= steps {
            return text(request, "Done.");
        }
        let command = format!("head -c {bytes} /dev/zero | tr '\\0' x; echo; echo step-{n}");
        let arguments = json!({ "command": command }).to_string();
        reply(
            request,
            tool_call_stream(&format!("call_{n}"), "bash", &[&arguments]),
        )
    }
}

/// A daemon on `mock` whose model's context holds `window` tokens (told to dshd as well), and a
/// repository with an `AGENTS.md`; the agent's id and the daemon.
fn setup(mock: &Mock, window: u64, extra: &str) -> (TestDaemon, String) {
    mock.set_context_window(window);
    let daemon = daemon(
        mock,
        true,
        &format!("context_window = {window}\n[agent]\nmax_steps_per_turn = 400\n{extra}"),
    );
    let repo = daemon.dir.path().join("repo");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::write(repo.join("AGENTS.md"), format!("{RULE}\n")).unwrap();
    let agent = new_agent(&daemon, &repo);
    (daemon, agent)
}

/// `dshctl --json ARGS` off the runtime the mock serves on: its exit status and its lines.
async fn dshctl(daemon: &TestDaemon, args: &[&str]) -> (bool, Vec<Value>) {
    let socket = daemon.socket.clone();
    let mut full = vec!["--json".to_owned()];
    full.extend(args.iter().map(|a| (*a).to_owned()));
    let out = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = full.iter().map(String::as_str).collect();
        dsh_tests::dshctl_at(&socket, &args)
    })
    .await
    .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out.status.success(), lines)
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The turn's end in a prompt's lines.
fn turn_end(lines: &[Value]) -> &Value {
    &of_type(lines, "turn/end")
        .last()
        .unwrap_or_else(|| panic!("no turn/end in {lines:?}"))["data"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_300_step_turn_whose_outputs_are_ten_windows_completes_within_the_window() {
    // 300 outputs of 4,000 bytes are 300,000 tokens by the mock's rule: ten windows.
    let window = 30_000;
    let mock = Mock::start_with(model(300, 4_000, |_| {
        "Summary: the task is to print 300 blocks; blocks printed so far are done.".into()
    }))
    .await;
    let (daemon, agent) = setup(&mock, window, "");
    let (ok, lines) = dshctl(&daemon, &["prompt", "--agent", &agent, "print 300 blocks"]).await;
    assert!(ok, "{}", turn_end(&lines));
    assert_eq!(turn_end(&lines)["reason"]["kind"], "completed");

    let requests = chat_requests(&mock);
    assert!(requests.len() > 301, "{} requests", requests.len());
    for request in &requests {
        assert!(
            request.tokens() <= window,
            "a request of {} tokens passed the window",
            request.tokens()
        );
    }
    // After a compaction with a summary, the request carries the instructions, the newest
    // prompt and the summary, in that order.
    let after: Vec<_> = requests
        .iter()
        .filter(|r| !is_summary_request(r))
        .filter(|r| user_texts(r).iter().any(|t| t.starts_with(SUMMARY_PREFIX)))
        .collect();
    assert!(!after.is_empty(), "no request after a summary");
    for request in after {
        let users = user_texts(request);
        let at = |f: &dyn Fn(&String) -> bool| users.iter().position(f).unwrap();
        let rule = at(&|t| t.contains(RULE));
        let prompt = at(&|t| t == "print 300 blocks");
        let summary = at(&|t| t.starts_with(SUMMARY_PREFIX));
        assert!(rule < prompt && prompt < summary, "{users:?}");
        assert!(users[summary].contains("Summary: the task is to print 300 blocks"));
    }

    // The log holds every original output, whole, and the compactions that shortened them.
    let (_, events) = dshctl(&daemon, &["session", "events", &agent]).await;
    let results = of_type(&events, "tool/result");
    assert_eq!(results.len(), 300);
    for (n, result) in results.iter().enumerate() {
        let content = result["data"]["content"].as_str().unwrap();
        assert!(content.contains(&"x".repeat(4_000)), "output {n} is whole");
        assert!(
            content.contains(&format!("step-{n}")),
            "output {n}: {content:.80}"
        );
    }
    let ends = of_type(&events, "compaction/end");
    assert!(ends.len() >= 2, "{} compactions", ends.len());
    assert!(
        ends.iter()
            .all(|e| e["data"]["trigger"] == "auto" && e["data"]["error"].is_null())
    );
    assert!(ends.iter().any(|e| e["data"]["summary"].is_string()));
    assert_eq!(of_type(&events, "compaction/start").len(), ends.len());

    // `agent show` says how full the context is, of which window.
    let shown = tokio::task::spawn_blocking(move || {
        let shown = daemon.dshctl_json(&["agent", "show", &agent]);
        drop(daemon);
        shown
    })
    .await
    .unwrap();
    assert_eq!(shown["context_window"], window);
    let used = shown["context_tokens"].as_u64().unwrap();
    assert!(used > 0 && used <= window, "{shown}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_automatic_compaction_off_an_overflow_ends_the_turn_naming_the_setting() {
    let mock = Mock::start_with(model(300, 4_000, |_| {
        unreachable!("no summary is asked for")
    }))
    .await;
    let (daemon, agent) = setup(&mock, 8_000, "[compaction]\nauto = false\n");
    let (ok, lines) = dshctl(&daemon, &["prompt", "--agent", &agent, "print 300 blocks"]).await;
    assert!(!ok);
    let end = turn_end(&lines);
    assert_eq!(end["reason"]["kind"], "error", "{end}");
    let message = end["reason"]["message"].as_str().unwrap();
    assert!(
        message.contains("context window") && message.contains("compaction.auto = false"),
        "{message}"
    );
    assert!(
        message.contains("maximum context length is 8000 tokens"),
        "{message}"
    );
    assert!(of_type(&lines, "compaction/start").is_empty());
}

/// A Claude Code PreCompact hook that blocks (exit 2, as its reference allows): the automatic
/// compactions the threshold asks for are skipped and the requests go uncompacted, until the
/// provider refuses one as too long; that compaction is blocked too, and the turn ends with the
/// hook's reason. No summary is ever asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_compact_hook_that_blocks_skips_compaction_until_the_window_is_full() {
    let window = 10_000;
    let mock = Mock::start_with(model(300, 4_000, |_| {
        unreachable!("no summary is asked for")
    }))
    .await;
    let hooks = dsh_tests::private_dir();
    let script = hooks.path().join("hold.sh");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat > /dev/null\necho 'a release build is reading the transcript' >&2\nexit 2\n",
    )
    .unwrap();
    let mut mode = std::fs::metadata(&script).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut mode, 0o755);
    std::fs::set_permissions(&script, mode).unwrap();
    let file = hooks.path().join("hooks.json");
    let hook = json!({"hooks": {"PreCompact": [{"matcher": "auto", "hooks": [
        {"type": "command", "command": script.to_str().unwrap()}
    ]}]}});
    std::fs::write(&file, hook.to_string()).unwrap();
    let (daemon, agent) = setup(
        &mock,
        window,
        &format!("[hooks]\nclaude_code = [{:?}]\n", file.to_str().unwrap()),
    );
    let (ok, lines) = dshctl(&daemon, &["prompt", "--agent", &agent, "print 300 blocks"]).await;
    assert!(!ok);
    let end = turn_end(&lines);
    assert_eq!(end["reason"]["kind"], "error", "{end}");
    let message = end["reason"]["message"].as_str().unwrap();
    assert!(
        message.contains("a PreCompact hook blocked it: a release build is reading the transcript"),
        "{message}"
    );

    let requests = chat_requests(&mock);
    assert!(!requests.iter().any(is_summary_request));
    // Past the threshold (80%), requests still went, uncompacted, while they fitted.
    assert!(
        requests
            .iter()
            .any(|r| r.tokens() * 100 > window * 80 && r.tokens() <= window),
        "no request past the threshold went out"
    );
    let (_, events) = dshctl(&daemon, &["session", "events", &agent]).await;
    let ends = of_type(&events, "compaction/end");
    assert!(ends.len() >= 2, "{} compactions", ends.len());
    for end in &ends {
        assert!(end["data"]["summary"].is_null(), "{end}");
        let error = end["data"]["error"].as_str().unwrap();
        assert!(error.contains("a release build"), "{error}");
    }
    // Nothing was shortened: every output is sent whole.
    assert!(
        ends.iter()
            .all(|e| e["data"]["pruned"].as_array().is_none_or(Vec::is_empty)),
        "{ends:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_is_compacted_and_asked_once_more() {
    // dshd is told nothing of the window (an unknown model): only the refusal says it is full.
    let refused = Arc::new(AtomicU32::new(0));
    let seen = refused.clone();
    let inner = model(8, 3_000, |_| "Summary: blocks printed.".into());
    let mock = Mock::start_with(move |request| {
        let steps = request.body["messages"].as_array().unwrap().len();
        // The sixth step's request is refused, once, as too long for a 4,000-token window.
        if !is_summary_request(request)
            && steps > 12
            && seen
                .compare_exchange(0, 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        {
            return dsh_testkit::context_exceeded(4_000, request.tokens());
        }
        inner(request)
    })
    .await;
    let daemon = daemon(&mock, true, "model = \"mock-model\"\n");
    let repo = daemon.dir.path().join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let agent = new_agent(&daemon, &repo);
    let (ok, lines) = dshctl(&daemon, &["prompt", "--agent", &agent, "print blocks"]).await;
    assert!(ok, "{}", turn_end(&lines));
    assert_eq!(refused.load(Ordering::SeqCst), 1, "refused once");
    let ends = of_type(&lines, "compaction/end");
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert!(ends[0]["data"]["error"].is_null(), "{}", ends[0]);
    // The request asked again after the compaction is smaller than the refused one.
    let requests = chat_requests(&mock);
    let at = requests
        .iter()
        .position(|r| !is_summary_request(r) && r.body["messages"].as_array().unwrap().len() > 12)
        .unwrap();
    let retried = requests[at + 1..]
        .iter()
        .find(|r| !is_summary_request(r))
        .unwrap();
    assert!(retried.tokens() < requests[at].tokens());
}

/// A daemon whose agent has run one turn of `steps` steps; the summary requests are answered by
/// `summary`.
async fn after_a_turn(
    steps: u32,
    summary: impl Fn(&Recorded) -> String + Send + Sync + 'static,
) -> (Mock, TestDaemon, String) {
    let mock = Mock::start_with(model(steps, 3_000, summary)).await;
    let (daemon, agent) = setup(&mock, 100_000, "");
    let (ok, lines) = dshctl(&daemon, &["prompt", "--agent", &agent, "print blocks"]).await;
    assert!(ok, "{}", turn_end(&lines));
    (mock, daemon, agent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dshctl_compact_sends_its_instructions_to_the_summary_request() {
    let (mock, daemon, agent) = after_a_turn(6, |_| "Summary: six blocks printed.".into()).await;
    let (ok, lines) = dshctl(&daemon, &["compact", &agent, "keep the block numbers"]).await;
    assert!(ok, "{lines:?}");
    assert_eq!(turn_end(&lines)["reason"]["kind"], "completed");
    let start = of_type(&lines, "compaction/start");
    assert_eq!(start[0]["data"]["trigger"], "manual");
    assert_eq!(start[0]["data"]["instructions"], "keep the block numbers");
    let end = &of_type(&lines, "compaction/end")[0]["data"];
    assert_eq!(end["summary"], "Summary: six blocks printed.");
    assert!(
        end["tokensAfter"].as_u64().unwrap() < end["tokensBefore"].as_u64().unwrap(),
        "{end}"
    );
    let asked = chat_requests(&mock)
        .into_iter()
        .filter(is_summary_request)
        .collect::<Vec<_>>();
    assert_eq!(asked.len(), 1);
    assert!(
        user_texts(&asked[0])
            .last()
            .unwrap()
            .contains("Instructions for this summary: keep the block numbers")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_summary_that_does_not_shrink_the_history_is_refused() {
    let (_mock, daemon, agent) = after_a_turn(4, |_| "y".repeat(200_000)).await;
    let (ok, lines) = dshctl(&daemon, &["compact", &agent]).await;
    assert!(!ok);
    let end = &of_type(&lines, "compaction/end")[0]["data"];
    let error = end["error"].as_str().unwrap();
    assert!(error.contains("did not shrink the history"), "{error}");
    let reason = &turn_end(&lines)["reason"];
    assert_eq!(reason["kind"], "error");
    assert!(
        reason["message"]
            .as_str()
            .unwrap()
            .contains("did not shrink"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_and_fork_after_a_compaction_send_what_the_live_agent_would() {
    let (mock, daemon, agent) = after_a_turn(6, |_| "Summary: six blocks printed.".into()).await;
    let (ok, _) = dshctl(&daemon, &["compact", &agent]).await;
    assert!(ok);
    let (_, events) = dshctl(&daemon, &["session", "events", &agent]).await;
    let fork_at = of_type(&events, "turn/end").last().unwrap()["seq"]
        .as_u64()
        .unwrap()
        .to_string();
    // The live agent's next request.
    let (ok, _) = dshctl(&daemon, &["prompt", "--agent", &agent, "and now?"]).await;
    assert!(ok);
    let messages = |r: &Recorded| r.body["messages"].as_array().unwrap().clone();
    let live = messages(chat_requests(&mock).last().unwrap());
    // Resumed after a close: the same history, then the new prompt.
    assert!(dshctl(&daemon, &["agent", "close", &agent]).await.0);
    assert!(dshctl(&daemon, &["agent", "resume", &agent]).await.0);
    let (ok, _) = dshctl(&daemon, &["prompt", "--agent", &agent, "again?"]).await;
    assert!(ok);
    let resumed = messages(chat_requests(&mock).last().unwrap());
    assert_eq!(
        resumed[..live.len()],
        live[..],
        "the resumed history starts as the live one"
    );
    // A fork at the compaction turn's end sends the live history up to that prompt.
    let (ok, forked) = dshctl(&daemon, &["agent", "fork", &agent, "--at", &fork_at]).await;
    assert!(ok, "{forked:?}");
    let fork = forked[0]["agent_id"].as_str().unwrap().to_owned();
    let (ok, _) = dshctl(&daemon, &["prompt", "--agent", &fork, "and now?"]).await;
    assert!(ok);
    let from_fork = messages(chat_requests(&mock).last().unwrap());
    assert_eq!(from_fork, live, "the fork sends what the live agent sent");
}
