//! `inrun trace KIND/NAME`: a CR and what the host made of it, read from a live cluster
//! and drawn as a tree — the CR with its Ready condition, every child (found by the owner
//! label the host puts on each) with its state by the rules the pass itself reads
//! (`Current`, `InProgress`, `Failed`), the foreign instances that hold a deletion, and a
//! package CR's identity. Messages are never cut.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use inrun::pass::readiness::{self, State};
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use serde::Serialize;
use serde_json::Value;

/// The label that ties a child to its CR.
const OWNER_UID: &str = inrun::pass::meta::OWNER_UID;
/// Lists of children's kinds in flight at once.
const LISTS_AT_ONCE: usize = 8;
/// Foreign instances named under a CRD that holds a deletion, at most.
const BLOCKERS_SHOWN: u32 = 20;

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
    let mut children = Vec::new();
    let mut unlisted = BTreeSet::new();
    for (a, listed) in lists {
        match listed {
            Ok(list) => {
                for item in list.items {
                    let mut value = serde_json::to_value(&item)?;
                    value["apiVersion"] = Value::String(a.api_version.clone());
                    value["kind"] = Value::String(a.kind.clone());
                    children.push(value);
                }
            }
            Err(_) => {
                unlisted.insert(kind_name(a));
            }
        }
    }
    let deleting = cr.pointer("/metadata/deletionTimestamp").is_some();
    let mut nodes = Vec::new();
    for child in &children {
        let mut node = child_node(child);
        if deleting && node.kind == "CustomResourceDefinition" {
            node.notes = blockers(&client, child, &uid).await;
        }
        nodes.push(node);
    }
    nodes.sort_by(|a, b| (&a.kind, &a.namespace, &a.name).cmp(&(&b.kind, &b.namespace, &b.name)));
    Ok(Tree {
        cr: cr_node(&cr),
        children: nodes,
        unlisted: unlisted.into_iter().collect(),
    })
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

/// The CR: its Ready condition; a deletion in progress; a package's identity.
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

/// The instances of the type the CRD `crd` defines that are not the CR's own children:
/// while any exists the host keeps the CRD, and the CR's deletion waits.
async fn blockers(client: &kube::Client, crd: &Value, uid: &str) -> Vec<String> {
    let (Some(group), Some(kind), Some(plural)) = (
        text(crd, "/spec/group"),
        text(crd, "/spec/names/kind"),
        text(crd, "/spec/names/plural"),
    ) else {
        return Vec::new();
    };
    let version = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|v| v.iter().find(|v| v["storage"] == true).or(v.first()))
        .and_then(|v| v["name"].as_str())
        .unwrap_or("v1")
        .to_string();
    let ar = ApiResource {
        api_version: format!("{group}/{version}"),
        group,
        version,
        kind: kind.clone(),
        plural,
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    let params = ListParams::default()
        .labels(&format!("{OWNER_UID}!={uid}"))
        .limit(BLOCKERS_SHOWN);
    match api.list(&params).await {
        Ok(list) => list
            .items
            .iter()
            .map(|o| {
                let name = o.metadata.name.clone().unwrap_or_default();
                let at = o
                    .metadata
                    .namespace
                    .as_ref()
                    .map_or(name.clone(), |ns| format!("{ns}/{name}"));
                format!("holds the deletion: {kind} {at}")
            })
            .collect(),
        Err(e) => vec![format!("could not list its {kind} instances: {e}")],
    }
}

/// `tree` as `output` says.
pub fn print(tree: &Tree, output: Output) -> String {
    if output == Output::Json {
        return serde_json::to_string_pretty(tree).unwrap_or_default() + "\n";
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
            node.namespace.clone().unwrap_or_else(|| "-".into()),
            format!("{prefix}{}/{}", node.kind, node.name),
            node.ready.clone(),
            node.status.clone(),
        ];
        if wide {
            cells.push(node.api_version.clone());
            cells.push(node.generation.clone().unwrap_or_else(|| "-".into()));
        }
        cells.push(node.message.clone());
        rows.push(cells);
        for note in &node.notes {
            let mut cells = vec![String::new(), format!("{notes_prefix}{note}")];
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
    if tree.children.is_empty() {
        out.push_str("(no children: nothing carries its owner label)\n");
    }
    if !tree.unlisted.is_empty() {
        out.push_str(&format!(
            "(not listed, so children of these kinds may be missing: {})\n",
            tree.unlisted.join(", ")
        ));
    }
    out
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
}
