//! The supervisor: the one task that owns every change of the fleet ([`Fleet::run`]):
//! the host's own Blueprint started first, then tenants' sources watched and polled,
//! reloads, consent rechecks, retries and plugin polls on one ticker, and every tenant
//! stopped at shutdown. Also what others read of the fleet (views, assemblies).

use crate::state::*;

impl Fleet {
    /// A fleet with no tenant loaded yet.
    pub fn new(
        shared: Shared,
        engine: Engine,
        services: Services,
        options: FleetOptions,
    ) -> Arc<Self> {
        Arc::new(Fleet {
            shared,
            engine,
            services,
            options,
            tenants: tokio::sync::Mutex::new(BTreeMap::new()),
            reserved: Mutex::new(BTreeMap::new()),
            views: Mutex::new(BTreeMap::new()),
            lanes: Mutex::new(BTreeMap::new()),
            jobs: Mutex::new(Vec::new()),
            closing: watch::channel(false).0,
            statuses: Mutex::new(BTreeMap::new()),
        })
    }

    /// Records the outcome of loading the `Blueprint` resource `object` as its status, and
    /// writes it when this replica makes the host's cluster-wide writes.
    pub(crate) async fn report(
        &self,
        object: &resources::Object,
        result: Result<(), Refusal>,
        crds: Vec<String>,
    ) {
        let status = resources::Status::new(object, result, crds);
        self.statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(object.name.clone(), status.clone());
        if self.shared.leads() {
            status.write(&self.shared.client).await;
        }
    }

    /// This replica has come to lead its ring (under sharding): it installs the CRDs its
    /// tenants serve (another replica's version of them may be in place) and writes the
    /// `Blueprint` resources' status, which the replicas that did not lead only recorded.
    pub async fn lead(&self) {
        if self.options.install_crds {
            // Each tenant's CRDs as that tenant installs them (as itself, when it acts as a
            // ServiceAccount).
            let served: Vec<(kube::Client, Vec<CrdSpec>)> = self
                .tenants
                .lock()
                .await
                .values()
                .map(|t| {
                    let specs = t.running.values().map(|r| r.spec.clone()).collect();
                    (t.acting.shared.client.clone(), specs)
                })
                .collect();
            for (client, specs) in served {
                let specs: Vec<&CrdSpec> = specs.iter().collect();
                // What they serve was checked when it was loaded.
                if let Err(e) = inrun_runtime::crds::ensure(
                    &client,
                    &specs,
                    true,
                    inrun_runtime::crds::OnBreaking::Install,
                )
                .await
                {
                    tracing::warn!(error = %inrun_contract::errors::chain(&e), "installing the CRDs on coming to lead");
                }
            }
            if self.options.resources
                && let Err(e) = resources::ensure_crd(&self.shared.client, true.into()).await
            {
                tracing::warn!(error = %inrun_contract::errors::chain(&e), "installing the Blueprint CRD on coming to lead");
            }
        }
        let statuses: Vec<resources::Status> = self
            .statuses
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for status in statuses {
            status.write(&self.shared.client).await;
        }
    }

    /// What the console shows: every tenant, in source order, with what it uses now.
    pub fn views(&self) -> Vec<TenantView> {
        let mut views: Vec<TenantView> = self
            .views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        for view in &mut views {
            view.usage = self.engine.tenant_usage(&view.source.to_string());
        }
        views
    }

    /// The assemblies serving now, one per tenant that serves.
    pub fn assemblies(&self) -> Vec<Arc<Assembly>> {
        self.views()
            .into_iter()
            .filter_map(|v| v.assembly)
            .collect()
    }

    /// The host's own Blueprint (`--blueprint`) as it serves; `None` when the host serves
    /// only tenants, or before it loads.
    pub fn own_assembly(&self) -> Option<Arc<Assembly>> {
        let path = self.options.blueprint.as_ref()?;
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        views
            .get(&TenantSource::File(path.clone()))?
            .assembly
            .clone()
    }

