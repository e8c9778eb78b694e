//! Unified diffs of a file tool's change, for events and clients (`diff -u` format, 3 lines of
//! context). Lines are compared after the common head and tail are set aside; the middle gets a
//! longest-common-subsequence alignment when it is small enough, else it is shown as replaced
//! whole, which is still a correct diff, just a longer one.

use std::path::Path;

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// The largest middle (old lines × new lines) aligned line by line.
const MAX_CELLS: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Same,
    Removed,
    Added,
}

/// The unified diff from `old` (`None`: the file did not exist) to `new`; empty when equal.
pub(crate) fn unified(path: &Path, old: Option<&str>, new: &str) -> String {
    let a: Vec<&str> = old.unwrap_or("").split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = align(&a, &b);
    let changes: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].0 != Op::Same).collect();
    if changes.is_empty() {
        return String::new();
    }
    // Lines of old and new before each op.
    let (mut before_a, mut before_b) =
        (Vec::with_capacity(ops.len()), Vec::with_capacity(ops.len()));
    let (mut na, mut nb) = (0usize, 0usize);
    for (op, _) in &ops {
        before_a.push(na);
        before_b.push(nb);
        match op {
            Op::Same => {
                na += 1;
                nb += 1;
            }
            Op::Removed => na += 1,
            Op::Added => nb += 1,
        }
    }
    let shown = path.display();
    let mut out = match old {
        Some(_) => format!("--- {shown}\n+++ {shown}\n"),
        None => format!("--- /dev/null\n+++ {shown}\n"),
    };
    let mut i = 0;
    while i < changes.len() {
        let start = changes[i].saturating_sub(CONTEXT);
        let mut last = changes[i];
        while i + 1 < changes.len() && changes[i + 1] <= last + 2 * CONTEXT + 1 {
            i += 1;
            last = changes[i];
        }
        let end = (last + 1 + CONTEXT).min(ops.len());
        let hunk = &ops[start..end];
        let count_a = hunk.iter().filter(|(op, _)| *op != Op::Added).count();
        let count_b = hunk.iter().filter(|(op, _)| *op != Op::Removed).count();
        // `diff -u` names the line before an empty range.
        let from = |before: usize, count: usize| if count == 0 { before } else { before + 1 };
        out.push_str(&format!(
            "@@ -{},{count_a} +{},{count_b} @@\n",
            from(before_a[start], count_a),
            from(before_b[start], count_b)
        ));
        for (op, line) in hunk {
            out.push(match op {
                Op::Same => ' ',
                Op::Removed => '-',
                Op::Added => '+',
            });
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
        i += 1;
    }
    out
}

/// The edit script from `a` to `b`.
fn align<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(Op, &'a str)> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut ops: Vec<(Op, &str)> = a[..head].iter().map(|l| (Op::Same, *l)).collect();
    if ma.len().saturating_mul(mb.len()) <= MAX_CELLS {
        // lcs[i][j]: the longest common subsequence of ma[i..] and mb[j..].
        let w = mb.len() + 1;
        let mut lcs = vec![0u32; (ma.len() + 1) * w];
        for i in (0..ma.len()).rev() {
            for j in (0..mb.len()).rev() {
                lcs[i * w + j] = if ma[i] == mb[j] {
                    lcs[(i + 1) * w + j + 1] + 1
                } else {
                    lcs[(i + 1) * w + j].max(lcs[i * w + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < ma.len() || j < mb.len() {
            if i < ma.len() && j < mb.len() && ma[i] == mb[j] {
                ops.push((Op::Same, ma[i]));
                i += 1;
                j += 1;
            } else if i < ma.len() && (j == mb.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])
            {
                // Removals before additions, as `diff -u` shows a replaced line.
                ops.push((Op::Removed, ma[i]));
                i += 1;
            } else {
                ops.push((Op::Added, mb[j]));
                j += 1;
            }
        }
    } else {
        ops.extend(ma.iter().map(|l| (Op::Removed, *l)));
        ops.extend(mb.iter().map(|l| (Op::Added, *l)));
    }
    ops.extend(a[a.len() - tail..].iter().map(|l| (Op::Same, *l)));
    ops
}
