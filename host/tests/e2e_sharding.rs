//! Sharding against the real API server (KEP-5866 sharded list and watch, the test control
//! plane's `ShardedListAndWatch` gate on): the buckets Inrun computes from a uid are the
//! objects the server's `shardSelector` keeps, for built-in kinds and custom resources,
//! listed and watched; and the Lease records of membership and bucket ownership.
//!
//! The first tests call the sharding pieces directly and read what the API server keeps,
//! with the harness's admin client (a CRD and objects to shard are set up as an operator
//! would, not as the host). [`hosts`] runs `inrun run` replicas in one ring as the
//! ServiceAccount bound to the generated RBAC, as production runs them; [`between_lists`]
//! runs a ring keeper in this process as that ServiceAccount, its requests stepped.

// Scenarios read top to bottom as one story (create, break, watch, check), so their
// length is not split into steps as the host's own functions are.
#![allow(clippy::too_many_lines)]

mod support;

use std::collections::BTreeSet;

use futures::StreamExt;
use inrun::ring::sharding::buckets::{BUCKETS, bucket_of, query_escape, selector};
use inrun_testenv::ControlPlane;
use kube::Client;
use kube::api::{Api, DynamicObject, PostParams, WatchEvent};
use serde_json::{Value, json};
use support::*;

/// LISTs `path` with `shardSelector=selector`: the names returned and the list's
/// `metadata.shardInfo`.
async fn sharded_list(client: &Client, path: &str, selector: &str) -> (BTreeSet<String>, Value) {
    let url = format!("{path}?shardSelector={}", query_escape(selector));
    let request = http::Request::get(url).body(Vec::new()).expect("request");
    let list: Value = client.request(request).await.expect("sharded list");
    let names = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|o| o["metadata"]["name"].as_str().expect("name").to_string())
        .collect();
    (names, list["metadata"]["shardInfo"].clone())
}

/// Names of `objects` (name, uid) whose bucket is in `buckets`.
fn expected(objects: &[(String, String)], buckets: &[usize]) -> BTreeSet<String> {
    objects
        .iter()
        .filter(|(_, uid)| buckets.contains(&bucket_of(uid)))
        .map(|(name, _)| name.clone())
        .collect()
}

/// A namespaced CRD `Shard` in a group of its own, served.
async fn shard_crd(client: &Client) -> kube::discovery::ApiResource {
    let group = unique_group("sharding");
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("shards.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "shards", "singular": "shard", "kind": "Shard"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .expect("crd");
    Api::<DynamicObject>::all_with(client.clone(), &crds())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let ar = resource(&group, "Shard");
    served(&ar).await;
    ar
}

/// The selections each test lists with: single buckets at both ends and in the middle,
/// a half, and two ranges joined by `||`.
fn selections(objects: &[(String, String)]) -> Vec<Vec<usize>> {
    let first = bucket_of(&objects[0].1);
    vec![
        vec![0],
        vec![first],
        vec![BUCKETS - 1],
        (0..BUCKETS / 2).collect(),
        vec![1, 2, 3, 40, 41, first],
    ]
}

#[tokio::test]
async fn the_servers_shard_selector_keeps_exactly_the_configmaps_of_the_buckets() {
    let cp = ControlPlane::shared();
    let client = cp.client();
    let ns = cp.namespace("sharding-cm").await.expect("namespace");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &configmaps());
    let mut objects = Vec::new();
    for i in 0..96 {
        let cm: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("cm-{i}")},
        }))
        .expect("configmap");
        let made = api
            .create(&PostParams::default(), &cm)
            .await
            .expect("create");
        objects.push((
            made.metadata.name.expect("name"),
            made.metadata.uid.expect("uid"),
        ));
    }
    for buckets in selections(&objects) {
        let text = selector(&buckets).expect("a selector");
        let (names, info) = sharded_list(
            &client,
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            &text,
        )
        .await;
        assert_eq!(names, expected(&objects, &buckets), "{text}");
        // A built-in list says it was sharded.
        assert_eq!(info["selector"], json!(text), "{info}");
    }
    // What `runtime.sharding.watch: auto` asks at start, from a list of Leases.
    assert!(
        inrun::runtime::sharded_watch::server_shards(&client, &ns)
            .await
            .expect("a list of Leases"),
        "a server with ShardedListAndWatch is found to honour shardSelector"
    );
}

