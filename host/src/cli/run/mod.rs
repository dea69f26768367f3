//! `inrun run`: builds the client, the engine, the sources and the fleet from the command
//! line, then serves the health port and runs the fleet, under the Lease when election is
//! on. Decisions live in the runtime (`HostSettings`, `Fleet`); this is wiring.

mod args;
mod limits;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use inrun::assemble::Services;
use inrun::blueprint::ShardWatch;
use inrun::fleet::{Fleet, FleetOptions};
use inrun::kubeconfig::Connection;
use inrun::leader::{Keeper, LeaderConfig};
use inrun::metrics::Metrics;
use inrun::ring::settings::{self, HostFlags, HostSettings};
use inrun::ring::sharding::keeper::KeeperConfig;
use inrun::ring::sharding::shard::Shard;
use inrun::runtime::locks::LockPolicy;
use inrun::runtime::{Shared, WatchCache};
use inrun::secrets::KubeSecrets;
use inrun::server::ServeError;
use inrun::sources::SourceOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use args::{LogFormat, RunArgs};

use super::setup::{CacheArgs, engine, read};

/// How long the health and console servers have, once the host stops, to send what they
/// are answering.
const SERVER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs the host until SIGINT or SIGTERM: everything is built here, outside the async
/// runtime, then [`serve`] runs in it.
///
/// # Errors
/// A flag's file cannot be read, the cluster cannot be reached, the `--blueprint` is
/// invalid or cannot start, or a port cannot be bound.
pub(super) fn run(
    runtime: &tokio::runtime::Runtime,
    args: RunArgs,
    cache: &CacheArgs,
    trace_ids: Option<inrun::runtime::TraceIds>,
) -> anyhow::Result<()> {
    // Before anything starts: a console opened to the network without a token is refused.
    let console = console_access(&args)?;
    // One registry for the process, handed to everything that records.
    let metrics = Arc::new(Metrics::default());
    inrun::runtime::set_max_cr_bytes(args.max_cr_size);
    let load_limits = limits::load_limits(&args);
    let compiler = compiler(&args)?;
    let budgets = limits::budgets(&args);
    limits::memory_plan(&args, &budgets)?;
    let engine = engine(
        cache,
        metrics.clone(),
        load_limits,
        Some(budgets),
        Some(compiler),
        args.plugin_make_ahead,
    )?;
    // Secrets are read from the cluster, so the client comes before the assembly.
    let connection = connect(runtime, &args, &metrics)?;
    let tenant_egress =
        inrun::egress::Egress::new(&args.tenant_egress, connection.apiserver.clone())?;
    let services = services(&args, &connection)?;
    // The health port first, so a pod's probes are answered while plugins compile: its
    // port may come from the Blueprint's runtime, read here without compiling anything.
    let host_runtime = match &args.blueprint {
        Some(path) => Some(inrun::blueprint::load(path)?.spec.runtime),
        None => None,
    };
    let env = |k: &str| std::env::var(k).ok();
    let identity = settings::replica_name(args.identity.clone(), env);
    let keeper = Keeper {
        client: connection.lease_client.clone(),
        fence: connection.fence.clone(),
    };
    let host = HostSettings::resolve(
        host_flags(&args, &connection.config.default_namespace),
        identity.clone(),
        host_runtime.as_ref(),
        env,
    );
    // `--leader-elect` beside a Blueprint that shards would be dropped without a word.
    anyhow::ensure!(
        !(args.leader_elect && host.sharding.is_some()),
        "--leader-elect cannot be used with runtime.sharding.enabled in {}: sharded replicas all reconcile; drop one of the two",
        args.blueprint
            .as_ref()
            .map_or_else(|| "the Blueprint".into(), |p| p.display().to_string())
    );
    let mut shared = shared(&args, connection, identity, &metrics);
    if let Some(read) = trace_ids {
        shared = shared.with_trace_ids(read);
    }
    let sharding = host.sharding.clone().map(|config| {
        let shard = Arc::new(Shard::default());
        // The host's own writes (outside any CR's pass) are the ring leader's: closed
        // until this replica holds the ring's leader Lease.
        let leading = inrun::fence::Fence::default();
        leading.close();
        keeper.fence.fence_bucketless_writes(leading.clone());
        shared = shared
            .clone()
            .with_shard(shard.clone())
            .with_leading(leading.clone());
        Sharding {
            config,
            shard,
            leading,
        }
    });
    let fleet = Fleet::new(
        shared,
        engine,
        services,
        fleet_options(&args, tenant_egress),
    );
    runtime.block_on(serve(
        &args,
        host,
        fleet,
        (keeper, sharding),
        metrics,
        console,
    ))
}

