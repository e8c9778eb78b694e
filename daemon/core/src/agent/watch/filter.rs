//! Which event types a watcher hands out: a client that shows only turns and approvals (a status
//! bar) names those, and is not sent every fragment of streamed text.

/// The event types a watcher wants: each pattern an exact type (`tool/result`), a family
/// (`turn/*`: every type starting `turn/`), or `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFilter {
    patterns: Vec<Pattern>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Pattern {
    Exact(String),
    /// The prefix including its `/`.
    Family(String),
    Any,
}

/// A pattern that is neither an event type nor a family of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "types[{index}]: {pattern:?} is not an event type (e.g. tool/result) or a family of them (e.g. turn/*)"
)]
pub struct FilterError {
    /// Its place in the list.
    pub index: usize,
    /// The pattern given.
    pub pattern: String,
}

fn is_word(word: &str) -> bool {
    !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

impl EventFilter {
    /// The filter of `patterns`; `None` for an empty list (every type).
    pub fn parse(patterns: &[String]) -> Result<Option<Self>, FilterError> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let mut parsed = Vec::with_capacity(patterns.len());
        for (index, pattern) in patterns.iter().enumerate() {
            let bad = || FilterError {
                index,
                pattern: pattern.clone(),
            };
            let parsed_one = if pattern == "*" {
                Pattern::Any
            } else if let Some(family) = pattern.strip_suffix("/*") {
                if !family.split('/').all(is_word) {
                    return Err(bad());
                }
                Pattern::Family(format!("{family}/"))
            } else {
                if !pattern.contains('/') || !pattern.split('/').all(is_word) {
                    return Err(bad());
                }
                Pattern::Exact(pattern.clone())
            };
            parsed.push(parsed_one);
        }
        Ok(Some(Self { patterns: parsed }))
    }

    /// Whether events of type `kind` pass.
    pub fn admits(&self, kind: &str) -> bool {
        self.patterns.iter().any(|p| match p {
            Pattern::Exact(exact) => exact == kind,
            Pattern::Family(prefix) => kind.starts_with(prefix.as_str()),
            Pattern::Any => true,
        })
    }

    /// Whether any unlogged preview (streamed text and reasoning, command output, model retries)
    /// passes: if none does, the watcher is not sent them at all.
    pub fn wants_previews(&self) -> bool {
        [
            super::TEXT_DELTA,
            super::THOUGHT_DELTA,
            super::TOOL_OUTPUT,
            super::MODEL_RETRY,
        ]
        .iter()
        .any(|kind| self.admits(kind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filter(patterns: &[&str]) -> EventFilter {
        let owned: Vec<String> = patterns.iter().map(|p| (*p).to_owned()).collect();
        EventFilter::parse(&owned).unwrap().unwrap()
    }

    #[test]
    fn exact_types_families_and_everything() {
        let f = filter(&["turn/*", "approval/request"]);
        assert!(f.admits("turn/start") && f.admits("turn/end"));
        assert!(f.admits("approval/request"));
        assert!(!f.admits("approval/decision"));
        assert!(!f.admits("turnover/x"), "a family ends at its slash");
        assert!(!f.admits("text/delta"));
        assert!(!f.wants_previews());
        assert!(filter(&["text/delta"]).wants_previews());
        assert!(filter(&["thought/delta"]).wants_previews());
        assert!(filter(&["*"]).admits("anything/at-all"));
        assert_eq!(EventFilter::parse(&[]), Ok(None));
    }

    #[test]
    fn malformed_patterns_are_refused_by_index() {
        for bad in ["", "turn", "turn/", "Turn/start", "*/x", "turn/**", "a b/c"] {
            let patterns = vec!["turn/*".to_owned(), bad.to_owned()];
            let err = EventFilter::parse(&patterns).unwrap_err();
            assert_eq!(err.index, 1, "{bad:?}");
            assert!(err.to_string().starts_with("types[1]: "), "{err}");
        }
    }
}
