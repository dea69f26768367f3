//! Loading a tenant's Blueprint, in four named steps; the tenants lock is taken only for
//! the last two, so other tenants load, reload and report while one builds and prepares:
//!
//! 1. [`Fleet::build`]: the budget and size checks, whom it acts as, its assembly (plugins
//!    fetched and compiled) — a [`Built`] Blueprint, or [`Refused`] with the identity built
//!    on the way, kept for a retry;
//! 2. [`Fleet::prepare`], outside the lock: its CRDs unclaimed and reserved, access
//!    reviews, CRDs installed and established, kinds discovered — [`Prepared`];
//! 3. [`Fleet::install`]: retires what the new Blueprint drops (drained without the lock),
//!    then serves it;
//! 4. [`Tenant::record`]: the tenant's state after the outcome, then its metrics and log.
//!
//! A refused Blueprint leaves the tenant's serving one, if any, serving.

use crate::claims::Reserved;
use crate::state::*;

/// A tenant's Blueprint built: whom it acts as and its assembly.
pub(super) struct Built {
    acting: Acting,
    assembly: Assembly,
    resumed: Resumed,
}

/// Rollouts a host started mid-way continues, by CRD: the version before (loaded again
/// from the rollout's record) and the record.
pub(crate) type Resumed = BTreeMap<String, (Arc<Assembly>, inrun_runtime::rollout::RolloutView)>;

/// A Blueprint built and prepared: ready to serve.
pub(super) struct Prepared {
    acting: Acting,
    assembly: Arc<Assembly>,
    kinds: runtime::ChildKinds,
    resumed: Resumed,
}

/// Why a Blueprint was not built, prepared or served, with the identity built on the way
/// (`None` when it failed before one was): a retry reuses its clients and plugin slots.
pub(super) struct Refused {
    acting: Option<Acting>,
    error: FleetError,
}

impl Refused {
    fn before_identity(error: FleetError) -> Self {
        Refused {
            acting: None,
            error,
        }
    }
}

/// How a load's outcome changed its tenant ([`Tenant::record`]).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    /// The Blueprint serves; `reloaded` when it replaced one that served before.
    Serving { reloaded: bool },
    /// It was refused; `repeated` when with the same message as the last time.
    Refused { refusal: Refusal, repeated: bool },
}

/// Whether an identity built for a refused Blueprint is kept as the tenant's candidate:
/// only one other than the identity serving, which the tenant keeps anyway.
fn keeps_candidate(
    refused: bool,
    built: Option<&ServiceAccountRef>,
    serving: Option<&ServiceAccountRef>,
) -> bool {
    refused && built != serving
}

impl Tenant {
    /// Records `outcome` of loading the Blueprint whose text hashes to `fingerprint`.
    /// Missing permissions or an identity that cannot be assumed can be fixed without
    /// touching the Blueprint (RBAC, the ServiceAccount), so such a refusal is tried again
    /// at every check; anything else waits for the Blueprint to change.
    pub(super) fn record(
        &mut self,
        fingerprint: u64,
        first: bool,
        outcome: Result<(), FleetError>,
    ) -> Recorded {
        match outcome {
            Ok(()) => {
                self.fingerprint = Some(fingerprint);
                self.failed = None;
                self.error = None;
                if !first {
                    self.reloads += 1;
                }
                Recorded::Serving { reloaded: !first }
            }
            Err(e) => {
                let message = inrun_contract::errors::chain(&e);
                let retried = matches!(e, FleetError::Run(_) | FleetError::Identity(_));
                self.failed = (!retried).then_some(fingerprint);
                let repeated = self.error.as_ref() == Some(&message);
                self.error = Some(message.clone());
                Recorded::Refused {
                    refusal: Refusal {
                        reason: e.reason(),
                        message,
                    },
                    repeated,
                }
            }
        }
    }
}

