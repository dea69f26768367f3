//! `inrun plan`: what a new Blueprint or plugin version would do to every live CR, before
//! it ships. Each CR is rendered twice — by the version running and by the new one — with
//! the pass the host runs (`inrun_pass::render`: gate, prepare, reconcile, every decision
//! after it; a package observed, never converged), its children as the cluster holds them;
//! each child the new version would change is then applied as a dry run, so the diff is
//! what the API server would store. Reads and dry runs only: a plan writes nothing.
//!
//! - `live.rs`: what it reads of the cluster (CRs, children by owner, dry runs);
//! - `compare.rs`: the verdict on one CR from the two renders and the cluster's answers;
//! - `print.rs`: the report (`-o text|json|diff`).
//!
//! - `inrun_blueprint::compat`: the breaking changes a new schema makes, and the CRs each
//!   strands.
//!
//! Exit code: 0 nothing changes, 2 something changes, 1 the new version fails on a CR or
//! its schema strands one.

mod compare;
mod live;
mod print;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use futures::StreamExt;
use inrun::assemble::{Assembly, Services};
use inrun::blueprint::{Blueprint, CrdSpec};
use inrun::render::{RenderInput, RenderOutput};
use serde_json::Value;

use super::setup::{CacheArgs, quiet_engine};
pub use compare::Verdict;
use compare::{ChildId, Inputs, child_id};
use live::{Cluster, Scope};
pub use print::Format;

/// Children by the uid of the CR whose owner label they carry.
type Children = BTreeMap<String, Vec<Value>>;

/// CRs rendered at once.
const AT_ONCE: usize = 16;

/// What `inrun plan` is given.
#[derive(clap::Args)]
pub struct PlanArgs {
    /// The Blueprint running now: a YAML file or a directory of them.
    #[arg(long, value_name = "FILE", conflicts_with = "current_resource")]
    current: Option<PathBuf>,
    /// The Blueprint running now, as the `Blueprint` resource of this name.
    #[arg(long, value_name = "NAME")]
    current_resource: Option<String>,
    /// The new Blueprint (default: the running one, with `--plugin` swapped in).
    #[arg(long, short = 'b', value_name = "FILE")]
    blueprint: Option<PathBuf>,
    /// A plugin of the new version, as `NAME=PATH`: every plugin location whose file name
    /// is NAME (with or without `.wasm`) loads PATH instead (repeatable).
    #[arg(long = "plugin", value_name = "NAME=PATH")]
    plugins: Vec<String>,
    /// Only CRs of this CRD (`plural.group`; repeatable), whether or not the change touches
    /// it (the default is every CRD it touches).
    #[arg(long = "crd", value_name = "PLURAL.GROUP")]
    crds: Vec<String>,
    /// Only CRs in this namespace.
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Only CRs matching this label selector.
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// Offline: the CRs and their children are the objects in this directory's YAML
    /// files (no cluster is read, no dry run is made).
    #[arg(long, value_name = "DIR")]
    objects: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Text)]
    output: Format,
    /// Act as this ServiceAccount (`NAMESPACE/NAME`), as the host acts for a tenant
    /// (default: the running Blueprint's `spec.serviceAccount`, if it names one): a plan
    /// reaches no farther than the run it previews. The plan's own credentials must be
    /// allowed to impersonate it.
    #[arg(long = "as-service-account", value_name = "NS/NAME")]
    as_service_account: Option<String>,
    /// The kubeconfig file (default: `$KUBECONFIG`, then `~/.kube/config`, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long)]
    context: Option<String>,
}

/// The plan of one CR.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CrPlan {
    /// Its CRD (`plural.group`).
    pub crd: String,
    /// `namespace/name`, or `name`.
    pub cr: String,
    /// What the change does to it.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The breaking schema changes it would no longer pass (`path: what`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub schema: Vec<String>,
}

/// What a change is: the Blueprints before and after.
struct Versions {
    current: Assembly,
    new: Assembly,
}

/// The exit code a plan asks for: 2 when something changes, 1 when the new version
/// fails on a CR or its schema strands one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct PlanOutcome(pub &'static str, pub u8);

