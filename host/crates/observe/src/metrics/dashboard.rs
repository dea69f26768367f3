//! The metric names and label names the PromQL queries of a Grafana dashboard read, so a
//! test can hold the dashboard in `deploy/grafana` to what the host exports.

use std::collections::BTreeSet;

use serde_json::Value;

/// PromQL words that are not metric names.
const KEYWORDS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
    "inf",
    "nan",
];

/// Every metric name in `dashboard`'s panel queries (`expr`) and query variables
/// (`label_values(selector, label)`).
///
/// # Errors
/// A message when `dashboard` is not JSON.
pub(super) fn metric_names(dashboard: &str) -> Result<BTreeSet<String>, String> {
    let json: Value = serde_json::from_str(dashboard).map_err(|e| e.to_string())?;
    let mut queries = Vec::new();
    collect(&json, &mut queries);
    Ok(queries.iter().flat_map(|q| names(q)).collect())
}

/// Every (metric, label) pair `dashboard`'s queries read: each label named in a query's
/// matchers, `by`/`without` clauses or `label_values(selector, label)`, with each metric
/// the query names.
///
/// # Errors
/// A message when `dashboard` is not JSON.
pub(super) fn label_uses(dashboard: &str) -> Result<BTreeSet<(String, String)>, String> {
    let json: Value = serde_json::from_str(dashboard).map_err(|e| e.to_string())?;
    let mut queries = Vec::new();
    collect(&json, &mut queries);
    Ok(queries
        .iter()
        .flat_map(|q| {
            let labels = labels(q);
            names(q)
                .into_iter()
                .flat_map(move |n| labels.clone().into_iter().map(move |l| (n.clone(), l)))
        })
        .collect())
}

/// The PromQL of every panel target and query variable under `v` (a query variable's
/// `label_values(selector, label)` as `selector` followed by `by (label)`).
fn collect(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            if let Some(Value::String(expr)) = map.get("expr") {
                out.push(expr.clone());
            }
            if map.get("type").and_then(Value::as_str) == Some("query") {
                let query = map.get("query").and_then(|q| q.get("query").or(Some(q)));
                if let Some((selector, label)) =
                    query.and_then(Value::as_str).and_then(label_values)
                {
                    out.push(format!("{selector} by ({label})"));
                }
            }
            map.values().for_each(|v| collect(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, out)),
        _ => {}
    }
}

/// The selector and label of `label_values(selector, label)`; `None` for
/// `label_values(label)`.
fn label_values(query: &str) -> Option<(&str, &str)> {
    let args = query
        .trim()
        .strip_prefix("label_values(")?
        .strip_suffix(')')?;
    let (selector, label) = args.rsplit_once(',')?;
    Some((selector, label.trim()))
}

/// The label names in one PromQL expression: those its matchers test and those its `by`
/// and `without` clauses list.
fn labels(expr: &str) -> BTreeSet<String> {
    let text = without(&without(expr, '"', '"'), '\'', '\'');
    let mut found = BTreeSet::new();
    let mut rest = text.as_str();
    while let Some(open) = rest.find('{') {
        let inner = &rest[open + 1..];
        let close = inner.find('}').unwrap_or(inner.len());
        for matcher in inner[..close].split(',') {
            let name = matcher.split(['=', '!']).next().unwrap_or_default().trim();
            if !name.is_empty() {
                found.insert(name.to_string());
            }
        }
        rest = &inner[close..];
    }
    for word in ["by", "without"] {
        let mut rest = text.as_str();
        while let Some(at) = find_word(rest, word) {
            let after = rest[at + word.len()..].trim_start();
            if let Some(list) = after.strip_prefix('(') {
                let close = list.find(')').unwrap_or(list.len());
                found.extend(
                    list[..close]
                        .split(',')
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(str::to_string),
                );
            }
            rest = &rest[at + word.len()..];
        }
    }
    found
}

