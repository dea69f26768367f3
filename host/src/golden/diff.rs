//! A unified diff of two texts, line by line, for `inrun test`'s failure reports.

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// The most cells the longest-common-subsequence table may have (16 MB of `u32`). A
/// differing middle larger than that is shown as two whole blocks instead, so memory stays
/// linear in the input whatever two files are compared.
const MAX_TABLE_CELLS: usize = 4 << 20;

/// An edit script from `a` to `b`: the common prefix and suffix as they are, and between
/// them the shortest script (longest common subsequence) when its table fits in
/// [`MAX_TABLE_CELLS`], else every line of `a`'s middle removed and every line of `b`'s
/// added.
fn edits<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Edit<'a>> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (a_rest, b_rest) = (&a[prefix..], &b[prefix..]);
    let suffix = a_rest
        .iter()
        .rev()
        .zip(b_rest.iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let a_mid = &a_rest[..a_rest.len() - suffix];
    let b_mid = &b_rest[..b_rest.len() - suffix];
    let mut out = Vec::with_capacity(a.len().max(b.len()));
    out.extend(a[..prefix].iter().map(|l| Edit::Same(l)));
    let cells = (a_mid.len() + 1).saturating_mul(b_mid.len() + 1);
    if cells <= MAX_TABLE_CELLS {
        shortest(a_mid, b_mid, &mut out);
    } else {
        out.extend(a_mid.iter().map(|l| Edit::Removed(l)));
        out.extend(b_mid.iter().map(|l| Edit::Added(l)));
    }
    out.extend(
        a_rest[a_rest.len() - suffix..]
            .iter()
            .map(|l| Edit::Same(l)),
    );
    out
}

/// Appends the shortest edit script from `a` to `b` to `out`, by a longest common
/// subsequence table of `(a.len() + 1) × (b.len() + 1)` cells.
fn shortest<'a>(a: &[&'a str], b: &[&'a str], out: &mut Vec<Edit<'a>>) {
    let (n, m) = (a.len(), b.len());
    let width = m + 1;
    // lcs[i * width + j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i * width + j] = if a[i] == b[j] {
                lcs[(i + 1) * width + j + 1] + 1
            } else {
                lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(Edit::Same(a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
            // Removals before additions, as diff(1) shows a changed line.
            out.push(Edit::Removed(a[i]));
            i += 1;
        } else {
            out.push(Edit::Added(b[j]));
            j += 1;
        }
    }
}