/// Plans the change `args` describes and prints the report.
///
/// # Errors
/// A Blueprint cannot be read or assembled, the cluster cannot be read; or
/// [`PlanOutcome`] when something changes or fails (after the report is printed).
pub(super) fn plan(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    args: &PlanArgs,
) -> anyhow::Result<()> {
    let plans = runtime.block_on(run(cache, args))?;
    print!("{}", print::report(&plans, args.output));
    let fails = |p: &CrPlan| matches!(p.verdict, Verdict::Fails { .. }) || !p.schema.is_empty();
    if plans.iter().any(fails) {
        return Err(PlanOutcome(
            "the new version fails on some CRs, or its schema strands them",
            1,
        )
        .into());
    }
    if plans
        .iter()
        .any(|p| matches!(p.verdict, Verdict::Changes(_)))
    {
        return Err(PlanOutcome("the change writes to some CRs", 2).into());
    }
    Ok(())
}

async fn run(cache: &CacheArgs, args: &PlanArgs) -> anyhow::Result<Vec<CrPlan>> {
    let engine = quiet_engine(cache)?;
    let (cluster, current_bp, new_bp) = connect(args).await?;
    let services = match &cluster {
        Some(c) => Services::new(Arc::new(inrun::secrets::KubeSecrets::new(c.client.clone())))
            .with_cluster(Arc::new(inrun::runtime::WatchCache::new(c.client.clone()))),
        None => Services::new(Arc::new(inrun::secrets::StaticSecrets::new())),
    };
    let versions = Versions {
        current: Assembly::from_blueprint_with(current_bp, &engine, &services)
            .await
            .context("the running Blueprint")?,
        new: Assembly::from_blueprint_with(new_bp, &engine, &services)
            .await
            .context("the new Blueprint")?,
    };
    let scope = Scope {
        namespace: args.namespace.clone(),
        selector: args.selector.clone(),
    };
    let mut plans = Vec::new();
    for crd in planned_crds(&versions, &args.crds) {
        plans.extend(plan_crd(&versions, cluster.as_ref(), args, &scope, &crd).await?);
    }
    Ok(plans)
}

/// The cluster a plan reads, acting as the running Blueprint's ServiceAccount (or
/// `--as-service-account`); `None` offline. And the running and the new Blueprint.
async fn connect(args: &PlanArgs) -> anyhow::Result<(Option<Cluster>, Blueprint, Blueprint)> {
    let connection = match &args.objects {
        Some(_) => None,
        None => Some(
            inrun::kubeconfig::connect(&inrun::kubeconfig::ConnectOptions {
                kubeconfig: args.kubeconfig.clone(),
                context: args.context.clone(),
                request_timeout: None,
            })
            .await?,
        ),
    };
    // The running Blueprint is read with the plan's own credentials; everything after as
    // whom it acts as.
    let own = connection.as_ref().map(|c| Cluster::new(c.client.clone()));
    let (current_bp, new_bp) = blueprints(args, own.as_ref()).await?;
    let acting = match &args.as_service_account {
        Some(text) => Some(
            inrun::blueprint::ServiceAccountRef::parse(text)
                .with_context(|| format!("--as-service-account {text}"))?,
        ),
        None => current_bp.spec.service_account.clone(),
    };
    let cluster = match (connection, &acting) {
        (Some(c), Some(sa)) => Some(Cluster::new(
            inrun::runtime::impersonation::Impersonation::new(
                c.config,
                inrun::fence::Fence::default(),
            )
            .client(sa)
            .with_context(|| format!("a client acting as {sa}"))?,
        )),
        (Some(c), None) => Some(Cluster::new(c.client)),
        (None, _) => None,
    };
    Ok((cluster, current_bp, new_bp))
}

