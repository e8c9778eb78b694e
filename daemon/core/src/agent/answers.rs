//! An agent's approval requests waiting for an answer, and the rules its clients made: the state
//! the live agent holds (`live.rs`), apart from the asking (`approval.rs`), which needs the agent.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::locks::lock;
use dsh_session::{ApprovalClient, ApprovalRule, ApprovalScope, ApprovalVerdict};

/// A client's answer to an approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAnswer {
    /// Allow or deny.
    pub verdict: ApprovalVerdict,
    /// Why (shown to the model on a denial).
    pub reason: Option<String>,
    /// This call only, or (an allow only) every identical request of the live agent.
    pub scope: ApprovalScope,
    /// Who answered, recorded in the decision.
    pub client: Option<ApprovalClient>,
}

/// One agent's approval requests waiting for an answer, by call id, and the rules its clients
/// made.
#[derive(Debug, Default)]
pub(crate) struct Approvals {
    pending: Mutex<HashMap<String, oneshot::Sender<ApprovalAnswer>>>,
    rules: Mutex<Vec<ApprovalRule>>,
}

impl Approvals {
    /// No request waiting, and `rules` (the session's, from its log) in force.
    pub(super) fn with_rules(rules: Vec<ApprovalRule>) -> Self {
        Self {
            pending: Mutex::default(),
            rules: Mutex::new(rules),
        }
    }

    /// Ends `rule`; false when it was not in force.
    pub(super) fn forget(&self, rule: &ApprovalRule) -> bool {
        let mut rules = lock(&self.rules);
        let before = rules.len();
        rules.retain(|r| r != rule);
        rules.len() != before
    }

    pub(super) fn register(&self, call: &str) -> oneshot::Receiver<ApprovalAnswer> {
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(call.to_owned(), tx);
        rx
    }

    /// Withdraws a request; false when an answer took it first.
    pub(super) fn withdraw(&self, call: &str) -> bool {
        lock(&self.pending).remove(call).is_some()
    }

    /// The rules made so far, oldest first.
    pub(crate) fn rules(&self) -> Vec<ApprovalRule> {
        lock(&self.rules).clone()
    }

    pub(super) fn allows(&self, rule: &ApprovalRule) -> bool {
        lock(&self.rules).contains(rule)
    }

    pub(super) fn remember(&self, rule: ApprovalRule) {
        let mut rules = lock(&self.rules);
        if !rules.contains(&rule) {
            rules.push(rule);
        }
    }

    /// Answers the request of call `call`; false when no such request waits.
    pub(crate) fn answer(&self, call: &str, answer: ApprovalAnswer) -> bool {
        let Some(tx) = lock(&self.pending).remove(call) else {
            return false;
        };
        // The waiting call may have just been cancelled; the answer then changes nothing.
        let _ = tx.send(answer);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::BASH;

    #[test]
    fn an_answer_reaches_only_a_waiting_request_once() {
        let approvals = Approvals::default();
        let allow = ApprovalAnswer {
            verdict: ApprovalVerdict::Allow,
            reason: None,
            scope: ApprovalScope::Once,
            client: None,
        };
        assert!(!approvals.answer("c1", allow.clone()));
        let mut rx = approvals.register("c1");
        assert!(approvals.answer("c1", allow.clone()));
        assert!(!approvals.answer("c1", allow.clone()), "answered once");
        assert_eq!(rx.try_recv().unwrap(), allow);
        assert!(!approvals.withdraw("c1"));
    }

    #[test]
    fn a_rule_allows_only_the_same_tool_command_and_directory() {
        let approvals = Approvals::default();
        let rule = |tool: &str, command: &str, cwd: &str| ApprovalRule {
            tool: tool.into(),
            command: command.into(),
            cwd: cwd.into(),
        };
        assert!(!approvals.allows(&rule(BASH, "make", "/w")));
        approvals.remember(rule(BASH, "make", "/w"));
        approvals.remember(rule(BASH, "make", "/w"));
        assert_eq!(approvals.rules().len(), 1, "remembered once");
        assert!(approvals.allows(&rule(BASH, "make", "/w")));
        assert!(!approvals.allows(&rule(BASH, "make ", "/w")));
        assert!(!approvals.allows(&rule(BASH, "make", "/w/sub")));
        assert!(!approvals.allows(&rule("job_kill", "make", "/w")));
    }
}
