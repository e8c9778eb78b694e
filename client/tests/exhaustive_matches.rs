//! The compiler guard of issue 40, kept by a test: dshctl's renderers and the ACP translator
//! decode each event once and `match` on the session vocabulary (`EventData`, `LiveEvent`,
//! `TurnEndReason`) naming every variant, so a type added to the vocabulary does not compile
//! until each of them says what to do with it. A catch-all arm (`_ =>`, or a bare binding such as
//! `other =>`) would silently hide such a type again; this test reads those files and fails on
//! one, and on a file that no longer has the matches it should.

use std::path::Path;

/// The enums whose matches must name every variant.
const VOCABULARY: [&str; 3] = ["EventData", "LiveEvent", "TurnEndReason"];

/// The files, and how many matches over each enum (in [`VOCABULARY`]'s order) each has at least.
const RENDERERS: [(&str, [usize; 3]); 4] = [
    // The human form of `prompt` and `watch`: what the main agent waits on, and each line.
    ("src/bin/dshctl/render.rs", [2, 2, 0]),
    // `session events`: where a fork may start.
    ("src/bin/dshctl/session.rs", [1, 1, 0]),
    // `prompt`'s exit status.
    ("src/bin/dshctl/prompt.rs", [0, 0, 1]),
    // The ACP translator: updates, and the stop reason.
    ("src/bin/dshctl/acp/updates.rs", [1, 1, 1]),
];

#[test]
fn the_renderers_and_the_acp_translator_match_every_event_type_by_name() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut faults = Vec::new();
    for (file, least) in RENDERERS {
        let source = std::fs::read_to_string(root.join(file))
            .unwrap_or_else(|e| panic!("cannot read {file}: {e}"));
        let found = check(&source);
        faults.extend(found.wildcards.iter().map(|w| format!("{file}: {w}")));
        for ((name, least), count) in VOCABULARY.iter().zip(least).zip(found.matches) {
            if count < least {
                faults.push(format!(
                    "{file}: {count} match(es) over {name}, expected at least {least}"
                ));
            }
        }
    }
    assert!(faults.is_empty(), "{}", faults.join("\n"));
}

/// The checker itself: it finds a catch-all in a match over the vocabulary, and only there.
#[test]
fn a_catch_all_over_the_vocabulary_is_found_and_nothing_else_is() {
    let fine = r#"
        fn f(d: EventData, s: &str) -> u8 {
            let _ = match s { "a" => 1, _ => 2 };
            let _ = "match x { EventData::A => 1, _ => 2 }"; // _ => in a string and a comment
            match d {
                EventData::A { x } if x > 0 => match x { 1 => 1, _ => 0 },
                EventData::A { .. } | EventData::B(_) => { let _ = '}'; 2 }
                &EventData::Unknown(_) => 3,
            }
        }
    "#;
    let checked = check(fine);
    assert_eq!(checked.wildcards, Vec::<String>::new());
    assert_eq!(checked.matches, [1, 0, 0]);
    for catch_all in [
        "_ => 0,",
        "_ if true => 0,",
        "other => 0,",
        "ref other => 0,",
        "x @ _ => 0,",
    ] {
        let bad = format!(
            "fn f(l: LiveEvent<'_>) -> u8 {{ match l {{ LiveEvent::Lagged(_) => 1, {catch_all} }} }}"
        );
        let checked = check(&bad);
        assert_eq!(checked.matches, [0, 1, 0], "{bad}");
        assert_eq!(checked.wildcards.len(), 1, "{bad}");
    }
}

/// What [`check`] found in one file.
#[derive(Debug)]
struct Checked {
    /// Matches over each enum of [`VOCABULARY`].
    matches: [usize; 3],
    /// The catch-all arms of those matches, described.
    wildcards: Vec<String>,
}

/// Finds the matches over the vocabulary in `source` and their catch-all arms.
fn check(source: &str) -> Checked {
    let code: Vec<char> = code_only(source).chars().collect();
    let mut checked = Checked {
        matches: [0; 3],
        wildcards: Vec::new(),
    };
    let mut at = 0;
    while let Some(start) = find_keyword(&code, at, "match") {
        at = start + 5;
        let Some(open) = body_start(&code, at) else {
            continue;
        };
        let Some(close) = closing(&code, open) else {
            continue;
        };
        let patterns = arm_patterns(&code[open + 1..close]);
        let over = VOCABULARY.iter().position(|name| {
            patterns
                .iter()
                .any(|p| alternatives(p).iter().any(|a| names_variant(a, name)))
        });
        let Some(over) = over else { continue };
        checked.matches[over] += 1;
        let line = code[..start].iter().filter(|c| **c == '\n').count() + 1;
        for pattern in &patterns {
            if alternatives(pattern).iter().any(|a| is_catch_all(a)) {
                checked.wildcards.push(format!(
                    "line {line}: the match over {} has a catch-all arm `{} =>`",
                    VOCABULARY[over],
                    pattern.trim()
                ));
            }
        }
    }
    checked
}