impl Fleet {
    /// The rollouts of `assembly`'s CRDs a host stopped mid-way, each with the version
    /// before loaded again from its record: those recorded under way, paused or rolled
    /// back to the version `assembly` serves. A version before that can no longer be
    /// loaded (its file changed, say) is logged, and the CRD served by the new one.
    pub(crate) async fn resumed(
        &self,
        policy: &Policy,
        acting: &Acting,
        assembly: &Assembly,
    ) -> Resumed {
        use inrun_runtime::rollout::{Phase, record::Record};
        let mut resumed = Resumed::new();
        let Some(locks) = &acting.shared.locks else {
            return resumed;
        };
        for plan in assembly.crds() {
            if plan.default.spec.rollout.is_none() {
                continue;
            }
            let crd = plan.spec.crd_name();
            let record = Record::new(locks.host_client(), locks.namespace(), &crd);
            let Some((view, source, text)) = record.read().await else {
                continue;
            };
            let under_way = matches!(
                view.phase,
                Phase::Progressing | Phase::Paused | Phase::RolledBack
            );
            if !under_way {
                continue;
            }
            let before = match blueprint::from_str(&text, &source) {
                Ok(bp) => self.assemble(policy, acting, bp).await,
                Err(e) => Err(e),
            };
            // The version before must serve what the rollout started from (a plugin file
            // rewritten since is another version), and the Blueprint now what it went to.
            let change = |a: &Assembly| {
                a.crds().first().map(|p| {
                    let (from, to) = inrun_runtime::rollout::changed(p, plan);
                    (from.join(","), to.join(","))
                })
            };
            let recorded = Some((view.from.clone(), view.to.clone()));
            match before {
                Ok(before) if change(&before) != recorded => {
                    tracing::warn!(%crd, from = %view.from, to = %view.to, now = ?change(&before), "a rollout recorded under way cannot go on: the versions are not what they were; the version serving now serves every CR");
                }
                Ok(before) => {
                    tracing::info!(%crd, from = %view.from, to = %view.to, step = view.step, phase = ?view.phase, "continuing a rollout recorded under way");
                    resumed.insert(crd, (Arc::new(before), view));
                }
                Err(e) => {
                    tracing::warn!(%crd, from = %view.from, error = %inrun_contract::errors::chain(&e), "a rollout recorded under way cannot go on: the version before no longer loads; the new version serves every CR")
                }
            }
        }
        resumed
    }

    /// Loads (or reloads) `source` from `blueprint`, applying it if it assembles and
    /// starts; on failure the tenant's serving Blueprint, if any, keeps serving. `None`:
    /// the fleet is shutting down and nothing changed.
    pub(super) async fn load_tenant(
        &self,
        source: TenantSource,
        fingerprint: u64,
        loaded: Result<Blueprint, BlueprintError>,
    ) -> Option<Result<(), Refusal>> {
        let built = self.until_closing(self.build(&source, loaded)).await?;
        // Its CRDs stay reserved to it from the claim check until it serves or is refused.
        let _reserved = Reserved {
            fleet: self,
            source: source.clone(),
        };
        let prepared = match built {
            Ok(built) => self.prepare(&source, built).await?,
            Err(refused) => Err(refused),
        };
        let mut tenants = self.tenants.lock().await;
        if self.is_closing() {
            return None;
        }
        let tenant = tenants
            .remove(&source)
            .unwrap_or_else(|| self.new_tenant(source.clone()));
        let first = tenant.assembly.is_none();
        let (mut tenants, mut tenant, outcome) = self.install(tenants, tenant, prepared).await?;
        let recorded = tenant.record(fingerprint, first, outcome);
        self.report_load(&mut tenants, &tenant, &recorded);
        self.publish(&tenant);
        tenants.insert(source, tenant);
        Some(match recorded {
            Recorded::Serving { .. } => Ok(()),
            Recorded::Refused { refusal, .. } => Err(refusal),
        })
    }

