//! One tenant tries to take the host's memory, on a real kube-apiserver: its constructor
//! returns outcomes of 16 MB each (a thousand ConfigMaps of 16 KiB), and another tenant's
//! Blueprint loads plugins of a few hundred bytes whose memory images span 256 MiB each. The host runs as
//! production runs it — `inrun run --tenants`, as the ServiceAccount `inrun generate rbac`
//! makes for the tenant files, in a pod of 512 MiB (`--memory-limit`) — and stays under
//! that: the hostile CRs fail `Ready=False`, reason `BudgetExceeded`, naming the budget;
//! the bombs compile to what their data takes; the other tenant's CRs become Ready.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::path::Path;

use inrun_testenv::{ControlPlane, TestResult};
use support::{apply_cr, eventually, get, plugin, ready, resource, unique_group};

/// The memory the host is run within.
const LIMIT_MIB: u64 = 512;

/// A component of a few hundred bytes whose four memory images (one a core module), kept
/// whole, would take 256 MiB once compiled; `n` makes each one's bytes (and digest) its
/// own. It exports no Inrun world, so its load fails once compiled.
fn compile_bomb(n: usize) -> Vec<u8> {
    let body: String = (0..4)
        .map(|i| {
            format!(
                "(core module $m{i} (memory 1024) (data (i32.const 0) \"{n}\") (data (i32.const 67108863) \"b\"))\n(core instance (instantiate $m{i}))\n"
            )
        })
        .collect();
    wat::parse_str(format!("(component {body})")).expect("component text")
}

fn crd(group: &str, kind: &str, workers: u32, reconcile: &str) -> String {
    format!(
        "    - group: {group}\n      version: v1alpha1\n      kind: {kind}\n      workers: {workers}\n      reconcile:\n{reconcile}        managedResources: [ {{ apiVersion: v1, kind: ConfigMap }} ]\n"
    )
}

fn blueprint(name: &str, crds: &[String]) -> String {
    format!(
        "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{ name: {name} }}\nspec:\n  crds:\n{}",
        crds.concat()
    )
}

/// The tenant files: `hoarder` (outcomes of 16 MB), four `bomber-n` (a plugin each, whose
/// images span 256 MiB, written into `dir`) and `bystander` (one small ConfigMap per CR).
fn tenants(dir: &Path, hoarder: &str, bomber: &str, bystander: &str) -> Vec<(String, String)> {
    let hostile = format!(
        "        default: false\n        args: {{ mode: sized, count: 1000, size: 16384 }}\n        constructor: {{ location: {}, limits: {{ outputSize: 16Mi, resources: 1000, memory: 128Mi }} }}\n",
        plugin("inrun_test_hostile")
    );
    let bombs = (0..4).map(|n| {
        let path = dir.join(format!("bomb-{n}.wasm"));
        std::fs::write(&path, compile_bomb(n)).expect("writing a bomb");
        let crd = crd(
            bomber,
            &format!("Bomb{n}"),
            1,
            &format!(
                "        default: false\n        constructor: {{ location: {} }}\n",
                path.display()
            ),
        );
        (
            format!("bomber-{n}.yaml"),
            blueprint(&format!("bomber-{n}"), &[crd]),
        )
    });
    let calm = "        onReconcile:\n          - apiVersion: v1\n            kind: ConfigMap\n            metadata: { name: '{{ .metadata.name }}-calm' }\n            data: { a: b }\n";
    let mut files = vec![
        (
            "hoarder.yaml".into(),
            blueprint("hoarder", &[crd(hoarder, "Hoard", 8, &hostile)]),
        ),
        (
            "bystander.yaml".into(),
            blueprint("bystander", &[crd(bystander, "Calm", 2, calm)]),
        ),
    ];
    files.extend(bombs);
    files
}

