//! Where a rollout is kept for people and tools: a Lease the host owns in its namespace
//! (where package CRs' identity locks live), named after the CRD, whose annotation holds
//! the rollout as [`super::RolloutView`] shows it. `inrun rollout status` reads it;
//! `inrun rollout pause|resume|promote|abort` writes a command beside it, which the
//! driver carries out at its next look and clears.

use k8s_openapi::api::coordination::v1::Lease;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use super::RolloutView;

/// The label every rollout's Lease carries.
pub const LABEL: &str = "inrun.dev/rollout";
/// The annotation holding the rollout (JSON).
pub const STATE: &str = "inrun.dev/rollout";
/// The annotation a person's command is written to.
pub const COMMAND: &str = "inrun.dev/rollout-command";
/// The annotation holding the version before (`{"source": FILE, "blueprint": JSON}`).
pub const PREVIOUS: &str = "inrun.dev/rollout-previous";
/// The field manager the host writes the Lease with.
const MANAGER: &str = "inrun-rollout";

/// What a person may tell a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Stop where it is: no CR moves until resumed.
    Pause,
    /// Go on from where it was paused, the step's pause counted again.
    Resume,
    /// Put every CR on the new version now.
    Promote,
    /// Put every CR back on the old version now.
    Abort,
}

impl Command {
    /// The command's word, as the annotation holds it.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Promote => "promote",
            Command::Abort => "abort",
        }
    }

    /// The annotation's text telling the rollout to `to` this: a command given for one
    /// rollout is never carried out by a later one.
    pub fn for_version(self, to: &str) -> String {
        format!("{} {to}", self.as_str())
    }

    /// The command `word` names.
    pub fn parse(word: &str) -> Option<Command> {
        [
            Command::Pause,
            Command::Resume,
            Command::Promote,
            Command::Abort,
        ]
        .into_iter()
        .find(|c| c.as_str() == word)
    }
}

/// The Lease name of `crd`'s rollout: `inrun-rollout-` and a hash of the CRD's name (a
/// CRD's name can be longer than a Lease's may be).
pub fn lease_name(crd: &str) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(crd.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("inrun-rollout-{hex}")
}

/// A rollout's Lease: where it is written, and through which client (the host's own).
#[derive(Clone)]
pub struct Record {
    api: Api<Lease>,
    name: String,
    client: Client,
}

impl Record {
    /// The Lease of `crd`'s rollout in `namespace`, written by `client`.
    pub fn new(client: Client, namespace: &str, crd: &str) -> Record {
        Record {
            api: Api::namespaced(client.clone(), namespace),
            name: lease_name(crd),
            client,
        }
    }

    /// Shows `view` on the `Blueprint` resource `blueprint` too, as its
    /// `status.rollouts.<crd>` (server-side apply of the status, a field manager for each
    /// CRD, so each rollout's entry stands beside the others and the `Accepted`
    /// condition); a failure is logged.
    pub async fn show_on(&self, blueprint: &str, view: &RolloutView) {
        let api: Api<kube::api::DynamicObject> =
            Api::all_with(self.client.clone(), &crate::kinds::blueprint_resource());
        let patch = serde_json::json!({
            "apiVersion": "inrun.dev/v1alpha1",
            "kind": "Blueprint",
            "status": {"rollouts": {view.crd.clone(): view}},
        });
        let manager = format!("{MANAGER}-{}", &self.name["inrun-rollout-".len()..]);
        if let Err(e) = api
            .patch_status(
                blueprint,
                &PatchParams::apply(&manager).force(),
                &Patch::Apply(&patch),
            )
            .await
        {
            tracing::warn!(%blueprint, crd = %view.crd, error = %e, "could not show the rollout on its Blueprint");
        }
    }

    /// Writes `view` and the version before, `previous` (server-side apply); a failure is
    /// logged.
    pub async fn write(&self, view: &RolloutView, previous: &(String, String)) {
        let before = serde_json::json!({"source": previous.0, "blueprint": previous.1});
        let lease = serde_json::json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "labels": {LABEL: "true", "app.kubernetes.io/managed-by": "inrun"},
                "annotations": {
                    STATE: serde_json::to_string(view).unwrap_or_default(),
                    PREVIOUS: before.to_string(),
                },
            },
        });
        if let Err(e) = self
            .api
            .patch(
                &self.name,
                &PatchParams::apply(MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await
        {
            tracing::warn!(crd = %view.crd, error = %e, "could not record the rollout");
        }
    }

    /// The rollout recorded, and the version before it (the file its relative locations
    /// resolve against, the Blueprint text); `None` when there is none, or it cannot be
    /// read.
    pub async fn read(&self) -> Option<(RolloutView, String, String)> {
        let lease = match self.api.get_opt(&self.name).await {
            Ok(lease) => lease?,
            Err(e) => {
                tracing::warn!(lease = %self.name, error = %e, "could not read a rollout's record");
                return None;
            }
        };
        let annotations = lease.metadata.annotations?;
        let view: RolloutView = serde_json::from_str(annotations.get(STATE)?).ok()?;
        let before: serde_json::Value = serde_json::from_str(annotations.get(PREVIOUS)?).ok()?;
        let source = before["source"].as_str()?.to_string();
        let text = before["blueprint"].as_str()?.to_string();
        Some((view, source, text))
    }

    /// The command a person left, if any, with the new version it was given for (`COMMAND
    /// TO`, as [`Command::for_version`] writes it); it is cleared as it is read.
    pub async fn take_command(&self) -> Option<(Command, String)> {
        let lease = self.api.get_opt(&self.name).await.ok()??;
        let text = lease.metadata.annotations?.get(COMMAND)?.clone();
        let clear = serde_json::json!({"metadata": {"annotations": {COMMAND: null}}});
        if let Err(e) = self
            .api
            .patch(&self.name, &PatchParams::default(), &Patch::Merge(&clear))
            .await
        {
            tracing::warn!(lease = %self.name, error = %e, "could not clear a rollout command");
        }
        let (word, to) = text.split_once(' ').unwrap_or((text.as_str(), ""));
        let command = Command::parse(word);
        if command.is_none() {
            tracing::warn!(lease = %self.name, %word, "an unknown rollout command was left");
        }
        command.map(|c| (c, to.to_string()))
    }
}
