//! Claude Code's `type: "http"` hooks against a local HTTP server in the test.

use super::*;

/// One request an HTTP hook made: path, lower-cased headers, body.
type Seen = (String, Vec<(String, String)>, String);

/// A local HTTP server for hook endpoints: `/deny` answers a PreToolUse deny for commands that
/// mention `rm` (and nothing otherwise), `/fail` answers 500, `/slow` never answers. It records
/// every request it reads.
struct HookServer {
    url: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
}

impl HookServer {
    fn start() -> Self {
        use std::io::{BufRead as _, BufReader, Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let record = record.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    reader.read_line(&mut line).unwrap();
                    let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let mut headers = Vec::new();
                    let mut length = 0;
                    loop {
                        let mut h = String::new();
                        reader.read_line(&mut h).unwrap();
                        let h = h.trim_end();
                        if h.is_empty() {
                            break;
                        }
                        let (k, v) = h.split_once(':').unwrap();
                        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                        if k == "content-length" {
                            length = v.parse().unwrap();
                        }
                        headers.push((k, v));
                    }
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body).unwrap();
                    let body = String::from_utf8(body).unwrap();
                    let mentions_rm = body.contains("rm ");
                    record.lock().unwrap().push((path.clone(), headers, body));
                    let (status, answer) = match path.as_str() {
                        "/deny" if mentions_rm => (
                            "200 OK",
                            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                "permissionDecision": "deny",
                                "permissionDecisionReason": "the policy server refuses rm"}})
                            .to_string(),
                        ),
                        "/deny" => ("200 OK", String::new()),
                        "/fail" => ("500 Internal Server Error", "oops".to_owned()),
                        // Holds the connection without answering until the client gives up.
                        _ => {
                            std::thread::sleep(Duration::from_secs(30));
                            return;
                        }
                    };
                    let mut stream = stream;
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    );
                });
            }
        });
        Self { url, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Claude Code's `type: "http"` hooks: the payload is POSTed as JSON, a 2xx JSON answer decides
/// as a command's stdout would (here a PreToolUse deny), `allowedEnvVars` fill header values, and
/// a non-2xx status or no answer within the timeout is a non-blocking error (the call runs).
#[test]
fn http_hooks_post_the_payload_and_their_answer_decides() {
    let server = HookServer::start();
    let url = server.url.clone();
    let w = World::new(move |_| Setup {
        claude_code: vec![
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "http", "url": format!("{url}/deny"),
                 "headers": {"Authorization": "Bearer $HOOK_TOKEN", "X-Other": "[$DEEPSEEK_API_KEY]"},
                 "allowedEnvVars": ["HOOK_TOKEN"]},
                {"type": "http", "url": format!("{url}/fail")},
                {"type": "http", "url": format!("{url}/slow"), "timeout": 1},
            ]}]}}),
        ],
        env: vec![
            ("HOOK_TOKEN".into(), "s3cret".into()),
            ("DEEPSEEK_API_KEY".into(), "sk-not-for-hooks".into()),
        ],
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [
        {"text": "working", "tool_calls": [
            {"id": "safe", "name": "bash", "arguments": {"command": format!("touch {}", w.q("made"))}},
        ]},
        {"text": "cleaning", "tool_calls": [
            {"id": "rm", "name": "bash", "arguments": {"command": format!("rm {}", w.q("made"))}},
        ]},
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(w.path("made").exists(), "the denied rm ran");
    let refused = turn
        .tool_results()
        .into_iter()
        .find(|r| r["callId"] == "rm")
        .unwrap()
        .clone();
    assert_eq!(refused["isError"], true);
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("the policy server refuses rm"),
        "{refused}"
    );

    let seen = server.seen();
    let deny: Vec<&Seen> = seen.iter().filter(|s| s.0 == "/deny").collect();
    assert_eq!(deny.len(), 2, "{seen:?}");
    let header = |s: &Seen, name: &str| {
        s.1.iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(header(deny[0], "content-type"), "application/json");
    assert_eq!(header(deny[0], "authorization"), "Bearer s3cret");
    assert_eq!(
        header(deny[0], "x-other"),
        "[]",
        "a variable not allowed stays out"
    );
    let payload = parse(&deny[1].2);
    assert_eq!(payload["hook_event_name"], "PreToolUse");
    assert_eq!(payload["tool_name"], "Bash");
    assert_eq!(payload["session_id"], agent.as_str());

    // Per call: the deny hook passed or denied, the 500 and the silent server were errors.
    let events = w.events(&agent);
    let results: Vec<(String, String)> = of_type(&events, "hook/result")
        .into_iter()
        .map(|e| {
            (
                e["data"]["decision"].as_str().unwrap().to_owned(),
                e["data"]["stderrSummary"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    assert_eq!(results.len(), 6, "{results:?}");
    assert_eq!(results[0].0, "pass");
    assert_eq!(results[3].0, "deny");
    for failed in [&results[1], &results[4]] {
        assert_eq!(failed.0, "error");
        assert!(failed.1.contains("HTTP 500"), "{failed:?}");
    }
    for slow in [&results[2], &results[5]] {
        assert_eq!(slow.0, "error");
        assert!(slow.1.contains("timed out"), "{slow:?}");
    }
}
