//! Watching only this replica's shard of a CRD's CRs: the watch runs with the API server's
//! `shardSelector` (KEP-5866) for the buckets held, and starts again — a fresh list — each
//! time they change. A server that does not know the parameter ignores it and sends every
//! CR; nothing depends on it honouring the selector, since every CR is checked against the
//! buckets held again before it wakes and before its pass writes.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::Client;
use kube::api::Api;
use kube::discovery::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;

use crate::cached::CachedCr;
use inrun_ring::sharding::buckets::{BUCKETS, query_escape, selector};
use inrun_ring::sharding::shard::{Held, bit, buckets};

/// How long after a change of the buckets held the watch waits for more before starting
/// again: a round gives up and takes buckets in a few steps.
const SETTLE: Duration = Duration::from_millis(200);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `client` with `shardSelector=<query>` added to every GET (the watcher's lists and
/// watches of one CRD).
#[derive(Clone)]
struct WithShardSelector {
    client: Client,
    query: String,
}

impl tower::Service<http::Request<kube::client::Body>> for WithShardSelector {
    type Response = http::Response<kube::client::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<kube::client::Body>) -> Self::Future {
        if request.method() == http::Method::GET {
            let uri = request.uri();
            let joined = match uri.query() {
                Some(q) => format!("{}?{q}&{}", uri.path(), self.query),
                None => format!("{}?{}", uri.path(), self.query),
            };
            if let Ok(uri) = joined.parse() {
                *request.uri_mut() = uri;
            }
        }
        let client = self.client.clone();
        Box::pin(async move { client.send(request).await.map_err(Into::into) })
    }
}

/// Whether the API server honours `shardSelector`: a list of the Leases in `namespace`
/// with a selector answers with `metadata.shardInfo` when it does (a list of custom
/// resources never carries it, which is why the Leases are asked). A server without the
/// `ShardedListAndWatch` gate, or older than Kubernetes 1.36, ignores the parameter.
///
/// # Errors
/// The API server's refusal of the list.
pub async fn server_shards(client: &Client, namespace: &str) -> Result<bool, kube::Error> {
    let selector = query(inrun_ring::sharding::shard::bits(0..BUCKETS / 2)).unwrap_or_default();
    let path = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases?limit=1&{selector}",
        inrun_ring::sharding::buckets::query_escape(namespace)
    );
    let request = http::Request::get(path)
        .body(Vec::new())
        .map_err(kube::Error::HttpError)?;
    let list: serde_json::Value = client.request(request).await?;
    Ok(list.pointer("/metadata/shardInfo").is_some())
}

/// The `shardSelector` query parameter for `held`; `None` for no bucket.
fn query(held: Held) -> Option<String> {
    let list: Vec<usize> = buckets(held).collect();
    selector(&list).map(|s| format!("shardSelector={}", query_escape(&s)))
}

type Events<K = CachedCr> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// A watch of the CRs of `held`: none (an empty list, then nothing) for no bucket.
fn watch_of(client: &Client, resource: &ApiResource, held: Held) -> Events {
    let Some(query) = query(held) else {
        return nothing();
    };
    let client = Client::new(
        WithShardSelector {
            client: client.clone(),
            query,
        },
        client.default_namespace().to_string(),
    );
    let api: Api<CachedCr> = Api::all_with(client, resource);
    watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed()
}

/// The watch events of the CRs of `resource` in the buckets `held` names, started again
/// (a fresh list, which drops the CRs of buckets given up from the cache it fills) each
/// time they change.
///
/// The buckets each restart adds are set in `fresh` before its list starts: their CRs wake
/// when listed, whatever the triggers remember of them from an earlier tenure (the caller
/// clears the bits once that list is complete).
pub(crate) fn sharded_watcher(
    client: Client,
    resource: ApiResource,
    held: watch::Receiver<Held>,
    fresh: Arc<AtomicU64>,
) -> impl Stream<Item = Result<watcher::Event<CachedCr>, watcher::Error>> + Send + 'static {
    restarting_fresh(held, fresh, move |now| watch_of(&client, &resource, now))
}

/// [`restarting`] with `watch(now)`, the buckets each restart adds set in `fresh` first.
fn restarting_fresh(
    held: watch::Receiver<Held>,
    fresh: Arc<AtomicU64>,
    watch: impl Fn(Held) -> Events + Send + Sync + 'static,
) -> impl Stream<Item = Result<watcher::Event<CachedCr>, watcher::Error>> + Send + 'static {
    restarting(held, move |before, now| {
        fresh.fetch_or(now & !before, Ordering::AcqRel);
        watch(now)
    })
}

