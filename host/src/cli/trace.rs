//! `inrun trace KIND/NAME`: a CR and what the host made of it, read from a live cluster
//! and drawn as a tree — the CR with its Ready condition, every child (found by the owner
//! label the host puts on each) with its state by the rules the pass itself reads
//! (`Current`, `InProgress`, `Failed`), the foreign instances that hold a deletion, and a
//! package CR's identity. Messages are never cut.
//!
//! What it prints comes from objects others write (a CR's author, a plugin, whoever may
//! label an object), so it is judged, not trusted: control characters are printed escaped
//! (an ANSI sequence in a message never reaches the terminal), and the owner label alone,
//! which anyone who may write an object can set, does not make a child — the object must
//! also name the CR in an ownerReference, or be of a kind (and in a namespace) the CR's
//! Blueprint manages.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use inrun::blueprint::{Blueprint, ManagedResource};
use inrun::pass::readiness::{self, State};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use serde::Serialize;
use serde_json::Value;

/// The label that ties a child to its CR.
const OWNER_UID: &str = inrun::pass::meta::OWNER_UID;
/// Lists of children's kinds in flight at once.
const LISTS_AT_ONCE: usize = 8;

/// What `inrun trace` is given.
#[derive(clap::Args)]
pub struct TraceArgs {
    /// The CR, as `KIND/NAME`: KIND is its kind or plural, optionally with its group
    /// (`webapp/shop`, `webapps.demo.inrun.dev/shop`).
    target: String,
    /// The CR's namespace (default: the context's).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// `text` (the tree), `wide` (with API versions and generations) or `json`.
    #[arg(long, short = 'o', default_value = "text")]
    output: Output,
    /// The Blueprint that serves the CR (file or directory): which kinds, in which
    /// namespaces, its CRD manages. Default: the cluster's `Blueprint` resource serving
    /// the CRD, if any; without either, only children naming the CR in an ownerReference
    /// are shown.
    #[arg(long, short = 'b')]
    blueprint: Option<PathBuf>,
    /// The kubeconfig file (default: `$KUBECONFIG`, then `~/.kube/config`, then in-cluster).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long)]
    context: Option<String>,
    /// How long one request may take.
    #[arg(long, default_value = "30s", value_parser = super::parse::parse_duration)]
    request_timeout: Duration,
}

/// How the tree is printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// The tree with READY, STATUS and MESSAGE.
    Text,
    /// The same with API versions and generations.
    Wide,
    /// One JSON document.
    Json,
}

/// One object of the tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    pub api_version: String,
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// `True`, `False` or `Unknown`.
    pub ready: String,
    /// The CR's Ready reason; a child's state.
    pub status: String,
    pub message: String,
    /// `observedGeneration/generation`, when the object has a generation.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<String>,
    /// What else to say under it: a package's identity, the foreign instances holding a
    /// deletion.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A CR and its children.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tree {
    pub cr: Node,
    pub children: Vec<Node>,
    /// Kinds whose objects could not be listed (forbidden, not served): children of those
    /// kinds, if any, are missing from the tree.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unlisted: Vec<String>,
    /// Objects carrying the CR's owner label that are not shown: no ownerReference names
    /// the CR, and no Blueprint known here manages their kind where they are.
    #[serde(skip_serializing_if = "is_zero")]
    pub left_out: usize,
    /// Where the CRD's managed kinds were read (a file, `Blueprint/<name>`); `None` when
    /// they were not known, so only ownerReferences made children.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub managed_from: Option<String>,
}

/// For `skip_serializing_if`, which passes a reference.
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The kinds the CR's CRD manages, and where that was read.
struct Managed {
    from: String,
    kinds: Vec<ManagedResource>,
}

/// Reads the CR and its children from the cluster and prints the tree.
///
/// # Errors
/// The cluster cannot be reached, the kind is unknown or ambiguous, or the CR is missing.
pub(super) fn trace(runtime: &tokio::runtime::Runtime, args: &TraceArgs) -> anyhow::Result<()> {
    let tree = runtime.block_on(read(args))?;
    print!("{}", print(&tree, args.output));
    Ok(())
}

