//! What a Blueprint's CRDs and reconcile blocks name, and the permissions that follow
//! from them whoever runs them (the host or a tenant's ServiceAccount).

use inrun_blueprint::{Blueprint, CrdSpec, ReadKind, ReconcileSpec};
use inrun_contract::api_version::group_of;

use super::permission::{Permission, READ_VERBS, perm, plural};

/// Every reconcile block of a CRD: its own and each serve target's.
pub(super) fn blocks(crd: &CrdSpec) -> impl Iterator<Item = &ReconcileSpec> {
    std::iter::once(&crd.reconcile).chain(
        crd.serve
            .iter()
            .flat_map(|s| s.targets.iter().map(|t| &t.reconcile)),
    )
}

/// Every reconcile block of every CRD of `blueprint`.
pub(super) fn all_blocks(blueprint: &Blueprint) -> impl Iterator<Item = &ReconcileSpec> {
    blueprint.spec.crds.iter().flat_map(blocks)
}

/// The names of the CRDs `blueprint` declares.
pub(super) fn crd_names(blueprint: &Blueprint) -> Vec<String> {
    blueprint.spec.crds.iter().map(CrdSpec::crd_name).collect()
}

/// The kinds a block's hooks and constructor are granted to read.
fn plugin_reads(block: &ReconcileSpec) -> impl Iterator<Item = &ReadKind> {
    block
        .hooks
        .iter()
        .map(|h| &h.capabilities)
        .chain(block.constructor.iter().map(|c| &c.capabilities))
        .flat_map(|caps| caps.reads())
}

/// A Secret a reconcile block reads: its name, and its namespace (`None`: the CR's own).
pub(super) type SecretName = (Option<String>, String);

/// Every Secret a block names (remote auth, external inputs, plugin pull secrets, a
/// package's credentials).
pub(super) fn secret_references(block: &ReconcileSpec) -> Vec<SecretName> {
    let pulls = block
        .hooks
        .iter()
        .filter_map(|h| h.pull_secret.as_ref())
        .chain(
            block
                .constructor
                .iter()
                .chain(&block.package)
                .filter_map(|c| c.pull_secret.as_ref()),
        )
        .map(|p| (Some(p.namespace.clone()), p.name.clone()));
    let refs = block
        .remote
        .iter()
        .filter_map(|r| r.auth.as_ref().map(|a| &a.secret_ref))
        .chain(block.external.iter().flat_map(|e| {
            e.http
                .iter()
                .filter_map(|h| h.secret_ref.as_ref())
                .chain(e.postgres.iter().filter_map(|p| p.secret_ref.as_ref()))
                .chain(e.redis.iter().filter_map(|r| r.secret_ref.as_ref()))
        }))
        .map(|r| (r.namespace.clone(), r.name.clone()));
    // A package's credentials: Secrets of the CR's own namespace.
    let credentials = block
        .package
        .iter()
        .flat_map(|p| &p.capabilities.credentials)
        .map(|c| (None, c.secret.clone()));
    pulls.chain(refs).chain(credentials).collect()
}

/// The Secrets a block names in a namespace of their own: (namespace, name).
pub(super) fn named_secrets(block: &ReconcileSpec) -> Vec<(String, String)> {
    secret_references(block)
        .into_iter()
        .filter_map(|(ns, name)| Some((ns?, name)))
        .collect()
}

/// Whether any reconcile block reads a Secret (remote auth, external inputs, plugin pull
/// secrets).
pub(super) fn reads_secrets(block: &ReconcileSpec) -> bool {
    let remote = block.remote.as_ref().is_some_and(|r| r.auth.is_some())
        || block
            .package
            .as_ref()
            .is_some_and(|p| !p.capabilities.credentials.is_empty());
    let pull = block.hooks.iter().any(|h| h.pull_secret.is_some())
        || block
            .constructor
            .iter()
            .chain(&block.package)
            .any(|c| c.pull_secret.is_some());
    let external = block.external.iter().any(|e| {
        e.http.as_ref().is_some_and(|h| h.secret_ref.is_some())
            || e.postgres.as_ref().is_some_and(|p| p.secret_ref.is_some())
            || e.redis.as_ref().is_some_and(|r| r.secret_ref.is_some())
    });
    remote || external || pull
}

/// The API group and resource (plural) of `kind`: a kind the Blueprint itself declares
/// keeps its declared plural.
pub(super) fn resource_of<'a>(
    blueprint: &Blueprint,
    api_version: &'a str,
    kind: &str,
) -> (&'a str, String) {
    let group = group_of(api_version);
    let resource = blueprint
        .crd(group, kind)
        .map_or_else(|| plural(kind), CrdSpec::plural);
    (group, resource)
}

/// Writing a CRD's status and its finalizers (and owner references).
pub(super) fn cr_subresource_permissions(crd: &CrdSpec) -> [Permission; 2] {
    let cr_plural = crd.plural();
    [
        perm(
            &crd.group,
            &format!("{cr_plural}/status"),
            &["get", "patch", "update"],
            format!("{} CRs: status", crd.kind),
        ),
        perm(
            &crd.group,
            &format!("{cr_plural}/finalizers"),
            &["update"],
            format!("{} CRs: finalizers and owner references", crd.kind),
        ),
    ]
}

/// What every block needs read cluster-wide besides its children: the kinds granted to
/// its plugins, and the instances of its managed types.
pub(super) fn block_read_permissions(
    blueprint: &Blueprint,
    crd: &CrdSpec,
    block: &ReconcileSpec,
) -> Vec<Permission> {
    let mut perms = plugin_read_permissions(blueprint, crd, block);
    perms.extend(managed_type_permissions(crd, block));
    perms
}

/// Cluster-wide reads of every kind `block` grants its plugins.
fn plugin_read_permissions(
    blueprint: &Blueprint,
    crd: &CrdSpec,
    block: &ReconcileSpec,
) -> Vec<Permission> {
    plugin_reads(block)
        .map(|read| {
            let (group, resource) = resource_of(blueprint, &read.api_version, &read.kind);
            perm(
                group,
                &resource,
                READ_VERBS,
                format!("{} reads granted to plugins of {} CRs", read.kind, crd.kind),
            )
        })
        .collect()
}

/// Listing the instances of a block's `managedTypes` (the deletion safeguard looks for
/// foreign ones): every resource of the named group, or of every group for a pattern.
fn managed_type_permissions(crd: &CrdSpec, block: &ReconcileSpec) -> Vec<Permission> {
    block
        .managed_types
        .iter()
        .map(|t| {
            let group = if t.is_pattern() {
                "*"
            } else {
                t.group.as_str()
            };
            perm(
                group,
                "*",
                &["list"],
                format!(
                    "foreign instances of managed types {}/{} of {} CRs",
                    t.group, t.kind, crd.kind
                ),
            )
        })
        .collect()
}

/// Events on CRs, cluster-wide unless a tenant's writes are confined.
pub(super) fn event_permission() -> Permission {
    perm(
        "events.k8s.io",
        "events",
        &["create", "patch"],
        "events on CRs".into(),
    )
}

/// Reading (and with `install`, installing) the CRDs named `names`; none without names.
pub(super) fn crd_permissions(names: Vec<String>, install: bool) -> Vec<Permission> {
    if names.is_empty() {
        return Vec::new();
    }
    let verbs: &[&str] = if install { &["get", "patch"] } else { &["get"] };
    let mut read = perm(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        verbs,
        "the Blueprint's CRDs".into(),
    );
    read.names = names;
    let mut out = vec![read];
    if install {
        out.push(perm(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["create"],
            "installing the Blueprint's CRDs".into(),
        ));
    }
    out
}
