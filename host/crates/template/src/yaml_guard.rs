//! Keeps what a document template interpolates from changing the YAML around it.
//!
//! A string template (`onReconcile: "apiVersion: v1\n..."`) is rendered as text and then
//! parsed as YAML, so a CR field rendered into it could otherwise add keys or documents
//! (`spec.name: "x\n  privileged: true"`). Before compiling, every `{{ expr }}` is wrapped
//! in a filter told where it sits on its line ([`Spot`]), and the filter writes the value
//! so that it stays one scalar there:
//!
//! - inside `"…"`: escaped as a double-quoted scalar (`\"`, `\\`, `\n`, `\uXXXX`);
//! - inside `'…'`: `'` doubled, line breaks kept as YAML folds them back;
//! - elsewhere (plain or block context): a string that YAML would read back as the same
//!   string, a number, a bool or null is written as it is; anything else (a string that
//!   would open a map, a list, an alias, a tag or a comment; in a `{…}`/`[…]` flow, one
//!   holding `,` `[` `]` `{` `}` `#` or `: `) is written double-quoted; a multi-line value
//!   has its next lines indented to the column of its `{{`, so it stays inside the block
//!   scalar or node it was written into.
//!
//! Numbers, bools, lists and maps print as before; so does the output of `toJson` and
//! `toYaml` (safe strings: structure by intent) in plain context. A `{{ }}` that starts a
//! line, with nothing before it, is written as it is: the template hands that whole line to
//! the value on purpose (`{{ .spec.extra | toYaml }}`).

use minijinja::{Error, State, Value};

/// The filter's name in the engine.
pub(crate) const FILTER: &str = "__inrun_yaml";

/// Wraps every `{{ expr }}` of `text` (Jinja source, after the Go-path rewrite) in
/// [`FILTER`], told where it sits.
pub(crate) fn guard(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut line = Line::new();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        if rest.starts_with("{{") {
            let end = block_end(text, i + 2, "}}");
            let block = &text[i..end];
            match (line.spot(), inner(block)) {
                (Some(spot), Some((open, expr, close))) => {
                    out.push_str(&format!(
                        "{{{{{open} ({expr}) | {FILTER}(\"{}\", {}) {close}}}}}",
                        spot.name(),
                        line.column()
                    ));
                }
                _ => out.push_str(block),
            }
            line.after_block();
            i = end;
        } else if rest.starts_with("{%") {
            let end = super::gopath::raw_section_end(text, i)
                .unwrap_or_else(|| block_end(text, i + 2, "%}"));
            out.push_str(&text[i..end]);
            line.blocks = true;
            i = end;
        } else if rest.starts_with("{#") {
            let end = rest.find("#}").map_or(text.len(), |p| i + p + 2);
            out.push_str(&text[i..end]);
            line.blocks = true;
            i = end;
        } else {
            let Some(c) = rest.chars().next() else { break };
            let next = rest[c.len_utf8()..].chars().next();
            out.push(c);
            if line.text(c, next) {
                // The second `'` of a `''` inside single quotes: copied, not a quote.
                if let Some(n) = next {
                    out.push(n);
                    i += n.len_utf8();
                }
            }
            i += c.len_utf8();
        }
    }
    out
}

/// `{{- expr -}}` as (`-`, `expr`, `-`): the whitespace-control markers and the expression.
fn inner(block: &str) -> Option<(&str, &str, &str)> {
    let body = block.strip_prefix("{{")?.strip_suffix("}}")?;
    let open_len = usize::from(body.starts_with(['-', '+']));
    let close_len = usize::from(body.len() > open_len && body.ends_with(['-', '+']));
    let expr = body[open_len..body.len() - close_len].trim();
    if expr.is_empty() {
        return None;
    }
    Some((&body[..open_len], expr, &body[body.len() - close_len..]))
}

/// The end of the block whose inside starts at `start` (after `closer`): string literals
/// and brackets inside are skipped.
fn block_end(src: &str, start: usize, closer: &str) -> usize {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (offset, c) in src[start..].char_indices() {
        let at = start + offset;
        if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
            continue;
        }
        if depth == 0 && src[at..].starts_with(closer) {
            return at + closer.len();
        }
        match c {
            '\'' | '"' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    src.len()
}

/// Where a `{{ }}` sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spot {
    /// Inside a double-quoted scalar.
    Double,
    /// Inside a single-quoted scalar.
    Single,
    /// Plain or block context, outside any flow collection, after other text on the line.
    Block,
    /// Plain or block context with only indentation before it: a block scalar's line, or
    /// a node on a line of its own.
    Lead,
    /// Plain context inside a `{…}` or `[…]` flow collection.
    Flow,
}

impl Spot {
    fn name(self) -> &'static str {
        match self {
            Spot::Double => "double",
            Spot::Single => "single",
            Spot::Block => "block",
            Spot::Lead => "lead",
            Spot::Flow => "flow",
        }
    }
}

