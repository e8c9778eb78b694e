//! Text from models, commands, hooks and sessions, made safe to print on a terminal.
//!
//! Assistant text, command output, approval requests, hook messages, titles: any of it may hold
//! escape sequences that a terminal acts on (a window title, a clipboard write, moving the cursor
//! back over what dshctl printed, a bell), so printed raw it could redraw dshctl's own lines, an
//! approval question included. Every human form dshctl prints goes through [`SafeWriter`]:
//! on a terminal, control characters other than newline and tab are shown escaped, so they can
//! be seen and do nothing. dshctl's own sequences (dimming, erasing its status line and question)
//! are written with [`Terminal::control`], the only way past the escaping.
//!
//! The escaped forms (docs/DECISIONS.md, "Control characters on a terminal"):
//!
//! - C0 controls and DEL: `\x1b`, `\x07`, `\x7f`; a carriage return is `\r`. Newline and tab stay
//!   as they are, and a carriage return right before a newline is left out (it moves nothing the
//!   newline does not move, and CRLF text would otherwise end every line with `\r`).
//! - C1 controls (U+0080 to U+009F, which some terminals obey as ESC sequences): `\u{9b}`.
//! - Bidi embeddings, overrides and isolates (U+202A to U+202E, U+2066 to U+2069), which reorder
//!   the text after them: `\u{202e}`.
//! - A byte that is not UTF-8: `\xff` (always 0x80 or above, so never read as a C0 control).
//!
//! The approval question uses the stricter [`exact`] form. `--json` output is JSON, whose own
//! escapes serde uses for C0; [`json`] adds DEL, C1 and the bidi controls, which JSON allows raw.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::io::{self, IsTerminal, Write};
use std::sync::OnceLock;

/// Whether `c` must never reach a terminal as it is (newline and tab aside).
fn is_control(c: char) -> bool {
    matches!(c, '\0'..='\x08' | '\x0b'..='\x1f' | '\x7f' | '\u{80}'..='\u{9f}') || is_bidi(c)
}

/// Bidi embeddings, overrides and isolates, and their ends: invisible, and they reorder the text
/// that follows, so `rm -rf ~ #<U+202E> sl` could read as something else. The implicit marks
/// (LRM, RLM, ALM) are left alone in the display form: right-to-left text uses them, and they
/// cannot reverse a run of letters.
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Characters that draw nothing (or a blank), escaped by the [`exact`] form so that two
/// commands never look alike while differing by one of them: soft hyphen, combining grapheme
/// joiner, the bidi marks, Hangul fillers, zero-width spaces and joiners, line and paragraph
/// separators, invisible operators, the byte order mark, interlinear annotations, tags.
fn is_invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{34f}'
            | '\u{61c}'
            | '\u{115f}'
            | '\u{1160}'
            | '\u{17b4}'
            | '\u{17b5}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{206f}'
            | '\u{3164}'
            | '\u{feff}'
            | '\u{ffa0}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0000}'..='\u{e007f}'
    )
}

/// Appends the escaped form of `c` (a control, a bidi or an invisible character).
fn push_escaped(out: &mut String, c: char) {
    // Writing into a String cannot fail.
    let _ = match c {
        '\r' => write!(out, "\\r"),
        '\t' => write!(out, "\\t"),
        '\n' => write!(out, "\\n"),
        '\0'..='\x7f' => write!(out, "\\x{:02x}", u32::from(c)),
        _ => write!(out, "\\u{{{:x}}}", u32::from(c)),
    };
}

/// Appends the display form of `text` (see the module's documentation).
fn push_display(out: &mut String, text: &str) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\r' && chars.peek() == Some(&'\n') {
            continue;
        }
        if is_control(c) {
            push_escaped(out, c);
        } else {
            out.push(c);
        }
    }
}

/// `text` in its display form: borrowed when nothing needed escaping.
pub fn text(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    push_display(&mut out, text);
    Cow::Owned(out)
}

/// `bytes` in the display form, a byte that is not UTF-8 as `\xNN`.
pub fn bytes(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(valid) = std::str::from_utf8(bytes) {
        return text(valid);
    }
    let mut out = String::with_capacity(bytes.len() + 16);
    for chunk in bytes.utf8_chunks() {
        push_display(&mut out, chunk.valid());
        for byte in chunk.invalid() {
            let _ = write!(out, "\\x{byte:02x}");
        }
    }
    Cow::Owned(out)
}

/// A text in its exact form, for the approval question, which must show a command exactly as it
/// will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exact {
    /// The text: as it is when it holds nothing to escape; otherwise every control, bidi and
    /// invisible character escaped (tab as `\t`, a carriage return as `\r`, always) and every
    /// backslash doubled, so that the form reads back to exactly one text. Newlines stay.
    pub text: String,
    /// Something was escaped: the reader must read `text` as escaped (`\\` is one backslash).
    pub escaped: bool,
}

