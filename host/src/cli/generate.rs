//! `inrun generate`: the manifests a Blueprint needs in a cluster (its CRDs, the host's
//! RBAC or a tenant's), and the API Priority and Fairness objects for the host and its
//! tenants, as a YAML stream on standard output.

use std::path::PathBuf;

use clap::Subcommand;
use inrun::blueprint::{AccountPattern, Blueprint, ServiceAccountRef};
use inrun::generate::apf::{ApfOptions, Level};
use inrun::generate::rbac::RbacOptions;
use serde_json::Value;

use super::parse::{parse_account_pattern, parse_lease_name, parse_service_account};

/// Parsed once per invocation: its variants' sizes do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum GenerateCommand {
    /// The Blueprint's CustomResourceDefinitions (schema, status subresource, printer columns).
    Crds {
        /// The Blueprint: a YAML file or a directory of them.
        #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
        blueprint: PathBuf,
    },
    /// The least RBAC the host needs for the Blueprint: ClusterRole and binding, plus a Role
    /// and binding for the Lease when leader election is on.
    Rbac(RbacArgs),
    /// The `Blueprint` CustomResourceDefinition, for `inrun run --blueprint-resources`
    /// without `--install-crds`.
    BlueprintCrd,
    /// API Priority and Fairness (flowcontrol.apiserver.k8s.io/v1): a priority level and
    /// FlowSchema for the host's ServiceAccount, and one for the tenants' ServiceAccounts
    /// with a flow per tenant. The API server classifies the host's requests as the
    /// ServiceAccount it impersonates, so each tenant queues apart from the others.
    Apf(ApfArgs),
}

/// What `inrun generate apf` is given: the host's ServiceAccount and the tenants', as
/// `inrun generate rbac` and `inrun run` take them, and the levels' shares.
#[derive(clap::Args)]
pub struct ApfArgs {
    /// Namespace of the host's ServiceAccount.
    #[arg(
        long,
        short = 'n',
        env = "INRUN_NAMESPACE",
        default_value = "inrun-system"
    )]
    namespace: String,
    /// The ServiceAccount the host runs as.
    #[arg(long, env = "INRUN_SERVICE_ACCOUNT", default_value = "inrun")]
    service_account: String,
    /// The objects are named `<name>-host` and `<name>-tenants`.
    #[arg(long, env = "INRUN_APF_NAME", default_value = "inrun")]
    name: String,
    /// Tenants' ServiceAccounts (`namespace/name`, comma separated): those Blueprint
    /// files name, or any the host impersonates by name.
    #[arg(long, env = "INRUN_IMPERSONATE", value_delimiter = ',', value_parser = parse_service_account)]
    impersonate: Vec<ServiceAccountRef>,
    /// As `inrun run --default-tenant-service-account namespace/…{name}…`: every
    /// ServiceAccount of that namespace is a tenant's.
    #[arg(long, env = "INRUN_DEFAULT_TENANT_SERVICE_ACCOUNT", value_parser = parse_account_pattern)]
    default_tenant_service_account: Option<AccountPattern>,
    /// As `inrun run --tenant-identity-namespaces`: every ServiceAccount of these
    /// namespaces (comma separated) is a tenant's.
    #[arg(long, env = "INRUN_TENANT_IDENTITY_NAMESPACES", value_delimiter = ',')]
    tenant_identity_namespaces: Vec<String>,
    /// The host's nominal concurrency shares (the suggested levels hold 245 together).
    #[arg(long, default_value_t = Level::host().shares)]
    host_shares: u32,
    /// The tenants' nominal concurrency shares, for all tenants together.
    #[arg(long, default_value_t = Level::tenants().shares)]
    tenant_shares: u32,
    /// The most seats the tenants may borrow from idle levels, in percent of their own
    /// (0, the default: none, so that tenants together never take more than their
    /// shares; `none`: no limit).
    #[arg(long, default_value = "0", value_parser = parse_borrowing_limit)]
    tenant_borrowing_limit: BorrowingLimit,
}

/// A borrowing limit in percent; `None`: no limit.
#[derive(Debug, Clone, Copy)]
struct BorrowingLimit(Option<u32>);

