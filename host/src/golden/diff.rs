//! A unified diff of two texts, line by line, for `inrun test`'s failure reports.

/// One line of an edit script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Edit<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// The shortest edit script from `a` to `b` by longest common subsequence. Golden files are
/// small (hundreds of lines), so the quadratic table is fine.
fn edits<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Edit<'a>> {
    let (n, m) = (a.len(), b.len());
    // lcs[i][j]: length of the longest common subsequence of a[i..] and b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(n.max(m));
    while i < n || j < m {
        if i < n && j < m && a[i] == b[j] {
            out.push(Edit::Same(a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals before additions, as diff(1) shows a changed line.
            out.push(Edit::Removed(a[i]));
            i += 1;
        } else {
            out.push(Edit::Added(b[j]));
            j += 1;
        }
    }
    out
}

/// `a` and `b` as a unified diff with `context` lines around each change, headed
/// `--- a_name` / `+++ b_name`; empty when they are equal.
pub fn unified(a_name: &str, a: &str, b_name: &str, b: &str, context: usize) -> String {
    let (a_lines, b_lines): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let script = edits(&a_lines, &b_lines);
    let changed: Vec<usize> = script
        .iter()
        .enumerate()
        .filter(|(_, e)| !matches!(e, Edit::Same(_)))
        .map(|(k, _)| k)
        .collect();
    if changed.is_empty() {
        return String::new();
    }
    // Group changes whose context windows touch into hunks of script indices.
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for &k in &changed {
        let start = k.saturating_sub(context);
        let end = (k + context + 1).min(script.len());
        match hunks.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => hunks.push((start, end)),
        }
    }
    let mut out = format!("--- {a_name}\n+++ {b_name}\n");
    for (start, end) in hunks {
        // Line numbers (1-based) in a and b where the hunk starts.
        let before = &script[..start];
        let a_at = before
            .iter()
            .filter(|e| !matches!(e, Edit::Added(_)))
            .count();
        let b_at = before
            .iter()
            .filter(|e| !matches!(e, Edit::Removed(_)))
            .count();
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
}
