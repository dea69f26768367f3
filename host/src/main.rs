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
        /// The Blueprint: a YAML file or a directory of them.
        #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
        blueprint: PathBuf,
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
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Show a component's world, exported functions, imports, size and sha256.
    Inspect {
        /// The `.wasm` component.
        #[arg(env = "INRUN_PLUGIN_FILE")]
        file: PathBuf,
        /// Output format.
        #[arg(long, short = 'o', value_enum, env = "INRUN_OUTPUT", default_value_t = Format::Yaml)]
        output: Format,
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
    let dir = cache_dir.unwrap_or_else(CompileCache::default_dir);
    let cache = CompileCache::new(&dir)
        .map_err(|e| anyhow::anyhow!("creating compile cache {}: {e}", dir.display()))?;
    Ok(Engine::new(EngineSettings {
        cache: Some(cache),
        ..EngineSettings::default()
    })?)
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
            let assembly = Assembly::load_with(&blueprint, &engine, &services)?;
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
            kubeconfig,
            install_crds,
            health_port,
            health_address,
            leader_elect,
            leader_elect_namespace,
            identity,
            ..
        } => {
            let engine = engine(cli.cache_dir)?;
            // Secrets are read from the cluster, so the client comes before the assembly.
            let client = runtime.block_on(inrun::kubeconfig::client(kubeconfig.as_deref()))?;
            let services = inrun::assemble::Services::new(std::sync::Arc::new(
                inrun::secrets::KubeSecrets::new(client.clone()),
            ));
            let assembly =
                std::sync::Arc::new(Assembly::load_with(&blueprint, &engine, &services)?);
            let runtime_spec = assembly.blueprint.spec.runtime.clone();
            let identity = identity.unwrap_or_else(|| {
                let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "inrun".into());
                format!("{host}-{}", std::process::id())
            });
            runtime.block_on(async move {
                let (tx, rx) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    inrun::kubeconfig::shutdown_signal().await;
                    tracing::info!("shutting down: finishing reconciles in flight");
                    let _ = tx.send(true);
                });
                let state = inrun::server::State::new(assembly.clone());
                let standby = state.standby.clone();
                let port = health_port.unwrap_or(runtime_spec.health_port);
                let (addr, server) = inrun::server::bind(
                    std::net::SocketAddr::new(health_address, port),
                    state,
                    rx.clone(),
                )
                .await?;
                tracing::info!(%addr, "health port listening");
                let options = inrun::runtime::RunOptions {
                    install_crds,
                    instance: identity.clone(),
                };
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
                    let work_client = client.clone();
                    inrun::leader::run(client, config, rx, standby, move |stop| {
                        inrun::runtime::run(assembly, work_client, options, stop)
                    })
                    .await?;
                } else {
                    inrun::metrics::global().set_leader(true);
                    inrun::runtime::run(assembly, client, options, rx).await?;
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
                GenerateCommand::Rbac {
                    blueprint,
                    namespace,
                    service_account,
                    name,
                    install_crds,
                } => inrun::generate::rbac::manifests(
                    &inrun::blueprint::load(&blueprint)?,
                    &inrun::generate::rbac::RbacOptions {
                        name,
                        namespace,
                        service_account,
                        install_crds,
                    },
                ),
            };
            print!("{}", inrun::generate::yaml_stream(&docs)?);
            Ok(())
        }
        Command::Validate { blueprint } => {
            let engine = engine(cli.cache_dir)?;
            let assembly = Assembly::load(&blueprint, &engine)?;
            for line in assembly.summary() {
                println!("{line}");
            }
            println!("{}: valid", blueprint.display());
            Ok(())
        }
        Command::Plugin {
            command: PluginCommand::Inspect { file, output },
        } => {
            let engine = engine(cli.cache_dir)?;
            let plugin = engine.load_file(&file)?;
            print(plugin.info(), output)
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
