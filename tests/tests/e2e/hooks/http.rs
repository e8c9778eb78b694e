//! Claude Code's `type: "http"` hooks against a local HTTP server in the test.

use super::*;

/// One request an HTTP hook made: path, lower-cased headers, body.
type Seen = (String, Vec<(String, String)>, String);

/// A local HTTP server for hook endpoints: `/deny` answers a PreToolUse deny for commands that
/// mention `rm` (and nothing otherwise), `/fail` answers 500, `/slow` never answers. It records
/// every request it reads.
struct HookServer {
    url: String,
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
}

impl HookServer {
    fn start() -> Self {
        use std::io::{BufRead as _, BufReader, Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
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
        Self { url, port, seen }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Claude Code's `type: "http"` hooks: the payload is POSTed as JSON, a 2xx JSON answer decides
/// as a command's stdout would (here a PreToolUse deny), `allowedEnvVars` fill header values (only
/// those listed), and
/// a non-2xx status or no answer within the timeout is a non-blocking error (the call runs).
#[test]
fn http_hooks_post_the_payload_and_their_answer_decides() {
    let server = HookServer::start();
    let url = server.url.clone();
    let w = World::new(move |_| Setup {
        claude_code: vec![
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "http", "url": format!("{url}/deny"),
                 "headers": {"X-Team": "team $HOOK_TEAM", "X-Other": "[$HOOK_OTHER]"},
                 "allowedEnvVars": ["HOOK_TEAM"]},
                {"type": "http", "url": format!("{url}/fail")},
                {"type": "http", "url": format!("{url}/slow"), "timeout": 1},
            ]}]}}),
        ],
        env: vec![
            ("HOOK_TEAM".into(), "blue".into()),
            ("HOOK_OTHER".into(), "not listed".into()),
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
    assert_eq!(header(deny[0], "x-team"), "team blue");
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

/// `allowedEnvVars` never reaches a secret (issue 39, item 8): a name the executor keeps from
/// every command (`shell.secret_pattern`, the model key variable) is not expanded into a header;
/// the hook fails before anything is sent, its record naming the variable and why. A listed
/// variable commands may see is expanded as before.
#[test]
fn http_hooks_never_expand_a_secret_or_the_model_key() {
    let server = HookServer::start();
    let url = format!("{}/deny", server.url);
    let w = World::new(move |_| Setup {
        claude_code: vec![
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "http", "url": url, "headers": {"Authorization": "Bearer $HOOK_TOKEN"},
                 "allowedEnvVars": ["HOOK_TOKEN"]},
                {"type": "http", "url": url, "headers": {"X-Model": "${LLM_ACCESS}"},
                 "allowedEnvVars": ["LLM_ACCESS"]},
                {"type": "http", "url": url, "headers": {"X-Team": "$HOOK_TEAM"},
                 "allowedEnvVars": ["HOOK_TEAM"]},
            ]}]}}),
        ],
        // The model key variable here matches no secret pattern: it is kept out by name.
        hooks_toml: "[model]\napi_key_env = \"LLM_ACCESS\"".into(),
        env: vec![
            ("HOOK_TOKEN".into(), "s3cret".into()),
            ("LLM_ACCESS".into(), "sk-model".into()),
            ("HOOK_TEAM".into(), "blue".into()),
        ],
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [bash_reply("one", "true"), {"text": "done"}]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");

    let seen = server.seen();
    assert_eq!(
        seen.len(),
        1,
        "only the hook without a secret sent: {seen:?}"
    );
    let headers = &seen[0].1;
    assert!(
        headers.contains(&("x-team".into(), "blue".into())),
        "{headers:?}"
    );
    let all = format!("{seen:?}");
    assert!(
        !all.contains("s3cret") && !all.contains("sk-model"),
        "{all}"
    );

    let events = w.events(&agent);
    let results: Vec<&Value> = of_type(&events, "hook/result")
        .into_iter()
        .map(|e| &e["data"])
        .collect();
    assert_eq!(results.len(), 3, "{results:?}");
    let said = |i: usize| {
        results[i]["stderrSummary"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(results[0]["decision"], "error");
    assert!(
        said(0).contains("HOOK_TOKEN") && said(0).contains("shell.secret_pattern"),
        "{}",
        said(0)
    );
    assert!(said(0).contains("nothing was sent"), "{}", said(0));
    assert_eq!(results[1]["decision"], "error");
    assert!(
        said(1).contains("LLM_ACCESS") && said(1).contains("model.api_key_env"),
        "{}",
        said(1)
    );
    assert_eq!(results[2]["decision"], "pass", "{}", results[2]);
    let log = w.daemon.log_text();
    assert!(
        !log.contains("s3cret") && !log.contains("sk-model"),
        "{log}"
    );
}

/// An HTTP hook to a loopback address (`127.0.0.0/8`, `::1`, `localhost`) goes straight to it,
/// never through a proxy in dshd's environment: the proxy would see every payload.
#[test]
fn http_hooks_to_loopback_never_go_through_a_proxy() {
    let server = HookServer::start();
    let proxy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy_url = format!("http://{}", proxy.local_addr().unwrap());
    let port = server.port;
    let w = World::new(move |_| Setup {
        claude_code: vec![
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "http", "url": format!("http://127.0.0.1:{port}/deny"), "timeout": 5},
                {"type": "http", "url": format!("http://localhost:{port}/deny"), "timeout": 5},
            ]}]}}),
        ],
        env: ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"]
            .into_iter()
            .map(|k| (k.to_owned(), proxy_url.clone()))
            .chain(["NO_PROXY", "no_proxy"].map(|k| (k.to_owned(), String::new())))
            .collect(),
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [bash_reply("one", "true"), {"text": "done"}]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");

    let events = w.events(&agent);
    let decisions: Vec<&Value> = of_type(&events, "hook/result")
        .into_iter()
        .map(|e| &e["data"])
        .collect();
    assert!(
        decisions.iter().all(|d| d["decision"] == "pass"),
        "{decisions:?}"
    );
    let mut hosts: Vec<String> = server
        .seen()
        .iter()
        .map(|s| {
            s.1.iter()
                .find(|(k, _)| k == "host")
                .map(|(_, v)| v.clone())
                .unwrap()
        })
        .collect();
    hosts.sort();
    assert_eq!(
        hosts,
        [format!("127.0.0.1:{port}"), format!("localhost:{port}")]
    );
    // Both hooks have ended; a request through the proxy would have connected by then.
    proxy.set_nonblocking(true).unwrap();
    assert!(proxy.accept().is_err(), "the proxy saw a loopback hook");
}