/// A borrowing limit in percent, or `none` for no limit.
fn parse_borrowing_limit(text: &str) -> Result<BorrowingLimit, String> {
    match text {
        "none" => Ok(BorrowingLimit(None)),
        n => n
            .parse()
            .map(|n| BorrowingLimit(Some(n)))
            .map_err(|_| format!("{n:?} is neither a percentage nor `none`")),
    }
}

/// What `inrun generate rbac` is given.
#[derive(clap::Args)]
pub struct RbacArgs {
    /// The Blueprint: a YAML file or a directory of them.
    #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
    blueprint: PathBuf,
    /// Namespace of the ServiceAccount (and of the Lease unless the Blueprint names one).
    #[arg(
        long,
        short = 'n',
        env = "INRUN_NAMESPACE",
        default_value = "inrun-system"
    )]
    namespace: String,
    /// The ServiceAccount the host runs as.
    #[arg(long, env = "INRUN_SERVICE_ACCOUNT", default_value = "inrun")]
    service_account: String,
    /// Name of the roles and bindings (default `inrun`; with `--tenant`,
    /// `inrun-tenant-<Blueprint name>`).
    #[arg(long, env = "INRUN_RBAC_NAME")]
    name: Option<String>,
    /// Also grant creating and patching the CRDs (for `inrun run --install-crds`).
    #[arg(long, env = "INRUN_INSTALL_CRDS")]
    install_crds: bool,
    /// Also grant reading `Blueprint` resources and writing their status (for
    /// `inrun run --blueprint-resources`).
    #[arg(long, env = "INRUN_BLUEPRINT_RESOURCES")]
    blueprint_resources: bool,
    /// Also grant the leader-election Lease, as `runtime.leaderElection.enabled` does
    /// (for `inrun run --leader-elect`).
    #[arg(long, env = "INRUN_LEADER_ELECT")]
    leader_elect: bool,
    /// Also grant the sharding ring's Leases, as `runtime.sharding.enabled` does (for
    /// `inrun run --sharding`).
    #[arg(long, env = "INRUN_SHARDING")]
    sharding: bool,
    /// The Lease the Role names, as `inrun run --leader-elect-lease` (default: the
    /// Blueprint's `runtime.leaderElection.leaseName`, else `inrun`).
    #[arg(long, env = "INRUN_LEADER_ELECT_LEASE", value_parser = parse_lease_name)]
    leader_elect_lease: Option<String>,
    /// Also grant impersonating these ServiceAccounts (`namespace/name`, comma
    /// separated): tenants' identities, e.g. `inrun run --default-tenant-service-account`.
    #[arg(long, env = "INRUN_IMPERSONATE", value_delimiter = ',', value_parser = parse_service_account)]
    impersonate: Vec<ServiceAccountRef>,
    /// Also grant impersonating each Blueprint resource's own ServiceAccount, as
    /// `inrun run --default-tenant-service-account namespace/…{name}…` derives it (any in
    /// that namespace: their names come with the Blueprints). With `--tenant`, a
    /// Blueprint that names no `spec.serviceAccount` is granted as the one derived from
    /// its name.
    #[arg(long, env = "INRUN_DEFAULT_TENANT_SERVICE_ACCOUNT", value_parser = parse_account_pattern)]
    default_tenant_service_account: Option<AccountPattern>,
    /// Print instead what the tenant's ServiceAccount needs when the host acts as it:
    /// the Blueprint's `spec.serviceAccount`, else `--namespace`/`--service-account`.
    #[arg(long, env = "INRUN_TENANT")]
    tenant: bool,
    /// With `--tenant`: the namespaces its CRs and children are written in (comma
    /// separated; default: the ServiceAccount's own).
    #[arg(
        long,
        env = "INRUN_TENANT_NAMESPACES",
        value_delimiter = ',',
        requires = "tenant"
    )]
    tenant_namespaces: Vec<String>,
}