#[tokio::test]
async fn the_servers_shard_selector_keeps_exactly_the_crs_of_the_buckets_listed_and_watched() {
    let cp = ControlPlane::shared();
    let client = cp.client();
    let ns = cp.namespace("sharding-cr").await.expect("namespace");
    let ar = shard_crd(&client).await;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
    let create = |name: String| {
        let api = api.clone();
        let ar = ar.clone();
        async move {
            let cr: DynamicObject = serde_json::from_value(json!({
                "apiVersion": ar.api_version, "kind": "Shard", "metadata": {"name": name},
            }))
            .expect("cr");
            let made = api
                .create(&PostParams::default(), &cr)
                .await
                .expect("create cr");
            (
                made.metadata.name.expect("name"),
                made.metadata.uid.expect("uid"),
            )
        }
    };
    let mut objects = Vec::new();
    for i in 0..96 {
        objects.push(create(format!("cr-{i}")).await);
    }
    let path = format!("/apis/{}/namespaces/{ns}/shards", ar.api_version);
    let mut rv = String::new();
    for buckets in selections(&objects) {
        let text = selector(&buckets).expect("a selector");
        let (names, info) = sharded_list(&client, &path, &text).await;
        assert_eq!(names, expected(&objects, &buckets), "{text}");
        // A custom resource list is filtered but does not say so (UnstructuredList has no
        // shardInfo in v1.36): honouring the selector cannot be told from the list.
        assert_eq!(info, Value::Null, "{info}");
    }
    let list = api.list(&Default::default()).await.expect("list");
    rv.push_str(list.metadata.resource_version.as_deref().expect("rv"));

    // A sharded watch from that version sees the new CRs of its buckets and no other.
    let half: Vec<usize> = (0..BUCKETS / 2).collect();
    let text = selector(&half).expect("selector");
    let url = format!(
        "{path}?watch=true&allowWatchBookmarks=false&resourceVersion={rv}&shardSelector={}",
        query_escape(&text)
    );
    let request = http::Request::get(url).body(Vec::new()).expect("request");
    let events = client
        .request_events::<DynamicObject>(request)
        .await
        .expect("sharded watch");
    let mut made = Vec::new();
    for i in 0..24 {
        made.push(create(format!("new-{i}")).await);
    }
    // Created last and in the watched half: once its event arrives, every earlier event
    // has (a watch delivers in resourceVersion order).
    let mut i = 0;
    let sentinel = loop {
        let one = create(format!("last-{i}")).await;
        i += 1;
        if half.contains(&bucket_of(&one.1)) {
            break one;
        }
        made.push(one);
    };
    let mut seen = BTreeSet::new();
    let mut events = std::pin::pin!(events);
    let deadline = std::time::Duration::from_secs(30);
    tokio::time::timeout(deadline, async {
        while let Some(event) = events.next().await {
            if let WatchEvent::Added(obj) = event.expect("watch event") {
                let name = obj.metadata.name.expect("name");
                let done = name == sentinel.0;
                seen.insert(name);
                if done {
                    break;
                }
            }
        }
    })
    .await
    .expect("the sentinel's event within 30 s");
    let mut want = expected(&made, &half);
    want.insert(sentinel.0.clone());
    assert_eq!(seen, want, "{text}");
}

/// The ring's live members after one more look at its Leases.
async fn look(
    ring: &inrun::ring::sharding::members::Ring,
    client: &Client,
    seen: &mut inrun::ring::sharding::members::Observed,
) -> Vec<String> {
    let leases = ring.member_leases(client).await.expect("list members");
    let now = std::time::Instant::now();
    seen.update(&leases, now);
    seen.live(now, ring.lease_duration)
}

