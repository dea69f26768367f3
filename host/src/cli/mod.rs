//! The command line: what each `inrun` command takes, and how its defaults are chosen.

mod commands;
mod run;
mod setup;
mod test;

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

pub use commands::execute;

/// Inrun: a Kubernetes reconciler host for Blueprints and sandboxed Wasm reconcilers.
#[derive(Parser)]
#[command(name = "inrun", version, about, long_about = None)]
pub struct Cli {
    /// Log filter (e.g. `info`, `inrun=debug`); else `RUST_LOG`; else `info` for `run` and
    /// `warn` for the other commands.
    #[arg(long, global = true, env = "INRUN_LOG")]
    pub log: Option<String>,
    /// Directory for compiled plugins (default: $XDG_CACHE_HOME/inrun/wasm).
    #[arg(long, global = true, env = "INRUN_CACHE_DIR")]
    pub cache_dir: Option<PathBuf>,
    /// The most the compile cache directory holds (e.g. `256Mi`, the default); the least
    /// recently used entries go first. Keep it under the cache volume's size limit.
    #[arg(long, global = true, env = "INRUN_CACHE_MAX_SIZE", value_parser = parse_quantity)]
    pub cache_max_size: Option<usize>,
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The log filter: `--log` (or `INRUN_LOG`), else `RUST_LOG`, else what the command
    /// defaults to (a long-running host says what it does; a one-shot command speaks only
    /// of trouble).
    pub fn log_filter(&self) -> String {
        self.filter_with(std::env::var("RUST_LOG").ok())
    }

    fn filter_with(&self, rust_log: Option<String>) -> String {
        if let Some(filter) = &self.log {
            return filter.clone();
        }
        if let Some(filter) = rust_log.filter(|f| !f.trim().is_empty()) {
            return filter;
        }
        match &self.command {
            Command::Run(_) => "info".into(),
            _ => "warn".into(),
        }
    }

