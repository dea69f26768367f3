//! Serving a tenant: controllers started, retired (told to stop under the tenants lock,
//! drained without it), stopped; plugin sources checked and CRs re-queued after a swap.

use crate::state::*;
use inrun_runtime::rollout::{Phase, Rollout};

/// A controller taken from its tenant ([`Fleet::retire`]), told to stop, not yet stopped.
pub(super) struct Retired {
    name: String,
    /// Its CRD is gone from the Blueprint (not merely changed).
    removed: bool,
    running: Running,
    /// Whom it acted as, to release its CRs as ([`Fleet::release`]).
    shared: Shared,
}

pub(super) async fn stop(running: Running) {
    let _ = running.stop.send(true);
    if let Err(e) = running.task.await {
        tracing::warn!(error = %e, "a controller task ended abnormally");
    }
}

/// What a controller started again for a changed CRD does with the rollout its last one
/// carried: the same new version (only the `rollout` block, a runtime setting or the
/// schema changed) carries it on where it stands — rolled back stays rolled back; another
/// new version rolls out from the same version before, never from one a rollout was
/// still judging or had rolled back; no `rollout` any more: every CR at once.
fn carry_on(carried: &Rollout, plan: &inrun_reconcilers::plan::CrdPlan) -> Option<Arc<Rollout>> {
    let spec = plan.default.spec.rollout.clone()?;
    let (_, to) = inrun_runtime::rollout::changed(carried.previous_plan(), plan);
    if to.join(",") == carried.to {
        return Some(carried.carried(spec, plan));
    }
    rollout_from(carried.previous(), plan)
}

/// `source`'s tenant, while `serving` is still the Blueprint it serves.
fn serving_still<'t>(
    tenants: &'t mut BTreeMap<TenantSource, Tenant>,
    source: &TenantSource,
    serving: &Arc<Assembly>,
) -> Option<&'t mut Tenant> {
    tenants
        .get_mut(source)
        .filter(|t| t.assembly.as_ref().is_some_and(|a| Arc::ptr_eq(a, serving)))
}

/// Shows `rollout` on its tenant's `Blueprint` resource too, when it came as one.
fn shown_on(rollout: &inrun_runtime::rollout::Rollout, source: &TenantSource) {
    if let TenantSource::Resource(name) = source {
        let _ = rollout.shown_on.set(name.clone());
    }
}

/// The rollout of `plan` from the same CRD in `previous`, when `plan`'s reconcile says
/// how to roll out (`reconcile.rollout`) and what reconciles its CRs changed: another
/// plugin digest, another block as written.
fn rollout_from(
    previous: &Arc<Assembly>,
    plan: &inrun_reconcilers::plan::CrdPlan,
) -> Option<Arc<inrun_runtime::rollout::Rollout>> {
    let spec = plan.default.spec.rollout.clone()?;
    let name = plan.spec.crd_name();
    let index = previous
        .crds()
        .iter()
        .position(|c| c.spec.crd_name() == name)?;
    let what = |p: &inrun_reconcilers::plan::CrdPlan| -> Vec<String> {
        std::iter::once(&p.default)
            .chain(p.targets.iter().map(|(_, t)| t))
            .map(inrun_pass::status::reconciled_by)
            .collect()
    };
    if what(&previous.crds()[index]) == what(plan) {
        return None;
    }
    Some(inrun_runtime::rollout::Rollout::new(
        spec,
        previous.clone(),
        index,
        plan,
    ))
}

impl Fleet {
    /// Stops every controller of `tenant`: all are told at once, then each is awaited.
    pub(super) async fn stop_all(tenant: &mut Tenant) {
        for running in tenant.running.values() {
            let _ = running.stop.send(true);
        }
        let all = std::mem::take(&mut tenant.running);
        for (_, r) in all {
            stop(r).await;
        }
    }