/// Who may read the console: its Host check and its token (`--console-token-file`),
/// required off loopback.
fn console_access(args: &RunArgs) -> anyhow::Result<inrun::server::ConsoleAccess> {
    let token = args
        .console_token_file
        .as_deref()
        .map(inrun::server::ConsoleAccess::read_token)
        .transpose()?;
    Ok(inrun::server::ConsoleAccess::new(
        args.console_address,
        &args.console_hosts,
        token,
    )?)
}

/// Tenants' plugins compile in a child process of this program, bounded in time and
/// memory: a crafted module stops its own load, never the host.
fn compiler(args: &RunArgs) -> anyhow::Result<inrun::wasm::Compiler> {
    Ok(inrun::wasm::Compiler {
        program: std::env::current_exe()
            .context("finding this program, to compile plugins with")?,
        timeout: args.compile_timeout,
        memory_bytes: args
            .compile_memory
            .map_or_else(inrun::wasm::Compiler::default_memory, |m| m as u64),
    })
}

/// The cluster as `--kubeconfig` and `--context` say; every client counts its requests
/// (`rest_client_requests_total`).
fn connect(
    runtime: &tokio::runtime::Runtime,
    args: &RunArgs,
    metrics: &Metrics,
) -> anyhow::Result<Connection> {
    let connect = inrun::kubeconfig::ConnectOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        request_timeout: Some(args.request_timeout),
    };
    inrun::kubeconfig::ensure_explicit_context(&connect)?;
    Ok(runtime.block_on(inrun::kubeconfig::connect_recording(
        &connect,
        Some(metrics),
    ))?)
}

/// What reconcilers call besides the cluster: secrets read from it, plugin sources that
/// trust `--plugin-ca` and `--insecure-registry`, and cluster reads for plugins granted
/// them, served from watch caches on this client.
fn services(args: &RunArgs, connection: &Connection) -> anyhow::Result<Services> {
    let client = &connection.client;
    let extra_roots = match &args.plugin_ca {
        Some(path) => vec![read(path, "--plugin-ca")?],
        None => Vec::new(),
    };
    Ok(Services::with_sources(
        Arc::new(KubeSecrets::new(client.clone())),
        SourceOptions {
            insecure_registries: args.insecure_registries.clone(),
            extra_roots,
        },
    )
    .context("the --plugin-ca certificates")?
    .with_cluster(Arc::new(WatchCache::new(client.clone()))))
}

/// What every tenant's controllers share: the client, this replica's `identity`, the
/// metrics, the Leases of package infrastructure, and impersonation for tenants.
fn shared(
    args: &RunArgs,
    connection: Connection,
    identity: String,
    metrics: &Arc<Metrics>,
) -> Shared {
    let lock_namespace = settings::host_namespace(
        args.lock_namespace.clone(),
        |k| std::env::var(k).ok(),
        Some(&connection.config.default_namespace),
    );
    Shared::new(connection.client.clone(), identity)
        .with_metrics(metrics.clone())
        // Package CRs claim their infrastructure as the host, whoever they act as, each
        // tenant in its own scope and under its write rate.
        .with_locks_under(
            &lock_namespace,
            LockPolicy {
                shared: args.shared_identity_boundaries.clone(),
                duration: args.identity_lock_duration,
                max_per_tenant: args.max_tenant_identity_locks,
            },
        )
        // Tenants that name a ServiceAccount act as it, on the host's credentials.
        .with_impersonation(connection.config, connection.fence.clone())
}

