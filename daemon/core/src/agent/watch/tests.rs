//! Watchers against real agents: a registry of scripted agents over a JSONL store in a temporary
//! directory, with the standard tools (bash runs for real).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::agent::openai::{OpenAiConfig, OpenAiProvider};
use crate::agent::{
    AgentRegistry, AgentServices, AgentStatus, ApprovalAnswer, ApprovalSettings, CheckpointPolicy,
    ModelChoice, ProviderFactory,
};
use crate::exec::{ExecConfig, Executor};
use crate::hooks::{HookSettings, Hooks};
use crate::persistence::{BackendKind, PersistenceHandle};
use crate::shell::Shell;
use crate::shell_env::ShellEnvRegistry;
use crate::skills::Skills;
use crate::tools::ToolSet;
use dsh_session::{ApprovalPolicy, ApprovalVerdict};

struct World {
    registry: Arc<AgentRegistry>,
    dir: tempfile::TempDir,
}

fn world(configure: impl FnOnce(&mut AgentServices)) -> World {
    let dir = tempfile::tempdir().unwrap();
    let backend =
        crate::persistence::open(BackendKind::Jsonl, dir.path().join("sessions")).unwrap();
    let persistence = Arc::new(PersistenceHandle::new(backend));
    let executor = Arc::new(
        Executor::new(ExecConfig {
            spill_dir: dir.path().join("spill"),
            ..ExecConfig::default()
        })
        .unwrap(),
    );
    let hooks = Arc::new(Hooks::new(
        HookSettings::default(),
        executor.clone(),
        persistence.clone(),
    ));
    let skills = Arc::new(Skills::new(dir.path()));
    let shell = Shell::new(
        executor.clone(),
        ShellEnvRegistry::new(dir.path().to_owned(), Duration::from_secs(2)),
    );
    let openai = OpenAiProvider::new(OpenAiConfig::default(), None).unwrap();
    let providers = ProviderFactory::new("scripted".into(), None, openai);
    let registry = AgentRegistry::new(providers, |children| {
        let mut services = AgentServices::new(
            persistence,
            executor,
            hooks,
            skills,
            CheckpointPolicy::Step,
            50,
            ToolSet::standard(&shell, children),
        );
        configure(&mut services);
        services
    });
    World { registry, dir }
}

fn scripted(script: &Value) -> ModelChoice {
    ModelChoice {
        provider: Some("scripted".into()),
        model: None,
        reasoning_effort: None,
        script: Some(script.to_string()),
    }
}

impl World {
    fn agent(&self, script: &Value, approval: Option<ApprovalPolicy>) -> SessionId {
        self.registry
            .create(
                self.dir.path(),
                &scripted(script),
                crate::sandbox::SandboxPolicy::UNCONFINED,
                approval,
            )
            .unwrap()
            .id()
            .clone()
    }
}

/// Everything a turn's stream hands out, to its end.
async fn drain(mut watcher: Watcher) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    while let Some(event) = watcher.recv().await {
        out.push(event);
    }
    out
}

/// Reads `watcher` until `last` holds for an event (inclusive).
async fn read_until(
    watcher: &mut Watcher,
    last: impl Fn(&StreamEvent) -> bool,
) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), watcher.recv())
            .await
            .expect("the watcher stalled")
            .expect("the watcher ended");
        let stop = last(&event);
        out.push(event);
        if stop {
            return out;
        }
    }
}

fn logged(events: &[StreamEvent]) -> Vec<(String, u64, String, String)> {
    events
        .iter()
        .filter_map(|e| {
            Some((
                e.session.to_string(),
                e.seq?,
                e.kind.to_string(),
                e.data_json.clone(),
            ))
        })
        .collect()
}

fn is_turn_end(of: &SessionId) -> impl Fn(&StreamEvent) -> bool + '_ {
    move |e| e.session == *of && e.kind == "turn/end"
}

