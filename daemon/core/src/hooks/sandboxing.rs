//! Where a hook runs: as the user, or in the sandbox of the agent it fires for (issue 39, item 2:
//! hooks never execute what a confined agent can write). `docs/CONFIG.md` ("Hooks and the
//! sandbox") states the rule for users; this is its one implementation.
//!
//! For an agent whose policy confines anything, a command hook runs under that same policy
//! (writable roots, network, through the launcher like the agent's own calls) when:
//!
//! 1. `hooks.sandbox` is `"always"`; or
//! 2. the agent's mode is `off` (with network off): it writes wherever the user can, hook files
//!    and scripts included; or
//! 3. the hook's file lies at or under one of the agent's writable roots; or
//! 4. its command names something there. The command is split into words (`words.rs`: quotes
//!    removed, `$CLAUDE_PROJECT_DIR`, `$CLAUDE_PLUGIN_ROOT`, `$PWD`, `$HOME`, a leading `~` and the
//!    other variables every command gets expanded); a word counts when
//!    - it contains a `/` (not as a URL with a scheme other than `file:`) and, resolved against
//!      the hook's cwd, reaches a writable root: the walk follows the path as the kernel would,
//!      links included, and counts every place it passes (the link itself, not only its target:
//!      the agent can repoint a link it can write);
//!    - it names an existing entry of the hook's cwd that resolves there (`.` and `..` aside: every
//!      hook runs in its cwd, which the indirect case below covers);
//!    - bash would look it up through `PATH` (no `/`, not an option or assignment) and an entry
//!      before the first executable match, or the match itself, lies under a writable root;
//!    - it holds an expansion dsh cannot know before the command runs, or a glob, and a `/`;
//!      or it is a glob of the cwd while the cwd lies under a writable root.
//!
//!    The value after `=` (`--opt=value`, `NAME=value`), the `:`-separated parts of a word and
//!    the path glued to a short option (`-I/dir`) are looked at too, and so are the words of a
//!    word that is itself a command (`bash -c '…'`), three levels deep. A command that cannot be
//!    split counts.
//!
//! The writable roots are those of the agent's own calls: for `workspace-write` its cwd and
//! `sandbox.writable_roots`, and for both filesystem modes the places its private temporary
//! directory is made; each resolved as far as it exists.
//!
//! An HTTP hook is dshd's own request, which no sandbox can hold: one from a file the agent can
//! write is not run for it (the agent would choose where dshd sends what).
//!
//! What this cannot see (docs/CONFIG.md says so): a program that loads code from its cwd or a
//! file of its own choosing (`make`, `npx`, `cargo`, `python -m`, a script that reads a path from
//! its input); a bare name that the agent creates in the cwd after the hook was placed and before
//! it runs. `hooks.sandbox = "always"` covers both.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

use super::words::{self, Word};
use crate::sandbox::plan::resolve;
use crate::sandbox::{SandboxMode, SandboxPolicy, SandboxSettings};

/// `hooks.sandbox`: which command hooks of a confined agent run in its sandbox.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookSandbox {
    /// Those that name, or come from a file, the agent can write.
    #[default]
    Auto,
    /// All of them.
    Always,
}

/// Where one hook runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Placement {
    /// As the user: dshd's rights.
    User,
    /// In the firing agent's sandbox, for this reason.
    Sandbox(String),
    /// Not at all (an HTTP hook the agent could have written), for this reason.
    Refused(String),
}

/// A confined agent as its hooks see it: its policy, its workspace, and where it may write.
#[derive(Debug, Clone)]
pub(super) struct Reach {
    pub policy: SandboxPolicy,
    pub workspace: PathBuf,
    extra_roots: Vec<PathBuf>,
    tmp_roots: Vec<PathBuf>,
    mode: HookSandbox,
}

