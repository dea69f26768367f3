//! `inrun plugin new`: a plugin project in Rust, Python, JavaScript, TypeScript, C or Go
//! that builds with one script, has a unit test and a golden case (`inrun test`), and
//! renders its sample CR out of the box.
//!
//! The project depends on the SDK packages by their published names (the `inrun-sdk`
//! crate, wheel and npm package; C and Go get the SDK and WIT copied in, from this binary), never
//! on the checkout `inrun` was built from. Those packages are not on public registries yet:
//! with `--sdk DIR` (what `make sdk` writes) they are copied into the project's `.sdk/` and
//! the project takes them from there and nowhere else; without it, [`UNPUBLISHED`] says so.

mod sdk;
mod templates;

use std::path::{Path, PathBuf};

/// Where a project keeps its SDK packages.
pub const SDK_DIR: &str = ".sdk";

/// The SDK packages' version (the workspace's): a project depends on `^` this.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

/// What `inrun plugin new` warns, and a project's README says, when the project is made
/// without `--sdk`: its build would ask public registries for an unpublished name.
pub const UNPUBLISHED: &str = "the inrun-sdk packages are not published on public registries yet: as made, this project's ./build.sh fails, or installs whatever someone else has published under that name. Make the project with `inrun plugin new --sdk DIR` (or INRUN_SDK_DIR=DIR), DIR being the directory `make sdk` writes (dist/sdk/ in an Inrun checkout): it then takes the SDK from there and nowhere else.";

/// A guest language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// Rust, `wasm32-wasip2`.
    Rust,
    /// Python, componentize-py.
    Python,
    /// JavaScript, componentize-js.
    Js,
    /// TypeScript: compiled by tsc (`strict`, against the npm package's declarations), then
    /// built like JavaScript.
    Ts,
    /// C, clang + wit-bindgen c + wasm-tools.
    C,
    /// Go, the standard toolchain (wasip1, c-shared) + wit-bindgen go + wasm-tools.
    Go,
}