    /// Step 1: checks `loaded` against the fleet's budgets and sizes, builds whom it acts
    /// as (reusing the tenant's identity or candidate when they match) and assembles it.
    async fn build(
        &self,
        source: &TenantSource,
        loaded: Result<Blueprint, BlueprintError>,
    ) -> Result<Built, Refused> {
        let (policy, current, candidate, serving) = {
            let tenants = self.tenants.lock().await;
            match tenants.get(source) {
                Some(t) => (
                    t.policy.clone(),
                    t.acting.clone(),
                    t.candidate.clone(),
                    t.assembly.is_some(),
                ),
                None => {
                    let t = self.new_tenant(source.clone());
                    (t.policy, t.acting, None, false)
                }
            }
        };
        let bp = loaded.map_err(|e| Refused::before_identity(FleetError::Blueprint(e)))?;
        let refused = self
            .over_budget(&bp)
            .map(|(field, why)| (format!("spec.runtime.budget.{field}"), why))
            .or_else(|| self.oversized(source, &bp));
        if let Some((field, why)) = refused {
            let problem = blueprint::Problem::new(Path::new(&source.to_string()), None, field, why);
            return Err(Refused::before_identity(FleetError::Blueprint(
                BlueprintError::Invalid {
                    problems: vec![problem],
                },
            )));
        }
        let acting = self
            .acting(source, &current, candidate.as_ref(), &bp)
            .await
            .map_err(|e| Refused::before_identity(FleetError::Identity(e)))?;
        match self.assemble(&policy, &acting, bp).await {
            Ok(assembly) => {
                // Serving nothing yet (this host just started): rollouts under way go on.
                let resumed = if serving {
                    Resumed::new()
                } else {
                    self.resumed(&policy, &acting, &assembly).await
                };
                Ok(Built {
                    acting,
                    assembly,
                    resumed,
                })
            }
            Err(e) => Err(Refused {
                acting: Some(acting),
                error: FleetError::Blueprint(e),
            }),
        }
    }

    /// Step 2, without the tenants lock (seconds to minutes for a large or refused
    /// tenant): its CRDs must be unclaimed by other tenants and are reserved to it, since
    /// preparing installs them; then access reviews, CRDs installed and established, kinds
    /// discovered. `None`: the fleet is shutting down.
    async fn prepare(
        &self,
        source: &TenantSource,
        Built {
            acting,
            assembly,
            resumed,
        }: Built,
    ) -> Option<Result<Prepared, Refused>> {
        let assembly = Arc::new(assembly);
        let claimed = {
            let tenants = self.tenants.lock().await;
            Self::claimed(&assembly, &tenants, Some(source))
                .or_else(|| self.reserve(&assembly, source))
        };
        let prepared = match claimed {
            Some(e) => Err(e),
            None => self
                .until_closing(runtime::prepare(
                    &acting.shared,
                    &assembly,
                    self.options.install_crds,
                ))
                .await?
                .map_err(FleetError::from),
        };
        Some(match prepared {
            Ok(kinds) => Ok(Prepared {
                acting,
                assembly,
                kinds,
                resumed,
            }),
            Err(error) => Err(Refused {
                acting: Some(acting),
                error,
            }),
        })
    }

