//! Rewrites Go-template paths (`{{ .spec.image }}`) into Jinja paths (`{{ spec.image }}`).
//!
//! Inrun users come from Go templates, where every path starts at the dot. Jinja has no
//! leading dot, so the engine drops it before minijinja sees the source. Only the inside of
//! `{{ }}` and `{% %}` blocks is touched; text, comments, `{% raw %}` sections and string
//! literals inside blocks are copied as they are.
//!
//! A `.` is dropped when it starts a path: it is followed by an identifier and preceded by
//! the start of the block, whitespace, an opening bracket, `,`, `|`, `:` or an operator. A
//! `.` after an identifier, a closing bracket, a digit or a string literal is attribute
//! access or part of a number and stays. `$.x` (Go's root) becomes `x` as well.

use std::ops::Range;

/// The output of [`rewrite`]: the Jinja source, and where the expression sits when the
/// whole template is exactly one `{{ expr }}` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rewritten {
    /// The rewritten source.
    pub text: String,
    /// The byte range of the expression inside `text` (without the `{{ }}` delimiters and
    /// whitespace-control markers) when `text` is a single expression block.
    pub single_expression: Option<Range<usize>>,
}

impl Rewritten {
    /// The expression when the template is exactly one `{{ expr }}` block.
    pub fn expression(&self) -> Option<&str> {
        self.single_expression
            .clone()
            .and_then(|r| self.text.get(r))
    }
}

/// Rewrites a whole template: text with `{{ }}`, `{% %}` and `{# #}` blocks.
pub(crate) fn rewrite(template: &str) -> Rewritten {
    let mut out = String::with_capacity(template.len());
    let mut i = 0;
    // Every block as (is_expression, start and end in `out`).
    let mut blocks: Vec<(bool, usize, usize)> = Vec::new();
    let mut saw_text = false;
    while i < template.len() {
        let rest = &template[i..];
        let start = out.len();
        if rest.starts_with("{{") {
            out.push_str("{{");
            i = rewrite_block(template, i + 2, "}}", &mut out);
            blocks.push((true, start, out.len()));
        } else if rest.starts_with("{%") {
            if let Some(end) = raw_section_end(template, i) {
                out.push_str(&template[i..end]);
                i = end;
            } else {
                out.push_str("{%");
                i = rewrite_block(template, i + 2, "%}", &mut out);
            }
            blocks.push((false, start, out.len()));
        } else if rest.starts_with("{#") {
            let end = rest.find("#}").map_or(template.len(), |p| i + p + 2);
            out.push_str(&template[i..end]);
            i = end;
            blocks.push((false, start, out.len()));
        } else {
            let next = next_block_start(rest).map_or(template.len(), |p| i + p);
            out.push_str(&template[i..next]);
            saw_text = true;
            i = next;
        }
    }
    let single_expression = match blocks.as_slice() {
        [(true, 0, end)] if !saw_text && *end == out.len() && out.ends_with("}}") => {
            expression_range(&out)
        }
        _ => None,
    };
    Rewritten {
        text: out,
        single_expression,
    }
}

/// Rewrites a bare expression, as if it stood inside `{{ }}`.
pub(crate) fn rewrite_expression(expr: &str) -> String {
    let mut out = String::with_capacity(expr.len());
    rewrite_block(expr, 0, "", &mut out);
    out
}

/// Whether `text` contains a template block at all (`{{` or `{%`).
pub(crate) fn has_template_markers(text: &str) -> bool {
    text.contains("{{") || text.contains("{%")
}

/// The inner range of a single `{{ ... }}` block spanning all of `text`, with Jinja's
/// whitespace-control markers (`{{-`, `-}}`, `+`) left out.
fn expression_range(text: &str) -> Option<Range<usize>> {
    let mut start = 2;
    let mut end = text.len().checked_sub(2)?;
    if end < start {
        return None;
    }
    if matches!(text.as_bytes().get(start), Some(b'-' | b'+')) && start < end {
        start += 1;
    }
    if end > start && matches!(text.as_bytes().get(end - 1), Some(b'-' | b'+')) {
        end -= 1;
    }
    Some(start..end)
}

/// Where the next `{{`, `{%` or `{#` starts in `text`, if anywhere.
fn next_block_start(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(1))
        .find(|&p| bytes[p] == b'{' && matches!(bytes[p + 1], b'{' | b'%' | b'#'))
}