fn data(event: &StreamEvent) -> Value {
    serde_json::from_str(&event.data_json).unwrap()
}

#[tokio::test]
async fn a_watcher_of_the_tree_gets_what_the_prompt_gets_children_included() {
    let w = world(|_| {});
    let child = json!({"replies": [{"text": "child here"}]});
    let id = w.agent(
        &json!({"replies": [
            {"text": "spawning", "tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "go"}, "child_script": child}]},
            {"text": "done"},
        ]}),
        None,
    );
    let mut watcher = w
        .registry
        .watch(WatchScope::Tree(id.clone()), None, WatchedBy::Person)
        .unwrap();
    let handle = w
        .registry
        .prompt(&id, "hi".into(), None, WatchedBy::Person)
        .unwrap();
    let prompted = drain(handle.updates).await;
    let watched = read_until(&mut watcher, is_turn_end(&id)).await;
    // Per session the same events in the same order (sessions may interleave differently).
    let by_session = |events: &[StreamEvent]| {
        let mut logged = logged(events);
        logged.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        logged
    };
    assert_eq!(by_session(&prompted), by_session(&watched));
    let sessions: std::collections::BTreeSet<_> =
        logged(&watched).into_iter().map(|e| e.0).collect();
    assert_eq!(sessions.len(), 2, "parent and child: {sessions:?}");
    let last = prompted.last().unwrap();
    assert_eq!(
        (last.session.clone(), &*last.kind),
        (id.clone(), "turn/end")
    );
    // The turn's end names its answer, and the agent takes the next prompt once it is read.
    let answer_seq = data(last)["answerSeq"].as_u64().unwrap();
    let answer = prompted.iter().find(|e| e.seq == Some(answer_seq)).unwrap();
    assert_eq!(data(answer)["message"]["text"], "done");
    assert_eq!(w.registry.get(&id).unwrap().status(), AgentStatus::Idle);
    // Per session, seqs are contiguous: nothing missed, nothing twice.
    for session in sessions {
        let seqs: Vec<u64> = logged(&watched)
            .into_iter()
            .filter(|e| e.0 == session)
            .map(|e| e.1)
            .collect();
        let first = seqs[0];
        assert_eq!(seqs, (first..first + seqs.len() as u64).collect::<Vec<_>>());
    }
}

#[tokio::test]
async fn a_replay_from_zero_mid_turn_has_the_whole_log_then_live_events_once() {
    let w = world(|_| {});
    let id = w.agent(
        &json!({"replies": [{"text": "one"}, {"text": "two", "delay_ms": 200}]}),
        None,
    );
    drain(
        w.registry
            .prompt(&id, "first".into(), None, WatchedBy::Person)
            .unwrap()
            .updates,
    )
    .await;
    let handle = w
        .registry
        .prompt(&id, "second".into(), None, WatchedBy::Person)
        .unwrap();
    let mut watcher = w
        .registry
        .watch(WatchScope::Agent(id.clone()), Some(0), WatchedBy::Person)
        .unwrap();
    let watched = read_until(&mut watcher, |e| {
        e.kind == "turn/end" && data(e)["turn"] == 2
    })
    .await;
    drain(handle.updates).await;
    let seqs: Vec<u64> = watched.iter().filter_map(|e| e.seq).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    let log = w.registry.get(&id).unwrap().events_from(0);
    assert_eq!(seqs.len(), log.len());
}

#[tokio::test]
async fn a_watcher_that_does_not_read_is_lagged_and_catches_up_from_the_log() {
    let w = world(|services| services.watch_max_pending = 4);
    // Each step streams text between logged events, so the entries cannot merge.
    let step = json!({"text": "thinking", "tool_calls": [{"name": "no_such_tool"}]});
    let mut replies = vec![step; 12];
    replies.push(json!({"text": "done"}));
    let id = w.agent(&json!({ "replies": replies }), None);
    let mut stalled = w
        .registry
        .watch(WatchScope::Agent(id.clone()), None, WatchedBy::Person)
        .unwrap();
    // The turn runs to its end while the watcher reads nothing: it was not held up.
    let handle = w
        .registry
        .prompt(&id, "go".into(), None, WatchedBy::Person)
        .unwrap();
    let prompted = drain(handle.updates).await;
    assert_eq!(prompted.last().unwrap().kind, "turn/end");
    let watched = read_until(&mut stalled, is_turn_end(&id)).await;
    let markers: Vec<&StreamEvent> = watched.iter().filter(|e| e.kind == LAGGED).collect();
    assert!(!markers.is_empty(), "no lag marker");
    let from = data(markers[0])["fromSeq"].as_u64().unwrap();
    // Every logged event of the turn reached the slow watcher, once, in order.
    let seqs: Vec<u64> = watched.iter().filter_map(|e| e.seq).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(logged(&watched), logged(&prompted));
    assert!(from < seqs.len() as u64);
}

#[tokio::test]
async fn streamed_text_beyond_the_budget_is_skipped_with_the_gap_visible() {
    let w = world(|_| {});
    let big = "x".repeat(3 * PENDING_TEXT_BUDGET);
    let id = w.agent(&json!({"replies": [{"text": big}, {"text": "tail"}]}), None);
    let watcher = w
        .registry
        .watch(WatchScope::Agent(id.clone()), None, WatchedBy::Person)
        .unwrap();
    drain(
        w.registry
            .prompt(&id, "go".into(), None, WatchedBy::Person)
            .unwrap()
            .updates,
    )
    .await;
    let mut watcher = watcher;
    let events = read_until(&mut watcher, is_turn_end(&id)).await;
    let deltas: Vec<Value> = events
        .iter()
        .filter(|e| e.kind == TEXT_DELTA)
        .map(data)
        .collect();
    // The one fragment was larger than the budget: skipped; the full text is logged.
    assert!(deltas.is_empty(), "{deltas:?}");
    let message = events
        .iter()
        .find(|e| e.kind == "assistant/message")
        .unwrap();
    assert_eq!(
        data(message)["message"]["text"].as_str().unwrap().len(),
        big.len()
    );
}

#[tokio::test]
async fn a_calls_output_streams_as_tool_output_before_its_result() {
    let w = world(|_| {});
    let command = "printf 'one\\n'; printf err >&2; sleep 0.2; printf 'two\\n'";
    let id = w.agent(
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]},
            {"text": "done"},
        ]}),
        None,
    );
    let events = drain(
        w.registry
            .prompt(&id, "go".into(), None, WatchedBy::Person)
            .unwrap()
            .updates,
    )
    .await;
    let call = events.iter().find(|e| e.kind == "tool/call").unwrap();
    let call_id = data(call)["callId"].clone();
    let result_at = events.iter().position(|e| e.kind == "tool/result").unwrap();
    let mut streams: std::collections::BTreeMap<String, String> = Default::default();
    for (at, event) in events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.kind == TOOL_OUTPUT)
    {
        let d = data(event);
        assert!(at < result_at, "output after the result: {d}");
        assert_eq!(
            (d["callId"].clone(), d["turn"].clone(), d["step"].clone()),
            (call_id.clone(), json!(1), json!(1))
        );
        assert_eq!(event.seq, None, "unlogged");
        let text = streams
            .entry(d["stream"].as_str().unwrap().to_owned())
            .or_default();
        // Nothing was skipped: each piece starts where the previous one ended.
        assert_eq!(d["offset"].as_u64().unwrap(), text.len() as u64);
        text.push_str(d["text"].as_str().unwrap());
    }
    assert_eq!(
        streams.get("stdout").map(String::as_str),
        Some("one\ntwo\n")
    );
    assert_eq!(streams.get("stderr").map(String::as_str), Some("err"));
    // Nothing of it is logged.
    let log = w.registry.get(&id).unwrap().events_from(0);
    assert!(log.iter().all(|e| e.data.type_name() != TOOL_OUTPUT));
}

