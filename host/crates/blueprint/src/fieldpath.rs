//! Paths into an object, written as `kubectl -o jsonpath` writes them, so a key with dots
//! in it (an annotation, a label) can be named:
//!
//! | path | steps |
//! |---|---|
//! | `.metadata.managedFields` | `metadata`, `managedFields` |
//! | `.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']` | `metadata`, `annotations`, the key |
//! | `.metadata.annotations."kubectl.kubernetes.io/last-applied-configuration"` | the same |
//! | `.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration` | the same |
//! | `.spec.containers[0].env` | `spec`, `containers`, element 0, `env` |
//! | `.spec.containers[*].env` | `env` of every container |
//!
//! Parsed once when the Blueprint loads; a path that does not parse is refused there.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// One step of a [`FieldPath`]. Steps order as their paths are removed together: an
/// element before its array's earlier elements (see [`FieldPath::remove_all`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Step {
    /// A key of an object.
    Key(String),
    /// An element of an array.
    Index(usize),
    /// Every element of an array, or every value of an object (`[*]`).
    Each,
}

/// A parsed path; it keeps the text it was written as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldPath {
    text: String,
    steps: Vec<Step>,
}

/// A path that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid field path {input:?}: {why} at character {at} (write .a.b, .a['b.c'], .a.\"b.c\" or .a[0])"
)]
pub struct FieldPathError {
    /// The text given.
    pub input: String,
    /// Where parsing stopped, counted in characters from 0.
    pub at: usize,
    /// What was wrong there.
    pub why: &'static str,
}

/// Longest path accepted, in bytes: a path names a field, it is not a document.
const MAX_LEN: usize = 1024;

struct Parser<'a> {
    input: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    steps: Vec<Step>,
}

impl Parser<'_> {
    fn fail(&mut self, why: &'static str) -> FieldPathError {
        let byte = self.chars.peek().map_or(self.input.len(), |(i, _)| *i);
        FieldPathError {
            input: self.input.to_string(),
            at: self.input[..byte].chars().count(),
            why,
        }
    }

    fn eat(&mut self, c: char) -> bool {
        if self.chars.peek().is_some_and(|(_, next)| *next == c) {
            self.chars.next();
            true
        } else {
            false
        }
    }

    /// A quoted key after its opening `quote`: `\` escapes the next character.
    fn quoted(&mut self, quote: char) -> Result<String, FieldPathError> {
        let mut key = String::new();
        loop {
            match self.chars.next() {
                None => return Err(self.fail("an unclosed quote")),
                Some((_, c)) if c == quote => break,
                Some((_, '\\')) => match self.chars.next() {
                    Some((_, c)) => key.push(c),
                    None => return Err(self.fail("a backslash at the end")),
                },
                Some((_, c)) => key.push(c),
            }
        }
        if key.is_empty() {
            return Err(self.fail("an empty key"));
        }
        Ok(key)
    }

    /// A bare key after `.`: up to the next `.` or `[`; `\` escapes the next character.
    fn bare(&mut self) -> Result<String, FieldPathError> {
        let mut key = String::new();
        while let Some(&(_, c)) = self.chars.peek() {
            match c {
                '.' | '[' => break,
                ']' | '\'' | '"' => return Err(self.fail("a stray bracket or quote in a key")),
                c if c.is_whitespace() || c.is_control() => {
                    return Err(self.fail("a space or control character in a key"));
                }
                '\\' => {
                    self.chars.next();
                    match self.chars.next() {
                        Some((_, c)) => key.push(c),
                        None => return Err(self.fail("a backslash at the end")),
                    }
                }
                c => {
                    self.chars.next();
                    key.push(c);
                }
            }
        }
        if key.is_empty() {
            return Err(self.fail("an empty key"));
        }
        Ok(key)
    }

    /// What follows `[`: a quoted key, an index or `*`, then `]`.
    fn bracket(&mut self) -> Result<Step, FieldPathError> {
        let step = match self.chars.peek().map(|(_, c)| *c) {
            Some(q @ ('\'' | '"')) => {
                self.chars.next();
                Step::Key(self.quoted(q)?)
            }
            Some('*') => {
                self.chars.next();
                Step::Each
            }
            Some(c) if c.is_ascii_digit() => {
                let mut digits = String::new();
                while let Some(&(_, d)) = self.chars.peek().filter(|(_, d)| d.is_ascii_digit()) {
                    digits.push(d);
                    self.chars.next();
                }
                Step::Index(
                    digits
                        .parse()
                        .map_err(|_| self.fail("an index too large"))?,
                )
            }
            _ => return Err(self.fail("expected a quoted key, an index or * after [")),
        };
        if !self.eat(']') {
            return Err(self.fail("expected ]"));
        }
        Ok(step)
    }

    fn parse(mut self) -> Result<Vec<Step>, FieldPathError> {
        if self.input.len() > MAX_LEN {
            return Err(self.fail("a path longer than 1024 bytes"));
        }
        self.eat('$');
        if self.chars.peek().is_none() {
            return Err(self.fail("an empty path"));
        }
        while let Some(&(_, c)) = self.chars.peek() {
            let step = match c {
                '.' => {
                    self.chars.next();
                    match self.chars.peek().map(|(_, c)| *c) {
                        Some(q @ ('\'' | '"')) => {
                            self.chars.next();
                            Step::Key(self.quoted(q)?)
                        }
                        _ => Step::Key(self.bare()?),
                    }
                }
                '[' => {
                    self.chars.next();
                    self.bracket()?
                }
                _ => return Err(self.fail("expected . or [")),
            };
            self.steps.push(step);
        }
        Ok(self.steps)
    }
}

