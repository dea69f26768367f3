//! `inrun test`: runs every golden case under a directory and prints `ok`/`FAIL` per case,
//! a diff for each that differs, and a summary line.

use std::path::{Path, PathBuf};

use inrun::golden::{self, Verdict};
use inrun::wasm::Engine;

use super::setup::{CacheArgs, quiet_engine};

/// What `inrun test` is given.
#[derive(clap::Args)]
pub struct TestArgs {
    /// Where the cases are. A case without `blueprint` in its `case.yaml` uses the
    /// nearest `blueprint.yaml` in its directory or above, looked for no higher than the
    /// current directory, or DIR's parent when DIR is not under the current directory.
    #[arg(default_value = "tests", env = "INRUN_TEST_DIR")]
    dir: PathBuf,
    /// Write each case's output to its `expected.yaml` instead of comparing.
    #[arg(long, env = "INRUN_TEST_UPDATE")]
    update: bool,
}

/// Runs the cases `args.dir` holds with a quiet engine.
///
/// # Errors
/// As [`run`].
pub(super) fn test(
    runtime: &tokio::runtime::Runtime,
    cache: &CacheArgs,
    args: &TestArgs,
) -> anyhow::Result<()> {
    let engine = quiet_engine(cache)?;
    runtime.block_on(run(&engine, &args.dir, args.update))
}

/// Runs the cases under `dir`. Each case's Blueprint is looked for no higher than the
/// current directory, or `dir`'s parent when `dir` is not under it
/// ([`golden::search_bounds`]).
///
/// # Errors
/// `dir` cannot be listed, or a case failed (after every case has run and been reported).
pub(super) async fn run(engine: &Engine, dir: &Path, update: bool) -> anyhow::Result<()> {
    let (root, top) = golden::search_bounds(dir, &std::env::current_dir()?).map_err(|e| {
        anyhow::anyhow!(
            "the cases' directory {}: {}",
            dir.display(),
            inrun::errors::chain(&e)
        )
    })?;
    let cases = golden::discover(&root)
        .map_err(|e| anyhow::anyhow!("listing the cases in {}: {e}", dir.display()))?;
    if cases.is_empty() {
        anyhow::bail!(
            "no cases in {}: a case is a directory holding a {}",
            dir.display(),
            golden::CR_FILE
        );
    }
    let (mut passed, mut failed) = (0usize, 0usize);
    for case in &cases {
        let name = case
            .strip_prefix(&root)
            .unwrap_or(case)
            .display()
            .to_string();
        let name = if name.is_empty() {
            ".".to_string()
        } else {
            name
        };
        match golden::run_case(engine, case, &top, update).await {
            Verdict::Passed => {
                passed += 1;
                println!("ok {name}");
            }
            Verdict::Updated => {
                passed += 1;
                println!("updated {name}");
            }
            Verdict::Differs(diff) => {
                failed += 1;
                println!("FAIL {name}");
                print!("{diff}");
            }
            Verdict::Broken(e) => {
                failed += 1;
                println!("FAIL {name}");
                println!("  {}", inrun::errors::chain(&e));
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        anyhow::bail!("{failed} of {} cases failed", cases.len());
    }
    Ok(())
}
