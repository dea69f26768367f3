//! `inrun rollout status|pause|resume|promote|abort`: the rollouts a host carries, as
//! their Leases in the host's namespace show them, and the commands a person gives them
//! (written beside the rollout; the host carries one out within a second and clears it).

use std::path::PathBuf;

use anyhow::Context as _;
use inrun::runtime::rollout::record::{COMMAND, Command, LABEL, STATE, lease_name};
use inrun::runtime::rollout::{Phase, RolloutView};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};

/// `inrun rollout`.
#[derive(clap::Args)]
pub struct RolloutArgs {
    #[command(subcommand)]
    action: Action,
    /// The host's namespace, where it keeps its rollouts (its `--lock-namespace`; default:
    /// `$POD_NAMESPACE`, else the kubeconfig context's namespace).
    #[arg(long, short = 'n', global = true)]
    namespace: Option<String>,
    /// The kubeconfig file (default: `$KUBECONFIG`, then `~/.kube/config`, then in-cluster).
    #[arg(long, global = true)]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: its current one).
    #[arg(long, global = true)]
    context: Option<String>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// Every rollout (or the one of CRD), where it stands.
    Status {
        /// The CRD (`plural.group`).
        crd: Option<String>,
        /// `text` or `json`.
        #[arg(long, short = 'o', default_value = "text")]
        output: String,
    },
    /// Stop the rollout of CRD where it is: no CR moves until it is resumed.
    Pause {
        /// The CRD (`plural.group`).
        crd: String,
    },
    /// Go on with the rollout of CRD from where it was paused.
    Resume {
        /// The CRD (`plural.group`).
        crd: String,
    },
    /// Put every CR of CRD on the new version now.
    Promote {
        /// The CRD (`plural.group`).
        crd: String,
    },
    /// Put every CR of CRD back on the old version now.
    Abort {
        /// The CRD (`plural.group`).
        crd: String,
    },
}

/// Runs `inrun rollout`.
///
/// # Errors
/// The cluster cannot be reached, or has no rollout of the CRD named.
pub(super) fn rollout(runtime: &tokio::runtime::Runtime, args: &RolloutArgs) -> anyhow::Result<()> {
    runtime.block_on(async {
        let connection = inrun::kubeconfig::connect(&inrun::kubeconfig::ConnectOptions {
            kubeconfig: args.kubeconfig.clone(),
            context: args.context.clone(),
            request_timeout: None,
        })
        .await?;
        let namespace = inrun::ring::settings::host_namespace(
            args.namespace.clone(),
            |k| std::env::var(k).ok(),
            Some(&connection.config.default_namespace),
        );
        let leases =
            ApiResource::from_gvk(&GroupVersionKind::gvk("coordination.k8s.io", "v1", "Lease"));
        let api: Api<DynamicObject> = Api::namespaced_with(connection.client, &namespace, &leases);
        let (crd, command) = match &args.action {
            Action::Status { crd, output } => {
                let views = views(&api, crd.as_deref()).await?;
                print!("{}", report(&views, output == "json"));
                return Ok(());
            }
            Action::Pause { crd } => (crd, Command::Pause),
            Action::Resume { crd } => (crd, Command::Resume),
            Action::Promote { crd } => (crd, Command::Promote),
            Action::Abort { crd } => (crd, Command::Abort),
        };
        let name = lease_name(crd);
        let view = views(&api, Some(crd))
            .await?
            .into_iter()
            .next()
            .with_context(|| format!("no rollout of {crd} in namespace {namespace}"))?;
        // Only a rollout under way takes a command; one ended says so.
        if !matches!(view.phase, Phase::Progressing | Phase::Paused) {
            anyhow::bail!(
                "the rollout of {crd} is {:?}: there is nothing to {}",
                view.phase,
                command.as_str()
            );
        }
        let patch = serde_json::json!({"metadata": {"annotations": {COMMAND: command.for_version(&view.to)}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("telling the rollout of {crd} to {}", command.as_str()))?;
        println!(
            "the rollout of {crd}: {} asked; the host carries it out within a second",
            command.as_str()
        );
        Ok(())
    })
}

/// The rollouts recorded in `api`'s namespace (only `crd`'s, when named).
async fn views(api: &Api<DynamicObject>, crd: Option<&str>) -> anyhow::Result<Vec<RolloutView>> {
    let leases = api
        .list(&ListParams::default().labels(&format!("{LABEL}=true")))
        .await
        .context("listing the rollouts")?;
    let mut views: Vec<RolloutView> = leases
        .items
        .iter()
        .filter_map(|l| l.metadata.annotations.as_ref()?.get(STATE))
        .filter_map(|text| serde_json::from_str(text).ok())
        .filter(|v: &RolloutView| crd.is_none_or(|c| v.crd == c))
        .collect();
    views.sort_by(|a, b| a.crd.cmp(&b.crd));
    Ok(views)
}

/// `views` as a table (or JSON).
fn report(views: &[RolloutView], json: bool) -> String {
    use std::fmt::Write as _;
    if json {
        return serde_json::to_string_pretty(views).unwrap_or_default() + "\n";
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<40} {:<12} {:>6} {:>5} {:>7} {:>14} {:>14}",
        "CRD", "PHASE", "STEP", "%", "ON NEW", "NEW FAILED", "NEW READY"
    );
    for v in views {
        let _ = writeln!(
            out,
            "{:<40} {:<12} {:>6} {:>5} {:>7} {:>14} {:>14}",
            v.crd,
            format!("{:?}", v.phase),
            format!("{}/{}", v.step, v.steps),
            v.percent,
            v.on_new,
            format!("{}/{}", v.new.failures, v.new.passes),
            format!("{}/{}", v.new.ready, v.new.reconciled),
        );
        let _ = writeln!(out, "  from {}\n  to   {}", v.from, v.to);
        if let Some(why) = &v.verdict {
            let _ = writeln!(out, "  {why}");
        }
    }
    out
}
