//! Blueprint resources as tenants: watch events into lanes, loads reported in the
//! resource's status, refused ones retried at every check.

use crate::files::fingerprint;
use crate::state::*;

impl Fleet {
    /// Queues what a change of `Blueprint` resources asks for, in the lanes of the
    /// tenants concerned.
    pub(super) fn resource_event(self: &Arc<Self>, event: resources::Event) {
        match event {
            resources::Event::Apply(object) => {
                let source = TenantSource::Resource(object.name.clone());
                self.enqueue(source.clone(), move |fleet| async move {
                    fleet.apply_resource(source, object).await;
                });
            }
            resources::Event::Delete(name) => {
                self.statuses
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
                self.enqueue_removal(TenantSource::Resource(name));
            }
            resources::Event::Present(names) => {
                let gone: Vec<TenantSource> = self
                    .lanes
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .keys()
                    .filter(|s| matches!(s, TenantSource::Resource(n) if !names.contains(n)))
                    .cloned()
                    .collect();
                for source in gone {
                    self.enqueue_removal(source);
                }
            }
        }
    }

    /// Loads a `Blueprint` resource's tenant and reports the outcome in its status.
    pub(super) async fn apply_resource(&self, source: TenantSource, object: resources::Object) {
        let print = fingerprint(&object.text);
        let before = {
            let tenants = self.tenants.lock().await;
            if let Some(t) = tenants.get(&source)
                && (t.fingerprint == Some(print) || t.failed == Some(print))
            {
                return;
            }
            tenants.get(&source).and_then(|t| t.error.clone())
        };
        let loaded = blueprint::from_str(&object.text, &source.to_string());
        let Some(result) = self.load_tenant(source.clone(), print, loaded).await else {
            return;
        };
        let mut tenants = self.tenants.lock().await;
        // A retried refusal with the same message is already in the status.
        if let Err(refusal) = &result
            && before.as_ref() == Some(&refusal.message)
            && tenants
                .get(&source)
                .is_some_and(|t| t.object.as_ref() == Some(&object))
        {
            return;
        }
        let crds = match tenants.get_mut(&source) {
            Some(t) => {
                t.object = Some(object.clone());
                t.running.keys().cloned().collect()
            }
            None => Vec::new(),
        };
        drop(tenants);
        self.report(&object, result, crds).await;
    }

    /// Tries again the resource tenants whose Blueprint was refused.
    pub(super) async fn retry_resources(self: &Arc<Self>) {
        let retry: Vec<resources::Object> = self
            .tenants
            .lock()
            .await
            .values()
            .filter(|t| t.failed.is_none() && t.error.is_some())
            .filter_map(|t| t.object.clone())
            .collect();
        for object in retry {
            let source = TenantSource::Resource(object.name.clone());
            // Only into an idle lane: a job there (a watch event, perhaps with a newer
            // document than this one) goes first and reports; the next check retries.
            self.enqueue_if_idle(source.clone(), move |fleet| async move {
                fleet.apply_resource(source, object).await;
            });
        }
    }
}
