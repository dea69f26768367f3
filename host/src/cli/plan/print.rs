//! The report of a plan: per CR its verdict and what changes, then a summary per CRD.
//! `text` for people, `json` for tools, `diff` for review (each changed field as a
//! unified-diff line). Values of a Secret's `data` and `stringData` are never shown.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::Value;

use super::CrPlan;
use super::compare::{FieldChange, Verdict};

/// How a plan is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: each CR that changes, fails or is blocked, then a summary per CRD.
    Text,
    /// Every CR's plan as JSON.
    Json,
    /// Each changed field as `-`/`+` lines under the CR and child it belongs to.
    Diff,
}

/// The report of `plans` in `format`.
pub fn report(plans: &[CrPlan], format: Format) -> String {
    match format {
        Format::Json => {
            let shown: Vec<CrPlan> = plans.iter().map(hidden).collect();
            serde_json::to_string_pretty(&shown).unwrap_or_default() + "\n"
        }
        Format::Text => text(plans),
        Format::Diff => diff(plans),
    }
}

/// `plan` with the values of Secrets' data left out.
fn hidden(plan: &CrPlan) -> CrPlan {
    let mut plan = plan.clone();
    if let Verdict::Changes(changes) = &mut plan.verdict {
        for updated in &mut changes.updated {
            if updated.child.starts_with("Secret ") {
                for field in &mut updated.fields {
                    if field.path.starts_with("data") || field.path.starts_with("stringData") {
                        field.from = field
                            .from
                            .as_ref()
                            .map(|_| Value::String("(hidden)".into()));
                        field.to = field.to.as_ref().map(|_| Value::String("(hidden)".into()));
                    }
                }
            }
        }
    }
    plan
}