async fn read(args: &TraceArgs) -> anyhow::Result<Tree> {
    let connection = inrun::kubeconfig::connect(&inrun::kubeconfig::ConnectOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        request_timeout: Some(args.request_timeout),
    })
    .await?;
    let client = connection.client;
    let (kind, name) = args
        .target
        .split_once('/')
        .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        .with_context(|| format!("`{}`: expected KIND/NAME", args.target))?;
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .context("discovering the API server's kinds")?;
    let listable: Vec<(ApiResource, ApiCapabilities)> = discovery
        .groups()
        .flat_map(kube::discovery::ApiGroup::recommended_resources)
        .filter(|(_, caps)| caps.supports_operation(verbs::LIST))
        .collect();
    let (ar, caps) = resolve(&listable, kind)?;
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => Api::namespaced_with(client.clone(), &namespace, &ar),
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let cr = api.get(name).await.with_context(|| {
        format!(
            "reading {}/{name}{}",
            ar.kind,
            match caps.scope {
                Scope::Namespaced => format!(" in namespace {namespace}"),
                Scope::Cluster => String::new(),
            }
        )
    })?;
    let cr = serde_json::to_value(&cr)?;
    let uid = cr
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let managed = managed_kinds(args, &client, &listable, &ar).await?;
    let (labelled, unlisted) = labelled(&client, &listable, &uid).await?;
    let (children, left_out) =
        children_of(&cr, labelled, managed.as_ref().map(|m| m.kinds.as_slice()));
    let deleting = cr.pointer("/metadata/deletionTimestamp").is_some();
    let mut nodes = Vec::new();
    for child in &children {
        let mut node = child_node(child);
        if deleting {
            node.notes = blockers(&client, child, &uid).await;
        }
        nodes.push(node);
    }
    nodes.sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
    Ok(Tree {
        cr: cr_node(&cr),
        children: nodes,
        unlisted: unlisted.into_iter().collect(),
        left_out,
        managed_from: managed.map(|m| m.from),
    })
}

/// Every object carrying the owner label `inrun.dev/owner-uid=<uid>`, of every listable
/// kind (each with its `apiVersion` and `kind` set), and the kinds that could not be
/// listed.
async fn labelled(
    client: &kube::Client,
    listable: &[(ApiResource, ApiCapabilities)],
    uid: &str,
) -> anyhow::Result<(Vec<Value>, BTreeSet<String>)> {
    let selector = format!("{OWNER_UID}={uid}");
    let lists = futures::stream::iter(listable.iter().filter(|(a, _)| !is_event(a)))
        .map(|(a, _)| {
            let api: Api<DynamicObject> = Api::all_with(client.clone(), a);
            let params = ListParams::default().labels(&selector);
            async move { (a, api.list(&params).await) }
        })
        .buffer_unordered(LISTS_AT_ONCE)
        .collect::<Vec<_>>()
        .await;
    let mut objects = Vec::new();
    let mut unlisted = BTreeSet::new();
    for (a, listed) in lists {
        match listed {
            Ok(list) => {
                for item in list.items {
                    let mut value = serde_json::to_value(&item)?;
                    value["apiVersion"] = Value::String(a.api_version.clone());
                    value["kind"] = Value::String(a.kind.clone());
                    objects.push(value);
                }
            }
            Err(_) => {
                unlisted.insert(kind_name(a));
            }
        }
    }
    Ok((objects, unlisted))
}