/// One hook to place.
pub(super) struct Hook<'a> {
    /// The file it was read from.
    pub file: &'a Path,
    /// An HTTP hook (`command` is its URL).
    pub http: bool,
    /// The command, as it will be run.
    pub command: &'a str,
    /// Its working directory.
    pub cwd: &'a Path,
    /// The value of a variable it will find, when dsh knows it; `PATH` among them.
    pub vars: &'a dyn Fn(&str) -> Option<String>,
}

/// bash's own `PATH` when none is set (it ends with the cwd).
const BASH_DEFAULT_PATH: &str = "/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin:.";
/// How deep a word that is itself a command is split again.
const MAX_NESTING: usize = 3;
/// How many links one path may pass, as the kernel's limit.
const MAX_LINKS: u32 = 40;

impl Reach {
    /// The reach of an agent under `policy` in `workspace`; `None` when the policy confines
    /// nothing (its hooks run as the user).
    pub(super) fn of(
        policy: SandboxPolicy,
        workspace: &Path,
        settings: &SandboxSettings,
        mode: HookSandbox,
    ) -> Option<Self> {
        policy.is_confined().then(|| Self {
            policy,
            workspace: workspace.to_owned(),
            extra_roots: settings.writable_roots.clone(),
            tmp_roots: settings.tmp_roots.clone(),
            mode,
        })
    }

    /// The agent's writable roots, resolved as far as they exist.
    fn roots(&self) -> Vec<PathBuf> {
        let listed: Vec<&PathBuf> = match self.policy.mode {
            SandboxMode::Off => return vec![PathBuf::from("/")],
            SandboxMode::WorkspaceWrite => std::iter::once(&self.workspace)
                .chain(&self.extra_roots)
                .chain(&self.tmp_roots)
                .collect(),
            SandboxMode::ReadOnly => self.tmp_roots.iter().collect(),
        };
        listed.into_iter().map(|p| resolve(p)).collect()
    }

    /// Where `hook` runs (blocking: it looks at the file system).
    pub(super) fn place(&self, hook: &Hook<'_>) -> Placement {
        let roots = self.roots();
        let mut walker = Walker {
            roots: &roots,
            links: 0,
        };
        let fs_off = self.policy.mode == SandboxMode::Off;
        let file = if fs_off {
            Some(format!(
                "its hook file {} is one the agent can write (sandbox mode off: every file the user can)",
                hook.file.display()
            ))
        } else {
            walker
                .resolve(hook.file)
                .err()
                .map(|found| format!("its hook file {} {}", hook.file.display(), found.said()))
        };
        if hook.http {
            return match file {
                Some(why) => Placement::Refused(format!(
                    "an HTTP hook is not run for an agent that can write it ({why}): dshd would send the request outside the agent's sandbox ({})",
                    self.policy
                )),
                None => Placement::User,
            };
        }
        if self.mode == HookSandbox::Always {
            return Placement::Sandbox("hooks.sandbox is \"always\"".to_owned());
        }
        if let Some(why) = file {
            return Placement::Sandbox(why);
        }
        match Command::new(hook, &mut walker).first_hit() {
            Some(why) => Placement::Sandbox(why),
            None => Placement::User,
        }
    }
}

/// A place a walk reached that the agent can write, or a walk that could not end.
#[derive(Debug)]
enum Found {
    Under { location: PathBuf, root: PathBuf },
    Links(PathBuf),
}

impl Found {
    fn said(&self) -> String {
        match self {
            Self::Under { location, root } if location == root => {
                format!("lies under the agent's writable root {}", root.display())
            }
            Self::Under { location, root } => format!(
                "lies under the agent's writable root {} (at {})",
                root.display(),
                location.display()
            ),
            Self::Links(at) => format!(
                "passes more than {MAX_LINKS} links (at {}): where it leads cannot be told",
                at.display()
            ),
        }
    }
}

/// Follows paths as the kernel would, counting every place passed.
struct Walker<'a> {
    roots: &'a [PathBuf],
    links: u32,
}