impl FieldPath {
    /// Parses `text`.
    ///
    /// # Errors
    /// [`FieldPathError`] saying where and why it does not parse.
    pub fn parse(text: &str) -> Result<FieldPath, FieldPathError> {
        let steps = Parser {
            input: text,
            chars: text.char_indices().peekable(),
            steps: Vec::new(),
        }
        .parse()?;
        Ok(FieldPath {
            text: text.to_string(),
            steps,
        })
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its steps.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Whether it names one place (no `[*]`).
    pub fn is_single(&self) -> bool {
        !self.steps.contains(&Step::Each)
    }

    /// The value at the path; `None` when a step is missing or the path has `[*]`.
    pub fn get<'v>(&self, object: &'v Value) -> Option<&'v Value> {
        self.steps.iter().try_fold(object, |v, step| match step {
            Step::Key(k) => v.get(k.as_str()),
            Step::Index(i) => v.get(*i),
            Step::Each => None,
        })
    }

    /// Removes what every one of `paths` names from `object`, each as it names it in the
    /// object given: `.a[0]` and `.a[1]` remove the first two elements, whatever their order
    /// (later elements go first, so no removal shifts another's index).
    pub fn remove_all<'p>(paths: impl IntoIterator<Item = &'p FieldPath>, object: &mut Value) {
        let mut paths: Vec<&FieldPath> = paths.into_iter().collect();
        paths.sort_by(|a, b| b.steps.cmp(&a.steps));
        for path in paths {
            path.remove(object);
        }
    }

    /// Removes every value the path names from `object`; a missing step removes nothing.
    pub fn remove(&self, object: &mut Value) {
        if let Some((last, parents)) = self.steps.split_last() {
            remove_at(object, parents, last);
        }
    }
}