/// Which tenants the fleet serves and what it holds them to.
fn fleet_options(args: &RunArgs, tenant_egress: inrun::egress::Egress) -> FleetOptions {
    FleetOptions {
        policy: limits::policy(args),
        blueprint: args.blueprint.clone(),
        tenants: args.tenants.clone(),
        resources: args.blueprint_resources,
        reload: (!args.reload_interval.is_zero()).then_some(args.reload_interval),
        install_crds: args.install_crds,
        resource_capabilities: args.allow_resource_capabilities,
        tenant_egress: Some(tenant_egress),
        default_tenant_service_account: args.default_tenant_service_account.clone(),
        tenant_identity_namespaces: (!args.tenant_identity_namespaces.is_empty())
            .then(|| args.tenant_identity_namespaces.clone()),
        on_removal: args.on_tenant_removal,
    }
}

/// The flags that override the Blueprint's `runtime` section.
fn host_flags(args: &RunArgs, context_namespace: &str) -> HostFlags {
    HostFlags {
        context_namespace: Some(context_namespace.to_string()),
        health_port: args.health_port,
        leader_elect: args.leader_elect,
        leader_elect_namespace: args.leader_elect_namespace.clone(),
        leader_elect_lease: args.leader_elect_lease.clone(),
        sharding: args.sharding,
        sharding_ring: args.sharding_ring.clone(),
        sharding_watch: args.sharding_watch,
    }
}

/// Serves the health port, loads the fleet, opens the console and runs the fleet until
/// the stop signal; then lets the ports finish what they are answering.
async fn serve(
    args: &RunArgs,
    host: HostSettings,
    fleet: Arc<Fleet>,
    keeper: (Keeper, Option<Sharding>),
    metrics: Arc<Metrics>,
    access: inrun::server::ConsoleAccess,
) -> anyhow::Result<()> {
    let stop = stop_on_signal();
    // `/readyz` fails, naming what loads, until the plugins are compiled and the
    // controllers' caches have synced.
    let loaded = Arc::new(AtomicBool::new(false));
    metrics.health().add_startup_checks(loaded.clone());
    let state = inrun::server::State::serving(fleet.clone(), metrics.clone());
    let (addr, health) = inrun::server::bind(
        SocketAddr::new(args.health_address, host.health_port),
        inrun::server::probes(
            state.clone(),
            inrun::server::health_blueprint(args.health_address, args.health_blueprint),
        ),
        stop.clone(),
    )
    .await?;
    tracing::info!(%addr, "health port listening");
    load(&fleet, &loaded).await?;
    let (addr, console) = inrun::server::bind(
        SocketAddr::new(args.console_address, args.console_port),
        inrun::server::console(state, access),
        stop.clone(),
    )
    .await?;
    tracing::info!(%addr, "console port listening");
    let (keeper, sharding) = keeper;
    match sharding {
        Some(sharding) => {
            run_sharded(fleet, sharding, keeper, stop, metrics).await?;
        }
        None => run_fleet(fleet, host.leader, keeper, stop, metrics).await?,
    }
    stop_servers(health, console).await;
    Ok(())
}

/// A flag that turns true on SIGINT or SIGTERM.
fn stop_on_signal() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        inrun::kubeconfig::shutdown_signal().await;
        tracing::info!("shutting down: finishing reconciles in flight");
        let _ = tx.send(true);
    });
    rx
}

/// Loads the Blueprints and compiles their plugins, then sets `loaded` for `/readyz`.
async fn load(fleet: &Fleet, loaded: &AtomicBool) -> anyhow::Result<()> {
    // A broken `--blueprint` stops the host here, before it waits for a lease.
    let started = std::time::Instant::now();
    fleet.load_initial().await?;
    loaded.store(true, Ordering::Release);
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "Blueprint loaded"
    );
    Ok(())
}

/// Runs the fleet until `stop`: while holding the Lease when `leader` is set, else as the
/// leader from the start.
async fn run_fleet(
    fleet: Arc<Fleet>,
    leader: Option<LeaderConfig>,
    keeper: Keeper,
    stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    match leader {
        Some(config) => {
            inrun::leader::run(keeper, config, stop, metrics, move |stop| fleet.run(stop)).await?;
        }
        None => {
            metrics.health().set_leader(true);
            fleet.run(stop).await?;
        }
    }
    Ok(())
}