    /// Whether logs are JSON lines.
    pub fn json_logs(&self) -> bool {
        matches!(&self.command, Command::Run(r) if r.log_format == LogFormat::Json)
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the reconcile step for one CR with no cluster and print what would be applied.
    Render {
        /// The Blueprint: a YAML file or a directory of them.
        #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
        blueprint: PathBuf,
        /// The CR, as YAML or JSON (`-` reads standard input).
        #[arg(long, short = 'f', env = "INRUN_OBJECT")]
        object: PathBuf,
        /// Objects as the cluster has them (YAML documents, or a `List`): children whose
        /// readiness reads their status are judged on these, and plugins' cluster reads
        /// are served from them (what is not there is not found); without it children are
        /// Unknown and cluster reads fail.
        #[arg(long, value_name = "FILE", env = "INRUN_OBSERVED")]
        observed: Option<PathBuf>,
        /// Canned answers for plugins' `http.fetch`: a YAML list of `{request: {method,
        /// url}, response: {status, headers, body}}`; a request not listed fails. The
        /// Blueprint's grants still decide what a plugin may request.
        #[arg(long, value_name = "FILE", env = "INRUN_HTTP_FIXTURE")]
        http_fixture: Option<PathBuf>,
        /// Canned results for `reconcile.external` calls, by name: a YAML mapping from
        /// call name to `{result: <value>}` or `{error: <message>}`; nothing is called,
        /// and a call not listed fails.
        #[arg(long, value_name = "FILE", env = "INRUN_EXTERNAL_FIXTURE")]
        external_fixture: Option<PathBuf>,
        /// The serve target to render through (default: the one the CR selects).
        #[arg(long, env = "INRUN_TARGET")]
        target: Option<String>,
        /// Render as if the CR were being deleted.
        #[arg(long, env = "INRUN_FINALIZING")]
        finalizing: bool,
        /// Output format.
        #[arg(long, short = 'o', value_enum, env = "INRUN_OUTPUT", default_value_t = Format::Yaml)]
        output: Format,
        /// A secret value for remote reconcilers and external calls, as
        /// `namespace/name/key=value` (repeatable; the variable gives one); render reads no cluster.
        #[arg(
            long = "secret",
            value_name = "NS/NAME/KEY=VALUE",
            env = "INRUN_SECRET"
        )]
        secrets: Vec<String>,
    },
    /// Run golden cases: each directory under DIR with a `cr.yaml` is rendered with its
    /// fixtures (`observed.yaml`, `http.yaml`, `external.yaml`, `case.yaml`) and compared
    /// with its `expected.yaml`; nothing live is called.
    Test {
        /// Where the cases are. A case without `blueprint` in its `case.yaml` uses the
        /// nearest `blueprint.yaml` in its directory or above, looked for no higher than the
        /// current directory, or DIR's parent when DIR is not under the current directory.
        #[arg(default_value = "tests", env = "INRUN_TEST_DIR")]
        dir: PathBuf,
        /// Write each case's output to its `expected.yaml` instead of comparing.
        #[arg(long, env = "INRUN_TEST_UPDATE")]
        update: bool,
    },
    /// Reconcile every CR of every CRD the Blueprint declares, until SIGINT or SIGTERM.
    Run(Box<RunArgs>),
    /// Generate manifests from a Blueprint (YAML stream on stdout).
    Generate {
        #[command(subcommand)]
        command: GenerateCommand,
    },
    /// Check a Blueprint: fields, templates, and that every plugin loads.
    Validate {
        /// The Blueprint: a YAML file or a directory of them.
        #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
        blueprint: PathBuf,
    },
    /// Work with plugin components.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

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
    Rbac {
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
        /// The Lease the Role names, as `inrun run --leader-elect-lease` (default: the
        /// Blueprint's `runtime.leaderElection.leaseName`, else `inrun`).
        #[arg(long, env = "INRUN_LEADER_ELECT_LEASE", value_parser = parse_lease_name)]
        leader_elect_lease: Option<String>,
        /// Also grant impersonating these ServiceAccounts (`namespace/name`, comma
        /// separated): tenants' identities, e.g. `inrun run --default-tenant-service-account`.
        #[arg(long, env = "INRUN_IMPERSONATE", value_delimiter = ',', value_parser = parse_service_account)]
        impersonate: Vec<inrun::blueprint::ServiceAccountRef>,
        /// Also grant impersonating each Blueprint resource's own ServiceAccount, as
        /// `inrun run --default-tenant-service-account namespace/…{name}…` derives it (any in
        /// that namespace: their names come with the Blueprints). With `--tenant`, a
        /// Blueprint that names no `spec.serviceAccount` is granted as the one derived from
        /// its name.
        #[arg(long, env = "INRUN_DEFAULT_TENANT_SERVICE_ACCOUNT", value_parser = parse_account_pattern)]
        default_tenant_service_account: Option<inrun::blueprint::AccountPattern>,
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
    },
    /// The `Blueprint` CustomResourceDefinition, for `inrun run --blueprint-resources`
    /// without `--install-crds`.
    BlueprintCrd,
}

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Show a component's world, exported functions, imports, size and sha256.
    Inspect {
        /// The component: a `.wasm` file, an `https://` URL (with --digest) or an
        /// `oci://registry/repository:tag` reference.
        #[arg(env = "INRUN_PLUGIN_FILE")]
        location: String,
        /// `sha256:<hex>` the location must have (required for https://).
        #[arg(long, env = "INRUN_PLUGIN_DIGEST")]
        digest: Option<String>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, env = "INRUN_OUTPUT", default_value_t = Format::Yaml)]
        output: Format,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Publish a component to an OCI registry (one `application/wasm` layer) and print
    /// the reference with its manifest digest.
    Push {
        /// The `.wasm` component.
        #[arg(env = "INRUN_PLUGIN_FILE")]
        file: PathBuf,
        /// Where to: `oci://registry/repository:tag`.
        #[arg(env = "INRUN_PLUGIN_REFERENCE")]
        reference: String,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Make a self-contained plugin project: it builds with ./build.sh against the
    /// `inrun-sdk` package of its language, and has a unit test and a golden case for
    /// `inrun test`. The packages are not on public registries yet: pass --sdk.
    New {
        /// The guest language.
        #[arg(long, value_enum, env = "INRUN_PLUGIN_LANG", default_value_t = Lang::Rust)]
        lang: Lang,
        /// The plugin's name (lowercase letters, digits, '-'); also its directory.
        #[arg(env = "INRUN_PLUGIN_NAME")]
        name: String,
        /// Where to create the project directory.
        #[arg(long, env = "INRUN_PLUGIN_DIR_PARENT", default_value = ".")]
        dir: PathBuf,
        /// The SDK packages, as `make sdk` writes them (dist/sdk/ in an Inrun checkout):
        /// copied into the project's `.sdk/`, which its build takes the SDK from and from
        /// nowhere else. Without it the project names `inrun-sdk` on public registries,
        /// where it is not published yet (a warning says so). C needs no package.
        #[arg(long, env = "INRUN_SDK_DIR", value_name = "DIR")]
        sdk: Option<PathBuf>,
    },
}