/// An agent whose one bash call creates `marker`, under the `always` policy.
fn approval_world(timeout: Duration) -> (World, SessionId, std::path::PathBuf) {
    let w = world(|services| {
        services.approval = ApprovalSettings {
            policy: ApprovalPolicy::Never,
            timeout,
        };
    });
    let marker = w.dir.path().join("marker");
    let id = w.agent(
        &json!({"replies": [
            {"tool_calls": [{"name": "bash", "id": "c1", "arguments": {"command": format!("touch '{}'", marker.display())}}]},
            {"text": "done"},
        ]}),
        Some(ApprovalPolicy::Always),
    );
    (w, id, marker)
}

async fn decision(w: &World, id: &SessionId, answer: Option<ApprovalVerdict>) -> Vec<StreamEvent> {
    let mut updates = w
        .registry
        .prompt(id, "go".into(), None, WatchedBy::Person)
        .unwrap()
        .updates;
    let mut seen = read_until(&mut updates, |e| e.kind == "approval/request").await;
    let request = data(seen.last().unwrap());
    assert_eq!(request["callId"], "c1");
    assert!(request["command"].as_str().unwrap().starts_with("touch "));
    if let Some(verdict) = answer {
        let answer = ApprovalAnswer {
            verdict,
            reason: Some("because".into()),
            scope: dsh_session::ApprovalScope::Once,
            client: None,
        };
        w.registry.approve(id, "c1", answer.clone()).unwrap();
        assert!(
            w.registry.approve(id, "c1", answer).is_err(),
            "answered twice"
        );
    }
    seen.extend(drain(updates).await);
    seen
}

