//! Project instructions: the `AGENTS.md` files an agent works under, found once before its first
//! turn and logged as `session/instructions`, whose text the history sends as its first message.
//!
//! The order is the home's file (`<home>/AGENTS.md`), then one file per directory from the
//! repository root (the nearest ancestor of the cwd holding `.git`; the filesystem root when there
//! is none) down to the cwd, each directory's first name of [`InstructionSettings::files`] that
//! exists, so the nearest file comes last and weighs most. dshd only looks at names (a `stat`);
//! every file's content is read by the launcher under the agent's own sandbox plan, as its `read`
//! tool would be, so a link planted in the workspace reaches nothing the agent could not read
//! itself. Nothing from the workspace is ever run.

use std::path::{Path, PathBuf};

use dsh_launch::file_op::{FileReply, FileRequest};
use dsh_session::{EventData, InstructionFile};

use tokio_util::sync::CancellationToken;

use super::{Agent, AgentServices, InstructionSettings};
use crate::call::ToolExecution;
use crate::exec::Executor;

/// The files to read for an agent working in `cwd`, in order, without repeats.
fn candidates(settings: &InstructionSettings, cwd: &Path) -> Vec<PathBuf> {
    let first_in = |dir: &Path| {
        settings
            .files
            .iter()
            .map(|name| dir.join(name))
            .find(|path| std::fs::symlink_metadata(path).is_ok())
    };
    let mut found: Vec<PathBuf> = Vec::new();
    if let Some(home) = &settings.home {
        found.extend(first_in(home));
    }
    let chain: Vec<&Path> = cwd.ancestors().collect();
    let root = chain
        .iter()
        .position(|dir| dir.join(".git").exists())
        .unwrap_or(chain.len().saturating_sub(1));
    for dir in chain[..=root.min(chain.len().saturating_sub(1))]
        .iter()
        .rev()
    {
        if let Some(path) = first_in(dir) {
            let same = |p: &PathBuf| {
                p == &path
                    || matches!((p.canonicalize(), path.canonicalize()), (Ok(a), Ok(b)) if a == b)
            };
            if !found.iter().any(same) {
                found.push(path);
            }
        }
    }
    found
}

/// The instructions found for one session: what `session/instructions` logs.
struct Loaded {
    /// The files read, in order.
    pub files: Vec<InstructionFile>,
    /// What the model is sent.
    pub text: String,
    /// Candidates that could not be read.
    pub problems: Vec<String>,
}

impl Loaded {
    /// The event that logs them.
    fn event(self) -> EventData {
        EventData::Instructions {
            files: self.files,
            text: self.text,
            problems: self.problems,
        }
    }
}

/// Loads the instructions of `agent` and logs them, once, before its first turn: the files
/// read, each with its Claude Code memory type (for InstructionsLoaded). A session resumed or
/// forked keeps what it saw then.
pub(crate) async fn load_into(
    agent: &Agent,
    services: &AgentServices,
    cancel: &CancellationToken,
) -> Vec<(String, &'static str)> {
    let exec = ToolExecution {
        call_id: "instructions".to_owned(),
        tool_name: "read".to_owned(),
        agent: Some(agent.context().clone()),
        turn: None,
        step: None,
        cwd: agent.header().cwd.clone(),
        cancel: cancel.child_token(),
        output: None,
    };
    let settings = &services.instructions;
    let Some(loaded) = load(settings, &services.executor, &exec).await else {
        return Vec::new();
    };
    let files = loaded
        .files
        .iter()
        .map(|f| (f.path.clone(), memory_type(settings, f)))
        .collect();
    agent.append(loaded.event());
    files
}

/// Claude Code's `memory_type` of a loaded file: `User` for the home's, `Project` otherwise.
fn memory_type(settings: &InstructionSettings, file: &InstructionFile) -> &'static str {
    let home = settings.home.as_deref();
    if home.is_some() && Path::new(&file.path).parent() == home {
        "User"
    } else {
        "Project"
    }
}

