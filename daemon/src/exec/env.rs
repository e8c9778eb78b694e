//! The child environment (DESIGN §5.3).
//!
//! Four layers, later entries winning:
//!
//! 1. the daemon's own environment, minus every name matching the secret pattern, minus every name
//!    in `extra_scrub` (ASCII case-insensitive exact match), minus every name whose upper-cased form
//!    starts with `DSH_`;
//! 2. the terminal overrides [`TERMINAL_OVERRIDES`];
//! 3. ordinary `env` from a trusted caller; a `DSH_*` key (any case) is refused, so an outer
//!    harness's or a caller's value can never stand in for a managed one;
//! 4. the managed snapshot, whose keys must start with `DSH_`.
//!
//! Layers 1 and 2 are computed once, when the executor is built: the daemon's environment does not
//! change while it runs, and doing the scrub once keeps it off the per-spawn path.
//!
//! Non-UTF-8 names in the daemon's environment are **dropped**: the secret pattern and the `DSH_`
//! rule cannot be checked reliably on bytes that are not text, and scrubbing must fail closed.
//! Non-UTF-8 *values* under a UTF-8 name are kept verbatim (paths may legitimately be bytes).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

use regex::Regex;

use super::ExecError;

/// The terminal policy every child gets (layer 2): no colour, no pager, a dumb terminal.
pub const TERMINAL_OVERRIDES: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// The prefix reserved for managed variables.
pub const MANAGED_PREFIX: &str = "DSH_";

/// Whether `name` is in the managed namespace, compared case-insensitively so `dsh_home` from an
/// outer harness is treated like `DSH_HOME`.
pub fn is_managed_name(name: &str) -> bool {
    name.len() >= MANAGED_PREFIX.len()
        && name.as_bytes()[..MANAGED_PREFIX.len()].eq_ignore_ascii_case(MANAGED_PREFIX.as_bytes())
}

/// Layers 1 and 2, computed once.
#[derive(Debug, Clone)]
pub(crate) struct BaseEnv {
    vars: BTreeMap<OsString, OsString>,
}

impl BaseEnv {
    /// Scrubs `ambient` (layer 1) and applies the terminal overrides (layer 2).
    pub(crate) fn new(
        ambient: impl IntoIterator<Item = (OsString, OsString)>,
        secret_pattern: &Regex,
        extra_scrub: &[String],
    ) -> Self {
        let mut vars: BTreeMap<OsString, OsString> = ambient
            .into_iter()
            .filter(|(name, _)| keep_ambient(name, secret_pattern, extra_scrub))
            .collect();
        for (name, value) in TERMINAL_OVERRIDES {
            vars.insert(name.into(), value.into());
        }
        Self { vars }
    }

    /// Number of variables in layers 1 and 2.
    pub(crate) fn len(&self) -> usize {
        self.vars.len()
    }

    /// The base variables, for `Command::envs`.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }

