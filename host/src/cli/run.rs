//! `inrun run`: builds the client, the engine, the sources and the fleet from the command
//! line, then serves the health port and runs the fleet, under the Lease when election is
//! on. Decisions live in the runtime (`HostSettings`, `Fleet`); this is wiring.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use inrun::assemble::{Policy, Services};
use inrun::fleet::{Fleet, FleetOptions};
use inrun::metrics::Metrics;
use inrun::runtime::settings::{self, HostFlags, HostSettings};
use inrun::runtime::{Shared, WatchCache};
use inrun::secrets::KubeSecrets;
use inrun::sources::SourceOptions;

use super::RunArgs;

/// How long the health and console servers have, once the host stops, to send what they
/// are answering.
const SERVER_GRACE: std::time::Duration = std::time::Duration::from_secs(5);
use super::setup::{engine, read};

/// The `--max-plugin-*` ceilings over the default policy, for Blueprint files and
/// Blueprint resources alike where set.
fn policy(args: &RunArgs) -> Policy {
    let mut policy = Policy::default();
    for c in [&mut policy.ceilings, &mut policy.tenant_ceilings] {
        c.deadline = args.max_plugin_deadline.unwrap_or(c.deadline);
        c.memory_bytes = args.max_plugin_memory.unwrap_or(c.memory_bytes);
        c.output_bytes = args.max_plugin_output.unwrap_or(c.output_bytes);
        c.max_resources = args.max_plugin_resources.unwrap_or(c.max_resources);
    }
    policy.tenant_api_writes = args.tenant_api_writes;
    policy.package_deadline = args.max_package_deadline;
    policy.tenant_size = inrun::assemble::TenantSize {
        crds: args.max_tenant_crds,
        plugins: args.max_tenant_plugins,
        workers: args.max_tenant_workers,
        external_calls: args.max_tenant_external_calls,
        compile: inrun::plugins::CompileLimits {
            module_bytes: args.max_tenant_module_size as u64,
            bytes_per_hour: args.tenant_compile_budget as u64,
        },
    };
    policy
}

/// What plugin calls share: the engine's defaults under `--plugin-*` and
/// `--tenant-plugin-*`. A tenant's memory defaults to a quarter of the host's budget,
/// whichever way that was set.
fn budgets(args: &RunArgs) -> inrun::wasm::Budgets {
    let mut b =
        inrun::wasm::Budgets::for_pool(inrun::wasm::EngineSettings::default().max_instances);
    if let Some(memory) = args.plugin_memory_budget {
        b.memory_bytes = memory;
        b.tenant.memory_bytes = memory / 4;
    }
    b.running = args.plugin_cores.unwrap_or(b.running).max(1);
    b.tenant.calls = args.tenant_plugin_calls.unwrap_or(b.tenant.calls).max(1);
    b.tenant.memory_bytes = args.tenant_plugin_memory.unwrap_or(b.tenant.memory_bytes);
    b.tenant.log_lines_per_second = args.tenant_log_lines;
    b
}

