//! The command line: the commands `inrun` takes and the options they share; each
//! command's flags and what it does live in its own file.

mod generate;
mod output;
mod parse;
pub mod plan;
mod plugin;
mod render;
mod rollout;
mod run;
mod setup;
mod test;
mod trace;
mod validate;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use generate::GenerateCommand;
use parse::parse_quantity;
use plugin::PluginCommand;
use render::RenderArgs;
use run::{LogFormat, RunArgs};
use setup::CacheArgs;
use test::TestArgs;
use trace::TraceArgs;
use validate::ValidateArgs;

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

    /// Where `inrun run` exports its traces (`--otlp-endpoint`, or the standard `OTEL_*`
    /// variables); `None` for every other command and without an endpoint.
    ///
    /// # Errors
    /// An endpoint or sampling ratio that is not valid, naming where it came from.
    pub fn traces(&self) -> Result<Option<inrun::telemetry::Traces>, String> {
        match &self.command {
            Command::Run(args) => inrun::telemetry::Traces::resolve(
                args.otlp_endpoint.as_deref(),
                args.otlp_sample_ratio,
                |k| std::env::var(k).ok(),
            ),
            _ => Ok(None),
        }
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
    Render(RenderArgs),
    /// Run golden cases: each directory under DIR with a `cr.yaml` is rendered with its
    /// fixtures (`observed.yaml`, `http.yaml`, `external.yaml`, `case.yaml`) and compared
    /// with its `expected.yaml`; nothing live is called.
    Test(TestArgs),
    /// Reconcile every CR of every CRD the Blueprint declares, until SIGINT or SIGTERM.
    Run(Box<RunArgs>),
    /// Generate manifests from a Blueprint (YAML stream on stdout).
    Generate {
        #[command(subcommand)]
        command: GenerateCommand,
    },
    /// Check a Blueprint: fields, templates, and that every plugin loads.
    Validate(ValidateArgs),
    /// Show what a new Blueprint or plugin version would do to every live CR: each CR
    /// rendered by the running and the new version, what would change dry-run applied.
    /// Writes nothing. Exits 0 when nothing changes, 2 when something does, 1 when the
    /// new version fails on a CR.
    Plan(Box<plan::PlanArgs>),
    /// Show a CR and what the host made of it, from a live cluster: its Ready condition,
    /// every child with its state, the foreign instances holding its deletion.
    Trace(TraceArgs),
    /// The rollouts a host carries (`reconcile.rollout`): where each stands, and pause,
    /// resume, promote or abort one.
    Rollout(rollout::RolloutArgs),
    /// Work with plugin components.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
}

/// Runs the command `cli` names.
///
/// # Errors
/// Whatever the command failed with, for `main` to print with its causes.
pub fn execute(cli: Cli, trace_ids: Option<inrun::runtime::TraceIds>) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cache = CacheArgs {
        dir: cli.cache_dir,
        max_bytes: cli.cache_max_size,
    };
    match cli.command {
        Command::Render(args) => render::render(&runtime, &cache, args),
        Command::Test(args) => test::test(&runtime, &cache, &args),
        Command::Run(args) => run::run(&runtime, *args, &cache, trace_ids),
        Command::Generate { command } => generate::generate(command),
        Command::Validate(args) => validate::validate(&runtime, &cache, &args),
        Command::Plugin { command } => plugin::plugin(&runtime, &cache, command),
        Command::Trace(args) => trace::trace(&runtime, &args),
        Command::Plan(args) => plan::plan(&runtime, &cache, &args),
        Command::Rollout(args) => rollout::rollout(&runtime, &args),
    }
}

#[cfg(test)]
mod tests {
    use super::parse::parse_lease_name;
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
