//! How `dshctl acp` reads and answers lines (issue 39, item 10): a line longer than the cap is
//! refused without being held whole, and request ids come back as the client wrote them.

use std::io::Write;

use super::*;

/// The bridge's cap on one line (docs/ACP.md).
const CAP: usize = 64 << 20;

/// The bridge's peak resident memory (`VmHWM`), in bytes.
fn peak_memory(acp: &Acp) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", acp.child.id())).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"));
    kib * 1024
}

/// A line of 200 MiB, three times the cap, gets `-32700` naming the cap as soon as the cap is
/// passed; the rest of it is skipped unread into memory (the bridge's peak stays far below the
/// line), and the next line is served.
#[test]
fn a_line_longer_than_the_cap_is_refused_unheld_and_the_next_one_served() {
    let daemon = TestDaemon::start();
    let mut acp = Acp::start(&daemon.socket, &[]);
    let stdin = acp.stdin.as_mut().unwrap();
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..200 {
        stdin.write_all(&chunk).unwrap();
    }
    stdin.write_all(b"\n").unwrap();
    stdin.flush().unwrap();
    let refused = acp.recv();
    assert_eq!(refused["id"], Value::Null, "{refused}");
    assert_eq!(refused["error"]["code"], -32700, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("line too long") && message.contains("64 MiB"),
        "{message}"
    );
    assert_eq!(acp.initialize()["protocolVersion"], 1, "still serving");
    let peak = peak_memory(&acp);
    assert!(
        peak < (CAP as u64) * 2,
        "the bridge held {} MiB for a 200 MiB line",
        peak >> 20
    );
    // A line just under the cap is read as a message (here: not JSON).
    let mut long = vec![b' '; CAP - 100];
    long.extend_from_slice(br#"{"jsonrpc":"2.0","id":7,"method":"session/fly"}"#);
    acp.line(std::str::from_utf8(&long).unwrap());
    let answer = acp.recv();
    assert_eq!(
        (answer["id"].clone(), answer["error"]["code"].clone()),
        (json!(7), json!(-32601)),
        "{answer}"
    );
    assert!(acp.finish().success());
}

/// The raw line the bridge answers next.
fn raw_answer(acp: &Acp) -> String {
    acp.lines
        .recv_timeout(PATIENCE)
        .expect("dshctl acp printed nothing more")
}

/// Ids are echoed as the client wrote them: an integer above 2^64 is not turned into a float,
/// and a string's escapes are kept, whether the answer is a result or an error.
#[test]
fn request_ids_come_back_byte_identical() {
    let daemon = TestDaemon::start();
    let mut acp = Acp::start(&daemon.socket, &[]);
    for id in [
        "18446744073709551616",
        "-9223372036854775809",
        r#""caf\u00e9 \"1\"""#,
        "12.50",
    ] {
        acp.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":1}}}}"#
        ));
        let answer = raw_answer(&acp);
        assert!(
            answer.contains(&format!(r#""id":{id},"result":"#)),
            "{id}: {answer}"
        );
        acp.line(&format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"session/fly"}}"#
        ));
        let answer = raw_answer(&acp);
        assert!(
            answer.contains(&format!(r#""id":{id},"error":"#)),
            "{id}: {answer}"
        );
        // Not JSON-RPC (no `jsonrpc`), yet the id was readable: it is echoed too.
        acp.line(&format!(r#"{{"id":{id},"method":"initialize"}}"#));
        let answer = raw_answer(&acp);
        assert!(
            answer.contains(&format!(r#""id":{id},"error":"#)) && answer.contains("-32600"),
            "{id}: {answer}"
        );
    }
    assert!(acp.finish().success());
}