/// The watch events of the CRs of `resource` in the buckets `held` names, watched by their
/// bucket label ([`inrun_pass::meta::BUCKET`]): those labelled with a bucket held, and
/// those not labelled yet whose bucket is held (a new CR, before its first pass labels
/// it). Started again, like [`sharded_watcher`]'s, each time the buckets change.
pub(crate) fn labelled_watcher(
    client: Client,
    resource: ApiResource,
    held: watch::Receiver<Held>,
    fresh: Arc<AtomicU64>,
) -> impl Stream<Item = Result<watcher::Event<CachedCr>, watcher::Error>> + Send + 'static {
    restarting_fresh(held, fresh, move |now| {
        let list: Vec<usize> = buckets(now).collect();
        let Some(labelled) = inrun_ring::sharding::buckets::label_selector(&list) else {
            return nothing();
        };
        let api: Api<CachedCr> = Api::all_with(client.clone(), &resource);
        let unlabelled = format!("!{}", inrun_pass::meta::BUCKET);
        let make = move || {
            let watch = |labels: &str| {
                watcher(api.clone(), watcher::Config::default().labels(labels))
                    .default_backoff()
                    .boxed()
            };
            (watch(&labelled), watch(&unlabelled))
        };
        merged(make, now)
    })
}

/// Which of the two watches of [`merged`] an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Labelled,
    Unlabelled,
}

type Tagged<K> = BoxStream<'static, (Side, Result<watcher::Event<K>, watcher::Error>)>;

/// How long a deletion seen by one of [`merged`]'s watches waits for the other to bring the
/// same object at the same or a later version: a CR that gains or loses its bucket label
/// leaves one selection (a deletion, carrying its content before the change) and enters
/// the other, on two connections that deliver in no set order.
const MOVE_GRACE: Duration = Duration::from_secs(1);

/// A resourceVersion as a number (etcd's revisions); 0 when it is not one.
fn revision<K: kube::Resource>(o: &K) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or(0)
}

/// An object's cache key (what the reflector's store is keyed by) and uid.
fn identity<K: kube::Resource>(o: &K) -> (String, String) {
    let m = o.meta();
    (
        format!(
            "{}/{}",
            m.namespace.as_deref().unwrap_or_default(),
            m.name.as_deref().unwrap_or_default()
        ),
        m.uid.clone().unwrap_or_default(),
    )
}

/// What [`merged`] keeps between events.
struct Merge<K> {
    make: Box<dyn Fn() -> Tagged<K> + Send + Sync>,
    inner: Tagged<K>,
    /// While listing: which sides finished their list.
    listing: Option<[bool; 2]>,
    /// Whether this list's start went out.
    announced: bool,
    /// Deletions due while a list is being made: they go out after its end (the list
    /// replaces the cache), as changes from a side whose list is done go into it.
    later: std::collections::VecDeque<watcher::Event<K>>,
    /// Every object passed on and not deleted since, by cache key: its uid and revision.
    shown: std::collections::HashMap<String, (String, u64)>,
    /// Deletions waiting out [`MOVE_GRACE`], oldest first.
    deferred: std::collections::VecDeque<(tokio::time::Instant, K)>,
    /// The buckets held: an unlabelled CR passes only when its bucket is one of them.
    held: Held,
}

impl<K: kube::Resource> Merge<K> {
    /// Whether `o` is older than, or the same version as, what was passed on for its key.
    fn stale(&self, o: &K, or_same: bool) -> bool {
        let (key, uid) = identity(o);
        self.shown.get(&key).is_some_and(|(shown_uid, rv)| {
            *shown_uid == uid && (revision(o) < *rv || (or_same && revision(o) == *rv))
        })
    }

    /// Whether a deletion of `o` still concerns what was passed on for its key.
    fn deletes_shown(&self, o: &K) -> bool {
        let (key, uid) = identity(o);
        self.shown
            .get(&key)
            .is_some_and(|(shown_uid, rv)| *shown_uid == uid && revision(o) > *rv)
    }

    /// Whether an object of `side` belongs in this replica's view.
    fn keeps(&self, side: Side, o: &K) -> bool {
        side == Side::Labelled
            || o.meta().uid.as_deref().is_some_and(|uid| {
                self.held & bit(inrun_ring::sharding::buckets::bucket_of(uid)) != 0
            })
    }

