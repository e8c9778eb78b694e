//! The core's module graph, checked. Cargo already keeps the server, tonic and the protocol crate
//! out (this crate does not depend on them); what it cannot see is a circle between the core's
//! own modules. The tests below read every non-test source file, collect the paths it names from
//! `crate::`, `self::` and `super::` (whole segments, grouped imports included, comments and
//! string literals skipped), and check two things:
//! - between the top-level modules: no circle, and no module naming one at or above its declared
//!   layer, so the order in `docs/ARCHITECTURE.md` stays true;
//! - inside each folder: no circle between its files (and sub-folders), so a folder reads bottom
//!   up too. A folder's `mod.rs` is left out of that check (it declares and re-exports its
//!   children, so it names them all by design), but naming an item through its re-export counts
//!   as naming the file that defines it.

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::{Path, PathBuf};

    /// The core's modules from the bottom up. A module may name only modules listed before it.
    const LAYERS: [&str; 13] = [
        "locks",
        "sandbox",
        "skills",
        "persistence",
        "exec",
        "call",
        "shell_env",
        "shell",
        "hooks",
        "tools",
        "mcp",
        "agent",
        "transfer",
    ];

    /// A module path, crate root first (`agent/watch/hub.rs` is `["agent", "watch", "hub"]`).
    type Module = Vec<String>;

    /// Which children of one folder name which others.
    type Graph = BTreeMap<String, BTreeSet<String>>;

    /// Test-only code may reach anywhere (a test of `hooks` builds tool outputs, for example).
    fn is_test_file(path: &Path) -> bool {
        path.components().any(|c| {
            let c = c.as_os_str().to_string_lossy();
            c == "tests" || c == "tests.rs" || c == "contract_tests" || c == "strategies.rs"
        })
    }

    fn files(path: &Path, out: &mut Vec<PathBuf>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                files(&entry.unwrap().path(), out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") && !is_test_file(path) {
            out.push(path.to_owned());
        }
    }

    /// Every non-test source file of the crate as its module and its production code.
    fn sources() -> Vec<(Module, String)> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut paths = Vec::new();
        files(&src, &mut paths);
        paths.sort();
        paths
            .iter()
            .map(|path| {
                let relative = path.strip_prefix(&src).unwrap().with_extension("");
                let mut module: Module = relative
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
                    module.pop();
                }
                let text = std::fs::read_to_string(path).unwrap();
                (module, production_part(&text).to_owned())
            })
            .collect()
    }

    /// Strips `#[cfg(test)] mod … { … }` blocks at the end of a file, the usual place for them.
    fn production_part(text: &str) -> &str {
        match text.find("#[cfg(test)]\nmod ") {
            Some(at) => &text[..at],
            None => text,
        }
    }

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Token<'a> {
        Ident(&'a str),
        PathSep,
        Open,
        Close,
        Comma,
        Star,
        Other,
    }

    /// Splits code into the tokens a path is made of. Comments and string and character literals
    /// are skipped, so a path in a doc link or a message is not taken for one the code names.
    fn tokens(code: &str) -> Vec<Token<'_>> {
        let bytes = code.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let rest = &code[i..];
            let b = bytes[i];
            if rest.starts_with("//") {
                i += rest.find('\n').unwrap_or(rest.len());
            } else if rest.starts_with("/*") {
                i += rest.find("*/").map_or(rest.len(), |end| end + 2);
            } else if rest.starts_with("::") {
                out.push(Token::PathSep);
                i += 2;
            } else if b == b'"' {
                i += 1 + string_end(&rest[1..]);
            } else if b == b'\'' {
                i += char_literal_len(rest).unwrap_or(1);
            } else if b.is_ascii_alphabetic() || b == b'_' {
                let len = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                let word = &rest[..len];
                i += len;
                // Raw strings (`r"…"`, `r#"…"#`, `br"…"`) end only at a quote and as many `#`s.
                if matches!(word, "r" | "br") && code[i..].trim_start_matches('#').starts_with('"')
                {
                    let hashes = code[i..].len() - code[i..].trim_start_matches('#').len();
                    let close = format!("\"{}", "#".repeat(hashes));
                    let body = i + hashes + 1;
                    i = code[body..]
                        .find(&close)
                        .map_or(code.len(), |end| body + end + close.len());
                } else {
                    out.push(Token::Ident(word));
                }
            } else {
                out.push(match b {
                    b'{' => Token::Open,
                    b'}' => Token::Close,
                    b',' => Token::Comma,
                    b'*' => Token::Star,
                    _ if b.is_ascii_whitespace() => {
                        i += 1;
                        continue;
                    }
                    _ => Token::Other,
                });
                i += rest.chars().next().map_or(1, char::len_utf8);
            }
        }
        out
    }

    /// The length of a string literal's body and its closing quote (escapes skipped).
    fn string_end(body: &str) -> usize {
        let mut escaped = false;
        for (at, c) in body.char_indices() {
            match c {
                '"' if !escaped => return at + 1,
                '\\' => escaped = !escaped,
                _ => escaped = false,
            }
        }
        body.len()
    }

    /// The length of a character literal at the start of `text` (`'a'`, `'\n'`, `'\u{1F600}'`),
    /// or `None` for a lifetime (`'a`).
    fn char_literal_len(text: &str) -> Option<usize> {
        let body = &text[1..];
        let len = if let Some(escaped) = body.strip_prefix('\\') {
            match escaped.chars().next()? {
                'u' => 1 + escaped.find('}')? + 1,
                c => 1 + c.len_utf8(),
            }
        } else {
            body.chars().next()?.len_utf8()
        };
        body[len..].starts_with('\'').then_some(len + 2)
    }

    /// The paths `code` names from `crate::`, `self::` or `super::`, and (in `use` items) from a
    /// bare name, each as its segments. A group gives one path per leaf: `use crate::{a::x, b}`
    /// names `crate::a::x` and `crate::b`.
    fn named_paths(code: &str) -> Vec<Vec<String>> {
        let tokens = tokens(code);
        let mut out = Vec::new();
        let mut i = 0;
        while i < tokens.len() {
            let after_use = i > 0 && tokens[i - 1] == Token::Ident("use");
            let starts = match tokens[i] {
                Token::Ident("crate" | "self" | "super") => {
                    tokens.get(i + 1) == Some(&Token::PathSep)
                }
                Token::Ident(_) | Token::Open => after_use,
                _ => false,
            };
            let continues = i > 0 && tokens[i - 1] == Token::PathSep;
            if starts && !continues {
                i = parse_tree(&tokens, i, Vec::new(), &mut out);
            } else {
                i += 1;
            }
        }
        out
    }

    /// Parses one use tree (or an expression's path) at `i` after `prefix`; returns where it ends.
    fn parse_tree(
        tokens: &[Token<'_>],
        mut i: usize,
        mut path: Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) -> usize {
        loop {
            match tokens.get(i) {
                Some(Token::Ident(name)) => {
                    path.push((*name).to_owned());
                    i += 1;
                    if tokens.get(i) == Some(&Token::PathSep) {
                        i += 1;
                        continue;
                    }
                    if tokens.get(i) == Some(&Token::Ident("as")) {
                        i += 2;
                    }
                    out.push(path);
                    return i;
                }
                Some(Token::Open) => {
                    i += 1;
                    loop {
                        match tokens.get(i) {
                            None => return i,
                            Some(Token::Close) => return i + 1,
                            Some(Token::Comma) => i += 1,
                            Some(_) => {
                                let end = parse_tree(tokens, i, path.clone(), out);
                                i = end.max(i + 1);
                            }
                        }
                    }
                }
                Some(Token::Star) => {
                    out.push(path);
                    return i + 1;
                }
                _ => {
                    if !path.is_empty() {
                        out.push(path);
                    }
                    return i;
                }
            }
        }
    }

    /// Where `path`, named in module `from`, points: a module path from the crate root (the item
    /// last). Bare paths (from `use x::…`) are taken as `from`'s own children.
    fn resolve(from: &[String], path: &[String]) -> Module {
        let mut at: Module = from.to_vec();
        let mut segments = path.iter().peekable();
        match segments.peek().map(|s| s.as_str()) {
            Some("crate") => {
                at.clear();
                segments.next();
            }
            Some("self") => {
                segments.next();
            }
            _ => {}
        }
        while segments.peek().is_some_and(|s| *s == "super") {
            at.pop();
            segments.next();
        }
        at.extend(segments.filter(|s| *s != "self").cloned());
        at
    }

    /// Whether `path` starts at the crate or the module itself, not at a dependency.
    fn is_in_crate(path: &[String]) -> bool {
        matches!(
            path.first().map(String::as_str),
            Some("crate" | "self" | "super")
        )
    }

    fn layer_graph(sources: &[(Module, String)]) -> BTreeMap<&'static str, BTreeSet<&'static str>> {
        let mut graph: BTreeMap<&str, BTreeSet<&str>> =
            LAYERS.iter().map(|m| (*m, BTreeSet::new())).collect();
        for (module, code) in sources {
            let Some(own) = LAYERS
                .iter()
                .find(|m| module.first().is_some_and(|f| f == *m))
            else {
                continue;
            };
            for path in named_paths(code).iter().filter(|p| is_in_crate(p)) {
                let target = resolve(module, path);
                if let Some(other) = LAYERS
                    .iter()
                    .find(|m| target.first().is_some_and(|t| t == *m))
                    && other != own
                {
                    graph.get_mut(own).unwrap().insert(*other);
                }
            }
        }
        graph
    }

    /// For each folder (a module with files of its own), which of its children (files and
    /// sub-folders, by name) name which others, directly or through the folder's re-exports.
    fn folder_graphs(sources: &[(Module, String)]) -> BTreeMap<Module, Graph> {
        let mut graphs: BTreeMap<Module, Graph> = BTreeMap::new();
        for (module, _) in sources {
            for depth in 1..module.len() {
                graphs
                    .entry(module[..depth].to_vec())
                    .or_default()
                    .entry(module[depth].clone())
                    .or_default();
            }
        }
        // What each folder's own file re-exports: item name -> the child that defines it.
        let mut reexports: BTreeMap<Module, BTreeMap<String, String>> = BTreeMap::new();
        for (module, code) in sources.iter().filter(|(m, _)| graphs.contains_key(m)) {
            let children = &graphs[module];
            for path in named_paths(code) {
                let target = resolve(module, &path);
                if target.len() > module.len() + 1
                    && target.starts_with(module)
                    && children.contains_key(&target[module.len()])
                {
                    reexports.entry(module.clone()).or_default().insert(
                        target[target.len() - 1].clone(),
                        target[module.len()].clone(),
                    );
                }
            }
        }
        for (module, code) in sources {
            let paths: Vec<Module> = named_paths(code)
                .iter()
                .filter(|p| is_in_crate(p))
                .map(|p| resolve(module, p))
                .collect();
            for depth in 1..module.len() {
                let folder = &module[..depth];
                let own = &module[depth];
                let graph = graphs.get_mut(folder).unwrap();
                for target in paths
                    .iter()
                    .filter(|t| t.len() > depth && t.starts_with(folder))
                {
                    let next = &target[depth];
                    let child = if graph.contains_key(next) {
                        Some(next)
                    } else {
                        reexports.get(folder).and_then(|r| r.get(next))
                    };
                    if let Some(child) = child
                        && child != own
                    {
                        let child = child.clone();
                        graph.get_mut(own).unwrap().insert(child);
                    }
                }
            }
        }
        graphs
    }

    fn find_circle<N: Ord + Clone>(
        graph: &BTreeMap<N, BTreeSet<N>>,
        at: &N,
        path: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        if let Some(start) = path.iter().position(|m| m == at) {
            let mut circle = path[start..].to_vec();
            circle.push(at.clone());
            return Some(circle);
        }
        path.push(at.clone());
        for next in graph.get(at).into_iter().flatten() {
            if let Some(circle) = find_circle(graph, next, path) {
                return Some(circle);
            }
        }
        path.pop();
        None
    }

    #[test]
    fn the_core_modules_form_no_circle() {
        let graph = layer_graph(&sources());
        for module in LAYERS {
            if let Some(circle) = find_circle(&graph, &module, &mut Vec::new()) {
                panic!("import circle in the core: {}", circle.join(" -> "));
            }
        }
    }

    #[test]
    fn each_module_names_only_lower_layers() {
        let graph = layer_graph(&sources());
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

    /// Every module names what it uses where it is defined, never through the crate root: the
    /// root only declares modules and the public API, so an arrow up to it would hide which
    /// module a file really depends on.
    #[test]
    fn no_module_names_the_crate_root() {
        let mut upward = Vec::new();
        for (module, code) in sources().iter().filter(|(m, _)| !m.is_empty()) {
            for path in named_paths(code).iter().filter(|p| is_in_crate(p)) {
                let target = resolve(module, path);
                let at_root = target.len() < 2
                    || !LAYERS
                        .iter()
                        .chain(&["test_support"])
                        .any(|m| target[0] == *m);
                if at_root {
                    upward.push(format!("{} names {}", module.join("::"), path.join("::")));
                }
            }
        }
        assert!(upward.is_empty(), "{}", upward.join("\n"));
    }

    #[test]
    fn no_two_files_in_a_folder_name_each_other() {
        let mut circles = Vec::new();
        for (folder, graph) in folder_graphs(&sources()) {
            let mut seen = BTreeSet::new();
            for child in graph.keys() {
                if let Some(circle) = find_circle(&graph, child, &mut Vec::new()) {
                    let members: BTreeSet<_> = circle.iter().cloned().collect();
                    if seen.insert(members) {
                        circles.push(format!("{}/: {}", folder.join("/"), circle.join(" -> ")));
                    }
                }
            }
        }
        assert!(
            circles.is_empty(),
            "import circles inside folders:\n{}",
            circles.join("\n")
        );
    }

    #[test]
    fn the_check_sees_a_circle() {
        let mut graph: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        graph.insert("a", ["b"].into());
        graph.insert("b", ["c"].into());
        graph.insert("c", ["a"].into());
        assert_eq!(
            find_circle(&graph, &"a", &mut Vec::new()),
            Some(vec!["a", "b", "c", "a"])
        );
    }

    fn joined(code: &str) -> Vec<String> {
        named_paths(code).iter().map(|p| p.join("::")).collect()
    }

    #[test]
    fn paths_are_read_on_word_boundaries_and_through_groups() {
        assert_eq!(
            joined("use crate::shell_env::Registry;"),
            ["crate::shell_env::Registry"]
        );
        assert_eq!(
            joined("use crate::{a::x, b};\nuse crate::{\n    c::{self, y as z},\n    d::*,\n};"),
            [
                "crate::a::x",
                "crate::b",
                "crate::c::self",
                "crate::c::y",
                "crate::d"
            ]
        );
        // Not paths of this crate: another crate's `crate`-like name, a visibility, a type's
        // associated item, and a call in an expression that does name one.
        assert_eq!(
            joined(
                "dsh_crate::x(); pub(crate) fn f() { Self::g(); crate::exec::Executor::<T>::new() }"
            ),
            ["crate::exec::Executor"]
        );
        assert_eq!(
            joined("let s = super::super::live::Agent::new();"),
            ["super::super::live::Agent::new"]
        );
    }

    #[test]
    fn comments_and_literals_name_nothing() {
        let code = r##"
            // use crate::commented;
            /* crate::blocked */
            /// See [`crate::doc_link`].
            let s = "crate::in_a_string \" crate::still_in_it";
            let r = r#"crate::raw " crate::raw_too"#;
            let q = '"'; let e = '\''; fn f<'a>(x: &'a str) {}
            use crate::real;
        "##;
        assert_eq!(joined(code), ["crate::real"]);
    }

    #[test]
    fn paths_resolve_from_the_module_that_names_them() {
        let from: Module = ["agent", "watch", "hub"].map(String::from).to_vec();
        let path = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
        assert_eq!(
            resolve(&from, &path("super::queue::Queue")),
            ["agent", "watch", "queue", "Queue"]
        );
        assert_eq!(
            resolve(&from, &path("super::super::live::Agent")),
            ["agent", "live", "Agent"]
        );
        assert_eq!(resolve(&from, &path("crate::exec::self")), ["exec"]);
        assert_eq!(
            resolve(&from, &path("self::inner::f")),
            ["agent", "watch", "hub", "inner", "f"]
        );
    }

    #[test]
    fn a_circle_through_a_folders_re_export_is_seen() {
        let module = |s: &str| s.split('/').map(String::from).collect::<Module>();
        let sources = [
            (
                module("a"),
                "mod x;\nmod y;\npub use x::Thing;\n".to_owned(),
            ),
            (
                module("a/x"),
                "use super::y::helper;\npub struct Thing;\n".to_owned(),
            ),
            (
                module("a/y"),
                "use super::Thing;\npub fn helper() {}\n".to_owned(),
            ),
            (module("a/z"), "use crate::a::x::Thing;\n".to_owned()),
        ];
        let graphs = folder_graphs(&sources);
        let graph = &graphs[&module("a")];
        assert_eq!(graph["x"], ["y".to_owned()].into());
        assert_eq!(graph["y"], ["x".to_owned()].into());
        assert_eq!(graph["z"], ["x".to_owned()].into());
        assert_eq!(
            find_circle(graph, &"x".to_owned(), &mut Vec::new()),
            Some(["x", "y", "x"].map(String::from).to_vec())
        );
    }
}