pub(super) fn run(
    runtime: &tokio::runtime::Runtime,
    args: RunArgs,
    cache: &super::setup::CacheArgs,
) -> anyhow::Result<()> {
    // One registry for the process, handed to everything that records.
    let metrics = Arc::new(Metrics::default());
    inrun::runtime::set_max_cr_bytes(args.max_cr_size);
    // A load's own calls (a hooks component's `functions()`) stay under the ceilings.
    let c = policy(&args).ceilings;
    let d = inrun::wasm::Limits::default();
    let load_limits = inrun::wasm::Limits {
        deadline: d.deadline.min(c.deadline),
        memory_bytes: d.memory_bytes.min(c.memory_bytes),
        output_bytes: d.output_bytes.min(c.output_bytes),
        max_resources: d.max_resources.min(c.max_resources),
    };
    // Tenants' plugins compile in a child process of this program, bounded in time and
    // memory: a crafted module stops its own load, never the host.
    let compiler = inrun::wasm::Compiler {
        program: std::env::current_exe()
            .map_err(|e| anyhow::anyhow!("finding this program, to compile plugins with: {e}"))?,
        timeout: args.compile_timeout,
        memory_bytes: args
            .compile_memory
            .map_or_else(inrun::wasm::Compiler::default_memory, |m| m as u64),
    };
    let engine = engine(
        cache,
        metrics.clone(),
        load_limits,
        Some(budgets(&args)),
        Some(compiler),
    )?;
    // Secrets are read from the cluster, so the client comes before the assembly.
    // Every client counts its requests (`rest_client_requests_total`).
    let connect = inrun::kubeconfig::ConnectOptions {
        kubeconfig: args.kubeconfig.clone(),
        context: args.context.clone(),
        request_timeout: Some(args.request_timeout),
    };
    inrun::kubeconfig::ensure_explicit_context(&connect)?;
    let connection = runtime.block_on(inrun::kubeconfig::connect_recording(
        &connect,
        Some(&metrics),
    ))?;
    let client = connection.client.clone();
    let tenant_egress = Some(inrun::egress::Egress::new(
        &args.tenant_egress,
        connection.apiserver.clone(),
    )?);
    let extra_roots = match &args.plugin_ca {
        Some(path) => vec![read(path, "--plugin-ca")?],
        None => Vec::new(),
    };
    let services = Services::with_sources(
        Arc::new(KubeSecrets::new(client.clone())),
        SourceOptions {
            insecure_registries: args.insecure_registries.clone(),
            extra_roots,
        },
    )
    .context("the --plugin-ca certificates")?
    // Plugins granted cluster reads are served from watch caches on this client.
    .with_cluster(Arc::new(WatchCache::new(client.clone())));
    // The health port first, so a pod's probes are answered while plugins compile: its
    // port may come from the Blueprint's runtime, read here without compiling anything.
    let host_runtime = match &args.blueprint {
        Some(path) => Some(inrun::blueprint::load(path)?.spec.runtime),
        None => None,
    };
    let env = |k: &str| std::env::var(k).ok();
    let identity = settings::identity(args.identity.clone(), env);
    let lock_namespace = args
        .lock_namespace
        .clone()
        .or_else(|| env("POD_NAMESPACE"))
        .unwrap_or_else(|| "default".into());
    let fleet = Fleet::new(
        Shared::new(client.clone(), identity.clone())
            .with_metrics(metrics.clone())
            // Package CRs claim their infrastructure as the host, whoever they act as.
            .with_locks(&lock_namespace)
            // Tenants that name a ServiceAccount act as it, on the host's credentials.
            .with_impersonation(connection.config, connection.fence.clone()),
        engine,
        services,
        FleetOptions {
            policy: policy(&args),
            blueprint: args.blueprint,
            tenants: args.tenants,
            resources: args.blueprint_resources,
            reload: (!args.reload_interval.is_zero()).then_some(args.reload_interval),
            install_crds: args.install_crds,
            resource_capabilities: args.allow_resource_capabilities,
            tenant_egress,
            default_tenant_service_account: args.default_tenant_service_account.clone(),
            tenant_identity_namespaces: (!args.tenant_identity_namespaces.is_empty())
                .then(|| args.tenant_identity_namespaces.clone()),
            on_removal: args.on_tenant_removal,
        },
    );
    let flags = HostFlags {
        health_port: args.health_port,
        leader_elect: args.leader_elect,
        leader_elect_namespace: args.leader_elect_namespace,
        leader_elect_lease: args.leader_elect_lease,
    };
    let host = HostSettings::resolve(flags, identity, host_runtime.as_ref(), env);
    runtime.block_on(async move {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            inrun::kubeconfig::shutdown_signal().await;
            tracing::info!("shutting down: finishing reconciles in flight");
            let _ = tx.send(true);
        });
        // `/readyz` fails, naming what loads, until the plugins are compiled and the
        // controllers' caches have synced.
        let loaded = Arc::new(AtomicBool::new(false));
        metrics.health().add_startup_checks(loaded.clone());
        let state = inrun::server::State::serving(fleet.clone(), metrics.clone());
        let (addr, server) = inrun::server::bind(
            std::net::SocketAddr::new(args.health_address, host.health_port),
            inrun::server::probes(state.clone(), args.health_blueprint),
            rx.clone(),
        )
        .await?;
        tracing::info!(%addr, "health port listening");
        // A broken `--blueprint` stops the host here, before it waits for a lease.
        let started = std::time::Instant::now();
        fleet.load_initial().await?;
        loaded.store(true, Ordering::Release);
        tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "Blueprint loaded"
        );
        let (addr, console) = inrun::server::bind(
            std::net::SocketAddr::new(args.console_address, args.console_port),
            inrun::server::console(state),
            rx.clone(),
        )
        .await?;
        tracing::info!(%addr, "console port listening");
        match host.leader {
            Some(config) => {
                let keeper = inrun::leader::Keeper {
                    client: connection.lease_client,
                    fence: connection.fence,
                };
                inrun::leader::run(keeper, config, rx, metrics, move |stop| fleet.run(stop))
                    .await?;
            }
            None => {
                metrics.health().set_leader(true);
                fleet.run(rx).await?;
            }
        }
        // The probe and console servers stop on the same signal once what they are
        // answering is sent (a scrape, a probe), for a few seconds at most.
        let stopped = tokio::time::timeout(SERVER_GRACE, async {
            for (port, server) in [("health", server), ("console", console)] {
                if let Ok(Err(e)) = server.await {
                    tracing::warn!(port, error = %inrun::errors::chain(&e), "serving stopped with an error");
                }
            }
        })
        .await;
        if stopped.is_err() {
            tracing::warn!(grace = ?SERVER_GRACE, "the health and console ports did not stop in time; cut off");
        }
        Ok::<_, anyhow::Error>(())
    })
}