    /// The deletion whose grace ran out first, if it still concerns what was passed on
    /// and no list is being made (one due during a list goes out after its end).
    fn due_deletion(&mut self) -> Option<watcher::Event<K>> {
        let (_, o) = self.deferred.pop_front()?;
        if !self.deletes_shown(&o) {
            return None;
        }
        self.shown.remove(&identity(&o).0);
        if self.listing.is_some() {
            self.later.push_back(watcher::Event::Delete(o));
            return None;
        }
        Some(watcher::Event::Delete(o))
    }

    /// What goes out for `event` of `side`: `None` while a list is incomplete, for what
    /// this replica does not hold, for what is older than what went out, and for a
    /// deletion (deferred for [`MOVE_GRACE`]).
    fn take(&mut self, side: Side, event: watcher::Event<K>) -> Option<watcher::Event<K>> {
        match event {
            watcher::Event::Init => {
                if self.listing.is_none() {
                    // One side lists again: both do, so that the list is whole.
                    self.restart();
                }
                None
            }
            watcher::Event::InitDone => {
                let done = self.listing.as_mut()?;
                done[side as usize] = true;
                if *done != [true, true] {
                    return None;
                }
                self.listing = None;
                Some(watcher::Event::InitDone)
            }
            watcher::Event::InitApply(o) | watcher::Event::Apply(o)
                if !self.keeps(side, &o) || self.stale(&o, true) =>
            {
                None
            }
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                let (key, uid) = identity(&o);
                self.shown.insert(key, (uid, revision(&o)));
                Some(if self.listing.is_some() {
                    watcher::Event::InitApply(o)
                } else {
                    watcher::Event::Apply(o)
                })
            }
            watcher::Event::Delete(o) => {
                if self.deletes_shown(&o) {
                    let at = tokio::time::Instant::now() + MOVE_GRACE;
                    self.deferred.push_back((at, o));
                }
                None
            }
        }
    }

    fn restart(&mut self) {
        self.inner = (self.make)();
        self.listing = Some([false, false]);
        self.announced = false;
        self.later.clear();
        self.shown.clear();
        self.deferred.clear();
    }
}

/// The two watches `make` starts (CRs labelled with a bucket held; CRs not labelled) as one
/// watch: one list (its start, every object listed, its end once both ends came), then
/// their changes. An unlabelled CR passes only when its bucket is in `held`. A CR moving
/// from one watch to the other (labelled by its first pass, or its label removed) is not
/// deleted, in whichever order the two connections deliver: a deletion waits
/// [`MOVE_GRACE`] for the other side to bring the object at its version or a later one,
/// and is dropped if it does; versions older than what was passed on are dropped. When
/// either watch lists again (its resourceVersion expired), both start again, so the list
/// that follows is whole.
fn merged<K>(
    make: impl Fn() -> (Events<K>, Events<K>) + Send + Sync + 'static,
    held: Held,
) -> Events<K>
where
    K: kube::Resource + Send + 'static,
{
    let tag = move |(labelled, unlabelled): (Events<K>, Events<K>)| -> Tagged<K> {
        futures::stream::select(
            labelled.map(|e| (Side::Labelled, e)),
            unlabelled.map(|e| (Side::Unlabelled, e)),
        )
        .boxed()
    };
    let make: Box<dyn Fn() -> Tagged<K> + Send + Sync> = Box::new(move || tag(make()));
    let state = Merge {
        inner: make(),
        make,
        listing: Some([false, false]),
        announced: false,
        later: std::collections::VecDeque::new(),
        shown: std::collections::HashMap::new(),
        deferred: std::collections::VecDeque::new(),
        held,
    };
    futures::stream::unfold(state, move |mut st| async move {
        loop {
            if !st.announced {
                st.announced = true;
                return Some((Ok(watcher::Event::Init), st));
            }
            if st.listing.is_none()
                && let Some(event) = st.later.pop_front()
            {
                return Some((Ok(event), st));
            }
            let due = st.deferred.front().map(|(at, _)| *at);
            let next = tokio::select! {
                next = st.inner.next() => next,
                () = async {
                    match due {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending().await,
                    }
                } => match st.due_deletion() {
                    Some(event) => return Some((Ok(event), st)),
                    None => continue,
                }
            };
            match next? {
                (_, Err(e)) => return Some((Err(e), st)),
                (side, Ok(event)) => {
                    if let Some(out) = st.take(side, event) {
                        return Some((Ok(out), st));
                    }
                }
            }
        }
    })
    .boxed()
}

