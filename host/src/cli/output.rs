//! How commands print what they produce: YAML or JSON on standard output.

use clap::ValueEnum;

/// The `--output` of `inrun render` and `inrun plugin inspect`.
#[derive(Clone, Copy, ValueEnum)]
pub enum Format {
    Yaml,
    Json,
}

/// Prints `value` in `format`.
pub(super) fn print(value: &impl serde::Serialize, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Yaml => print!("{}", serde_yaml_ng::to_string(value)?),
        Format::Json => println!("{}", serde_json::to_string_pretty(value)?),
    }
    Ok(())
}