/// When a `{% raw %}` tag starts at `at`, the end of the matching `{% endraw %}` tag.
pub(crate) fn raw_section_end(template: &str, at: usize) -> Option<usize> {
    // The closer is searched after the opener: in `{%}` the `%` belongs to the opener.
    let open_end = at + 2 + template[at + 2..].find("%}")? + 2;
    if tag_name(&template[at + 2..open_end - 2]) != "raw" {
        return None;
    }
    let mut search = open_end;
    while let Some(p) = template[search..].find("{%") {
        let tag_start = search + p;
        let tag_end = tag_start + 2 + template[tag_start + 2..].find("%}")? + 2;
        if tag_name(&template[tag_start + 2..tag_end - 2]) == "endraw" {
            return Some(tag_end);
        }
        search = tag_start + 2;
    }
    None
}

/// The tag's text without whitespace-control markers and surrounding whitespace.
fn tag_name(inner: &str) -> &str {
    inner
        .trim_start_matches(['-', '+'])
        .trim_end_matches(['-', '+'])
        .trim()
}

fn is_ident_start(c: char) -> bool {
    c == '_' || c.is_alphabetic()
}

fn is_ident_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// Copies one block's inside from `start` up to and including `closer` (or to the end of
/// the input when `closer` is empty or missing), dropping the dots that start paths.
/// Returns the position after the block.
fn rewrite_block(src: &str, start: usize, closer: &str, out: &mut String) -> usize {
    // The character before the current one that decides whether a `.` starts a path;
    // `{` stands for the start of the block.
    let mut prev = '{';
    let mut depth = 0usize;
    let mut i = start;
    while i < src.len() {
        let rest = &src[i..];
        if depth == 0 && !closer.is_empty() && rest.starts_with(closer) {
            out.push_str(closer);
            return i + closer.len();
        }
        let Some(c) = rest.chars().next() else { break };
        let next = rest[c.len_utf8()..].chars().next();
        match c {
            '\'' | '"' => {
                let end = string_literal_end(src, i, c);
                out.push_str(&src[i..end]);
                i = end;
                prev = c;
                continue;
            }
            '.' if starts_path(prev) && next.is_some_and(is_ident_start) => {
                // Dropped; `prev` stays what it was.
            }
            '$' if starts_path(prev) && next == Some('.') => {
                // Go's root variable: `$.x` is `x`.
            }
            _ => {
                match c {
                    '(' | '[' | '{' => depth += 1,
                    ')' | ']' | '}' => depth = depth.saturating_sub(1),
                    _ => {}
                }
                out.push(c);
                prev = c;
            }
        }
        i += c.len_utf8();
    }
    src.len()
}

/// Whether a `.` after `prev` starts a path rather than an attribute access or a number.
fn starts_path(prev: char) -> bool {
    !(is_ident_char(prev) || matches!(prev, ')' | ']' | '}' | '\'' | '"'))
}

