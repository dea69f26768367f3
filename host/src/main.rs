//! The `inrun` command: parses the command line and calls the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use inrun::assemble::Assembly;
use inrun::render::{self, RenderInput};
use inrun::wasm::{CompileCache, Engine, EngineSettings};

/// Inrun: a Kubernetes reconciler host for Blueprints and sandboxed Wasm reconcilers.
#[derive(Parser)]
#[command(name = "inrun", version, about, long_about = None)]
struct Cli {
    /// Log filter (e.g. `info`, `inrun=debug`).
    #[arg(long, global = true, env = "INRUN_LOG", default_value = "warn")]
    log: String,
    /// Directory for compiled plugins (default: $XDG_CACHE_HOME/inrun/wasm).
    #[arg(long, global = true, env = "INRUN_CACHE_DIR")]
    cache_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the reconcile step for one CR with no cluster and print what would be applied.
    Render {
        /// The Blueprint: a YAML file or a directory of them.
        #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
        blueprint: PathBuf,
        /// The CR, as YAML or JSON.
        #[arg(long, short = 'f', env = "INRUN_OBJECT")]
        object: PathBuf,
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
    /// Reconcile every CR of every CRD the Blueprint declares, until SIGINT or SIGTERM.
    Run {
        /// The Blueprint: a YAML file or a directory of them (merged into one).
        #[arg(long, short = 'b', env = "INRUN_BLUEPRINT",
              required_unless_present_any = ["tenants", "blueprint_resources"])]
        blueprint: Option<PathBuf>,
        /// A directory whose every YAML file is a Blueprint of its own tenant.
        #[arg(long, env = "INRUN_TENANTS")]
        tenants: Option<PathBuf>,
        /// Also serve every cluster-scoped `Blueprint` custom resource as a tenant.
        #[arg(long, env = "INRUN_BLUEPRINT_RESOURCES")]
        blueprint_resources: bool,
        /// Let `Blueprint` resources grant their plugins capabilities (cluster reads,
        /// outbound HTTP); off, such a Blueprint is refused.
        #[arg(long, env = "INRUN_ALLOW_RESOURCE_CAPABILITIES")]
        allow_resource_capabilities: bool,
        /// How often Blueprint files and plugin sources are checked for changes; `0`
        /// turns reloading off.
        #[arg(long, env = "INRUN_RELOAD_INTERVAL", default_value = "10s", value_parser = parse_duration)]
        reload_interval: std::time::Duration,
        /// Ceiling on any plugin's per-call deadline; a Blueprint asking for more is refused.
        #[arg(long, env = "INRUN_MAX_PLUGIN_DEADLINE", value_parser = parse_duration)]
        max_plugin_deadline: Option<std::time::Duration>,
        /// Ceiling on any plugin's memory (e.g. `256Mi`).
        #[arg(long, env = "INRUN_MAX_PLUGIN_MEMORY", value_parser = parse_quantity)]
        max_plugin_memory: Option<usize>,
        /// Ceiling on any plugin's output size (e.g. `4Mi`).
        #[arg(long, env = "INRUN_MAX_PLUGIN_OUTPUT", value_parser = parse_quantity)]
        max_plugin_output: Option<usize>,
        /// Ceiling on the resources one plugin outcome may hold.
        #[arg(long, env = "INRUN_MAX_PLUGIN_RESOURCES")]
        max_plugin_resources: Option<usize>,
        /// A registry (host:port) spoken to over plain HTTP, e.g. one on loopback.
        #[arg(
            long = "insecure-registry",
            env = "INRUN_INSECURE_REGISTRIES",
            value_delimiter = ','
        )]
        insecure_registries: Vec<String>,
        /// A PEM file of extra CA certificates trusted for plugin downloads and registries.
        #[arg(long, env = "INRUN_PLUGIN_CA")]
        plugin_ca: Option<PathBuf>,
        /// Kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
        #[arg(long, env = "INRUN_KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
        /// Install the Blueprint's CRDs (server-side apply) instead of requiring them.
        #[arg(long, env = "INRUN_INSTALL_CRDS")]
        install_crds: bool,
        /// Log format.
        #[arg(long, value_enum, env = "INRUN_LOG_FORMAT", default_value_t = LogFormat::Text)]
        log_format: LogFormat,
        /// Health port (/healthz, /readyz, /metrics, /blueprint, console); overrides
        /// `runtime.healthPort`; 0 picks a free port.
        #[arg(long, env = "INRUN_HEALTH_PORT")]
        health_port: Option<u16>,
        /// Address the health port binds to.
        #[arg(long, env = "INRUN_HEALTH_ADDRESS", default_value = "0.0.0.0")]
        health_address: std::net::IpAddr,
        /// Run only while holding the leader-election Lease (also `runtime.leaderElection.enabled`).
        #[arg(long, env = "INRUN_LEADER_ELECT")]
        leader_elect: bool,
        /// Namespace of the Lease when the Blueprint names none (default: $POD_NAMESPACE, else `default`).
        #[arg(long, env = "INRUN_LEADER_ELECT_NAMESPACE")]
        leader_elect_namespace: Option<String>,
        /// This replica's identity for events and the Lease (default: hostname and process id).
        #[arg(long, env = "INRUN_IDENTITY")]
        identity: Option<String>,
    },
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

