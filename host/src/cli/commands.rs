//! What each command does: parse its input, call the library, print the result.

use std::path::Path;
use std::sync::Arc;

use inrun::assemble::{Assembly, Services};
use inrun::pass::fixtures::{ExternalFixture, Fixtures, HttpFixture};
use inrun::render::{self, RenderInput};
use inrun::sources::{Location, Sources};
use inrun::wasm::{Limits, Unobserved};

use super::setup::{CacheArgs, engine, read};
use super::{Cli, Command, Format, GenerateCommand, Lang, PluginCommand};

fn print(value: &impl serde::Serialize, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}

/// Runs the command `cli` names.
///
/// # Errors
/// Whatever the command failed with, for `main` to print with its causes.
pub fn execute(cli: Cli) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let cache = CacheArgs {
        dir: cli.cache_dir,
        max_bytes: cli.cache_max_size,
    };
    let quiet = || engine(&cache, Arc::new(Unobserved), Limits::default(), None, None);
    match cli.command {
        Command::Render {
            blueprint,
            object,
            observed,
            http_fixture,
            external_fixture,
            target,
            finalizing,
            output,
            secrets,
        } => {
            let engine = quiet()?;
            let mut given = inrun::secrets::StaticSecrets::new();
            for arg in &secrets {
                given = given.parse(arg)?;
            }
            if object.as_os_str() == "-"
                && observed.as_deref().is_some_and(|o| o.as_os_str() == "-")
            {
                anyhow::bail!("-f - and --observed - cannot both read standard input");
            }
            let mut input = RenderInput::from_file(&object)?;
            if let Some(observed) = &observed {
                input = input.observing(observed)?;
            }
            let fixtures = Fixtures {
                observed: input.observed.clone(),
                http: http_fixture
                    .as_deref()
                    .map(HttpFixture::from_file)
                    .transpose()?,
                external: external_fixture
                    .as_deref()
                    .map(ExternalFixture::from_file)
                    .transpose()?,
            };
            let services = fixtures.serve(Services::new(Arc::new(given)));
            let assembly = runtime.block_on(Assembly::load_with(&blueprint, &engine, &services))?;
            let out = runtime.block_on(render::render(
                &assembly,
                input,
                target.as_deref(),
                finalizing,
            ))?;
            print(&out, output)
        }
        Command::Test { dir, update } => {
            let engine = quiet()?;
            runtime.block_on(super::test::run(&engine, &dir, update))
        }
        Command::Run(args) => super::run::run(&runtime, *args, &cache),
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
                    leader_elect,
                    leader_elect_lease,
                    impersonate,
                    default_tenant_service_account,
                    tenant,
                    tenant_namespaces,
                } => {
                    let mut blueprint = inrun::blueprint::load(&blueprint)?;
                    // `inrun run --leader-elect` turns leader election on over the Blueprint.
                    blueprint.spec.runtime.leader_election.enabled |= leader_elect;
                    // ... and `--leader-elect-lease` names its Lease over the Blueprint.
                    if let Some(lease) = leader_elect_lease {
                        blueprint.spec.runtime.leader_election.lease_name = lease;
                    }
                    let derived = match (&default_tenant_service_account, tenant) {
                        (Some(pattern), true) if blueprint.spec.service_account.is_none() => Some(
                            pattern
                                .for_blueprint(&blueprint.metadata.name)
                                .map_err(|why| anyhow::anyhow!(why))?,
                        ),
                        _ => None,
                    };
                    let sa = match blueprint.spec.service_account.clone().or(derived) {
                        Some(sa) if tenant => sa,
                        _ => inrun::blueprint::ServiceAccountRef {
                            namespace: namespace.clone(),
                            name: service_account.clone(),
                        },
                    };
                    let name = name.unwrap_or_else(|| {
                        if tenant {
                            format!("inrun-tenant-{}", blueprint.metadata.name)
                        } else {
                            "inrun".into()
                        }
                    });
                    let options = inrun::generate::rbac::RbacOptions {
                        name,
                        namespace,
                        service_account,
                        install_crds,
                        blueprint_resources,
                        impersonate,
                        tenant_accounts: default_tenant_service_account,
                    };
                    if tenant {
                        inrun::generate::rbac::tenant_manifests(
                            &blueprint,
                            &sa,
                            &tenant_namespaces,
                            &options,
                        )
                    } else {
                        inrun::generate::rbac::manifests(&blueprint, &options)
                    }
                }
            };
            print!("{}", inrun::generate::yaml_stream(&docs)?);
            Ok(())
        }
        Command::Validate { blueprint } => {
            let engine = quiet()?;
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
            let engine = quiet()?;
            let location = Location::parse(&location, digest.as_deref(), Path::new(""))?;
            let plugin = match &location {
                Location::File(path) => engine.load_file(path)?,
                remote => {
                    let sources = Sources::new(
                        Arc::new(inrun::secrets::StaticSecrets::new()),
                        registry.options()?,
                    )?;
                    let credentials = registry.credentials();
                    let fetched =
                        runtime.block_on(sources.fetch_as(remote, credentials.as_ref()))?;
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
            let engine = quiet()?;
            // Loading first publishes only components that implement an Inrun world.
            let plugin = engine.load_file(&file)?;
            let info = plugin.info();
            let meta = inrun::sources::ComponentMeta {
                exports: info.exports.clone(),
                imports: info.imports.clone(),
                target: Some(format!("inrun:reconciler/{}", info.world.name())),
            };
            let bytes = read(&file, "the component")?;
            let digest = runtime.block_on(inrun::sources::push(
                &bytes,
                &reference,
                &meta,
                registry.credentials().as_ref(),
                &registry.options()?,
            ))?;
            println!("{}@{digest}", inrun::sources::with_scheme(&reference));
            Ok(())
        }
        Command::Plugin {
            command:
                PluginCommand::New {
                    lang,
                    name,
                    dir,
                    sdk,
                },
        } => {
            use inrun::scaffold::{self, Lang as L};
            let lang = match lang {
                Lang::Rust => L::Rust,
                Lang::Python => L::Python,
                Lang::Js => L::Js,
                Lang::C => L::C,
            };
            let project = scaffold::new_plugin(lang, &name, &dir, sdk.as_deref())?;
            println!("created {}", project.display());
            println!(
                "  cd {} && ./build.sh && inrun test && inrun render -b blueprint.yaml -f cr.yaml",
                project.display()
            );
            if sdk.is_none() && lang != L::C {
                eprintln!("warning: {}", scaffold::UNPUBLISHED);
            }
            Ok(())
        }
    }
}