/// A line of `/proc/<pid>/status` in MiB (`VmHWM`: the peak resident set).
fn status_mib(pid: u32, field: &str) -> u64 {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map_or(0, |kb| kb / 1024)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_hoarding_outcomes_or_compiling_bombs_fails_its_own_crs_and_the_host_stays_under_its_limit()
-> TestResult {
    let (hoarder, bomber, bystander) = (
        unique_group("hoard"),
        unique_group("bomb"),
        unique_group("calm"),
    );
    let ns = ControlPlane::shared().namespace("host-memory").await?;
    let work = tempfile::tempdir()?;
    let dir = work.path().join("tenants");
    std::fs::create_dir(&dir)?;
    let files = tenants(work.path(), &hoarder, &bomber, &bystander);
    let mut parsed = Vec::new();
    for (name, text) in &files {
        std::fs::write(dir.join(name), text)?;
        parsed.push(inrun::blueprint::from_str(text, name)?);
    }
    let identity = support::identity::Identity::for_blueprints(
        &parsed,
        &support::identity::Identity::options(),
    )
    .await;
    let kubeconfig = identity.kubeconfig(work.path());
    let log_path = work.path().join("host.log");
    let mut host = tokio::process::Command::new(env!("CARGO_BIN_EXE_inrun"))
        .arg("run")
        .arg("--tenants")
        .arg(&dir)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--install-crds",
            "--health-port",
            "0",
            "--console-port",
            "0",
        ])
        .args(["--memory-limit", &format!("{LIMIT_MIB}Mi")])
        // The operator lets tenants' plugins return up to 16 MiB: the host-memory budget,
        // not the output cap, is what stands between them and the host.
        .args([
            "--max-plugin-output",
            "16Mi",
            "--max-plugin-resources",
            "1000",
        ])
        .arg("--cache-dir")
        .arg(work.path().join("cache"))
        .env("INRUN_LOG", "info")
        .stderr(std::fs::File::create(&log_path)?)
        .kill_on_drop(true)
        .spawn()?;
    let pid = host.id().expect("running");

    let hoard = resource(&hoarder, "Hoard");
    let calm = resource(&bystander, "Calm");
    support::served(&hoard).await;
    support::served(&calm).await;
    let cr = |ar: &kube::discovery::ApiResource, name: String| {
        format!(
            "apiVersion: {}\nkind: {}\nmetadata: {{name: {name}}}\nspec: {{}}\n",
            ar.api_version, ar.kind
        )
    };
    for i in 0..8 {
        apply_cr(&hoard, &ns, &cr(&hoard, format!("h{i}"))).await;
    }
    for i in 0..3 {
        apply_cr(&calm, &ns, &cr(&calm, format!("c{i}"))).await;
    }
    // The bystander's CRs become Ready beside the hoarder.
    for i in 0..3 {
        let name = format!("c{i}");
        eventually(&format!("Calm/{name} Ready"), || async {
            let cr = get(&calm, Some(&ns), &name).await?;
            (ready(&cr)?.0 == "True").then_some(())
        })
        .await;
    }
    // Every hoarding CR fails on its own budget, named.
    for i in 0..8 {
        let name = format!("h{i}");
        let (reason, message) = eventually(&format!("Hoard/{name} refused"), || async {
            let cr = get(&hoard, Some(&ns), &name).await?;
            let (status, reason, message) = support::reconciled(&cr)?;
            (status == "False").then_some((reason, message))
        })
        .await;
        assert_eq!(reason, "BudgetExceeded", "{message}");
        assert!(message.contains("host-memory budget"), "{message}");
    }
    // The bombs compiled, small, and were refused for what they are.
    let log = eventually("the bombs compiled and refused", || async {
        let log = std::fs::read_to_string(&log_path).ok()?;
        (log.matches("exports no Inrun world").count() >= 4).then_some(log)
    })
    .await;
    assert!(!log.contains("panicked"), "{log}");
    let peak = status_mib(pid, "VmHWM:");
    assert!(peak > 0, "the host's status was read");
    eprintln!("the host peaked at {peak} MiB of {LIMIT_MIB} MiB");
    assert!(
        peak < LIMIT_MIB * 3 / 4,
        "the host peaked at {peak} MiB, against a limit of {LIMIT_MIB} MiB"
    );
    // No ConfigMap of the hoarder was written.
    let configmaps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(support::client(), &ns);
    let written = configmaps.list(&Default::default()).await?;
    assert!(
        written.items.iter().all(|cm| !cm
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .starts_with('h')),
        "a hoarding CR's children were written"
    );
    host.kill().await?;
    let text = std::fs::read_to_string(&log_path)?;
    assert!(
        !text.contains(" is forbidden: "),
        "the generated RBAC lacked something: {text}"
    );
    Ok(())
}