fn text(plans: &[CrPlan]) -> String {
    let mut out = String::new();
    for plan in plans.iter().map(hidden) {
        for broken in &plan.schema {
            let _ = writeln!(
                out,
                "{} {}: no longer valid under the new schema: {broken}",
                plan.crd, plan.cr
            );
        }
        match &plan.verdict {
            Verdict::Unchanged => {}
            Verdict::Changes(c) => {
                let _ = writeln!(out, "{} {}: changes", plan.crd, plan.cr);
                for child in &c.created {
                    let _ = writeln!(out, "  + create {child}");
                }
                for u in &c.updated {
                    let drift = if u.drift {
                        " (drifted: the running version would restore it too)"
                    } else {
                        ""
                    };
                    let _ = writeln!(out, "  ~ update {}{drift}", u.child);
                    for f in &u.fields {
                        let _ = writeln!(out, "      {}", field_line(f));
                    }
                }
                for child in &c.deleted {
                    let _ = writeln!(out, "  - prune {child}");
                }
                for f in &c.status {
                    let _ = writeln!(out, "  ~ status {}", field_line(f));
                }
                for change in &c.would_run {
                    let _ = writeln!(
                        out,
                        "  ! would {change} the infrastructure (observe says it differs; not run)"
                    );
                }
            }
            Verdict::Fails { message, already } => {
                let already = if *already {
                    " (the running version fails too)"
                } else {
                    ""
                };
                let _ = writeln!(
                    out,
                    "{} {}: fails{already}: {}",
                    plan.crd,
                    plan.cr,
                    one_line(message)
                );
            }
            Verdict::Blocked { message } => {
                let _ = writeln!(
                    out,
                    "{} {}: blocked: {}",
                    plan.crd,
                    plan.cr,
                    one_line(message)
                );
            }
        }
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out.push_str(&summary(plans));
    out
}

/// One line per CRD: how many CRs are unchanged, change, fail, are blocked.
fn summary(plans: &[CrPlan]) -> String {
    let mut counts: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    for plan in plans {
        let slot = match plan.verdict {
            Verdict::Unchanged => 0,
            Verdict::Changes(_) => 1,
            Verdict::Fails { .. } => 2,
            Verdict::Blocked { .. } => 3,
        };
        counts.entry(plan.crd.as_str()).or_default()[slot] += 1;
    }
    let mut out = format!(
        "{:<40} {:>9} {:>7} {:>5} {:>7}\n",
        "CRD", "UNCHANGED", "CHANGES", "FAILS", "BLOCKED"
    );
    for (crd, [unchanged, changes, fails, blocked]) in &counts {
        let _ = writeln!(
            out,
            "{crd:<40} {unchanged:>9} {changes:>7} {fails:>5} {blocked:>7}"
        );
    }
    if counts.is_empty() {
        out.push_str("(no CRs)\n");
    }
    out
}

fn diff(plans: &[CrPlan]) -> String {
    let mut out = String::new();
    for plan in plans.iter().map(hidden) {
        let Verdict::Changes(c) = &plan.verdict else {
            continue;
        };
        let _ = writeln!(
            out,
            "--- {} {} (live)\n+++ {} {} (new)",
            plan.crd, plan.cr, plan.crd, plan.cr
        );
        for child in &c.created {
            let _ = writeln!(out, "@@ {child} @@\n+ (created)");
        }
        for u in &c.updated {
            let _ = writeln!(out, "@@ {} @@", u.child);
            for f in &u.fields {
                diff_lines(&mut out, f);
            }
        }
        for child in &c.deleted {
            let _ = writeln!(out, "@@ {child} @@\n- (pruned)");
        }
        if !c.status.is_empty() {
            let _ = writeln!(out, "@@ status @@");
            for f in &c.status {
                diff_lines(&mut out, f);
            }
        }
        for change in &c.would_run {
            let _ = writeln!(out, "@@ infrastructure @@\n! would {change}");
        }
    }
    out
}

fn diff_lines(out: &mut String, f: &FieldChange) {
    if let Some(from) = &f.from {
        let _ = writeln!(out, "- {}: {}", f.path, compact(from));
    }
    if let Some(to) = &f.to {
        let _ = writeln!(out, "+ {}: {}", f.path, compact(to));
    }
}

fn field_line(f: &FieldChange) -> String {
    match (&f.from, &f.to) {
        (Some(a), Some(b)) => format!("{}: {} → {}", f.path, compact(a), compact(b)),
        (None, Some(b)) => format!("{}: (absent) → {}", f.path, compact(b)),
        (Some(a), None) => format!("{}: {} → (removed)", f.path, compact(a)),
        (None, None) => f.path.clone(),
    }
}

fn compact(v: &Value) -> String {
    let text = v.to_string();
    if text.chars().count() > 120 {
        let cut: String = text.chars().take(117).collect();
        format!("{cut}...")
    } else {
        text
    }
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::compare::{Changes, Updated};
    use super::*;
    use serde_json::json;

    fn plans() -> Vec<CrPlan> {
        vec![
            CrPlan {
                crd: "webapps.demo.inrun.dev".into(),
                cr: "team/gold".into(),
                verdict: Verdict::Changes(Changes {
                    updated: vec![
                        Updated {
                            child: "ConfigMap team/gold".into(),
                            fields: vec![FieldChange {
                                path: "data.tier".into(),
                                from: Some(json!("silver")),
                                to: Some(json!("gold")),
                            }],
                            drift: false,
                        },
                        Updated {
                            child: "Secret team/gold".into(),
                            fields: vec![FieldChange {
                                path: "data.password".into(),
                                from: Some(json!("c2VjcmV0")),
                                to: Some(json!("b3RoZXI=")),
                            }],
                            drift: false,
                        },
                    ],
                    ..Changes::default()
                }),
                schema: Vec::new(),
            },
            CrPlan {
                crd: "webapps.demo.inrun.dev".into(),
                cr: "team/plain".into(),
                verdict: Verdict::Unchanged,
                schema: Vec::new(),
            },
            CrPlan {
                crd: "webapps.demo.inrun.dev".into(),
                cr: "team/broken".into(),
                verdict: Verdict::Fails {
                    message: "reconcile failed: trap".into(),
                    already: false,
                },
                schema: Vec::new(),
            },
        ]
    }

    #[test]
    fn the_text_names_each_change_and_failure_and_counts_every_cr() {
        let text = report(&plans(), Format::Text);
        assert!(text.contains("team/gold: changes"), "{text}");
        assert!(text.contains("data.tier: \"silver\" → \"gold\""), "{text}");
        assert!(
            text.contains("team/broken: fails: reconcile failed: trap"),
            "{text}"
        );
        assert!(
            !text.contains("team/plain"),
            "unchanged CRs are only counted: {text}"
        );
        assert!(
            text.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>()
                    == ["webapps.demo.inrun.dev", "1", "1", "1", "0"]),
            "{text}"
        );
    }

    #[test]
    fn a_secrets_data_is_never_shown_in_any_format() {
        for format in [Format::Text, Format::Json, Format::Diff] {
            let out = report(&plans(), format);
            assert!(
                !out.contains("c2VjcmV0") && !out.contains("b3RoZXI="),
                "{format:?}: {out}"
            );
            assert!(
                out.contains("data.password"),
                "{format:?}: the field is still named: {out}"
            );
        }
    }
}
