//! Claude Code's `type: "http"` hooks: the payload is POSTed as JSON to the hook's `url`, and the
//! response is read as a command hook's exit-0 stdout (its hooks reference, "HTTP hooks"): a 2xx
//! response's body decides (JSON, or nothing for an empty body); a non-2xx status, a connection
//! failure or the timeout is a non-blocking error. An HTTP hook cannot block by status: like a
//! command that exits 0, it blocks only with a JSON decision.
//!
//! Header values may name daemon environment variables as `$VAR` or `${VAR}`; only those listed
//! in the hook's `allowedEnvVars` are expanded (the others become empty), so a hook file cannot
//! exfiltrate the daemon's secrets by naming them.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::job::{Job, RunEnd};

/// The most of a response body that is read (a hook's answer is a small JSON object).
const MAX_BODY: usize = 1024 * 1024;

fn client() -> Result<&'static reqwest::Client, String> {
    static CLIENT: OnceLock<Result<reqwest::Client, String>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .map_err(|e| format!("cannot create the HTTP client: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// POSTs `job`'s payload to its URL; never fails (a failure is the end's `failure`).
pub(super) async fn run(job: Job) -> RunEnd {
    let started = Instant::now();
    let end = |exit_code, stdout, failure| RunEnd {
        exit_code,
        stdout,
        stderr: String::new(),
        failure,
        duration: started.elapsed(),
    };
    let client = match client() {
        Ok(client) => client,
        Err(e) => return end(None, String::new(), Some(e)),
    };
    let mut request = client
        .post(&job.command)
        .timeout(job.timeout)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(job.stdin.to_vec());
    if let Some(http) = &job.http {
        for (name, value) in &http.headers {
            request = request.header(name, expand(value, &http.allowed_env));
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

/// `$VAR` and `${VAR}` in `value`, for the names in `allowed` only (others become empty).
fn expand(value: &str, allowed: &[String]) -> String {
    let lookup = |name: &str| {
        if allowed.iter().any(|a| a == name) {
            std::env::var(name).unwrap_or_default()
        } else {
            String::new()
        }
    };
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
        } else {
            out.push_str(&lookup(name));
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_allowed_variables_are_expanded_in_headers() {
        // PATH is set in every test environment.
        let path = std::env::var("PATH").unwrap();
        let allowed = vec!["PATH".to_owned()];
        assert_eq!(expand("Bearer $PATH", &allowed), format!("Bearer {path}"));
        assert_eq!(expand("x${PATH}y", &allowed), format!("x{path}y"));
        assert_eq!(expand("Bearer $HOME", &allowed), "Bearer ");
        assert_eq!(expand("cost: 5$ or $", &allowed), "cost: 5$ or $");
        assert_eq!(expand("${unclosed", &allowed), "${unclosed");
    }
}