/// What `inrun run` is given.
#[derive(clap::Args)]
pub struct RunArgs {
    /// The Blueprint: a YAML file or a directory of them (merged into one).
    #[arg(long, short = 'b', env = "INRUN_BLUEPRINT",
          required_unless_present_any = ["tenants", "blueprint_resources"])]
    pub blueprint: Option<PathBuf>,
    /// A directory whose every YAML file is a Blueprint of its own tenant.
    #[arg(long, env = "INRUN_TENANTS")]
    pub tenants: Option<PathBuf>,
    /// Also serve every cluster-scoped `Blueprint` custom resource as a tenant.
    #[arg(long, env = "INRUN_BLUEPRINT_RESOURCES")]
    pub blueprint_resources: bool,
    /// Let `Blueprint` resources grant their plugins capabilities (cluster reads,
    /// outbound HTTP) and adopt objects they did not create (`managedResources[].adopt`);
    /// off, such a Blueprint is refused.
    #[arg(long, env = "INRUN_ALLOW_RESOURCE_CAPABILITIES")]
    pub allow_resource_capabilities: bool,
    /// Where `Blueprint` resources' remote reconcilers, external calls and plugin HTTP may
    /// go: `host` or `host:port`, comma separated. Unset, they may call nowhere. Loopback,
    /// link-local and the API server's addresses are refused unless listed as addresses.
    #[arg(long, env = "INRUN_TENANT_EGRESS", value_delimiter = ',')]
    pub tenant_egress: Vec<String>,
    /// The ServiceAccount a `Blueprint` resource acts as when it names no
    /// `spec.serviceAccount`, one a Blueprint: `namespace/…{name}…`, `{name}` the
    /// Blueprint's name (e.g. `inrun-tenants/{name}`). It must admit its Blueprint by uid,
    /// as any tenant identity. A fixed name is refused: shared, it would hold the union of
    /// every tenant's rights. Unset, such a Blueprint is refused.
    #[arg(long, env = "INRUN_DEFAULT_TENANT_SERVICE_ACCOUNT", value_parser = parse_account_pattern)]
    pub default_tenant_service_account: Option<inrun::blueprint::AccountPattern>,
    /// The namespaces (comma separated) a Blueprint resource's `spec.serviceAccount` may
    /// live in, besides `--default-tenant-service-account`'s. A tenant's ServiceAccount
    /// reads its kinds cluster-wide (its watches are): keep these namespaces for tenants'
    /// identities, with no tenant running pods there that could mount its token. Unset:
    /// any namespace.
    #[arg(long, env = "INRUN_TENANT_IDENTITY_NAMESPACES", value_delimiter = ',')]
    pub tenant_identity_namespaces: Vec<String>,
    /// What becomes of the host's finalizers on the CRs of a tenant removed (its Blueprint
    /// resource deleted, its file gone) or of a CRD a reload dropped from its Blueprint:
    /// `release` removes them once its controller stopped, so deleting such a CR or its
    /// namespace does not hang (children go with the CR through owner references; its
    /// cleanup and a package's infrastructure deletion do not run); `keep` leaves them
    /// until a tenant serves the CRD again.
    #[arg(long, env = "INRUN_ON_TENANT_REMOVAL", default_value = "release")]
    pub on_tenant_removal: inrun::runtime::release::OnRemoval,
    /// How often Blueprint files and plugin sources are checked for changes; `0`
    /// turns reloading off.
    #[arg(long, env = "INRUN_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
    pub reload_interval: std::time::Duration,
    /// Ceiling on any plugin's per-call deadline; a Blueprint asking for more is refused.
    #[arg(long, env = "INRUN_MAX_PLUGIN_DEADLINE", value_parser = parse_duration)]
    pub max_plugin_deadline: Option<std::time::Duration>,
    /// Ceiling on any package call's deadline (`package.limits.deadline`): packages wait on
    /// their backends, so hours are allowed; a Blueprint resource's stay within 30m.
    #[arg(long, env = "INRUN_MAX_PACKAGE_DEADLINE", default_value = "6h", value_parser = parse_duration)]
    pub max_package_deadline: std::time::Duration,
    /// Ceiling on any plugin's memory (e.g. `256Mi`).
    #[arg(long, env = "INRUN_MAX_PLUGIN_MEMORY", value_parser = parse_quantity)]
    pub max_plugin_memory: Option<usize>,
    /// Ceiling on any plugin's output size (e.g. `4Mi`).
    #[arg(long, env = "INRUN_MAX_PLUGIN_OUTPUT", value_parser = parse_quantity)]
    pub max_plugin_output: Option<usize>,
    /// Ceiling on the resources one plugin outcome may hold.
    #[arg(long, env = "INRUN_MAX_PLUGIN_RESOURCES")]
    pub max_plugin_resources: Option<usize>,
    /// Plugin calls that may run guest code at the same moment, host-wide: the cores
    /// plugins may use (default: half the cores, at least one). Guests beyond it wait for
    /// a turn, handed round-robin across tenants.
    #[arg(long, env = "INRUN_PLUGIN_CORES")]
    pub plugin_cores: Option<usize>,
    /// Linear memory and tables all plugin calls in flight may hold together (default:
    /// half the container's memory limit, or 1Gi without one). A growth past it fails
    /// the growing call.
    #[arg(long, env = "INRUN_PLUGIN_MEMORY_BUDGET", value_parser = parse_quantity)]
    pub plugin_memory_budget: Option<usize>,
    /// Plugin calls one tenant may have in flight; more wait for one of them (default: a
    /// quarter of the instance pool, 16).
    #[arg(long, env = "INRUN_TENANT_PLUGIN_CALLS")]
    pub tenant_plugin_calls: Option<usize>,
    /// Memory one tenant's plugin calls in flight may hold together (default: a quarter
    /// of `--plugin-memory-budget`).
    #[arg(long, env = "INRUN_TENANT_PLUGIN_MEMORY", value_parser = parse_quantity)]
    pub tenant_plugin_memory: Option<usize>,
    /// Lines a second one tenant's plugins may log (host.log, stdout, stderr), with
    /// bursts of five seconds' worth; more are dropped and counted.
    #[arg(long, env = "INRUN_TENANT_LOG_LINES", default_value_t = 100)]
    pub tenant_log_lines: u32,
    /// Writes a second one tenant (a `--tenants` file or a Blueprint resource; not
    /// `--blueprint`) may make to the API server, with bursts of a second's worth; more
    /// wait their turn. `0`: no limit.
    #[arg(long, env = "INRUN_TENANT_API_WRITES", default_value_t = 100)]
    pub tenant_api_writes: u32,
    /// CRDs one tenant (a `--tenants` file or a Blueprint resource) may declare: each is a
    /// cluster-wide watch of its CRs and one per child kind.
    #[arg(long, env = "INRUN_MAX_TENANT_CRDS", default_value_t = 20)]
    pub max_tenant_crds: usize,
    /// Distinct plugins one tenant may use.
    #[arg(long, env = "INRUN_MAX_TENANT_PLUGINS", default_value_t = 20)]
    pub max_tenant_plugins: usize,
    /// Workers one tenant may run, summed over its CRDs.
    #[arg(long, env = "INRUN_MAX_TENANT_WORKERS", default_value_t = 100)]
    pub max_tenant_workers: usize,
    /// External calls one of a tenant's reconcile blocks may make.
    #[arg(long, env = "INRUN_MAX_TENANT_EXTERNAL_CALLS", default_value_t = 8)]
    pub max_tenant_external_calls: usize,
    /// The largest CR (its spec, status and the rest but metadata, as compact JSON) the host
    /// keeps and reconciles, e.g. `256Ki`; a larger one gets `Ready=False`, reason
    /// `Invalid`, and an event. Anyone who may create CRs of a served kind could otherwise
    /// fill the host's memory; an object-count ResourceQuota per namespace bounds how many.
    #[arg(long, env = "INRUN_MAX_CR_SIZE", default_value = "256Ki", value_parser = parse_quantity)]
    pub max_cr_size: usize,
    /// The largest plugin module one tenant may load (e.g. `32Mi`): compiling takes time and
    /// memory in proportion.
    #[arg(long, env = "INRUN_MAX_TENANT_MODULE_SIZE", default_value = "32Mi", value_parser = parse_quantity)]
    pub max_tenant_module_size: usize,
    /// Plugin module bytes one tenant may load (compile, or read compiled from the cache) an
    /// hour, with a burst of as much at first (e.g. `512Mi`): a tenant moving a tag at every
    /// check cannot keep the host compiling.
    #[arg(long, env = "INRUN_TENANT_COMPILE_BUDGET", default_value = "512Mi", value_parser = parse_quantity)]
    pub tenant_compile_budget: usize,
    /// How long one plugin compile may take (e.g. `2m`); past it the compile is stopped and
    /// that plugin's load fails. Compiles run one at a time, each in a child process of
    /// this program, so a stopped compile frees what it held.
    #[arg(long, env = "INRUN_COMPILE_TIMEOUT", default_value = "2m", value_parser = parse_duration)]
    pub compile_timeout: std::time::Duration,
    /// The most memory one plugin compile may allocate (e.g. `384Mi`); past it the compile
    /// fails and that plugin's load with it. Default: three quarters of the container's
    /// memory limit, 1Gi without one. An 18 MB Python or JavaScript guest needs about 400Mi.
    #[arg(long, env = "INRUN_COMPILE_MEMORY", value_parser = parse_quantity)]
    pub compile_memory: Option<usize>,
    /// A registry (host:port) spoken to over plain HTTP, e.g. one on loopback.
    #[arg(
        long = "insecure-registry",
        env = "INRUN_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// A PEM file of extra CA certificates trusted for plugin downloads and registries.
    #[arg(long, env = "INRUN_PLUGIN_CA")]
    pub plugin_ca: Option<PathBuf>,
    /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, env = "INRUN_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "INRUN_CONTEXT")]
    pub context: Option<String>,
    /// How long one API request may take; watches are exempt (the API server ends them).
    #[arg(long, env = "INRUN_REQUEST_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub request_timeout: std::time::Duration,
    /// Install the Blueprint's CRDs (server-side apply) instead of requiring them.
    #[arg(long, env = "INRUN_INSTALL_CRDS")]
    pub install_crds: bool,
    /// Log format.
    #[arg(long, value_enum, env = "INRUN_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Health port (/healthz, /readyz, /metrics); overrides `runtime.healthPort` of
    /// `--blueprint`; 0 picks a free port.
    #[arg(long, env = "INRUN_HEALTH_PORT")]
    pub health_port: Option<u16>,
    /// Address the health port binds to.
    #[arg(long, env = "INRUN_HEALTH_ADDRESS", default_value = "0.0.0.0")]
    pub health_address: std::net::IpAddr,
    /// Console port (the console, /blueprint, /state, /tenants: every tenant's CRDs,
    /// endpoints and errors); 0 picks a free port.
    #[arg(long, env = "INRUN_CONSOLE_PORT", default_value_t = 8082)]
    pub console_port: u16,
    /// Serve the host's own Blueprint (`--blueprint`, not tenants') at `/blueprint` on the
    /// health port too; `--health-blueprint=false` keeps the health port to probes and
    /// metrics.
    #[arg(long, env = "INRUN_HEALTH_BLUEPRINT", default_value_t = true, action = clap::ArgAction::Set)]
    pub health_blueprint: bool,
    /// Address the console port binds to: loopback unless the operator opens it.
    #[arg(long, env = "INRUN_CONSOLE_ADDRESS", default_value = "127.0.0.1")]
    pub console_address: std::net::IpAddr,
    /// Run only while holding the leader-election Lease (also `runtime.leaderElection.enabled`).
    #[arg(long, env = "INRUN_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the Lease when the Blueprint names none (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "INRUN_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Namespace of the Leases that give each piece of infrastructure a package manages one
    /// owner CR (default: $POD_NAMESPACE, else `default`); `inrun generate rbac` grants
    /// them in its `--namespace`.
    #[arg(long, env = "INRUN_LOCK_NAMESPACE")]
    pub lock_namespace: Option<String>,
    /// Name of the Lease, over `runtime.leaderElection.leaseName` (default `inrun`): hosts
    /// sharing a namespace each need their own.
    #[arg(long, env = "INRUN_LEADER_ELECT_LEASE", value_parser = parse_lease_name)]
    pub leader_elect_lease: Option<String>,
    /// This replica's identity for events and the Lease (default: hostname and process id).
    #[arg(long, env = "INRUN_IDENTITY")]
    pub identity: Option<String>,
}