/// The YAML state of the current line of template text, as far as its text tells.
struct Line {
    /// Characters of text before this point (blocks count none).
    column: usize,
    /// Whether a block (`{{ }}`, `{% %}`, `{# #}`) came before on this line.
    blocks: bool,
    quote: Option<char>,
    escaped: bool,
    flow: usize,
    /// Whether a quoted scalar may start here (line start, after `: `, `- `, `[`, `,`...).
    scalar_start: bool,
    comment: bool,
    previous: Option<char>,
    /// Whether only indentation came before on this line.
    lead: bool,
}

impl Line {
    fn new() -> Line {
        Line {
            column: 0,
            blocks: false,
            quote: None,
            escaped: false,
            flow: 0,
            scalar_start: true,
            comment: false,
            previous: None,
            lead: true,
        }
    }

    /// Where a `{{ }}` here sits; `None` inside a comment (left as it is).
    fn spot(&self) -> Option<Spot> {
        if self.comment {
            return None;
        }
        Some(match self.quote {
            Some('"') => Spot::Double,
            Some(_) => Spot::Single,
            None if self.flow > 0 => Spot::Flow,
            None if self.lead => Spot::Lead,
            None => Spot::Block,
        })
    }

    /// The column the filter indents next lines to: `0` only where the `{{` starts the
    /// line with nothing before it.
    fn column(&self) -> usize {
        if self.blocks {
            self.column.max(1)
        } else {
            self.column
        }
    }

    /// A `{{ }}` was written: its output is content.
    fn after_block(&mut self) {
        self.blocks = true;
        self.lead = false;
        self.scalar_start = false;
        self.previous = Some('x');
    }

    /// Takes text character `c` (then `next`); returns whether `next` was taken too.
    fn text(&mut self, c: char, next: Option<char>) -> bool {
        if c == '\n' {
            *self = Line::new();
            return false;
        }
        self.column += 1;
        self.lead &= c == ' ';
        let mut took_next = false;
        if self.comment {
            return false;
        }
        match self.quote {
            Some('"') => {
                if self.escaped {
                    self.escaped = false;
                } else if c == '\\' {
                    self.escaped = true;
                } else if c == '"' {
                    self.quote = None;
                }
            }
            Some(_) => {
                if c == '\'' {
                    if next == Some('\'') {
                        self.column += 1;
                        took_next = true;
                    } else {
                        self.quote = None;
                    }
                }
            }
            None => {
                let space_after = next.is_none_or(char::is_whitespace);
                match c {
                    '"' | '\'' if self.scalar_start => self.quote = Some(c),
                    '#' if self.previous.is_none_or(char::is_whitespace) => self.comment = true,
                    '{' | '[' => {
                        self.flow += 1;
                        self.scalar_start = true;
                    }
                    '}' | ']' => {
                        self.flow = self.flow.saturating_sub(1);
                        self.scalar_start = false;
                    }
                    ',' if self.flow > 0 => self.scalar_start = true,
                    ':' | '-' | '?' if space_after => self.scalar_start = true,
                    c if c.is_whitespace() => {}
                    _ => self.scalar_start = false,
                }
            }
        }
        self.previous = Some(c);
        took_next
    }
}

/// Characters YAML reads as line breaks (YAML 1.1 parsers also NEL, LS and PS).
fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// `text`'s lines joined by a line break and `indent` spaces.
fn indented(text: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if is_break(c) {
            if c == '\r' && chars.peek() == Some(&'\n') {
                chars.next();
            }
            out.push('\n');
            out.push_str(&pad);
        } else {
            out.push(c);
        }
    }
    out
}

/// `text` as a YAML double-quoted scalar, quotes included.
fn double_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    out.push_str(&double_escaped(text));
    out.push('"');
    out
}

/// `text` escaped for the inside of a double-quoted scalar.
fn double_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || is_break(c) || c == '\u{feff}' => {
                out.push_str(&format!("\\u{:04x}", u32::from(c)));
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether YAML reads `text`, written plain, as itself (or as a number, bool or null, as
/// a typed field would be): no map, list, alias, tag, comment or quoting comes of it.
fn reads_back(text: &str) -> bool {
    use serde_yaml_ng::Value as Yaml;
    // Most values (names, images, numbers) are plain at a glance: no parse for them.
    let first_ok = text
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric());
    if first_ok
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '/' | ':' | '@'))
        && !text.ends_with(':')
    {
        return true;
    }
    match serde_yaml_ng::from_str::<Yaml>(text) {
        Ok(Yaml::String(s)) => s == text,
        Ok(Yaml::Number(_) | Yaml::Bool(_)) => true,
        Ok(Yaml::Null) => matches!(text.trim(), "" | "~" | "null" | "Null" | "NULL"),
        _ => false,
    }
}