/// `a` and `b` as a unified diff with `context` lines around each change, headed
/// `--- a_name` / `+++ b_name`; empty when they are equal. Memory and time are linear in
/// the inputs beyond a bounded table (see [`MAX_TABLE_CELLS`]).
pub fn unified(a_name: &str, a: &str, b_name: &str, b: &str, context: usize) -> String {
    let (a_lines, b_lines): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let script = edits(&a_lines, &b_lines);
    // Group changes whose context windows touch into hunks of script indices.
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for (k, _) in script
        .iter()
        .enumerate()
        .filter(|(_, e)| !matches!(e, Edit::Same(_)))
    {
        let start = k.saturating_sub(context);
        let end = (k + context + 1).min(script.len());
        match hunks.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => hunks.push((start, end)),
        }
    }
    if hunks.is_empty() {
        return String::new();
    }
    let mut out = format!("--- {a_name}\n+++ {b_name}\n");
    // Lines of a and b before script index `seen`, counted as the hunks go by.
    let (mut seen, mut a_at, mut b_at) = (0, 0, 0);
    for (start, end) in hunks {
        for e in &script[seen..start] {
            a_at += usize::from(!matches!(e, Edit::Added(_)));
            b_at += usize::from(!matches!(e, Edit::Removed(_)));
        }
        let body = &script[start..end];
        let a_len = body.iter().filter(|e| !matches!(e, Edit::Added(_))).count();
        let b_len = body
            .iter()
            .filter(|e| !matches!(e, Edit::Removed(_)))
            .count();
        let at = |line: usize, len: usize| if len == 0 { line } else { line + 1 };
        out.push_str(&format!(
            "@@ -{},{a_len} +{},{b_len} @@\n",
            at(a_at, a_len),
            at(b_at, b_len)
        ));
        for e in body {
            let (mark, line) = match e {
                Edit::Same(l) => (' ', l),
                Edit::Removed(l) => ('-', l),
                Edit::Added(l) => ('+', l),
            };
            out.push(mark);
            out.push_str(line);
            out.push('\n');
        }
        (seen, a_at, b_at) = (end, a_at + a_len, b_at + b_len);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a", "x\ny\n", "b", "x\ny\n", 3), "");
    }

    #[test]
    fn a_changed_line_is_shown_with_its_context_and_line_numbers() {
        let a = "1\n2\n3\n4\n5\n6\n7\n8\n";
        let b = "1\n2\n3\n4\nfive\n6\n7\n8\n";
        assert_eq!(
            unified("expected", a, "got", b, 2),
            "--- expected\n+++ got\n@@ -3,5 +3,5 @@\n 3\n 4\n-5\n+five\n 6\n 7\n"
        );
    }

    #[test]
    fn distant_changes_make_separate_hunks_and_additions_at_the_end_count() {
        let a = "a\nb\nc\nd\ne\nf\ng\n";
        let b = "A\nb\nc\nd\ne\nf\ng\nh\n";
        assert_eq!(
            unified("x", a, "y", b, 1),
            "--- x\n+++ y\n@@ -1,2 +1,2 @@\n-a\n+A\n b\n@@ -7,1 +7,2 @@\n g\n+h\n"
        );
    }

    fn numbered(n: usize, changed: impl Fn(usize) -> bool) -> String {
        (0..n)
            .map(|i| {
                if changed(i) {
                    format!("changed {i}\n")
                } else {
                    format!("line {i}\n")
                }
            })
            .collect()
    }

    #[test]
    fn long_inputs_differing_in_one_line_diff_only_around_it() {
        let a = numbered(20_000, |_| false);
        let b = numbered(20_000, |i| i == 12_345);
        let started = std::time::Instant::now();
        let diff = unified("expected", &a, "got", &b, 1);
        assert_eq!(
            diff,
            "--- expected\n+++ got\n@@ -12345,3 +12345,3 @@\n line 12344\n-line 12345\n+changed 12345\n line 12346\n"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn long_inputs_differing_throughout_show_the_differing_middle_whole() {
        // Every 100th line differs, from line 10 to line 19,910: a middle of 19,901 lines
        // each side, whose table (~400M cells) is over the cap.
        let changed = |i: usize| (10..=19_910).contains(&i) && i % 100 == 10;
        let a = numbered(20_000, |_| false);
        let b = numbered(20_000, changed);
        let middle = 19_910 - 10 + 1;
        assert!((middle + 1) * (middle + 1) > MAX_TABLE_CELLS);
        let started = std::time::Instant::now();
        let diff = unified("expected", &a, "got", &b, 2);
        let lines: Vec<&str> = diff.lines().collect();
        assert_eq!(lines[2], "@@ -9,19905 +9,19905 @@");
        assert_eq!(lines.iter().filter(|l| l.starts_with("@@")).count(), 1);
        // Two lines of context, every expected middle line removed, then every got line
        // added, then two lines of context.
        assert_eq!(&lines[3..5], [" line 8", " line 9"]);
        let removed: Vec<&str> = lines[5..5 + middle].to_vec();
        let added: Vec<&str> = lines[5 + middle..5 + 2 * middle].to_vec();
        assert!(
            removed.iter().all(|l| l.starts_with('-')),
            "{:?}",
            &removed[..3]
        );
        assert!(
            added.iter().all(|l| l.starts_with('+')),
            "{:?}",
            &added[..3]
        );
        assert_eq!((removed[0], added[0]), ("-line 10", "+changed 10"));
        assert_eq!(added[middle - 1], "+changed 19910");
        assert_eq!(&lines[5 + 2 * middle..], [" line 19911", " line 19912"]);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn a_small_middle_still_gets_the_shortest_script_after_trimming() {
        let a = "p\nq\nx\ny\nz\ns\n";
        let b = "p\nq\ny\nz\nw\ns\n";
        assert_eq!(
            unified("a", a, "b", b, 0),
            "--- a\n+++ b\n@@ -3,1 +2,0 @@\n-x\n@@ -5,0 +5,1 @@\n+w\n"
        );
    }
}