/// The events of `make(before, now)` for the buckets held `now`, made again each time
/// they change (a moment after, so that a round's steps make one restart).
pub(crate) fn restarting<K: Send + 'static>(
    mut held: watch::Receiver<Held>,
    make: impl Fn(Held, Held) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>
    + Send
    + Sync
    + 'static,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {
    let make = Arc::new(make);
    let now = *held.borrow_and_update();
    let current = make(0, now);
    futures::stream::unfold(
        (held, current, now),
        move |(mut held, mut current, mut now)| {
            let make = make.clone();
            async move {
                loop {
                    tokio::select! {
                        changed = held.changed() => {
                            if changed.is_err() {
                                // The shard is gone (the host stops): keep what runs.
                                let item = current.next().await?;
                                return Some((item, (held, current, now)));
                            }
                            tokio::time::sleep(SETTLE).await;
                            let next = *held.borrow_and_update();
                            if next != now {
                                current = make(now, next);
                                now = next;
                            }
                        }
                        item = current.next() => {
                            let item = item?;
                            return Some((item, (held, current, now)));
                        }
                    }
                }
            }
        },
    )
}

/// `events` with only the objects `keep` admits (the list's start and end always).
pub(crate) fn only<K: Send + 'static>(
    events: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    keep: impl Fn(&K) -> bool + Send + 'static,
) -> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>> {
    events
        .filter(move |event| {
            let pass = match event {
                Ok(
                    watcher::Event::Apply(o)
                    | watcher::Event::InitApply(o)
                    | watcher::Event::Delete(o),
                ) => keep(o),
                _ => true,
            };
            futures::future::ready(pass)
        })
        .boxed()
}