    /// The runtime section of the host's own Blueprint (`--blueprint`), which alone sets
    /// host-wide settings such as the health port and leader election; `None` when the
    /// host serves only tenants.
    pub fn host_runtime(&self) -> Option<RuntimeSpec> {
        let path = self.options.blueprint.as_ref()?;
        let views = self.views.lock().unwrap_or_else(|p| p.into_inner());
        let view = views.get(&TenantSource::File(path.clone()))?;
        Some(view.assembly.as_ref()?.blueprint.spec.runtime.clone())
    }

    pub(crate) fn publish(&self, tenant: &Tenant) {
        let view = TenantView {
            source: tenant.source.clone(),
            name: tenant
                .assembly
                .as_ref()
                .map(|a| a.blueprint.metadata.name.clone()),
            serving: tenant.assembly.is_some(),
            crds: tenant.running.keys().cloned().collect(),
            error: tenant.error.clone(),
            plugins: tenant
                .acting
                .plugins
                .slots()
                .iter()
                .map(|s| s.status())
                .collect(),
            reloads: tenant.reloads,
            budget: tenant.acting.budget.clone(),
            usage: None,
            assembly: tenant.assembly.clone(),
            rollouts: tenant
                .running
                .values()
                .filter_map(|r| r.rollout.clone())
                .collect(),
        };
        self.views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(tenant.source.clone(), view);
    }

    pub(crate) fn unpublish(&self, source: &TenantSource) {
        self.views
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(source);
    }

    pub(crate) fn new_tenant(&self, source: TenantSource) -> Tenant {
        let mut policy = self.options.policy.clone();
        if matches!(source, TenantSource::Resource(_)) {
            policy.local_plugins = false;
            policy.foreign_secrets = false;
            policy.ceilings = policy.tenant_ceilings;
            // A tenant's package call holds one of its call slots while it waits.
            policy.package_deadline = policy.package_deadline.min(TENANT_PACKAGE_CEILING);
            policy.capabilities = self.options.resource_capabilities;
            // No list: a Blueprint resource calls out nowhere.
            policy.egress = Some(self.options.tenant_egress.clone().unwrap_or_else(|| {
                inrun_reconcilers::egress::Egress::new(&[], Vec::new())
                    .expect("an empty allowlist parses")
            }));
        }
        Tenant {
            acting: self.host_acting(&source, &inrun_blueprint::BudgetSpec::default()),
            source,
            policy,
            candidate: None,
            fingerprint: None,
            failed: None,
            assembly: None,
            running: BTreeMap::new(),
            error: None,
            reloads: 0,
            object: None,
            carried: BTreeMap::new(),
        }
    }

    pub(crate) async fn assemble(
        &self,
        policy: &Policy,
        acting: &Acting,
        blueprint: Blueprint,
    ) -> Result<Assembly, BlueprintError> {
        Assembly::build(
            blueprint,
            BuildContext {
                plugins: &acting.plugins,
                services: &acting.services,
                policy,
            },
        )
        .await
    }

    pub(crate) fn is_closing(&self) -> bool {
        *self.closing.borrow()
    }

    /// `work`, unless the fleet starts shutting down first.
    pub(crate) async fn until_closing<T>(
        &self,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        let mut closing = self.closing.subscribe();
        tokio::select! {
            () = async {
                let _ = closing.wait_for(|c| *c).await;
            } => None,
            out = work => Some(out),
        }
    }

