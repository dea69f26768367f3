//! What `inrun generate` writes, as the real API server and `kubectl` take it: the
//! `Blueprint` CRD explains its fields and refuses unknown ones; a generated CRD answers to
//! its short name and to `kubectl get inrun`; the users' roles grant what they say.

mod support;

use inrun_testenv::ControlPlane;
use serde_json::Value;
use support::{apply_all, eventually, kubectl, unique_group};

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Polls `kubectl args` until it succeeds (discovery lags behind a new CRD); its output.
async fn kubectl_until_ok(args: &[&str]) -> String {
    eventually(&format!("kubectl {args:?} to succeed"), || async {
        let out = kubectl(args, "");
        out.status.success().then(|| text(&out))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blueprint_crd_explains_its_fields_and_refuses_unknown_ones() {
    apply_all(&[inrun::generate::blueprint_crd()]).await;
    let explained =
        kubectl_until_ok(&["explain", "blueprints.spec.crds.reconcile.request.object"]).await;
    assert!(explained.contains("How the CR is trimmed"), "{explained}");
    assert!(explained.contains("exclude"), "{explained}");
    let short = kubectl_until_ok(&["get", "bp"]).await;
    assert!(!short.contains("error"), "{short}");

    // Every example Blueprint in the repository is accepted as a resource.
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/examples");
    for example in ["declarative", "hooks", "constructor"] {
        let text_in = std::fs::read_to_string(examples.join(example).join("blueprint.yaml"))
            .expect("example blueprint");
        let out = kubectl(&["apply", "--dry-run=server", "-f", "-"], &text_in);
        assert!(out.status.success(), "{example}: {}", text(&out));
    }

    // A typo is refused by name (kubectl's strict field validation), a wrong type too.
    let typo = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: typo}\nspec:\n  crds:\n    - {group: a.example.dev, version: v1, kind: A, reconcille: {}}\n";
    let out = kubectl(&["apply", "--dry-run=server", "-f", "-"], typo);
    assert!(!out.status.success(), "a typo was accepted: {}", text(&out));
    assert!(
        text(&out).contains("unknown field \"spec.crds[0].reconcille\""),
        "{}",
        text(&out)
    );
    let wrong = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: wrong}\nspec:\n  crds:\n    - {group: a.example.dev, version: v1, kind: A, workers: many}\n";
    let out = kubectl(&["apply", "--dry-run=server", "-f", "-"], wrong);
    assert!(
        !out.status.success(),
        "a wrong type was accepted: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("spec.crds[0].workers"),
        "{}",
        text(&out)
    );
}

fn webapp_blueprint(group: &str) -> inrun::blueprint::Blueprint {
    inrun::blueprint::from_str(
        &format!(
            "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {{name: roles}}\nspec:\n  crds:\n    - group: {group}\n      version: v1alpha1\n      kind: WebApp\n      shortNames: [wa{n}]\n      reconcile: {{onReconcile: []}}\n",
            n = std::process::id()
        ),
        "roles.yaml",
    )
    .expect("blueprint")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_crd_answers_to_its_short_name_and_to_the_inrun_category() {
    let cp = ControlPlane::shared();
    let ns = cp.namespace("short").await.expect("namespace");
    let group = unique_group("short_names");
    let bp = webapp_blueprint(&group);
    apply_all(&inrun::generate::crds(&bp)).await;
    let short = format!("wa{}", std::process::id());
    let cr = format!(
        "apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop, namespace: {ns}}}\nspec: {{}}\n"
    );
    kubectl_until_ok(&["get", &short, "-n", &ns]).await;
    let out = kubectl(&["apply", "-f", "-"], &cr);
    assert!(out.status.success(), "{}", text(&out));
    let by_short = kubectl_until_ok(&["get", &short, "-n", &ns, "-o", "name"]).await;
    assert!(by_short.contains("webapp"), "{by_short}");
    assert!(by_short.contains("/shop"), "{by_short}");
    let by_category = kubectl_until_ok(&["get", "inrun", "-n", &ns, "-o", "name"]).await;
    assert!(
        by_category.contains(&format!("webapp.{group}/shop")),
        "{by_category}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edit_role_lets_a_user_write_crs_but_not_status_and_view_only_reads() {
    // Aggregation into admin/edit/view is kube-controller-manager's work, which the
    // harness does not run: bind the generated roles directly and ask the authorizer.
    let cp = ControlPlane::shared();
    let ns = cp.namespace("roles").await.expect("namespace");
    let group = unique_group("user_roles");
    let bp = webapp_blueprint(&group);
    let name = format!("inrun-e2e-{}", std::process::id());
    let roles = inrun::generate::roles::user_roles(&bp, &name);
    let mut docs: Vec<Value> = inrun::generate::crds(&bp);
    docs.extend(roles.iter().cloned());
    for (user, role) in [("alice", "edit"), ("bob", "view")] {
        docs.push(serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": format!("{user}-{role}"), "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": format!("{name}-{role}")},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
        }));
    }
    apply_all(&docs).await;
    let can = |user: &str, verb: &str, resource: &str| {
        let (plural, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        let target = format!("{plural}.{group}");
        let mut args = vec!["auth", "can-i", verb, &target, "-n", &ns, "--as", user];
        if !subresource.is_empty() {
            args.extend(["--subresource", subresource]);
        }
        let out = kubectl(&args, "");
        String::from_utf8_lossy(&out.stdout).trim() == "yes"
    };
    for (user, verb, resource, allowed) in [
        ("alice", "create", "webapps", true),
        ("alice", "delete", "webapps", true),
        ("alice", "get", "webapps/status", true),
        ("alice", "patch", "webapps/status", false),
        ("bob", "list", "webapps", true),
        ("bob", "get", "webapps/status", true),
        ("bob", "create", "webapps", false),
        ("bob", "patch", "webapps", false),
    ] {
        assert_eq!(
            can(user, verb, resource),
            allowed,
            "{user} {verb} {resource}"
        );
    }
}
