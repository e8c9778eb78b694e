//! Unique id prefixes: `0199a2b3` for `0199a2b3-…`, resolved against the ids the daemon lists now;
//! and the short form `watch` marks other agents' lines with, the id's last characters (`…0000beef`
//! or `0000beef`): the first characters of a UUIDv7 are its creation time, the same for agents made
//! together, so a marker has to show the end.
//!
//! Resolution is done here, on the client, with the ordinary list calls (`Agents.List`,
//! `Persistence.ListSessions`, `Shell.ListJobs`): the server keeps taking only full ids, so every
//! other client sees the protocol unchanged. A full id is passed through without a call, and so is a
//! value that cannot be a prefix of any id (the server then names it in its own error).

use crate::events::{EventData, Streamed};
use dsh_proto::v1;
use tonic::transport::Channel;

/// What an id names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    /// A live agent (`Agents.List`).
    Agent,
    /// A stored or live session (`Persistence.ListSessions`).
    Session,
    /// A background job (`Shell.ListJobs`).
    Job,
    /// A tool call waiting for approval (the agent's `approval/request` events without a
    /// decision, from `Persistence.ReadEvents`).
    Call,
}

impl IdKind {
    /// The noun, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Agent => "live agent",
            Self::Session => "session",
            Self::Job => "job",
            Self::Call => "call waiting for approval",
        }
    }

    /// The command that lists the ids, for messages.
    pub fn list_command(self) -> &'static str {
        match self {
            Self::Agent => "dshctl agent list",
            Self::Session => "dshctl session list",
            Self::Job => "dshctl job list",
            Self::Call => "dshctl session events AGENT",
        }
    }
}

/// Most candidates named in an "ambiguous" message; the rest are counted.
const MAX_NAMED: usize = 8;

/// Why a prefix names no single id.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// More than one id starts with the prefix.
    #[error("{}", ambiguous_message(*.kind, .prefix, .candidates))]
    Ambiguous {
        /// What was looked for.
        kind: IdKind,
        /// The prefix as given.
        prefix: String,
        /// Every id it starts, sorted.
        candidates: Vec<String>,
    },
    /// No id starts (or ends) with the prefix.
    #[error("no {} has an id starting with {prefix:?}; {} shows them", .kind.noun(), .kind.list_command())]
    NoMatch {
        /// What was looked for.
        kind: IdKind,
        /// The prefix as given.
        prefix: String,
    },
    /// The list call failed.
    #[error(transparent)]
    Rpc(#[from] tonic::Status),
}

fn ambiguous_message(kind: IdKind, prefix: &str, candidates: &[String]) -> String {
    let mut named = candidates[..candidates.len().min(MAX_NAMED)].join(", ");
    if candidates.len() > MAX_NAMED {
        named.push_str(&format!(" and {} more", candidates.len() - MAX_NAMED));
    }
    format!(
        "{prefix:?} is ambiguous: {} {}s have ids starting with it: {named}; give more characters",
        candidates.len(),
        kind.noun()
    )
}

/// How a given value is to be treated.
#[derive(Debug, PartialEq, Eq)]
enum Given<'a> {
    /// Use it as it is: a full id, or something no id can start with.
    AsIs,
    /// A prefix (without the `job-` of job ids) to look up; plain hex may also be the end of an
    /// id, as `watch` marks lines (`suffix`).
    Prefix { text: &'a str, suffix: bool },
    /// Only the end of an id: `…0000beef` (or `...0000beef`), as `watch` marks lines.
    Suffix(&'a str),
}

fn classify(kind: IdKind, value: &str) -> Given<'_> {
    let id_like = |s: &str| {
        !s.is_empty() && s.len() < UUID_LEN && s.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
    };
    if let Some(tail) = value
        .strip_prefix('…')
        .or_else(|| value.strip_prefix("..."))
    {
        return if id_like(tail) {
            Given::Suffix(tail)
        } else {
            Given::AsIs
        };
    }
    let bare = bare_id(kind, value);
    if id_like(bare) {
        Given::Prefix {
            text: bare,
            suffix: bare.len() == value.len(),
        }
    } else {
        Given::AsIs
    }
}

/// `id` without the `job-` of a job id.
fn bare_id(kind: IdKind, id: &str) -> &str {
    match kind {
        IdKind::Job => id.strip_prefix("job-").unwrap_or(id),
        IdKind::Agent | IdKind::Session | IdKind::Call => id,
    }
}

/// Length of a hyphenated UUID.
const UUID_LEN: usize = 36;