/// `source` with comments, string and character literals blanked (newlines kept), so that what
/// they hold is not read as code.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let ident_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    if depth == 0 {
                        out.push_str("  ");
                        i += 2;
                        break;
                    }
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == 'r' && !ident_before && matches!(next, Some('#' | '"')) {
            let hashes = chars[i + 1..].iter().take_while(|c| **c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let end: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let mut j = i + 2 + hashes;
            while j < chars.len() && !chars[j..].starts_with(&end.chars().collect::<Vec<_>>()) {
                j += 1;
            }
            let stop = (j + end.chars().count()).min(chars.len());
            for &c in &chars[i..stop] {
                blank(&mut out, c);
            }
            i = stop;
        } else if c == '"' {
            blank(&mut out, c);
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if i < chars.len() {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            if i < chars.len() {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal (a lifetime has no closing quote two characters on).
            let mut j = i + 1;
            if chars.get(j) == Some(&'\\') {
                j += 2;
            } else {
                j += 1;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            let stop = (j + 1).min(chars.len());
            for &c in &chars[i..stop] {
                blank(&mut out, c);
            }
            i = stop;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The next `word` from `at` that stands alone (no identifier character on either side).
fn find_keyword(code: &[char], mut at: usize, word: &str) -> Option<usize> {
    let word: Vec<char> = word.chars().collect();
    while at + word.len() <= code.len() {
        if code[at..].starts_with(&word)
            && (at == 0 || !is_ident(code[at - 1]))
            && code.get(at + word.len()).is_none_or(|c| !is_ident(*c))
        {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// The `{` that opens a match's arms: the first brace outside parentheses and brackets after the
/// scrutinee starts.
fn body_start(code: &[char], mut at: usize) -> Option<usize> {
    let mut depth = 0i32;
    while at < code.len() {
        match code[at] {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '{' if depth == 0 => return Some(at),
            ';' if depth == 0 => return None,
            _ => {}
        }
        at += 1;
    }
    None
}

/// The bracket closing the one at `open`.
fn closing(code: &[char], open: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (i, c) in code.iter().enumerate().skip(open) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The pattern (with its guard) of each arm of a match body.
fn arm_patterns(body: &[char]) -> Vec<String> {
    let mut patterns = Vec::new();
    let mut at = 0;
    loop {
        while at < body.len() && (body[at].is_whitespace() || body[at] == ',') {
            at += 1;
        }
        if at >= body.len() {
            return patterns;
        }
        // The pattern: up to `=>` outside brackets.
        let start = at;
        let mut depth = 0i32;
        while at + 1 < body.len() && !(depth == 0 && body[at] == '=' && body[at + 1] == '>') {
            match body[at] {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
            at += 1;
        }
        if at + 1 >= body.len() {
            return patterns;
        }
        patterns.push(body[start..at].iter().collect());
        at += 2;
        // The arm's expression: a block, or up to a comma outside brackets.
        while at < body.len() && body[at].is_whitespace() {
            at += 1;
        }
        if body.get(at) == Some(&'{') {
            at = closing(body, at).map_or(body.len(), |close| close + 1);
            continue;
        }
        let mut depth = 0i32;
        while at < body.len() && !(depth == 0 && body[at] == ',') {
            match body[at] {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' | '}' => depth -= 1,
                _ => {}
            }
            at += 1;
        }
    }
}

/// A pattern's alternatives, without its guard, each trimmed.
fn alternatives(pattern: &str) -> Vec<String> {
    let chars: Vec<char> = pattern.chars().collect();
    let guard = find_keyword(&chars, 0, "if").filter(|&at| depth_at(&chars, at) == 0);
    let head: Vec<char> = chars[..guard.unwrap_or(chars.len())].to_vec();
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in head.iter().enumerate() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            '|' if depth == 0 => {
                parts.push(head[start..i].iter().collect::<String>());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(head[start..].iter().collect());
    parts
        .into_iter()
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect()
}

fn depth_at(chars: &[char], at: usize) -> i32 {
    chars[..at].iter().fold(0, |depth, c| match c {
        '(' | '[' | '{' => depth + 1,
        ')' | ']' | '}' => depth - 1,
        _ => depth,
    })
}

/// `ref`, `mut` and `&` in front of a pattern, which do not change what it matches.
fn bare(alternative: &str) -> &str {
    let mut rest = alternative.trim();
    loop {
        let next = rest
            .strip_prefix('&')
            .or_else(|| rest.strip_prefix("ref "))
            .or_else(|| rest.strip_prefix("mut "))
            .map(str::trim_start);
        match next {
            Some(next) => rest = next,
            None => return rest,
        }
    }
}

fn names_variant(alternative: &str, name: &str) -> bool {
    bare(alternative)
        .strip_prefix(name)
        .is_some_and(|rest| rest.trim_start().starts_with("::"))
}

/// `_`, or a binding that takes anything (`other`, `x @ _`).
fn is_catch_all(alternative: &str) -> bool {
    let pattern = bare(alternative);
    if let Some((binding, rest)) = pattern.split_once('@')
        && binding.trim().chars().all(is_ident)
    {
        return is_catch_all(rest);
    }
    pattern == "_"
        || (pattern.chars().all(is_ident)
            && pattern.starts_with(|c: char| c.is_lowercase() || c == '_'))
}
