//! The control plane does not outlive the process that started it, even when that process
//! is killed with SIGKILL and runs no code of its own at exit.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::Context as _;
use inrun_testenv::{DEFAULT_TIMEOUT, TestResult, wait_for};
use tokio::io::{AsyncBufReadExt as _, BufReader};

/// Processes whose command line mentions `dir` (etcd's data dir, the API server's certs).
fn processes_using(dir: &Path) -> Vec<String> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            cmdline.contains(&needle).then_some(cmdline)
        })
        .collect()
}

#[tokio::test]
async fn a_killed_cluster_leaves_no_process_or_directory_behind() -> TestResult {
    let mut cluster = tokio::process::Command::new(env!("CARGO_BIN_EXE_inrun-cluster"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting inrun-cluster")?;
    let stdout = cluster.stdout.take().context("inrun-cluster's stdout")?;
    let first_line = tokio::time::timeout(DEFAULT_TIMEOUT * 4, async {
        BufReader::new(stdout).lines().next_line().await
    })
    .await
    .context("inrun-cluster printed nothing in time")??
    .context("inrun-cluster exited without printing the kubeconfig")?;
    let kubeconfig = PathBuf::from(
        first_line
            .strip_prefix("export KUBECONFIG=")
            .with_context(|| format!("unexpected first line: {first_line}"))?,
    );
    let dir = kubeconfig.parent().context("the kubeconfig's directory")?;
    assert!(
        processes_using(dir).len() >= 2,
        "etcd and kube-apiserver should be running: {:?}",
        processes_using(dir)
    );

    cluster.kill().await.context("SIGKILL to inrun-cluster")?;

    wait_for(
        "the control plane to be cleaned up",
        DEFAULT_TIMEOUT,
        || async { (!dir.exists() && processes_using(dir).is_empty()).then_some(()) },
    )
    .await
    .with_context(|| format!("still there: {:?}", processes_using(dir)))?;
    Ok(())
}
