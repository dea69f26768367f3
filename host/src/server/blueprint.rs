//! The `/blueprint` document: the loaded Blueprint as the host sees it — each CRD with its
//! reconciler kind, serve targets, plugins (location, digest, size, limits) and workers.
//! URLs are shown without their query and credentials: a presigned plugin URL or a remote
//! endpoint's query may carry a token, and this document is for reading, not fetching.

use serde_json::{Value, json};

use inrun_blueprint::ReconcileSpec;
use inrun_reconcilers::assemble::{Assembly, limits};
use inrun_reconcilers::plan::ReconcilePlan;

/// `text` as the document shows it: a URL (`scheme://…`) without its query (`?…` in its
/// place) or fragment, and without user or password; anything else as it is.
pub(super) fn shown_url(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_string();
    };
    let (rest, cut) = match rest.find(['?', '#']) {
        Some(i) => (
            &rest[..i],
            if rest[i..].starts_with('?') {
                "?…"
            } else {
                ""
            },
        ),
        None => (rest, ""),
    };
    let (authority, path) = rest.find('/').map_or((rest, ""), |i| rest.split_at(i));
    let authority = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    format!("{scheme}://{authority}{path}{cut}")
}

fn limits_json(l: &inrun_blueprint::PluginLimits) -> Value {
    let l = limits(l);
    json!({
        "deadlineMs": u64::try_from(l.deadline.as_millis()).unwrap_or(u64::MAX),
        "memoryBytes": l.memory_bytes,
        "outputBytes": l.output_bytes,
        "maxResources": l.max_resources,
    })
}

/// Plugins of one reconcile block: where each comes from (Blueprint), and what was loaded.
fn plugins(spec: &ReconcileSpec, plan: &ReconcilePlan) -> Vec<Value> {
    // (location, function, limits) in Blueprint order, one per distinct location.
    let mut declared: Vec<(String, Vec<String>, Value)> = Vec::new();
    if let Some(c) = spec.constructor.as_ref().or(spec.package.as_ref()) {
        declared.push((c.location.clone(), Vec::new(), limits_json(&c.limits)));
    }
    for h in &spec.hooks {
        match declared.iter_mut().find(|d| d.0 == h.location) {
            Some(d) => d.1.push(h.function.clone()),
            None => declared.push((
                h.location.clone(),
                vec![h.function.clone()],
                limits_json(&h.limits),
            )),
        }
    }
    let serving = plan.plugins();
    declared
        .into_iter()
        .enumerate()
        .map(|(i, (location, functions, limits))| {
            let info = serving.get(i);
            let mut p = json!({
                "location": shown_url(&location),
                "name": info.map(|p| p.name.clone()),
                "digest": info.map(|p| p.sha256.clone()),
                "size": info.map(|p| p.size),
                "limits": limits,
            });
            if !functions.is_empty() {
                p["functions"] = json!(functions);
            }
            p
        })
        .collect()
}

fn block(plan: &ReconcilePlan) -> Value {
    json!({
        "reconciler": plan.reconciler.kind().as_str(),
        "plugins": plugins(&plan.spec, plan),
        "remote": plan.spec.remote.as_ref().map(|r| shown_url(&r.endpoint)),
        "managedResources": plan.spec.managed_resources.iter()
            .map(|m| format!("{}/{}", m.api_version, m.kind)).collect::<Vec<_>>(),
        "prune": plan.spec.prune.enabled,
    })
}

/// The document served at `/blueprint`.
pub fn document(assembly: &Assembly) -> Value {
    let bp = &assembly.blueprint;
    let runtime = &bp.spec.runtime;
    let crds: Vec<Value> = assembly
        .crds()
        .iter()
        .map(|plan| {
            let spec = &plan.spec;
            let mut crd = json!({
                "name": spec.crd_name(),
                "group": spec.group,
                "version": spec.version,
                "kind": spec.kind,
                "plural": spec.plural(),
                "scope": format!("{:?}", spec.scope),
                "workers": spec.workers(runtime),
                "source": format!("{}#{}", spec.source.file.display(), spec.source.field()),
                "targets": plan.targets.iter().map(|(name, p)| {
                    let mut t = block(p);
                    t["name"] = json!(name);
                    t
                }).collect::<Vec<_>>(),
            });
            if let (Value::Object(c), Value::Object(b)) = (&mut crd, block(&plan.default)) {
                c.extend(b);
            }
            crd
        })
        .collect();
    json!({
        "name": bp.metadata.name,
        "source": bp.source.display().to_string(),
        "runtime": {
            "workers": runtime.workers,
            "healthPort": runtime.health_port,
            "leaderElection": {
                "enabled": runtime.leader_election.enabled,
                "leaseName": runtime.leader_election.lease_name,
                "namespace": runtime.leader_election.namespace,
                "leaseDurationMs": u64::try_from(runtime.leader_election.lease_duration.as_millis()).unwrap_or(u64::MAX),
            },
        },
        "crds": crds,
    })
}