/// The single id among `ids` that `given` names: ids starting with its prefix, or (for plain hex
/// and the `…` form) ending with it; compared without case, job ids without their `job-`.
fn pick(
    kind: IdKind,
    given: &str,
    how: &Given<'_>,
    ids: impl IntoIterator<Item = String>,
) -> Result<String, ResolveError> {
    let (text, prefix, suffix) = match how {
        Given::AsIs => return Ok(given.to_owned()),
        Given::Prefix { text, suffix } => (text.to_ascii_lowercase(), true, *suffix),
        Given::Suffix(text) => (text.to_ascii_lowercase(), false, true),
    };
    let mut candidates: Vec<String> = ids
        .into_iter()
        .filter(|id| {
            let bare = bare_id(kind, id);
            (prefix && bare.starts_with(&text)) || (suffix && bare.ends_with(&text))
        })
        .collect();
    candidates.sort();
    candidates.dedup();
    match candidates.len() {
        0 => Err(ResolveError::NoMatch {
            kind,
            prefix: given.to_owned(),
        }),
        1 => Ok(candidates.remove(0)),
        _ => Err(ResolveError::Ambiguous {
            kind,
            prefix: given.to_owned(),
            candidates,
        }),
    }
}

/// The full id `value` stands for: itself when it is a full id (or cannot be a prefix), else the
/// one id of `kind` it is a unique prefix of.
pub async fn resolve(channel: Channel, kind: IdKind, value: &str) -> Result<String, ResolveError> {
    let how = classify(kind, value);
    if how == Given::AsIs {
        return Ok(value.to_owned());
    }
    let ids: Vec<String> = match kind {
        IdKind::Agent => v1::agents_client::AgentsClient::new(channel)
            .list(v1::ListAgentsRequest {})
            .await?
            .into_inner()
            .agents
            .into_iter()
            .map(|a| a.agent_id)
            .collect(),
        IdKind::Session => session_ids(channel).await?,
        IdKind::Job => v1::shell_client::ShellClient::new(channel)
            .list_jobs(v1::ListJobsRequest {
                agent_id: String::new(),
            })
            .await?
            .into_inner()
            .jobs
            .into_iter()
            .map(|j| j.job_id)
            .collect(),
        // Calls are named per agent: `resolve_call`.
        IdKind::Call => return Ok(value.to_owned()),
    };
    pick(kind, value, &how, ids)
}

/// The call id `value` stands for among the calls of `agent` waiting for approval: itself when it
/// is one of them (or none starts with it: the server then says no request waits under it), else
/// the one it is a unique prefix of. Call ids are the model's own (`call_…`, `c1`), so any text
/// may be a prefix.
pub async fn resolve_call(
    channel: Channel,
    agent: &str,
    value: &str,
) -> Result<String, ResolveError> {
    let mut events = v1::persistence_client::PersistenceClient::new(channel)
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES)
        .read_events(v1::ReadEventsRequest {
            session_id: agent.to_owned(),
            from_seq: 0,
            follow: false,
        })
        .await?
        .into_inner();
    let mut waiting: Vec<String> = Vec::new();
    while let Some(event) = events.message().await? {
        // An event that cannot be read names no call: the others still count.
        match crate::events::decode(&event) {
            Ok(Streamed::Logged(EventData::ApprovalRequest { call_id, .. })) => {
                waiting.push(call_id);
            }
            Ok(Streamed::Logged(EventData::ApprovalDecision { call_id, .. })) => {
                waiting.retain(|c| *c != call_id);
            }
            _ => {}
        }
    }
    pick_call(value, waiting)
}

fn pick_call(value: &str, waiting: Vec<String>) -> Result<String, ResolveError> {
    if value.is_empty() || waiting.iter().any(|c| c == value) {
        return Ok(value.to_owned());
    }
    let how = Given::Prefix {
        text: value,
        suffix: false,
    };
    match pick(IdKind::Call, value, &how, waiting) {
        Err(ResolveError::NoMatch { .. }) => Ok(value.to_owned()),
        other => other,
    }
}