/// Bytes of a guarded value one fuel pays for (a YAML parse of it, at most).
const BYTES_PER_FUEL: usize = 16;

/// The filter: `value` written to stay one scalar at `spot`, next lines indented to
/// `column` (see the module's documentation).
pub(crate) fn filter(
    state: &State,
    value: Value,
    spot: String,
    column: usize,
) -> Result<Value, Error> {
    if value.is_undefined() || value.is_none() {
        return Ok(value);
    }
    let text = match value.as_str() {
        Some(s) => s.to_string(),
        None if matches!(spot.as_str(), "double" | "single") => value.to_string(),
        // Numbers, bools, lists and maps print as they always did.
        None => return Ok(value),
    };
    state.consume_fuel((text.len() / BYTES_PER_FUEL) as u64 + 1)?;
    let multi_line = text.chars().any(is_break);
    let written = match spot.as_str() {
        "double" => double_escaped(&text),
        "single" => {
            let doubled = text.replace('\'', "''");
            // A single line break folds to a space: an empty line keeps it.
            let mut out = String::with_capacity(doubled.len());
            let pad = " ".repeat(column.max(1));
            for (n, part) in doubled.split(is_break).enumerate() {
                if n > 0 {
                    out.push_str("\n\n");
                    out.push_str(&pad);
                }
                out.push_str(part);
            }
            out
        }
        "flow" => {
            let risky = multi_line
                || text.contains(": ")
                || text.contains(['[', ']', '{', '}', ',', '#'])
                || !reads_back(&text);
            if risky && (multi_line || !value.is_safe()) {
                double_quoted(&text)
            } else {
                text
            }
        }
        // Where the line is the value's own (a block scalar's line), its next lines are
        // indented as deep; after other text, a multi-line value is quoted.
        "lead" if multi_line => {
            if column == 0 {
                text
            } else {
                indented(&text, column)
            }
        }
        _ if multi_line => double_quoted(&text),
        _ if value.is_safe() || reads_back(&text) => text,
        _ => double_quoted(&text),
    };
    Ok(Value::from_safe_string(written))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spots(text: &str) -> Vec<(String, usize)> {
        let guarded = guard(text);
        let mut found = Vec::new();
        let marker = format!("| {FILTER}(\"");
        let mut rest = guarded.as_str();
        while let Some(p) = rest.find(&marker) {
            rest = &rest[p + marker.len()..];
            let (name, after) = rest.split_once("\", ").expect("spot");
            let (col, _) = after.split_once(')').expect("column");
            found.push((name.to_string(), col.parse().expect("number")));
        }
        found
    }

    #[test]
    fn each_interpolation_is_told_where_it_sits() {
        let text = "a: {{ x }}\nb: \"pre {{ x }}\"\nc: 'it''s {{ x }}'\nd: {e: {{ x }}}\n{{ x }}\n  - {{ x }}\nf: it's {{ x }} # {{ x }}\n";
        assert_eq!(
            spots(text),
            [
                ("block".to_string(), 3),
                ("double".to_string(), 8),
                ("single".to_string(), 10),
                ("flow".to_string(), 7),
                ("lead".to_string(), 0),
                ("block".to_string(), 4),
                ("block".to_string(), 8),
            ]
        );
        // Raw sections, statements and comments are left alone.
        let raw = "{% raw %}{{ x }}{% endraw %} {% if y %}{{ z }}{% endif %} {# {{ w }} #}";
        let guarded = guard(raw);
        assert!(
            guarded.starts_with("{% raw %}{{ x }}{% endraw %}"),
            "{guarded}"
        );
        assert_eq!(guarded.matches(FILTER).count(), 1, "{guarded}");
        assert!(
            guard("{{- x -}}").starts_with("{{- (x) |"),
            "{}",
            guard("{{- x -}}")
        );
    }

    #[test]
    fn values_that_would_change_the_yaml_are_written_as_one_scalar() {
        assert!(reads_back("nginx:1.25") && reads_back("a, b") && reads_back("3"));
        // The fast path agrees with the parse where it answers.
        for plain in [
            "web-1",
            "registry.example/app:v1",
            "user@host",
            "null",
            "1e3",
            "True",
        ] {
            let parsed = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(plain).expect("yaml");
            assert!(!parsed.is_mapping() && !parsed.is_sequence(), "{plain}");
            assert!(reads_back(plain), "{plain}");
        }
        assert!(!reads_back("a:") && !reads_back("- a"));
        assert!(!reads_back("{privileged: true}") && !reads_back("x: y") && !reads_back("*a"));
        assert!(!reads_back("a #b") && !reads_back("!!binary x") && !reads_back(" x"));
        assert_eq!(
            double_quoted("a\"b\\\n\u{2028}"),
            "\"a\\\"b\\\\\\n\\u2028\""
        );
        assert_eq!(indented("a\r\nb\rc", 4), "a\n    b\n    c");
    }
}