/// How `inrun plugin push` and `inspect` reach a registry or https server.
#[derive(clap::Args)]
pub struct RegistryArgs {
    /// A registry (host:port) spoken to over plain HTTP, e.g. one on loopback (repeatable).
    #[arg(
        long = "insecure-registry",
        env = "INRUN_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    pub insecure_registries: Vec<String>,
    /// A PEM file of CA certificates trusted besides the system's.
    #[arg(long = "ca-file", env = "INRUN_PLUGIN_CA")]
    pub ca_file: Option<PathBuf>,
    /// Registry user name.
    #[arg(long, env = "INRUN_REGISTRY_USERNAME", requires = "password")]
    pub username: Option<String>,
    /// Registry password or token (the variable keeps it out of the process list).
    #[arg(
        long,
        env = "INRUN_REGISTRY_PASSWORD",
        requires = "username",
        hide_env_values = true
    )]
    pub password: Option<String>,
}

impl RegistryArgs {
    pub fn options(&self) -> anyhow::Result<inrun::sources::SourceOptions> {
        let extra_roots = match &self.ca_file {
            Some(path) => vec![
                std::fs::read(path)
                    .map_err(|e| anyhow::anyhow!("reading CA file {}: {e}", path.display()))?,
            ],
            None => Vec::new(),
        };
        Ok(inrun::sources::SourceOptions {
            insecure_registries: self.insecure_registries.clone(),
            extra_roots,
        })
    }

