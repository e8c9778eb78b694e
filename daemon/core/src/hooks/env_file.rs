//! `CLAUDE_ENV_FILE`: Claude Code gives its SessionStart hooks a file to write `export NAME=value`
//! lines into, and its later Bash commands get those variables. dsh gives each Claude Code
//! SessionStart command hook a file of its own (so what it wrote, and what was refused, is told in
//! its own record), reads it when the hook ends, and hands the assignments to the agent, whose
//! later commands start from its environment with them on top (`Agent::add_env`).
//!
//! Claude Code sources the file in its shell; dshd runs nothing of it. What is read is what such
//! files hold: `NAME=value` lines, optionally after `export`, values bare, `'single-quoted'` or
//! `"double-quoted"` (with `\"`, `\\`, `\$` and `` \` `` escapes), with `$NAME` and `${NAME}`
//! expanded (against what the file set before, then the agent's environment, when the agent uses
//! them: `export PATH="$PATH:$HOME/.local/bin"` is the common line). Blank lines and comments are
//! skipped. Anything else (a command, `$(...)`, backquotes) is refused line by line, naming the
//! line, and so is a name the executor never passes on (`DSH_*`: the managed values come only
//! from the snapshot; shell start-up variables such as `BASH_ENV`; the secret pattern).

use std::fs::File;
use std::io::{self, Read as _};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::decode::HookOutput;
use super::job::Job;
use super::payload::path_text;
use super::{Dialect, EventName};
use crate::exec::Executor;

/// What a file may hold; more is refused whole (a hook that writes megabytes into it is broken).
const MAX_BYTES: u64 = 64 * 1024;

/// The variable a Claude Code SessionStart hook finds its file in.
const CLAUDE_ENV_FILE: &str = "CLAUDE_ENV_FILE";

/// One piece of a value: text as written, or a variable to expand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    /// Text taken as written.
    Text(String),
    /// `$NAME` or `${NAME}`: the value the name has when the agent's commands start.
    Var(String),
}

/// One `NAME=value` a hook wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assignment {
    /// The variable.
    pub(crate) name: String,
    /// Its value, to expand (`expand`).
    pub(crate) value: Vec<Part>,
}

impl Assignment {
    /// The value with its variables expanded by `lookup` (an unset one is empty, as in a shell).
    pub(crate) fn expand(&self, lookup: impl Fn(&str) -> Option<String>) -> String {
        self.value
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.clone(),
                Part::Var(name) => lookup(name).unwrap_or_default(),
            })
            .collect()
    }
}

/// A hook's file: made empty and private before the hook starts, read and removed after.
#[derive(Debug)]
pub(super) struct EnvFile {
    path: PathBuf,
}

impl EnvFile {
    /// A new empty file (0600) under `dir`, which is made private to this user when missing.
    pub(super) fn create(dir: &Path) -> io::Result<Self> {
        crate::exec::ensure_private_dir(dir)?;
        let path = dir.join(format!("env-{}.sh", uuid::Uuid::now_v7().simple()));
        rustix::fs::open(
            &path,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::RUSR | Mode::WUSR,
        )?;
        Ok(Self { path })
    }

    /// Where the hook writes.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// What the hook wrote (never through a link, never blocking on a FIFO), then the file goes.
    pub(super) fn take(self) -> io::Result<String> {
        let text = read(&self.path);
        let _ = std::fs::remove_file(&self.path);
        text
    }
}

impl Drop for EnvFile {
    fn drop(&mut self) {
        // Removed by `take` already on the usual path; this is for a run that never got there.
        let _ = std::fs::remove_file(&self.path);
    }
}

fn read(path: &Path) -> io::Result<String> {
    let fd = rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a regular file",
        ));
    }
    if meta.len() > MAX_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} bytes, more than the {MAX_BYTES} read", meta.len()),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_BYTES).read_to_end(&mut bytes)?;
    String::from_utf8(bytes).map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "not UTF-8"))
}

/// A `CLAUDE_ENV_FILE` for `job` when it is a Claude Code SessionStart command hook that waits
/// (its variable is set on the job); `None` otherwise, or when the file cannot be made (the hook
/// runs without it, and dshd's log says why).
pub(super) fn for_job(executor: &Executor, event: EventName, job: &mut Job) -> Option<EnvFile> {
    if event != EventName::SessionStart || job.dialect != Dialect::ClaudeCode || job.http.is_some()
    {
        return None;
    }
    let dir = executor.config().spill_dir.join("hook-env");
    match EnvFile::create(&dir) {
        Ok(file) => {
            job.env
                .insert(CLAUDE_ENV_FILE.to_owned(), path_text(file.path()));
            Some(file)
        }
        Err(error) => {
            tracing::warn!(handler = %job.handler_id, %error, "cannot make a CLAUDE_ENV_FILE; the hook runs without one");
            None
        }
    }
}

/// Reads what a hook wrote to its `CLAUDE_ENV_FILE` into `env`; what is refused is said in the
/// hook's record (`output.note`).
pub(super) fn read_into(
    file: EnvFile,
    executor: &Executor,
    output: &mut HookOutput,
    env: &mut Vec<Assignment>,
) {
    let mut refused = Vec::new();
    match file.take() {
        Ok(text) => {
            let (assignments, lines) = parse(&text);
            refused.extend(lines);
            for assignment in assignments {
                // The value is checked again once expanded (`Agent::add_env`).
                match executor.refusal(&assignment.name, "") {
                    Some(why) => refused.push(format!("{}: {why}", assignment.name)),
                    None => env.push(assignment),
                }
            }
        }
        Err(error) => refused.push(format!("cannot read it: {error}")),
    }
    if !refused.is_empty() {
        let note = format!("CLAUDE_ENV_FILE: refused {}", refused.join("; "));
        output.note = Some(match output.note.take() {
            Some(earlier) => format!("{earlier}; {note}"),
            None => note,
        });
    }
}

