//! A one-CRD assembly, for the unit tests of what reads one (the plan's steps).

use super::Assembly;

/// An assembly of one declarative CRD whose reconcile block ends with `extra` (YAML lines
/// indented under `reconcile:`).
pub(crate) fn assembly(extra: &str) -> Assembly {
    let text = format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: t}}\nspec:\n  crds:\n    - group: t.inrun.dev\n      version: v1\n      kind: Thing\n      reconcile:\n        onReconcile: []\n{extra}"
    );
    let bp = inrun_blueprint::from_str(&text, "t.yaml").expect("blueprint");
    let engine = inrun_wasm::Engine::new(inrun_wasm::EngineSettings {
        pooling: false,
        ..Default::default()
    })
    .expect("engine");
    futures::executor::block_on(Assembly::from_blueprint(bp, &engine)).expect("assembly")
}
