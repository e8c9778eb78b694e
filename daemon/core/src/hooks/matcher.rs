//! Matchers, one rule for both dialects (the literal fast path of upstream Claude Code and of
//! current upstream Codex):
//!
//! - absent, `""` or `*` match everything;
//! - a pattern made only of ASCII letters, digits, `_` and `|` is an exact alternation (`Bash`
//!   does not match `BashOutput`);
//! - anything else is an unanchored regex search (Rust `regex`: no look-around or backreferences;
//!   such patterns fail validation).
//!
//! A subject can have several names (`tools.rs`): the daemon's tool `bash` is `Bash` to both
//! dialects and keeps its own name as an alias, so configs written for `Bash` and older dsh
//! configs written for `bash` both fire.

use regex::Regex;

/// A compiled matcher.
#[derive(Debug, Clone)]
pub(super) enum Matcher {
    /// Matches everything.
    All,
    /// Matches a subject equal to one of the alternatives.
    Literal(Vec<String>),
    /// Matches a subject the regex finds a match in.
    Regex(Regex),
}

impl Matcher {
    /// Compiles `pattern`; only an invalid regex is an error.
    pub(super) fn compile(pattern: Option<&str>) -> Result<Self, regex::Error> {
        match pattern {
            None | Some("" | "*") => Ok(Self::All),
            Some(p) if is_literal(p) => {
                Ok(Self::Literal(p.split('|').map(str::to_owned).collect()))
            }
            Some(p) => Regex::new(p).map(Self::Regex),
        }
    }

    /// Whether it matches everything.
    pub(super) fn is_all(&self) -> bool {
        matches!(self, Self::All)
    }

    /// Whether any of `subjects` matches. Events without a subject only reach [`Matcher::All`]
    /// (their matchers are dropped when the file is read).
    pub(super) fn matches(&self, subjects: &[&str]) -> bool {
        match self {
            Self::All => true,
            Self::Literal(alternatives) => {
                subjects.iter().any(|s| alternatives.iter().any(|a| a == s))
            }
            Self::Regex(re) => subjects.iter().any(|s| re.is_match(s)),
        }
    }
}

fn is_literal(pattern: &str) -> bool {
    pattern
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'|')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hooks::Dialect;
    use crate::hooks::tools::matcher_names;

    /// Whether `pattern` matches `subject` (a dsh tool name, or any other subject); the bash
    /// tool's names are the same in both dialects, so they must agree.
    fn m(pattern: Option<&str>, subject: &str) -> bool {
        let results: Vec<bool> = Dialect::ALL
            .iter()
            .map(|d| {
                Matcher::compile(pattern)
                    .unwrap()
                    .matches(&matcher_names(*d, subject))
            })
            .collect();
        assert!(
            results.windows(2).all(|w| w[0] == w[1]),
            "dialects disagree on {pattern:?} / {subject:?}"
        );
        results[0]
    }

    #[test]
    fn matcher_table() {
        let table: &[(Option<&str>, &str, bool)] = &[
            // Sentinels.
            (None, "anything", true),
            (Some(""), "anything", true),
            (Some("*"), "anything", true),
            // Literal alternation is exact.
            (Some("Bash"), "Bash", true),
            (Some("Bash"), "BashOutput", false),
            (Some("Edit|Write"), "Write", true),
            (Some("Edit|Write"), "Edit", true),
            (Some("Edit|Write"), "MultiEdit", false),
            (Some("danger"), "safe", false),
            (Some("mcp__memory__create"), "mcp__memory__create", true),
            (Some("startup"), "startup", true),
            (Some("startup"), "resume", false),
            // Anything else is a regex search.
            (Some("^Bash$"), "BashOutput", false),
            (Some("Bash.*"), "BashOutput", true),
            (Some("mcp__.*"), "mcp__memory__create", true),
            (Some("Edit|Wr.te"), "MultiEdit", true),
            (Some("general-purpose"), "general-purpose", true),
            (Some("l-p"), "general-purpose", true),
            (Some("e-p"), "general-purpose", false),
            (Some("^Notebook"), "NotebookEdit", true),
            (Some("^Notebook"), "Read", false),
            // The daemon's `bash` tool is also `Bash`.
            (Some("Bash"), "bash", true),
            (Some("bash"), "bash", true),
            (Some("Bash|Edit"), "bash", true),
            (Some("^Bash$"), "bash", true),
            (Some("BASH"), "bash", false),
            (Some("Bash"), "bashful", false),
            (Some("Edit"), "bash", false),
        ];
        for (pattern, subject, expected) in table {
            assert_eq!(
                m(*pattern, subject),
                *expected,
                "matcher {pattern:?} on {subject:?}"
            );
        }
    }

    #[test]
    fn literal_and_regex_classification() {
        assert!(matches!(
            Matcher::compile(Some("A_1|b")).unwrap(),
            Matcher::Literal(_)
        ));
        assert!(matches!(
            Matcher::compile(Some("a.b")).unwrap(),
            Matcher::Regex(_)
        ));
        assert!(Matcher::compile(Some("*")).unwrap().is_all());
        assert!(Matcher::compile(Some("[")).is_err());
        assert!(Matcher::compile(Some("(")).is_err());
        // Look-around is outside the Rust regex flavour: rejected, not silently different.
        assert!(Matcher::compile(Some("(?!Bash)")).is_err());
    }

    #[test]
    fn agent_names_differ_by_dialect() {
        let agent = |dialect, pattern| {
            Matcher::compile(Some(pattern))
                .unwrap()
                .matches(&matcher_names(dialect, "spawn_agent"))
        };
        for pattern in ["Agent", "spawn_agent", "^Agent$"] {
            assert!(agent(Dialect::ClaudeCode, pattern), "{pattern}");
            assert!(agent(Dialect::Codex, pattern), "{pattern}");
        }
        assert!(!agent(Dialect::ClaudeCode, "Task"));
    }
}
