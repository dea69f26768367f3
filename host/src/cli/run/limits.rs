//! What the `--max-*`, `--tenant-*` and `--plugin-*` flags of `inrun run` become: the
//! policy Blueprints are held to, the budgets plugin calls share, and the limits of a load.

use inrun::assemble::Policy;

use super::args::RunArgs;

/// The `--max-plugin-*` ceilings over the default policy, for Blueprint files and
/// Blueprint resources alike where set.
pub(super) fn policy(args: &RunArgs) -> Policy {
    let mut policy = Policy::default();
    for c in [&mut policy.ceilings, &mut policy.tenant_ceilings] {
        c.deadline = args.max_plugin_deadline.unwrap_or(c.deadline);
        c.memory_bytes = args.max_plugin_memory.unwrap_or(c.memory_bytes);
        c.output_bytes = args.max_plugin_output.unwrap_or(c.output_bytes);
        c.max_resources = args.max_plugin_resources.unwrap_or(c.max_resources);
        c.reuse_calls = args.max_plugin_reuse_calls.unwrap_or(c.reuse_calls);
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
pub(super) fn budgets(args: &RunArgs) -> inrun::wasm::Budgets {
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

/// The limits of a load's own calls (a hooks component's `functions()`): the engine's
/// defaults, each within the `--max-plugin-*` ceiling.
pub(super) fn load_limits(args: &RunArgs) -> inrun::wasm::Limits {
    let c = policy(args).ceilings;
    let d = inrun::wasm::Limits::default();
    inrun::wasm::Limits {
        deadline: d.deadline.min(c.deadline),
        memory_bytes: d.memory_bytes.min(c.memory_bytes),
        output_bytes: d.output_bytes.min(c.output_bytes),
        max_resources: d.max_resources.min(c.max_resources),
        reuse_calls: 1,
    }
}
