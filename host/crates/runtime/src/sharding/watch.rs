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

use super::buckets::{query_escape, selector};
use super::shard::{Held, buckets};
use crate::cached::CachedCr;

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

/// The `shardSelector` query parameter for `held`; `None` for no bucket.
fn query(held: Held) -> Option<String> {
    let list: Vec<usize> = buckets(held).collect();
    selector(&list).map(|s| format!("shardSelector={}", query_escape(&s)))
}

type Events = BoxStream<'static, Result<watcher::Event<CachedCr>, watcher::Error>>;

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
    restarting(held, move |before, now| {
        fresh.fetch_or(now & !before, Ordering::AcqRel);
        watch_of(&client, &resource, now)
    })
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
