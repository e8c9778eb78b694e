//! Local skills: `<home>/skills/<name>/SKILL.md`, whose front matter gives `name` and
//! `description` (CONTRACTS §3). Discovered at start and on reload; the agent's system prompt lists
//! names and descriptions only, and the model reads a skill's file with bash when it needs it.
//!
//! The home is the same resolved value that feeds `DSH_HOME`, so a skill's path always lies under
//! `$DSH_HOME` in the model's shell.

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use crate::locks::{read_lock, write_lock};

/// A discovered skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    /// Name from the front matter.
    pub name: String,
    /// One-line description from the front matter.
    pub description: String,
    /// Absolute path of `SKILL.md`.
    pub path: PathBuf,
}

/// The result of a discovery: the skills, and the files that could not be used (with why).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovery {
    /// Usable skills, sorted by name.
    pub skills: Vec<Skill>,
    /// `<path>: <reason>` for each skill directory that was skipped.
    pub problems: Vec<String>,
}

/// The skills of one harness home.
#[derive(Debug)]
pub struct Skills {
    dir: PathBuf,
    current: RwLock<Discovery>,
}

/// Largest `SKILL.md` read; the front matter is at the top, and a huge file is not a skill.
const MAX_SKILL_FILE: u64 = 1024 * 1024;

impl Skills {
    /// Discovers the skills under `<home>/skills`.
    pub fn new(home: &Path) -> Self {
        let dir = home.join("skills");
        let current = RwLock::new(discover(&dir));
        Self { dir, current }
    }

    /// Discovers again and returns the result.
    pub fn reload(&self) -> Discovery {
        let found = discover(&self.dir);
        *write_lock(&self.current) = found.clone();
        found
    }

    /// The last discovery.
    pub fn current(&self) -> Discovery {
        read_lock(&self.current).clone()
    }

    /// The system-prompt section listing the skills ("" when there are none).
    pub fn prompt_section(&self) -> String {
        let current = read_lock(&self.current);
        if current.skills.is_empty() {
            return String::new();
        }
        let mut text = String::from(
            "\n\nSkills are available. Each is a folder with instructions in SKILL.md; when a \
skill fits the task, read its file with bash before acting:",
        );
        for skill in &current.skills {
            text.push_str(&format!(
                "\n- {}: {} ({})",
                skill.name,
                skill.description,
                skill.path.display()
            ));
        }
        text
    }
}

fn discover(dir: &Path) -> Discovery {
    let mut found = Discovery::default();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return found,
        Err(e) => {
            found.problems.push(format!("{}: {e}", dir.display()));
            return found;
        }
    };
    for entry in entries.flatten() {
        let path = entry.path().join("SKILL.md");
        if !entry.path().is_dir() {
            continue;
        }
        match read_skill(&path) {
            Ok(skill) => found.skills.push(skill),
            Err(reason) => found.problems.push(format!("{}: {reason}", path.display())),
        }
    }
    // Deterministic when two skills share a name: the one whose directory carries the name wins,
    // then the first path.
    let dir_matches = |s: &Skill| {
        s.path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == s.name.as_str())
    };
    found.skills.sort_by(|a, b| {
        (&a.name, !dir_matches(a), &a.path).cmp(&(&b.name, !dir_matches(b), &b.path))
    });
    let mut seen = std::collections::BTreeSet::new();
    let mut unique = Vec::new();
    for skill in std::mem::take(&mut found.skills) {
        if seen.insert(skill.name.clone()) {
            unique.push(skill);
        } else {
            found.problems.push(format!(
                "{}: another skill is already named {:?}",
                skill.path.display(),
                skill.name
            ));
        }
    }
    found.skills = unique;
    found
}

fn read_skill(path: &Path) -> Result<Skill, String> {
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_SKILL_FILE {
        return Err(format!("larger than {MAX_SKILL_FILE} bytes"));
    }
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let (name, description) = front_matter(&text)?;
    Ok(Skill {
        name,
        description,
        path: path.to_owned(),
    })
}