/// `text` without what lies between `open` and `close` (strings, matchers, ranges).
fn without(text: &str, open: char, close: char) -> String {
    let mut out = String::new();
    let mut depth = 0usize;
    for c in text.chars() {
        if depth > 0 && c == close {
            depth -= 1;
        } else if c == open && (open != close || depth == 0) {
            depth += 1;
        } else if depth == 0 {
            out.push(c);
        }
    }
    out
}

/// The metric names in one PromQL expression: identifiers that are not function calls,
/// keywords, label names in matchers or grouping clauses, strings or durations.
fn names(expr: &str) -> Vec<String> {
    let mut text = without(&without(expr, '"', '"'), '\'', '\'');
    text = without(&without(&text, '{', '}'), '[', ']');
    // Grouping clauses name labels: drop the word and its parenthesised list.
    for word in [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ] {
        while let Some(at) = find_word(&text, word) {
            let rest = &text[at + word.len()..];
            let gap = rest.len() - rest.trim_start().len();
            let end = if rest.trim_start().starts_with('(') {
                rest.find(')').map_or(rest.len(), |i| i + 1)
            } else {
                gap
            };
            text = format!("{}{}", &text[..at], &text[at + word.len() + end..]);
        }
    }
    let mut found = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let starts = c.is_ascii_alphabetic() || c == '_' || c == ':';
        let after_digit_or_var = i > 0 && {
            let p = chars[i - 1];
            p.is_ascii_alphanumeric() || p == '$' || p == '.'
        };
        if !starts || after_digit_or_var {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len()
            && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
        {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let next = chars[i..].iter().find(|c| !c.is_whitespace());
        if next != Some(&'(') && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
            found.push(word);
        }
    }
    found
}

/// Where `word` stands alone in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    text.match_indices(word).map(|(at, _)| at).find(|&at| {
        let before = at.checked_sub(1).map(|i| bytes[i]);
        let after = bytes.get(at + word.len()).copied();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_metric_names_are_taken_from_a_query() {
        let q = r#"histogram_quantile(0.99, sum by (controller, le) (rate(workqueue_work_duration_seconds_bucket{job=~"$job", name="x"}[$__rate_interval]))) / on (pod) group_left (node) up offset 5m"#;
        assert_eq!(names(q), ["workqueue_work_duration_seconds_bucket", "up"]);
        assert_eq!(
            names("time() - max without (instance) (process_start_time_seconds)"),
            ["process_start_time_seconds"]
        );
        assert_eq!(names("sum(rate(a_total[5m])) by (le) > 1e-3"), ["a_total"]);
    }

    #[test]
    fn query_variables_give_their_selector() {
        let dashboard = r#"{"templating": {"list": [
            {"type": "datasource", "query": "prometheus"},
            {"type": "query", "query": {"query": "label_values(controller_runtime_reconcile_total{namespace=~\"$namespace\"}, job)"}},
            {"type": "query", "query": "label_values(namespace)"}
        ]}, "panels": [{"targets": [{"expr": "sum(workqueue_depth)"}]}]}"#;
        let names: Vec<_> = metric_names(dashboard).expect("json").into_iter().collect();
        assert_eq!(
            names,
            ["controller_runtime_reconcile_total", "workqueue_depth"]
        );
        let uses: Vec<_> = label_uses(dashboard).expect("json").into_iter().collect();
        let pair = |m: &str, l: &str| (m.to_string(), l.to_string());
        assert_eq!(
            uses,
            [
                pair("controller_runtime_reconcile_total", "job"),
                pair("controller_runtime_reconcile_total", "namespace")
            ]
        );
    }

    #[test]
    fn labels_are_taken_from_matchers_and_grouping_clauses() {
        let q = r#"histogram_quantile(0.9, sum by (tenant, plugin, le) (rate(inrun_plugin_call_duration_seconds_bucket{job=~"$job", tenant!="a,b", x="}"}[5m])))"#;
        let found: Vec<_> = labels(q).into_iter().collect();
        assert_eq!(found, ["job", "le", "plugin", "tenant", "x"]);
        let found: Vec<_> = labels("max without (pod) (up) by(instance)")
            .into_iter()
            .collect();
        assert_eq!(found, ["instance", "pod"]);
    }
}