    /// Serves every tenant until `shutdown` turns true, then stops every controller
    /// (reconciles in flight finish).
    ///
    /// # Errors
    /// [`FleetError`] when the `--blueprint` tenant cannot start (a missing CRD, missing
    /// permissions): with a single Blueprint there is nothing else to serve.
    pub async fn run(
        self: Arc<Self>,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), FleetError> {
        self.start_own().await?;
        let (events_tx, mut events) = mpsc::unbounded_channel();
        let watch_task = if self.options.resources {
            resources::ensure_crd(
                &self.shared.client,
                self.shared.install(self.options.install_crds),
            )
            .await
            .map_err(FleetError::Resources)?;
            Some(tokio::spawn(resources::watch(
                self.shared.client.clone(),
                events_tx,
            )))
        } else {
            drop(events_tx);
            None
        };
        self.sync_tenant_files().await;
        let interval = self.options.reload;
        // Checking plugin sources may take as long as a registry makes it: a task per
        // tenant, one check at a time each, so a slow registry holds up only its tenant's.
        let mut polling: BTreeMap<TenantSource, JoinHandle<()>> = BTreeMap::new();
        // One ticker for the whole loop: a sleep made anew each turn would be pushed back
        // by every event, so a tenant touching its Blueprint resource every few seconds
        // would stop reloads, retries and plugin polls for every tenant.
        let mut ticker = interval.map(|d| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        loop {
            let tick = async {
                match ticker.as_mut() {
                    Some(t) => {
                        t.tick().await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = async {
                    // The guard `wait_for` returns is not Send: drop it here.
                    let _ = shutdown.wait_for(|s| *s).await;
                } => break,
                Some(event) = events.recv() => self.resource_event(event),
                () = tick => {
                    self.reload_files().await;
                    self.recheck_consent().await;
                    self.retry_resources().await;
                    self.poll_plugins(&mut polling).await;
                }
            }
        }
        self.shut_down(watch_task, polling).await;
        Ok(())
    }

    /// Starts the `--blueprint` tenant (loaded first if the fleet has not loaded it yet),
    /// prepared without the tenants lock as any tenant's start.
    ///
    /// # Errors
    /// [`FleetError`] when it cannot start: with a single Blueprint there is nothing else
    /// to serve.
    async fn start_own(&self) -> Result<(), FleetError> {
        let Some(path) = &self.options.blueprint else {
            return Ok(());
        };
        let source = TenantSource::File(path.clone());
        let loaded = self.tenants.lock().await.contains_key(&source);
        if !loaded {
            self.load_initial().await?;
        }
        // Prepared without the tenants lock, as any tenant's start.
        let (serving, policy, fresh) = {
            let tenants = self.tenants.lock().await;
            let tenant = tenants.get(&source);
            (
                tenant.and_then(|t| Some((t.assembly.clone()?, t.acting.clone()))),
                tenant.map(|t| t.policy.clone()).unwrap_or_default(),
                tenant.is_none_or(|t| t.running.is_empty()),
            )
        };
        let prepared = match &serving {
            Some((assembly, acting)) => {
                Some(runtime::prepare(&acting.shared, assembly, self.options.install_crds).await)
            }
            None => None,
        };
        // Starting (not coming back to lead with controllers still running): rollouts
        // recorded under way go on.
        let resumed = match (&serving, fresh) {
            (Some((assembly, acting)), true) => self.resumed(&policy, acting, assembly).await,
            _ => crate::load::Resumed::new(),
        };
        let mut tenants = self.tenants.lock().await;
        if let Some(tenant) = tenants.remove(&source) {
            let mut tenant = tenant;
            let started = match (serving, prepared) {
                (Some((a, acting)), Some(Ok(kinds))) => {
                    Self::serve(&mut tenant, &acting, a, kinds, &tenants, &resumed)
                        .map_or(Ok(()), Err)
                }
                (_, Some(Err(e))) => Err(FleetError::from(e)),
                _ => Ok(()),
            };
            self.publish(&tenant);
            tenants.insert(source, tenant);
            started?;
        }
        Ok(())
    }

    /// Stops the supervisor's tasks, lets loads in flight give up, and stops every
    /// tenant's controllers (reconciles in flight finish).
    async fn shut_down(
        &self,
        watch_task: Option<JoinHandle<()>>,
        polling: BTreeMap<TenantSource, JoinHandle<()>>,
    ) {
        if let Some(task) = watch_task {
            task.abort();
        }
        for task in polling.into_values() {
            task.abort();
        }
        // Loads in flight give up (none starts a controller now); then every tenant stops.
        self.closing.send_replace(true);
        let jobs = std::mem::take(&mut *self.jobs.lock().unwrap_or_else(|p| p.into_inner()));
        for job in jobs {
            let _ = job.await;
        }
        let mut tenants = self.tenants.lock().await;
        // Every controller of every tenant stops starting reconciles at once (a lost lease
        // must not leave some writing while others drain); then passes in flight finish.
        for running in tenants.values().flat_map(|t| t.running.values()) {
            let _ = running.stop.send(true);
        }
        for tenant in tenants.values_mut() {
            Self::stop_all(tenant).await;
            self.publish(tenant);
        }
    }
}
