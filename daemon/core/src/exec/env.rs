//! The child environment (CONTRACTS §5.3).
//!
//! Four layers, later entries winning:
//!
//! 1. the daemon's own environment, minus every variable [`BaseEnv::new`] refuses to pass on: a
//!    name matching the secret pattern, a name in `extra_scrub` (ASCII case-insensitive exact
//!    match), a name whose upper-cased form starts with `DSH_` or is [`OWNER_MARKER`], a variable
//!    bash acts on at startup ([`shell_startup_effect`]), and a value carrying a credential
//!    ([`has_url_password`]);
//! 2. the terminal overrides [`TERMINAL_OVERRIDES`];
//! 3. ordinary `env` from a trusted caller; a `DSH_*` key (any case), [`OWNER_MARKER`] and the
//!    startup variables are refused ([`check_caller_env`]), so neither an outer harness's value nor
//!    code run before the command can stand in for a managed one;
//! 4. the managed snapshot, whose keys must start with `DSH_`.
//!
//! Layers 1 and 2 are computed once, when the executor is built: the daemon's environment does not
//! change while it runs, and doing the scrub once keeps it off the per-spawn path.
//!
//! Non-UTF-8 names in the daemon's environment are **dropped**: the secret pattern and the `DSH_`
//! rule cannot be checked reliably on bytes that are not text, and scrubbing must fail closed.
//! Non-UTF-8 *values* under a UTF-8 name are kept verbatim (paths may legitimately be bytes); the
//! credential and exported-function checks look at their bytes.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use regex::Regex;

use super::ExecError;
use super::limits::{self, LaunchPart};

/// The terminal policy every child gets (layer 2): no colour, no pager, a dumb terminal.
pub(crate) const TERMINAL_OVERRIDES: [(&str, &str); 4] = [
    ("NO_COLOR", "1"),
    ("TERM", "dumb"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
];

/// The prefix reserved for managed variables.
pub(crate) const MANAGED_PREFIX: &str = "DSH_";

/// The name of the per-process owner marker the executor itself sets on its children. Reserved
/// like the `DSH_` prefix (compared ASCII case-insensitively): never inherited, never accepted
/// from a caller, so only the executor's own value can be seen.
pub(crate) const OWNER_MARKER: &str = "DSHD_OWNER";

/// Whether `name` is in the managed namespace, compared case-insensitively so `dsh_home` from an
/// outer harness is treated like `DSH_HOME`.
pub(crate) fn is_managed_name(name: &str) -> bool {
    name.len() >= MANAGED_PREFIX.len()
        && name.as_bytes()[..MANAGED_PREFIX.len()].eq_ignore_ascii_case(MANAGED_PREFIX.as_bytes())
}

/// Whether `name` is reserved for the executor ([`OWNER_MARKER`], any case).
pub(crate) fn is_reserved_name(name: &str) -> bool {
    name.eq_ignore_ascii_case(OWNER_MARKER)
}

/// Variables bash reads when it starts, or that a shell the command starts (`sh -i`, `bash -i`)
/// reads, to run code or to change how commands behave, each with what it does. They are never
/// inherited and refused from a caller: a value meant for an outer harness's shells would run
/// before the command and could overwrite the managed snapshot (a `BASH_ENV` file that exports
/// `DSH_SESSION_ID`) or silently change what the command does. Names are bash's, so compared
/// exactly (`bash_env` means nothing to bash). `docs/CONFIG.md` lists them with the reasons and
/// the variables considered and kept.
pub(crate) const SHELL_STARTUP_VARIABLES: [(&str, &str); 21] = [
    (
        "BASH_ENV",
        "a file every non-interactive bash sources before the command",
    ),
    (
        "ENV",
        "a file interactive and POSIX-mode shells (sh -i, bash --posix -i) source at startup",
    ),
    (
        "SHELLOPTS",
        "turns on `set -o` options at startup (xtrace, errexit, noexec, posix, ...)",
    ),
    (
        "BASHOPTS",
        "turns on `shopt` options at startup (extglob, extdebug, nullglob, ...)",
    ),
    (
        "PS4",
        "expanded, command substitutions included, before every line `set -x` traces",
    ),
    (
        "BASH_XTRACEFD",
        "sends `set -x` output to an inherited file descriptor",
    ),
    (
        "PROMPT_COMMAND",
        "run before every prompt of an interactive shell",
    ),
    (
        "PS0",
        "expanded, command substitutions included, by interactive shells",
    ),
    (
        "PS1",
        "expanded, command substitutions included, by interactive shells",
    ),
    (
        "PS2",
        "expanded, command substitutions included, by interactive shells",
    ),
    (
        "POSIXLY_CORRECT",
        "starts bash in POSIX mode, where it behaves differently",
    ),
    (
        "BASH_COMPAT",
        "sets bash's compatibility level, changing how commands behave",
    ),
    (
        "BASH_LOADABLES_PATH",
        "where `enable -f` loads builtins (native code) from",
    ),
    ("BASH_ARGV0", "sets $0 at startup"),
    ("FUNCNEST", "limits function nesting, so deeper calls fail"),
    (
        "TMOUT",
        "makes `read` and `select` time out and interactive shells exit",
    ),
    (
        "CDPATH",
        "makes `cd name` change to a directory elsewhere, and print it",
    ),
    (
        "IFS",
        "changes word splitting in shells that honour it from the environment",
    ),
    (
        "GLOBIGNORE",
        "hides matching files from globs (and turns on dotglob) where honoured",
    ),
    ("EXECIGNORE", "hides matching programs from PATH lookups"),
    (
        "INPUTRC",
        "readline's key bindings and macros for interactive shells",
    ),
];

/// What an exported function does, for [`shell_startup_effect`].
const EXPORTED_FUNCTION: &str =
    "an exported function definition bash imports at startup, replacing any command of its name";

/// Why bash (or a shell the command starts) acts on `name=value` at startup, or `None` when it does
/// not. Exported functions are recognised by bash's own encoding (`BASH_FUNC_name%%`, and
/// `BASH_FUNC_name()` of some distributions' patches) and by the `() {` value that bash before the
/// Shellshock fixes imported under any name.
pub(crate) fn shell_startup_effect(name: &str, value: &[u8]) -> Option<&'static str> {
    if name.starts_with("BASH_FUNC_") || name.ends_with("%%") || value.starts_with(b"() {") {
        return Some(EXPORTED_FUNCTION);
    }
    SHELL_STARTUP_VARIABLES
        .iter()
        .find(|(known, _)| *known == name)
        .map(|(_, effect)| *effect)
}