#[tokio::test]
async fn members_are_live_until_they_release_or_stop_renewing_and_their_buckets_move() {
    use inrun::ring::sharding::assign::Assignment;
    use inrun::ring::sharding::members::{Observed, Ring};
    use std::time::{Duration, Instant};

    let cp = ControlPlane::shared();
    let client = cp.client();
    let ring = Ring {
        name: "inrun".into(),
        namespace: cp.namespace("sharding-ring").await.expect("namespace"),
        lease_duration: Duration::from_secs(2),
    };
    for id in ["pod-a-1", "pod-b-2", "pod-c-3"] {
        ring.renew(&client, id).await.expect("member lease");
    }
    let mut seen = Observed::default();
    // c's last renewal is first seen at this look.
    let c_renewed = Instant::now();
    assert_eq!(
        look(&ring, &client, &mut seen).await,
        ["pod-a-1", "pod-b-2", "pod-c-3"]
    );
    let three = Assignment::new(&look(&ring, &client, &mut seen).await);

    // b stops gracefully: gone at the next look, and its buckets move.
    ring.release(&client, "pod-b-2").await.expect("release");
    let two = look(&ring, &client, &mut seen).await;
    assert_eq!(two, ["pod-a-1", "pod-c-3"]);
    let after = Assignment::new(&two);
    let moved = three.moves(&after);
    for bucket in three.buckets_of("pod-b-2") {
        assert!(
            moved.contains(&bucket),
            "bucket {bucket} stayed with a released member"
        );
    }
    assert!(
        (0..BUCKETS).all(|b| after.holder(b).is_some()),
        "a bucket left unowned"
    );

    // c was killed after its one renewal, while a keeps renewing: c stays live until a
    // lease duration has passed since its last renewal was seen, then is gone.
    let deadline = c_renewed + Duration::from_secs(2 + 5);
    let mut ticks = tokio::time::interval(Duration::from_millis(200));
    let gone = loop {
        ticks.tick().await;
        ring.renew(&client, "pod-a-1").await.expect("renew");
        let live = look(&ring, &client, &mut seen).await;
        if live == ["pod-a-1"] {
            break c_renewed.elapsed();
        }
        assert_eq!(live, ["pod-a-1", "pod-c-3"]);
        assert!(
            Instant::now() < deadline,
            "a killed member still live after 7 s"
        );
    };
    assert!(
        gone >= Duration::from_secs(2),
        "a killed member gone {gone:?} after its last renewal, before its lease ran out"
    );
    let one = Assignment::new(&["pod-a-1"]);
    assert_eq!(one.buckets_of("pod-a-1").len(), BUCKETS);
}

