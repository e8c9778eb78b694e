//! Claude Code's `type: "http"` hooks: the payload is POSTed as JSON to the hook's `url`, and the
//! response is read as a command hook's exit-0 stdout (its hooks reference, "HTTP hooks"): a 2xx
//! response's body decides (JSON, or nothing for an empty body); a non-2xx status, a connection
//! failure or the timeout is a non-blocking error. An HTTP hook cannot block by status: like a
//! command that exits 0, it blocks only with a JSON decision.
//!
//! Header values may name daemon environment variables as `$VAR` or `${VAR}`; only those listed
//! in the hook's `allowedEnvVars` are expanded (the others become empty, as in Claude Code), and
//! only to what a command hook would find in its own environment: a listed variable the executor
//! keeps from every command (a name matching `shell.secret_pattern`, the model key variable) fails
//! the hook before anything is sent (issue 39, item 8). Claude Code documents `allowedEnvVars` for
//! tokens in headers; dsh keeps those from commands and the model, and a header is one more way
//! out, so the hook's record says why and the user chooses what to expose (docs/DECISIONS.md).
//!
//! A request to a loopback address (`127.0.0.0/8`, `::1`, `localhost`) never goes through a proxy
//! of dshd's environment: the proxy would see every payload of a hook meant for this machine.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::job::{Job, RunEnd};
use crate::exec::{Executor, Withheld};

/// The most of a response body that is read (a hook's answer is a small JSON object).
const MAX_BODY: usize = 1024 * 1024;