/// Whether `value` holds a URL whose userinfo carries a password (`scheme://user:pass@host`,
/// `redis://:pass@host`), anywhere in it (a value may list several URLs). Such a value is a
/// credential whatever its variable is called (`DATABASE_URL`, `HTTP_PROXY`). The userinfo is what
/// lies between `://` and the last `@` before the authority ends (`/`, `?`, `#` or whitespace), so
/// an unencoded `@` in the password still counts; a userinfo without `:` (`ssh://git@host`) is a
/// user name only and is kept.
pub(crate) fn has_url_password(value: &[u8]) -> bool {
    let mut rest = value;
    while let Some(at) = rest.windows(3).position(|w| w == b"://") {
        // A scheme is a letter followed by letters, digits, `+`, `-` or `.` (RFC 3986).
        let has_scheme = rest[..at]
            .iter()
            .rev()
            .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            .last()
            .is_some_and(u8::is_ascii_alphabetic);
        let after = &rest[at + 3..];
        let end = after
            .iter()
            .position(|&b| matches!(b, b'/' | b'?' | b'#') || b.is_ascii_whitespace())
            .unwrap_or(after.len());
        let authority = &after[..end];
        if has_scheme
            && let Some(last_at) = authority.iter().rposition(|&b| b == b'@')
            && authority[..last_at].contains(&b':')
        {
            return true;
        }
        rest = after;
    }
    false
}

/// The environment of the client that created an agent, scrubbed as dshd's own is (layer 1, in
/// place of dshd's environment, with the terminal overrides of layer 2): what that agent's
/// commands start from (`CommandSpec::base_env`). Made by [`super::Executor::client_env`].
#[derive(Debug, Clone)]
pub struct ClientEnv(pub(crate) std::sync::Arc<BaseEnv>);

impl ClientEnv {
    /// Number of variables passed on (after the scrub, with the terminal overrides).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when nothing is passed on (never: the terminal overrides are always there).
    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// The value passed on for `name`, if any.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.0.get(name)
    }
}

/// Layers 1 and 2, computed once.
#[derive(Debug, Clone)]
pub(crate) struct BaseEnv {
    vars: BTreeMap<OsString, OsString>,
    /// The names of dshd's environment left out, and why.
    withheld: BTreeMap<OsString, &'static str>,
}

