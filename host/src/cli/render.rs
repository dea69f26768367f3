//! `inrun render`: the reconcile step for one CR with no cluster, its fixtures standing in
//! for what the cluster and the outside world would answer.

use std::path::PathBuf;
use std::sync::Arc;

use inrun::assemble::{Assembly, Services};
use inrun::pass::fixtures::{ExternalFixture, Fixtures, HttpFixture};
use inrun::render::{self, RenderInput};
use inrun::secrets::StaticSecrets;

use super::output::{Format, print};
use super::setup::{CacheArgs, quiet_engine};

/// What `inrun render` is given.
#[derive(clap::Args)]
pub struct RenderArgs {
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
}

/// Renders the CR `args.object` names through its Blueprint and prints the outcome.
///
/// # Errors
/// A file cannot be read or parsed, the Blueprint is invalid, or the pass failed.
pub(super) fn render(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    args: RenderArgs,
) -> anyhow::Result<()> {
    let engine = quiet_engine(cache)?;
    let secrets = given_secrets(&args.secrets)?;
    let input = input(&args)?;
    let fixtures = Fixtures {
        observed: input.observed.clone(),
        http: args
            .http_fixture
            .as_deref()
            .map(HttpFixture::from_file)
            .transpose()?,
        external: args
            .external_fixture
            .as_deref()
            .map(ExternalFixture::from_file)
            .transpose()?,
    };
    let services = fixtures.serve(Services::new(Arc::new(secrets)));
    let assembly = runtime.block_on(Assembly::load_with(&args.blueprint, &engine, &services))?;
    let out = runtime.block_on(render::render(
        &assembly,
        input,
        args.target.as_deref(),
        args.finalizing,
    ))?;
    print(&out, args.output)
}

/// The `--secret` values: render reads no cluster.
fn given_secrets(args: &[String]) -> anyhow::Result<StaticSecrets> {
    let mut given = StaticSecrets::new();
    for arg in args {
        given = given.parse(arg)?;
    }
    Ok(given)
}

/// The CR, with the objects `--observed` says the cluster has; only one of them may come
/// from standard input.
fn input(args: &RenderArgs) -> anyhow::Result<RenderInput> {
    if args.object.as_os_str() == "-"
        && args
            .observed
            .as_deref()
            .is_some_and(|o| o.as_os_str() == "-")
    {
        anyhow::bail!("-f - and --observed - cannot both read standard input");
    }
    let mut input = RenderInput::from_file(&args.object)?;
    if let Some(observed) = &args.observed {
        input = input.observing(observed)?;
    }
    Ok(input)
}