/// The CR's children among the objects carrying its owner label, and how many were left
/// out. The label alone proves nothing (whoever may write an object may set it), so a
/// child must also name the CR in an ownerReference (in the CR's namespace, where the
/// API server lets one point; anywhere for a cluster-scoped CR), or be of a kind, in a
/// namespace, that `managed` (the CR's CRD's `managedResources`) allows.
fn children_of(
    cr: &Value,
    labelled: Vec<Value>,
    managed: Option<&[ManagedResource]>,
) -> (Vec<Value>, usize) {
    let uid = cr.pointer("/metadata/uid").and_then(Value::as_str);
    let cr_namespace = text(cr, "/metadata/namespace");
    let owned = |o: &Value| {
        let namespace = text(o, "/metadata/namespace");
        let here = cr_namespace.is_none() || namespace == cr_namespace;
        here && o
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .is_some_and(|refs| {
                refs.iter()
                    .any(|r| r["uid"].as_str() == uid && uid.is_some())
            })
    };
    let allowed = |o: &Value| {
        let (api_version, kind) = (text(o, "/apiVersion"), text(o, "/kind"));
        let group = |v: &str| v.rsplit_once('/').map_or("", |(g, _)| g).to_string();
        let namespace = text(o, "/metadata/namespace");
        managed.unwrap_or_default().iter().any(|m| {
            Some(&m.kind) == kind.as_ref()
                && api_version.as_deref().map(group) == Some(group(&m.api_version))
                && m.allows(
                    &m.api_version,
                    &m.kind,
                    namespace.as_deref(),
                    cr_namespace.as_deref().unwrap_or_default(),
                )
        })
    };
    let total = labelled.len();
    let children: Vec<Value> = labelled
        .into_iter()
        .filter(|o| owned(o) || allowed(o))
        .collect();
    let left_out = total - children.len();
    (children, left_out)
}

/// The kinds the CRD of `cr` manages: from `--blueprint`, else from the `Blueprint`
/// resource whose status says it serves the CRD (written by the host, and only for the
/// spec it accepted: another tenant's Blueprint naming the same kind is refused, so it is
/// never read here); `None` when neither is found.
///
/// # Errors
/// `--blueprint` cannot be read, or does not declare the CR's kind.
async fn managed_kinds(
    args: &TraceArgs,
    client: &kube::Client,
    listable: &[(ApiResource, ApiCapabilities)],
    cr: &ApiResource,
) -> anyhow::Result<Option<Managed>> {
    if let Some(path) = &args.blueprint {
        let blueprint = inrun::blueprint::load(path)
            .with_context(|| format!("reading --blueprint {}", path.display()))?;
        let kinds = declared(&blueprint, &cr.group, &cr.kind)
            .with_context(|| format!("{} declares no {}", path.display(), kind_name(cr)))?;
        return Ok(Some(Managed {
            from: path.display().to_string(),
            kinds,
        }));
    }
    let Some((resource, _)) = listable
        .iter()
        .find(|(a, _)| a.group == "inrun.dev" && a.kind == "Blueprint")
    else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), resource);
    let Ok(list) = api.list(&ListParams::default()).await else {
        return Ok(None);
    };
    let crd = kind_name(cr);
    for item in list.items {
        let value = serde_json::to_value(&item)?;
        let name = item.metadata.name.clone().unwrap_or_default();
        if !serves(&value, &crd) {
            continue;
        }
        let doc = serde_json::json!({
            "apiVersion": "inrun.dev/v1alpha1",
            "kind": "Blueprint",
            "metadata": {"name": name},
            "spec": value.get("spec").cloned().unwrap_or_default(),
        });
        let from = format!("Blueprint/{name}");
        let Ok(blueprint) = inrun::blueprint::from_str(&doc.to_string(), &from) else {
            continue;
        };
        if let Some(kinds) = declared(&blueprint, &cr.group, &cr.kind) {
            return Ok(Some(Managed { from, kinds }));
        }
    }
    Ok(None)
}

/// Whether a `Blueprint` resource's status says the host serves `crd` from its current
/// spec: `Accepted` True, for this generation, `crd` among `status.crds`.
fn serves(blueprint: &Value, crd: &str) -> bool {
    let generation = blueprint.pointer("/metadata/generation");
    let status = &blueprint["status"];
    status.get("observedGeneration") == generation
        && generation.is_some()
        && status["crds"]
            .as_array()
            .is_some_and(|c| c.iter().any(|n| n == crd))
        && status["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
        })
}

/// The `managedResources` of the CRD `group`/`kind` in `blueprint`, its serve targets'
/// included; `None` when it does not declare that CRD.
fn declared(blueprint: &Blueprint, group: &str, kind: &str) -> Option<Vec<ManagedResource>> {
    let crd = blueprint
        .spec
        .crds
        .iter()
        .find(|c| c.group == group && c.kind == kind)?;
    let targets = crd.serve.iter().flat_map(|s| &s.targets);
    Some(
        std::iter::once(&crd.reconcile)
            .chain(targets.map(|t| &t.reconcile))
            .flat_map(|r| r.managed_resources.iter().cloned())
            .collect(),
    )
}

