//! Unique id prefixes: `0199a2b3` for `0199a2b3-…`, resolved against the ids the daemon lists now.
//!
//! Resolution is done here, on the client, with the ordinary list calls (`Agents.List`,
//! `Persistence.ListSessions`, `Shell.ListJobs`): the server keeps taking only full ids, so every
//! other client sees the protocol unchanged. A full id is passed through without a call, and so is a
//! value that cannot be a prefix of any id (the server then names it in its own error).

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
}

impl IdKind {
    /// The noun, for messages.
    pub fn noun(self) -> &'static str {
        match self {
            Self::Agent => "live agent",
            Self::Session => "session",
            Self::Job => "job",
        }
    }

    /// The command that lists the ids, for messages.
    pub fn list_command(self) -> &'static str {
        match self {
            Self::Agent => "dshctl agent list",
            Self::Session => "dshctl session list",
            Self::Job => "dshctl job list",
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
    /// No id starts with the prefix.
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
    let mut named = candidates
        .iter()
        .take(MAX_NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
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
    /// A prefix (lower case, without the `job-` of job ids) to look up.
    Prefix(&'a str),
}

fn classify(kind: IdKind, value: &str) -> Given<'_> {
    let bare = match kind {
        IdKind::Job => value.strip_prefix("job-").unwrap_or(value),
        IdKind::Agent | IdKind::Session => value,
    };
    let plausible = !bare.is_empty()
        && bare.len() < UUID_LEN
        && bare.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if plausible {
        Given::Prefix(bare)
    } else {
        Given::AsIs
    }
}

/// Length of a hyphenated UUID.
const UUID_LEN: usize = 36;

/// The single id among `ids` that `prefix` starts (compared without case; job ids without their
/// `job-`).
fn pick(
    kind: IdKind,
    given: &str,
    prefix: &str,
    ids: impl IntoIterator<Item = String>,
) -> Result<String, ResolveError> {
    let prefix = prefix.to_ascii_lowercase();
    let mut candidates: Vec<String> = ids
        .into_iter()
        .filter(|id| {
            let bare = match kind {
                IdKind::Job => id.strip_prefix("job-").unwrap_or(id),
                IdKind::Agent | IdKind::Session => id,
            };
            bare.starts_with(&prefix)
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
    let Given::Prefix(prefix) = classify(kind, value) else {
        return Ok(value.to_owned());
    };
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
    };
    pick(kind, value, prefix, ids)
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
        assert_eq!(classify(IdKind::Agent, "0199A2"), Given::Prefix("0199A2"));
        assert_eq!(classify(IdKind::Job, "job-0199"), Given::Prefix("0199"));
        assert_eq!(classify(IdKind::Job, "0199"), Given::Prefix("0199"));
    }

    #[test]
    fn a_unique_prefix_names_its_id_whatever_its_case() {
        assert_eq!(pick(IdKind::Session, "0199F", "0199F", ids()).unwrap(), C);
        let jobs = ids().into_iter().map(|id| format!("job-{id}"));
        assert_eq!(
            pick(IdKind::Job, "job-0199ff", "0199ff", jobs).unwrap(),
            format!("job-{C}")
        );
    }

    #[test]
    fn an_ambiguous_prefix_lists_the_candidates() {
        let error = pick(IdKind::Agent, "0199a2b3", "0199a2b3", ids()).unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ResolveError::Ambiguous { ref candidates, .. } if candidates.len() == 2)
        );
        assert!(message.contains(A) && message.contains(B), "{message}");
        assert!(!message.contains(C), "{message}");
    }

    #[test]
    fn an_unknown_prefix_says_where_ids_are_listed() {
        let error = pick(IdKind::Job, "abc", "abc", ids()).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no job has an id starting with \"abc\"; dshctl job list shows them"
        );
    }
}
