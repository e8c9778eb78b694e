//! The words of a hook's command line as bash would see them, for deciding where the hook runs
//! (`sandboxing.rs`): quotes removed, the expansions whose value dsh knows before the command runs
//! done, the rest marked.
//!
//! Known before it runs: `$NAME` and `${NAME}` of a variable the caller can tell (the hook's own
//! variables, `PWD`, and what the executor passes every command, `HOME` among them), a leading `~`
//! or `~/`, and `${NAME:-word}` and its kin when `NAME` is known. Everything else — command
//! substitutions, arithmetic, positional and special parameters, other `${…}` forms, an unknown
//! variable, `~user` — makes the word *opaque*: its text holds only the parts that are known.
//! The commands inside a substitution (`$(…)`, backticks) are split too, their words listed with
//! the others. Unquoted `*`, `?` and `[` make a word a *glob*.
//!
//! Operators (`;`, `&`, `|`, `<`, `>`, parentheses, newlines) separate words; a `#` that starts a
//! word starts a comment. Reserved words and assignments are words like any other: the caller
//! looks at every word, whatever its place. A command whose words cannot be told (an unclosed
//! quote, substitution or `${`) is an error, and so is one nested or long past what any hook
//! needs.

/// One word: its text after quote removal and the expansions dsh can do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Word {
    /// What is known of it.
    pub text: String,
    /// Part of it is an expansion whose value cannot be known before the command runs.
    pub opaque: bool,
    /// It has an unquoted `*`, `?` or `[`: bash may replace it with the names it matches.
    pub glob: bool,
}

/// Why a command cannot be split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(super) struct SplitError(&'static str);

/// How deep substitutions may nest.
const MAX_DEPTH: usize = 16;
/// How many words a command may have.
const MAX_WORDS: usize = 10_000;

/// Splits `command` into words; `vars` answers a variable's value when it is known.
pub(super) fn split(
    command: &str,
    vars: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Word>, SplitError> {
    let mut lexer = Lexer {
        chars: command.chars().collect(),
        pos: 0,
        vars,
        out: Vec::new(),
        depth: 0,
    };
    lexer.words(false)?;
    Ok(lexer.out)
}

struct Lexer<'a> {
    chars: Vec<char>,
    pos: usize,
    vars: &'a dyn Fn(&str) -> Option<String>,
    out: Vec<Word>,
    depth: usize,
}