impl BaseEnv {
    /// Scrubs `ambient` (layer 1) and applies the terminal overrides (layer 2). Each variable left
    /// out is logged at debug level with the reason (names only, never values).
    pub(crate) fn new(
        ambient: impl IntoIterator<Item = (OsString, OsString)>,
        secret_pattern: &Regex,
        extra_scrub: &[String],
    ) -> Self {
        let mut vars = BTreeMap::new();
        let mut withheld = BTreeMap::new();
        for (name, value) in ambient {
            match scrub_reason(&name, &value, secret_pattern, extra_scrub) {
                None => {
                    vars.insert(name, value);
                }
                Some(reason) => {
                    tracing::debug!(name = %name.to_string_lossy(), reason, "not passed to children");
                    withheld.insert(name, reason);
                }
            }
        }
        for (name, value) in TERMINAL_OVERRIDES {
            vars.insert(name.into(), value.into());
        }
        Self { vars, withheld }
    }

    /// The value every child gets for `name` (layers 1 and 2), if any.
    pub(crate) fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// Why dshd's own variable `name` is not passed to children, when it is not.
    pub(crate) fn withheld(&self, name: &str) -> Option<&'static str> {
        self.withheld.get(OsStr::new(name)).copied()
    }

    /// Sets `vars` (checked by the caller), over what is there.
    pub(crate) fn extend(&mut self, vars: impl IntoIterator<Item = (String, String)>) {
        for (name, value) in vars {
            self.withheld.remove(OsStr::new(&name));
            self.vars.insert(name.into(), value.into());
        }
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

/// Why an ambient variable is not passed on, or `None` when it is.
pub(crate) fn scrub_reason(
    name: &OsStr,
    value: &OsStr,
    secret_pattern: &Regex,
    extra_scrub: &[String],
) -> Option<&'static str> {
    let Some(name) = name.to_str() else {
        // See the module docs: a name we cannot read as text cannot be proven harmless.
        return Some("the name is not UTF-8");
    };
    if name.is_empty() {
        Some("the name is empty")
    } else if is_managed_name(name) {
        Some("managed values come only from the snapshot")
    } else if is_reserved_name(name) {
        Some("reserved for the executor's owner marker")
    } else if secret_pattern.is_match(name) {
        Some("the name matches the secret pattern")
    } else if extra_scrub.iter().any(|s| s.eq_ignore_ascii_case(name)) {
        Some("the name is scrubbed explicitly (the model key variable)")
    } else if shell_startup_effect(name, value.as_bytes()).is_some() {
        Some("bash acts on it at startup")
    } else if has_url_password(value.as_bytes()) {
        Some("the value is a URL with a password")
    } else {
        None
    }
}

/// Checks a trusted caller's `env` (layer 3) before anything runs: names must be non-empty and
/// free of `=` and NUL, values free of NUL (the OS could not represent anything else); no key may
/// be managed (`DSH_*`, any case), reserved ([`OWNER_MARKER`]) or one bash acts on at startup
/// ([`shell_startup_effect`]); and every `NAME=value` must fit in one `execve` string.
pub(crate) fn check_caller_env(env: &BTreeMap<String, String>) -> Result<(), ExecError> {
    for (key, value) in env {
        check_entry(key, value)?;
        if is_managed_name(key) {
            return Err(ExecError::DshKeyInEnv { key: key.clone() });
        }
        if is_reserved_name(key) {
            return Err(ExecError::ReservedKeyInEnv { key: key.clone() });
        }
        if let Some(effect) = shell_startup_effect(key, value.as_bytes()) {
            return Err(ExecError::ShellStartupKeyInEnv {
                key: key.clone(),
                effect,
            });
        }
        limits::check_string(
            || LaunchPart::Env(key.clone()),
            limits::env_string_bytes(key.len(), value.len()),
        )?;
    }
    Ok(())
}

/// Checks the command before anything runs: no NUL byte (the OS could not pass it) and short
/// enough for one `execve` argument.
pub(crate) fn check_command(command: &str) -> Result<(), ExecError> {
    if command.contains('\0') {
        return Err(ExecError::NulInCommand);
    }
    limits::check_string(|| LaunchPart::Command, command.len() + 1)
}

