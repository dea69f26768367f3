//! The host's identity in end-to-end tests, as production runs it: a ServiceAccount of its
//! own, bound to exactly what `inrun generate rbac` prints for the test's Blueprint and
//! flags, never the harness's admin. A test that runs the host as the admin says why.

use std::sync::atomic::{AtomicUsize, Ordering};

use inrun::generate::rbac::{self, RbacOptions};
use inrun_testenv::ControlPlane;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// The namespace the hosts' ServiceAccounts live in.
pub const NAMESPACE: &str = "inrun-e2e";

/// A ServiceAccount holding only what the generated RBAC grants, and a token for it.
#[derive(Clone)]
pub struct Identity {
    /// The ServiceAccount's name (also the name of its roles and bindings).
    pub name: String,
    /// A bearer token for it (TokenRequest, one hour).
    pub token: String,
    /// The control plane's client configuration with that token.
    config: kube::Config,
    /// The control plane's kubeconfig, whose cluster entry the host's copies.
    admin_kubeconfig: std::path::PathBuf,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("name", &self.name)
            .finish()
    }
}

impl Identity {
    /// The flags `inrun generate rbac` takes besides the Blueprint, with a fresh
    /// ServiceAccount name, `--install-crds` on and `-n` [`NAMESPACE`].
    pub fn options() -> RbacOptions {
        static N: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "host-{}-{}",
            N.fetch_add(1, Ordering::Relaxed),
            std::process::id()
        );
        RbacOptions {
            name: name.clone(),
            namespace: NAMESPACE.into(),
            service_account: name,
            install_crds: true,
            ..RbacOptions::default()
        }
    }

    /// A ServiceAccount bound to `inrun generate rbac` for `blueprint` with `options`
    /// (applied as the admin), once the API server's authorizer grants what the host
    /// checks at start-up.
    pub async fn generated(
        blueprint: &inrun::blueprint::Blueprint,
        options: &RbacOptions,
    ) -> Identity {
        Self::generated_on(ControlPlane::shared(), blueprint, options).await
    }

    /// [`Identity::generated`] on the control plane `cp` (a test's own).
    pub async fn generated_on(
        cp: &ControlPlane,
        blueprint: &inrun::blueprint::Blueprint,
        options: &RbacOptions,
    ) -> Identity {
        let docs = rbac::manifests(blueprint, options);
        Self::bound_on(cp, options, &docs, &rbac::required(blueprint, options)).await
    }

    /// A ServiceAccount bound to what `inrun generate rbac` prints for each of
    /// `blueprints` with `options` (a ClusterRole and binding each, as an operator applies
    /// one output per tenant file), or for an empty Blueprint when there is none.
    pub async fn for_blueprints(
        blueprints: &[inrun::blueprint::Blueprint],
        options: &RbacOptions,
    ) -> Identity {
        let empty;
        let blueprints = if blueprints.is_empty() {
            empty = [inrun::blueprint::from_str(
                "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: {name: fleet}\nspec: {crds: []}\n",
                "fleet.yaml",
            )
            .expect("an empty Blueprint")];
            &empty[..]
        } else {
            blueprints
        };
        let mut docs = Vec::new();
        let mut expected = Vec::new();
        for (i, blueprint) in blueprints.iter().enumerate() {
            let each = RbacOptions {
                name: format!("{}-{i}", options.name),
                ..options.clone()
            };
            docs.extend(rbac::manifests(blueprint, &each));
            expected.extend(rbac::required(blueprint, &each));
        }
        Self::bound(options, &docs, &expected).await
    }

    /// A ServiceAccount named by `options`, bound by `docs` (RBAC manifests, applied as
    /// the admin); waits until `expected` is granted.
    pub async fn bound(
        options: &RbacOptions,
        docs: &[serde_json::Value],
        expected: &[rbac::Permission],
    ) -> Identity {
        Self::bound_on(ControlPlane::shared(), options, docs, expected).await
    }

    /// [`Identity::bound`] on the control plane `cp`.
    pub async fn bound_on(
        cp: &ControlPlane,
        options: &RbacOptions,
        docs: &[serde_json::Value],
        expected: &[rbac::Permission],
    ) -> Identity {
        let admin = cp.client();
        let params = PatchParams::apply("inrun-e2e").force();
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin.clone());
        namespaces
            .patch(
                &options.namespace,
                &params,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": options.namespace}})),
            )
            .await
            .expect("the hosts' namespace");
        let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &options.namespace);
        accounts
            .patch(
                &options.service_account,
                &params,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": options.service_account, "namespace": options.namespace}})),
            )
            .await
            .expect("the host's ServiceAccount");
        super::apply_all_with(&admin, docs).await;
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(3600),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let token = accounts
            .create_token_request(&options.service_account, &PostParams::default(), &request)
            .await
            .expect("a token for the host's ServiceAccount")
            .status
            .and_then(|s| s.token)
            .expect("a token");
        let identity = Identity {
            name: options.service_account.clone(),
            config: cp.config_with_token(&token),
            token,
            admin_kubeconfig: cp.kubeconfig().to_path_buf(),
        };
        // The authorizer learns of new bindings through its informers: wait for them.
        let client = cp.client_with_token(&identity.token);
        super::eventually("the generated RBAC to take effect", || async {
            inrun::runtime::access::check(&client, None, expected)
                .await
                .ok()
        })
        .await;
        identity
    }

    /// A client configuration acting as this ServiceAccount.
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// A kubeconfig for `inrun run` acting as this ServiceAccount, written into `dir`.
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        let admin =
            std::fs::read_to_string(&self.admin_kubeconfig).expect("the harness kubeconfig");
        let mut doc: serde_json::Value =
            serde_yaml_ng::from_str(&admin).expect("the harness kubeconfig parses");
        doc["users"] = json!([{"name": self.name, "user": {"token": self.token}}]);
        doc["contexts"] = json!([{"name": "host", "context": {"cluster": "inrun", "user": self.name, "namespace": "default"}}]);
        doc["current-context"] = json!("host");
        let path = dir.join(format!("{}.kubeconfig", self.name));
        std::fs::write(&path, doc.to_string()).expect("writing the host's kubeconfig");
        path
    }
}

/// How many requests the host recording into `metrics` got refused with 403
/// (`rest_client_requests_total{code="403"}`).
pub fn forbidden(metrics: &inrun::metrics::Metrics) -> u64 {
    count_forbidden(&metrics.render())
}

/// The 403s in a Prometheus text exposition (a scrape of `/metrics`, or `render`).
pub fn count_forbidden(text: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with("rest_client_requests_total{") && l.contains("code=\"403\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum::<f64>() as u64
}
