//! What a variable of dshd's own environment is to the commands dshd starts: the value every
//! command gets, or why the executor keeps it from them. Hook features that read dshd's
//! environment outside a command (an HTTP hook's header values) ask here, so they reach nothing
//! a command could not.

use std::ffi::OsStr;

use super::Executor;

/// Why a variable is kept from every command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Withheld {
    /// Its name matches the secret pattern (`shell.secret_pattern`), whether it is set or not.
    SecretName,
    /// It is the model key variable (`model.api_key_env`), whether it is set or not.
    ModelKey,
    /// dshd's value is not passed on for another reason (the executor's own words).
    Value(&'static str),
}

impl std::fmt::Display for Withheld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::SecretName => f.write_str("its name matches shell.secret_pattern"),
            Self::ModelKey => f.write_str("it is the model key variable (model.api_key_env)"),
            Self::Value(reason) => write!(f, "dshd passes it to no command: {reason}"),
        }
    }
}

impl Executor {
    /// `name` as a command started with no environment of its own sees it: its value (`None`
    /// when unset), or why commands never get it. Names are decided before values, so a secret
    /// name is refused whether or not dshd has it.
    pub(crate) fn command_var(&self, name: &str) -> Result<Option<&OsStr>, Withheld> {
        if self.secret_pattern.is_match(name) {
            return Err(Withheld::SecretName);
        }
        if self
            .config
            .extra_scrub
            .iter()
            .any(|s| s.eq_ignore_ascii_case(name))
        {
            return Err(Withheld::ModelKey);
        }
        if let Some(reason) = self.base.withheld(name) {
            return Err(Withheld::Value(reason));
        }
        Ok(self.base.get(name))
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;

    use super::*;
    use crate::exec::ExecConfig;

    #[test]
    fn secrets_and_the_model_key_are_withheld_by_name_and_the_rest_is_what_commands_get() {
        let config = ExecConfig {
            extra_scrub: vec!["LLM_ACCESS".into()],
            ..ExecConfig::default()
        };
        let ambient: Vec<(OsString, OsString)> = [
            ("HOOK_TEAM", "blue"),
            ("HOOK_TOKEN", "t"),
            ("LLM_ACCESS", "k"),
            ("DB_URL", "postgres://u:pw@h/db"),
            ("TERM", "xterm-256color"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let executor = Executor::with_base_env(config, ambient).unwrap();
        assert_eq!(
            executor.command_var("HOOK_TEAM"),
            Ok(Some(OsStr::new("blue")))
        );
        assert_eq!(executor.command_var("UNSET_HERE"), Ok(None));
        assert_eq!(executor.command_var("TERM"), Ok(Some(OsStr::new("dumb"))));
        assert_eq!(
            executor.command_var("HOOK_TOKEN"),
            Err(Withheld::SecretName)
        );
        assert_eq!(
            executor.command_var("other_token"),
            Err(Withheld::SecretName)
        );
        assert_eq!(executor.command_var("llm_access"), Err(Withheld::ModelKey));
        assert!(matches!(
            executor.command_var("DB_URL"),
            Err(Withheld::Value(_))
        ));
    }
}
