//! A CRD belongs to one tenant: claims of serving tenants, and reservations of CRDs a
//! tenant prepares (installs) outside the tenants lock.

use crate::state::*;

/// A tenant's Blueprint refused for a CRD another tenant has: why, at the CRD's field.
pub(super) fn claim_refusal(plan: &inrun_reconcilers::plan::CrdPlan, why: String) -> FleetError {
    FleetError::Claimed(BlueprintError::Invalid {
        problems: vec![blueprint::Problem::new(
            &plan.spec.source.file,
            Some(&plan.spec.kind),
            plan.spec.source.field(),
            why,
        )],
    })
}

/// The CRDs a tenant reserved while it prepares them ([`Fleet::reserve`]), released when
/// dropped: when its load is over, or given up midway.
pub(super) struct Reserved<'f> {
    pub(super) fleet: &'f Fleet,
    pub(super) source: TenantSource,
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        self.fleet
            .reserved
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, owner| *owner != self.source);
    }
}

impl Fleet {
    /// Which other tenant serves `crd` now, if any.
    pub(super) fn claimant<'t>(
        tenants: &'t BTreeMap<TenantSource, Tenant>,
        crd: &str,
    ) -> Option<&'t TenantSource> {
        tenants
            .values()
            // Running controllers are always of the serving assembly's CRDs; a tenant
            // loaded but not started yet claims its CRDs too.
            .find(|t| {
                t.assembly
                    .as_ref()
                    .is_some_and(|a| a.crds().iter().any(|c| c.spec.crd_name() == crd))
            })
            .map(|t| &t.source)
    }

    /// Reserves `assembly`'s CRDs for `source` while it prepares them outside the tenants
    /// lock (the caller holds it); the refusal if another tenant reserved one first. The
    /// reservation ends when `load_tenant` does ([`Reserved`]).
    pub(super) fn reserve(&self, assembly: &Assembly, source: &TenantSource) -> Option<FleetError> {
        let mut reserved = self.reserved.lock().unwrap_or_else(|p| p.into_inner());
        for plan in assembly.crds() {
            let name = plan.spec.crd_name();
            if let Some(owner) = reserved.get(&name).filter(|o| *o != source) {
                return Some(claim_refusal(
                    plan,
                    format!(
                        "CRD {name} is being installed by the tenant {owner}; a CRD belongs to one Blueprint"
                    ),
                ));
            }
        }
        for plan in assembly.crds() {
            reserved.insert(plan.spec.crd_name(), source.clone());
        }
        None
    }

    /// The refusal of `assembly` if a tenant of `tenants` (but `itself`) serves one of its
    /// CRDs.
    pub(super) fn claimed(
        assembly: &Assembly,
        tenants: &BTreeMap<TenantSource, Tenant>,
        itself: Option<&TenantSource>,
    ) -> Option<FleetError> {
        for plan in assembly.crds() {
            let name = plan.spec.crd_name();
            if let Some(owner) = Self::claimant(tenants, &name).filter(|o| Some(*o) != itself) {
                return Some(claim_refusal(
                    plan,
                    format!(
                        "CRD {name} is already served by the tenant {owner}; a CRD belongs to one Blueprint"
                    ),
                ));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{test_fleet, test_options, test_tenant};
    use super::*;

    #[tokio::test]
    async fn a_crd_is_reserved_or_served_by_one_tenant_and_the_other_is_refused_at_its_kind() {
        let fleet = test_fleet(test_options());
        let (a, b) = (
            TenantSource::Resource("a".into()),
            TenantSource::Resource("b".into()),
        );
        let (mine, _) = test_tenant(&fleet, &a, &[("Shared", 1), ("Mine", 1)]).await;
        let (theirs, mut serving) = test_tenant(&fleet, &b, &[("Shared", 1)]).await;
        // Reserved by A while it prepares: B is refused, naming A; A may reserve again.
        assert!(fleet.reserve(&mine, &a).is_none());
        assert!(fleet.reserve(&mine, &a).is_none());
        let refused = fleet.reserve(&theirs, &b).expect("refused").to_string();
        assert!(
            refused.contains("CRD shareds.g.example is being installed by the tenant Blueprint/a"),
            "{refused}"
        );
        {
            // A's load is over: the reservation goes with its guard.
            let _guard = Reserved {
                fleet: &fleet,
                source: a.clone(),
            };
        }
        assert!(fleet.reserve(&theirs, &b).is_none());
        // Served by B: A is refused, naming the CRD's kind and B; B itself is not.
        serving.assembly = Some(theirs.clone());
        let tenants = BTreeMap::from([(b.clone(), serving)]);
        let claimed = Fleet::claimed(&mine, &tenants, Some(&a)).expect("claimed");
        let text = inrun_contract::errors::chain(&claimed);
        assert!(
            text.contains("already served by the tenant Blueprint/b"),
            "{text}"
        );
        assert!(text.contains("Shared"), "{text}");
        assert!(Fleet::claimed(&theirs, &tenants, Some(&b)).is_none());
    }
}