/// Reads `name` and `description` from a `---` delimited front matter of `key: value` lines.
/// Values may be quoted; other keys are ignored. Both keys are required and must be one line.
fn front_matter(text: &str) -> Result<(String, String), String> {
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err("no front matter: the file must start with a `---` line".into());
    }
    let (mut name, mut description) = (None, None);
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = unquote(value.trim());
        match key.trim() {
            "name" => name = Some(value),
            "description" => description = Some(value),
            _ => {}
        }
    }
    if !closed {
        return Err("the front matter is not closed by a `---` line".into());
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or("the front matter has no `name`")?;
    if name.chars().any(char::is_control) {
        return Err("`name` contains control characters".into());
    }
    let description = description
        .filter(|d| !d.is_empty())
        .ok_or("the front matter has no `description`")?;
    Ok((name, description))
}

fn unquote(value: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner.to_owned();
        }
    }
    value.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(home: &Path, dir: &str, text: &str) {
        std::fs::create_dir_all(home.join("skills").join(dir)).unwrap();
        std::fs::write(home.join("skills").join(dir).join("SKILL.md"), text).unwrap();
    }

    #[test]
    fn discovers_skills_and_reports_problems() {
        let home = tempfile::tempdir().unwrap();
        write(
            home.path(),
            "pdf",
            "---\nname: pdf\ndescription: \"Work with PDF files\"\nlicense: MIT\n---\n# PDF\n",
        );
        write(
            home.path(),
            "b",
            "---\nname: beta\ndescription: Second skill\n---\n",
        );
        write(home.path(), "broken", "# no front matter\n");
        write(home.path(), "nodesc", "---\nname: nodesc\n---\n");
        write(
            home.path(),
            "dup",
            "---\nname: pdf\ndescription: Another pdf\n---\n",
        );
        std::fs::write(home.path().join("skills/stray.md"), "not a dir").unwrap();
        let skills = Skills::new(home.path());
        let found = skills.current();
        let names: Vec<_> = found.skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["beta", "pdf"]);
        assert_eq!(found.skills[1].description, "Work with PDF files");
        assert_eq!(
            found.skills[1].path,
            home.path().join("skills/pdf/SKILL.md")
        );
        assert_eq!(found.problems.len(), 3, "{:?}", found.problems);
        assert!(
            found
                .problems
                .iter()
                .any(|p| p.contains("broken") && p.contains("front matter"))
        );
        assert!(
            found
                .problems
                .iter()
                .any(|p| p.contains("nodesc") && p.contains("description"))
        );
        assert!(found.problems.iter().any(|p| p.contains("already named")));

        let section = skills.prompt_section();
        assert!(section.contains("- beta: Second skill"), "{section}");
        assert!(section.contains("- pdf: Work with PDF files"), "{section}");
    }

    #[test]
    fn missing_dir_means_no_skills_and_reload_sees_new_ones() {
        let home = tempfile::tempdir().unwrap();
        let skills = Skills::new(home.path());
        assert_eq!(skills.current(), Discovery::default());
        assert_eq!(skills.prompt_section(), "");
        write(
            home.path(),
            "new",
            "---\nname: new\ndescription: Fresh\n---\n",
        );
        assert_eq!(
            skills.current().skills.len(),
            0,
            "discovery happens at start and reload only"
        );
        assert_eq!(skills.reload().skills.len(), 1);
        assert_eq!(skills.current().skills[0].name, "new");
    }

    #[test]
    fn front_matter_rules() {
        assert!(
            front_matter("---\nname: a\ndescription: b").is_err(),
            "unclosed"
        );
        assert_eq!(
            front_matter("---\r\nname: 'a b'\r\ndescription: c: d\r\n---\r\n").unwrap(),
            ("a b".into(), "c: d".into())
        );
    }
}
