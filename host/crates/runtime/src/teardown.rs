//! Removing children: pruning what a Result no longer returns, and deleting a released CR's
//! children — every child of any reconcile block of its CRD, in delete waves — both behind
//! the safeguard for managed types and honouring delete policies.

use std::collections::{BTreeMap, HashSet};

use kube::api::DynamicObject;
use serde_json::Value;

use super::children::{self, ChildError, Listed};
use super::context::Ctx;
use super::safeguard;
use inrun_blueprint::{ManagedType, ReconcileSpec};
use inrun_pass::{ChildKey, Pruned, Teardown, failpoint, waves};

/// How many objects a waiting message names.
const NAMED: usize = 3;

/// Deletes children that `applied` no longer contains: only ones with the CR's owner label
/// that the host applied, never kinds in `prune.keep`; instances of managed types first.
/// A child whose delete policy says `orphan` (not `orphan-on-delete`, which keeps it only
/// when the CR is deleted) is left in place instead, and a CRD or
/// APIService whose types have foreign instances is kept (said in [`Pruned::blocked`]).
///
/// # Errors
/// [`ChildError`] for the first failed list or delete.
pub async fn prune(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &inrun_blueprint::ReconcileSpec,
    applied: &HashSet<ChildKey>,
) -> Result<Pruned, ChildError> {
    let entries: Vec<(String, String)> = spec
        .managed_resources
        .iter()
        .filter(|m| !spec.prune.keeps(&m.api_version, &m.kind))
        .map(|m| (m.api_version.clone(), m.kind.clone()))
        .collect();
    let kinds = children::served_kinds(ctx, entries).await?;
    let mut stale: Vec<Listed> = children::listed(ctx, cr, kinds)
        .await?
        .into_iter()
        .filter(|c| !applied.contains(&c.key) && !c.deleting())
        .collect();
    let values: Vec<Value> = stale.iter().map(Listed::value).collect();
    let types = waves::ManagedTypes::of(&values, &spec.managed_types);
    stale.sort_by_key(|c| c.delete_stage(&types));
    let mut pruned = Pruned::default();
    let mut blocked = Vec::new();
    for child in &stale {
        if child.orphans_on_prune() {
            children::orphan(ctx, cr, child).await?;
            pruned.orphaned.push(child.key.clone());
            continue;
        }
        let r = &child.kind.resource;
        if waves::defines_types(&r.api_version, &r.kind) {
            let found = safeguard::foreign(ctx, cr, &[child], &[]).await.checked()?;
            if !found.is_empty() {
                blocked.push(format!("{} ({})", child.key, safeguard::describe(&found)));
                continue;
            }
        }
        children::delete(ctx, cr, &child.kind, &child.key).await?;
        pruned.deleted.push(child.key.clone());
        failpoint::hit(failpoint::PRUNE_DELETED)?;
    }
    if !blocked.is_empty() {
        pruned.blocked = Some(format!(
            "not pruning {}: foreign instances of its types exist; delete them first",
            blocked.join("; ")
        ));
    }
    Ok(pruned)
}

/// Every child the host applied for `cr`, of every kind any reconcile block of its CRD
/// manages (so children applied under an earlier serve target are found too), in every
/// namespace and cluster-scoped; kinds in `prune.keep` are left out.
async fn every_child(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &ReconcileSpec,
) -> Result<Vec<Listed>, ChildError> {
    let kinds = child_kinds(ctx, spec).await?;
    children::listed(ctx, cr, kinds).await
}

/// Every reconcile block of the CRD: the default and each serve target's, and during a
/// rollout the version before's too (it may own kinds the new one does not).
fn blocks(ctx: &Ctx) -> Vec<&ReconcileSpec> {
    let plans = std::iter::once(ctx.plan()).chain(ctx.rollout.as_ref().map(|r| r.previous_plan()));
    plans
        .flat_map(|plan| {
            std::iter::once(&plan.default.spec).chain(plan.targets.iter().map(|(_, p)| &p.spec))
        })
        .collect()
}

