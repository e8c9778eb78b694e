//! Printing results: a human form by default, exactly one JSON document on stdout with `--json`
//! (streams: one JSON object per line, each printed with [`Output::emit`] or [`Output::raw_line`]
//! as it arrives). The human form goes through [`crate::safe`], which escapes what a terminal
//! would obey; JSON gets JSON's escapes for the same characters. A closed stdout (`dshctl ... |
//! head`) ends the program quietly instead of panicking.

use std::io::Write;

use serde::Serialize;

use crate::safe;

/// Where and how results are printed.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--json` was given.
    pub json: bool,
}

impl Output {
    /// Prints `value` as JSON, or calls `human` to print the human form (on a writer that makes
    /// it safe for a terminal).
    pub fn emit<T: Serialize>(
        self,
        value: &T,
        human: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> anyhow::Result<()> {
        if self.json {
            let line = serde_json::to_string(value)?;
            return self.raw_line(&line);
        }
        let mut out = safe::stdout();
        let result = human(&mut out);
        finish(result.and_then(|()| out.flush()))
    }

    /// Prints `line` (already JSON) on its own line and flushes it (streams).
    pub fn raw_line(self, line: &str) -> anyhow::Result<()> {
        finish(json_line(line))
    }
}

/// Prints one JSON document on its own line on stdout, with [`safe::json`]'s escapes.
pub fn json_line(line: &str) -> std::io::Result<()> {
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    writeln!(lock, "{}", safe::json(line)).and_then(|()| lock.flush())
}

/// Whether human output may use colour and other attributes: stdout is a terminal and
/// `NO_COLOR` is unset or empty (<https://no-color.org>).
pub fn color() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stdout().is_terminal()
}

/// Columns of free text: on a terminal, these wrap so that a table fits its width. Every other
/// column (ids, states, counts, times) keeps its whole width: an id split over two lines cannot be
/// copied.
const WRAPPED: [&str; 5] = ["CWD", "DESCRIPTION", "COMMAND", "PATH", "TITLE"];

/// A table for human output, whose cells are made safe for a terminal ([`safe::cell`]) before
/// the table measures them.
#[derive(Debug)]
pub struct Table(comfy_table::Table);

impl Table {
    /// Adds a row of cells.
    pub fn add_row<S: AsRef<str>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let cells: Vec<String> = cells.into_iter().map(|c| safe::cell(c.as_ref())).collect();
        self.0.add_row(cells);
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// A table with a header row, for human output. On a terminal it fits the width (comfy-table's
/// dynamic arrangement: the [`WRAPPED`] columns wrap); piped, rows stay whole. `--json` always
/// carries the full values.
pub fn table(header: &[&str]) -> Table {
    let mut table = comfy_table::Table::new();
    table
        .load_preset(comfy_table::presets::NOTHING)
        .set_content_arrangement(comfy_table::ContentArrangement::Dynamic)
        .set_header(header.to_vec());
    if let Some(width) = terminal_width() {
        table.set_width(width);
    }
    for (at, name) in header.iter().enumerate() {
        if !WRAPPED.contains(name)
            && let Some(column) = table.column_mut(at)
        {
            column.set_constraint(comfy_table::ColumnConstraint::ContentWidth);
        }
    }
    Table(table)
}

/// The width a table fits when stdout is a terminal: the terminal's own (`TIOCGWINSZ`), else
/// `COLUMNS`, else 80. `None` when stdout is not a terminal. (comfy-table can ask the terminal
/// itself, but only with its `tty` feature, which brings crossterm into dshctl for this one call.)
fn terminal_width() -> Option<u16> {
    use std::io::IsTerminal;
    let stdout = std::io::stdout();
    if !stdout.is_terminal() {
        return None;
    }
    let asked = rustix::termios::tcgetwinsize(&stdout)
        .ok()
        .map(|size| size.ws_col);
    let from_env = || std::env::var("COLUMNS").ok()?.trim().parse::<u16>().ok();
    Some(
        asked
            .filter(|&columns| columns > 0)
            .or_else(|| from_env().filter(|&columns| columns > 0))
            .unwrap_or(80),
    )
}

/// An id in a table's secondary column, or a line's marker: its last 8 characters (`…0000beef`),
/// which every id argument accepts. The first characters of a UUIDv7 are its creation time, the
/// same for ids made together.
pub fn short_id(id: &str) -> String {
    if id.is_empty() {
        return String::new();
    }
    let tail = id
        .char_indices()
        .rev()
        .nth(7)
        .map_or(id, |(at, _)| &id[at..]);
    format!("…{tail}")
}

/// A past moment (Unix milliseconds) as a person reads it on screen: `3m ago`.
pub fn ago(at_ms: i64) -> String {
    let age = std::time::Duration::from_millis(u64::try_from(now_ms() - at_ms).unwrap_or(0));
    format!("{} ago", human_duration(age))
}

/// Turns a broken pipe into a quiet, successful exit: the reader has seen all it wanted.
pub fn finish(result: std::io::Result<()>) -> anyhow::Result<()> {
    match result {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// The wall clock in Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `42s`, `3m 07s`, `2h 05m 00s`.
pub fn human_duration(d: std::time::Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m {:02}s", s / 3600, (s % 3600) / 60, s % 60),
    }
}