    /// The full child environment for one spawn: base, then `env`, then `managed`. Used by tests
    /// and diagnostics; the spawn path hands the layers to `Command` directly, which merges them the
    /// same way (a later `env` call for a name replaces the earlier value).
    #[cfg(test)]
    pub(crate) fn merged(
        &self,
        env: &BTreeMap<String, String>,
        managed: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<OsString, OsString>, ExecError> {
        validate_layers(env, managed)?;
        let mut out = self.vars.clone();
        for (k, v) in env.iter().chain(managed) {
            out.insert(k.into(), v.into());
        }
        Ok(out)
    }
}

fn keep_ambient(name: &OsStr, secret_pattern: &Regex, extra_scrub: &[String]) -> bool {
    let Some(name) = name.to_str() else {
        // See the module docs: a name we cannot read as text cannot be proven harmless.
        return false;
    };
    !(name.is_empty()
        || is_managed_name(name)
        || secret_pattern.is_match(name)
        || extra_scrub.iter().any(|s| s.eq_ignore_ascii_case(name)))
}

/// Checks layers 3 and 4 before anything is spawned.
///
/// Ordinary `env` may not carry a `DSH_*` key (any case); managed keys must carry the exact `DSH_`
/// prefix. Names must be non-empty and free of `=` and NUL, values free of NUL: the OS could not
/// represent anything else, and `Command` would only fail later with a less precise message.
pub(crate) fn validate_layers(
    env: &BTreeMap<String, String>,
    managed: &BTreeMap<String, String>,
) -> Result<(), ExecError> {
    for (key, value) in env {
        check_entry(key, value)?;
        if is_managed_name(key) {
            return Err(ExecError::DshKeyInEnv { key: key.clone() });
        }
    }
    for (key, value) in managed {
        check_entry(key, value)?;
        if !key.starts_with(MANAGED_PREFIX) {
            return Err(ExecError::UnmanagedKeyInSnapshot { key: key.clone() });
        }
    }
    Ok(())
}

fn check_entry(key: &str, value: &str) -> Result<(), ExecError> {
    let reason = if key.is_empty() {
        Some("is empty")
    } else if key.contains('=') {
        Some("contains '='")
    } else if key.contains('\0') {
        Some("contains a NUL byte")
    } else {
        None
    };
    if let Some(reason) = reason {
        return Err(ExecError::BadEnvName {
            key: key.to_owned(),
            reason,
        });
    }
    if value.contains('\0') {
        return Err(ExecError::NulInEnvValue {
            key: key.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStringExt;

    use super::*;
    use crate::exec::default_secret_pattern;

    fn os(s: &str) -> OsString {
        s.into()
    }

    fn ambient() -> Vec<(OsString, OsString)> {
        [
            ("PATH", "/usr/bin:/bin"),
            ("HOME", "/home/u"),
            ("MY_API_KEY", "k"),
            ("GITHUB_TOKEN", "t"),
            ("DB_PASSWORD", "p"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "c"),
            ("lower_token", "t"),
            ("DSH_FOO", "outer"),
            ("dsh_lower", "outer"),
            ("Dsh_Mixed", "outer"),
            ("DSH_SESSION_ID", "outer-session"),
            ("DEEPSEEK", "model-key-var"),
            ("TERM", "xterm-256color"),
            ("LANG", "C.UTF-8"),
        ]
        .into_iter()
        .map(|(k, v)| (os(k), os(v)))
        .collect()
    }

    fn base() -> BaseEnv {
        BaseEnv::new(
            ambient(),
            &default_secret_pattern(),
            &["deepseek".to_owned()],
        )
    }

    #[test]
    fn scrub_removes_secrets_and_managed_names_and_keeps_the_rest() {
        let merged = base().merged(&BTreeMap::new(), &BTreeMap::new()).unwrap();
        for gone in [
            "MY_API_KEY",
            "GITHUB_TOKEN",
            "DB_PASSWORD",
            "AWS_SECRET_ACCESS_KEY",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "lower_token",
            "DSH_FOO",
            "dsh_lower",
            "Dsh_Mixed",
            "DSH_SESSION_ID",
            "DEEPSEEK",
        ] {
            assert!(!merged.contains_key(&os(gone)), "{gone} survived the scrub");
        }
        assert_eq!(merged[&os("PATH")], os("/usr/bin:/bin"));
        assert_eq!(merged[&os("HOME")], os("/home/u"));
        assert_eq!(merged[&os("LANG")], os("C.UTF-8"));
    }

    #[test]
    fn terminal_overrides_beat_the_ambient_terminal() {
        let merged = base().merged(&BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert_eq!(merged[&os("TERM")], os("dumb"));
        assert_eq!(merged[&os("NO_COLOR")], os("1"));
        assert_eq!(merged[&os("PAGER")], os("cat"));
        assert_eq!(merged[&os("GIT_PAGER")], os("cat"));
    }

    #[test]
    fn caller_env_overrides_base_and_snapshot_wins_last() {
        let env = BTreeMap::from([
            ("TERM".to_owned(), "xterm".to_owned()),
            ("CLAUDE_PROJECT_DIR".to_owned(), "/p".to_owned()),
            ("X_PASSWORD".to_owned(), "explicit".to_owned()),
        ]);
        let managed = BTreeMap::from([
            ("DSH_HOME".to_owned(), "/h".to_owned()),
            ("DSH_SESSION_ID".to_owned(), "s1".to_owned()),
        ]);
        let merged = base().merged(&env, &managed).unwrap();
        assert_eq!(merged[&os("TERM")], os("xterm"));
        assert_eq!(merged[&os("CLAUDE_PROJECT_DIR")], os("/p"));
        // An explicit trusted entry is not subject to the ambient scrub.
        assert_eq!(merged[&os("X_PASSWORD")], os("explicit"));
        assert_eq!(merged[&os("DSH_HOME")], os("/h"));
        assert_eq!(merged[&os("DSH_SESSION_ID")], os("s1"));
        assert!(!merged.contains_key(&os("DSH_FOO")));
    }

    #[test]
    fn env_cannot_inject_managed_names_in_any_case() {
        for key in ["DSH_X", "dsh_x", "Dsh_Home", "DSH_"] {
            let env = BTreeMap::from([(key.to_owned(), "v".to_owned())]);
            let err = base().merged(&env, &BTreeMap::new()).unwrap_err();
            assert!(
                matches!(&err, ExecError::DshKeyInEnv { key: k } if k == key),
                "{err:?}"
            );
            assert!(err.to_string().contains(key), "{err}");
        }
        // Not managed: the prefix must be followed by the underscore.
        let env = BTreeMap::from([("DSHX".to_owned(), "v".to_owned())]);
        assert!(base().merged(&env, &BTreeMap::new()).is_ok());
    }

    #[test]
    fn snapshot_keys_must_be_managed_and_names_well_formed() {
        let managed = BTreeMap::from([("GIT_OPTIONAL_LOCKS".to_owned(), "0".to_owned())]);
        assert!(matches!(
            base().merged(&BTreeMap::new(), &managed),
            Err(ExecError::UnmanagedKeyInSnapshot { .. })
        ));
        for bad in ["", "A=B", "A\0B"] {
            let env = BTreeMap::from([(bad.to_owned(), "v".to_owned())]);
            assert!(matches!(
                base().merged(&env, &BTreeMap::new()),
                Err(ExecError::BadEnvName { .. })
            ));
        }
        let env = BTreeMap::from([("A".to_owned(), "v\0".to_owned())]);
        assert!(matches!(
            base().merged(&env, &BTreeMap::new()),
            Err(ExecError::NulInEnvValue { .. })
        ));
    }

    #[test]
    fn non_utf8_names_are_dropped_and_values_kept() {
        let ambient = vec![
            (OsString::from_vec(b"BAD\xffNAME".to_vec()), os("v")),
            (os("RAW"), OsString::from_vec(b"\xfe\xff".to_vec())),
        ];
        let base = BaseEnv::new(ambient, &default_secret_pattern(), &[]);
        let merged = base.merged(&BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert_eq!(merged.len(), 1 + TERMINAL_OVERRIDES.len());
        assert_eq!(merged[&os("RAW")], OsString::from_vec(b"\xfe\xff".to_vec()));
    }

    #[test]
    fn the_pattern_is_configurable() {
        let pattern = Regex::new("^ONLY_THIS$").unwrap();
        let base = BaseEnv::new(ambient(), &pattern, &[]);
        let merged = base.merged(&BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert!(merged.contains_key(&os("GITHUB_TOKEN")));
        // The DSH_ rule is not part of the pattern and always applies.
        assert!(!merged.contains_key(&os("dsh_lower")));
    }
}