    /// Takes from `tenant` the controllers `assembly` does not keep (its CRD removed, or
    /// changed: spec, runtime settings or identity) and tells each to stop: quick, under
    /// the tenants lock. Awaiting them ([`Fleet::drain`]) is not: reconciles in flight
    /// finish first.
    pub(super) fn retire(
        tenant: &mut Tenant,
        assembly: &Assembly,
        acting: &Acting,
    ) -> Vec<Retired> {
        let runtime_spec = &assembly.blueprint.spec.runtime;
        let wanted: BTreeMap<String, &CrdSpec> = assembly
            .crds()
            .iter()
            .map(|c| (c.spec.crd_name(), &c.spec))
            .collect();
        let names: Vec<String> = tenant.running.keys().cloned().collect();
        let mut retired = Vec::new();
        for name in names {
            let keep = wanted.get(&name).is_some_and(|spec| {
                let r = &tenant.running[&name];
                r.spec == **spec && r.runtime == *runtime_spec && r.identity == acting.identity
            });
            if !keep && let Some(running) = tenant.running.remove(&name) {
                tracing::info!(tenant = %tenant.source, crd = %name, "stopping the controller of a removed or changed CRD");
                // A changed CRD's next controller carries its rollout on.
                if let Some(rollout) = running
                    .rollout
                    .clone()
                    .filter(|_| wanted.contains_key(&name))
                {
                    tenant.carried.insert(name.clone(), rollout);
                }
                let _ = running.stop.send(true);
                retired.push(Retired {
                    removed: !wanted.contains_key(&name),
                    name,
                    running,
                    shared: tenant.acting.shared.clone(),
                });
            }
        }
        retired
    }

    /// Waits for `retired` controllers to stop (the caller holds no lock): a removed CRD's
    /// series go, and its CRs are released; a changed one's stay for its new controller.
    pub(super) async fn drain(&self, retired: Vec<Retired>) {
        for r in retired {
            let (spec, runtime) = (r.running.spec.clone(), r.running.runtime.clone());
            stop(r.running).await;
            if r.removed {
                self.shared.metrics.controller_retired(&r.name);
                self.release(
                    &r.shared,
                    &spec,
                    &runtime,
                    "its Blueprint no longer declares this CRD",
                )
                .await;
                // No controller renews its CRs' identity locks any more.
                if let Some(locks) = &r.shared.locks {
                    locks.forget(Some(&inrun_runtime::kinds::cr_resource(&spec)));
                }
            }
        }
    }

