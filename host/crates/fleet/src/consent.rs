//! Whom a tenant acts as: its ServiceAccount (named, or derived from a Blueprint
//! resource's name), asked for its consent before and at every check after.

use crate::serving::stop;
use crate::state::*;

impl Fleet {
    /// Whom `blueprint` of `tenant` acts as: its `spec.serviceAccount`, for a Blueprint
    /// resource the one the operator's pattern derives from its name, or (for a file) the
    /// host itself; a Blueprint resource's only with the ServiceAccount's consent. The tenant's
    /// current clients when that did not change.
    ///
    /// # Errors
    /// [`IdentityError`] for a Blueprint resource with neither, one whose ServiceAccount
    /// does not admit it, or when the host cannot act as the ServiceAccount.
    pub(super) async fn acting(
        &self,
        source: &TenantSource,
        current: &Acting,
        candidate: Option<&Acting>,
        blueprint: &Blueprint,
    ) -> Result<Acting, IdentityError> {
        let identity = self.identity_of(source, blueprint)?;
        // A Blueprint resource acts as a ServiceAccount only with its consent, named or
        // derived from the Blueprint's name: otherwise one tenant could name another's, or
        // take the name another's ServiceAccount was made for before that one exists.
        if let (TenantSource::Resource(name), Some(sa)) = (source, &identity) {
            inrun_runtime::impersonation::admits(&self.shared.client, sa, name, None).await?;
        }
        let budget = &blueprint.spec.runtime.budget;
        if identity == current.identity && *budget == current.budget {
            return Ok(current.clone());
        }
        if let Some(candidate) = candidate.filter(|c| c.identity == identity && c.budget == *budget)
        {
            return Ok(candidate.clone());
        }
        let Some(sa) = identity else {
            return Ok(self.host_acting(source, budget));
        };
        let mut shared = self.write_limited(source, self.shared.acting_as(&sa)?, budget);
        let secrets: Arc<dyn inrun_reconcilers::secrets::Secrets> = Arc::new(
            inrun_reconcilers::secrets::KubeSecrets::new(shared.client.clone()),
        );
        let sources = self.services.sources.with_secrets(secrets.clone());
        let mut services = self.services.clone();
        services.secrets = secrets;
        services.sources = sources.clone();
        services.cluster = Arc::new(inrun_runtime::WatchCache::new(shared.client.clone()));
        let plugins = self.plugin_set(source, budget, sources);
        shared.host_memory = plugins.engine().host_memory();
        Ok(Acting {
            identity: Some(sa),
            shared,
            services,
            budget: budget.clone(),
            plugins,
        })
    }

    /// The ServiceAccount `blueprint` of `source` names, or for a Blueprint resource that
    /// names none the one derived from its name; `None`, a file's acts as the host.
    ///
    /// # Errors
    /// [`IdentityError`] for a Blueprint resource with neither, or a ServiceAccount outside
    /// the namespaces kept for tenants' identities.
    fn identity_of(
        &self,
        source: &TenantSource,
        blueprint: &Blueprint,
    ) -> Result<Option<ServiceAccountRef>, IdentityError> {
        let identity = match (source, &blueprint.spec.service_account) {
            (_, Some(sa)) => Some(sa.clone()),
            (TenantSource::File(_), None) => None,
            (TenantSource::Resource(name), None) => {
                let Some(pattern) = &self.options.default_tenant_service_account else {
                    return Err(IdentityError::Unnamed);
                };
                Some(
                    pattern
                        .for_blueprint(name)
                        .map_err(IdentityError::Derived)?,
                )
            }
        };
        if let (TenantSource::Resource(_), Some(sa), Some(allowed)) =
            (source, &identity, &self.options.tenant_identity_namespaces)
        {
            let derived = self
                .options
                .default_tenant_service_account
                .as_ref()
                .map(|p| p.namespace.as_str());
            if !allowed.contains(&sa.namespace) && derived != Some(sa.namespace.as_str()) {
                let kept: Vec<&str> = allowed.iter().map(String::as_str).chain(derived).collect();
                return Err(IdentityError::NamespaceNotKept {
                    sa: sa.clone(),
                    kept: kept.join(", "),
                });
            }
        }
        Ok(identity)
    }

    /// Asks again, for every Blueprint resource serving as a ServiceAccount (named or
    /// derived), whether that ServiceAccount still admits it
    /// ([`inrun_runtime::impersonation::admits`]). One whose consent is gone stops serving (its
    /// controllers stop; its CRDs and CRs stay) and is refused with `NoIdentity`; it serves
    /// again once admitted, at a later check.
    pub(super) async fn recheck_consent(self: &Arc<Self>) {
        // The uid the watch told with the Blueprint: one read (the ServiceAccount) a check.
        let serving: Vec<(TenantSource, ServiceAccountRef, Option<String>)> = self
            .tenants
            .lock()
            .await
            .values()
            .filter(|t| t.error.is_none() && matches!(t.source, TenantSource::Resource(_)))
            .filter(|t| t.assembly.is_some())
            .filter_map(|t| {
                let uid = t.object.as_ref().and_then(|o| o.uid.clone());
                Some((t.source.clone(), t.acting.identity.clone()?, uid))
            })
            .collect();
        for (source, sa, uid) in serving {
            let TenantSource::Resource(name) = &source else {
                continue;
            };
            let admitted = inrun_runtime::impersonation::admits(
                &self.shared.client,
                &sa,
                name,
                uid.as_deref(),
            )
            .await;
            let Err(why) = admitted else {
                continue;
            };
            // Into the tenant's lane, after whatever it is doing: a newer Blueprint may have
            // changed its identity meanwhile.
            self.enqueue(source.clone(), move |fleet| async move {
                fleet.withdraw(source, sa, why).await;
            });
        }
    }

    /// Stops the tenant of `source` serving, if it still acts as `sa`: its consent is gone.
    pub(super) async fn withdraw(
        &self,
        source: TenantSource,
        sa: ServiceAccountRef,
        why: IdentityError,
    ) {
        let (object, stopped) = {
            let mut tenants = self.tenants.lock().await;
            let Some(tenant) = tenants.get_mut(&source) else {
                return;
            };
            if tenant.acting.identity.as_ref() != Some(&sa) || tenant.error.is_some() {
                return;
            }
            let message = inrun_contract::errors::chain(&FleetError::Identity(why));
            tracing::error!(tenant = %source, error = %message, "consent withdrawn; the tenant stops serving");
            let stopped: Vec<Running> = std::mem::take(&mut tenant.running).into_values().collect();
            tenant.assembly = None;
            tenant.fingerprint = None;
            tenant.failed = None;
            tenant.error = Some(message);
            self.publish(tenant);
            (tenant.object.clone(), stopped)
        };
        for running in &stopped {
            let _ = running.stop.send(true);
        }
        for running in stopped {
            stop(running).await;
        }
        if let Some(object) = object {
            let message = self
                .tenants
                .lock()
                .await
                .get(&source)
                .and_then(|t| t.error.clone())
                .unwrap_or_default();
            self.report(
                &object,
                Err(Refusal {
                    reason: "NoIdentity",
                    message,
                }),
                Vec::new(),
            )
            .await;
        }
    }
}