impl Lang {
    /// The project carries its SDK, copied from this binary (C and Go): it needs no SDK
    /// package, so `--sdk` is not used and nothing warns of unpublished packages.
    pub fn carries_its_sdk(self) -> bool {
        matches!(self, Lang::C | Lang::Go)
    }
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
    /// The SDK directory lacks a package the language needs.
    #[error(
        "{}: no {package}; --sdk names the directory `make sdk` writes (dist/sdk/ in an Inrun {} checkout)",
        dir.display(),
        SDK_VERSION
    )]
    SdkPackage {
        /// The directory given.
        dir: PathBuf,
        /// The package (a file, or for Rust a `.crate` unpacked).
        package: String,
    },
    /// Copying an SDK package into the project failed.
    #[error("copying {}", from.display())]
    Copy {
        /// The file or directory being copied.
        from: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
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
/// With `sdk` (the directory `make sdk` writes), the language's SDK packages of this
/// binary's version are copied into the project's [`SDK_DIR`] and the project is set to
/// take them from there only: Rust patches `inrun-sdk` and `inrun-contract` to them in
/// `.cargo/config.toml`, Python installs the wheel with `--no-index --find-links`,
/// JavaScript and TypeScript depend on the tarball by `file:`. C and Go need no package and
/// ignore `sdk`.
///
/// # Errors
/// [`ScaffoldError`]: a bad name, an existing directory, a package missing from `sdk`
/// (checked before anything is written), or a failed copy or write.
pub fn new_plugin(
    lang: Lang,
    name: &str,
    parent: &Path,
    sdk: Option<&Path>,
) -> Result<PathBuf, ScaffoldError> {
    check_name(name)?;
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir));
    }
    if let Some(sdk_dir) = sdk {
        sdk::check(lang, sdk_dir)?;
    }
    let vars = templates::Vars {
        name: name.to_string(),
        kind: kind_of(name),
        crate_name: name.replace('-', "_"),
        local_sdk: sdk.is_some() && !lang.carries_its_sdk(),
    };
    if let Some(sdk_dir) = sdk {
        for package in sdk::packages(lang) {
            sdk::copy(
                &sdk_dir.join(&package),
                &dir.join(sdk::destination(&package)),
            )?;
        }
    }
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
            (Lang::Ts, "t"),
            (Lang::C, "c"),
            (Lang::Go, "g"),
        ] {
            let project = new_plugin(lang, name, dir.path(), None).unwrap();
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
            new_plugin(Lang::C, "c", dir.path(), None),
            Err(ScaffoldError::Exists(_))
        ));
    }

    /// A directory laid out as `make sdk` writes it (the packages' contents are stand-ins).
    fn sdk_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        let v = SDK_VERSION;
        for (path, text) in [
            (format!("crates/inrun-sdk-{v}/Cargo.toml"), "sdk"),
            (format!("crates/inrun-sdk-{v}/src/lib.rs"), "lib"),
            (format!("crates/inrun-contract-{v}/Cargo.toml"), "contract"),
            (format!("inrun_sdk-{v}-py3-none-any.whl"), "wheel"),
            (format!("inrun-sdk-{v}.tgz"), "tarball"),
        ] {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, text).expect("write");
        }
        dir
    }

    fn read(project: &Path, file: &str) -> String {
        std::fs::read_to_string(project.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
    }

    #[test]
    fn with_sdk_each_language_takes_the_copied_packages_and_no_registry() {
        let sdk = sdk_dir();
        let dir = tempfile::tempdir().expect("tempdir");
        let v = SDK_VERSION;

        let rust = new_plugin(Lang::Rust, "r", dir.path(), Some(sdk.path())).expect("rust");
        assert_eq!(
            read(&rust, &format!(".sdk/inrun-sdk-{v}/src/lib.rs")),
            "lib"
        );
        assert_eq!(
            read(&rust, &format!(".sdk/inrun-contract-{v}/Cargo.toml")),
            "contract"
        );
        let config = read(&rust, ".cargo/config.toml");
        assert!(
            config.contains(&format!(
                "[patch.crates-io]\ninrun-sdk = {{ path = \".sdk/inrun-sdk-{v}\" }}\ninrun-contract = {{ path = \".sdk/inrun-contract-{v}\" }}\n"
            )),
            "{config}"
        );

        let python = new_plugin(Lang::Python, "p", dir.path(), Some(sdk.path())).expect("py");
        assert_eq!(
            read(&python, &format!(".sdk/inrun_sdk-{v}-py3-none-any.whl")),
            "wheel"
        );
        let requirements = read(&python, "requirements.txt");
        assert!(!requirements.contains("\ninrun-sdk"), "{requirements}");
        assert!(
            requirements.contains("\ncomponentize-py==0.25.1\n"),
            "{requirements}"
        );
        let build = read(&python, "build.sh");
        assert!(
            build.contains(&format!(
                "install --quiet --disable-pip-version-check --no-index --find-links .sdk \"inrun-sdk=={v}\""
            )),
            "{build}"
        );

        let js = new_plugin(Lang::Js, "j", dir.path(), Some(sdk.path())).expect("js");
        assert_eq!(read(&js, &format!(".sdk/inrun-sdk-{v}.tgz")), "tarball");
        let package = read(&js, "package.json");
        assert!(
            package.contains(&format!("\"inrun-sdk\": \"file:.sdk/inrun-sdk-{v}.tgz\"")),
            "{package}"
        );

        let ts = new_plugin(Lang::Ts, "t", dir.path(), Some(sdk.path())).expect("ts");
        assert_eq!(read(&ts, &format!(".sdk/inrun-sdk-{v}.tgz")), "tarball");
        let package = read(&ts, "package.json");
        assert!(
            package.contains(&format!("\"inrun-sdk\": \"file:.sdk/inrun-sdk-{v}.tgz\"")),
            "{package}"
        );
        assert!(
            package.contains(&format!("\"typescript\": \"{}\"", templates::TYPESCRIPT)),
            "{package}"
        );
        assert!(
            read(&ts, "tsconfig.json").contains("\"strict\": true"),
            "a TypeScript project is checked under strict"
        );

        for project in [&rust, &python, &js, &ts] {
            let readme = read(project, "README.md");
            assert!(
                readme.contains("takes them from `.sdk/` and nowhere else"),
                "{readme}"
            );
            assert!(!readme.contains("Warning"), "{readme}");
        }
        // C and Go carry their SDK: nothing is copied.
        let c = new_plugin(Lang::C, "c", dir.path(), Some(sdk.path())).expect("c");
        assert!(!c.join(".sdk").exists());
        let go = new_plugin(Lang::Go, "g", dir.path(), Some(sdk.path())).expect("go");
        assert!(!go.join(".sdk").exists());
        assert!(read(&go, "go.mod").contains("\nreplace inrun.dev/sdk => ./inrun-sdk\n"));
    }

    #[test]
    fn without_sdk_the_project_names_the_registries_and_its_readme_warns_at_the_top() {
        let dir = tempfile::tempdir().expect("tempdir");
        let rust = new_plugin(Lang::Rust, "r", dir.path(), None).expect("rust");
        assert!(!rust.join(".cargo").exists() && !rust.join(".sdk").exists());
        let python = new_plugin(Lang::Python, "p", dir.path(), None).expect("python");
        assert!(read(&python, "requirements.txt").contains("\ninrun-sdk==0.1.*\n"));
        assert!(!read(&python, "build.sh").contains("--no-index"));
        let js = new_plugin(Lang::Js, "j", dir.path(), None).expect("js");
        assert!(read(&js, "package.json").contains("\"inrun-sdk\": \"^0.1.0\""));
        let ts = new_plugin(Lang::Ts, "t", dir.path(), None).expect("ts");
        assert!(read(&ts, "package.json").contains("\"inrun-sdk\": \"^0.1.0\""));
        for project in [&rust, &python, &js, &ts] {
            let readme = read(project, "README.md");
            let top: String = readme.lines().take(6).collect::<Vec<_>>().join("\n");
            assert!(
                top.contains("> **Warning**: the inrun-sdk packages are not published on public"),
                "{readme}"
            );
            assert!(readme.contains("`inrun plugin new --sdk DIR`"), "{readme}");
        }
        let c = new_plugin(Lang::C, "c", dir.path(), None).expect("c");
        assert!(!read(&c, "README.md").contains("Warning"));
        let go = new_plugin(Lang::Go, "g", dir.path(), None).expect("go");
        assert!(!read(&go, "README.md").contains("Warning"));
    }

    #[test]
    fn an_sdk_directory_without_the_package_is_refused_before_anything_is_written() {
        let sdk = sdk_dir();
        let v = SDK_VERSION;
        std::fs::remove_file(sdk.path().join(format!("inrun-sdk-{v}.tgz"))).expect("rm");
        let dir = tempfile::tempdir().expect("tempdir");
        let err = new_plugin(Lang::Js, "j", dir.path(), Some(sdk.path())).unwrap_err();
        assert!(
            err.to_string().ends_with(&format!(
                ": no inrun-sdk-{v}.tgz; --sdk names the directory `make sdk` writes (dist/sdk/ in an Inrun {v} checkout)"
            )),
            "{err}"
        );
        assert!(!dir.path().join("j").exists());
        // The .crate files alone are not enough: `make sdk` unpacks them beside.
        std::fs::remove_dir_all(sdk.path().join("crates")).expect("rm");
        let err = new_plugin(Lang::Rust, "r", dir.path(), Some(sdk.path())).unwrap_err();
        assert!(
            err.to_string()
                .contains(&format!("no crates/inrun-sdk-{v};")),
            "{err}"
        );
        assert!(!dir.path().join("r").exists());
        // Python's wheel is there: Python is unaffected.
        new_plugin(Lang::Python, "p", dir.path(), Some(sdk.path())).expect("python");
    }
}