/// Every session id the daemon lists, following the pages to the end (largest pages, so a
/// prefix costs one call per thousand sessions).
async fn session_ids(channel: Channel) -> Result<Vec<String>, ResolveError> {
    let mut client = v1::persistence_client::PersistenceClient::new(channel)
        .max_decoding_message_size(crate::MAX_MESSAGE_BYTES);
    let mut ids = Vec::new();
    let mut page_token = String::new();
    loop {
        let page = client
            .list_sessions(v1::ListSessionsRequest {
                page_size: Some(1000),
                page_token,
                // An archived session is still one a prefix may name (to rename or delete it).
                include_archived: true,
                ..v1::ListSessionsRequest::default()
            })
            .await?
            .into_inner();
        ids.extend(
            page.sessions
                .into_iter()
                .filter_map(|s| s.header.map(|h| h.id)),
        );
        if page.next_page_token.is_empty() {
            return Ok(ids);
        }
        page_token = page.next_page_token;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    const A: &str = "0199a2b3-c4d5-7e6f-8a9b-0c1d2e3f4a5b";
    const B: &str = "0199a2b3-c4d5-7e6f-8a9b-ffffffffffff";
    const C: &str = "0199ffff-0000-7000-8000-000000000000";

    fn ids() -> Vec<String> {
        [A, B, C].map(str::to_owned).to_vec()
    }

    #[test]
    fn full_ids_and_non_prefixes_are_used_as_given() {
        assert_eq!(classify(IdKind::Session, A), Given::AsIs);
        assert_eq!(classify(IdKind::Session, "nobody"), Given::AsIs);
        assert_eq!(classify(IdKind::Session, ""), Given::AsIs);
        assert_eq!(classify(IdKind::Job, &format!("job-{A}")), Given::AsIs);
        assert_eq!(classify(IdKind::Job, "job-x"), Given::AsIs);
        let either = |text| Given::Prefix { text, suffix: true };
        assert_eq!(classify(IdKind::Agent, "0199A2"), either("0199A2"));
        assert_eq!(
            classify(IdKind::Job, "job-0199"),
            Given::Prefix {
                text: "0199",
                suffix: false
            }
        );
        assert_eq!(classify(IdKind::Job, "0199"), either("0199"));
        assert_eq!(classify(IdKind::Agent, "…beef"), Given::Suffix("beef"));
        assert_eq!(classify(IdKind::Agent, "...beef"), Given::Suffix("beef"));
        assert_eq!(classify(IdKind::Agent, "…nobody"), Given::AsIs);
    }

    #[test]
    fn a_unique_prefix_names_its_id_whatever_its_case() {
        let given = |v| pick(IdKind::Session, v, &classify(IdKind::Session, v), ids());
        assert_eq!(given("0199F").unwrap(), C);
        let jobs = ids().into_iter().map(|id| format!("job-{id}"));
        assert_eq!(
            pick(
                IdKind::Job,
                "job-0199ff",
                &classify(IdKind::Job, "job-0199ff"),
                jobs
            )
            .unwrap(),
            format!("job-{C}")
        );
    }

    #[test]
    fn an_ambiguous_prefix_lists_the_candidates() {
        let how = classify(IdKind::Agent, "0199a2b3");
        let error = pick(IdKind::Agent, "0199a2b3", &how, ids()).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ResolveError::Ambiguous { ref candidates, .. } if candidates.len() == 2)
        );
        assert!(message.contains(A) && message.contains(B), "{message}");
        assert!(!message.contains(C), "{message}");
    }

    #[test]
    fn the_end_of_an_id_names_it_as_watch_marks_lines() {
        let given = |v| pick(IdKind::Agent, v, &classify(IdKind::Agent, v), ids());
        assert_eq!(given("…3f4a5b").unwrap(), A);
        assert_eq!(given("...FFFFFFFF").unwrap(), B);
        // Plain hex: a prefix or an end, whichever names one id.
        assert_eq!(given("0c1d2e3f4a5b").unwrap(), A);
        assert!(matches!(given("…0001"), Err(ResolveError::NoMatch { .. })));
        // The explicit form never matches a start.
        assert!(matches!(
            given("…0199ff"),
            Err(ResolveError::NoMatch { .. })
        ));
    }

    #[test]
    fn a_call_is_named_by_a_prefix_of_a_waiting_call() {
        let waiting = || {
            vec![
                "call_abc".to_owned(),
                "call_abd".to_owned(),
                "c1".to_owned(),
            ]
        };
        assert_eq!(pick_call("c1", waiting()).unwrap(), "c1");
        assert_eq!(pick_call("call_abc", waiting()).unwrap(), "call_abc");
        assert_eq!(pick_call("call_abd", waiting()).unwrap(), "call_abd");
        assert_eq!(
            pick_call("call_abd"[..8].as_ref(), waiting()).unwrap(),
            "call_abd"
        );
        let error = pick_call("call_ab", waiting()).unwrap_err();
        assert!(error.to_string().contains("ambiguous"), "{error}");
        // Nothing waits under it: passed on, for the server to say so.
        assert_eq!(pick_call("zz", waiting()).unwrap(), "zz");
    }

    #[test]
    fn an_unknown_prefix_says_where_ids_are_listed() {
        let error = pick(IdKind::Job, "abc", &classify(IdKind::Job, "abc"), ids()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no job has an id starting with \"abc\"; dshctl job list shows them"
        );
    }
}
