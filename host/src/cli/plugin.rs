//! `inrun plugin`: inspect a component, push it to a registry, or make a new plugin
//! project.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::{Subcommand, ValueEnum};
use inrun::scaffold;
use inrun::sources::{Location, Sources};

use super::output::{Format, print};
use super::setup::{CacheArgs, quiet_engine, read};

#[derive(Subcommand)]
pub enum PluginCommand {
    /// Show a component's world, exported functions, imports, size and sha256.
    Inspect(InspectArgs),
    /// Publish a component to an OCI registry (one `application/wasm` layer) and print
    /// the reference with its manifest digest.
    Push(PushArgs),
    /// Make a self-contained plugin project: it builds with ./build.sh against the
    /// `inrun-sdk` package of its language, and has a unit test and a golden case for
    /// `inrun test`. The packages are not on public registries yet: pass --sdk.
    New(NewArgs),
}

/// What `inrun plugin inspect` is given.
#[derive(clap::Args)]
pub struct InspectArgs {
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
}

/// What `inrun plugin push` is given.
#[derive(clap::Args)]
pub struct PushArgs {
    /// The `.wasm` component.
    #[arg(env = "INRUN_PLUGIN_FILE")]
    file: PathBuf,
    /// Where to: `oci://registry/repository:tag`.
    #[arg(env = "INRUN_PLUGIN_REFERENCE")]
    reference: String,
    #[command(flatten)]
    registry: RegistryArgs,
}

/// What `inrun plugin new` is given.
#[derive(clap::Args)]
pub struct NewArgs {
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
    /// `--insecure-registry` and the certificates of `--ca-file`.
    pub fn options(&self) -> anyhow::Result<inrun::sources::SourceOptions> {
        let extra_roots = match &self.ca_file {
            Some(path) => vec![
                std::fs::read(path)
                    .with_context(|| format!("reading CA file {}", path.display()))?,
            ],
            None => Vec::new(),
        };
        Ok(inrun::sources::SourceOptions {
            insecure_registries: self.insecure_registries.clone(),
            extra_roots,
        })
    }

    /// `--username` and `--password`, when both are given.
    pub fn credentials(&self) -> Option<inrun::sources::Credentials> {
        Some(inrun::sources::Credentials {
            username: self.username.clone()?,
            password: self.password.clone()?,
        })
    }
}

/// The guest language of `inrun plugin new`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Js,
    /// TypeScript (`ts` or `typescript`): compiled by tsc, then built like JavaScript.
    #[value(alias = "typescript")]
    Ts,
    C,
    Go,
}

impl From<Lang> for scaffold::Lang {
    fn from(lang: Lang) -> Self {
        match lang {
            Lang::Rust => scaffold::Lang::Rust,
            Lang::Python => scaffold::Lang::Python,
            Lang::Js => scaffold::Lang::Js,
            Lang::Ts => scaffold::Lang::Ts,
            Lang::C => scaffold::Lang::C,
            Lang::Go => scaffold::Lang::Go,
        }
    }
}

/// Runs the `plugin` subcommand `command` names.
///
/// # Errors
/// Whatever the subcommand failed with.
pub(super) fn plugin(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    command: PluginCommand,
) -> anyhow::Result<()> {
    match command {
        PluginCommand::Inspect(args) => inspect(runtime, cache, &args),
        PluginCommand::Push(args) => push(runtime, cache, &args),
        PluginCommand::New(args) => new_project(&args),
    }
}

/// Loads the component, from a file or fetched, and prints what it is.
fn inspect(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    args: &InspectArgs,
) -> anyhow::Result<()> {
    let engine = quiet_engine(cache)?;
    let location = Location::parse(&args.location, args.digest.as_deref(), Path::new(""))?;
    let plugin = match &location {
        Location::File(path) => engine.load_file(path)?,
        remote => {
            let sources = Sources::new(
                Arc::new(inrun::secrets::StaticSecrets::new()),
                args.registry.options()?,
            )?;
            let credentials = args.registry.credentials();
            let fetched = runtime.block_on(sources.fetch_as(remote, credentials.as_ref()))?;
            engine.load_module(&remote.name(), &fetched.module)?
        }
    };
    print(plugin.info(), args.output)
}

/// Publishes the component and prints where it went, with its manifest digest.
fn push(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    args: &PushArgs,
) -> anyhow::Result<()> {
    let engine = quiet_engine(cache)?;
    // Loading first publishes only components that implement an Inrun world.
    let plugin = engine.load_file(&args.file)?;
    let info = plugin.info();
    let meta = inrun::sources::ComponentMeta {
        exports: info.exports.clone(),
        imports: info.imports.clone(),
        target: Some(format!("inrun:reconciler/{}", info.world.name())),
    };
    let bytes = read(&args.file, "the component")?;
    let digest = runtime.block_on(inrun::sources::push(
        &bytes,
        &args.reference,
        &meta,
        args.registry.credentials().as_ref(),
        &args.registry.options()?,
    ))?;
    println!("{}@{digest}", inrun::sources::with_scheme(&args.reference));
    Ok(())
}

/// Makes the project and says how to build, test and render it.
fn new_project(args: &NewArgs) -> anyhow::Result<()> {
    let lang = scaffold::Lang::from(args.lang);
    let project = scaffold::new_plugin(lang, &args.name, &args.dir, args.sdk.as_deref())?;
    println!("created {}", project.display());
    println!(
        "  cd {} && ./build.sh && inrun test && inrun render -b blueprint.yaml -f cr.yaml",
        project.display()
    );
    if args.sdk.is_none() && !lang.carries_its_sdk() {
        eprintln!("warning: {}", scaffold::UNPUBLISHED);
    }
    Ok(())
}
