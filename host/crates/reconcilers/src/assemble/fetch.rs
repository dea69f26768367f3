//! Fetching a Blueprint's plugins: each distinct location once, several at a time, each
//! failure told against every field that names it.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;

use super::BuildContext;
use crate::plugins::PluginSlot;
use crate::sources::{Location, PullSecret};
use inrun_blueprint::{Blueprint, Problem};

/// One distinct plugin a Blueprint names: where it is, its pull secret, and each field
/// naming it with the problem a failed load becomes there.
type Wanted = (Location, Option<PullSecret>, Vec<(String, Problem)>);

/// Every plugin the Blueprint names, fetched and compiled into the context's slots, by the
/// field that names it; a location that does not parse, or is not allowed (a local path
/// where the policy forbids them, a host outside its egress rules), or does not load is
/// told in `problems`.
pub(super) async fn plugin_slots(
    blueprint: &Blueprint,
    cx: BuildContext<'_>,
    problems: &mut Vec<Problem>,
) -> HashMap<String, Arc<PluginSlot>> {
    let wanted = wanted(blueprint, cx, problems);
    let parallel = std::thread::available_parallelism().map_or(1, usize::from);
    // Collected first: a stream over a borrowing closure would not be `Send` for
    // every lifetime, which the fleet's spawned tasks need.
    let loads: Vec<_> = wanted
        .iter()
        .map(|(location, pull, _)| {
            cx.plugins
                .slot(location.clone(), pull.clone(), cx.policy.egress.as_ref())
        })
        .collect();
    let loaded: Vec<_> = futures::stream::iter(loads)
        .buffered(parallel)
        .collect()
        .await;
    let mut slots = HashMap::new();
    for ((_, _, fields), result) in wanted.into_iter().zip(loaded) {
        for (field, mut problem) in fields {
            match &result {
                Ok(slot) => {
                    slots.insert(field, slot.clone());
                }
                Err(e) => {
                    problem.message = inrun_contract::errors::chain(e);
                    problems.push(problem);
                }
            }
        }
    }
    slots
}

/// Each distinct plugin once (a large guest compiles for seconds): the fields that name
/// it, and where it is.
fn wanted(blueprint: &Blueprint, cx: BuildContext<'_>, problems: &mut Vec<Problem>) -> Vec<Wanted> {
    let mut wanted: Vec<Wanted> = Vec::new();
    for r in blueprint.plugins() {
        let problem = |message: String| {
            Problem::new(
                &r.crd.source.file,
                Some(&r.crd.kind),
                format!("{}.location", r.field),
                message,
            )
        };
        let location = match Location::parse(r.location, r.digest, r.crd.source.base_dir()) {
            Ok(l) => l,
            Err(e) => {
                problems.push(problem(inrun_contract::errors::chain(&e)));
                continue;
            }
        };
        if matches!(location, Location::File(_)) && !cx.policy.local_plugins {
            problems.push(problem(format!(
                "plugin location {:?} is a local path; this Blueprint may only name https:// or oci:// locations",
                r.location
            )));
            continue;
        }
        let pull = r.pull_secret.as_ref().map(|p| PullSecret {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
        });
        // The problem a failed load becomes, told against this field.
        let field = (r.field.clone(), problem(String::new()));
        match wanted
            .iter_mut()
            .find(|(l, p, _)| l.to_string() == location.to_string() && *p == pull)
        {
            Some((_, _, fields)) => fields.push(field),
            None => wanted.push((location, pull, vec![field])),
        }
    }
    wanted
}