/// Checks layers 3 and 4: [`check_caller_env`] for `env`; managed keys must carry the exact `DSH_`
/// prefix, be well formed and fit in one `execve` string.
pub(crate) fn validate_layers(
    env: &BTreeMap<String, String>,
    managed: &BTreeMap<String, String>,
) -> Result<(), ExecError> {
    check_caller_env(env)?;
    for (key, value) in managed {
        check_entry(key, value)?;
        if !key.starts_with(MANAGED_PREFIX) {
            return Err(ExecError::UnmanagedKeyInSnapshot { key: key.clone() });
        }
        limits::check_string(
            || LaunchPart::Managed(key.clone()),
            limits::env_string_bytes(key.len(), value.len()),
        )?;
    }
    Ok(())
}

/// Everything checked before a spawn: the layers, the command, and the size of the whole launch
/// against `execve`'s total limit. Errors name the part and the limit.
pub(crate) fn validate_launch(
    shell: &Path,
    base: &BaseEnv,
    command: &str,
    env: &BTreeMap<String, String>,
    managed: &BTreeMap<String, String>,
    extra: limits::Extra,
) -> Result<(), ExecError> {
    validate_layers(env, managed)?;
    check_command(command)?;
    limits::check_total(shell, base.iter(), command, env, managed, extra)
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

    /// Passes each name (with a harmless value) through the default scrub; true when it is kept.
    fn kept_by_default(name: &str) -> bool {
        let base = BaseEnv::new(
            [(os(name), os("harmless-value"))],
            &default_secret_pattern(),
            &[],
        );
        base.merged(&BTreeMap::new(), &BTreeMap::new())
            .unwrap()
            .contains_key(&os(name))
    }

    /// The default secret pattern, pinned both ways.
    #[test]
    fn the_default_scrub_table() {
        let scrubbed = [
            // The issue's list.
            "MYSQL_PWD",
            "PASSWD",
            "PASSPHRASE",
            "AUTH",
            "HF_AUTH",
            "NPM_AUTH",
            "BEARER",
            "COOKIE",
            "SENTRY_DSN",
            "SLACK_WEBHOOK_URL",
            "PRIVATE_PEM",
            // The words of the original pattern.
            "MY_API_KEY",
            "OPENAI_API_KEY",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_SESSION_TOKEN",
            "GITHUB_TOKEN",
            "GH_TOKEN",
            "HF_TOKEN",
            "DB_PASSWORD",
            "PGPASSWORD",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "CLIENT_SECRET",
            "lower_token",
            "Stripe_Secret_Key",
            // Whole-word forms.
            "HTPASSWD_FILE",
            "GPG_PASSPHRASE",
            "SSH_PRIVATE_KEY",
            "SESSION_COOKIE",
            "BEARER_TOKEN",
            "DISCORD_WEBHOOK",
            "HTTP_AUTHORIZATION",
            "AZURE_STORAGE_CONNECTION_STRING",
            "ConnectionStrings__Default",
            // Token forms.
            "PASS",
            "DB_PASS",
            "SMTP_PASS",
            "PASS_FILE",
            "LDAP_PW",
            "pw",
            "DB_PWD_FILE",
            "mysql_pwd",
            "DSN",
            "DATABASE_DSN",
            "AUTH_HEADER",
            "NPM_CONFIG__AUTH",
            "auth",
        ];
        let kept = [
            "PATH",
            "HOME",
            "PWD",
            "OLDPWD",
            "XAUTHORITY",
            "SSH_AUTH_SOCK",
            "SSH_AGENT_PID",
            "AUTHOR_NAME",
            "GIT_AUTHOR_NAME",
            "GIT_AUTHOR_EMAIL",
            "GIT_COMMITTER_NAME",
            "OAUTH_CALLBACK_URL",
            "USER",
            "LOGNAME",
            "SHELL",
            "LANG",
            "LC_ALL",
            "LC_CTYPE",
            "TZ",
            "TMPDIR",
            "XDG_RUNTIME_DIR",
            "XDG_CONFIG_HOME",
            "DISPLAY",
            "WAYLAND_DISPLAY",
            "DBUS_SESSION_BUS_ADDRESS",
            "EDITOR",
            "VISUAL",
            "HOSTNAME",
            "SHLVL",
            "CARGO_HOME",
            "RUSTUP_HOME",
            "GOPATH",
            "JAVA_HOME",
            "VIRTUAL_ENV",
            "CONDA_PREFIX",
            "NODE_ENV",
            "PYTHONPATH",
            "LD_LIBRARY_PATH",
            "MANPATH",
            "HTTP_PROXY",
            "NO_PROXY",
            "DATABASE_URL",
            "PASSENGER_APP_ENV",
            "COMPASS_DIR",
            "BYPASS_LIST",
            "WINDSNOW",
            "KRB5CCNAME",
            "GNUPGHOME",
            "GPG_TTY",
            "SSH_CONNECTION",
            "COLORTERM",
        ];
        assert!(scrubbed.len() >= 40 && kept.len() >= 40);
        let wrongly_kept: Vec<_> = scrubbed.iter().filter(|n| kept_by_default(n)).collect();
        let wrongly_scrubbed: Vec<_> = kept.iter().filter(|n| !kept_by_default(n)).collect();
        assert!(
            wrongly_kept.is_empty(),
            "reached children: {wrongly_kept:?}"
        );
        assert!(
            wrongly_scrubbed.is_empty(),
            "scrubbed although harmless: {wrongly_scrubbed:?}"
        );
    }

    #[test]
    fn url_passwords_are_found_whatever_the_name() {
        let credentials = [
            "postgres://user:password@host/db",
            "postgresql://u:pw@h:5432/db?sslmode=require",
            "redis://:secret@cache:6379/0",
            "https://x-access-token:ghs_abc@github.com/o/r.git",
            "http://u:p@proxy:3128",
            "mysql://root:p@ss@db/app",
            "amqp://u:p@h",
            "git+ssh://u:p@h/repo",
            "https://mirror.example https://u:p@private.example/simple",
            "mongodb+srv://u:p@cluster0.example.net/?retryWrites=true",
        ];
        let harmless = [
            "postgres://localhost/db",
            "ssh://git@github.com/o/r",
            "https://github.com/o/r",
            "https://user@host/path",
            "http://host:8080/path@x",
            "http://host:8080/?q=a:b@c",
            "user:pass@host",
            "mailto:a@b.example",
            "://u:p@h",
            "1ab://u:p@h",
            "",
            "plain text: with colons @ and at signs",
        ];
        for value in credentials {
            assert!(has_url_password(value.as_bytes()), "missed {value:?}");
        }
        for value in harmless {
            assert!(!has_url_password(value.as_bytes()), "flagged {value:?}");
        }
    }

    #[test]
    fn credential_values_are_scrubbed_under_any_name_even_as_bytes() {
        let ambient = vec![
            (os("DATABASE_URL"), os("postgres://u:pw@h/db")),
            (os("HTTP_PROXY"), os("http://u:p@proxy:3128")),
            (
                os("RAW_URL"),
                OsString::from_vec(b"\xffhttps://u:p@h\xfe".to_vec()),
            ),
            (os("REPO_URL"), os("ssh://git@github.com/o/r")),
            (os("LOCAL_DB_URL"), os("postgres://localhost/db")),
        ];
        // A custom pattern that matches nothing: the value rule does not depend on it.
        let pattern = Regex::new("^NOTHING$").unwrap();
        let merged = BaseEnv::new(ambient, &pattern, &[])
            .merged(&BTreeMap::new(), &BTreeMap::new())
            .unwrap();
        for gone in ["DATABASE_URL", "HTTP_PROXY", "RAW_URL"] {
            assert!(!merged.contains_key(&os(gone)), "{gone} reached children");
        }
        assert_eq!(merged[&os("REPO_URL")], os("ssh://git@github.com/o/r"));
        assert_eq!(merged[&os("LOCAL_DB_URL")], os("postgres://localhost/db"));
        // A trusted caller may still pass such a value on purpose.
        let env = BTreeMap::from([("DATABASE_URL".to_owned(), "postgres://u:pw@h/db".to_owned())]);
        let base = BaseEnv::new(Vec::new(), &pattern, &[]);
        assert!(base.merged(&env, &BTreeMap::new()).is_ok());
    }

    /// Every startup form: the listed names, and exported functions by name or by value.
    fn startup_entries() -> Vec<(String, String)> {
        let mut entries: Vec<(String, String)> = SHELL_STARTUP_VARIABLES
            .iter()
            .map(|(name, _)| ((*name).to_owned(), "/some/file".to_owned()))
            .collect();
        entries.extend([
            (
                "BASH_FUNC_echo%%".to_owned(),
                "() {  builtin echo forged\n}".to_owned(),
            ),
            ("BASH_FUNC_ls()".to_owned(), "() {  :\n}".to_owned()),
            ("BASH_FUNC_x".to_owned(), "anything".to_owned()),
            ("odd%%".to_owned(), "anything".to_owned()),
            (
                "OLD_STYLE_FN".to_owned(),
                "() { echo shellshock; }".to_owned(),
            ),
        ]);
        entries
    }

    #[test]
    fn startup_variables_are_never_inherited() {
        let mut ambient: Vec<(OsString, OsString)> = startup_entries()
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // Bash compares these names exactly, so other spellings are ordinary variables.
        ambient.push((os("bash_env"), os("/f")));
        ambient.push((os("MY_ENV"), os("/f")));
        ambient.push((os("FN_LIKE"), os("(not a function)")));
        let merged = BaseEnv::new(ambient, &default_secret_pattern(), &[])
            .merged(&BTreeMap::new(), &BTreeMap::new())
            .unwrap();
        for (name, _) in startup_entries() {
            assert!(!merged.contains_key(&os(&name)), "{name} was inherited");
        }
        for kept in ["bash_env", "MY_ENV", "FN_LIKE"] {
            assert!(merged.contains_key(&os(kept)), "{kept} was dropped");
        }
    }

    #[test]
    fn startup_variables_are_refused_from_a_caller_naming_the_key() {
        for (key, value) in startup_entries() {
            let env = BTreeMap::from([(key.clone(), value)]);
            let err = base().merged(&env, &BTreeMap::new()).unwrap_err();
            assert!(
                matches!(&err, ExecError::ShellStartupKeyInEnv { key: k, .. } if *k == key),
                "{key}: {err:?}"
            );
            assert!(err.to_string().contains(&format!("{key:?}")), "{err}");
        }
        let env = BTreeMap::from([("bash_env".to_owned(), "/f".to_owned())]);
        assert!(base().merged(&env, &BTreeMap::new()).is_ok());
    }

    #[test]
    fn the_owner_marker_is_reserved_in_any_case() {
        let ambient = vec![
            (os("DSHD_OWNER"), os("outer")),
            (os("dshd_owner"), os("outer")),
        ];
        let base = BaseEnv::new(ambient, &default_secret_pattern(), &[]);
        let merged = base.merged(&BTreeMap::new(), &BTreeMap::new()).unwrap();
        assert_eq!(merged.len(), TERMINAL_OVERRIDES.len(), "{merged:?}");
        for key in ["DSHD_OWNER", "dshd_owner", "Dshd_Owner"] {
            let env = BTreeMap::from([(key.to_owned(), "forged".to_owned())]);
            let err = base.merged(&env, &BTreeMap::new()).unwrap_err();
            assert!(
                matches!(&err, ExecError::ReservedKeyInEnv { key: k } if k == key),
                "{err:?}"
            );
            assert!(err.to_string().contains(key), "{err}");
        }
        // Nor can the snapshot carry it: managed keys must start with `DSH_`.
        let managed = BTreeMap::from([("DSHD_OWNER".to_owned(), "forged".to_owned())]);
        assert!(matches!(
            base.merged(&BTreeMap::new(), &managed),
            Err(ExecError::UnmanagedKeyInSnapshot { .. })
        ));
    }

    #[test]
    fn oversized_strings_are_refused_naming_the_key_and_the_limit() {
        let key = "BIG";
        // `BIG=` plus the value plus the NUL is exactly the limit: accepted.
        let fits = "v".repeat(limits::MAX_STRING_BYTES - key.len() - 2);
        let env = BTreeMap::from([(key.to_owned(), fits.clone())]);
        assert!(check_caller_env(&env).is_ok());
        let env = BTreeMap::from([(key.to_owned(), format!("{fits}v"))]);
        let err = check_caller_env(&env).unwrap_err();
        assert!(
            matches!(&err, ExecError::TooLong { part: LaunchPart::Env(k), .. } if k == key),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("\"BIG\"") && text.contains("131072"),
            "{text}"
        );

        let managed = BTreeMap::from([("DSH_BIG".to_owned(), format!("{fits}vvvv"))]);
        let err = validate_layers(&BTreeMap::new(), &managed).unwrap_err();
        assert!(
            matches!(&err, ExecError::TooLong { part: LaunchPart::Managed(k), .. } if k == "DSH_BIG"),
            "{err:?}"
        );

        assert!(check_command(&"c".repeat(limits::MAX_STRING_BYTES - 1)).is_ok());
        let err = check_command(&"c".repeat(limits::MAX_STRING_BYTES)).unwrap_err();
        assert!(
            matches!(
                &err,
                ExecError::TooLong {
                    part: LaunchPart::Command,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(matches!(
            check_command("a\0b"),
            Err(ExecError::NulInCommand)
        ));
    }
}
