//! The host's API client on a real kube-apiserver: an explicit kubeconfig context (and an
//! unknown one refused by name, by the library and by `inrun run`), and a service-account
//! token file that rotates under a running client.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::time::Duration;

use inrun::kubeconfig::{ConnectError, ConnectOptions, connect};
use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use support::*;

fn options(context: Option<&str>) -> ConnectOptions {
    ConnectOptions {
        kubeconfig: Some(ControlPlane::shared().kubeconfig().to_path_buf()),
        context: context.map(str::to_string),
        request_timeout: Some(Duration::from_secs(10)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_named_context_is_the_one_used_and_an_unknown_one_is_refused_by_name() -> TestResult {
    // The harness's kubeconfig: `inrun` (admin, the current context) and
    // `inrun-unprivileged` (a user with no permissions).
    let admin = connect(&options(Some("inrun"))).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.client);
    namespaces.list(&ListParams::default().limit(1)).await?;

    let unprivileged = connect(&options(Some("inrun-unprivileged"))).await?;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(unprivileged.client);
    match namespaces.list(&ListParams::default().limit(1)).await {
        Err(kube::Error::Api(e)) => assert_eq!(e.code, 403, "{e:?}"),
        other => panic!("the unprivileged context listed namespaces: {other:?}"),
    }

    let err = connect(&options(Some("nope")))
        .await
        .err()
        .expect("an unknown context is refused");
    assert!(matches!(&err, ConnectError::Context { name, .. } if name == "nope"));
    assert_eq!(err.to_string(), "kubeconfig context \"nope\"");

    // The command says the same and stops before doing anything.
    let out = inrun_run(&["--context", "nope"])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("kubeconfig context \"nope\""), "{stderr}");

    // No context named, two in the kubeconfig, no in-cluster credentials: `inrun run` does
    // not guess the cluster from the current context; it names the choices and stops.
    let out = inrun_run(&[])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "the kubeconfig has 2 contexts (inrun, inrun-unprivileged) and none is named: say which cluster to act on with --context"
        ),
        "{stderr}"
    );
    Ok(())
}

#[test]
fn a_bad_plugin_ca_or_log_filter_stops_inrun_run_naming_it_instead_of_being_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n",
    )
    .expect("write ca");
    let ca = ca.display().to_string();
    // Both stop before the host reads or writes anything, so the context is the user with
    // no permissions at all: the refusal needs no rights.
    let stderr = refused(&["--context", "inrun-unprivileged", "--plugin-ca", &ca]);
    assert!(
        stderr.contains("the --plugin-ca certificates: "),
        "{stderr}"
    );
    let stderr = refused(&["--context", "inrun-unprivileged", "--log", "inrun=loud"]);
    assert!(
        stderr.contains("log filter \"inrun=loud\" (--log, INRUN_LOG or RUST_LOG) is not valid"),
        "{stderr}"
    );
}

/// The standard error of `inrun run` with `args`, which must stop on its own with a
/// failure within a minute (a host that went on serving instead is killed and fails the
/// test).
fn refused(args: &[&str]) -> String {
    let mut child = inrun_run_command(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn inrun run");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("inrun run {args:?} went on running");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    stderr
}

/// `inrun run` of the declarative example on the harness's kubeconfig (two contexts), out
/// of any cluster, with `args`; its output once it stopped.
fn inrun_run(args: &[&str]) -> std::io::Result<std::process::Output> {
    inrun_run_command(args).output()
}

/// The command line of [`inrun_run`].
fn inrun_run_command(args: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_inrun"));
    command
        .args(["run", "--blueprint"])
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../deploy/examples/declarative/blueprint.yaml"
        ))
        .arg("--kubeconfig")
        .arg(ControlPlane::shared().kubeconfig())
        .args(["--console-port", "0", "--health-port", "0"])
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(std::process::Stdio::null());
    command
}