/// The position after the string literal opened by `quote` at `start`.
fn string_literal_end(src: &str, start: usize, quote: char) -> usize {
    let mut escaped = false;
    for (offset, c) in src[start + 1..].char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == quote {
            return start + 1 + offset + 1;
        }
    }
    src.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rw(s: &str) -> String {
        rewrite(s).text
    }

    #[test]
    fn leading_dot_of_a_path_is_dropped() {
        assert_eq!(rw("{{ .spec.image }}"), "{{ spec.image }}");
        assert_eq!(rw("{{.spec.image}}"), "{{spec.image}}");
        assert_eq!(rw("{{- .spec.image -}}"), "{{- spec.image -}}");
    }

    #[test]
    fn plain_jinja_paths_are_left_alone() {
        assert_eq!(rw("{{ spec.image }}"), "{{ spec.image }}");
        assert_eq!(rw("{{ spec['a.b'].c }}"), "{{ spec['a.b'].c }}");
    }

    #[test]
    fn dots_after_identifiers_brackets_and_calls_stay() {
        assert_eq!(rw("{{ a.b[0].c }}"), "{{ a.b[0].c }}");
        assert_eq!(rw("{{ f(x).y }}"), "{{ f(x).y }}");
        assert_eq!(rw("{{ 'x'.upper() }}"), "{{ 'x'.upper() }}");
    }

    #[test]
    fn numbers_keep_their_decimal_point() {
        assert_eq!(rw("{{ .spec.x * 1.5 }}"), "{{ spec.x * 1.5 }}");
        assert_eq!(rw("{{ .5 + 2 }}"), "{{ .5 + 2 }}");
    }

    #[test]
    fn paths_after_filters_operators_and_brackets_lose_the_dot() {
        assert_eq!(
            rw("{{ .metadata.name | upper }}"),
            "{{ metadata.name | upper }}"
        );
        assert_eq!(rw("{{ .a|default(.b, .c) }}"), "{{ a|default(b, c) }}");
        assert_eq!(rw("{{ [.a,.b] }}"), "{{ [a,b] }}");
        assert_eq!(rw("{{ .a+.b>=.c }}"), "{{ a+b>=c }}");
        assert_eq!(rw("{{ not .a }}"), "{{ not a }}");
        assert_eq!(rw("{{ {'k':.v} }}"), "{{ {'k':v} }}");
    }

    #[test]
    fn statement_blocks_are_rewritten_too() {
        assert_eq!(
            rw("{% if .spec.enabled %}on{% endif %}"),
            "{% if spec.enabled %}on{% endif %}"
        );
        assert_eq!(
            rw("{%- for p in .spec.ports %}{{ p }}{% endfor %}"),
            "{%- for p in spec.ports %}{{ p }}{% endfor %}"
        );
    }

    #[test]
    fn text_outside_blocks_is_untouched() {
        assert_eq!(rw("image: .spec.image"), "image: .spec.image");
        assert_eq!(rw("a .b {{ .c }} .d"), "a .b {{ c }} .d");
    }

    #[test]
    fn string_literals_inside_blocks_are_untouched() {
        assert_eq!(rw("{{ '.foo' }}"), "{{ '.foo' }}");
        assert_eq!(rw(r#"{{ "a .b" ~ .c }}"#), r#"{{ "a .b" ~ c }}"#);
        assert_eq!(rw(r"{{ 'it\'s .x' }}"), r"{{ 'it\'s .x' }}");
        assert_eq!(rw("{{ '}}' ~ .x }}"), "{{ '}}' ~ x }}");
    }

    #[test]
    fn comments_and_raw_sections_are_untouched() {
        assert_eq!(rw("{# .a #}{{ .b }}"), "{# .a #}{{ b }}");
        assert_eq!(
            rw("{% raw %}{{ .a }}{% endraw %}{{ .b }}"),
            "{% raw %}{{ .a }}{% endraw %}{{ b }}"
        );
    }

    #[test]
    fn go_root_variable_is_dropped() {
        assert_eq!(rw("{{ $.spec.x }}"), "{{ spec.x }}");
    }

    #[test]
    fn nested_braces_do_not_end_the_block_early() {
        assert_eq!(rw("{{ {'a': {'b': .x}} }} .y"), "{{ {'a': {'b': x}} }} .y");
    }

    #[test]
    fn unterminated_blocks_are_copied_to_the_end() {
        assert_eq!(rw("{{ .a "), "{{ a ");
    }

    #[test]
    fn a_single_expression_block_is_recognised() {
        assert_eq!(
            rewrite("{{ .spec.replicas }}").expression(),
            Some(" spec.replicas ")
        );
        assert_eq!(rewrite("{{- .a -}}").expression(), Some(" a "));
        assert_eq!(rewrite("x{{ .a }}").expression(), None);
        assert_eq!(rewrite("{{ .a }} ").expression(), None);
        assert_eq!(rewrite("{{ a }}{{ b }}").expression(), None);
        assert_eq!(rewrite("{% if a %}{% endif %}").expression(), None);
        assert_eq!(rewrite("{{ .a ").expression(), None);
    }

    #[test]
    fn bare_expressions_are_rewritten_whole() {
        assert_eq!(
            rewrite_expression(".spec.replicas > 2"),
            "spec.replicas > 2"
        );
        assert_eq!(
            rewrite_expression(".a == '.b' and c.d"),
            "a == '.b' and c.d"
        );
    }

    #[test]
    fn a_closer_that_shares_the_openers_percent_is_not_a_tag() {
        // `{%}` once sliced past its own end and panicked the host.
        assert_eq!(rw("a {%} b"), "a {%} b");
        assert_eq!(rw("{% raw %}{%}{% endraw %}"), "{% raw %}{%}{% endraw %}");
        assert_eq!(rw("{%}%}"), "{%}%}");
    }

    #[test]
    fn unicode_text_is_preserved() {
        assert_eq!(
            rw("héllo {{ .ñ ~ 'ü' }} wörld"),
            "héllo {{ ñ ~ 'ü' }} wörld"
        );
    }
}