/// The `managedTypes` a deletion checks and orders by: `spec`'s, and those of every other
/// block of the CRD, since children of every block are torn down (a type a serve target
/// ships has its foreign instances checked whichever target serves the CR now).
fn every_managed_type(ctx: &Ctx, spec: &ReconcileSpec) -> Vec<ManagedType> {
    let mut types = spec.managed_types.clone();
    for t in blocks(ctx).into_iter().flat_map(|b| b.managed_types.iter()) {
        if !types.contains(t) {
            types.push(t.clone());
        }
    }
    types
}

/// The served kinds [`every_child`] lists.
async fn child_kinds(
    ctx: &Ctx,
    spec: &ReconcileSpec,
) -> Result<Vec<crate::kinds::Kind>, ChildError> {
    let blocks = blocks(ctx);
    // Kept when the current block keeps the kind, or (for a kind it does not manage) a
    // block that manages it does.
    let kept = |m: &inrun_blueprint::ManagedResource| {
        spec.prune.keeps(&m.api_version, &m.kind)
            || (!spec
                .managed_resources
                .iter()
                .any(|c| c.api_version == m.api_version && c.kind == m.kind)
                && blocks.iter().any(|b| {
                    b.managed_resources
                        .iter()
                        .any(|c| c.api_version == m.api_version && c.kind == m.kind)
                        && b.prune.keeps(&m.api_version, &m.kind)
                }))
    };
    let entries: Vec<(String, String)> = blocks
        .iter()
        .flat_map(|b| b.managed_resources.iter())
        .filter(|m| !kept(m))
        .map(|m| (m.api_version.clone(), m.kind.clone()))
        .collect();
    children::served_kinds(ctx, entries).await
}

/// Tears down `cr`'s children (see [`inrun_pass::Effects::tear_down`]); once the
/// finalizer timeout passed, [`forced_tear_down`] does instead.
///
/// # Errors
/// [`ChildError`] for the first failed list, delete or orphaning.
pub async fn tear_down(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &ReconcileSpec,
) -> Result<Teardown, ChildError> {
    let all = every_child(ctx, cr, spec).await?;
    // Nothing is deleted when every child stays: nothing to guard.
    let guarded = all.iter().any(|c| !c.orphans());
    let types = every_managed_type(ctx, spec);
    let found = if guarded {
        let refs: Vec<&Listed> = all.iter().collect();
        safeguard::foreign(ctx, cr, &refs, &types).await.checked()?
    } else {
        Vec::new()
    };
    if !found.is_empty() {
        return Ok(Teardown::Blocked(safeguard::message(&found)));
    }
    let mut deleted = Vec::new();
    let mut orphaned = Vec::new();
    let stages = by_delete_stage(&all, &types);
    let last = stages.keys().next_back().copied();
    for (stage, group) in stages {
        let mut left = Vec::new();
        for child in group {
            if child.orphans() {
                children::orphan(ctx, cr, child).await?;
                orphaned.push(child.key.clone());
                failpoint::hit(failpoint::TEARDOWN_ORPHANED)?;
            } else if child.deleting() {
                left.push(&child.key);
            } else {
                if !children::delete(ctx, cr, &child.kind, &child.key).await? {
                    left.push(&child.key);
                }
                deleted.push(child.key.clone());
                failpoint::hit(failpoint::TEARDOWN_DELETED)?;
            }
        }
        // The last wave is not waited for: nothing comes after it.
        if !left.is_empty() && Some(stage) != last {
            return Ok(Teardown::Waiting(waiting_for(&left, stage)));
        }
    }
    Ok(Teardown::Done {
        deleted,
        orphaned,
        spared: None,
    })
}

/// `all` by delete stage, first to go first.
fn by_delete_stage<'a>(
    all: &'a [Listed],
    managed_types: &[ManagedType],
) -> BTreeMap<(i32, u8), Vec<&'a Listed>> {
    let values: Vec<Value> = all.iter().map(Listed::value).collect();
    let types = waves::ManagedTypes::of(&values, managed_types);
    let mut stages: BTreeMap<(i32, u8), Vec<&Listed>> = BTreeMap::new();
    for child in all {
        stages
            .entry(child.delete_stage(&types))
            .or_default()
            .push(child);
    }
    stages
}

