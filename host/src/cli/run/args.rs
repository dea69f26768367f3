//! What `inrun run` is given: the flags of a long-running host, with their variables and
//! defaults.

use std::path::PathBuf;

use clap::ValueEnum;

use crate::cli::parse::{
    parse_account_pattern, parse_duration, parse_lease_name, parse_quantity, parse_ring_name,
};

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
    pub on_tenant_removal: inrun::fleet::release::OnRemoval,
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
    /// Ceiling on the calls one plugin instance may serve (`limits.reuse.calls`); `1`
    /// allows no reuse: every call gets a fresh instance.
    #[arg(long, env = "INRUN_MAX_PLUGIN_REUSE_CALLS", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub max_plugin_reuse_calls: Option<u32>,
    /// After a Wasm plugin's call succeeds, make its next instance in the background when
    /// its instantiation takes 100µs or more (Go, Python), so that the next call starts
    /// without instantiating (the same work, off the call's path; at most one per plugin,
    /// a quarter of them per tenant); `--plugin-make-ahead=false` instantiates on every
    /// call's path.
    #[arg(long, env = "INRUN_PLUGIN_MAKE_AHEAD", default_value_t = true, action = clap::ArgAction::Set)]
    pub plugin_make_ahead: bool,
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
    /// Host memory every tenant's reconciles may hold together for what reconcilers
    /// return (Wasm outcomes, remote and external replies), admitted before it is read
    /// (default: an eighth of the memory limit, 128Mi without one).
    #[arg(long, env = "INRUN_HOST_MEMORY_BUDGET", value_parser = parse_quantity)]
    pub host_memory_budget: Option<usize>,
    /// Host memory one tenant's reconciles may hold together for what reconcilers return
    /// (default: a quarter of `--host-memory-budget`; the operator's own `--blueprint` may
    /// hold all of it). A reply past it fails that CR, `Ready=False` `BudgetExceeded`.
    #[arg(long, env = "INRUN_TENANT_HOST_MEMORY", value_parser = parse_quantity)]
    pub tenant_host_memory: Option<usize>,
    /// CPU one tenant's plugins may burn, on average over a second (`250m`, `0.5`; default:
    /// half of `--plugin-cores`); past it they wait for their next share, whatever else
    /// is idle.
    #[arg(long, env = "INRUN_TENANT_PLUGIN_CPU")]
    pub tenant_plugin_cpu: Option<inrun::contract::cpu::Millicores>,
    /// The memory the host's container may use, e.g. `512Mi` (default: its cgroup's
    /// limit). `inrun run` refuses budgets whose worst case passes it: guest memory, the
    /// idle and made-ahead instances kept beside it, and the host memory replies take,
    /// with 64Mi left for the host itself.
    #[arg(long, env = "INRUN_MEMORY_LIMIT", value_parser = parse_quantity)]
    pub memory_limit: Option<usize>,
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
    /// health port too (URLs without their queries). Default: only when `--health-address`
    /// is loopback, since the health port is open to the network; `--health-blueprint`
    /// turns it on anyway, `--health-blueprint=false` off.
    #[arg(
        long,
        env = "INRUN_HEALTH_BLUEPRINT",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        action = clap::ArgAction::Set
    )]
    pub health_blueprint: Option<bool>,
    /// Address the console port binds to: loopback unless the operator opens it, and then
    /// only with `--console-token-file`.
    #[arg(long, env = "INRUN_CONSOLE_ADDRESS", default_value = "127.0.0.1")]
    pub console_address: std::net::IpAddr,
    /// A file holding the console's bearer token (at least 16 visible characters; the
    /// whitespace around it is dropped): every console request but the page itself must
    /// send `Authorization: Bearer <token>`. Required when `--console-address` is not
    /// loopback.
    #[arg(long, env = "INRUN_CONSOLE_TOKEN_FILE")]
    pub console_token_file: Option<PathBuf>,
    /// Host names the console answers to besides its own address (and `localhost` on
    /// loopback): the names a proxy or Service reaches it by. A request naming any other
    /// host is refused, so a web page cannot reach it through DNS rebinding.
    #[arg(
        long = "console-host",
        env = "INRUN_CONSOLE_HOSTS",
        value_delimiter = ','
    )]
    pub console_hosts: Vec<String>,
    /// Run only while holding the leader-election Lease (also `runtime.leaderElection.enabled`).
    #[arg(long, env = "INRUN_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Namespace of the Lease when the Blueprint names none (default: $POD_NAMESPACE, else the kubeconfig context's namespace, as kubectl takes it).
    #[arg(long, env = "INRUN_LEADER_ELECT_NAMESPACE")]
    pub leader_elect_namespace: Option<String>,
    /// Namespace of the Leases that give each piece of infrastructure a package manages one
    /// owner CR (default: $POD_NAMESPACE, else the kubeconfig context's namespace, as kubectl takes it); `inrun generate rbac` grants
    /// them in its `--namespace`.
    #[arg(long, env = "INRUN_LOCK_NAMESPACE")]
    pub lock_namespace: Option<String>,
    /// A backend boundary whose package identity locks tenants share, as
    /// `BOUNDARY=TENANT[,TENANT...]` (a tenant as `/tenants` names it: `Blueprint/team-a`,
    /// or a Blueprint file's path; a boundary ending in `*` covers every boundary starting
    /// so); repeatable. One CR of the tenants listed holds each thing under it, and no other
    /// tenant may claim it. Every other boundary is locked per tenant: tenants never block
    /// each other there, and nothing keeps two of them from managing one thing.
    #[arg(
        long = "shared-identity-boundary",
        env = "INRUN_SHARED_IDENTITY_BOUNDARIES",
        value_delimiter = ';'
    )]
    pub shared_identity_boundaries: Vec<inrun::runtime::locks::SharedBoundary>,
    /// How long a package identity lock's Lease stands unrenewed (e.g. `15m`): the host
    /// renews each one its CRs hold every third of it (one write each, under the tenant's
    /// write rate); one left unrenewed for that long, whose holder the host cannot read,
    /// may be taken over.
    #[arg(long, env = "INRUN_IDENTITY_LOCK_DURATION", default_value = "15m", value_parser = parse_duration)]
    pub identity_lock_duration: std::time::Duration,
    /// Identity locks (Leases in `--lock-namespace`) one tenant's package CRs may hold
    /// through this replica (not `--blueprint`'s); a CR past it fails, `Ready=False`.
    /// `0`: no cap.
    #[arg(long, env = "INRUN_MAX_TENANT_IDENTITY_LOCKS", default_value_t = 1000)]
    pub max_tenant_identity_locks: usize,
    /// Name of the Lease, over `runtime.leaderElection.leaseName` (default `inrun`): hosts
    /// sharing a namespace each need their own.
    #[arg(long, env = "INRUN_LEADER_ELECT_LEASE", value_parser = parse_lease_name)]
    pub leader_elect_lease: Option<String>,
    /// Share the CRs with the other replicas of the same ring (also
    /// `runtime.sharding.enabled`): each serves the buckets of CRs it holds, through Leases
    /// in the leader-election namespace kept with its timings. Not with `--leader-elect`.
    #[arg(long, env = "INRUN_SHARDING", conflicts_with = "leader_elect")]
    pub sharding: bool,
    /// The ring's name, over `runtime.sharding.ring` (default `inrun`): the prefix of its
    /// Leases.
    #[arg(long, env = "INRUN_SHARDING_RING", value_parser = parse_ring_name)]
    pub sharding_ring: Option<String>,
    /// How each replica watches only its buckets' CRs, over `runtime.sharding.watch`:
    /// `selector` (the API server's `shardSelector`, Kubernetes 1.36+ with the
    /// `ShardedListAndWatch` gate), `labels` (an `inrun.dev/bucket` label the host keeps on
    /// each CR), or `auto` (`selector` when the server honours it, else `labels`).
    #[arg(long, env = "INRUN_SHARDING_WATCH")]
    pub sharding_watch: Option<inrun::blueprint::ShardWatch>,
    /// Export traces (one a reconcile: its steps, plugin calls and API writes) by OTLP over
    /// HTTP to this collector (`/v1/traces` is added); else `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`. Off when none is given.
    #[arg(long, env = "INRUN_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The share of reconciles traced, 0 to 1 (default 1; else `OTEL_TRACES_SAMPLER_ARG`).
    #[arg(long, env = "INRUN_OTLP_SAMPLE_RATIO")]
    pub otlp_sample_ratio: Option<f64>,
    /// This replica's identity for events and the Lease (default: hostname and process id).
    #[arg(long, env = "INRUN_IDENTITY")]
    pub identity: Option<String>,
}

/// `--log-format`: text for people, JSON lines for a log pipeline.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}