/// Nothing held: an empty list, then nothing.
pub(crate) fn nothing<K: Send + 'static>()
-> BoxStream<'static, Result<watcher::Event<K>, watcher::Error>> {
    futures::stream::iter([Ok(watcher::Event::Init), Ok(watcher::Event::InitDone)])
        .chain(futures::stream::pending())
        .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::sync::atomic::AtomicUsize;

    /// A CR-like object whose uid falls in `bucket`, labelled with `label` when given, at
    /// resourceVersion `rv`.
    fn object(name: &str, bucket: usize, label: Option<usize>, rv: u64) -> ConfigMap {
        let uid = (0u32..)
            .map(|i| format!("uid-{name}-{i}"))
            .find(|uid| inrun_ring::sharding::buckets::bucket_of(uid) == bucket)
            .expect("a uid in the bucket");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.uid = Some(uid);
        cm.metadata.resource_version = Some(rv.to_string());
        cm.metadata.labels = label.map(|b| {
            [(
                inrun_pass::meta::BUCKET.to_string(),
                inrun_ring::sharding::buckets::label_value(b),
            )]
            .into()
        });
        cm
    }

    fn events(list: Vec<watcher::Event<ConfigMap>>) -> Events<ConfigMap> {
        futures::stream::iter(list.into_iter().map(Ok))
            .chain(futures::stream::pending())
            .boxed()
    }

    fn shown(event: &watcher::Event<ConfigMap>) -> String {
        let name = |o: &ConfigMap| {
            format!(
                "{}@{}",
                o.metadata.name.clone().unwrap_or_default(),
                o.metadata.resource_version.clone().unwrap_or_default()
            )
        };
        match event {
            watcher::Event::Init => "init".into(),
            watcher::Event::InitDone => "done".into(),
            watcher::Event::InitApply(o) => format!("list {}", name(o)),
            watcher::Event::Apply(o) => format!("apply {}", name(o)),
            watcher::Event::Delete(o) => format!("delete {}", name(o)),
        }
    }

    type Sender = tokio::sync::mpsc::UnboundedSender<watcher::Event<ConfigMap>>;

    /// A merged watch whose two sides deliver what the test sends, when it sends it.
    fn driven(held: Held) -> (Events<ConfigMap>, Sender, Sender) {
        let side = || {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let events = futures::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|e| (Ok(e), rx))
            })
            .boxed();
            (tx, std::sync::Mutex::new(Some(events)))
        };
        let ((ltx, l), (utx, u)) = (side(), side());
        let make = move || {
            let take = |m: &std::sync::Mutex<Option<Events<ConfigMap>>>| {
                m.lock().expect("lock").take().expect("started once")
            };
            (take(&l), take(&u))
        };
        (merged(make, held), ltx, utx)
    }

    async fn next(stream: &mut Events<ConfigMap>) -> String {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event")
            .expect("open");
        shown(&event.expect("no error"))
    }

    /// Nothing more comes for longer than a deletion waits.
    async fn quiet(stream: &mut Events<ConfigMap>) {
        let more = tokio::time::timeout(MOVE_GRACE * 2, stream.next()).await;
        assert!(
            more.is_err(),
            "{:?}",
            more.ok().flatten().map(|e| shown(&e.expect("event")))
        );
    }

    #[tokio::test]
    async fn a_cr_moving_between_the_two_watches_is_never_deleted_whichever_comes_first() {
        use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};
        let (mut merged, labelled, unlabelled) = driven(bit(3) | bit(4));
        for e in [Init, InitApply(object("a", 3, Some(3), 10)), InitDone] {
            labelled.send(e).expect("send");
        }
        let list = [
            Init,
            InitApply(object("b", 4, None, 20)),
            InitApply(object("c", 9, None, 20)),
            InitApply(object("d", 4, None, 20)),
            InitDone,
        ];
        for e in list {
            unlabelled.send(e).expect("send");
        }
        let mut got = Vec::new();
        for _ in 0..5 {
            got.push(next(&mut merged).await);
        }
        assert_eq!(got[0], "init");
        assert_eq!(got[4], "done");
        got[1..4].sort();
        assert_eq!(
            got[1..4],
            ["list a@10", "list b@20", "list d@20"],
            "c's bucket is not held"
        );
        // b is labelled by its pass: the unlabelled watch's deletion (the content before
        // the change) comes first, then the labelled watch brings it.
        unlabelled
            .send(Delete(object("b", 4, None, 21)))
            .expect("send");
        labelled
            .send(Apply(object("b", 4, Some(4), 21)))
            .expect("send");
        assert_eq!(next(&mut merged).await, "apply b@21");
        // d: the other order.
        labelled
            .send(Apply(object("d", 4, Some(4), 22)))
            .expect("send");
        assert_eq!(next(&mut merged).await, "apply d@22");
        unlabelled
            .send(Delete(object("d", 4, None, 22)))
            .expect("send");
        quiet(&mut merged).await;
        // A version older than the one passed on is dropped.
        unlabelled
            .send(Apply(object("d", 4, None, 19)))
            .expect("send");
        // A real deletion goes out once the grace has passed.
        labelled
            .send(Delete(object("a", 3, Some(3), 30)))
            .expect("send");
        assert_eq!(next(&mut merged).await, "delete a@30");
        quiet(&mut merged).await;
    }

    #[tokio::test]
    async fn when_one_watch_lists_again_both_do_and_the_list_is_announced_once() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let calls = Arc::new(AtomicUsize::new(0));
        let counted = calls.clone();
        let make = move || {
            let first = counted.fetch_add(1, Ordering::SeqCst) == 0;
            let mut labelled = vec![Init, InitApply(object("a", 3, Some(3), 10)), InitDone];
            if first {
                // The labelled watch's resourceVersion expired: it lists again.
                labelled.extend([Apply(object("a", 3, Some(3), 11)), Init]);
            }
            (
                events(labelled),
                events(vec![Init, InitApply(object("b", 3, None, 10)), InitDone]),
            )
        };
        let mut merged = merged(make, bit(3));
        let mut got = Vec::new();
        for _ in 0..9 {
            got.push(next(&mut merged).await);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{got:?}");
        assert_eq!(got.iter().filter(|e| *e == "init").count(), 2, "{got:?}");
        assert_eq!(got.iter().filter(|e| *e == "done").count(), 2, "{got:?}");
        assert_eq!(got.last().map(String::as_str), Some("done"), "{got:?}");
        let second = got.iter().rposition(|e| e == "init").expect("second list");
        let mut relisted: Vec<_> = got[second + 1..got.len() - 1].to_vec();
        relisted.sort();
        assert_eq!(relisted, ["list a@10", "list b@10"], "{got:?}");
    }

    #[test]
    fn the_selector_travels_percent_encoded_and_no_bucket_has_none() {
        assert_eq!(query(0), None);
        let q = query(1 << 0).expect("a selector");
        assert!(
            q.starts_with("shardSelector=shardRange%28object.metadata.uid%2C%20%270x0"),
            "{q}"
        );
        assert!(!q.contains(' ') && !q.contains('\''), "{q}");
    }
}
