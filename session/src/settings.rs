//! What an agent runs with — provider, model and approval policy — as the session records it, so
//! that a resumed agent runs as it did (the header holds the settings at creation, a
//! `session/settings` event every later change).

use super::{AgentSettings, Event, EventData, SandboxPolicy, SessionHeader};

/// The settings a session last ran with: its header's, replaced by its last `session/settings`
/// event. `None` for sessions written before settings were recorded.
pub fn recorded_settings(header: &SessionHeader, events: &[Event]) -> Option<AgentSettings> {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::Settings {
                provider,
                model,
                reasoning_effort,
                approval,
                ..
            } => Some(AgentSettings {
                provider: provider.clone(),
                model: model.clone(),
                reasoning_effort: *reasoning_effort,
                approval: *approval,
            }),
            _ => None,
        })
        .or_else(|| header.settings.clone())
}

/// The sandbox the last `session/settings` event that set one records; `None` when none did.
pub fn recorded_sandbox(events: &[Event]) -> Option<SandboxPolicy> {
    events.iter().rev().find_map(|e| match &e.data {
        EventData::Settings { sandbox, .. } => *sandbox,
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApprovalPolicy, SessionId};

    #[test]
    fn policy_names_round_trip() {
        for policy in ApprovalPolicy::ALL {
            assert_eq!(ApprovalPolicy::parse(policy.as_str()), Some(policy));
            assert_eq!(
                serde_json::to_string(&policy).unwrap(),
                format!("\"{policy}\"")
            );
        }
        assert_eq!(ApprovalPolicy::parse("sometimes"), None);
    }

    #[test]
    fn the_last_settings_event_wins_over_the_header() {
        let settings = |provider: &str| AgentSettings {
            provider: provider.into(),
            model: "m".into(),
            reasoning_effort: None,
            approval: ApprovalPolicy::Always,
        };
        let mut header = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 0);
        assert_eq!(recorded_settings(&header, &[]), None);
        header.settings = Some(settings("scripted"));
        assert_eq!(recorded_settings(&header, &[]), Some(settings("scripted")));
        let changed = Event {
            seq: 0,
            time: 0,
            data: EventData::Settings {
                provider: "openai".into(),
                model: "m".into(),
                reasoning_effort: None,
                approval: ApprovalPolicy::Always,
                sandbox: None,
            },
        };
        assert_eq!(
            recorded_settings(&header, &[changed]),
            Some(settings("openai"))
        );
    }
}
