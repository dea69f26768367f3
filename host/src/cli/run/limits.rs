//! What the `--max-*`, `--tenant-*` and `--plugin-*` flags of `inrun run` become: the
//! policy Blueprints are held to, the budgets plugin calls share, and the limits of a load.

use inrun::assemble::Policy;

use super::args::RunArgs;

/// The `--max-plugin-*` ceilings over the default policy, for Blueprint files and
/// Blueprint resources alike where set. Unless `--max-plugin-output` says otherwise, a
/// tenant's plugins may return at most a quarter of its host-memory share (an outcome is
/// held whole while it is copied out of the guest, and then what it parses to): a
/// Blueprint asking for more is refused naming the field, rather than every CR failing.
pub(super) fn policy(args: &RunArgs) -> Policy {
    let mut policy = Policy::default();
    for c in [&mut policy.ceilings, &mut policy.tenant_ceilings] {
        c.deadline = args.max_plugin_deadline.unwrap_or(c.deadline);
        c.memory_bytes = args.max_plugin_memory.unwrap_or(c.memory_bytes);
        c.output_bytes = args.max_plugin_output.unwrap_or(c.output_bytes);
        c.max_resources = args.max_plugin_resources.unwrap_or(c.max_resources);
        c.reuse_calls = args.max_plugin_reuse_calls.unwrap_or(c.reuse_calls);
    }
    if args.max_plugin_output.is_none() {
        let held = budgets(args).tenant.held_bytes / 4;
        let c = &mut policy.tenant_ceilings;
        c.output_bytes = c.output_bytes.min(held.max(64 << 10));
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
    let limit = args
        .memory_limit
        .or_else(inrun::wasm::container_memory_limit);
    let mut b = inrun::wasm::Budgets::for_pool_within(
        inrun::wasm::EngineSettings::default().max_instances,
        limit,
    );
    if let Some(memory) = args.plugin_memory_budget {
        b.memory_bytes = memory;
        b.tenant.memory_bytes = memory / 4;
    }
    b.running = args.plugin_cores.unwrap_or(b.running).max(1);
    b.tenant.calls = args.tenant_plugin_calls.unwrap_or(b.tenant.calls).max(1);
    b.tenant.memory_bytes = args.tenant_plugin_memory.unwrap_or(b.tenant.memory_bytes);
    b.tenant.log_lines_per_second = args.tenant_log_lines;
    if let Some(held) = args.host_memory_budget {
        b.held_bytes = held;
        b.tenant.held_bytes = held / 4;
    }
    b.tenant.held_bytes = args.tenant_host_memory.unwrap_or(b.tenant.held_bytes);
    b.tenant.cpu = args
        .tenant_plugin_cpu
        .or_else(|| Some(inrun::wasm::default_cpu_cap(b.running)));
    b
}

/// Memory left to the host itself, beyond what the budgets may hold: its caches, code
/// and the rest.
const HOST_OWN: usize = 64 << 20;

/// Refuses budgets whose worst case passes the container's memory (`--memory-limit`, else
/// the cgroup's limit; no check without either): guest memory of calls in flight, the
/// idle and made-ahead instances kept beside them (a quarter of it each), and the host
/// memory replies take, with [`HOST_OWN`] left.
///
/// # Errors
/// The sum, term by term, and what to lower.
pub(super) fn memory_plan(args: &RunArgs, b: &inrun::wasm::Budgets) -> anyhow::Result<()> {
    let Some(limit) = args
        .memory_limit
        .or_else(inrun::wasm::container_memory_limit)
    else {
        return Ok(());
    };
    let mib = |n: usize| n >> 20;
    let kept = b.memory_bytes / 4;
    let ahead = if args.plugin_make_ahead {
        b.memory_bytes / 4
    } else {
        0
    };
    let worst = b.memory_bytes + kept + ahead + b.held_bytes + HOST_OWN;
    if worst > limit {
        anyhow::bail!(
            "the budgets may take {} MiB, more than the memory limit of {} MiB: guest memory {} MiB (--plugin-memory-budget) + idle instances {} MiB and instances made ahead {} MiB (a quarter of it each) + replies {} MiB (--host-memory-budget) + {} MiB for the host itself; lower the budgets or raise --memory-limit",
            mib(worst),
            mib(limit),
            mib(b.memory_bytes),
            mib(kept),
            mib(ahead),
            mib(b.held_bytes),
            mib(HOST_OWN)
        );
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn run_args(flags: &[&str]) -> RunArgs {
        let argv = ["inrun", "run", "--blueprint", "b.yaml"]
            .iter()
            .chain(flags);
        match crate::cli::Cli::try_parse_from(argv)
            .expect("flags")
            .command
        {
            crate::cli::Command::Run(args) => *args,
            _ => panic!("not `inrun run`"),
        }
    }

    #[test]
    fn budgets_whose_worst_case_passes_the_memory_limit_are_refused_naming_each_term() {
        // The defaults in a 512Mi pod fit.
        let fits = run_args(&["--memory-limit", "512Mi"]);
        let b = budgets(&fits);
        assert_eq!(b.memory_bytes, 256 << 20);
        assert_eq!((b.held_bytes, b.tenant.held_bytes), (64 << 20, 16 << 20));
        memory_plan(&fits, &b).expect("the defaults fit");
        // Raising a budget past what the pod holds is refused, each term named.
        let over = run_args(&["--memory-limit", "512Mi", "--host-memory-budget", "256Mi"]);
        let err = memory_plan(&over, &budgets(&over)).unwrap_err().to_string();
        assert!(
            err.contains("more than the memory limit of 512 MiB")
                && err.contains("replies 256 MiB (--host-memory-budget)")
                && err.contains("guest memory 256 MiB (--plugin-memory-budget)"),
            "{err}"
        );
        // Without instances made ahead, their quarter is not counted.
        let lean = run_args(&[
            "--memory-limit",
            "512Mi",
            "--host-memory-budget",
            "128Mi",
            "--plugin-make-ahead",
            "false",
        ]);
        memory_plan(&lean, &budgets(&lean)).expect("fits without made-ahead instances");
    }

    #[test]
    fn a_tenants_plugins_may_return_a_quarter_of_its_host_memory_share_at_most() {
        let args = run_args(&["--memory-limit", "512Mi"]);
        // A share of 16 MiB: outputs of up to 4 MiB.
        let ceiling = policy(&args).tenant_ceilings.output_bytes;
        assert_eq!(ceiling, 4 << 20);
        // The operator may say otherwise.
        let raised = run_args(&["--memory-limit", "512Mi", "--max-plugin-output", "16Mi"]);
        assert_eq!(policy(&raised).tenant_ceilings.output_bytes, 16 << 20);
        // The tenant's CPU cap defaults to half the cores guests may use; a flag sets it.
        let capped = run_args(&["--tenant-plugin-cpu", "250m"]);
        assert_eq!(
            budgets(&capped).tenant.cpu,
            Some(inrun::wasm::Millicores::new(250))
        );
        assert!(budgets(&run_args(&[])).tenant.cpu.is_some());
    }
}