/// What the next delete wave waits for: `left`, of the delete stage `stage`, to be gone.
fn waiting_for(left: &[&ChildKey], stage: (i32, u8)) -> String {
    let mut names: Vec<String> = left.iter().take(NAMED).map(ToString::to_string).collect();
    if left.len() > NAMED {
        names.push(format!("{} more", left.len() - NAMED));
    }
    format!(
        "waiting for {} to be gone before the next wave (delete wave {}, {})",
        names.join(", "),
        stage.0,
        [
            "instances of managed types",
            "ordinary objects",
            "CRDs, APIServices and Namespaces"
        ][usize::from(stage.1)]
    )
}

/// The finalizer timeout passed: the CR is released whatever fails. Deletes what it may,
/// all at once; never a CRD or APIService whose types have foreign instances, or whose
/// instances could not be checked (those are orphaned); what could not be listed, deleted
/// or orphaned is left in place and named in [`Teardown::Done::spared`].
pub async fn forced_tear_down(ctx: &Ctx, cr: &DynamicObject, spec: &ReconcileSpec) -> Teardown {
    let mut notes: Vec<String> = Vec::new();
    let all = listable_children(ctx, cr, spec, &mut notes).await;
    let refs: Vec<&Listed> = all.iter().collect();
    let found = if all.iter().any(|c| !c.orphans()) {
        safeguard::foreign(ctx, cr, &refs, &every_managed_type(ctx, spec)).await
    } else {
        safeguard::Found::default()
    };
    let spare = spared(&found, &mut notes);
    let mut deleted = Vec::new();
    let mut orphaned = Vec::new();
    for child in &all {
        let result = if child.orphans() || spare.contains(&child.key) {
            children::orphan(ctx, cr, child)
                .await
                .map(|()| orphaned.push(child.key.clone()))
        } else if child.deleting() {
            Ok(())
        } else {
            children::delete(ctx, cr, &child.kind, &child.key)
                .await
                .map(|_| deleted.push(child.key.clone()))
        };
        if let Err(e) = result {
            notes.push(format!(
                "{}, which could not be removed ({})",
                child.key,
                inrun_contract::errors::chain(&e)
            ));
        }
    }
    Teardown::Done {
        deleted,
        orphaned,
        spared: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// The CR's children of every kind that can be listed, kind by kind: a kind that cannot be
/// listed leaves only its own children unhandled, noted in `notes`. Those with the CR as
/// owner may still be garbage-collected once it is gone.
async fn listable_children(
    ctx: &Ctx,
    cr: &DynamicObject,
    spec: &ReconcileSpec,
    notes: &mut Vec<String>,
) -> Vec<Listed> {
    let mut all = Vec::new();
    match child_kinds(ctx, spec).await {
        Ok(kinds) => {
            for kind in kinds {
                let name = kind.resource.kind.clone();
                match children::listed(ctx, cr, vec![kind]).await {
                    Ok(found) => all.extend(found),
                    Err(e) => notes.push(format!(
                        "its {name} children, which could not be listed ({}): not deleted by the host",
                        inrun_contract::errors::chain(&e)
                    )),
                }
            }
        }
        Err(e) => notes.push(format!(
            "its children, whose kinds could not be looked up ({}): not deleted by the host",
            inrun_contract::errors::chain(&e)
        )),
    }
    all
}

/// The children a forced teardown orphans instead of deleting: those defining types with
/// foreign instances, or whose instances could not be checked; each noted in `notes`.
fn spared<'a>(found: &'a safeguard::Found, notes: &mut Vec<String>) -> HashSet<&'a ChildKey> {
    let mut spare: HashSet<&ChildKey> = HashSet::new();
    for f in &found.foreign {
        if let Some(source) = &f.source {
            spare.insert(source);
            notes.push(format!("{source}, with foreign instances of {f}"));
        }
    }
    for u in &found.unchecked {
        let why = inrun_contract::errors::chain(&u.error);
        match &u.source {
            Some(source) => {
                spare.insert(source);
                notes.push(format!(
                    "{source}, whose {} instances could not be checked ({why})",
                    u.kind
                ));
            }
            None => notes.push(format!("{} unchecked ({why})", u.kind)),
        }
    }
    spare
}
