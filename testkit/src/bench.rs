//! The one line every benchmark prints per figure, so that one command can run them all and
//! gather one table (`cargo run --release -p dsh-tests --bin bench-all`).
//!
//! A line is `RATIO`, then tab-separated: what was measured, the measured value, the floor
//! measured in the same run (the same work without dsh, or the reference the target names), the
//! ratio of the two, the target, and `met` or `MISSED`. Values are text with their units.

/// How a ratio is judged.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The ratio must be at most this.
    AtMost(f64),
    /// The ratio must be at least this (throughput).
    AtLeast(f64),
    /// No target: the figure is reported for what it says beside a row that has one.
    Reported,
}

impl Target {
    /// Whether `ratio` meets the target.
    pub fn met(self, ratio: f64) -> bool {
        match self {
            Self::AtMost(limit) => ratio <= limit,
            Self::AtLeast(limit) => ratio >= limit,
            Self::Reported => true,
        }
    }

    /// `met`, `MISSED`, or `reported` when there is no target.
    pub fn verdict(self, ratio: f64) -> &'static str {
        match self {
            Self::Reported => "reported",
            _ if self.met(ratio) => "met",
            _ => "MISSED",
        }
    }

    /// The target as the table shows it (`<= 1.2`), empty when there is none.
    pub fn text(self) -> String {
        match self {
            Self::AtMost(limit) => format!("<= {limit}"),
            Self::AtLeast(limit) => format!(">= {limit}"),
            Self::Reported => String::new(),
        }
    }
}

/// Prints the machine-readable line of one figure: `measured` against `floor` (both with units),
/// their `ratio`, and whether it meets `target`. Returns whether it did.
pub fn ratio(name: &str, measured: &str, floor: &str, ratio: f64, target: Target) -> bool {
    let met = target.met(ratio);
    println!(
        "RATIO\t{name}\t{measured}\t{floor}\t{ratio:.2}\t{}\t{}",
        target.text(),
        target.verdict(ratio)
    );
    met
}

/// A duration in the unit that reads best.
pub fn duration(d: std::time::Duration) -> String {
    let secs = d.as_secs_f64();
    if secs >= 1.0 {
        format!("{secs:.2} s")
    } else if secs >= 1e-3 {
        format!("{:.2} ms", secs * 1e3)
    } else if secs >= 1e-6 {
        format!("{:.1} us", secs * 1e6)
    } else {
        format!("{:.0} ns", secs * 1e9)
    }
}