#[tokio::test]
async fn of_two_members_taking_every_bucket_at_once_exactly_one_holds_each_and_hands_over_by_epoch()
{
    use inrun::ring::sharding::members::Ring;
    use inrun::ring::sharding::ownership::Take;
    use std::time::Duration;

    let cp = ControlPlane::shared();
    let client = cp.client();
    let ring = Ring {
        name: "inrun".into(),
        namespace: cp.namespace("sharding-buckets").await.expect("namespace"),
        lease_duration: Duration::from_secs(15),
    };
    // Neither has seen the other stop: `gone` is empty below unless said.
    // Every bucket, both members at once: each try is a compare-and-swap.
    let tries = (0..BUCKETS).flat_map(|bucket| {
        let (ring, client) = (ring.clone(), client.clone());
        ["pod-a", "pod-b"].map(move |me| {
            let (ring, client) = (ring.clone(), client.clone());
            async move {
                let take = ring
                    .acquire(&client, bucket, me, &[])
                    .await
                    .expect("acquire");
                (bucket, me, take)
            }
        })
    });
    let results = futures::future::join_all(tries).await;
    let holders = ring.holders(&client).await.expect("holders");
    for (bucket, held) in holders.iter().enumerate() {
        let won: Vec<&str> = results
            .iter()
            .filter(|(b, _, take)| *b == bucket && matches!(take, Take::Held { .. }))
            .map(|(_, me, _)| *me)
            .collect();
        assert_eq!(won.len(), 1, "bucket {bucket}: {won:?} hold it");
        assert_eq!(*held, (Some(won[0].to_string()), 1), "bucket {bucket}");
    }
    let holder_of = |b: usize| holders[b].0.clone().expect("held");
    let other = |me: &str| if me == "pod-a" { "pod-b" } else { "pod-a" };

    // Asked again, the holder keeps it and the other is told who holds it.
    let h0 = holder_of(0);
    assert_eq!(
        ring.acquire(&client, 0, &h0, &[]).await.expect("again"),
        Take::Held { epoch: 1 }
    );
    assert_eq!(
        ring.acquire(&client, 0, other(&h0), &[])
            .await
            .expect("other"),
        Take::Other(Some(h0.clone()))
    );

    // A graceful handover: the holder gives the bucket up, the other takes it at once.
    ring.release_bucket(&client, 0, &h0).await.expect("release");
    assert_eq!(
        ring.acquire(&client, 0, other(&h0), &[])
            .await
            .expect("take"),
        Take::Held { epoch: 2 }
    );
    // A release by a member that no longer holds it changes nothing.
    ring.release_bucket(&client, 0, &h0)
        .await
        .expect("stale release");
    assert_eq!(
        ring.holders(&client).await.expect("holders")[0],
        (Some(other(&h0).to_string()), 2)
    );

    // A holder seen gone loses its bucket to the member that saw it; the old holder, which
    // has not seen the new one stop, does not take it back.
    let h1 = holder_of(1);
    let survivor = other(&h1);
    assert_eq!(
        ring.acquire(&client, 1, survivor, std::slice::from_ref(&h1))
            .await
            .expect("take over"),
        Take::Held { epoch: 2 }
    );
    assert_eq!(
        ring.acquire(&client, 1, &h1, &[])
            .await
            .expect("stale holder"),
        Take::Other(Some(survivor.to_string()))
    );

    // Not seen is not gone: a member that joined and took a bucket after the taker looked
    // (here pod-c, named in no list the taker made) keeps it, though the taker would take
    // the bucket from the holder it saw gone.
    let h2 = holder_of(2);
    let taker = other(&h2);
    ring.release_bucket(&client, 2, &h2).await.expect("release");
    assert_eq!(
        ring.acquire(&client, 2, "pod-c", &[])
            .await
            .expect("joiner"),
        Take::Held { epoch: 2 }
    );
    assert_eq!(
        ring.acquire(&client, 2, taker, std::slice::from_ref(&h2))
            .await
            .expect("taker"),
        Take::Other(Some("pod-c".to_string()))
    );
}

/// Sharded hosts: `inrun run` processes in one ring, each as the ServiceAccount bound to
/// what `inrun generate rbac` grants for a Blueprint with `runtime.sharding` on.
mod hosts {
    use std::time::{Duration, Instant};

    use inrun_testenv::ControlPlane;
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
    use serde_json::json;

    use super::support::ring::{Replica, held_by};
    use super::support::{self, resource, unique_group};

    const WAIT: Duration = Duration::from_secs(120);

    /// Every CR's two ConfigMaps carry its `spec.value`; Leases kept on short timings.
    fn blueprint(group: &str, ns: &str, ring: &str) -> String {
        support::ring::two_configmaps(
            "sharded",
            group,
            "Part",
            &format!(
                "    workers: 4\n    sharding: {{enabled: true, ring: {ring}, watch: labels}}\n    leaderElection: {{namespace: {ns}, leaseDuration: 6s, renewDeadline: 4s, retryPeriod: 1s}}\n"
            ),
        )
    }

