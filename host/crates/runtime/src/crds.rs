//! CustomResourceDefinitions from a Blueprint: generated manifests, installed on request,
//! and checked at startup so a missing CRD is a clear error rather than a silent watch.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use inrun_blueprint::CrdSpec;

/// Field manager for CRDs the host installs.
const INSTALLER: &str = "inrun-installer";

/// Why the CRDs are not ready.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The CRD is not on the API server and installing was not asked for.
    #[error(
        "CRD {name} is not installed; install it (inrun generate crds) or run with --install-crds"
    )]
    Missing {
        /// `plural.group`.
        name: String,
    },
    /// Reading or writing the CRD failed.
    #[error("CRD {name}")]
    Api {
        /// `plural.group`.
        name: String,
        /// The API error.
        #[source]
        source: inrun_reconcilers::api::ApiFailure,
    },
    /// The generated manifest is not a valid CRD object.
    #[error("CRD {name}: generated manifest is invalid")]
    Manifest {
        /// `plural.group`.
        name: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// The new manifest would strand live CRs, and the Blueprint does not allow it
    /// (`spec.allowBreakingSchemaChanges`).
    #[error(
        "CRD {name}: the new schema is a breaking change ({}); {} live CR(s) would no longer pass it{}; plan it with inrun plan, and set spec.allowBreakingSchemaChanges: true to install it anyway",
        .breaks.join("; "),
        .stranded,
        if .examples.is_empty() { String::new() } else { format!(", such as {}", .examples.join(", ")) }
    )]
    Breaking {
        /// `plural.group`.
        name: String,
        /// Each breaking change, as `path: what`.
        breaks: Vec<String>,
        /// How many listed CRs would no longer pass it.
        stranded: usize,
        /// The first few of them (`namespace/name`).
        examples: Vec<String>,
    },
    /// The CRD did not become Established in time.
    #[error("CRD {name} was not established within {}s", .timeout.as_secs())]
    NotEstablished {
        /// `plural.group`.
        name: String,
        /// How long we waited.
        timeout: Duration,
    },
}

/// Whether this replica installs CRDs.
#[derive(Debug, Clone)]
pub enum Install {
    /// Never: a CRD that is missing is an error.
    Never,
    /// Always (server-side apply, forced).
    Always,
    /// Only while `leading` is open (the replica holding the ring's leader Lease, under
    /// sharding); the others wait for the CRD it installs. A replica that comes to lead
    /// while waiting installs it itself.
    WhileLeading(inrun_ring::fence::Fence),
}

impl From<bool> for Install {
    fn from(install: bool) -> Self {
        if install {
            Install::Always
        } else {
            Install::Never
        }
    }
}

/// How long a replica that does not lead waits for the leader to install a CRD: a
/// leader's lease may have to expire first.
const LEADER_INSTALLS_WITHIN: Duration = Duration::from_secs(120);

/// What [`ensure`] does with a new manifest that would strand live CRs.
#[derive(Debug, Clone, Copy)]
pub enum OnBreaking<'a> {
    /// Installs it (`spec.allowBreakingSchemaChanges`, or CRDs the host itself owns).
    Install,
    /// Refuses it, recording a `BreakingSchemaChange` warning on the CRD as `instance`.
    Refuse {
        /// The replica that records the event.
        instance: &'a str,
    },
}

/// Makes sure every CRD exists: installs (server-side apply) as `install` says, else
/// fails on the first missing one. Waits until each is Established. A CRD already there
/// whose new manifest is a breaking change is refused before anything is installed,
/// unless `on_breaking` installs it.
///
/// # Errors
/// [`CrdError`] naming the CRD.
pub async fn ensure(
    client: &Client,
    crds: &[&CrdSpec],
    install: impl Into<Install>,
    on_breaking: OnBreaking<'_>,
) -> Result<(), CrdError> {
    let install = install.into();
    if let (OnBreaking::Refuse { instance }, false) =
        (on_breaking, matches!(install, Install::Never))
    {
        for crd in crds {
            if let Err(refused) = refuse_breaking(client, crd).await {
                say_refused(client, instance, &refused).await;
                return Err(refused.error);
            }
        }
    }
    for crd in crds {
        ensure_manifest(client, &crd.crd_name(), crd.manifest(), install.clone()).await?;
    }
    Ok(())
}

/// How many stranded CRs a refusal names.
const STRANDED_NAMED: usize = 3;

/// A CRD change refused, and the CRD it was refused on.
struct Refused {
    error: CrdError,
    /// The CRD as the API server holds it, when it was read.
    crd: Option<CustomResourceDefinition>,
}

impl From<CrdError> for Refused {
    fn from(error: CrdError) -> Self {
        Refused { error, crd: None }
    }
}

/// When each refusal was last recorded as an event, by CRD name and the refusal's text:
/// the fleet tries a refused Blueprint again at every check, and the same refusal is
/// recorded again only once [`SAID_AGAIN_AFTER`] has passed.
static SAID: std::sync::Mutex<Vec<(String, String, Instant)>> = std::sync::Mutex::new(Vec::new());

/// How long one refusal's event stands for every try after it.
const SAID_AGAIN_AFTER: Duration = Duration::from_secs(30 * 60);

