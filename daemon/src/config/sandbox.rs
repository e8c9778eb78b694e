//! `[sandbox]`: the policy of agents created without one, the extra writable roots of
//! `workspace-write`, the Landlock ABI, and the paths no confined command may write or read,
//! derived from the rest of the configuration.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{Builder, Config, ConfigError, PostgresUrl};
use dsh_core::{KNOWN_ABI, SandboxPolicy, SandboxSettings};

/// The `[sandbox]` section as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SandboxSection {
    pub mode: Option<String>,
    pub network: Option<String>,
    pub writable_roots: Option<Vec<String>>,
    pub landlock_abi: Option<u32>,
    pub tmp_root: Option<String>,
    pub hidden: Option<Vec<String>>,
}

impl Builder<'_> {
    /// The default policy and the executor's sandbox settings (protected paths come later, from
    /// the finished config: [`protect`]).
    pub(super) fn sandbox(
        &self,
        section: &SandboxSection,
    ) -> Result<(SandboxPolicy, SandboxSettings), ConfigError> {
        let mut policy = SandboxPolicy::UNCONFINED;
        if let Some(mode) = &section.mode {
            policy.mode = mode
                .parse()
                .map_err(|e| self.invalid("sandbox.mode", format!("{e}")))?;
        }
        if let Some(network) = &section.network {
            policy.network = network
                .parse()
                .map_err(|e| self.invalid("sandbox.network", format!("{e}")))?;
        }
        if let Some(abi) = section.landlock_abi
            && !(1..=KNOWN_ABI).contains(&abi)
        {
            return Err(self.invalid(
                "sandbox.landlock_abi",
                format!("{abi} is not a Landlock ABI this dsh knows (1 to {KNOWN_ABI})"),
            ));
        }
        let mut writable_roots = Vec::new();
        for root in section.writable_roots.iter().flatten() {
            let path = self.absolute(root, "sandbox.writable_roots")?;
            // Spelled out here; the daemon checks again with links resolved at every call.
            if path.starts_with(self.home) || self.home.starts_with(&path) {
                return Err(self.invalid(
                    "sandbox.writable_roots",
                    format!(
                        "{} would make the harness home {} writable",
                        path.display(),
                        self.home.display()
                    ),
                ));
            }
            writable_roots.push(path);
        }
        // Private places first; never a predictable name in a shared directory such as /tmp,
        // which another user could create first.
        let mut tmp_roots = Vec::new();
        tmp_roots.extend(self.path(section.tmp_root.as_ref(), "sandbox.tmp_root")?);
        if let Some(runtime) = self.ambient.runtime_dir.as_deref().map(Path::new)
            && runtime.is_absolute()
        {
            tmp_roots.push(runtime.join("dsh-sandbox"));
        }
        tmp_roots.push(self.home.join("run/sandbox"));
        let mut hidden = Vec::new();
        for path in section.hidden.iter().flatten() {
            let path = self.absolute(path, "sandbox.hidden")?;
            if path == Path::new("/") {
                return Err(self.invalid(
                    "sandbox.hidden",
                    "/ would leave confined commands nothing to read".to_owned(),
                ));
            }
            hidden.push(path);
        }
        // Secrets of the user's service manager: a drop-in may set the model key
        // (`Environment=`), and the unit's credentials directory holds it.
        let config_home = self
            .ambient
            .config_home
            .as_deref()
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| self.ambient.user_home.as_ref().map(|h| h.join(".config")));
        hidden.extend(config_home.map(|c| c.join("systemd")));
        hidden.extend(
            self.ambient
                .credentials_dir
                .as_deref()
                .map(PathBuf::from)
                .filter(|p| p.is_absolute()),
        );
        Ok((
            policy,
            SandboxSettings {
                writable_roots,
                landlock_abi: section.landlock_abi,
                tmp_roots,
                hidden,
                ..SandboxSettings::default()
            },
        ))
    }
}

/// Fills in what confined commands may never read: dshd's config file (the default one under the
/// home even when there is none yet) and its state directory (the backend choice, which may name
/// a database), the model key file and the PostgreSQL URL file, beside what `[sandbox]` already
/// listed.
fn hide(config: &mut Config) {
    let home = &config.home.path;
    let mut hidden = vec![
        home.join(super::DEFAULT_FILE_NAME),
        home.join(dsh_core::STATE_DIR),
    ];
    hidden.extend(config.file.iter().cloned());
    hidden.extend(config.api_key_file.iter().cloned());
    if let Some(PostgresUrl::File(file)) = &config.postgres.url {
        hidden.push(file.clone());
    }
    config.exec.sandbox.hidden.extend(hidden);
    config.exec.sandbox.hidden.sort();
    config.exec.sandbox.hidden.dedup();
}

/// Fills in what confined commands may never write: the home, the session stores, the spill
/// and socket directories, the config file and the configured hook files (a hook from a file a
/// confined agent can write runs in its sandbox, but one agent's workspace may hold the file
/// that every agent's hooks come from), and what they may not read. Project hook files
/// (`hooks.project_hooks`) are not protected: they lie in the workspace, which a protected path
/// would close to the agent altogether, and their hooks run in the sandbox of an agent that can
/// write them.
pub(super) fn protect(config: &mut Config) {
    hide(config);
    let mut protected = vec![
        config.home.path.clone(),
        config.jsonl_root.clone(),
        config.exec.spill_dir.clone(),
    ];
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut name = config.sqlite_path.clone().into_os_string();
        name.push(suffix);
        protected.push(name.into());
    }
    if let Some(dir) = config.socket.parent() {
        protected.push(dir.to_owned());
    }
    protected.extend(config.file.iter().cloned());
    protected.extend(config.hooks.claude_code.iter().cloned());
    protected.extend(config.hooks.codex.iter().cloned());
    protected.extend(config.exec.sandbox.hidden.iter().cloned());
    config.exec.sandbox.protected = protected;
}