/// The plan of every CR of `crd` (the new Blueprint's entry) in `scope`.
async fn plan_crd(
    versions: &Versions,
    cluster: Option<&Cluster>,
    args: &PlanArgs,
    scope: &Scope,
    crd: &CrdSpec,
) -> anyhow::Result<Vec<CrPlan>> {
    // The CRD as it is served now (its version, where the new one changes it): its CRs
    // are listed at that version, and judged against the new schema.
    let running = versions
        .current
        .crds()
        .iter()
        .find(|c| c.spec.group == crd.group && c.spec.kind == crd.kind)
        .map(|c| &c.spec);
    let breaks = running
        .map(|r| inrun::blueprint::compat::breaking(r, crd))
        .unwrap_or_default();
    let listed = running.unwrap_or(crd);
    let (crs, children) = match (cluster, &args.objects) {
        (Some(c), _) => {
            let crs = c.crs(listed, scope).await?;
            let kinds = managed_kinds(crd);
            let children = c.children(&kinds, args.namespace.as_deref()).await?;
            (crs, children)
        }
        (None, Some(dir)) => offline(dir, listed, scope)?,
        (None, None) => unreachable!("a plan reads a cluster or a directory"),
    };
    let prune = &crd.reconcile.prune;
    let crd_name = crd.crd_name();
    let planned: Vec<CrPlan> = futures::stream::iter(crs)
        .map(|cr| {
            let uid = cr
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let live = children.get(&uid).cloned().unwrap_or_default();
            let crd_name = crd_name.clone();
            let breaks = &breaks;
            async move {
                let verdict = plan_cr(versions, cluster, &cr, &live, prune).await;
                CrPlan {
                    crd: crd_name,
                    cr: key_of(&cr),
                    verdict,
                    schema: inrun::blueprint::compat::stranded(&cr, breaks),
                }
            }
        })
        .buffered(AT_ONCE)
        .collect()
        .await;
    Ok(planned)
}

/// The verdict on `cr`: both renders; then a dry run of each child the new version would
/// write (one it creates, one it returns otherwise than the running version, one whose
/// fields the cluster holds otherwise), so what the server would store or refuse is known;
/// then the comparison.
async fn plan_cr(
    versions: &Versions,
    cluster: Option<&Cluster>,
    cr: &Value,
    live: &[Value],
    prune: &inrun::blueprint::PruneSpec,
) -> Verdict {
    let input = || RenderInput {
        object: cr.clone(),
        observed: Some(live.to_vec()),
        now: None,
    };
    let current = inrun::render::render(&versions.current, input(), None, false).await;
    let new = inrun::render::render(&versions.new, input(), None, false).await;
    let mut stored: BTreeMap<ChildId, Value> = BTreeMap::new();
    if let (Some(cluster), Ok(out)) = (cluster, &new) {
        let held: BTreeMap<ChildId, &Value> = live.iter().map(|o| (child_id(o), o)).collect();
        let before = current
            .as_ref()
            .map(|c| c.resources.as_slice())
            .unwrap_or_default();
        let shaped = marked(out, cr, cluster).await;
        for (returned, desired) in out.resources.iter().zip(shaped) {
            let id = child_id(&desired);
            // A child as the running version returns it, whose fields the cluster holds,
            // is applied by neither version: nothing to ask the server.
            let settled = held.get(&id).is_some_and(|live| {
                before.contains(returned) && compare::desired_diff(live, returned).is_empty()
            });
            if settled {
                continue;
            }
            match cluster.dry_run(&desired).await {
                // What a create would store is judged as a create; what an update would,
                // field by field.
                Ok(answer) if held.contains_key(&id) => {
                    stored.insert(id, answer);
                }
                Ok(_) => {}
                Err(e) => {
                    return Verdict::Fails {
                        message: format!(
                            "the API server refuses {}: {}",
                            compare::child_name(&id),
                            inrun::errors::chain(e.as_ref())
                        ),
                        already: false,
                    };
                }
            }
        }
    }
    compare::verdict(&Inputs {
        current: &current,
        new: &new,
        cr,
        live,
        stored: &stored,
        prune,
    })
}