fn is_event(ar: &ApiResource) -> bool {
    ar.kind == "Event"
}

fn kind_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// The kind `given` names among `listable`: its kind or plural, case aside, or either with
/// its group after a dot. One match, or an error naming what it could be.
fn resolve(
    listable: &[(ApiResource, ApiCapabilities)],
    given: &str,
) -> anyhow::Result<(ApiResource, ApiCapabilities)> {
    let given = given.to_ascii_lowercase();
    let matches: Vec<&(ApiResource, ApiCapabilities)> = listable
        .iter()
        .filter(|(ar, _)| {
            let (kind, plural) = (ar.kind.to_ascii_lowercase(), ar.plural.as_str());
            [kind.clone(), plural.to_string()].iter().any(|short| {
                *short == given
                    || (!ar.group.is_empty() && format!("{short}.{}", ar.group) == given)
            })
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok((*one).clone()),
        [] => anyhow::bail!("the API server serves no kind `{given}`"),
        many => anyhow::bail!(
            "`{given}` names {} kinds: {}; add the group (KIND.GROUP/NAME)",
            many.len(),
            many.iter()
                .map(|(ar, _)| kind_name(ar))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn text(object: &Value, pointer: &str) -> Option<String> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// `observedGeneration/generation` of `object`, when it has a generation.
fn generation(object: &Value) -> Option<String> {
    let generation = object.pointer("/metadata/generation")?.as_i64()?;
    let observed = object
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .map_or_else(|| "-".to_string(), |o| o.to_string());
    Some(format!("{observed}/{generation}"))
}

/// One line of text: what a condition or state says, newlines folded.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn base(object: &Value) -> Node {
    Node {
        api_version: text(object, "/apiVersion").unwrap_or_default(),
        kind: text(object, "/kind").unwrap_or_default(),
        namespace: text(object, "/metadata/namespace"),
        name: text(object, "/metadata/name").unwrap_or_default(),
        ready: "Unknown".into(),
        status: "-".into(),
        message: String::new(),
        generation: generation(object),
        notes: Vec::new(),
    }
}

/// The CR: its Ready condition; what reconciled it; a deletion in progress; a package's
/// identity.
fn cr_node(cr: &Value) -> Node {
    let mut node = base(cr);
    let conditions = cr
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let condition = |kind: &str| conditions.iter().find(|c| c["type"] == kind).cloned();
    if let Some(ready) = condition("Ready") {
        node.ready = text(&ready, "/status").unwrap_or_else(|| "Unknown".into());
        node.status = text(&ready, "/reason").unwrap_or_else(|| "-".into());
        node.message = one_line(&text(&ready, "/message").unwrap_or_default());
    } else {
        node.status = "NotReconciled".into();
        node.message = "no Ready condition: the host has not reconciled it yet".into();
    }
    if let Some(by) = text(cr, "/status/reconciledBy") {
        node.notes.push(format!("reconciled by {by}"));
    }
    if let Some(since) = text(cr, "/metadata/deletionTimestamp") {
        node.notes.push(format!("deleting since {since}"));
    }
    if let Some(identity) = text(cr, "/status/identity") {
        let part = |k: &str| {
            text(cr, &format!("/status/{k}")).map_or_else(String::new, |v| format!(", {k} {v}"))
        };
        node.notes.push(format!(
            "identity {identity}{}{}",
            part("boundary"),
            part("profile")
        ));
        if let Some(reconciling) = condition("Reconciling") {
            node.notes.push(format!(
                "last converge: Reconciling={} since {} ({})",
                text(&reconciling, "/status").unwrap_or_default(),
                text(&reconciling, "/lastTransitionTime").unwrap_or_default(),
                one_line(&text(&reconciling, "/message").unwrap_or_default())
            ));
        }
        if let Some(at) = text(cr, "/status/lastHandledReconcileAt") {
            node.notes
                .push(format!("last reconcile request handled: {at}"));
        }
    }
    node
}

/// A child: its state by the rules the pass reads.
fn child_node(child: &Value) -> Node {
    let mut node = base(child);
    let state = readiness::state(child);
    node.ready = match state {
        State::Current => "True",
        State::InProgress(_) | State::Failed(_) => "False",
        State::Unknown(_) => "Unknown",
    }
    .into();
    node.status = state.as_str().into();
    node.message = one_line(state.message().unwrap_or_default());
    node
}

/// The foreign instances of the types `child` defines (a CRD or an APIService), asked as
/// the host asks before it releases a CR ([`inrun::runtime::safeguard::foreign_instances`]):
/// while any exists the CR's deletion waits.
async fn blockers(client: &kube::Client, child: &Value, uid: &str) -> Vec<String> {
    match inrun::runtime::safeguard::foreign_instances(client, uid, child).await {
        Ok(found) => found
            .iter()
            .flat_map(|f| {
                let more = f.names.iter().any(|n| n == "and more");
                f.names
                    .iter()
                    .filter(|n| *n != "and more")
                    .map(move |n| format!("holds the deletion: {} {n}", f.kind))
                    .chain(
                        more.then(|| format!("holds the deletion: {} {} in all", f.kind, f.count)),
                    )
            })
            .collect(),
        Err(e) => vec![format!(
            "could not list what holds the deletion: {}",
            inrun::errors::chain(&e)
        )],
    }
}

/// Whether `c` would steer the terminal rather than show: a C0 or C1 control or DEL
/// (an ANSI escape sequence starts with one), or a bidirectional override that reorders
/// what follows it.
fn steers(c: char) -> bool {
    /// The bidirectional marks, embeddings, overrides and isolates, as ranges.
    const BIDI: [(char, char); 4] = [
        ('\u{61c}', '\u{61c}'),
        ('\u{200e}', '\u{200f}'),
        ('\u{202a}', '\u{202e}'),
        ('\u{2066}', '\u{2069}'),
    ];
    c.is_control() || BIDI.iter().any(|&(from, to)| (from..=to).contains(&c))
}

/// `text` with every character that [`steers`] the terminal written out as `\u{..}`.
fn escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if steers(c) {
            out.push_str(&format!("\\u{{{:x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// `tree` as JSON, where every character that [`steers`] the terminal is a `\uXXXX`
/// escape: serde escapes C0 controls in strings, not DEL, C1 or bidirectional ones.
fn json(tree: &Tree) -> String {
    let text = serde_json::to_string_pretty(tree).unwrap_or_default();
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        // Outside strings JSON holds only ASCII punctuation, spaces and newlines, which
        // stay: whatever is escaped here is inside a string.
        if steers(c) && !matches!(c, '\n' | '\t' | '\r') {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out.push('\n');
    out
}

/// `tree` as `output` says; whatever it shows that came from the cluster is [`escaped`].
pub fn print(tree: &Tree, output: Output) -> String {
    if output == Output::Json {
        return json(tree);
    }
    let wide = output == Output::Wide;
    let mut rows: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["NAMESPACE", "NAME", "READY", "STATUS"];
    if wide {
        header.extend(["API VERSION", "GENERATION"]);
    }
    header.push("MESSAGE");
    rows.push(header.into_iter().map(str::to_string).collect());
    let mut row = |prefix: &str, node: &Node, notes_prefix: &str| {
        let mut cells = vec![
            escaped(node.namespace.as_deref().unwrap_or("-")),
            format!("{prefix}{}/{}", escaped(&node.kind), escaped(&node.name)),
            escaped(&node.ready),
            escaped(&node.status),
        ];
        if wide {
            cells.push(escaped(&node.api_version));
            cells.push(escaped(node.generation.as_deref().unwrap_or("-")));
        }
        cells.push(escaped(&node.message));
        rows.push(cells);
        for note in &node.notes {
            let mut cells = vec![String::new(), format!("{notes_prefix}{}", escaped(note))];
            cells.resize(rows[0].len(), String::new());
            rows.push(cells);
        }
    };
    let cr_notes = if tree.children.is_empty() {
        "   "
    } else {
        "│  "
    };
    row("", &tree.cr, cr_notes);
    for (i, child) in tree.children.iter().enumerate() {
        let last = i + 1 == tree.children.len();
        let (branch, under) = if last {
            ("└─ ", "   └─ ")
        } else {
            ("├─ ", "│  └─ ")
        };
        row(branch, child, under);
    }
    // Every column padded to its widest cell but the last, which is never cut; a note
    // spans its row and sets no width.
    let columns = rows[0].len();
    let is_note = |r: &Vec<String>| r[2..].iter().all(String::is_empty);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter(|r| !is_note(r))
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &rows {
        let note = is_note(r);
        let line: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c + 1 == columns || (note && c >= 1) {
                    cell.clone()
                } else {
                    format!("{cell:<width$}", width = widths[c])
                }
            })
            .collect();
        let line = if note {
            format!("{}  {}", line[0], line[1])
        } else {
            line.join("  ")
        };
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if tree.children.is_empty() && tree.left_out == 0 {
        out.push_str("(no children: nothing carries its owner label)\n");
    }
    if tree.left_out > 0 {
        out.push_str(&left_out(tree));
    }
    if !tree.unlisted.is_empty() {
        out.push_str(&format!(
            "(not listed, so children of these kinds may be missing: {})\n",
            escaped(&tree.unlisted.join(", "))
        ));
    }
    out
}

/// The line saying how many objects carrying the owner label were not shown, and why.
fn left_out(tree: &Tree) -> String {
    let n = tree.left_out;
    let (objects, carry) = if n == 1 {
        ("object", "carries")
    } else {
        ("objects", "carry")
    };
    match &tree.managed_from {
        Some(from) => format!(
            "({n} other {objects} {carry} its owner label with no ownerReference to it, not of a kind or namespace {} manages: not shown)\n",
            escaped(from)
        ),
        None => format!(
            "({n} other {objects} {carry} its owner label with no ownerReference to it: not shown; give --blueprint FILE to show those of the kinds its Blueprint manages)\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tree() -> Tree {
        let cr = json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a", "generation": 3,
                         "deletionTimestamp": "2026-12-05T10:00:00Z"},
            "status": {"observedGeneration": 3, "conditions": [
                {"type": "Ready", "status": "False", "reason": "DeletionBlocked",
                 "message": "deletion waits for 1 foreign instance of gadgets.x:\nother/theirs"}]},
        });
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "shop", "namespace": "team-a", "generation": 2},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2,
                       "availableReplicas": 0, "readyReplicas": 0},
        });
        let config = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "shop-settings", "namespace": "team-a"},
        });
        let mut crd = child_node(&json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "gadgets.x", "generation": 1},
            "status": {"conditions": [{"type": "Established", "status": "True"}]},
        }));
        crd.notes = vec!["holds the deletion: Gadget other/theirs".into()];
        let mut children = vec![child_node(&config), child_node(&deployment), crd];
        children.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
        Tree {
            cr: cr_node(&cr),
            children,
            unlisted: vec!["secrets".into()],
            left_out: 0,
            managed_from: None,
        }
    }

    #[test]
    fn the_tree_shows_each_childs_state_and_untruncated_messages() {
        let text = print(&tree(), Output::Text);
        let expected = "\
NAMESPACE  NAME                                   READY  STATUS           MESSAGE
team-a     WebApp/shop                            False  DeletionBlocked  deletion waits for 1 foreign instance of gadgets.x: other/theirs
           │  deleting since 2026-12-05T10:00:00Z
team-a     ├─ ConfigMap/shop-settings             True   Current
-          ├─ CustomResourceDefinition/gadgets.x  True   Current
           │  └─ holds the deletion: Gadget other/theirs
team-a     └─ Deployment/shop                     False  InProgress       0/2 replicas available
(not listed, so children of these kinds may be missing: secrets)
";
        assert_eq!(text, expected, "\n{text}");
        let wide = print(&tree(), Output::Wide);
        assert!(
            wide.lines()
                .next()
                .is_some_and(|h| h.contains("API VERSION") && h.contains("GENERATION")),
            "{wide}"
        );
        assert!(wide.contains("apps/v1") && wide.contains("2/2"), "{wide}");
    }

    #[test]
    fn json_carries_the_same_tree() {
        let out: Value = serde_json::from_str(&print(&tree(), Output::Json)).expect("json");
        assert_eq!(out["cr"]["status"], "DeletionBlocked");
        assert_eq!(out["children"][2]["status"], "InProgress");
        assert_eq!(
            out["children"][1]["notes"][0],
            "holds the deletion: Gadget other/theirs"
        );
    }

    #[test]
    fn a_package_cr_shows_its_identity_and_last_converge() {
        let node = cr_node(&json!({
            "apiVersion": "infra.inrun.dev/v1", "kind": "Database",
            "metadata": {"name": "orders", "namespace": "shop"},
            "status": {"identity": "pg-1a2b", "boundary": "cluster-a", "conditions": [
                {"type": "Ready", "status": "True", "reason": "Converged", "message": "up"},
                {"type": "Reconciling", "status": "False", "reason": "Converged",
                 "message": "observed in step", "lastTransitionTime": "2026-12-05T09:00:00Z"}]},
        }));
        assert_eq!(node.notes[0], "identity pg-1a2b, boundary cluster-a");
        assert!(
            node.notes[1].contains("Reconciling=False since 2026-12-05T09:00:00Z"),
            "{:?}",
            node.notes
        );
    }

    #[test]
    fn a_kind_is_found_by_kind_or_plural_with_or_without_its_group() {
        let ar = |group: &str, kind: &str, plural: &str| {
            (
                ApiResource {
                    group: group.into(),
                    version: "v1".into(),
                    api_version: format!("{group}/v1"),
                    kind: kind.into(),
                    plural: plural.into(),
                },
                ApiCapabilities {
                    scope: Scope::Namespaced,
                    subresources: Vec::new(),
                    operations: vec![verbs::LIST.into()],
                },
            )
        };
        let listable = [
            ar("demo.inrun.dev", "WebApp", "webapps"),
            ar("a.example", "Gadget", "gadgets"),
            ar("b.example", "Gadget", "gadgets"),
        ];
        for given in [
            "WebApp",
            "webapp",
            "webapps",
            "webapps.demo.inrun.dev",
            "webapp.demo.inrun.dev",
        ] {
            assert_eq!(resolve(&listable, given).expect(given).0.kind, "WebApp");
        }
        let two = resolve(&listable, "gadget")
            .expect_err("ambiguous")
            .to_string();
        assert!(
            two.contains("gadgets.a.example, gadgets.b.example"),
            "{two}"
        );
        assert_eq!(
            resolve(&listable, "gadgets.b.example").expect("b").0.group,
            "b.example"
        );
        assert!(resolve(&listable, "nope").is_err());
    }
    #[test]
    fn control_characters_from_the_cluster_are_printed_escaped() {
        // An ANSI colour and screen clear (C0 ESC, C1 CSI), DEL and a right-to-left
        // override, in a message and a note a CR's author or a plugin wrote.
        let message = "\u{1b}[31mred\u{1b}[0m \u{9b}2J del\u{7f} \u{202e}txt.exe";
        let mut cr = cr_node(&json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a"},
            "status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "Failed", "message": message}]},
        }));
        cr.notes.push("identity \u{1b}]0;title\u{7}".into());
        let tree = Tree {
            cr,
            children: Vec::new(),
            unlisted: Vec::new(),
            left_out: 0,
            managed_from: None,
        };
        let text = print(&tree, Output::Text);
        let expected = "\
NAMESPACE  NAME         READY  STATUS  MESSAGE
team-a     WebApp/shop  False  Failed  \\u{1b}[31mred\\u{1b}[0m \\u{9b}2J del\\u{7f} \\u{202e}txt.exe
              identity \\u{1b}]0;title\\u{7}
(no children: nothing carries its owner label)
";
        assert_eq!(text, expected, "\n{text}");
        for output in [Output::Text, Output::Wide, Output::Json] {
            let printed = print(&tree, output);
            assert!(
                !printed.chars().any(|c| steers(c) && c != '\n'),
                "{output:?}: {printed:?}"
            );
        }
        // The JSON still reads back as what the cluster said.
        let json: Value = serde_json::from_str(&print(&tree, Output::Json)).expect("json");
        assert_eq!(json["cr"]["message"], message);
    }

    #[test]
    fn an_owner_label_alone_does_not_make_a_child() {
        let cr = json!({
            "apiVersion": "demo.inrun.dev/v1", "kind": "WebApp",
            "metadata": {"name": "shop", "namespace": "team-a", "uid": "u-1"},
        });
        let object = |api: &str, kind: &str, ns: Option<&str>, name: &str, owner: bool| {
            let mut o = json!({
                "apiVersion": api, "kind": kind,
                "metadata": {"name": name, "labels": {OWNER_UID: "u-1"}},
            });
            if let Some(ns) = ns {
                o["metadata"]["namespace"] = json!(ns);
            }
            if owner {
                o["metadata"]["ownerReferences"] = json!([{"apiVersion": "demo.inrun.dev/v1", "kind": "WebApp", "name": "shop", "uid": "u-1"}]);
            }
            o
        };
        let labelled = vec![
            // Applied by the host in the CR's namespace: owned.
            object("v1", "ConfigMap", Some("team-a"), "owned", true),
            // Forged elsewhere: the label, and even an ownerReference, which the API
            // server never honours across namespaces.
            object("v1", "ConfigMap", Some("team-b"), "forged", false),
            object("v1", "Secret", Some("team-b"), "forged-ref", true),
            // Cluster-scoped, as the host applies a managed CRD.
            object(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                None,
                "gadgets.x",
                false,
            ),
            // In the CR's namespace without an ownerReference, of a kind not managed.
            object("v1", "Secret", Some("team-a"), "stray", false),
        ];
        let names = |(children, left_out): (Vec<Value>, usize)| {
            let names: Vec<String> = children
                .iter()
                .filter_map(|c| text(c, "/metadata/name"))
                .collect();
            (names, left_out)
        };
        // No Blueprint known: ownerReferences only.
        assert_eq!(
            names(children_of(&cr, labelled.clone(), None)),
            (vec!["owned".to_string()], 4)
        );
        let managed: Vec<ManagedResource> = serde_json::from_value(json!([
            {"apiVersion": "v1", "kind": "ConfigMap"},
            {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "clusterScoped": true},
        ]))
        .expect("managed");
        assert_eq!(
            names(children_of(&cr, labelled.clone(), Some(&managed))),
            (vec!["owned".to_string(), "gadgets.x".to_string()], 3)
        );
        // A namespace the Blueprint lets its ConfigMaps go to.
        let wider: Vec<ManagedResource> = serde_json::from_value(json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "namespaces": ["team-b"]},
        ]))
        .expect("managed");
        assert_eq!(
            names(children_of(&cr, labelled, Some(&wider))),
            (vec!["owned".to_string(), "forged".to_string()], 3)
        );
    }

    #[test]
    fn objects_left_out_are_counted_under_the_tree() {
        let mut tree = tree();
        tree.left_out = 2;
        let text = print(&tree, Output::Text);
        assert!(
            text.contains("(2 other objects carry its owner label with no ownerReference to it: not shown; give --blueprint FILE"),
            "{text}"
        );
        tree.managed_from = Some("Blueprint/team-a".into());
        let text = print(&tree, Output::Text);
        assert!(
            text.contains("not of a kind or namespace Blueprint/team-a manages: not shown)"),
            "{text}"
        );
    }

    #[test]
    fn a_blueprint_resource_counts_only_when_its_status_says_it_serves_the_crd() {
        let resource = |generation: i64, observed: i64, accepted: &str, crds: Value| {
            json!({
                "metadata": {"name": "team-a", "generation": generation},
                "status": {"observedGeneration": observed, "crds": crds,
                           "conditions": [{"type": "Accepted", "status": accepted}]},
            })
        };
        let crd = "webapps.demo.inrun.dev";
        assert!(serves(&resource(2, 2, "True", json!([crd])), crd));
        // Another tenant's claim on the same kind is refused: not Accepted.
        assert!(!serves(&resource(2, 2, "False", json!([])), crd));
        // A spec changed since the host last accepted it.
        assert!(!serves(&resource(3, 2, "True", json!([crd])), crd));
        assert!(!serves(&resource(2, 2, "True", json!(["other.x"])), crd));
        assert!(!serves(&json!({"metadata": {"name": "bare"}}), crd));
    }
}
