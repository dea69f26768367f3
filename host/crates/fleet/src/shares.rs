//! What a tenant may take of what tenants share: its engine's share of calls, memory and
//! logs, its API writes, its plugins' compile limits, and its size. The operator's own
//! `--blueprint` is held to the shares but not to the writes, compile limits or size.

use crate::state::*;

impl Fleet {
    /// The host's own identity, for the tenant of `source` when it names none.
    pub(super) fn host_acting(
        &self,
        source: &TenantSource,
        budget: &inrun_blueprint::BudgetSpec,
    ) -> Acting {
        let plugins = self.plugin_set(source, budget, self.services.sources.clone());
        let mut shared = self.write_limited(source, self.shared.clone(), budget);
        shared.host_memory = plugins.engine().host_memory();
        Acting {
            identity: None,
            budget: budget.clone(),
            shared,
            services: self.services.clone(),
            plugins,
        }
    }

    /// The plugins of `source`'s tenant, fetched through `sources`: held to a tenant's
    /// compile limits ([`Policy::tenant_size`]), but for the operator's own `--blueprint`.
    pub(super) fn plugin_set(
        &self,
        source: &TenantSource,
        budget: &inrun_blueprint::BudgetSpec,
        sources: inrun_reconcilers::sources::Sources,
    ) -> Arc<PluginSet> {
        let set = PluginSet::new(self.engine_of(source, budget), sources);
        Arc::new(if self.operators(source) {
            set
        } else {
            set.with_compile_limits(self.options.policy.tenant_size.compile)
        })
    }

    /// Whether `source` is the operator's own `--blueprint`.
    pub(super) fn operators(&self, source: &TenantSource) -> bool {
        matches!(source, TenantSource::File(path)
            if self.options.blueprint.as_deref() == Some(path.as_path()))
    }

    /// `shared` with its writes at `source`'s tenant's rate ([`Policy::tenant_api_writes`],
    /// or lower where its Blueprint asks), its identity locks its own and written under the
    /// same rate; the operator's own `--blueprint` writes at no limit but its own.
    pub(super) fn write_limited(
        &self,
        source: &TenantSource,
        mut shared: Shared,
        budget: &inrun_blueprint::BudgetSpec,
    ) -> Shared {
        let host = if self.operators(source) {
            0
        } else {
            self.options.policy.tenant_api_writes
        };
        let rate = match (host, budget.api_writes_per_second) {
            (0, asked) => asked.unwrap_or(0),
            // At least one a second: `0` would be no limit at all.
            (host, asked) => asked.map_or(host, |a| a.clamp(1, host)),
        };
        let rate = inrun_runtime::write_limit::WriteRate::new(rate);
        if let Some(rate) = &rate {
            shared.client = rate.limit(shared.client);
        }
        // Its package CRs' identity locks: in its own scope, written as the host under the
        // same rate, and as many as a tenant may hold (the operator's own not capped).
        shared.locks = shared.locks.map(|locks| {
            let host = locks.host_client();
            let client = rate.as_ref().map_or(host.clone(), |r| r.limit(host));
            Arc::new(locks.for_tenant(source.to_string(), client, !self.operators(source)))
        });
        shared
    }

    /// Where `blueprint` of `source` is larger than a tenant's may be
    /// ([`Policy::tenant_size`]), if it is: the field and why. The operator's own
    /// `--blueprint` is not held to it.
    pub(super) fn oversized(
        &self,
        source: &TenantSource,
        blueprint: &Blueprint,
    ) -> Option<(String, String)> {
        if self.operators(source) {
            return None;
        }
        let size = self.options.policy.tenant_size;
        let crds = &blueprint.spec.crds;
        if crds.len() > size.crds {
            return Some((
                "spec.crds".into(),
                format!(
                    "{} CRDs; a tenant may declare at most {}",
                    crds.len(),
                    size.crds
                ),
            ));
        }
        let plugins: BTreeSet<String> = plugin_locations(blueprint)
            .into_values()
            .flatten()
            .collect();
        if plugins.len() > size.plugins {
            return Some((
                "spec.crds".into(),
                format!(
                    "{} distinct plugins; a tenant may use at most {}",
                    plugins.len(),
                    size.plugins
                ),
            ));
        }
        let workers: usize = crds
            .iter()
            .map(|c| c.workers.unwrap_or(blueprint.spec.runtime.workers) as usize)
            .sum();
        if workers > size.workers {
            return Some((
                "spec.crds[].workers".into(),
                format!(
                    "{workers} workers in all; a tenant may run at most {}",
                    size.workers
                ),
            ));
        }
        for (i, crd) in crds.iter().enumerate() {
            let blocks = std::iter::once((format!("spec.crds[{i}].reconcile"), &crd.reconcile))
                .chain(
                    crd.serve
                        .iter()
                        .flat_map(|s| s.targets.iter())
                        .enumerate()
                        .map(|(t, target)| {
                            (
                                format!("spec.crds[{i}].serve.targets[{t}].reconcile"),
                                &target.reconcile,
                            )
                        }),
                );
            for (at, block) in blocks {
                if block.external.len() > size.external_calls {
                    return Some((
                        format!("{at}.external"),
                        format!(
                            "{} external calls; a tenant's reconcile block may make at most {}",
                            block.external.len(),
                            size.external_calls
                        ),
                    ));
                }
            }
        }
        None
    }

