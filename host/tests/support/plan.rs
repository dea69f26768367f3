//! `inrun plan` as a person runs it: the binary, a kubeconfig, the JSON report.

use serde_json::Value;

/// `inrun plan` with `args` as `kubeconfig`'s identity: its exit code and its JSON report.
pub fn run(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, Vec<Value>) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
        .arg("plan")
        .args(args)
        .args(["-o", "json", "--kubeconfig"])
        .arg(kubeconfig)
        .output()
        .expect("inrun plan");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Vec<Value> = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "inrun plan {args:?}: not a JSON report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), report)
}

/// The plan of the CR `name` in `report`.
pub fn of<'a>(report: &'a [Value], name: &str) -> &'a Value {
    report
        .iter()
        .find(|p| {
            p["cr"]
                .as_str()
                .is_some_and(|c| c.ends_with(&format!("/{name}")))
        })
        .unwrap_or_else(|| panic!("{name} is not in the plan: {report:#?}"))
}
