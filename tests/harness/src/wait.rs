//! Polling with a deadline — the only way tests here wait — and installing CRDs.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Client, ResourceExt};

/// A deadline that is generous for anything a test waits on against the local API server.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The field manager [`install_crd`] applies with.
pub const FIELD_MANAGER: &str = "inrun-testenv";

/// A condition that did not hold before its deadline.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {after:?} waiting for {what}")]
pub struct Timeout {
    /// What was being waited for, as given to [`wait_for`].
    pub what: String,
    /// The deadline that passed.
    pub after: Duration,
}

/// Calls `check` until it returns `Some`, backing off from 10 ms to 200 ms between calls,
/// and gives up after `timeout` (counting the time `check` itself takes).
///
/// # Errors
///
/// [`Timeout`] naming `what` when the deadline passes first.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, Timeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let timed_out = || Timeout {
        what: what.to_owned(),
        after: timeout,
    };
    let mut delay = Duration::from_millis(10);
    loop {
        match tokio::time::timeout_at(deadline, check()).await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(_) => return Err(timed_out()),
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Err(timed_out());
        }
        tokio::time::sleep(delay.min(deadline - now)).await;
        delay = (delay * 2).min(Duration::from_millis(200));
    }
}

/// Failures to install a CRD.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The API server refused the CRD.
    #[error("could not apply CRD {name}")]
    Apply {
        /// The CRD's name.
        name: String,
        /// The refusal.
        #[source]
        source: kube::Error,
    },
    /// The CRD serves no version, so there is nothing to wait for.
    #[error("CRD {0} serves no version")]
    NoServedVersion(String),
    /// The CRD was not established, or its resource not served, in time.
    #[error("CRD {name} is not ready")]
    NotReady {
        /// The CRD's name.
        name: String,
        /// The deadline that passed.
        #[source]
        source: Timeout,
    },
}

/// Creates or updates `crd` by server-side apply (field manager [`FIELD_MANAGER`]) and
/// waits until it is `Established` and a list of its first served version succeeds, so
/// the caller can create objects at once. Safe to call from several tests at a time.
///
/// # Errors
///
/// When the API server refuses the CRD or it is not ready within [`DEFAULT_TIMEOUT`].
pub async fn install_crd(
    client: &Client,
    crd: &CustomResourceDefinition,
) -> Result<CustomResourceDefinition, CrdError> {
    let name = crd.name_any();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(crd),
    )
    .await
    .map_err(|source| CrdError::Apply {
        name: name.clone(),
        source,
    })?;

    let not_ready = |source| CrdError::NotReady {
        name: name.clone(),
        source,
    };
    let established = wait_for(
        &format!("CRD {name} to be Established"),
        DEFAULT_TIMEOUT,
        || {
            let crds = crds.clone();
            let name = name.clone();
            async move {
                let crd = crds.get(&name).await.ok()?;
                let conditions = crd.status.as_ref()?.conditions.as_ref()?;
                let established = conditions
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                established.then_some(crd)
            }
        },
    )
    .await
    .map_err(not_ready)?;

    let spec = &established.spec;
    let version = spec
        .versions
        .iter()
        .find(|v| v.served)
        .ok_or_else(|| CrdError::NoServedVersion(name.clone()))?;
    let gvk = GroupVersionKind::gvk(&spec.group, &version.name, &spec.names.kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, &spec.names.plural);
    let objects = Api::<DynamicObject>::all_with(client.clone(), &resource);
    wait_for(
        &format!("{} to be served", spec.names.plural),
        DEFAULT_TIMEOUT,
        || {
            let objects = objects.clone();
            async move { objects.list(&ListParams::default().limit(1)).await.ok() }
        },
    )
    .await
    .map_err(not_ready)?;
    Ok(established)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_first_value_the_check_gives() {
        let mut calls = 0;
        let value = wait_for("the third call", DEFAULT_TIMEOUT, || {
            calls += 1;
            let done = calls == 3;
            async move { done.then_some("done") }
        })
        .await
        .expect("the check succeeds on its third call");
        assert_eq!((value, calls), ("done", 3));
    }

    #[tokio::test]
    async fn wait_for_gives_up_at_the_deadline_naming_what_it_waited_for() {
        let err = wait_for("nothing", Duration::from_millis(50), || async {
            None::<()>
        })
        .await
        .expect_err("a check that never succeeds times out");
        assert_eq!(err.to_string(), "timed out after 50ms waiting for nothing");
    }
}