#[derive(Subcommand)]
enum GenerateCommand {
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
        /// Name of the roles and bindings.
        #[arg(long, env = "INRUN_RBAC_NAME", default_value = "inrun")]
        name: String,
        /// Also grant creating and patching the CRDs (for `inrun run --install-crds`).
        #[arg(long, env = "INRUN_INSTALL_CRDS")]
        install_crds: bool,
        /// Also grant reading `Blueprint` resources and writing their status (for
        /// `inrun run --blueprint-resources`).
        #[arg(long, env = "INRUN_BLUEPRINT_RESOURCES")]
        blueprint_resources: bool,
    },
    /// The `Blueprint` CustomResourceDefinition, for `inrun run --blueprint-resources`
    /// without `--install-crds`.
    BlueprintCrd,
}

#[derive(Subcommand)]
enum PluginCommand {
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
    /// Make a plugin project that builds with ./build.sh and renders its sample CR.
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
        /// The Inrun checkout whose SDK, WIT and toolchain scripts the project uses
        /// (default: the one this binary was built from).
        #[arg(long, env = "INRUN_SDK_ROOT")]
        sdk_root: Option<PathBuf>,
    },
}

/// How `inrun plugin push` and `inspect` reach a registry or https server.
#[derive(clap::Args)]
struct RegistryArgs {
    /// A registry (host:port) spoken to over plain HTTP, e.g. one on loopback (repeatable).
    #[arg(
        long = "insecure-registry",
        env = "INRUN_INSECURE_REGISTRIES",
        value_delimiter = ','
    )]
    insecure_registries: Vec<String>,
    /// A PEM file of CA certificates trusted besides the system's.
    #[arg(long = "ca-file", env = "INRUN_PLUGIN_CA")]
    ca_file: Option<PathBuf>,
    /// Registry user name.
    #[arg(long, env = "INRUN_REGISTRY_USERNAME", requires = "password")]
    username: Option<String>,
    /// Registry password or token (the variable keeps it out of the process list).
    #[arg(
        long,
        env = "INRUN_REGISTRY_PASSWORD",
        requires = "username",
        hide_env_values = true
    )]
    password: Option<String>,
}