/// Prints the manifests `command` asks for.
///
/// # Errors
/// The Blueprint cannot be read or is invalid, or a derived ServiceAccount name is not one.
pub(super) fn generate(command: GenerateCommand) -> anyhow::Result<()> {
    let docs = match command {
        GenerateCommand::Crds { blueprint } => {
            inrun::generate::crds(&inrun::blueprint::load(&blueprint)?)
        }
        GenerateCommand::BlueprintCrd => vec![inrun::fleet::blueprint_crd()],
        GenerateCommand::Rbac(args) => rbac(args)?,
        GenerateCommand::Apf(args) => inrun::generate::apf::manifests(&apf_options(args))?,
    };
    print!("{}", inrun::generate::yaml_stream(&docs)?);
    Ok(())
}

/// The host's RBAC for the Blueprint, or with `--tenant` what the tenant's ServiceAccount
/// needs.
fn rbac(args: RbacArgs) -> anyhow::Result<Vec<Value>> {
    let mut blueprint = inrun::blueprint::load(&args.blueprint)?;
    // `inrun run --leader-elect` turns leader election on over the Blueprint.
    blueprint.spec.runtime.leader_election.enabled |= args.leader_elect;
    // `inrun run --sharding` turns sharding on over the Blueprint.
    blueprint.spec.runtime.sharding.enabled |= args.sharding;
    // ... and `--leader-elect-lease` names its Lease over the Blueprint.
    if let Some(lease) = &args.leader_elect_lease {
        blueprint.spec.runtime.leader_election.lease_name = lease.clone();
    }
    if !args.tenant {
        return Ok(inrun::generate::rbac::manifests(
            &blueprint,
            &options(&blueprint, args),
        ));
    }
    let sa = tenant_account(&blueprint, &args)?;
    let namespaces = args.tenant_namespaces.clone();
    let options = options(&blueprint, args);
    Ok(inrun::generate::rbac::tenant_manifests(
        &blueprint,
        &sa,
        &namespaces,
        &options,
    ))
}

/// The ServiceAccount a tenant's host acts as: the Blueprint's `spec.serviceAccount`, else
/// the one `--default-tenant-service-account` derives from its name, else
/// `--namespace`/`--service-account`.
fn tenant_account(blueprint: &Blueprint, args: &RbacArgs) -> anyhow::Result<ServiceAccountRef> {
    let derived = match &args.default_tenant_service_account {
        Some(pattern) if blueprint.spec.service_account.is_none() => {
            Some(pattern.for_blueprint(&blueprint.metadata.name)?)
        }
        _ => None,
    };
    Ok(blueprint
        .spec
        .service_account
        .clone()
        .or(derived)
        .unwrap_or_else(|| ServiceAccountRef {
            namespace: args.namespace.clone(),
            name: args.service_account.clone(),
        }))
}

/// The roles' and bindings' names and what they also grant; named `inrun`, or
/// `inrun-tenant-<Blueprint name>` with `--tenant`, unless `--name` says.
fn options(blueprint: &Blueprint, args: RbacArgs) -> RbacOptions {
    let name = args.name.unwrap_or_else(|| {
        if args.tenant {
            format!("inrun-tenant-{}", blueprint.metadata.name)
        } else {
            "inrun".into()
        }
    });
    RbacOptions {
        name,
        namespace: args.namespace,
        service_account: args.service_account,
        install_crds: args.install_crds,
        blueprint_resources: args.blueprint_resources,
        impersonate: args.impersonate,
        tenant_accounts: args.default_tenant_service_account,
    }
}

/// The APF options `args` give: the default levels with the shares asked for.
fn apf_options(args: ApfArgs) -> ApfOptions {
    ApfOptions {
        name: args.name,
        namespace: args.namespace,
        service_account: args.service_account,
        impersonate: args.impersonate,
        tenant_accounts: args.default_tenant_service_account,
        tenant_identity_namespaces: args.tenant_identity_namespaces,
        host: Level {
            shares: args.host_shares,
            ..Level::host()
        },
        tenants: Level {
            shares: args.tenant_shares,
            borrowing_limit_percent: args.tenant_borrowing_limit.0,
            ..Level::tenants()
        },
    }
}
