//! The core's module graph, checked. Cargo already keeps the server, tonic and the protocol crate
//! out (this crate does not depend on them); what it cannot see is a circle between the core's
//! own modules. The test below reads every non-test source file, collects which top-level modules
//! each module names (`crate::x`), and fails on any circle, printing it. It also fails when a
//! module climbs above its declared layer, so the order in `docs/ARCHITECTURE.md` stays true.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// The core's modules from the bottom up. A module may name only modules listed before it.
    const LAYERS: [&str; 11] = [
        "sandbox",
        "session",
        "skills",
        "persistence",
        "exec",
        "call",
        "shell_env",
        "shell",
        "hooks",
        "tools",
        "agent",
    ];

    /// Test-only code may reach anywhere (a test of `hooks` builds tool outputs, for example).
    fn is_test_file(path: &Path) -> bool {
        path.components().any(|c| {
            let c = c.as_os_str().to_string_lossy();
            c == "tests" || c == "tests.rs" || c == "contract_tests" || c == "strategies.rs"
        })
    }

    fn sources(path: &Path, out: &mut Vec<PathBuf>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                sources(&entry.unwrap().path(), out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(path) {
            out.push(path.to_owned());
        }
    }

    /// Strips `#[cfg(test)] mod … { … }` blocks at the end of a file, the usual place for them.
    fn production_part(text: &str) -> &str {
        match text.find("#[cfg(test)]\nmod ") {
            Some(at) => &text[..at],
            None => text,
        }
    }

    fn graph() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut graph = BTreeMap::new();
        for module in LAYERS {
            let mut files = Vec::new();
            let dir = src.join(module);
            if dir.is_dir() {
                sources(&dir, &mut files);
            } else {
                files.push(src.join(format!("{module}.rs")));
            }
            assert!(
                files.iter().all(|f| f.exists()),
                "module {module} not found"
            );
            let mut names = BTreeSet::new();
            for file in &files {
                let text = std::fs::read_to_string(file).unwrap();
                for line in production_part(&text).lines() {
                    let code = line.split("//").next().unwrap_or_default();
                    for other in LAYERS {
                        if other != module && code.contains(&format!("crate::{other}")) {
                            names.insert(other);
                        }
                    }
                }
            }
            graph.insert(module, names);
        }
        graph
    }

    fn find_circle<'a>(
        graph: &BTreeMap<&'a str, BTreeSet<&'a str>>,
        at: &'a str,
        path: &mut Vec<&'a str>,
    ) -> Option<Vec<&'a str>> {
        if let Some(start) = path.iter().position(|m| *m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at);
            return Some(circle);
        }
        path.push(at);
        for next in &graph[at] {
            if let Some(circle) = find_circle(graph, next, path) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }

    #[test]
    fn the_core_modules_form_no_circle() {
        let graph = graph();
        for module in LAYERS {
            if let Some(circle) = find_circle(&graph, module, &mut Vec::new()) {
                panic!("import circle in the core: {}", circle.join(" -> "));
            }
        }
    }

    #[test]
    fn each_module_names_only_lower_layers() {
        let graph = graph();
        let mut broken = Vec::new();
        for (level, module) in LAYERS.iter().enumerate() {
            for other in &graph[module] {
                let other_level = LAYERS.iter().position(|m| m == other).unwrap();
                if other_level >= level {
                    broken.push(format!("{module} names {other}, which is not below it"));
                }
            }
        }
        assert!(broken.is_empty(), "{}", broken.join("\n"));
    }

    #[test]
    fn the_check_sees_a_circle() {
        let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        graph.insert("a", ["b"].into());
        graph.insert("b", ["c"].into());
        graph.insert("c", ["a"].into());
        assert_eq!(
            find_circle(&graph, "a", &mut Vec::new()),
            Some(vec!["a", "b", "c", "a"])
        );
    }
}