    /// Sets every CR's `spec.value`.
    async fn set_all(api: &Api<DynamicObject>, group: &str, count: usize, value: &str) {
        for i in 0..count {
            let name = format!("p{i:03}");
            let doc = json!({
                "apiVersion": format!("{group}/v1alpha1"), "kind": "Part",
                "metadata": {"name": name}, "spec": {"value": value},
            });
            api.patch(&name, &PatchParams::apply("e2e-test"), &Patch::Apply(&doc))
                .await
                .expect("apply CR");
        }
    }

    /// Polls until every CR's two ConfigMaps carry `value`; how long that took.
    async fn converged(configmaps: &Api<ConfigMap>, count: usize, value: &str) -> Duration {
        let started = Instant::now();
        inrun_testenv::wait_for("every CR's children on the new value", WAIT, || async {
            let list = configmaps.list(&ListParams::default()).await.ok()?;
            let on = list
                .items
                .iter()
                .filter(|c| {
                    c.data
                        .as_ref()
                        .and_then(|d| d.get("value"))
                        .is_some_and(|v| v == value)
                })
                .count();
            (on == 2 * count).then_some(())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        started.elapsed()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_sharded_hosts_split_the_crs_and_the_others_take_over_a_killed_and_a_stopped_ones_buckets()
     {
        const COUNT: usize = 60;
        let cp = ControlPlane::shared();
        let client = cp.client();
        let group = unique_group("sharded");
        let ns = cp.namespace("sharded").await.expect("namespace");
        let ring = format!("r{}", &group[..group.find('.').unwrap_or(8).min(12)]);
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("blueprint.yaml");
        std::fs::write(&path, blueprint(&group, &ns, &ring)).expect("blueprint");
        // As production runs it: a ServiceAccount bound to the generated RBAC.
        let parsed = inrun::blueprint::load(&path).expect("valid Blueprint");
        let identity = support::identity::Identity::generated_on(
            cp,
            &parsed,
            &support::identity::Identity::options(),
        )
        .await;
        let kubeconfig = identity.kubeconfig(dir.path());
        let mut replicas: Vec<Replica> = ["a", "b", "c"]
            .iter()
            .map(|n| Replica::spawn(&kubeconfig, &path, dir.path(), n))
            .collect();
        let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
        // Capped rendezvous: nobody holds more than ⌈64/3⌉ once settled.
        let counts = held_by(&leases, &ring, &["a", "b", "c"]).await;
        assert_eq!(counts.values().sum::<usize>(), super::BUCKETS);
        let ar = resource(&group, "Part");
        super::served(&ar).await;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
        let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
        let started = Instant::now();
        set_all(&api, &group, COUNT, "v1").await;
        converged(&configmaps, COUNT, "v1").await;
        let first = started.elapsed();
        // Watched by label: each CR carries its bucket, put on by the apply that put the
        // finalizer on (5 writes a CR as without it).
        for cr in api.list(&ListParams::default()).await.expect("CRs").items {
            let uid = cr.metadata.uid.as_deref().expect("uid");
            let label = cr
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("inrun.dev/bucket"));
            assert_eq!(
                label.map(String::as_str),
                Some(inrun::ring::sharding::buckets::label_value(
                    inrun::ring::sharding::buckets::bucket_of(uid)
                ))
                .as_deref(),
                "{:?}",
                cr.metadata.name
            );
        }
        // Each CR reconciled by the replica holding its bucket, and by no other.
        let mut reconciles = Vec::new();
        for r in &replicas {
            reconciles.push(r.metric("controller_runtime_reconcile_total").await);
        }
        let total: f64 = reconciles.iter().sum();
        // Two replicas reconciling every CR would make 2 a CR; the margin is for a replica
        // that lapses under load and whose buckets' CRs are reconciled once more.
        assert!(
            total <= COUNT as f64 * 1.5,
            "{total} reconciles for {COUNT} CRs across the replicas: {reconciles:?}"
        );
        assert!(reconciles.iter().all(|n| *n > 0.0), "{reconciles:?}");
        // One of them leads the ring (the host's own writes: CRDs, statuses, releases).
        let mut leading = 0.0;
        for r in &replicas {
            leading += r.metric("leader_election_master_status").await;
        }
        assert_eq!(leading, 1.0, "replicas leading the ring");
        let mut events = Vec::new();
        for r in &replicas {
            assert!(r.metric("inrun_shard_members").await >= 3.0, "{}", r.name);
            events.push(r.metric("inrun_cr_watch_events_total").await);
        }
        // Each replica watched its shard only (the server's shardSelector): a replica
        // watching every CR receives 3 events a CR at least (created, finalizer, status).
        assert!(
            events.iter().all(|n| *n < COUNT as f64 * 2.0),
            "CR watch events per replica: {events:?}"
        );

        // SIGKILL: b's buckets move to a and c once its member Lease is a lease duration
        // old, and every CR converges on a new spec.
        let killed = Instant::now();
        replicas[1].signal("KILL");
        set_all(&api, &group, COUNT, "v2").await;
        let after_kill = converged(&configmaps, COUNT, "v2").await;
        held_by(&leases, &ring, &["a", "c"]).await;
        let moved = killed.elapsed();
        // The survivors' gauge of buckets nobody live holds comes back to 0.
        for r in [&replicas[0], &replicas[2]] {
            inrun_testenv::wait_for("no bucket unowned", WAIT, || async {
                (r.metric("inrun_shard_buckets_unowned").await == 0.0).then_some(())
            })
            .await
            .unwrap_or_else(|e| panic!("{e}: {}", r.name));
        }
        let unowned = killed.elapsed();

        // SIGTERM: c finishes, gives its buckets up and leaves; a takes them at its next
        // round.
        let stopping = Instant::now();
        replicas[2].signal("TERM");
        assert!(replicas[2].exited().await, "c did not stop");
        let stopped = stopping.elapsed();
        let counts = held_by(&leases, &ring, &["a"]).await;
        let handed = stopping.elapsed();
        assert_eq!(counts["a"], super::BUCKETS);
        assert!(
            replicas[2].log().contains("left the ring"),
            "{}",
            replicas[2].log()
        );
        let started = Instant::now();
        set_all(&api, &group, COUNT, "v3").await;
        converged(&configmaps, COUNT, "v3").await;
        let alone = started.elapsed();
        eprintln!(
            "sharded: {COUNT} CRs on 3 replicas converged in {:.1}s ({reconciles:?} reconciles, {events:?} CR watch events); b SIGKILLed: every CR on a new spec {:.1}s later, its buckets held by a and c {:.1}s after the kill (no bucket unowned on their gauges {:.1}s after); c SIGTERMed: exited in {:.2}s, all buckets held by a {:.2}s after the signal; a alone converged a new spec in {:.1}s",
            first.as_secs_f64(),
            after_kill.as_secs_f64(),
            moved.as_secs_f64(),
            unowned.as_secs_f64(),
            stopped.as_secs_f64(),
            handed.as_secs_f64(),
            alone.as_secs_f64(),
        );
        // Within the lease duration (6 s) and two retry periods, with margin for this
        // machine's two cores.
        assert!(moved < Duration::from_secs(30), "{moved:?}");
        replicas[0].signal("TERM");
        assert!(replicas[0].exited().await, "a did not stop");
    }
}

/// A ring keeper in this process, its client's requests for the ring's Leases held at the
/// test's word: what a replica does when another joins between the two lists of its round.
mod between_lists {
    use std::pin::Pin;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::task::{Context, Poll};
    use std::time::Duration;

    use inrun::ring::sharding::buckets::BUCKETS;
    use inrun::ring::sharding::keeper::{self, KeeperConfig};
    use inrun::ring::sharding::members::Ring;
    use inrun::ring::sharding::ownership::Take;
    use inrun::ring::sharding::shard::Shard;
    use inrun_testenv::ControlPlane;
    use kube::Client;
    use kube::client::{Body, ClientBuilder};
    use tokio::sync::{Mutex, mpsc, oneshot};

    use super::support;

    /// A request of a keeper's round, as the gate saw it.
    #[derive(Debug, PartialEq, Eq)]
    enum Step {
        /// The member Lease renewed: a round begins.
        Renewal,
        /// A list of the ring's bucket Leases.
        Buckets,
        /// A list of the ring's member Leases.
        Members,
    }

    /// Reports a round's requests and, while stepping, holds each list until answered.
    #[derive(Clone)]
    struct Gate {
        stepping: Arc<AtomicBool>,
        steps: mpsc::UnboundedSender<(Step, Option<oneshot::Sender<()>>)>,
    }

    impl Gate {
        fn step(request: &http::Request<Body>) -> Option<Step> {
            let path = request.uri().path();
            let query = request
                .uri()
                .query()
                .unwrap_or_default()
                .replace("%3D", "=");
            if !path.contains("/leases") {
                return None;
            }
            match *request.method() {
                http::Method::PATCH if path.contains("-m-") => Some(Step::Renewal),
                http::Method::GET if query.contains("role=bucket") => Some(Step::Buckets),
                http::Method::GET if query.contains("role=member") => Some(Step::Members),
                _ => None,
            }
        }

        async fn pass(&self, step: Option<Step>) {
            let Some(step) = step else {
                return;
            };
            if !self.stepping.load(Ordering::Acquire) {
                return;
            }
            if step == Step::Renewal {
                let _ = self.steps.send((step, None));
                return;
            }
            let (go, wait) = oneshot::channel();
            if self.steps.send((step, Some(go))).is_ok() {
                let _ = wait.await;
            }
        }
    }

    impl<S> tower::Layer<S> for Gate {
        type Service = Gated<S>;
        fn layer(&self, inner: S) -> Gated<S> {
            Gated {
                gate: self.clone(),
                inner: Arc::new(Mutex::new(inner)),
            }
        }
    }

    struct Gated<S> {
        gate: Gate,
        inner: Arc<Mutex<S>>,
    }

    type Boxed<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

    impl<S> tower::Service<http::Request<Body>> for Gated<S>
    where
        S: tower::Service<http::Request<Body>> + Send + 'static,
        S::Future: Send + 'static,
    {
        type Response = S::Response;
        type Error = S::Error;
        type Future = Boxed<Result<S::Response, S::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, request: http::Request<Body>) -> Self::Future {
            let (gate, inner) = (self.gate.clone(), self.inner.clone());
            let step = Gate::step(&request);
            Box::pin(async move {
                gate.pass(step).await;
                let call = {
                    let mut inner = inner.lock().await;
                    futures::future::poll_fn(|cx| inner.poll_ready(cx)).await?;
                    inner.call(request)
                };
                call.await
            })
        }
    }

    type Steps = mpsc::UnboundedReceiver<(Step, Option<oneshot::Sender<()>>)>;

    /// The keeper's next request for the ring's Leases.
    async fn next(seen: &mut Steps) -> (Step, Option<oneshot::Sender<()>>) {
        tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .expect("the keeper's next request within 30 s")
            .expect("the gate")
    }

    /// Lets a held request go.
    fn let_go(go: Option<oneshot::Sender<()>>) {
        if let Some(go) = go {
            let _ = go.send(());
        }
    }

    /// Lets the keeper's requests go until its next round begins.
    async fn until_a_round_begins(seen: &mut Steps) {
        loop {
            match next(seen).await {
                (Step::Renewal, _) => return,
                (_, go) => let_go(go),
            }
        }
    }

    /// Regression of a ring that lost its buckets after an API server restart: a replica
    /// that rejoined and took a bucket between another's two lists looked gone to it (its
    /// member Lease missing from the first list, its name on the bucket in the second), and
    /// the other took the bucket while it wrote. A keeper, as the ServiceAccount of the
    /// generated RBAC; the test plays the joiner between the lists of one round.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_member_that_joins_and_takes_a_bucket_between_anothers_two_lists_keeps_it() {
        let cp = ControlPlane::shared();
        let group = support::unique_group("between");
        let ns = cp.namespace("between").await.expect("namespace");
        let name = format!("r{}", &group[..group.find('.').unwrap_or(8).min(12)]);
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("blueprint.yaml");
        let runtime = format!(
            "    sharding: {{enabled: true, ring: {name}}}\n    leaderElection: {{namespace: {ns}, leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 1s}}\n"
        );
        let text = support::ring::two_configmaps("between", &group, "Part", &runtime);
        std::fs::write(&path, text).expect("blueprint");
        let parsed = inrun::blueprint::load(&path).expect("valid Blueprint");
        let identity = support::identity::Identity::generated_on(
            cp,
            &parsed,
            &support::identity::Identity::options(),
        )
        .await;
        // The joiner: another replica, the same ServiceAccount.
        let plain = Client::try_from(identity.config()).expect("client");
        let (steps, mut seen) = mpsc::unbounded_channel();
        let gate = Gate {
            stepping: Arc::default(),
            steps,
        };
        let gated = ClientBuilder::try_from(identity.config())
            .expect("client")
            .with_layer(&gate)
            .build();
        let ring = Ring {
            name: name.clone(),
            namespace: ns.clone(),
            lease_duration: Duration::from_secs(15),
        };
        let config = KeeperConfig {
            ring: ring.clone(),
            identity: "keeper".into(),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(1),
            max_releases: BUCKETS,
            watch: inrun::blueprint::ShardWatch::default(),
        };
        let shard = Arc::new(Shard::default());
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let running = tokio::spawn(keeper::run(
            gated,
            config,
            shard.clone(),
            Arc::default(),
            stopped,
        ));
        // Alone in the ring, the keeper takes every bucket.
        let keeper_name = inrun_testenv::wait_for(
            "the keeper to hold every bucket",
            Duration::from_secs(60),
            || async {
                let holders = ring.holders(&plain).await.ok()?;
                let first = holders[0].0.clone()?;
                holders
                    .iter()
                    .all(|(h, _)| h.as_deref() == Some(first.as_str()))
                    .then_some(first)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));

        // One round, stepped: the bucket is given up before its first list is read, the
        // joiner joins and takes it before its second.
        const BUCKET: usize = 7;
        gate.stepping.store(true, Ordering::Release);
        until_a_round_begins(&mut seen).await;
        let (first, go) = next(&mut seen).await;
        ring.release_bucket(&plain, BUCKET, &keeper_name)
            .await
            .expect("give the bucket up");
        let_go(go);
        let (second, go) = next(&mut seen).await;
        assert_ne!(first, second, "a round lists both kinds of Lease");
        ring.renew(&plain, "joiner#1").await.expect("join");
        assert_eq!(
            ring.acquire(&plain, BUCKET, "joiner#1", &[])
                .await
                .expect("take"),
            Take::Held { epoch: 2 },
            "the joiner takes the free bucket"
        );
        let_go(go);
        // The round ends; the next begins.
        until_a_round_begins(&mut seen).await;
        gate.stepping.store(false, Ordering::Release);
        while let Ok((_, go)) = seen.try_recv() {
            let_go(go);
        }

        let holders = ring.holders(&plain).await.expect("holders");
        assert_eq!(
            holders[BUCKET].0.as_deref(),
            Some("joiner#1"),
            "the keeper ({keeper_name}) took the bucket of a member it had not seen"
        );
        assert!(!shard.holds(BUCKET), "the keeper counts the bucket its own");
        let _ = stop.send(true);
        running.await.expect("keeper").expect("left the ring");
    }
}
