//! `make cluster`: the test control plane in the foreground, for kubectl and `inrun` by hand.

use anyhow::Context as _;
use inrun_testenv::ControlPlane;
use tokio::signal::unix::{SignalKind, signal};

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    eprintln!("starting etcd and kube-apiserver on 127.0.0.1 ...");
    let control_plane = ControlPlane::start().context("starting the control plane")?;
    let version = control_plane
        .client()
        .apiserver_version()
        .await
        .context("asking the API server for its version")?;
    eprintln!(
        "kube-apiserver {} ready at {} after {:.1?}; logs in {}",
        version.git_version,
        control_plane.server(),
        control_plane.startup_time(),
        control_plane.dir().display(),
    );
    eprintln!(
        "context inrun-unprivileged is a user with no RBAC grants; Ctrl-C stops and removes everything"
    );
    println!("export KUBECONFIG={}", control_plane.kubeconfig().display());

    let mut terminate = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    tokio::select! {
        result = tokio::signal::ctrl_c() => result.context("listening for Ctrl-C")?,
        _ = terminate.recv() => {}
    }
    eprintln!("stopping");
    drop(control_plane);
    Ok(())
}