/// Records a breaking change refused as a `BreakingSchemaChange` warning on its CRD (events
/// of cluster-scoped objects go to `default`), once per [`SAID_AGAIN_AFTER`]; a failure to
/// record is logged.
async fn say_refused(client: &Client, instance: &str, refused: &Refused) {
    let (CrdError::Breaking { name, .. }, Some(crd)) = (&refused.error, &refused.crd) else {
        return;
    };
    let note = refused.error.to_string();
    {
        let mut said = SAID
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        said.retain(|(_, _, at)| at.elapsed() < SAID_AGAIN_AFTER);
        if said.iter().any(|(n, t, _)| n == name && *t == note) {
            return;
        }
        said.push((name.clone(), note.clone(), Instant::now()));
    }
    let on = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("apiextensions.k8s.io/v1".into()),
        kind: Some("CustomResourceDefinition".into()),
        name: Some(name.clone()),
        uid: crd.metadata.uid.clone(),
        resource_version: crd.metadata.resource_version.clone(),
        ..Default::default()
    };
    crate::events::Events::new(client.clone(), instance.to_string())
        .record(&on, crate::events::Reason::BreakingSchemaChange, note)
        .await;
}

/// Refuses `crd`'s manifest when the CRD the API server holds would break by it
/// ([`inrun_blueprint::compat`]), counting the live CRs (listed at the version served now)
/// that would no longer pass.
///
/// # Errors
/// [`CrdError::Breaking`] (with the CRD held), or [`CrdError::Api`] when the CRD or its
/// CRs cannot be read.
async fn refuse_breaking(client: &Client, crd: &CrdSpec) -> Result<(), Refused> {
    let name = crd.crd_name();
    let api_err = |source: kube::Error| CrdError::Api {
        name: name.clone(),
        source: source.into(),
    };
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let Some(crd_held) = api.get_opt(&name).await.map_err(api_err)? else {
        return Ok(());
    };
    let held = serde_json::to_value(&crd_held).unwrap_or_default();
    let mut breaks = inrun_blueprint::compat::breaking_manifests(&held, &crd.manifest());
    if breaks.is_empty() {
        return Ok(());
    }
    let storage = held
        .pointer("/spec/versions")
        .and_then(serde_json::Value::as_array)
        .and_then(|v| v.iter().find(|v| v["storage"] == true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or(&crd.version)
        .to_string();
    let mut resource = crate::kinds::cr_resource(crd);
    resource.api_version = format!("{}/{storage}", crd.group);
    resource.version = storage;
    let crs: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &resource);
    let listed = crs
        .list(&kube::api::ListParams::default())
        .await
        .map_err(api_err)?;
    let values: Vec<serde_json::Value> = listed
        .items
        .iter()
        .map(|cr| serde_json::to_value(cr).unwrap_or_default())
        .collect();
    // A bound or rule tightened that no live CR breaks is no break.
    breaks.retain(|b| {
        !b.tightens_only()
            || values
                .iter()
                .any(|v| !inrun_blueprint::compat::stranded(v, std::slice::from_ref(b)).is_empty())
    });
    if breaks.is_empty() {
        return Ok(());
    }
    let mut stranded = 0;
    let mut examples = Vec::new();
    for (cr, value) in listed.items.iter().zip(&values) {
        if !inrun_blueprint::compat::stranded(value, &breaks).is_empty() {
            stranded += 1;
            if examples.len() < STRANDED_NAMED {
                let name = cr.metadata.name.clone().unwrap_or_default();
                examples.push(match &cr.metadata.namespace {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name,
                });
            }
        }
    }
    Err(Refused {
        error: CrdError::Breaking {
            name,
            breaks: breaks
                .iter()
                .map(|b| format!("{}: {}", b.path, b.what))
                .collect(),
            stranded,
            examples,
        },
        crd: Some(crd_held),
    })
}

/// Makes sure the CRD `name` exists, installing `manifest` (server-side apply) as
/// `install` says, and waits until it is Established.
///
/// # Errors
/// [`CrdError`] naming the CRD.
pub async fn ensure_manifest(
    client: &Client,
    name: &str,
    manifest: serde_json::Value,
    install: impl Into<Install>,
) -> Result<(), CrdError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = name.to_string();
    let api_err = |source: kube::Error| CrdError::Api {
        name: name.clone(),
        source: source.into(),
    };
    let apply = || async {
        let manifest: CustomResourceDefinition =
            serde_json::from_value(manifest.clone()).map_err(|source| CrdError::Manifest {
                name: name.clone(),
                source,
            })?;
        api.patch(
            &name,
            &PatchParams::apply(INSTALLER).force(),
            &Patch::Apply(&manifest),
        )
        .await
        .map_err(api_err)
        .map(|_| ())
    };
    match install.into() {
        Install::Always => apply().await?,
        Install::Never => {
            if api.get_opt(&name).await.map_err(api_err)?.is_none() {
                return Err(CrdError::Missing { name });
            }
        }
        Install::WhileLeading(leading) => {
            let deadline = Instant::now() + LEADER_INSTALLS_WITHIN;
            loop {
                if leading.is_open() {
                    apply().await?;
                    break;
                }
                if let Some(crd) = api.get_opt(&name).await.map_err(api_err)?
                    && established(&crd)
                {
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    return Err(CrdError::NotEstablished {
                        name,
                        timeout: LEADER_INSTALLS_WITHIN,
                    });
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
    wait_established(&api, &name, Duration::from_secs(30)).await
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        })
}

async fn wait_established(
    api: &Api<CustomResourceDefinition>,
    name: &str,
    timeout: Duration,
) -> Result<(), CrdError> {
    let deadline = Instant::now() + timeout;
    loop {
        let crd = api.get(name).await.map_err(|source| CrdError::Api {
            name: name.into(),
            source: source.into(),
        })?;
        if established(&crd) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(CrdError::NotEstablished {
                name: name.into(),
                timeout,
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
