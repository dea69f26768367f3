//! What `inrun plan` reads of a live cluster: each CRD's CRs (one LIST), their children
//! (one LIST per managed kind for every CR at once, by the owner label), and what a dry-run
//! apply of a child would store. Only GET, LIST and `dryRun=All` requests reach the API
//! server: a plan writes nothing.

use std::collections::BTreeMap;

use anyhow::Context as _;
use inrun::blueprint::CrdSpec;
use inrun::runtime::kinds::{Kind, Kinds, cr_resource};
use inrun::runtime::{OWNER_UID, RECONCILER_MANAGER};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;

/// A page of a LIST.
const PAGE: u32 = 500;

/// The cluster a plan reads, and the kinds it has resolved.
pub struct Cluster {
    pub client: Client,
    kinds: Kinds,
}

/// Which CRs a plan covers.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// Only this namespace's.
    pub namespace: Option<String>,
    /// Only those matching this label selector.
    pub selector: Option<String>,
}

impl Cluster {
    pub fn new(client: Client) -> Self {
        Cluster {
            client,
            kinds: Kinds::default(),
        }
    }

    /// `kind` of `api_version`, as the API server serves it.
    pub async fn kind(&self, api_version: &str, kind: &str) -> anyhow::Result<Kind> {
        Ok(self.kinds.resolve(&self.client, api_version, kind).await?)
    }

    /// Every CR of `crd` in `scope`, whole, a page at a time.
    ///
    /// # Errors
    /// When they cannot be listed.
    pub async fn crs(&self, crd: &CrdSpec, scope: &Scope) -> anyhow::Result<Vec<Value>> {
        let resource = cr_resource(crd);
        let api: Api<DynamicObject> = match &scope.namespace {
            Some(ns) if crd.scope == inrun::blueprint::Scope::Namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &resource)
            }
            _ => Api::all_with(self.client.clone(), &resource),
        };
        let mut params = ListParams::default().limit(PAGE);
        if let Some(selector) = &scope.selector {
            params = params.labels(selector);
        }
        let mut out = Vec::new();
        for item in list_all(&api, params)
            .await
            .with_context(|| format!("listing the CRs of {}", crd.crd_name()))?
        {
            let mut value = serde_json::to_value(&item)?;
            // A LIST answers items without their apiVersion and kind.
            value["apiVersion"] = resource.api_version.clone().into();
            value["kind"] = resource.kind.clone().into();
            out.push(value);
        }
        Ok(out)
    }

    /// Every object of `kinds` that carries the owner label, by the uid it names: the
    /// children of every CR, one LIST per kind (not per CR). A kind the server does not
    /// serve has none.
    ///
    /// # Errors
    /// When a kind's objects cannot be listed.
    pub async fn children(
        &self,
        kinds: &[(String, String)],
        namespace: Option<&str>,
    ) -> anyhow::Result<BTreeMap<String, Vec<Value>>> {
        let mut by_owner: BTreeMap<String, Vec<Value>> = BTreeMap::new();
        for (api_version, kind) in kinds {
            let Ok(resolved) = self.kind(api_version, kind).await else {
                continue;
            };
            let api: Api<DynamicObject> = match namespace {
                Some(ns) if resolved.namespaced => {
                    Api::namespaced_with(self.client.clone(), ns, &resolved.resource)
                }
                _ => Api::all_with(self.client.clone(), &resolved.resource),
            };
            let params = ListParams::default().labels(OWNER_UID).limit(PAGE);
            let items = list_all(&api, params)
                .await
                .with_context(|| format!("listing {kind} children"))?;
            for item in items {
                let Some(uid) = item.labels().get(OWNER_UID).cloned() else {
                    continue;
                };
                let mut value = serde_json::to_value(&item)?;
                value["apiVersion"] = api_version.clone().into();
                value["kind"] = kind.clone().into();
                by_owner.entry(uid).or_default().push(value);
            }
        }
        Ok(by_owner)
    }

    /// What the API server would store if the host applied `object` (marked as its
    /// owner's), as the host applies it: server-side apply with the host's field manager,
    /// forced, and `dryRun=All` so nothing is stored. Defaults, admission and conflicts
    /// with other managers show in the answer.
    ///
    /// # Errors
    /// The server's refusal (validation, admission, a forbidden kind).
    pub async fn dry_run(&self, object: &Value) -> anyhow::Result<Value> {
        let text = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or_default()
        };
        let kind = self.kind(text("/apiVersion"), text("/kind")).await?;
        let name = text("/metadata/name");
        let api: Api<DynamicObject> = match object
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
        {
            Some(ns) if kind.namespaced => {
                Api::namespaced_with(self.client.clone(), ns, &kind.resource)
            }
            _ => Api::all_with(self.client.clone(), &kind.resource),
        };
        let params = PatchParams::apply(RECONCILER_MANAGER).force().dry_run();
        let stored = api.patch(name, &params, &Patch::Apply(object)).await?;
        let mut value = serde_json::to_value(&stored)?;
        value["apiVersion"] = text("/apiVersion").into();
        value["kind"] = text("/kind").into();
        Ok(value)
    }
}

/// Every item of a LIST, following `continue` tokens.
async fn list_all(
    api: &Api<DynamicObject>,
    mut params: ListParams,
) -> Result<Vec<DynamicObject>, kube::Error> {
    let mut out = Vec::new();
    loop {
        let page = api.list(&params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}