    /// Step 3, under the tenants lock: retires the CRDs the new Blueprint drops or
    /// changes (their reconciles in flight drained without the lock: they may take
    /// minutes), then serves it. A refused identity other than the serving one is kept as
    /// the tenant's candidate for a retry. `None`: the fleet is shutting down.
    async fn install<'f>(
        &'f self,
        mut tenants: tokio::sync::MutexGuard<'f, BTreeMap<TenantSource, Tenant>>,
        mut tenant: Tenant,
        prepared: Result<Prepared, Refused>,
    ) -> Option<(
        tokio::sync::MutexGuard<'f, BTreeMap<TenantSource, Tenant>>,
        Tenant,
        Result<(), FleetError>,
    )> {
        let Prepared {
            acting,
            assembly,
            kinds,
            resumed,
        } = match prepared {
            Ok(prepared) => prepared,
            Err(Refused { acting, error }) => {
                // Refused before an identity was built: the candidate stays as it was.
                if let Some(acting) = acting {
                    let serving = tenant.acting.identity.clone();
                    tenant.candidate =
                        keeps_candidate(true, acting.identity.as_ref(), serving.as_ref())
                            .then_some(acting);
                }
                return Some((tenants, tenant, Err(error)));
            }
        };
        let retired = match Self::claimed(&assembly, &tenants, None) {
            Some(_) => Vec::new(),
            None => Self::retire(&mut tenant, &assembly, &acting),
        };
        if !retired.is_empty() {
            // The tenant stays visible, serving the CRDs it keeps; its lane holds its next
            // job, its reservation the CRDs it prepared.
            let source = tenant.source.clone();
            tenants.insert(source.clone(), tenant);
            drop(tenants);
            self.drain(retired).await;
            tenants = self.tenants.lock().await;
            if self.is_closing() {
                return None;
            }
            tenant = tenants
                .remove(&source)
                .unwrap_or_else(|| self.new_tenant(source.clone()));
        }
        let started = Self::serve(&mut tenant, &acting, assembly, kinds, &tenants, &resumed)
            .map_or(Ok(()), Err);
        // Serving, `serve` made it the tenant's; refused, it waits for a retry.
        let serving = tenant.acting.identity.clone();
        tenant.candidate =
            keeps_candidate(started.is_err(), acting.identity.as_ref(), serving.as_ref())
                .then_some(acting);
        Some((tenants, tenant, started))
    }

    /// Step 4's effects: the reload counted, a refusal's unused plugins dropped, the log.
    fn report_load(
        &self,
        tenants: &mut BTreeMap<TenantSource, Tenant>,
        tenant: &Tenant,
        recorded: &Recorded,
    ) {
        let name = tenant.source.to_string();
        match recorded {
            Recorded::Serving { reloaded } => {
                if *reloaded {
                    self.shared.metrics.blueprint_reloaded(&name, true);
                    // It may have dropped a CRD another Blueprint was refused for.
                    Self::forget_refusals(tenants);
                }
                tracing::info!(tenant = %name, crds = tenant.running.len(), "Blueprint serving");
            }
            Recorded::Refused { refusal, repeated } => {
                // The refused assembly's plugins are held by nothing now: their slots and
                // compiled code go (the serving assembly's stay).
                tenant.acting.plugins.retain_used();
                if let Some(candidate) = &tenant.candidate {
                    candidate.plugins.retain_used();
                }
                if *repeated {
                    return;
                }
                self.shared.metrics.blueprint_reloaded(&name, false);
                let message = &refusal.message;
                if tenant.assembly.is_none() {
                    tracing::error!(tenant = %name, error = %message, "Blueprint refused");
                } else {
                    tracing::error!(tenant = %name, error = %message,
                        "changed Blueprint refused; the previous one keeps serving");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{test_fleet, test_options};
    use super::*;

    fn refused_blueprint() -> FleetError {
        FleetError::Blueprint(BlueprintError::Invalid {
            problems: vec![blueprint::Problem::new(
                Path::new("a.yaml"),
                None,
                "spec.crds[0].kind",
                "is empty",
            )],
        })
    }

    #[tokio::test]
    async fn a_refused_blueprint_waits_for_its_text_to_change_and_a_repeat_is_told_once() {
        let fleet = test_fleet(test_options());
        let mut tenant = fleet.new_tenant(TenantSource::File("a.yaml".into()));
        let first = tenant.record(7, true, Err(refused_blueprint()));
        let Recorded::Refused { refusal, repeated } = first else {
            panic!("refused: {first:?}");
        };
        assert!(!repeated);
        assert_eq!(refusal.reason, refused_blueprint().reason());
        assert_eq!(tenant.failed, Some(7), "not retried until the text changes");
        assert_eq!(tenant.error.as_deref(), Some(refusal.message.as_str()));
        assert!(matches!(
            tenant.record(7, true, Err(refused_blueprint())),
            Recorded::Refused { repeated: true, .. }
        ));
    }

    #[tokio::test]
    async fn a_serving_blueprint_clears_the_refusal_and_counts_a_reload_only_after_the_first() {
        let fleet = test_fleet(test_options());
        let mut tenant = fleet.new_tenant(TenantSource::File("a.yaml".into()));
        tenant.record(7, true, Err(refused_blueprint()));
        assert_eq!(
            tenant.record(8, true, Ok(())),
            Recorded::Serving { reloaded: false }
        );
        assert_eq!(
            (
                tenant.fingerprint,
                tenant.failed,
                tenant.error.as_deref(),
                tenant.reloads
            ),
            (Some(8), None, None, 0)
        );
        assert_eq!(
            tenant.record(9, false, Ok(())),
            Recorded::Serving { reloaded: true }
        );
        assert_eq!(tenant.reloads, 1);
    }

    #[test]
    fn only_a_refused_identity_other_than_the_serving_one_is_kept_for_a_retry() {
        let sa = |name: &str| ServiceAccountRef {
            namespace: "team".into(),
            name: name.into(),
        };
        let (a, b) = (sa("a"), sa("b"));
        assert!(keeps_candidate(true, Some(&b), Some(&a)));
        assert!(keeps_candidate(true, Some(&a), None));
        assert!(
            !keeps_candidate(true, Some(&a), Some(&a)),
            "the serving one is kept anyway"
        );
        assert!(
            !keeps_candidate(false, Some(&b), Some(&a)),
            "serving, it is the tenant's"
        );
    }
}
