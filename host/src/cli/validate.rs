//! `inrun validate`: loads a Blueprint as `inrun run` would (fields, templates, every
//! plugin) and prints what it declares.

use std::path::PathBuf;

use inrun::assemble::Assembly;

use super::setup::{CacheArgs, quiet_engine};

/// What `inrun validate` is given.
#[derive(clap::Args)]
pub struct ValidateArgs {
    /// The Blueprint: a YAML file or a directory of them.
    #[arg(long, short = 'b', env = "INRUN_BLUEPRINT")]
    blueprint: PathBuf,
}

/// Loads the Blueprint, prints its summary and says it is valid.
///
/// # Errors
/// The Blueprint cannot be read, is invalid, or a plugin does not load.
pub(super) fn validate(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    args: &ValidateArgs,
) -> anyhow::Result<()> {
    let engine = quiet_engine(cache)?;
    let assembly = runtime.block_on(Assembly::load(&args.blueprint, &engine))?;
    for line in assembly.summary() {
        println!("{line}");
    }
    println!("{}: valid", args.blueprint.display());
    Ok(())
}