    /// Removes the host's finalizers from the CRs of `crd`, whose controller stopped for
    /// good, unless the operator keeps them (`--on-tenant-removal keep`); logs what it did.
    pub(super) async fn release(
        &self,
        acting: &Shared,
        crd: &CrdSpec,
        runtime: &RuntimeSpec,
        why: &str,
    ) {
        let name = crd.crd_name();
        if self.options.on_removal == crate::release::OnRemoval::Keep {
            tracing::info!(crd = %name, "{why}; its CRs keep the host's finalizers (--on-tenant-removal keep)");
            return;
        }
        // Under sharding the replica leading the ring releases every CR of the CRD.
        if !acting.leads() {
            tracing::info!(crd = %name, "{why}; the replica leading the ring removes the host's finalizers from its CRs");
            return;
        }
        match crate::release::release(acting, crd, runtime, why).await {
            Ok(done) if done.released > 0 || done.unclaimed > 0 => tracing::warn!(
                crd = %name, released = done.released, deleting = done.deleting, unclaimed = done.unclaimed,
                "{why}: the host's finalizers removed from its CRs, without cleanup"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(
                crd = %name, error = %e,
                "{why}, but its CRs could not be listed to remove the host's finalizers"
            ),
        }
    }

    /// Makes `assembly`, prepared (permissions checked, CRDs installed, `kinds`
    /// discovered), the tenant's serving Blueprint: refuses it if another tenant serves one
    /// of its CRDs by now (the refusal returned), then starts the controllers of CRDs
    /// `tenant` does not run (those removed or changed were retired first:
    /// [`Fleet::retire`]).
    pub(super) fn serve(
        tenant: &mut Tenant,
        acting: &Acting,
        assembly: Arc<Assembly>,
        kinds: runtime::ChildKinds,
        others: &BTreeMap<TenantSource, Tenant>,
        resumed: &super::load::Resumed,
    ) -> Option<FleetError> {
        if let Some(refused) = Self::claimed(&assembly, others, None) {
            return Some(refused);
        }
        let locations = plugin_locations(&assembly.blueprint);
        let runtime_spec = assembly.blueprint.spec.runtime.clone();
        // The Blueprint serving until now: a CRD whose reconciler it changes rolls out
        // from it when the new one says how (`reconcile.rollout`).
        let previous = tenant.assembly.clone();
        for (index, plan) in assembly.crds().iter().enumerate() {
            let name = plan.spec.crd_name();
            if tenant.running.contains_key(&name) {
                continue;
            }
            let carried = tenant.carried.remove(&name);
            let rollout = match carried.filter(|c| c.phase() != Phase::Complete) {
                Some(carried) => carry_on(&carried, plan),
                None => previous
                    .as_ref()
                    .and_then(|p| rollout_from(p, plan))
                    .or_else(|| {
                        let (before, recorded) = resumed.get(&name)?;
                        let spec = plan.default.spec.rollout.clone()?;
                        Some(Rollout::resume(spec, before.clone(), plan, recorded))
                    }),
            };
            if let Some(r) = &rollout {
                tracing::info!(tenant = %tenant.source, crd = %name, from = %r.from, to = %r.to, "rolling out a new version step by step");
                shown_on(r, &tenant.source);
            }
            let started = Self::start_controller(
                &acting.shared,
                &assembly,
                index,
                kinds[index].clone(),
                rollout,
            );
            tracing::info!(tenant = %tenant.source, crd = %name, "starting the controller");
            tenant.running.insert(
                name.clone(),
                Running {
                    spec: plan.spec.clone(),
                    runtime: runtime_spec.clone(),
                    identity: acting.identity.clone(),
                    plugins: locations.get(&name).cloned().unwrap_or_default(),
                    ..started
                },
            );
        }
        tenant.assembly = Some(assembly);
        tenant.acting = acting.clone();
        tenant.acting.plugins.retain_used();
        None
    }

    /// Starts the controller of CRD `index` of `assembly` as `shared` acts, carrying
    /// `rollout` if one is under way: its handles, for the caller to fill in what it serves.
    fn start_controller(
        shared: &inrun_runtime::Shared,
        assembly: &Arc<Assembly>,
        index: usize,
        kinds: runtime::CrdKinds,
        rollout: Option<Arc<inrun_runtime::rollout::Rollout>>,
    ) -> Running {
        let (stop_tx, stop_rx) = watch::channel(false);
        let (requeue_tx, requeue_rx) = mpsc::unbounded_channel();
        let requeue = futures::stream::unfold(requeue_rx, |mut rx| async move {
            rx.recv().await.map(|()| ((), rx))
        });
        let future = runtime::controller(
            shared,
            assembly.clone(),
            index,
            kinds.clone(),
            stop_rx,
            requeue,
            rollout.clone(),
        );
        Running {
            spec: assembly.crds()[index].spec.clone(),
            runtime: assembly.blueprint.spec.runtime.clone(),
            identity: None,
            plugins: BTreeSet::new(),
            stop: stop_tx,
            requeue: requeue_tx,
            task: tokio::spawn(future),
            rollout,
            kinds,
        }
    }

    /// Removes the tenant of `source` and stops its controllers (outside the tenants lock:
    /// passes in flight may take their time).
    pub(super) async fn remove(&self, source: &TenantSource) {
        let removed = {
            let mut tenants = self.tenants.lock().await;
            let removed = tenants.remove(source);
            self.unpublish(source);
            if removed.is_none() {
                Self::forget_refusals(&mut tenants);
            }
            removed
        };
        if let Some(mut tenant) = removed {
            tracing::info!(tenant = %source, "tenant removed; stopping its controllers (its CRDs and CRs stay, released unless --on-tenant-removal keep)");
            let crds: Vec<(String, CrdSpec, RuntimeSpec)> = tenant
                .running
                .iter()
                .map(|(name, r)| (name.clone(), r.spec.clone(), r.runtime.clone()))
                .collect();
            Self::stop_all(&mut tenant).await;
            for (name, spec, runtime) in crds {
                self.shared.metrics.controller_retired(&name);
                self.release(
                    &tenant.acting.shared,
                    &spec,
                    &runtime,
                    "its tenant was removed",
                )
                .await;
            }
            // Its identity locks are let go with its CRs (above); those kept with them
            // (`--on-tenant-removal keep`) are no longer renewed, and go stale.
            if let Some(locks) = &tenant.acting.shared.locks {
                locks.forget(None);
            }
            // Its compiled plugins go too (the engine keeps digests only for live slots).
            tenant.assembly = None;
            tenant.acting.plugins.retain_used();
            if let Some(candidate) = &tenant.candidate {
                candidate.plugins.retain_used();
            }
            self.shared.metrics.tenant_retired(&source.to_string());
            // Only now may a Blueprint refused for one of its CRDs serve it: had it started
            // while this one's controllers drained and its CRs were released, the release
            // would strip the new controller's finalizers.
            Self::forget_refusals(&mut *self.tenants.lock().await);
        }
    }

    /// Lets refused Blueprints be tried again at the next check: a CRD they claimed may
    /// be free now.
    pub(super) fn forget_refusals(tenants: &mut BTreeMap<TenantSource, Tenant>) {
        for t in tenants.values_mut() {
            t.failed = None;
        }
    }

    /// Starts a check of each tenant's plugin sources ([`PluginSet::poll`]) unless its
    /// last one still runs: a registry that is slow for one tenant delays only that
    /// tenant's next check. A tenant gone stops its check.
    pub(super) async fn poll_plugins(
        self: &Arc<Self>,
        polling: &mut BTreeMap<TenantSource, JoinHandle<()>>,
    ) {
        let sets: Vec<(TenantSource, Arc<PluginSet>)> = self
            .tenants
            .lock()
            .await
            .values()
            .map(|t| (t.source.clone(), t.acting.plugins.clone()))
            .collect();
        polling.retain(|source, task| {
            let live = sets.iter().any(|(s, _)| s == source);
            if !live {
                task.abort();
            }
            live && !task.is_finished()
        });
        for (source, set) in sets {
            if polling.contains_key(&source) {
                continue;
            }
            let fleet = self.clone();
            let task = tokio::spawn({
                let source = source.clone();
                async move { fleet.poll_tenant(source, set).await }
            });
            polling.insert(source, task);
        }
    }

    /// Checks the plugin sources of `source`'s tenant once; re-queues every CR of a CRD
    /// whose plugin changed, or, for a CRD that says how to roll a change out
    /// (`reconcile.rollout`), rolls the new version out from the one it replaces.
    pub(super) async fn poll_tenant(&self, source: TenantSource, set: Arc<PluginSet>) {
        // What serves now, kept before any slot takes a new version: the version before,
        // for a rollout.
        let before = self.rolling_out(&source).await.then(|| set.frozen());
        let changes = set.poll().await;
        if changes.is_empty() {
            return;
        }
        let mut rolled = Vec::new();
        {
            let tenants = self.tenants.lock().await;
            let Some(tenant) = tenants.get(&source) else {
                return;
            };
            for change in &changes {
                if let Change::Swapped { location, .. } = change {
                    for (crd, running) in &tenant.running {
                        if !running.plugins.contains(location) {
                            continue;
                        }
                        if running.spec.reconcile.rollout.is_some() && before.is_some() {
                            rolled.push(crd.clone());
                            continue;
                        }
                        tracing::info!(tenant = %source, %crd, plugin = %location,
                            "re-queueing every CR after a plugin reload");
                        let _ = running.requeue.send(());
                    }
                }
            }
            self.publish(tenant);
        }
        if let (Some(before), false) = (before, rolled.is_empty()) {
            rolled.sort();
            rolled.dedup();
            self.roll_out_reload(&source, &before, &rolled).await;
        }
    }

    /// `source`'s serving Blueprint assembled again with `before` (the slots as they were
    /// before a reload): the version before, with the serving assembly and identity. When
    /// it cannot be assembled, every CR of `crds` is re-queued on the new version.
    async fn version_before(
        &self,
        source: &TenantSource,
        before: &PluginSet,
        crds: &[String],
    ) -> Option<(Arc<Assembly>, Acting, Arc<Assembly>)> {
        let (serving, acting, policy) = {
            let tenants = self.tenants.lock().await;
            tenants
                .get(source)
                .and_then(|t| Some((t.assembly.clone()?, t.acting.clone(), t.policy.clone())))
        }?;
        let built = Assembly::build(
            serving.blueprint.clone(),
            inrun_reconcilers::assemble::BuildContext {
                plugins: before,
                services: &acting.services,
                policy: &policy,
            },
        )
        .await;
        match built {
            Ok(previous) => Some((serving, acting, Arc::new(previous))),
            Err(e) => {
                tracing::warn!(tenant = %source, error = %inrun_contract::errors::chain(&e), "the version before a plugin reload could not be assembled again; every CR is re-queued on the new one");
                let tenants = self.tenants.lock().await;
                if let Some(t) = tenants.get(source) {
                    for crd in crds {
                        if let Some(r) = t.running.get(crd) {
                            let _ = r.requeue.send(());
                        }
                    }
                }
                None
            }
        }
    }

    /// Whether a CRD `source`'s tenant serves says how to roll a change out.
    async fn rolling_out(&self, source: &TenantSource) -> bool {
        let tenants = self.tenants.lock().await;
        tenants.get(source).is_some_and(|t| {
            t.running
                .values()
                .any(|r| r.spec.reconcile.rollout.is_some())
        })
    }

    /// Rolls out a plugin reload of the CRDs `crds` of `source`'s tenant: the serving
    /// Blueprint assembled again with `before` (the slots as they were) is the version
    /// before; each CRD's controller is started again carrying the rollout to the version
    /// its slots serve now.
    async fn roll_out_reload(&self, source: &TenantSource, before: &PluginSet, crds: &[String]) {
        let Some((serving, acting, previous)) = self.version_before(source, before, crds).await
        else {
            return;
        };
        // The controllers to start again, taken (under the lock) and stopped (without it:
        // their passes in flight finish first), as a reload retires a changed one.
        let mut taken = Vec::new();
        {
            let mut tenants = self.tenants.lock().await;
            // A Blueprint reload since: it started its controllers from what serves now.
            let Some(tenant) = serving_still(&mut tenants, source, &serving) else {
                return;
            };
            for crd in crds {
                let Some(index) = serving
                    .crds()
                    .iter()
                    .position(|c| &c.spec.crd_name() == crd)
                else {
                    continue;
                };
                let Some(rollout) = rollout_from(&previous, &serving.crds()[index]) else {
                    continue;
                };
                if let Some(old) = tenant.running.remove(crd) {
                    let _ = old.stop.send(true);
                    taken.push((crd.clone(), index, rollout, old));
                }
            }
        }
        let mut again = Vec::new();
        for (crd, index, rollout, old) in taken {
            let (identity, plugins, kinds) =
                (old.identity.clone(), old.plugins.clone(), old.kinds.clone());
            stop(old).await;
            again.push((crd, index, rollout, identity, plugins, kinds));
        }
        let mut tenants = self.tenants.lock().await;
        // A Blueprint reload meanwhile started the CRDs' controllers from what serves now.
        let Some(tenant) = serving_still(&mut tenants, source, &serving) else {
            return;
        };
        for (crd, index, rollout, identity, plugins, kinds) in again {
            if tenant.running.contains_key(&crd) {
                continue;
            }
            tracing::info!(tenant = %source, %crd, from = %rollout.from, to = %rollout.to, "a plugin reload rolls out step by step");
            shown_on(&rollout, source);
            let started =
                Self::start_controller(&acting.shared, &serving, index, kinds, Some(rollout));
            tenant.running.insert(
                crd,
                Running {
                    identity,
                    plugins,
                    ..started
                },
            );
        }
        self.publish(tenant);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{test_fleet, test_options, test_tenant};
    use super::*;

    #[tokio::test]
    async fn a_reload_retires_the_controllers_of_crds_removed_or_changed_and_keeps_the_rest() {
        let fleet = test_fleet(test_options());
        let source = TenantSource::Resource("t".into());
        let (before, mut tenant) =
            test_tenant(&fleet, &source, &[("Kept", 1), ("Changed", 1), ("Gone", 1)]).await;
        // Controllers that run until told to stop.
        let mut told = Vec::new();
        for plan in before.crds() {
            let (stop_tx, mut stop_rx) = watch::channel(false);
            let (requeue, _) = mpsc::unbounded_channel();
            told.push(stop_tx.subscribe());
            tenant.running.insert(
                plan.spec.crd_name(),
                Running {
                    spec: plan.spec.clone(),
                    runtime: before.blueprint.spec.runtime.clone(),
                    identity: None,
                    plugins: BTreeSet::new(),
                    stop: stop_tx,
                    requeue,
                    task: tokio::spawn(async move {
                        let _ = stop_rx.wait_for(|s| *s).await;
                    }),
                    rollout: None,
                    kinds: Default::default(),
                },
            );
        }
        // The next Blueprint: Kept as it was, Changed with more workers, Gone gone.
        let (changed, _) = test_tenant(&fleet, &source, &[("Kept", 1), ("Changed", 5)]).await;
        let acting = tenant.acting.clone();
        let retired = Fleet::retire(&mut tenant, &changed, &acting);
        let mut names: Vec<(String, bool)> = retired
            .iter()
            .map(|r| (r.name.clone(), r.removed))
            .collect();
        names.sort();
        assert_eq!(
            names,
            [
                ("changeds.g.example".to_string(), false),
                ("gones.g.example".to_string(), true)
            ]
        );
        assert_eq!(
            tenant.running.keys().collect::<Vec<_>>(),
            ["kepts.g.example"]
        );
        // Told to stop at once; they end when drained.
        assert_eq!(told.iter().filter(|t| *t.borrow()).count(), 2);
        fleet.drain(retired).await;
        // The kept controller runs on.
        assert!(!tenant.running["kepts.g.example"].task.is_finished());
    }
}