    pub fn credentials(&self) -> Option<inrun::sources::Credentials> {
        Some(inrun::sources::Credentials {
            username: self.username.clone()?,
            password: self.password.clone()?,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
    C,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

pub(crate) fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    inrun::duration::parse(text).map_err(|e| e.to_string())
}

pub(crate) fn parse_quantity(text: &str) -> Result<usize, String> {
    let q = inrun::blueprint::Quantity::parse(text).map_err(|e| e.to_string())?;
    usize::try_from(q.bytes()).map_err(|e| e.to_string())
}

/// A Lease's name: a lowercase DNS subdomain (RFC 1123), as Kubernetes requires.
pub(crate) fn parse_lease_name(text: &str) -> Result<String, String> {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if text.len() <= 253 && text.split('.').all(label) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{text:?} is not a Lease name: lowercase letters, digits, '-' and '.', \
             starting and ending with a letter or digit, at most 253 characters"
        ))
    }
}

pub(crate) fn parse_service_account(
    text: &str,
) -> Result<inrun::blueprint::ServiceAccountRef, String> {
    inrun::blueprint::ServiceAccountRef::parse(text)
}

pub(crate) fn parse_account_pattern(
    text: &str,
) -> Result<inrun::blueprint::AccountPattern, String> {
    inrun::blueprint::AccountPattern::parse(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_default_tenant_service_account_shared_by_every_blueprint_is_refused() {
        let shared = Cli::try_parse_from([
            "inrun",
            "run",
            "--blueprint-resources",
            "--default-tenant-service-account",
            "inrun-tenants/tenant",
        ]);
        let error = shared.err().expect("refused").to_string();
        assert!(error.contains("union of all their rights"), "{error}");
        assert!(
            Cli::try_parse_from([
                "inrun",
                "run",
                "--blueprint-resources",
                "--default-tenant-service-account",
                "inrun-tenants/{name}",
            ])
            .is_ok()
        );
    }

    #[test]
    fn the_log_filter_is_the_flag_then_rust_log_then_the_commands_default() {
        let cli = Cli::parse_from(["inrun", "validate", "-b", "x.yaml"]);
        assert_eq!(cli.filter_with(None), "warn");
        assert_eq!(cli.filter_with(Some(" ".into())), "warn");
        assert_eq!(cli.filter_with(Some("inrun=debug".into())), "inrun=debug");
        let cli = Cli::parse_from(["inrun", "--log", "error", "validate", "-b", "x.yaml"]);
        assert_eq!(cli.filter_with(Some("inrun=debug".into())), "error");
    }

    #[test]
    fn a_lease_name_must_be_a_dns_subdomain_and_the_error_names_the_flag() {
        for good in ["inrun", "shop-inrun", "a.b-c.d0"] {
            assert_eq!(parse_lease_name(good).as_deref(), Ok(good));
        }
        for bad in ["", "Shop", "-a", "a-", "a..b", "a_b", &"a".repeat(254)] {
            assert!(parse_lease_name(bad).is_err(), "{bad:?} accepted");
        }
        let err = Cli::try_parse_from(["inrun", "run", "--leader-elect-lease", "My_Lease"])
            .err()
            .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("--leader-elect-lease") && text.contains("not a Lease name"),
            "{text}"
        );
    }
}
