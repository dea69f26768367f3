//! Helpers shared by the Blueprint module's tests: fixtures and error lines.

use std::path::{Path, PathBuf};

use crate::error::BlueprintError;
use crate::load::from_str;

/// A file under `host/tests/fixtures/blueprints` (shared with the host's tests).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/blueprints")
        .join(name)
}

/// Every problem of a failed load, one line each.
pub fn problems(err: BlueprintError) -> Vec<String> {
    err.problems().iter().map(ToString::to_string).collect()
}

/// The problems of a Blueprint text that must be refused.
pub fn error_lines(text: &str) -> Vec<String> {
    match from_str(text, "blueprints/web.yaml") {
        Ok(_) => panic!("expected the Blueprint to be refused"),
        Err(err) => problems(err),
    }
}

/// The document header every test Blueprint starts with.
pub const HEADER: &str =
    "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: demo }\n";