/// Characters that end a word outside quotes.
fn ends_word(c: char) -> bool {
    matches!(
        c,
        ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')'
    )
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

impl Lexer<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        self.chars.get(self.pos + ahead).copied()
    }

    /// Reads words up to the end or, `in_substitution`, up to the `)` that closes its `$(`,
    /// which it consumes.
    fn words(&mut self, in_substitution: bool) -> Result<(), SplitError> {
        let mut parens = 0usize;
        loop {
            let Some(c) = self.peek() else {
                return if in_substitution {
                    Err(SplitError("a `$(` is not closed"))
                } else {
                    Ok(())
                };
            };
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' => self.pos += 1,
                '(' => {
                    parens += 1;
                    self.pos += 1;
                }
                ')' if parens > 0 => {
                    parens -= 1;
                    self.pos += 1;
                }
                ')' if in_substitution => {
                    self.pos += 1;
                    return Ok(());
                }
                // A subshell's, or a `case` pattern's: it separates words, nothing more.
                ')' => self.pos += 1,
                '#' => {
                    while self.peek().is_some_and(|c| c != '\n') {
                        self.pos += 1;
                    }
                }
                _ => self.word()?,
            }
        }
    }

    /// Reads one word and adds it to the output.
    fn word(&mut self) -> Result<(), SplitError> {
        let mut w = Word::default();
        self.word_into(&mut w, ends_word)?;
        if self.out.len() >= MAX_WORDS {
            return Err(SplitError("the command has too many words to examine"));
        }
        self.out.push(w);
        Ok(())
    }

    /// Reads into `w` up to an unquoted character for which `stop` holds, or the end.
    fn word_into(&mut self, w: &mut Word, stop: impl Fn(char) -> bool) -> Result<(), SplitError> {
        while let Some(c) = self.peek() {
            if stop(c) {
                break;
            }
            match c {
                '\\' => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(c) => {
                            w.text.push(c);
                            self.pos += 1;
                        }
                        None => w.text.push('\\'),
                    }
                }
                '\'' => self.single_quoted(w)?,
                '"' => self.double_quoted(w)?,
                '$' => self.dollar(w)?,
                '`' => self.backticks(w)?,
                '~' if w.text.is_empty() && !w.opaque => self.tilde(w),
                '*' | '?' | '[' => {
                    w.glob = true;
                    w.text.push(c);
                    self.pos += 1;
                }
                _ => {
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
        Ok(())
    }

    fn single_quoted(&mut self, w: &mut Word) -> Result<(), SplitError> {
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err(SplitError("a single quote is not closed")),
                Some('\'') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(c) => {
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn double_quoted(&mut self, w: &mut Word) -> Result<(), SplitError> {
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err(SplitError("a double quote is not closed")),
                Some('"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some('\n') => self.pos += 1,
                        Some(c @ ('$' | '`' | '"' | '\\')) => {
                            w.text.push(c);
                            self.pos += 1;
                        }
                        _ => w.text.push('\\'),
                    }
                }
                Some('$') => self.dollar(w)?,
                Some('`') => self.backticks(w)?,
                Some(c) => {
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `~` or `~/…` is `HOME`; `~user`, `~+`, `~-` are opaque.
    fn tilde(&mut self, w: &mut Word) {
        self.pos += 1;
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c != '/' && c != ':' && !ends_word(c))
        {
            self.pos += 1;
        }
        if self.pos > start {
            w.opaque = true;
            return;
        }
        match (self.vars)("HOME") {
            Some(home) => w.text.push_str(&home),
            None => w.opaque = true,
        }
    }

    /// A `$` expansion (the `$` is at `pos`).
    fn dollar(&mut self, w: &mut Word) -> Result<(), SplitError> {
        self.pos += 1;
        match self.peek() {
            Some('(') if self.peek_at(1) == Some('(') => {
                self.pos += 2;
                let start = self.pos;
                self.skip_balanced('(', ')', 2, "a `$((` is not closed")?;
                // Arithmetic, or a substitution that starts with a subshell: its words are
                // looked at too when it splits as a command.
                let inner: String = self.chars[start..self.pos - 2].iter().collect();
                let mut lexer = self.child(&inner)?;
                if lexer.words(false).is_ok() {
                    self.out.append(&mut lexer.out);
                }
                w.opaque = true;
            }
            Some('(') => {
                self.pos += 1;
                self.substitution()?;
                w.opaque = true;
            }
            Some('{') => {
                self.pos += 1;
                let start = self.pos;
                self.skip_balanced('{', '}', 1, "a `${` is not closed")?;
                let inner: String = self.chars[start..self.pos - 1].iter().collect();
                self.braced(&inner, w)?;
            }
            Some(c) if is_name_start(c) => {
                let start = self.pos;
                while self.peek().is_some_and(is_name) {
                    self.pos += 1;
                }
                let name: String = self.chars[start..self.pos].iter().collect();
                self.variable(&name, w);
            }
            Some('0'..='9' | '@' | '*' | '#' | '?' | '$' | '!' | '-' | '_') => {
                self.pos += 1;
                w.opaque = true;
            }
            Some('\'') => self.ansi_c(w)?,
            // `$"…"` is a double-quoted string (translated by locale).
            Some('"') => {}
            _ => w.text.push('$'),
        }
        Ok(())
    }

    fn variable(&self, name: &str, w: &mut Word) {
        match (self.vars)(name) {
            Some(value) => w.text.push_str(&value),
            None => w.opaque = true,
        }
    }

    /// The inside of `${…}`: a plain name, the `-`, `=`, `+` forms (with or without `:`), or
    /// anything else (opaque).
    fn braced(&mut self, inner: &str, w: &mut Word) -> Result<(), SplitError> {
        let name_len = inner
            .char_indices()
            .find(|&(i, c)| !(if i == 0 { is_name_start(c) } else { is_name(c) }))
            .map_or(inner.len(), |(i, _)| i);
        let (name, rest) = inner.split_at(name_len);
        if name.is_empty() {
            w.opaque = true;
            return Ok(());
        }
        if rest.is_empty() {
            self.variable(name, w);
            return Ok(());
        }
        let colon = rest.starts_with(':');
        let rest = rest.strip_prefix(':').unwrap_or(rest);
        let Some(op) = rest.chars().next().filter(|c| matches!(c, '-' | '=' | '+')) else {
            w.opaque = true;
            return Ok(());
        };
        let operand = self.operand(&rest[1..])?;
        match (self.vars)(name) {
            Some(value) => {
                // `${N:-w}` and `${N:=w}` take `w` when N is unset (or, with `:`, empty), `${N:+w}`
                // when it is set.
                let set = !(colon && value.is_empty());
                let take_operand = if op == '+' { set } else { !set };
                if take_operand {
                    w.text.push_str(&operand.text);
                    w.opaque |= operand.opaque;
                    w.glob |= operand.glob;
                } else if op != '+' {
                    w.text.push_str(&value);
                }
            }
            // Either the unknown value or the operand: what the operand shows is kept, so a path
            // in it is seen.
            None => {
                w.text.push_str(&operand.text);
                w.opaque = true;
                w.glob |= operand.glob;
            }
        }
        Ok(())
    }

    /// The word of `${NAME:-word}`, expanded as one word (blanks in it are its text).
    fn operand(&mut self, text: &str) -> Result<Word, SplitError> {
        let mut lexer = self.child(text)?;
        let mut w = Word::default();
        lexer.word_into(&mut w, |_| false)?;
        self.out.append(&mut lexer.out);
        Ok(w)
    }

    /// `$'…'`: the common backslash escapes are decoded; any other makes the word opaque.
    fn ansi_c(&mut self, w: &mut Word) -> Result<(), SplitError> {
        self.pos += 1;
        loop {
            match self.peek() {
                None => return Err(SplitError("a `$'` quote is not closed")),
                Some('\'') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.peek() {
                        None => return Err(SplitError("a `$'` quote is not closed")),
                        Some(c) => {
                            match c {
                                'n' => w.text.push('\n'),
                                't' => w.text.push('\t'),
                                '\\' | '\'' | '"' | '?' => w.text.push(c),
                                _ => w.opaque = true,
                            }
                            self.pos += 1;
                        }
                    }
                }
                Some(c) => {
                    w.text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// A backtick substitution (the backtick is at `pos`): its command is split as well; the
    /// word is opaque.
    fn backticks(&mut self, w: &mut Word) -> Result<(), SplitError> {
        self.pos += 1;
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => return Err(SplitError("a backtick is not closed")),
                Some('`') => {
                    self.pos += 1;
                    break;
                }
                Some('\\') if matches!(self.peek_at(1), Some('`' | '\\' | '$')) => {
                    inner.push(self.chars[self.pos + 1]);
                    self.pos += 2;
                }
                Some(c) => {
                    inner.push(c);
                    self.pos += 1;
                }
            }
        }
        let mut lexer = self.child(&inner)?;
        lexer.words(false)?;
        self.out.append(&mut lexer.out);
        w.opaque = true;
        Ok(())
    }

    /// Splits the command of a `$(` at `pos` up to its `)`, adding its words to the output.
    fn substitution(&mut self) -> Result<(), SplitError> {
        if self.depth >= MAX_DEPTH {
            return Err(SplitError("substitutions are nested too deep to examine"));
        }
        self.depth += 1;
        let done = self.words(true);
        self.depth -= 1;
        done
    }

    fn child(&self, text: &str) -> Result<Lexer<'_>, SplitError> {
        if self.depth >= MAX_DEPTH {
            return Err(SplitError("substitutions are nested too deep to examine"));
        }
        Ok(Lexer {
            chars: text.chars().collect(),
            pos: 0,
            vars: self.vars,
            out: Vec::new(),
            depth: self.depth + 1,
        })
    }

    /// Moves past the `close` that balances `open`s, `level` of them open already; quotes inside
    /// are skipped whole.
    fn skip_balanced(
        &mut self,
        open: char,
        close: char,
        mut level: usize,
        unclosed: &'static str,
    ) -> Result<(), SplitError> {
        while level > 0 {
            let Some(c) = self.peek() else {
                return Err(SplitError(unclosed));
            };
            self.pos += 1;
            match c {
                '\\' => self.pos += 1,
                '\'' | '"' => {
                    while self.peek().is_some_and(|q| q != c) {
                        if c == '"' && self.peek() == Some('\\') {
                            self.pos += 1;
                        }
                        self.pos += 1;
                    }
                    if self.peek().is_none() {
                        return Err(SplitError(unclosed));
                    }
                    self.pos += 1;
                }
                c if c == open => level += 1,
                c if c == close => level -= 1,
                _ => {}
            }
        }
        Ok(())
    }
}