fn remove_at(v: &mut Value, parents: &[Step], last: &Step) {
    match parents.split_first() {
        Some((step, rest)) => match (step, v) {
            (Step::Key(k), Value::Object(map)) => {
                if let Some(child) = map.get_mut(k) {
                    remove_at(child, rest, last);
                }
            }
            (Step::Index(i), Value::Array(items)) => {
                if let Some(child) = items.get_mut(*i) {
                    remove_at(child, rest, last);
                }
            }
            (Step::Each, Value::Array(items)) => {
                items.iter_mut().for_each(|c| remove_at(c, rest, last));
            }
            (Step::Each, Value::Object(map)) => {
                map.values_mut().for_each(|c| remove_at(c, rest, last));
            }
            _ => {}
        },
        None => match (last, v) {
            (Step::Key(k), Value::Object(map)) => {
                map.remove(k);
            }
            (Step::Index(i), Value::Array(items)) if *i < items.len() => {
                items.remove(*i);
            }
            (Step::Each, Value::Array(items)) => items.clear(),
            (Step::Each, Value::Object(map)) => map.clear(),
            _ => {}
        },
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for FieldPath {
    type Err = FieldPathError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldPath::parse(s)
    }
}

impl Serialize for FieldPath {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

impl<'de> Deserialize<'de> for FieldPath {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        FieldPath::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl schemars::JsonSchema for FieldPath {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "FieldPath".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A path into the object, e.g. .metadata.managedFields or .metadata.annotations['a.b/c']."
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn keys(path: &str) -> Vec<Step> {
        FieldPath::parse(path)
            .unwrap_or_else(|e| panic!("{e}"))
            .steps
    }

    fn key(k: &str) -> Step {
        Step::Key(k.to_string())
    }

    #[test]
    fn a_key_with_dots_can_be_quoted_bracketed_or_escaped() {
        let want = vec![
            key("metadata"),
            key("annotations"),
            key("kubectl.kubernetes.io/last-applied-configuration"),
        ];
        for path in [
            ".metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']",
            ".metadata.annotations[\"kubectl.kubernetes.io/last-applied-configuration\"]",
            ".metadata.annotations.\"kubectl.kubernetes.io/last-applied-configuration\"",
            ".metadata.annotations.'kubectl.kubernetes.io/last-applied-configuration'",
            ".metadata.annotations.kubectl\\.kubernetes\\.io/last-applied-configuration",
            "$.metadata.annotations['kubectl.kubernetes.io/last-applied-configuration']",
        ] {
            assert_eq!(keys(path), want, "{path}");
        }
    }

    #[test]
    fn indexes_and_wildcards_step_into_arrays() {
        assert_eq!(
            keys(".spec.containers[0].env"),
            [key("spec"), key("containers"), Step::Index(0), key("env")]
        );
        assert_eq!(
            keys(".spec.containers[*].env"),
            [key("spec"), key("containers"), Step::Each, key("env")]
        );
        assert!(!FieldPath::parse(".a[*]").expect("path").is_single());
    }

    #[test]
    fn malformed_paths_say_where() {
        for (bad, at) in [
            ("", 0),
            ("metadata", 0),
            (".", 1),
            (".a..b", 3),
            (".a[", 3),
            (".a['b", 5),
            (".a[b]", 3),
            (".a[0", 4),
            (".a b", 2),
            (".a]", 2),
            (".a.''", 5),
            (".a\\", 3),
        ] {
            let err = FieldPath::parse(bad).expect_err(bad);
            assert_eq!(err.at, at, "{bad:?}: {err}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        let long = format!(".{}", "a".repeat(MAX_LEN));
        assert!(FieldPath::parse(&long).is_err());
    }

    #[test]
    fn remove_strips_each_named_value_and_ignores_missing_steps() {
        let mut cr = json!({
            "metadata": {"name": "a", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"}},
            "spec": {"containers": [{"name": "x", "env": [1]}, {"name": "y", "env": [2]}]},
        });
        for path in [
            ".metadata.annotations.\"kubectl.kubernetes.io/last-applied-configuration\"",
            ".spec.containers[*].env",
            ".status.missing",
            ".metadata.name.deeper",
            ".spec.containers[9].name",
        ] {
            FieldPath::parse(path).expect("path").remove(&mut cr);
        }
        assert_eq!(
            cr,
            json!({
                "metadata": {"name": "a", "annotations": {"keep": "1"}},
                "spec": {"containers": [{"name": "x"}, {"name": "y"}]},
            })
        );
        FieldPath::parse(".spec.containers[0]")
            .expect("path")
            .remove(&mut cr);
        assert_eq!(cr["spec"]["containers"], json!([{"name": "y"}]));
    }

    #[test]
    fn removing_several_elements_of_one_array_removes_the_ones_named() {
        let paths: Vec<FieldPath> = [".a[0]", ".a[2].x", ".a[1]", ".b"]
            .iter()
            .map(|p| FieldPath::parse(p).expect("path"))
            .collect();
        let mut v = json!({"a": [0, 1, {"x": 1, "y": 2}, 3], "b": 1});
        FieldPath::remove_all(&paths, &mut v);
        assert_eq!(v, json!({"a": [{"y": 2}, 3]}));
    }

    #[test]
    fn get_reads_one_place() {
        let cr = json!({"metadata": {"labels": {"a.b/c": "x"}}, "spec": {"t": ["p", "q"]}});
        let get = |p: &str| FieldPath::parse(p).expect("path").get(&cr).cloned();
        assert_eq!(get(".metadata.labels['a.b/c']"), Some(json!("x")));
        assert_eq!(get(".spec.t[1]"), Some(json!("q")));
        assert_eq!(get(".spec.t[*]"), None);
        assert_eq!(get(".spec.missing"), None);
    }

    #[test]
    fn a_path_reads_and_writes_as_its_text() {
        let p: FieldPath = serde_json::from_value(json!(".a['b.c']")).expect("path");
        assert_eq!(serde_json::to_value(&p).expect("json"), json!(".a['b.c']"));
        let err = serde_json::from_value::<FieldPath>(json!(".a..b")).expect_err("refused");
        assert!(err.to_string().contains("an empty key"), "{err}");
    }
}