fn result_of(events: &[StreamEvent]) -> (Value, Value) {
    let decision = events
        .iter()
        .find(|e| e.kind == "approval/decision")
        .unwrap();
    let result = events.iter().find(|e| e.kind == "tool/result").unwrap();
    (data(decision), data(result))
}

#[tokio::test]
async fn an_allowed_call_runs() {
    let (w, id, marker) = approval_world(Duration::from_secs(60));
    let (decided, _) = result_of(&decision(&w, &id, Some(ApprovalVerdict::Allow)).await);
    assert_eq!(
        (decided["decision"].clone(), decided["by"].clone()),
        (json!("allow"), json!("client"))
    );
    assert!(marker.exists());
}

#[tokio::test]
async fn a_denied_call_does_not_run_and_the_model_is_told_why() {
    let (w, id, marker) = approval_world(Duration::from_secs(60));
    let (decided, result) = result_of(&decision(&w, &id, Some(ApprovalVerdict::Deny)).await);
    assert_eq!(decided["decision"], "deny");
    assert!(!marker.exists());
    assert_eq!(result["isError"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("denied this call: because")
    );
}

#[tokio::test]
async fn an_unanswered_request_is_denied_at_the_timeout() {
    let (w, id, marker) = approval_world(Duration::from_millis(50));
    let (decided, result) = result_of(&decision(&w, &id, None).await);
    assert_eq!(
        (decided["decision"].clone(), decided["by"].clone()),
        (json!("deny"), json!("timeout"))
    );
    assert!(!marker.exists());
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("nobody answered")
    );
}

#[tokio::test]
async fn with_nobody_watching_the_request_is_denied_at_once() {
    let (w, id, marker) = approval_world(Duration::from_secs(600));
    let handle = w
        .registry
        .prompt(&id, "go".into(), None, WatchedBy::Person)
        .unwrap();
    // The client went away: nobody can answer.
    drop(handle.updates);
    handle.outcome.await.unwrap();
    let log = w.registry.get(&id).unwrap().events_from(0);
    let decided = log
        .iter()
        .find_map(|e| match &e.data {
            dsh_session::EventData::ApprovalDecision { by, .. } => Some(*by),
            _ => None,
        })
        .unwrap();
    assert_eq!(decided, dsh_session::ApprovalSource::Unwatched);
    assert!(!marker.exists());
}

