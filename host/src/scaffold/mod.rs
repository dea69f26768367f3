//! `inrun plugin new`: a plugin project in Rust, Python, JavaScript or C that builds with
//! one script, has a unit test and a golden case (`inrun test`), and renders its sample CR
//! out of the box.
//!
//! The project is self-contained: it depends on the published-style SDK packages (the
//! `inrun-sdk` crate, the `inrun-sdk` wheel, the `inrun-sdk` npm package; C gets the SDK
//! and WIT copied in, from this binary), never on the checkout `inrun` was built from.

mod templates;

use std::path::{Path, PathBuf};

/// A guest language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Rust, `wasm32-wasip2`.
    Rust,
    /// Python, componentize-py.
    Python,
    /// JavaScript, componentize-js.
    Js,
    /// C, clang + wit-bindgen c + wasm-tools.
    C,
}

/// Why a project could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name is not a lowercase DNS label.
    #[error(
        "plugin name {0:?}: use lowercase letters, digits and '-', starting with a letter (at most 40)"
    )]
    Name(String),
    /// The directory exists already.
    #[error("{} already exists; pick another name or --dir", .0.display())]
    Exists(PathBuf),
    /// Writing a file failed.
    #[error("writing {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

fn check_name(name: &str) -> Result<(), ScaffoldError> {
    let ok = (1..=40).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(ScaffoldError::Name(name.to_string()))
    }
}

/// `my-plugin` → `MyPlugin`.
fn kind_of(name: &str) -> String {
    name.split('-')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// Writes a new project `parent/name` for `lang`. Returns its directory.
///
/// # Errors
/// [`ScaffoldError`]: a bad name, an existing directory, or a failed write.
pub fn new_plugin(lang: Lang, name: &str, parent: &Path) -> Result<PathBuf, ScaffoldError> {
    check_name(name)?;
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir));
    }
    let vars = templates::Vars {
        name: name.to_string(),
        kind: kind_of(name),
        crate_name: name.replace('-', "_"),
    };
    for (file, text, executable) in templates::files(lang, &vars) {
        let path = dir.join(file);
        let write = || -> std::io::Result<()> {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::write(&path, text)?;
            #[cfg(unix)]
            if executable {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
            }
            Ok(())
        };
        write().map_err(|source| ScaffoldError::Write {
            path: path.clone(),
            source,
        })?;
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_become_kinds() {
        assert_eq!(kind_of("hello"), "Hello");
        assert_eq!(kind_of("my-plugin-2"), "MyPlugin2");
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["", "Hello", "1x", "a_b", "x-", &"a".repeat(41)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        check_name("hello-world").unwrap();
    }

    #[test]
    fn every_language_gets_a_blueprint_a_cr_and_a_build_script() {
        let dir = tempfile::tempdir().unwrap();
        for (lang, name) in [
            (Lang::Rust, "r"),
            (Lang::Python, "p"),
            (Lang::Js, "j"),
            (Lang::C, "c"),
        ] {
            let project = new_plugin(lang, name, dir.path()).unwrap();
            for f in [
                "blueprint.yaml",
                "cr.yaml",
                "build.sh",
                "README.md",
                "tests/sample/cr.yaml",
                "tests/sample/expected.yaml",
            ] {
                assert!(project.join(f).exists(), "{lang:?}: {f}");
            }
            let bp = std::fs::read_to_string(project.join("blueprint.yaml")).unwrap();
            inrun_blueprint::from_str(&bp, "blueprint.yaml").unwrap();
        }
        assert!(matches!(
            new_plugin(Lang::C, "c", dir.path()),
            Err(ScaffoldError::Exists(_))
        ));
    }
}
