//! The SDK packages a new project takes from the directory `make sdk` writes (`inrun
//! plugin new --sdk DIR`): found there by the exact names of this binary's version and
//! copied into the project's `.sdk/`, so the project builds from them and from no registry.

use std::path::{Path, PathBuf};

use super::{Lang, SDK_DIR, SDK_VERSION, ScaffoldError};

/// One package to copy: its name in DIR and in the project's `.sdk/` (a file, or for Rust
/// a directory: the `.crate` unpacked, which `make sdk` writes beside it).
pub(super) fn packages(lang: Lang) -> Vec<String> {
    let v = SDK_VERSION;
    match lang {
        Lang::Rust => vec![
            format!("crates/inrun-sdk-{v}"),
            format!("crates/inrun-contract-{v}"),
        ],
        Lang::Python => vec![format!("inrun_sdk-{v}-py3-none-any.whl")],
        Lang::Js | Lang::Ts => vec![format!("inrun-sdk-{v}.tgz")],
        Lang::C | Lang::Go => Vec::new(),
    }
}

/// Where a package goes in the project: `.sdk/<file name>`.
pub(super) fn destination(package: &str) -> PathBuf {
    let name = package.rsplit('/').next().unwrap_or(package);
    Path::new(SDK_DIR).join(name)
}

/// Checks that `dir` holds every package `lang` needs, before anything is written.
///
/// # Errors
/// [`ScaffoldError::SdkPackage`] naming the first one missing.
pub(super) fn check(lang: Lang, dir: &Path) -> Result<(), ScaffoldError> {
    for package in packages(lang) {
        let path = dir.join(&package);
        let there = if package.starts_with("crates/") {
            path.join("Cargo.toml").is_file()
        } else {
            path.is_file()
        };
        if !there {
            return Err(ScaffoldError::SdkPackage {
                dir: dir.to_path_buf(),
                package,
            });
        }
    }
    Ok(())
}

/// Copies `from` (a file or a directory, recursively; symbolic links followed) to `to`.
///
/// # Errors
/// [`ScaffoldError::Copy`] naming the file that could not be read or written.
pub(super) fn copy(from: &Path, to: &Path) -> Result<(), ScaffoldError> {
    let failed = |source| ScaffoldError::Copy {
        from: from.to_path_buf(),
        source,
    };
    if from.is_dir() {
        std::fs::create_dir_all(to).map_err(failed)?;
        for entry in std::fs::read_dir(from).map_err(failed)? {
            let entry = entry.map_err(failed)?;
            copy(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(failed)?;
        }
        std::fs::copy(from, to).map(drop).map_err(failed)
    }
}