/// A watcher inside one of dshd's commands sees the events but is nobody who could answer: the
/// request is denied at once as unwatched, not left to wait out its timeout.
#[tokio::test]
async fn a_watcher_inside_a_command_does_not_count_as_watching() {
    let (w, id, marker) = approval_world(Duration::from_secs(600));
    let mut command = w
        .registry
        .watch(WatchScope::Agent(id.clone()), None, WatchedBy::Command)
        .unwrap();
    let handle = w
        .registry
        .prompt(&id, "go".into(), None, WatchedBy::Command)
        .unwrap();
    handle.outcome.await.unwrap();
    let log = w.registry.get(&id).unwrap().events_from(0);
    let decided = log
        .iter()
        .find_map(|e| match &e.data {
            dsh_session::EventData::ApprovalDecision { by, .. } => Some(*by),
            _ => None,
        })
        .unwrap();
    assert_eq!(decided, dsh_session::ApprovalSource::Unwatched);
    assert!(!marker.exists());
    // It did see the request and its decision.
    let seen = read_until(&mut command, |e| e.kind == "approval/decision").await;
    assert!(
        seen.iter().any(|e| e.kind == "approval/request"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn an_unknown_call_is_not_pending() {
    let (w, id, _) = approval_world(Duration::from_secs(60));
    let err = w
        .registry
        .approve(
            &id,
            "nope",
            ApprovalAnswer {
                verdict: ApprovalVerdict::Allow,
                reason: None,
                scope: dsh_session::ApprovalScope::Once,
                client: None,
            },
        )
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("no approval request waiting for call nope"),
        "{err}"
    );
}

#[tokio::test]
async fn a_stored_session_is_followed_once_resumed() {
    let w = world(|_| {});
    let id = w.agent(&json!({"replies": [{"text": "one"}]}), None);
    drain(
        w.registry
            .prompt(&id, "first".into(), None, WatchedBy::Person)
            .unwrap()
            .updates,
    )
    .await;
    w.registry.close(&id).await.unwrap();
    let mut follower = w.registry.follow(&id, 0, WatchedBy::Person).await.unwrap();
    let stored = read_until(&mut follower, is_turn_end(&id)).await;
    w.registry
        .resume(
            &id,
            &scripted(&json!({"replies": [{"text": "two"}]})),
            None,
            crate::sandbox::SandboxPolicy::UNCONFINED,
            None,
        )
        .await
        .unwrap();
    let handle = w
        .registry
        .prompt(&id, "second".into(), None, WatchedBy::Person)
        .unwrap();
    drain(handle.updates).await;
    let live = read_until(&mut follower, is_turn_end(&id)).await;
    let seqs: Vec<u64> = stored.iter().chain(&live).filter_map(|e| e.seq).collect();
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    assert!(
        live.iter().all(|e| e.seq.is_some()),
        "follow mode is logged events only"
    );
}

#[test]
fn the_json_form_is_the_log_line_with_the_session() {
    let event = dsh_session::Event {
        seq: 4,
        time: 9,
        data: dsh_session::EventData::TurnStart { turn: 2 },
    };
    let id = SessionId::parse("s1").unwrap();
    assert_eq!(
        StreamEvent::logged(id.clone(), &event).to_json(),
        r#"{"type":"turn/start","sessionId":"s1","seq":4,"time":9,"data":{"turn":2}}"#
    );
    assert_eq!(
        StreamEvent::preview(id, 7, &super::Preview::Text { turn: 1, step: 2 }, 3, "hé").to_json(),
        r#"{"type":"text/delta","sessionId":"s1","time":7,"data":{"turn":1,"step":2,"offset":3,"text":"hé"}}"#
    );
}