    /// Why `blueprint` asks for more than the host's per-tenant budget, if it does.
    pub(super) fn over_budget(&self, blueprint: &Blueprint) -> Option<(&'static str, String)> {
        let asked = &blueprint.spec.runtime.budget;
        let host = self.engine.budgets().tenant;
        let writes = self.options.policy.tenant_api_writes;
        let over = |field: &'static str, asked: Option<u64>, host: u64, unit: &str| {
            asked.filter(|&a| a > host && host > 0).map(|a| {
                (
                    field,
                    format!("{a}{unit} exceeds the host's per-tenant budget of {host}{unit}"),
                )
            })
        };
        over(
            "pluginCalls",
            asked.plugin_calls.map(u64::from),
            host.calls as u64,
            "",
        )
        .or_else(|| {
            over(
                "pluginMemory",
                asked.plugin_memory.map(|q| q.bytes() >> 20),
                (host.memory_bytes >> 20) as u64,
                "Mi",
            )
        })
        .or_else(|| {
            over(
                "logLinesPerSecond",
                asked.log_lines_per_second.map(u64::from),
                u64::from(host.log_lines_per_second),
                "",
            )
        })
        .or_else(|| {
            over(
                "apiWritesPerSecond",
                asked.api_writes_per_second.map(u64::from),
                u64::from(writes),
                "",
            )
        })
        .or_else(|| {
            over(
                "hostMemory",
                asked.host_memory.map(|q| q.bytes() >> 20),
                (host.held_bytes >> 20) as u64,
                "Mi",
            )
        })
        .or_else(|| {
            over(
                "pluginCpu",
                asked.plugin_cpu.map(|c| u64::from(c.get())),
                host.cpu.map_or(0, |c| u64::from(c.get())),
                "m",
            )
        })
    }

    /// The engine the plugins of `source`'s tenant load through: the host's, their calls
    /// under the tenant's budget, reporting their loads and calls with the tenant's name.
    pub(super) fn engine_of(
        &self,
        source: &TenantSource,
        budget: &inrun_blueprint::BudgetSpec,
    ) -> Engine {
        let tenant = source.to_string();
        let mut share = self.engine.budgets().tenant;
        // The operator's own Blueprint may hold all the host memory replies may take, and
        // its guests' CPU is capped only where it asks to be.
        if self.operators(source) {
            share.held_bytes = self.engine.budgets().held_bytes;
            share.cpu = None;
        }
        if let Some(calls) = budget.plugin_calls {
            share.calls = share.calls.min(calls as usize).max(1);
        }
        if let Some(memory) = budget.plugin_memory {
            share.memory_bytes = share
                .memory_bytes
                .min(usize::try_from(memory.bytes()).unwrap_or(usize::MAX));
        }
        if let Some(lines) = budget.log_lines_per_second {
            share.log_lines_per_second = share.log_lines_per_second.min(lines);
        }
        if let Some(memory) = budget.host_memory {
            share.held_bytes = share
                .held_bytes
                .min(usize::try_from(memory.bytes()).unwrap_or(usize::MAX));
        }
        if let Some(cpu) = budget.plugin_cpu {
            share.cpu = Some(share.cpu.map_or(cpu, |host| host.min(cpu)));
        }
        self.engine.for_tenant(&tenant, Some(share)).observed_by(
            self.shared
                .metrics
                .tenant_observer(&tenant, self.operators(source)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{test_fleet, test_options};
    use super::*;

    fn blueprint(crds: usize, workers: u32, external: usize) -> Blueprint {
        let calls: String = (0..external)
            .map(|i| {
                format!("          - {{ name: c{i}, http: {{ url: 'https://x.example/{i}' }} }}\n")
            })
            .collect();
        let external = if external > 0 {
            format!("        external:\n{calls}")
        } else {
            String::new()
        };
        let crds: String = (0..crds)
            .map(|i| {
                format!(
                    "    - group: g.example\n      version: v1\n      kind: K{i}\n      workers: {workers}\n      reconcile:\n{external}        onReconcile: []\n"
                )
            })
            .collect();
        inrun_blueprint::from_str(
            &format!("apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: t }}\nspec:\n  crds:\n{crds}"),
            "t.yaml",
        )
        .expect("blueprint")
    }

    #[tokio::test]
    async fn a_tenant_larger_than_a_tenant_may_be_is_refused_naming_the_field_and_the_cap() {
        let operators = std::path::PathBuf::from("/etc/inrun/blueprint.yaml");
        let fleet = test_fleet(FleetOptions {
            blueprint: Some(operators.clone()),
            ..test_options()
        });
        let tenant = TenantSource::Resource("t".into());
        assert_eq!(fleet.oversized(&tenant, &blueprint(20, 5, 8)), None);
        let (field, why) = fleet
            .oversized(&tenant, &blueprint(21, 1, 0))
            .expect("crds");
        assert_eq!(field, "spec.crds");
        assert!(
            why.contains("21 CRDs; a tenant may declare at most 20"),
            "{why}"
        );
        let (field, why) = fleet
            .oversized(&tenant, &blueprint(3, 40, 0))
            .expect("workers");
        assert_eq!(field, "spec.crds[].workers");
        assert!(why.contains("120 workers in all"), "{why}");
        let (field, why) = fleet
            .oversized(&tenant, &blueprint(1, 1, 9))
            .expect("external");
        assert_eq!(field, "spec.crds[0].reconcile.external");
        assert!(why.contains("9 external calls"), "{why}");
        // The operator's own Blueprint is not held to a tenant's size.
        let own = TenantSource::File(operators);
        assert_eq!(fleet.oversized(&own, &blueprint(21, 40, 9)), None);
    }
}