impl RegistryArgs {
    fn options(&self) -> anyhow::Result<inrun::sources::SourceOptions> {
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

    fn credentials(&self) -> Option<inrun::sources::Credentials> {
        Some(inrun::sources::Credentials {
            username: self.username.clone()?,
            password: self.password.clone()?,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Lang {
    Rust,
    Python,
    Js,
    C,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Yaml,
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let json = matches!(
        cli.command,
        Command::Run {
            log_format: LogFormat::Json,
            ..
        }
    );
    let filter = match (&cli.command, cli.log.as_str()) {
        (Command::Run { .. }, "warn") => "info",
        (_, f) => f,
    };
    inrun::telemetry::init(filter, json);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", inrun::errors::chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn engine(cache_dir: Option<PathBuf>) -> anyhow::Result<Engine> {
    engine_observed(cache_dir, std::sync::Arc::new(inrun::wasm::Unobserved))
}

/// The engine, reporting plugin loads and host calls to `observer`.
fn engine_observed(
    cache_dir: Option<PathBuf>,
    observer: std::sync::Arc<dyn inrun::wasm::Observer>,
) -> anyhow::Result<Engine> {
    let dir = cache_dir.unwrap_or_else(CompileCache::default_dir);
    let cache = CompileCache::new(&dir)
        .map_err(|e| anyhow::anyhow!("creating compile cache {}: {e}", dir.display()))?;
    Ok(Engine::new(EngineSettings {
        cache: Some(cache),
        observer,
        ..EngineSettings::default()
    })?)
}

fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    if text == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    inrun::duration::parse(text).map_err(|e| e.to_string())
}

fn parse_quantity(text: &str) -> Result<usize, String> {
    let q = inrun::blueprint::Quantity::parse(text).map_err(|e| e.to_string())?;
    usize::try_from(q.bytes()).map_err(|e| e.to_string())
}

fn print(value: &impl serde::Serialize, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Render {
            blueprint,
            object,
            target,
            finalizing,
            output,
            secrets,
        } => {
            let engine = engine(cli.cache_dir)?;
            let mut given = inrun::secrets::StaticSecrets::new();
            for arg in &secrets {
                given = given.parse(arg)?;
            }
            let services = inrun::assemble::Services::new(std::sync::Arc::new(given));
            let assembly = runtime.block_on(Assembly::load_with(&blueprint, &engine, &services))?;
            let input = RenderInput::from_file(&object)?;
            let out = runtime.block_on(render::render(
                &assembly,
                input,
                target.as_deref(),
                finalizing,
            ))?;
            print(&out, output)
        }
        Command::Run {
            blueprint,
            tenants,
            blueprint_resources,
            allow_resource_capabilities,
            reload_interval,
            max_plugin_deadline,
            max_plugin_memory,
            max_plugin_output,
            max_plugin_resources,
            insecure_registries,
            plugin_ca,
            kubeconfig,
            install_crds,
            health_port,
            health_address,
            leader_elect,
            leader_elect_namespace,
            identity,
            ..
        } => {
            // One registry for the process, handed to everything that records.
            let metrics = std::sync::Arc::new(inrun::metrics::Metrics::default());
            let engine = engine_observed(cli.cache_dir, metrics.clone())?;
            // Secrets are read from the cluster, so the client comes before the assembly.
            let client = runtime.block_on(inrun::kubeconfig::client(kubeconfig.as_deref()))?;
            let mut extra_roots = Vec::new();
            if let Some(path) = &plugin_ca {
                extra_roots.push(
                    std::fs::read(path).map_err(|e| {
                        anyhow::anyhow!("reading --plugin-ca {}: {e}", path.display())
                    })?,
                );
            }
            let services = inrun::assemble::Services::with_sources(
                std::sync::Arc::new(inrun::secrets::KubeSecrets::new(client.clone())),
                inrun::sources::SourceOptions {
                    insecure_registries,
                    extra_roots,
                },
            )
            // Plugins granted cluster reads are served from watch caches on this client.
            .with_cluster(std::sync::Arc::new(inrun::runtime::WatchCache::new(
                client.clone(),
            )));
            let mut policy = inrun::assemble::Policy::default();
            if let Some(d) = max_plugin_deadline {
                policy.ceilings.deadline = d;
            }
            if let Some(m) = max_plugin_memory {
                policy.ceilings.memory_bytes = m;
            }
            if let Some(o) = max_plugin_output {
                policy.ceilings.output_bytes = o;
            }
            if let Some(r) = max_plugin_resources {
                policy.ceilings.max_resources = r;
            }
            let identity = identity.unwrap_or_else(|| {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "inrun".into());
                format!("{host}-{}", std::process::id())
            });
            let fleet = inrun::fleet::Fleet::new(
                inrun::runtime::Shared::new(client.clone(), identity.clone())
                    .with_metrics(metrics.clone()),
                engine,
                services,
                inrun::fleet::FleetOptions {
                    blueprint,
                    tenants,
                    resources: blueprint_resources,
                    reload: (!reload_interval.is_zero()).then_some(reload_interval),
                    policy,
                    install_crds,
                    resource_capabilities: allow_resource_capabilities,
                },
            );
            // A broken `--blueprint` stops the host here, before it waits for a lease.
            runtime.block_on(fleet.load_initial())?;
            let runtime_spec = fleet
                .assemblies()
                .first()
                .map(|a| a.blueprint.spec.runtime.clone())
                .unwrap_or_default();
            runtime.block_on(async move {
                let (tx, rx) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    inrun::kubeconfig::shutdown_signal().await;
                    tracing::info!("shutting down: finishing reconciles in flight");
                    let _ = tx.send(true);
                });
                let state = inrun::server::State::serving(fleet.clone(), metrics.clone());
                let standby = state.standby.clone();
                let port = health_port.unwrap_or(runtime_spec.health_port);
                let (addr, server) = inrun::server::bind(
                    std::net::SocketAddr::new(health_address, port),
                    state,
                    rx.clone(),
                )
                .await?;
                tracing::info!(%addr, "health port listening");
                let le = &runtime_spec.leader_election;
                if leader_elect || le.enabled {
                    let namespace = le
                        .namespace
                        .clone()
                        .or(leader_elect_namespace)
                        .or_else(|| std::env::var("POD_NAMESPACE").ok())
                        .unwrap_or_else(|| "default".into());
                    let config = inrun::leader::LeaderConfig {
                        lease_name: le.lease_name.clone(),
                        namespace,
                        identity,
                        lease_duration: le.lease_duration,
                        renew_deadline: le.renew_deadline,
                        retry_period: le.retry_period,
                    };
                    inrun::leader::run(client, config, rx, standby, metrics, move |stop| {
                        fleet.run(stop)
                    })
                    .await?;
                } else {
                    metrics.set_leader(true);
                    fleet.run(rx).await?;
                }
                server.abort();
                Ok::<_, anyhow::Error>(())
            })
        }
        Command::Generate { command } => {
            let docs = match command {
                GenerateCommand::Crds { blueprint } => {
                    inrun::generate::crds(&inrun::blueprint::load(&blueprint)?)
                }
                GenerateCommand::BlueprintCrd => vec![inrun::fleet::blueprint_crd()],
                GenerateCommand::Rbac {
                    blueprint,
                    namespace,
                    service_account,
                    name,
                    install_crds,
                    blueprint_resources,
                } => inrun::generate::rbac::manifests(
                    &inrun::blueprint::load(&blueprint)?,
                    &inrun::generate::rbac::RbacOptions {
                        name,
                        namespace,
                        service_account,
                        install_crds,
                        blueprint_resources,
                    },
                ),
            };
            print!("{}", inrun::generate::yaml_stream(&docs)?);
            Ok(())
        }
        Command::Validate { blueprint } => {
            let engine = engine(cli.cache_dir)?;
            let assembly = runtime.block_on(Assembly::load(&blueprint, &engine))?;
            for line in assembly.summary() {
                println!("{line}");
            }
            println!("{}: valid", blueprint.display());
            Ok(())
        }
        Command::Plugin {
            command:
                PluginCommand::Inspect {
                    location,
                    digest,
                    output,
                    registry,
                },
        } => {
            use inrun::sources::{Location, PullSecret, Sources};
            let engine = engine(cli.cache_dir)?;
            let location = Location::parse(&location, digest.as_deref(), std::path::Path::new(""))?;
            let plugin = match &location {
                Location::File(path) => engine.load_file(path)?,
                remote => {
                    // Credentials given on the command line act as a pull secret.
                    let pull = PullSecret {
                        namespace: "cli".into(),
                        name: "registry".into(),
                    };
                    let mut secrets = inrun::secrets::StaticSecrets::new();
                    if let (Some(creds), Location::Oci { reference, .. }) =
                        (registry.credentials(), remote)
                    {
                        let host = reference.split('/').next().unwrap_or_default();
                        secrets = secrets.with(
                            &pull.namespace,
                            &pull.name,
                            inrun::sources::DOCKER_CONFIG_KEY,
                            &creds.to_docker_config(host),
                        );
                    }
                    let pull = registry.credentials().map(|_| pull);
                    let sources = Sources::new(std::sync::Arc::new(secrets), registry.options()?)?;
                    let fetched = runtime.block_on(sources.fetch(remote, pull.as_ref()))?;
                    engine.load(&remote.name(), &fetched.bytes)?
                }
            };
            print(plugin.info(), output)
        }
        Command::Plugin {
            command:
                PluginCommand::Push {
                    file,
                    reference,
                    registry,
                },
        } => {
            let engine = engine(cli.cache_dir)?;
            // Loading first publishes only components that implement an Inrun world.
            let plugin = engine.load_file(&file)?;
            let info = plugin.info();
            let meta = inrun::sources::ComponentMeta {
                exports: info.exports.clone(),
                imports: info.imports.clone(),
                target: Some(format!("inrun:reconciler/{}", info.world.name())),
            };
            let bytes = std::fs::read(&file)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", file.display()))?;
            let digest = runtime.block_on(inrun::sources::push(
                &bytes,
                &reference,
                &meta,
                registry.credentials().as_ref(),
                &registry.options()?,
            ))?;
            let shown = if reference.starts_with("oci://") {
                reference
            } else {
                format!("oci://{reference}")
            };
            println!("{shown}@{digest}");
            Ok(())
        }
        Command::Plugin {
            command:
                PluginCommand::New {
                    lang,
                    name,
                    dir,
                    sdk_root,
                },
        } => {
            use inrun::scaffold::{self, Lang as L};
            let lang = match lang {
                Lang::Rust => L::Rust,
                Lang::Python => L::Python,
                Lang::Js => L::Js,
                Lang::C => L::C,
            };
            let root = sdk_root.unwrap_or_else(scaffold::default_sdk_root);
            let project = scaffold::new_plugin(lang, &name, &dir, &root)?;
            println!("created {}", project.display());
            println!(
                "  cd {} && ./build.sh && inrun render -b blueprint.yaml -f cr.yaml",
                project.display()
            );
            Ok(())
        }
    }
}