/// The children `out` applies, shaped for `cr` as the host shapes what it applies
/// ([`inrun::runtime::shaped_object`]: namespace, owner label and reference).
async fn marked(out: &RenderOutput, cr: &Value, cluster: &Cluster) -> Vec<Value> {
    let text = |p: &str| cr.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let Ok(cr_kind) = cluster.kind(text("/apiVersion"), text("/kind")).await else {
        return out.resources.clone();
    };
    let owner = inrun::runtime::Owner {
        resource: &cr_kind.resource,
        namespaced: cr_kind.namespaced,
        uid: text("/metadata/uid"),
        name: text("/metadata/name"),
        namespace: cr.pointer("/metadata/namespace").and_then(Value::as_str),
    };
    let mut children = Vec::new();
    for child in &out.resources {
        let at = |p: &str| child.pointer(p).and_then(Value::as_str).unwrap_or_default();
        let namespaced = cluster
            .kind(at("/apiVersion"), at("/kind"))
            .await
            .is_ok_and(|k| k.namespaced);
        let (shaped, _) = inrun::runtime::shaped_object(child, namespaced, &owner, true);
        children.push(shaped);
    }
    children
}

/// The running and the new Blueprint: `--current` (a file, or the `Blueprint` resource
/// `--current-resource`), and `--blueprint` (default: the running one) with `--plugin`
/// swaps.
async fn blueprints(
    args: &PlanArgs,
    cluster: Option<&Cluster>,
) -> anyhow::Result<(Blueprint, Blueprint)> {
    let current = match (&args.current, &args.current_resource) {
        (Some(path), _) => inrun::blueprint::load(path)?,
        (None, Some(name)) => {
            let cluster =
                cluster.context("--current-resource reads a cluster; --objects has none")?;
            blueprint_resource(cluster, name).await?
        }
        (None, None) => {
            anyhow::bail!("name the running Blueprint: --current FILE or --current-resource NAME")
        }
    };
    let mut new = match &args.blueprint {
        Some(path) => inrun::blueprint::load(path)?,
        None => current.clone(),
    };
    for swap in &args.plugins {
        let (name, path) = swap
            .split_once('=')
            .with_context(|| format!("--plugin {swap}: expected NAME=PATH"))?;
        let path =
            std::path::absolute(path).with_context(|| format!("--plugin {swap}: the path"))?;
        let swapped = swap_plugin(&mut new, name, &path);
        anyhow::ensure!(
            swapped > 0,
            "--plugin {swap}: the Blueprint names no plugin {name}"
        );
    }
    if args.blueprint.is_none() && args.plugins.is_empty() {
        anyhow::bail!(
            "nothing to plan: give the new Blueprint (--blueprint) or a plugin (--plugin)"
        );
    }
    Ok((current, new))
}

/// The `Blueprint` resource `name`, as the host reads one.
async fn blueprint_resource(cluster: &Cluster, name: &str) -> anyhow::Result<Blueprint> {
    let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        cluster.client.clone(),
        &inrun::runtime::kinds::blueprint_resource(),
    );
    let object = api
        .get(name)
        .await
        .with_context(|| format!("reading Blueprint {name}"))?;
    let doc = serde_json::json!({
        "apiVersion": "inrun.dev/v1alpha1",
        "kind": "Blueprint",
        "metadata": {"name": name},
        "spec": object.data.get("spec").cloned().unwrap_or_default(),
    });
    Ok(inrun::blueprint::from_str(
        &doc.to_string(),
        &format!("Blueprint/{name}"),
    )?)
}

/// Points every plugin location of `blueprint` whose file name is `name` (with or
/// without `.wasm`) at `path`; returns how many it changed.
fn swap_plugin(blueprint: &mut Blueprint, name: &str, path: &Path) -> usize {
    let matches = |location: &str| {
        let file = location.rsplit(['/', ':']).next().unwrap_or(location);
        file == name || file.strip_suffix(".wasm") == Some(name)
    };
    let to = path.display().to_string();
    let mut swapped = 0;
    for crd in &mut blueprint.spec.crds {
        let targets = crd.serve.iter_mut().flat_map(|s| s.targets.iter_mut());
        let blocks = std::iter::once(&mut crd.reconcile).chain(targets.map(|t| &mut t.reconcile));
        for block in blocks {
            for hook in &mut block.hooks {
                if matches(&hook.location) {
                    hook.location.clone_from(&to);
                    hook.digest = None;
                    swapped += 1;
                }
            }
            for plugin in block.constructor.iter_mut().chain(block.package.iter_mut()) {
                if matches(&plugin.location) {
                    plugin.location.clone_from(&to);
                    plugin.digest = None;
                    swapped += 1;
                }
            }
        }
    }
    swapped
}