/// A token for ServiceAccount `sa` in `ns`, bound to the Secret `secret` (it stops being
/// valid when the Secret is deleted).
async fn bound_token(ns: &str, sa: &str, secret: &str) -> anyhow::Result<String> {
    let secrets: Api<Secret> = Api::namespaced(client(), ns);
    let created = secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some(secret.into()),
                    ..ObjectMeta::default()
                },
                ..Secret::default()
            },
        )
        .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(3600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Secret".into()),
                name: Some(secret.into()),
                uid: created.metadata.uid,
            }),
            ..TokenRequestSpec::default()
        }),
        ..TokenRequest::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(client(), ns);
    let token = sas
        .create_token_request(sa, &PostParams::default(), &request)
        .await?;
    token
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| anyhow::anyhow!("no token in the TokenRequest status"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_service_account_token_file_is_followed_by_a_running_client() -> TestResult {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("token-rotation").await?;
    let sas: Api<ServiceAccount> = Api::namespaced(client(), &ns);
    sas.create(
        &PostParams::default(),
        &ServiceAccount {
            metadata: ObjectMeta {
                name: Some("rotator".into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        },
    )
    .await?;
    // A Role of its own: `view` is aggregated, and nothing aggregates it without a
    // controller-manager.
    let roles: Api<Role> = Api::namespaced(client(), &ns);
    roles
        .create(
            &PostParams::default(),
            &Role {
                metadata: ObjectMeta {
                    name: Some("read-configmaps".into()),
                    ..ObjectMeta::default()
                },
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["configmaps".into()]),
                    verbs: vec!["list".into()],
                    ..PolicyRule::default()
                }]),
            },
        )
        .await?;
    let bindings: Api<RoleBinding> = Api::namespaced(client(), &ns);
    bindings
        .create(
            &PostParams::default(),
            &RoleBinding {
                metadata: ObjectMeta {
                    name: Some("rotator-view".into()),
                    ..ObjectMeta::default()
                },
                role_ref: RoleRef {
                    api_group: Some("rbac.authorization.k8s.io".into()),
                    kind: "Role".into(),
                    name: "read-configmaps".into(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name: "rotator".into(),
                    namespace: Some(ns.clone()),
                    ..Subject::default()
                }]),
            },
        )
        .await?;
    let first = bound_token(&ns, "rotator", "first").await?;
    let second = bound_token(&ns, "rotator", "second").await?;

    // A kubeconfig whose user reads its token from a file, as a projected service-account
    // token is read in a pod.
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &first)?;
    let kubeconfig = dir.path().join("kubeconfig");
    let ca = find_ca(cp.kubeconfig())?;
    std::fs::write(
        &kubeconfig,
        serde_json::to_string(&serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": cp.server(), "certificate-authority": ca}}],
            "users": [{"name": "u", "user": {"tokenFile": token_file}}],
            "contexts": [{"name": "rotating", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "rotating",
        }))?,
    )?;
    let connection = connect(&ConnectOptions {
        kubeconfig: Some(kubeconfig),
        context: Some("rotating".into()),
        request_timeout: Some(Duration::from_secs(10)),
    })
    .await?;
    let configmaps: Api<ConfigMap> = Api::namespaced(connection.client.clone(), &ns);
    eventually("the first token to be allowed (RBAC settles)", || async {
        configmaps
            .list(&ListParams::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;

    // The token rotates: the file gets the new one (atomically, as the kubelet does it) and
    // the old one stops being valid.
    let fresh = dir.path().join("token.new");
    std::fs::write(&fresh, &second)?;
    std::fs::rename(&fresh, &token_file)?;
    let secrets: Api<Secret> = Api::namespaced(client(), &ns);
    secrets.delete("first", &DeleteParams::default()).await?;
    let old: Api<ConfigMap> = Api::namespaced(cp.client_with_token(&first), &ns);
    eventually("the first token to be refused", || async {
        matches!(old.list(&ListParams::default()).await, Err(kube::Error::Api(e)) if e.code == 401)
            .then_some(())
    })
    .await;

    // The running client reads the file again (kube's client does within a minute) and
    // goes on working with the new token.
    let recovered = inrun_testenv::wait_for(
        "the client to follow the rotated token",
        Duration::from_secs(120),
        || async {
            configmaps
                .list(&ListParams::default())
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    assert!(recovered.is_ok(), "{recovered:?}");
    Ok(())
}

/// The certificate authority the harness's kubeconfig names.
fn find_ca(kubeconfig: &std::path::Path) -> anyhow::Result<std::path::PathBuf> {
    let text = std::fs::read_to_string(kubeconfig)?;
    let value: serde_json::Value = serde_json::from_str(&text)?;
    value["clusters"][0]["cluster"]["certificate-authority"]
        .as_str()
        .map(std::path::PathBuf::from)
        .ok_or_else(|| anyhow::anyhow!("no certificate-authority in {}", kubeconfig.display()))
}