/// What a sharded replica keeps: its place in the ring, the buckets it holds, and the
/// fence of the host's own writes, open while it leads the ring.
struct Sharding {
    config: KeeperConfig,
    shard: Arc<Shard>,
    leading: inrun::fence::Fence,
}

/// Runs the fleet on every replica of the ring, each writing only for the CRs of the
/// buckets it holds, and the one holding the ring's leader Lease also the host's own
/// writes; on `stop` the reconciles in flight finish, then the replica leaves the ring
/// (its buckets given up for the others to take at once) and gives up the lead.
async fn run_sharded(
    fleet: Arc<Fleet>,
    sharding: Sharding,
    keeper: Keeper,
    stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<()> {
    metrics.health().set_sharded();
    let Sharding {
        config,
        shard,
        leading,
    } = sharding;
    let by_labels = match config.watch {
        ShardWatch::Labels => true,
        ShardWatch::Selector => false,
        ShardWatch::Auto => {
            match inrun::runtime::sharded_watch::server_shards(
                &keeper.client,
                &config.ring.namespace,
            )
            .await
            {
                Ok(honoured) => !honoured,
                Err(e) => {
                    tracing::warn!(error = %inrun::errors::chain(&e), "asking whether the API server honours shardSelector; watching by label");
                    true
                }
            }
        }
    };
    shard.watch_by_labels(by_labels);
    tracing::info!(
        watch = if by_labels { "labels" } else { "selector" },
        "each replica watches the CRs of its buckets"
    );
    let lead = tokio::spawn(lead_ring(
        fleet.clone(),
        Keeper {
            client: keeper.client.clone(),
            fence: leading,
        },
        config.leader(),
        stop.clone(),
        metrics.clone(),
    ));
    let (leave, leaving) = watch::channel(false);
    let mut ring = tokio::spawn(inrun::ring::sharding::keeper::run(
        keeper.client,
        config,
        shard,
        metrics,
        leaving,
    ));
    let serving = fleet.run(stop);
    tokio::pin!(serving);
    tokio::select! {
        served = &mut serving => {
            let _ = leave.send(true);
            let left = ring.await;
            let _ = lead.await;
            served?;
            left??;
        }
        // The keeper ends before the stop only when it may not keep the ring.
        kept = &mut ring => {
            lead.abort();
            kept??;
            serving.await?;
        }
    }
    Ok(())
}

/// Holds the ring's leader Lease whenever it can, until `stop`: on coming to lead the
/// fleet installs its CRDs and writes the `Blueprint` resources' status; a lead lost
/// (renewal failed) is tried for again. Not being allowed the Lease ends it with an error
/// logged: the replica keeps serving its buckets, the host's own writes are left to others.
async fn lead_ring(
    fleet: Arc<Fleet>,
    keeper: Keeper,
    config: LeaderConfig,
    stop: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) {
    loop {
        let fleet = fleet.clone();
        let led = inrun::leader::run(
            keeper.clone(),
            config.clone(),
            stop.clone(),
            metrics.clone(),
            move |mut stop| async move {
                fleet.lead().await;
                let _ = stop.wait_for(|s| *s).await;
                Ok::<(), std::convert::Infallible>(())
            },
        )
        .await;
        match led {
            Ok(()) => return,
            Err(e @ inrun::leader::LeaderError::Forbidden { .. }) => {
                tracing::error!(error = %inrun::errors::chain(&e), "the ring's leader Lease");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %inrun::errors::chain(&e), "the ring's lead was lost; trying for it again");
            }
        }
    }
}

/// The probe and console servers stop on the same signal once what they are answering is
/// sent (a scrape, a probe), for [`SERVER_GRACE`] at most.
async fn stop_servers(
    health: JoinHandle<Result<(), ServeError>>,
    console: JoinHandle<Result<(), ServeError>>,
) {
    let stopped = tokio::time::timeout(SERVER_GRACE, async {
        for (port, server) in [("health", health), ("console", console)] {
            if let Ok(Err(e)) = server.await {
                tracing::warn!(port, error = %inrun::errors::chain(&e), "serving stopped with an error");
            }
        }
    })
    .await;
    if stopped.is_err() {
        tracing::warn!(grace = ?SERVER_GRACE, "the health and console ports did not stop in time; cut off");
    }
}