impl Walker<'_> {
    /// `path` (absolute) resolved, or the first writable place on the way.
    fn resolve(&mut self, path: &Path) -> Result<PathBuf, Found> {
        self.links = 0;
        self.walk(Path::new("/"), path)
    }

    /// `path` resolved from directory `from` (itself resolved).
    fn walk(&mut self, from: &Path, path: &Path) -> Result<PathBuf, Found> {
        let mut current = from.to_path_buf();
        for component in path.components() {
            match component {
                Component::RootDir => current = PathBuf::from("/"),
                Component::Prefix(_) | Component::CurDir => {}
                Component::ParentDir => {
                    current.pop();
                }
                Component::Normal(name) => {
                    let next = current.join(name);
                    self.check(&next)?;
                    match std::fs::read_link(&next) {
                        Ok(target) => {
                            self.links += 1;
                            if self.links > MAX_LINKS {
                                return Err(Found::Links(next));
                            }
                            current = self.walk(&current, &target)?;
                        }
                        // Not a link, or not there: the rest is where it will be.
                        Err(_) => current = next,
                    }
                }
            }
        }
        self.check(&current)?;
        Ok(current)
    }

    fn check(&self, location: &Path) -> Result<(), Found> {
        match self.roots.iter().find(|root| location.starts_with(root)) {
            Some(root) => Err(Found::Under {
                location: location.to_owned(),
                root: root.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// One hook command being looked at.
struct Command<'h, 'w, 'r> {
    hook: &'h Hook<'h>,
    walker: &'w mut Walker<'r>,
    /// The hook's cwd resolved, or where it reached a writable root.
    cwd: Result<PathBuf, String>,
    /// The `PATH` entries resolved (made on first use), each with its text.
    path: Option<Vec<(String, Result<PathBuf, String>)>>,
}

impl<'h, 'w, 'r> Command<'h, 'w, 'r> {
    fn new(hook: &'h Hook<'h>, walker: &'w mut Walker<'r>) -> Self {
        let cwd = walker.resolve(hook.cwd).map_err(|found| {
            format!(
                "its working directory {}, which {}",
                hook.cwd.display(),
                found.said()
            )
        });
        Self {
            hook,
            walker,
            cwd,
            path: None,
        }
    }

    /// Why the command runs in the sandbox, if it names something the agent can write.
    fn first_hit(&mut self) -> Option<String> {
        let words = match words::split(self.hook.command, self.hook.vars) {
            Ok(words) => words,
            Err(e) => {
                return Some(format!(
                    "its command cannot be split into words ({e}), so what it runs cannot be told"
                ));
            }
        };
        let mut queue: Vec<(Word, usize)> = words.into_iter().map(|w| (w, 0)).collect();
        while let Some((word, depth)) = queue.pop() {
            if let Some(why) = self.hit(&word) {
                return Some(why);
            }
            if depth < MAX_NESTING
                && word.text.contains([
                    ' ', '\t', '\n', ';', '|', '&', '<', '>', '(', ')', '$', '`', '\'', '"', '\\',
                ])
            {
                // A word that is a command of its own (`bash -c '…'`); one that does not split
                // is only the text it is.
                if let Ok(inner) = words::split(&word.text, self.hook.vars) {
                    queue.extend(inner.into_iter().map(|w| (w, depth + 1)));
                }
            }
        }
        None
    }

    fn hit(&mut self, word: &Word) -> Option<String> {
        let text = word.text.as_str();
        let named = |why: String| format!("its command's word {text:?} {why}");
        if (word.opaque || word.glob) && text.contains('/') {
            return Some(named(
                "holds a pattern or an expansion dsh cannot know before it runs, and a `/`: it may name any path".to_owned(),
            ));
        }
        if word.glob {
            return self
                .cwd
                .as_ref()
                .err()
                .map(|why| named(format!("matches names in {why}")));
        }
        if text.is_empty() || word.opaque {
            return None;
        }
        for candidate in candidates(text) {
            if candidate.contains('/') {
                if let Some(why) = self.path_hit(candidate) {
                    return Some(named(why));
                }
            } else if let Some(why) = self.entry_hit(candidate) {
                return Some(named(why));
            }
        }
        let program = !text.contains('/') && !text.starts_with('-') && !text.contains('=');
        if program && let Some(why) = self.lookup_hit(text) {
            return Some(named(why));
        }
        None
    }

    /// A path, absolute or from the cwd.
    fn path_hit(&mut self, path: &str) -> Option<String> {
        if path.starts_with('/') {
            return self.walker.resolve(Path::new(path)).err().map(|f| f.said());
        }
        match &self.cwd {
            Err(why) => Some(format!("is a path from {why}")),
            Ok(cwd) => {
                let cwd = cwd.clone();
                self.walker.links = 0;
                self.walker
                    .walk(&cwd, Path::new(path))
                    .err()
                    .map(|f| f.said())
            }
        }
    }

    /// A name that may be an entry of the cwd.
    fn entry_hit(&mut self, name: &str) -> Option<String> {
        if name == "."
            || name == ".."
            || std::fs::symlink_metadata(self.hook.cwd.join(name)).is_err()
        {
            return None;
        }
        match &self.cwd {
            Err(why) => Some(format!("names an entry of {why}")),
            Ok(cwd) => {
                let cwd = cwd.clone();
                self.walker.links = 0;
                self.walker
                    .walk(&cwd, Path::new(name))
                    .err()
                    .map(|f| format!("names an entry of the working directory that {}", f.said()))
            }
        }
    }

    /// A program bash would look up through `PATH`.
    fn lookup_hit(&mut self, name: &str) -> Option<String> {
        if self.path.is_none() {
            let value = (self.hook.vars)("PATH").unwrap_or_else(|| BASH_DEFAULT_PATH.to_owned());
            let entries = value
                .split(':')
                .map(|entry| {
                    // An empty or relative entry is the cwd, or a place under it.
                    let dir = if entry.starts_with('/') {
                        PathBuf::from(entry)
                    } else {
                        self.hook.cwd.join(entry)
                    };
                    let resolved = self.walker.resolve(&dir).map_err(|f| f.said());
                    (entry.to_owned(), resolved)
                })
                .collect();
            self.path = Some(entries);
        }
        for (entry, dir) in self.path.iter().flatten() {
            let dir = match dir {
                Err(why) => {
                    return Some(format!(
                        "is looked up through the PATH entry {entry:?}, which {why}"
                    ));
                }
                Ok(dir) => dir.clone(),
            };
            self.walker.links = 0;
            match self.walker.walk(&dir, Path::new(name)) {
                Err(found) => return Some(format!("is found through PATH and {}", found.said())),
                Ok(program) if is_executable(&program) => return None,
                Ok(_) => {}
            }
        }
        None
    }
}

/// The parts of a word that may be paths: the word, the value after its first `=`, their
/// `:`-separated parts, and the path glued to a short option. A URL with a scheme other than
/// `file:` is no path; a `file:` URL is its path.
fn candidates(text: &str) -> Vec<&str> {
    if let Some((scheme, rest)) = text.split_once("://")
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return if scheme.eq_ignore_ascii_case("file") {
            vec![rest.find('/').map_or(rest, |i| &rest[i..])]
        } else {
            Vec::new()
        };
    }
    let mut out = vec![text];
    let value = text.split_once('=').map(|(_, value)| value);
    out.extend(value);
    for whole in [Some(text), value].into_iter().flatten() {
        if whole.contains(':') {
            out.extend(whole.split(':').filter(|part| part.contains('/')));
        }
    }
    if text.starts_with('-')
        && let Some(i) = text.find('/')
    {
        out.push(&text[i..]);
    }
    out
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