/// The CRDs a plan covers: those of the new Blueprint the change touches (a CRD it adds,
/// an entry it edits, a plugin it serves another version of), or, with `only`, those named
/// there whatever the change. A CRD the change drops is left to its CRs' release.
fn planned_crds(versions: &Versions, only: &[String]) -> Vec<CrdSpec> {
    versions
        .new
        .crds()
        .iter()
        .filter(|new| {
            if !only.is_empty() {
                return only.contains(&new.spec.crd_name());
            }
            let current = versions
                .current
                .crd_for(&new.spec.api_version(), &new.spec.kind);
            current.is_none_or(|c| fingerprint(c) != fingerprint(new))
        })
        .map(|c| c.spec.clone())
        .collect()
}

/// What reconciles a CRD's CRs: its Blueprint entry, and what each of its reconcile
/// blocks records as `status.reconciledBy` (its plugins' digests, so a plugin rewritten
/// in place counts too).
fn fingerprint(plan: &inrun::reconcilers::plan::CrdPlan) -> (Value, Vec<String>) {
    let spec = serde_json::to_value(&plan.spec).unwrap_or_default();
    let blocks = std::iter::once(&plan.default).chain(plan.targets.iter().map(|(_, p)| p));
    let by = blocks.map(inrun::pass::status::reconciled_by).collect();
    (spec, by)
}

/// The kinds `crd`'s reconcile blocks may write (its children's kinds).
fn managed_kinds(crd: &CrdSpec) -> Vec<(String, String)> {
    let targets = crd.serve.iter().flat_map(|s| &s.targets);
    let kinds: BTreeSet<(String, String)> = std::iter::once(&crd.reconcile)
        .chain(targets.map(|t| &t.reconcile))
        .flat_map(|r| &r.managed_resources)
        .filter(|m| !m.kind.contains('*'))
        .map(|m| (m.api_version.clone(), m.kind.clone()))
        .collect();
    kinds.into_iter().collect()
}

/// Offline: the CRs of `crd` among the objects of `dir`'s YAML files, and the other
/// objects by the owner uid their label names.
fn offline(dir: &Path, crd: &CrdSpec, scope: &Scope) -> anyhow::Result<(Vec<Value>, Children)> {
    let objects = read_objects(dir)?;
    let api_version = crd.api_version();
    let mut crs = Vec::new();
    let mut children = Children::new();
    for object in objects {
        let is_cr =
            object["apiVersion"] == api_version.as_str() && object["kind"] == crd.kind.as_str();
        if is_cr {
            let in_scope = scope.namespace.as_deref().is_none_or(|ns| {
                object
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    == Some(ns)
            });
            if in_scope {
                crs.push(object);
            }
        } else if let Some(uid) = object
            .pointer(&format!(
                "/metadata/labels/{}",
                inrun::runtime::OWNER_UID.replace('/', "~1")
            ))
            .and_then(Value::as_str)
        {
            children.entry(uid.to_string()).or_default().push(object);
        }
    }
    Ok((crs, children))
}

/// Every object in `dir`'s YAML files (documents, and the items of a `List`).
fn read_objects(dir: &Path) -> anyhow::Result<Vec<Value>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("reading {}", file.display()))?;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let value: Value = serde::Deserialize::deserialize(doc)
                .with_context(|| format!("{}: not YAML", file.display()))?;
            match value.get("items").and_then(Value::as_array) {
                Some(items) if value["kind"].as_str().is_some_and(|k| k.ends_with("List")) => {
                    out.extend(items.iter().cloned());
                }
                _ if value.is_object() => out.push(value),
                _ => {}
            }
        }
    }
    Ok(out)
}

/// `namespace/name`, or `name`.
fn key_of(object: &Value) -> String {
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
    {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}
