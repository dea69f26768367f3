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
        #[arg(long, short = 'f')]
        object: PathBuf,
        /// The serve target to render through (default: the one the CR selects).
        #[arg(long)]
        target: Option<String>,
        /// Render as if the CR were being deleted.
        #[arg(long)]
        finalizing: bool,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = Format::Yaml)]
        output: Format,
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
enum PluginCommand {
    /// Show a component's world, exported functions, imports, size and sha256.
    Inspect {
        /// The `.wasm` component.
        file: PathBuf,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = Format::Yaml)]
        output: Format,
    },
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
        } => {
            let engine = engine(cli.cache_dir)?;
            let assembly = Assembly::load(&blueprint, &engine)?;
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
            ..
        } => {
            let engine = engine(cli.cache_dir)?;
            let assembly = std::sync::Arc::new(Assembly::load(&blueprint, &engine)?);
            runtime.block_on(async move {
                let client = inrun::kubeconfig::client(kubeconfig.as_deref()).await?;
                let (tx, rx) = tokio::sync::watch::channel(false);
                tokio::spawn(async move {
                    inrun::kubeconfig::shutdown_signal().await;
                    tracing::info!("shutting down: finishing reconciles in flight");
                    let _ = tx.send(true);
                });
                let options = inrun::runtime::RunOptions {
                    install_crds,
                    instance: std::env::var("HOSTNAME").unwrap_or_else(|_| "inrun".into()),
                };
                inrun::runtime::run(assembly, client, options, rx).await?;
                Ok::<_, anyhow::Error>(())
            })
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
    }
}