/// The instructions for the agent calling through `exec` (whose cwd is the session's), or
/// `None` when no file is named in any directory.
async fn load(
    settings: &InstructionSettings,
    executor: &Executor,
    exec: &ToolExecution,
) -> Option<Loaded> {
    if settings.files.is_empty() {
        return None;
    }
    let paths = candidates(settings, &exec.cwd);
    if paths.is_empty() {
        return None;
    }
    let (mut files, mut parts, mut problems) = (Vec::new(), Vec::new(), Vec::new());
    let mut left = settings.max_bytes;
    for path in paths {
        if left == 0 {
            problems.push(format!(
                "{}: left out, the {} byte budget for instructions is spent",
                path.display(),
                settings.max_bytes
            ));
            continue;
        }
        let request = FileRequest::Read {
            path: path.clone(),
            offset: 0,
            limit: u64::MAX,
            max_bytes: left,
            hash_limit: 0,
        };
        let cap = usize::try_from(left)
            .unwrap_or(usize::MAX)
            .saturating_add(4096);
        let read = match crate::tools::files::run(executor, exec, request, cap).await {
            Ok(FileReply::Read(read)) => read,
            Ok(FileReply::Failed(failure)) => {
                let message = failure.message;
                problems.push(format!("{}: cannot be read: {message}", path.display()));
                continue;
            }
            Ok(_) => {
                problems.push(format!("{}: cannot be read", path.display()));
                continue;
            }
            Err(error) => {
                problems.push(format!("{}: cannot be read: {error}", path.display()));
                continue;
            }
        };
        let text = String::from_utf8_lossy(&read.bytes);
        let cut = read.cut || read.more;
        let taken = u64::try_from(read.bytes.len()).unwrap_or(u64::MAX);
        left = left.saturating_sub(taken);
        let dir = path.parent().unwrap_or(&path).display();
        let note = if cut {
            format!(
                "\n[dsh: cut here: the file has {} bytes, over the {} byte budget for instructions]",
                read.size, settings.max_bytes
            )
        } else {
            String::new()
        };
        parts.push(format!(
            "# {name} instructions for {dir}\n\n<INSTRUCTIONS>\n{}{note}\n</INSTRUCTIONS>",
            text.trim_end(),
            name = path
                .file_name()
                .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
        ));
        files.push(InstructionFile {
            path: path.display().to_string(),
            bytes: taken,
            cut,
        });
    }
    Some(Loaded {
        files,
        text: parts.join("\n\n"),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates_run_from_the_home_and_the_repository_root_down_to_the_cwd() {
        let dir = tempfile::tempdir().unwrap();
        let (home, repo) = (dir.path().join("home"), dir.path().join("repo"));
        let sub = repo.join("crates/core");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::create_dir_all(&home).unwrap();
        std::fs::create_dir(repo.join(".git")).unwrap();
        // Above the repository: never looked at.
        std::fs::write(dir.path().join("AGENTS.md"), "outside").unwrap();
        std::fs::write(home.join("AGENTS.md"), "home").unwrap();
        std::fs::write(repo.join("AGENTS.md"), "root").unwrap();
        std::fs::write(repo.join("CLAUDE.md"), "root, for Claude").unwrap();
        // A directory without AGENTS.md gives its CLAUDE.md.
        std::fs::write(repo.join("crates/CLAUDE.md"), "crates").unwrap();
        std::fs::write(sub.join("AGENTS.md"), "core").unwrap();
        let settings = InstructionSettings {
            home: Some(home.clone()),
            ..InstructionSettings::default()
        };
        assert_eq!(
            candidates(&settings, &sub),
            [
                home.join("AGENTS.md"),
                repo.join("AGENTS.md"),
                repo.join("crates/CLAUDE.md"),
                sub.join("AGENTS.md"),
            ]
        );
        // Outside any repository the chain starts at the filesystem root (here the file above
        // the home is found too); the same file reached twice (the cwd is the home) is read once.
        assert_eq!(
            candidates(&settings, &home),
            [home.join("AGENTS.md"), dir.path().join("AGENTS.md")]
        );
    }
}