/// The client for `url`: with the system's proxies (`HTTP_PROXY`, `NO_PROXY`, ...) in general,
/// without any for a loopback host.
fn client(url: &reqwest::Url) -> Result<&'static reqwest::Client, String> {
    static PROXIED: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    static DIRECT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    let direct = is_loopback(url);
    let cell = if direct { &DIRECT } else { &PROXIED };
    cell.get_or_init(|| {
        let builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        let builder = if direct { builder.no_proxy() } else { builder };
        builder
            .build()
            .map_err(|e| format!("cannot create the HTTP client: {e}"))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Whether `url` names this machine through a loopback address (or the unspecified address,
/// which Linux connects to it too).
fn is_loopback(url: &reqwest::Url) -> bool {
    let v4 = |ip: Ipv4Addr| ip.is_loopback() || ip.is_unspecified();
    let v6 = |ip: Ipv6Addr| {
        ip.is_loopback() || ip.is_unspecified() || ip.to_ipv4_mapped().is_some_and(v4)
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    // `host_str` keeps an IPv6 literal's brackets.
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    match literal.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => v4(ip),
        Ok(std::net::IpAddr::V6(ip)) => v6(ip),
        Err(_) => host.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
    }
}

/// POSTs `job`'s payload to its URL; never fails (a failure is the end's `failure`).
pub(super) async fn run(job: Job, executor: &Executor) -> RunEnd {
    let started = Instant::now();
    let end = |exit_code, stdout, failure| RunEnd {
        exit_code,
        stdout,
        stderr: String::new(),
        failure,
        duration: started.elapsed(),
        sandbox: None,
    };
    let url = match reqwest::Url::parse(&job.command) {
        Ok(url) => url,
        Err(e) => return end(None, String::new(), Some(format!("invalid url: {e}"))),
    };
    let client = match client(&url) {
        Ok(client) => client,
        Err(e) => return end(None, String::new(), Some(e)),
    };
    let mut request = client
        .post(url)
        .timeout(job.timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(job.stdin.to_vec());
    if let Some(http) = &job.http {
        for (name, value) in &http.headers {
            let lookup = |var: &str| executor.command_var(var);
            match expand(value, &http.allowed_env, lookup) {
                Ok(value) => request = request.header(name, value),
                Err((var, why)) => {
                    let failure = format!(
                        "header {name:?}: ${var} is not expanded: {why}, and dsh puts no variable it keeps from commands into a hook's request (list one commands may see, or write the value into the hook file); nothing was sent"
                    );
                    return end(None, String::new(), Some(failure));
                }
            }
        }
    }
    let exchange = async {
        let response = request.send().await.map_err(describe)?;
        let status = response.status();
        let body = read_body(response).await?;
        Ok::<_, String>((status, body))
    };
    let outcome = tokio::select! {
        outcome = exchange => outcome,
        () = job.cancel.cancelled() => Err("cancelled".to_owned()),
        () = tokio::time::sleep(job.timeout + Duration::from_millis(100)) => {
            Err(format!("timed out after {}ms", job.timeout.as_millis()))
        }
    };
    match outcome {
        Ok((status, body)) if status.is_success() => end(Some(0), body, None),
        Ok((status, _)) => end(None, String::new(), Some(format!("HTTP {status}"))),
        Err(failure) => end(None, String::new(), Some(failure)),
    }
}

fn describe(error: reqwest::Error) -> String {
    if error.is_timeout() {
        "timed out".to_owned()
    } else if error.is_connect() {
        format!("cannot connect: {error}")
    } else {
        format!("request failed: {error}")
    }
}

async fn read_body(mut response: reqwest::Response) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(describe)? {
        if body.len() + chunk.len() > MAX_BODY {
            return Err(format!("the response is larger than {MAX_BODY} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// `$VAR` and `${VAR}` in `value`: the names in `allowed` as `lookup` finds them (unset is
/// empty), every other name empty; `Err` names the first allowed variable `lookup` withholds.
fn expand<'a>(
    value: &str,
    allowed: &[String],
    lookup: impl Fn(&str) -> Result<Option<&'a std::ffi::OsStr>, Withheld>,
) -> Result<String, (String, Withheld)> {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
            match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => ("", after),
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], &after[end..])
        };
        if name.is_empty() {
            out.push('$');
            rest = after;
            continue;
        }
        if allowed.iter().any(|a| a == name) {
            match lookup(name) {
                Ok(Some(found)) => out.push_str(&found.to_string_lossy()),
                Ok(None) => {}
                Err(why) => return Err((name.to_owned(), why)),
            }
        }
        rest = tail;
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::*;

    fn lookup(name: &str) -> Result<Option<&'static OsStr>, Withheld> {
        match name {
            "TEAM" => Ok(Some(OsStr::new("blue"))),
            "MY_TOKEN" => Err(Withheld::SecretName),
            _ => Ok(None),
        }
    }

    #[test]
    fn only_allowed_variables_a_command_could_see_are_expanded_in_headers() {
        let allowed = vec!["TEAM".to_owned(), "MY_TOKEN".to_owned(), "GONE".to_owned()];
        let ok = |v: &str| expand(v, &allowed, lookup).unwrap();
        assert_eq!(ok("team $TEAM"), "team blue");
        assert_eq!(ok("x${TEAM}y"), "xbluey");
        assert_eq!(ok("[$GONE]"), "[]", "unset is empty");
        assert_eq!(ok("[$OTHER]"), "[]", "not listed is empty");
        assert_eq!(ok("cost: 5$ or $"), "cost: 5$ or $");
        assert_eq!(ok("${unclosed"), "${unclosed");
        assert_eq!(
            expand("Bearer $MY_TOKEN", &allowed, lookup),
            Err(("MY_TOKEN".to_owned(), Withheld::SecretName))
        );
        // A secret that is not listed stays empty, as any unlisted name.
        assert_eq!(expand("[$MY_TOKEN]", &[], lookup), Ok("[]".to_owned()));
    }

    #[test]
    fn loopback_hosts_are_told_apart() {
        for url in [
            "http://127.0.0.1:8080/x",
            "http://127.1.2.3/",
            "http://localhost:1/",
            "http://LOCALHOST./",
            "http://[::1]:9/",
            "http://[::ffff:127.0.0.1]/",
            "http://0.0.0.0/",
        ] {
            assert!(is_loopback(&reqwest::Url::parse(url).unwrap()), "{url}");
        }
        for url in [
            "http://10.0.0.1/",
            "https://example.com/",
            "http://localhost.example.com/",
            "http://[::2]/",
            "http://128.0.0.1/",
        ] {
            assert!(!is_loopback(&reqwest::Url::parse(url).unwrap()), "{url}");
        }
    }
}