/// The exact form of `text` (see [`Exact`]).
pub fn exact(text: &str) -> Exact {
    let hidden = |c: char| c != '\n' && (is_control(c) || c == '\t' || is_invisible(c));
    if !text.chars().any(hidden) {
        return Exact {
            text: text.to_owned(),
            escaped: false,
        };
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if c == '\\' {
            out.push_str("\\\\");
        } else if hidden(c) {
            push_escaped(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Exact {
        text: out,
        escaped: true,
    }
}

/// JSON text with DEL, C1 and the bidi controls written as JSON escapes (`\u009b`): JSON allows
/// them raw, and a terminal may obey them. Outside strings JSON has only ASCII punctuation and
/// whitespace, so the document means exactly what it meant.
pub fn json(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| matches!(c, '\x7f' | '\u{80}'..='\u{9f}') || is_bidi(c);
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if escaped(c) {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// dshctl's own terminal sequences: the only control characters a [`SafeWriter`] lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Dim what follows (live output, the status line).
    Dim,
    /// Back to normal.
    Undim,
    /// Red text (a diff's removed lines).
    Red,
    /// Green text (a diff's added lines).
    Green,
    /// Cyan text (a diff's hunk headers).
    Cyan,
    /// Back to the start of the line and erase it.
    EraseLine,
    /// Up one line and erase it (a question taller than one line).
    EraseLineAbove,
}

impl Control {
    fn bytes(self) -> &'static [u8] {
        match self {
            Self::Dim => b"\x1b[2m",
            Self::Undim => b"\x1b[0m",
            Self::Red => b"\x1b[31m",
            Self::Green => b"\x1b[32m",
            Self::Cyan => b"\x1b[36m",
            Self::EraseLine => b"\r\x1b[2K",
            Self::EraseLineAbove => b"\x1b[1A\x1b[2K",
        }
    }
}

/// A writer whose text is made safe, and which writes dshctl's own [`Control`]s.
pub trait Terminal: Write {
    /// Writes one of dshctl's own sequences, as it is.
    fn control(&mut self, control: Control) -> io::Result<()>;
}

/// Escapes what is written to it (in the display form) when it writes to a terminal, and passes
/// it through as it is otherwise (a pipe or a file gets the bytes the model or command produced;
/// see docs/DECISIONS.md). The end of a write that may continue in the next one (part of a UTF-8
/// sequence, a carriage return that may come before a newline) is held until then.
#[derive(Debug)]
pub struct SafeWriter<W: Write> {
    inner: W,
    escape: bool,
    held: Vec<u8>,
}

impl<W: Write> SafeWriter<W> {
    /// A writer to `inner`, escaping when `escape` (`inner` is a terminal).
    pub fn new(inner: W, escape: bool) -> Self {
        Self {
            inner,
            escape,
            held: Vec::new(),
        }
    }

    /// Writes what was held back, escaped, before anything of dshctl's own.
    fn release(&mut self) -> io::Result<()> {
        if self.held.is_empty() {
            return Ok(());
        }
        let held = std::mem::take(&mut self.held);
        self.inner.write_all(bytes(&held).as_bytes())
    }
}

/// How many bytes at the end of `bytes` may be completed by what comes next: a carriage return
/// (a newline may follow), or the start of a UTF-8 sequence cut short.
fn continued(bytes: &[u8]) -> usize {
    if bytes.last() == Some(&b'\r') {
        return 1;
    }
    for len in 1..=bytes.len().min(3) {
        let tail = &bytes[bytes.len() - len..];
        if tail[0] >= 0xc0 {
            return match std::str::from_utf8(tail) {
                Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => len,
                _ => 0,
            };
        }
    }
    0
}

impl<W: Write> Write for SafeWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if !self.escape {
            return self.inner.write(buf);
        }
        self.held.extend_from_slice(buf);
        let ready = self.held.len() - continued(&self.held);
        let shown = bytes(&self.held[..ready]).into_owned();
        self.held.drain(..ready);
        self.inner.write_all(shown.as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Terminal for SafeWriter<W> {
    fn control(&mut self, control: Control) -> io::Result<()> {
        self.release()?;
        self.inner.write_all(control.bytes())
    }
}

impl<W: Write> Drop for SafeWriter<W> {
    fn drop(&mut self) {
        // Nothing can continue it now; a failure has nobody left to tell.
        let _ = self.release().and_then(|()| self.inner.flush());
    }
}

/// Whether stdout is a terminal (asked once).
pub fn stdout_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| io::stdout().is_terminal())
}

/// Whether stderr is a terminal (asked once).
pub fn stderr_is_terminal() -> bool {
    static TERMINAL: OnceLock<bool> = OnceLock::new();
    *TERMINAL.get_or_init(|| io::stderr().is_terminal())
}

/// Safe stdout.
pub fn stdout() -> SafeWriter<io::StdoutLock<'static>> {
    SafeWriter::new(io::stdout().lock(), stdout_is_terminal())
}

/// Safe stderr.
pub fn stderr() -> SafeWriter<io::StderrLock<'static>> {
    SafeWriter::new(io::stderr().lock(), stderr_is_terminal())
}

/// `eprintln!` through [`stderr`], for lines that carry text dshctl did not write.
pub fn eprintln(args: std::fmt::Arguments<'_>) {
    let mut err = stderr();
    // stderr closed: there is nobody to tell.
    let _ = writeln!(err, "{args}");
}

/// A table cell: escaped when stdout is a terminal (before the table measures it, so columns
/// stay aligned), as it is otherwise.
pub fn cell(text: &str) -> String {
    if stdout_is_terminal() {
        self::text(text).into_owned()
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
#[path = "safe_tests.rs"]
mod tests;
