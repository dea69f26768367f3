//! How the wasmtime engine is built: what decides the compiled code ([`CompileConfig`], the
//! same for the host's engine and a compiling child's, so the child's output loads in the
//! host), the pool's slots and how finished ones are kept warm ([`PoolTuning`]), and the
//! threads compiles fan out on.

use wasmtime::{Config, InstanceAllocationStrategy, PoolingAllocationConfig};

/// Core instances one component may create (an interpreted language's guest brings
/// several core modules).
const CORE_INSTANCES_PER_COMPONENT: u32 = 32;
/// Linear memories one component may define.
const MEMORIES_PER_COMPONENT: u32 = 4;
/// Tables one component may define.
const TABLES_PER_COMPONENT: u32 = 16;
/// Memory images up to this size are always copy-on-write mappings
/// (`Config::memory_guaranteed_dense_image_size`); a larger one only when at least half of
/// it is data. The image is in the compiled form whole, zeros included, so this is what a
/// module with two one-byte data segments far apart compiles to, per memory.
pub const DENSE_IMAGE_BYTES: u64 = 1 << 20;

/// What decides the compiled code: the host's engine and the child's are built from the
/// same one, so the child's output loads in the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CompileConfig {
    /// The pooling allocator, with this many instances.
    pub pooling: Option<u32>,
    /// The largest linear memory a plugin may have.
    pub max_memory_bytes: usize,
    /// Threads a compile fans out on.
    pub threads: usize,
}

/// Pool slots kept for the instances that wait for a call, beside the `calls` a pool of
/// that many runs at once: as many for idle ones ([`super::reuse`]) as for those made ahead
/// ([`super::ahead`]).
pub(super) fn kept_slots(calls: u32) -> u32 {
    (calls / 4).max(1)
}

/// How the pooling allocator treats the slot of an instance that has finished, so that the
/// next instance of the same plugin starts with fewer page faults. The defaults are what
/// `cargo bench -p inrun --bench languages` ("Pool tuning") measured best: the pagemap scan
/// took a fresh instance + call from 60 to 41 µs for Rust, 1.29 to 0.89 ms for JavaScript
/// and 1.86 to 1.59 ms for Python; keeping 32 or 64 MiB resident instead of 2 gained
/// nothing beside it (and without it only added resident memory). At most
/// [`PoolTuning::warm_slots`] × [`PoolTuning::keep_resident`] bytes stay resident for warm
/// slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolTuning {
    /// Bytes of a finished instance's linear memory reset in place (only the pages it
    /// dirtied, with [`PoolTuning::pagemap_scan`]) and kept resident for the next
    /// instance, instead of being returned to the OS and faulted in again.
    pub keep_resident: usize,
    /// Finished slots kept warm (their resident pages and memory image mapped); more are
    /// returned to the OS. `None`: the cores guests may run on, twice.
    pub warm_slots: Option<u32>,
    /// Ask the kernel which pages an instance dirtied (the `PAGEMAP_SCAN` ioctl, Linux
    /// 6.7 and later) and reset only those; where the kernel lacks it, the first
    /// [`PoolTuning::keep_resident`] bytes are reset whole.
    pub pagemap_scan: bool,
}

impl Default for PoolTuning {
    fn default() -> Self {
        PoolTuning {
            keep_resident: 2 << 20,
            warm_slots: None,
            pagemap_scan: true,
        }
    }
}

impl PoolTuning {
    /// The pool as it was before this tuning: 2 MiB reset blindly in place, wasmtime's
    /// default of 100 warm slots, no pagemap scan (the benchmarks' baseline).
    pub fn untuned() -> Self {
        PoolTuning {
            keep_resident: 2 << 20,
            warm_slots: Some(100),
            pagemap_scan: false,
        }
    }
}

/// The wasmtime engine of `compile`: the host's, and a compiling child's alike
/// ([`super::compiler`]); compiles fan out on `compile.threads` threads. `tuning` applies
/// to the host's pool only (a compiling child has none).
pub(super) fn wasmtime_engine(
    compile: &CompileConfig,
    tuning: &PoolTuning,
) -> Result<wasmtime::Engine, wasmtime::Error> {
    compile_threads(compile.threads);
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config.parallel_compilation(true);
    // An interpreted guest's pre-initialized heap (componentize-py's is ~12 MiB) is always
    // a copy-on-write image, never copied into each instance segment by segment.
    config.memory_guaranteed_dense_image_size(DENSE_IMAGE_BYTES);
    if let Some(calls) = compile.pooling {
        // Slots for the calls that may run at once, for the instances kept idle between
        // calls ([`super::reuse`]) and for those made ahead ([`super::ahead`]): neither
        // ever takes a call's slot.
        let n = calls + 2 * kept_slots(calls);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(n);
        // Guests in interpreted languages bring several core modules each. A tenant
        // holds at most a quarter of the calls ([`Budgets`]), so with these per
        // component caps it holds at most a quarter of every other kind of slot too.
        pool.max_core_instances_per_component(CORE_INSTANCES_PER_COMPONENT);
        pool.max_memories_per_component(MEMORIES_PER_COMPONENT);
        pool.max_tables_per_component(TABLES_PER_COMPONENT);
        pool.total_core_instances(n * CORE_INSTANCES_PER_COMPONENT);
        pool.total_memories(n * MEMORIES_PER_COMPONENT);
        pool.total_tables(n * TABLES_PER_COMPONENT);
        pool.max_memory_size(compile.max_memory_bytes);
        pool.max_component_instance_size(1 << 20);
        pool.max_core_instance_size(8 << 20);
        pool.table_elements(100_000);
        // Reset a finished slot's dirty pages in place instead of returning them to the
        // OS: the next instance then starts without page faults ([`PoolTuning`]).
        pool.linear_memory_keep_resident(tuning.keep_resident);
        pool.table_keep_resident(64 << 10);
        pool.pagemap_scan(if tuning.pagemap_scan {
            wasmtime::Enabled::Auto
        } else {
            wasmtime::Enabled::No
        });
        pool.max_unused_warm_slots(
            tuning
                .warm_slots
                .unwrap_or(2 * compile.threads as u32)
                .min(n),
        );
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    wasmtime::Engine::new(&config)
}

/// Sizes the thread pool compiles fan out on (rayon's global pool, which Cranelift uses)
/// to `threads`, the cores guests may use: a compile then leaves the other cores to the
/// host and to running guests. Only the first engine of a process sets it.
fn compile_threads(threads: usize) {
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("inrun-compile-{i}"))
        .build_global();
    if built.is_ok() {
        tracing::debug!(threads, "compile threads");
    }
}
