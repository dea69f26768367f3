//! `reconcile.external` end to end against real PostgreSQL, Redis and Prometheus servers
//! (Debian packages, `tests/services/install.sh`) and the real kube-apiserver: values
//! flow into args, a child's fields and status; failures fail the reconcile naming the
//! call, or fall back to the call's default.

mod support;

use inrun_testenv::services::{Postgres, Prometheus, Redis};
use inrun_testenv::{ControlPlane, TestResult};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use support::*;

fn blueprint(group: &str, prometheus: &str, redis: &str, closed: u16) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: e2e-external}}
spec:
  runtime:
    backoff: {{base: 1s, max: 5s}}
  crds:
    - group: {group}
      version: v1alpha1
      kind: WebApp
      emit:
        status:
          tier: "{{{{ .external.plan[0].tier }}}}"
      reconcile:
        external:
          - name: plan
            postgres:
              secretRef: {{name: db, key: url}}
              query: "SELECT replicas, tier, settings FROM plans WHERE name = $1 AND replicas >= $2"
              params: ["{{{{ .metadata.name }}}}", "{{{{ .spec.minReplicas }}}}"]
          - name: limits
            redis:
              url: "{redis}"
              command: [HGETALL, "limits:{{{{ .metadata.name }}}}"]
          - name: image
            redis:
              url: "{redis}"
              command: [GET, "image:{{{{ .metadata.name }}}}"]
          - name: up
            prometheus:
              url: "{prometheus}"
              query: 'up{{job="prometheus"}}'
          - name: legacy
            postgres:
              secretRef: {{name: db, key: url}}
              query: "SELECT x FROM no_such_table"
            onError: default
            default: {{note: fallback}}
          - name: flood
            postgres:
              secretRef: {{name: db, key: url}}
              query: "SELECT generate_series(1, 100000) AS n"
            onError: default
            default: {{note: capped}}
          - name: bloat
            redis:
              url: "{redis}"
              command: [GET, bloat]
            onError: default
            default: {{note: capped}}
        args:
          replicas: "{{{{ .external.plan[0].replicas }}}}"
          image: "{{{{ .external.image }}}}"
          cpu: "{{{{ .external.limits.cpu }}}}"
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-inputs"}}
            data:
              replicas: "{{{{ .args.replicas | string }}}}"
              image: "{{{{ .args.image }}}}"
              cpu: "{{{{ .args.cpu }}}}"
              memory: "{{{{ .external.limits.memory }}}}"
              mode: "{{{{ .external.plan[0].settings.mode }}}}"
              up: "{{{{ .external.up.value | string }}}}"
              upJob: "{{{{ .external.up.labels.job }}}}"
              legacy: "{{{{ .external.legacy.note }}}}"
              flood: "{{{{ .external.flood.note }}}}"
              bloat: "{{{{ .external.bloat.note }}}}"
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
    - group: {group}
      version: v1alpha1
      kind: Cache
      reconcile:
        external:
          - name: cache
            redis: {{url: "redis://127.0.0.1:{closed}/", command: [GET, k]}}
            timeout: 2s
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-cache"}}
            data: {{v: "{{{{ .external.cache }}}}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_values_from_postgres_redis_and_prometheus_reach_args_children_and_status()
-> TestResult {
    let (pg, redis, prom) = tokio::join!(Postgres::start(), Redis::start(), Prometheus::start());
    let (pg, redis, prom) = (pg?, redis?, prom?);
    eprintln!(
        "servers: {}; {}; {}",
        pg.version, redis.version, prom.version
    );
    pg.psql(
        "CREATE TABLE plans (name text, replicas int, tier text, settings jsonb);
         INSERT INTO plans VALUES ('shop', 3, 'gold', '{\"mode\": \"fast\"}');",
    )?;
    redis.cli(&["HSET", "limits:shop", "cpu", "500m", "memory", "256Mi"])?;
    redis.cli(&["SET", "image:shop", "nginx:1.29"])?;
    // A value of 5 MiB, more than the host reads from a Redis connection.
    redis.cli(&["SETRANGE", "bloat", "5242879", "x"])?;

    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let group = unique_group("external");
    let ns = ControlPlane::shared().namespace("external").await?;
    // The database URL is a credential: it comes from a Secret.
    let secrets: Api<Secret> = Api::namespaced(client(), &ns);
    secrets
        .patch(
            "db",
            &PatchParams::apply("e2e-test").force(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "db"}, "stringData": {"url": pg.url}})),
        )
        .await?;
    let host = Host::start(&blueprint(&group, &prom.url, &redis.url, closed)).await;
    let ar = resource(&group, "WebApp");
    served(&ar).await;
    served(&resource(&group, "Cache")).await;
    apply_cr(
        &ar,
        &ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop}}\nspec: {{minReplicas: 2}}\n"
        ),
    )
    .await;

    let cm = eventually("the ConfigMap built from external values", || {
        get(configmaps(), Some(&ns), "shop-inputs")
    })
    .await;
    let data = &cm.data["data"];
    assert_eq!(data["replicas"], "3", "{data}");
    assert_eq!(data["image"], "nginx:1.29");
    assert_eq!(data["cpu"], "500m");
    assert_eq!(data["memory"], "256Mi");
    assert_eq!(data["mode"], "fast");
    assert_eq!(data["up"], "1");
    assert_eq!(data["upJob"], "prometheus");
    assert_eq!(data["legacy"], "fallback");
    // A query returning more rows than the host reads fails as a call (here: its default).
    assert_eq!(data["flood"], "capped", "{data}");
    // So does a Redis reply larger than the host reads.
    assert_eq!(data["bloat"], "capped", "{data}");
    let cr = eventually("the CR's status from external values", || async {
        let cr = get(&ar, Some(&ns), "shop").await?;
        (cr.data["status"]["tier"] == "gold").then_some(cr)
    })
    .await;
    assert_eq!(reconciled(&cr).map(|r| r.0).as_deref(), Some("True"));

    // A failing call with the default policy fails the reconcile, naming the call.
    apply_cr(
        &resource(&group, "Cache"),
        &ns,
        &format!("apiVersion: {group}/v1alpha1\nkind: Cache\nmetadata: {{name: c1}}\nspec: {{}}\n"),
    )
    .await;
    let note = event(&ns, "c1", "ReconcileError").await;
    assert!(
        note.contains("external call \"cache\" (redis) failed"),
        "{note}"
    );
    assert!(get(configmaps(), Some(&ns), "c1-cache").await.is_none());

    // A failing query also names the call: the parameter no longer matches any row, so
    // `plan[0]` is missing, but a broken query is what fails here.
    pg.psql("ALTER TABLE plans RENAME TO plans_old")?;
    apply_cr(
        &ar,
        &ns,
        &format!(
            "apiVersion: {group}/v1alpha1\nkind: WebApp\nmetadata: {{name: shop}}\nspec: {{minReplicas: 1}}\n"
        ),
    )
    .await;
    let note = event(&ns, "shop", "ReconcileError").await;
    assert!(
        note.contains("external call \"plan\" (postgres) failed") && note.contains("plans"),
        "{note}"
    );
    host.stop().await;
    Ok(())
}