/// The assignments of `text`, and a note for each line that is not one.
pub(super) fn parse(text: &str) -> (Vec<Assignment>, Vec<String>) {
    let mut assignments = Vec::new();
    let mut refused = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match assignment(line) {
            Ok(a) => assignments.push(a),
            Err(why) => refused.push(format!("line {}: {why}", n + 1)),
        }
    }
    (assignments, refused)
}

fn assignment(line: &str) -> Result<Assignment, String> {
    let line = line
        .strip_prefix("export")
        .filter(|rest| rest.starts_with([' ', '\t']))
        .map_or(line, str::trim_start);
    let (name, value) = line
        .split_once('=')
        .ok_or("not a NAME=value assignment (dsh reads the file, it does not run it)")?;
    if !is_name(name) {
        return Err(format!("{name:?} is not a variable name"));
    }
    Ok(Assignment {
        name: name.to_owned(),
        value: value_parts(value)?,
    })
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The parts of a value: bare words, `'...'` and `"..."` may follow each other (`a"b"'c'`).
fn value_parts(value: &str) -> Result<Vec<Part>, String> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut chars = value.chars().peekable();
    let mut quote = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, '\'') => {
                let mut closed = false;
                for c in chars.by_ref() {
                    if c == '\'' {
                        closed = true;
                        break;
                    }
                    text.push(c);
                }
                if !closed {
                    return Err("an unclosed quote".to_owned());
                }
            }
            (None, '"') => quote = Some('"'),
            (Some(_), '"') => quote = None,
            (_, '\\') => match chars.next() {
                Some(next) if quote.is_none() || matches!(next, '"' | '\\' | '$' | '`') => {
                    text.push(next);
                }
                Some(next) => {
                    text.push('\\');
                    text.push(next);
                }
                None => return Err("a value ends with a backslash".to_owned()),
            },
            (_, '`') => return Err("backquotes run a command; dsh does not".to_owned()),
            (_, '$') => {
                let name = match chars.peek() {
                    Some('(') => {
                        return Err("$(...) runs a command; dsh does not".to_owned());
                    }
                    Some('{') => {
                        chars.next();
                        let name: String = chars.by_ref().take_while(|c| *c != '}').collect();
                        if !is_name(&name) {
                            return Err(format!(
                                "${{{name}}}: only $NAME and ${{NAME}} are expanded"
                            ));
                        }
                        name
                    }
                    _ => {
                        let mut name = String::new();
                        while let Some(c) =
                            chars.next_if(|c| c.is_ascii_alphanumeric() || *c == '_')
                        {
                            name.push(c);
                        }
                        if !is_name(&name) {
                            return Err("a `$` that is not $NAME or ${NAME}".to_owned());
                        }
                        name
                    }
                };
                if !text.is_empty() {
                    parts.push(Part::Text(std::mem::take(&mut text)));
                }
                parts.push(Part::Var(name));
            }
            (None, c) if c.is_whitespace() => {
                return Err("more than one word after `=` (quote the value)".to_owned());
            }
            (None, ';' | '&' | '|' | '<' | '>' | '(' | ')') => {
                return Err(format!("`{c}` is shell syntax; dsh reads assignments only"));
            }
            (_, c) => text.push(c),
        }
    }
    if quote.is_some() {
        return Err("an unclosed quote".to_owned());
    }
    if !text.is_empty() || parts.is_empty() {
        parts.push(Part::Text(text));
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(line: &str) -> Result<(String, String), String> {
        let (mut a, mut refused) = parse(line);
        match (a.pop(), refused.pop()) {
            (Some(a), None) => Ok((
                a.name.clone(),
                a.expand(|n| (n == "PATH").then(|| "/usr/bin".to_owned())),
            )),
            (None, Some(why)) => Err(why),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_lines_hooks_write_are_read_as_a_shell_would() {
        let ok = |line: &str, name: &str, value: &str| {
            assert_eq!(one(line), Ok((name.into(), value.into())), "{line}");
        };
        ok("export NODE_ENV=production", "NODE_ENV", "production");
        ok("NODE_ENV=production", "NODE_ENV", "production");
        ok("export GREETING='hello world'", "GREETING", "hello world");
        ok("export X=\"a \\\"b\\\" \\$c\"", "X", "a \"b\" $c");
        ok(
            "export PATH=\"$PATH:/opt/tool/bin\"",
            "PATH",
            "/usr/bin:/opt/tool/bin",
        );
        ok("export PATH=${PATH}:/x", "PATH", "/usr/bin:/x");
        ok("export EMPTY=", "EMPTY", "");
        ok("export UNSET=$NOPE", "UNSET", "");
        ok("export Q='$PATH'", "Q", "$PATH");
        ok("export exporter=1", "exporter", "1");
    }

    #[test]
    fn what_needs_a_shell_to_run_is_refused_naming_the_line() {
        for line in [
            "source ~/.nvm/nvm.sh",
            "export X=$(date)",
            "export X=`date`",
            "export X=a b",
            "export X=a; rm -rf /",
            "export 1X=a",
            "export X=\"open",
            "export X='open",
            "export X=${PATH:-/bin}",
        ] {
            let refused = one(line).expect_err(line);
            assert!(refused.starts_with("line 1: "), "{refused}");
        }
        let (assignments, refused) = parse("# comment\n\nexport A=1\nnonsense\nexport B=2\n");
        assert_eq!(assignments.len(), 2);
        assert_eq!(refused.len(), 1);
        assert!(refused[0].starts_with("line 4: "), "{refused:?}");
    }
}
