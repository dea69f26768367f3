//! The watches of a CRD's children: metadata only, by the owner label, one a kind; each
//! change other than the host's own wakes the CR that owns the child. Kinds not served at
//! start-up are watched once they are.

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store, reflector, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};

use crate::cached::CachedCr;
use crate::context::Ctx;
use crate::triggers::{self, ChildChange};
use crate::{kinds, stores};
use inrun_pass::meta::OWNER_UID;

/// The metadata-only watch of `kind`'s children (by the owner label), its cache added to
/// `stores`; yields the CRs that changes other than the host's own wake.
pub(crate) fn child_watch(
    client: &Client,
    kind: &kinds::Kind,
    triggers: &Arc<triggers::Triggers>,
    stores: &stores::ChildStores,
    shard: Option<&Arc<inrun_ring::sharding::shard::Shard>>,
) -> (
    BoxStream<'static, ObjectRef<CachedCr>>,
    Store<stores::CachedChild>,
) {
    // `Api<PartialObjectMeta<_>>` asks for metadata only.
    let api: Api<PartialObjectMeta<DynamicObject>> = Api::all_with(client.clone(), &kind.resource);
    let writer: Writer<stores::CachedChild> = Writer::new(kind.resource.clone());
    let store = writer.as_reader();
    stores.insert(kind, store.clone());
    let triggers = triggers.clone();
    let (group, kind_name) = (kind.resource.group.clone(), kind.resource.kind.clone());
    let events = match shard {
        None => watcher(api, watcher::Config::default().labels(OWNER_UID))
            .default_backoff()
            .map_ok(stores::cached)
            .boxed(),
        // Under sharding, only the children of CRs of the buckets held are kept, listed
        // again when they change (the server cannot select by the owner's bucket).
        Some(shard) => {
            use crate::sharded_watch as watch;
            use inrun_ring::sharding::{buckets::bucket_of, shard::bit as watch_bit};
            watch::restarting(shard.subscribe(), move |_, held| {
                if held == 0 {
                    return watch::nothing();
                }
                let events = watcher(api.clone(), watcher::Config::default().labels(OWNER_UID))
                    .default_backoff()
                    .map_ok(stores::cached);
                watch::only(events, move |child: &stores::CachedChild| {
                    child
                        .owner
                        .as_deref()
                        .is_some_and(|uid| held & watch_bit(bucket_of(uid)) != 0)
                })
            })
            .boxed()
        }
    };
    let stream = reflector(writer, events)
        .filter_map(move |event| {
            let kind = (group.as_str(), kind_name.as_str());
            let woken = match &event {
                Ok(watcher::Event::Apply(c)) => {
                    child_event(&triggers, kind, c, ChildChange::Applied)
                }
                Ok(watcher::Event::InitApply(c)) => {
                    child_event(&triggers, kind, c, ChildChange::Listed)
                }
                Ok(watcher::Event::Delete(c)) => {
                    child_event(&triggers, kind, c, ChildChange::Deleted)
                }
                _ => None,
            };
            futures::future::ready(woken)
        })
        .boxed();
    (stream, store)
}

/// Watches the children of kinds the API server did not serve at start-up, each from when
/// it does: tried again when a pass saw a CRD of the CR's become `Established`, and on a
/// timer (1 s, doubling to 30 s) for types created any other way. Once a new watch has
/// listed, every CR of `crs` is reconciled once: a child changed before the watch began
/// (deleted behind the host's back, say) has no event to wake its CR.
pub(crate) async fn lazy_watches(
    ctx: Arc<Ctx>,
    crs: Store<CachedCr>,
    mut pending: Vec<(String, String)>,
    woken: tokio::sync::mpsc::UnboundedSender<ObjectRef<CachedCr>>,
) {
    const FIRST: std::time::Duration = std::time::Duration::from_secs(1);
    const MOST: std::time::Duration = std::time::Duration::from_secs(30);
    let mut watches = futures::stream::SelectAll::new();
    let mut wait = FIRST;
    let mut next_try = tokio::time::Instant::now();
    loop {
        if !pending.is_empty() && tokio::time::Instant::now() >= next_try {
            let mut still = Vec::new();
            for (api_version, kind) in pending {
                match ctx.kinds.resolve(&ctx.client, &api_version, &kind).await {
                    Ok(resolved) => {
                        tracing::info!(kind = %format!("{api_version} {kind}"), "the API server serves this kind now; watching its children");
                        watches.extend(newly_served(&ctx, &crs, &resolved));
                    }
                    Err(_) => still.push((api_version, kind)),
                }
            }
            pending = still;
            next_try = tokio::time::Instant::now() + wait;
            wait = (wait * 2).min(MOST);
        }
        tokio::select! {
            Some(r) = watches.next(), if !watches.is_empty() => {
                let _ = woken.send(r);
            }
            () = ctx.kinds_changed.notified(), if !pending.is_empty() => {
                next_try = tokio::time::Instant::now();
                wait = FIRST;
            }
            () = tokio::time::sleep_until(next_try), if !pending.is_empty() => {}
            else => {
                if pending.is_empty() && watches.is_empty() {
                    return;
                }
            }
        }
    }
}

/// The watch of `kind`'s children, served since the controller started, and a stream
/// that yields every CR of `crs` once that watch has listed.
fn newly_served(
    ctx: &Ctx,
    crs: &Store<CachedCr>,
    kind: &kinds::Kind,
) -> [BoxStream<'static, ObjectRef<CachedCr>>; 2] {
    let (watch, store) = child_watch(
        &ctx.client,
        kind,
        &ctx.triggers,
        &ctx.children,
        ctx.shard.as_ref(),
    );
    let crs = crs.clone();
    let resource = ctx.cr_resource.clone();
    let every_cr = futures::stream::once(async move {
        let _ = store.wait_until_ready().await;
        crs.state()
            .iter()
            .map(|cr| {
                let r = ObjectRef::new_with(
                    cr.metadata.name.as_deref().unwrap_or_default(),
                    resource.clone(),
                );
                match cr.metadata.namespace.as_deref() {
                    Some(ns) => r.within(ns),
                    None => r,
                }
            })
            .collect::<Vec<_>>()
    })
    .flat_map(futures::stream::iter);
    [watch, every_cr.boxed()]
}

/// The CR a child's watch event wakes, if any.
fn child_event(
    triggers: &triggers::Triggers,
    (group, kind): (&str, &str),
    child: &stores::CachedChild,
    change: ChildChange,
) -> Option<ObjectRef<CachedCr>> {
    let meta = &child.metadata;
    let owner = child.owner.as_deref()?;
    let id = stores::child_id(
        group,
        kind,
        meta.namespace.as_deref(),
        meta.name.as_deref().unwrap_or_default(),
    );
    let rv = meta.resource_version.as_deref().unwrap_or_default();
    triggers.child_changed(owner, &id, rv, change)
}
