//! The per-call store state: a memory limiter, a WASI context with no ambient authority
//! (built only if the guest actually calls WASI), captured stdio, the `host.log` import,
//! and what the `cluster` and `http` imports need (the grants, the CR's namespace, the
//! call's deadline).

use std::sync::Arc;
use std::time::Instant;

use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::bindings::Level;
use super::bindings::reconciler::inrun::reconciler::{host, types};
use super::budget::{Admission, Hit};
use super::grants::Grants;
use super::id::PluginId;
use super::observer::Observer;

/// Bytes of guest stdout/stderr one call may write; more fails the call (a guest that
/// prints this much is misbehaving). Only the first lines reach the log.
const STDIO_CAPTURE: usize = 256 << 10;
/// Longest log message kept, in bytes.
const LOG_MESSAGE_MAX: usize = 4 << 10;
/// Log lines one call may write; later ones are counted and dropped.
const LOG_LINES_MAX: u32 = 100;

/// Caps the growth of a call's linear memories and tables, summed over all of them (a
/// component may carry several), charges it to the tenant's and the host's budgets, and
/// remembers whether a cap or a budget was hit: a refused growth is not a `Trap` and must
/// be told apart from other failures.
pub(super) struct Limiter {
    pub(super) max_bytes: usize,
    /// Bytes of memories and tables the call holds.
    pub(super) used: usize,
    /// Whether a growth passed the call's memory cap.
    pub(super) capped: bool,
    /// The budget a growth would have passed.
    pub(super) budget: Option<Hit>,
    /// What the call holds of its tenant's and the host's budgets.
    pub(super) admission: Option<Admission>,
}

/// Bytes one table element is counted as.
const TABLE_ELEMENT_BYTES: usize = 16;
/// Elements one table may grow to.
const TABLE_ELEMENTS_MAX: usize = 1_000_000;

impl Limiter {
    fn grow(&mut self, bytes: usize) -> wasmtime::Result<bool> {
        if self.used.saturating_add(bytes) > self.max_bytes {
            self.capped = true;
            return Err(wasmtime::format_err!(
                "memory cap of {} bytes reached",
                self.max_bytes
            ));
        }
        if let Some(admission) = &mut self.admission
            && let Err(hit) = admission.charge(bytes)
        {
            let message = format!("{hit} reached");
            self.budget = Some(hit);
            return Err(wasmtime::format_err!("{message}"));
        }
        self.used += bytes;
        Ok(true)
    }
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(desired.saturating_sub(current))
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > TABLE_ELEMENTS_MAX {
            return Ok(false);
        }
        self.grow(desired.saturating_sub(current) * TABLE_ELEMENT_BYTES)
    }
}

/// Captured stdout and stderr of an instance.
pub(super) struct Stdio {
    pub(super) stdout: MemoryOutputPipe,
    pub(super) stderr: MemoryOutputPipe,
    /// Bytes of each written before the current call (an instance kept for reuse serves
    /// several): only what follows is the call's.
    seen: [usize; 2],
    /// Bytes of each written when they were last flushed.
    flushed: [usize; 2],
}

impl Stdio {
    /// What the guest wrote to `stdout` (0) or `stderr` (1) during the current call, as
    /// text, and how many bytes the pipe holds in all.
    fn of_call(&self, stream: usize) -> (String, usize) {
        let all = [&self.stdout, &self.stderr][stream].contents();
        let text = String::from_utf8_lossy(&all[self.seen[stream].min(all.len())..]);
        (text.into_owned(), all.len())
    }
}

/// Everything a store holds for one call.
pub(super) struct State {
    /// Where host calls are reported.
    pub(super) observer: Arc<dyn Observer>,
    pub(super) plugin: Arc<PluginId>,
    pub(super) limiter: Limiter,
    /// What the plugin may reach beyond its sandbox.
    pub(super) grants: Grants,
    /// The namespace of the CR the call is about (`None`: cluster-scoped, or no CR).
    pub(super) cr_namespace: Option<String>,
    /// When the call is interrupted; host imports stop waiting by then too.
    pub(super) deadline: Instant,
    wasi: Option<(WasiCtx, Stdio)>,
    table: ResourceTable,
    log_lines: u32,
    /// Lines dropped because the tenant was over its log budget.
    pub(super) logs_dropped: u64,
}

impl State {
    pub(super) fn new(
        plugin: Arc<PluginId>,
        max_memory: usize,
        admission: Option<Admission>,
        grants: Grants,
        cr_namespace: Option<String>,
        deadline: Instant,
        observer: Arc<dyn Observer>,
    ) -> Self {
        State {
            observer,
            plugin,
            limiter: Limiter {
                max_bytes: max_memory,
                used: 0,
                capped: false,
                budget: None,
                admission,
            },
            grants,
            cr_namespace,
            deadline,
            wasi: None,
            table: ResourceTable::new(),
            log_lines: 0,
            logs_dropped: 0,
        }
    }

    /// Makes the state of an instance kept for reuse that of a new call: the call's memory
    /// cap, admission, grants, CR and deadline, with the memory the instance holds already
    /// charged to the admission; what the guest printed before is not the call's. False
    /// when the instance cannot serve it (it holds more than the cap or the budget
    /// allows): the admission is then back in `self.limiter`, for the caller to take.
    pub(super) fn rearm(
        &mut self,
        max_memory: usize,
        admission: Option<Admission>,
        grants: Grants,
        cr_namespace: Option<String>,
        deadline: Instant,
    ) -> bool {
        let used = self.limiter.used;
        self.limiter = Limiter {
            max_bytes: max_memory,
            used,
            capped: false,
            budget: None,
            admission,
        };
        if used > max_memory {
            return false;
        }
        if let Some(admission) = &mut self.limiter.admission
            && admission.charge(used).is_err()
        {
            return false;
        }
        self.grants = grants;
        self.cr_namespace = cr_namespace;
        self.deadline = deadline;
        self.log_lines = 0;
        self.logs_dropped = 0;
        if let Some((_, stdio)) = &mut self.wasi {
            stdio.seen = stdio.flushed;
        }
        true
    }

    /// Lets go of what ties a finished call to this state, before its instance is kept
    /// idle: its admission (the call's permits and memory charge go back) and its grants.
    pub(super) fn park(&mut self) {
        self.limiter.admission = None;
        self.grants = Grants::default();
        self.cr_namespace = None;
    }

    /// Whether the instance has room in its stdio pipes for another call: it had used at
    /// most half of either when the call's output was flushed.
    pub(super) fn stdio_left(&self) -> bool {
        self.stdio()
            .is_none_or(|s| s.flushed.iter().all(|&n| n <= STDIO_CAPTURE / 2))
    }

    /// Whether one more line may be logged: the tenant's log budget allows it.
    fn may_log(&mut self) -> bool {
        let allowed = self
            .limiter
            .admission
            .as_ref()
            .and_then(|a| a.tenant())
            .is_none_or(|t| t.log_line());
        if !allowed {
            self.logs_dropped += 1;
        }
        allowed
    }

    /// Says (at most once a second per tenant's call, as one line) how many of this
    /// call's log lines its tenant's log budget dropped, and tells the observer.
    pub(super) fn report_dropped_logs(&self) {
        if self.logs_dropped == 0 {
            return;
        }
        self.observer
            .plugin_logs_dropped(&self.plugin.name, self.logs_dropped);
        if let Some(tenant) = self.limiter.admission.as_ref().and_then(|a| a.tenant())
            && tenant.log_line()
        {
            tracing::warn!(
                plugin.name = %self.plugin.name,
                tenant = %tenant.name,
                dropped = self.logs_dropped,
                "plugin log lines dropped: the tenant is over its budget of {} lines a second",
                tenant.log_lines_per_second()
            );
        }
    }

    /// The guest's stdio, if it used WASI at all during the call.
    pub(super) fn stdio(&self) -> Option<&Stdio> {
        self.wasi.as_ref().map(|(_, stdio)| stdio)
    }

    /// Writes what the guest printed to the host's log, one line each, truncated, as far
    /// as the tenant's log budget allows.
    pub(super) fn flush_stdio(&mut self) {
        let Some((_, stdio)) = &mut self.wasi else {
            return;
        };
        let (out, out_len) = stdio.of_call(0);
        let (err, err_len) = stdio.of_call(1);
        stdio.flushed = [out_len, err_len];
        for (stream, text) in [("stdout", out), ("stderr", err)] {
            if text.is_empty() {
                continue;
            }
            for line in text.lines().filter(|l| !l.trim().is_empty()).take(50) {
                if !self.may_log() {
                    continue;
                }
                tracing::info!(
                    plugin.name = %self.plugin.name,
                    plugin.digest = %self.plugin.digest_ref(),
                    stream,
                    "{}",
                    truncate(line, LOG_MESSAGE_MAX)
                );
            }
        }
    }

    /// The first non-empty line the guest wrote to stderr.
    pub(super) fn first_stderr_line(&self) -> Option<String> {
        let (text, _) = self.stdio()?.of_call(1);
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| truncate(l, 300).to_string())
    }
}

/// A WASI context that grants nothing: no environment, preopened directories, network or
/// inherited stdio, and no argument but argv[0], `name`. Stdout and stderr go to bounded
/// in-memory pipes.
fn sealed_wasi(name: &str) -> (WasiCtx, Stdio) {
    let stdio = Stdio {
        stdout: MemoryOutputPipe::new(STDIO_CAPTURE),
        stderr: MemoryOutputPipe::new(STDIO_CAPTURE),
        seen: [0, 0],
        flushed: [0, 0],
    };
    let ctx = WasiCtxBuilder::new()
        .stdout(stdio.stdout.clone())
        .stderr(stdio.stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        // Programs expect an argv[0] (Go's runtime and libraries such as klog read it at
        // start); the plugin's own name grants nothing.
        .arg(name)
        .build();
    (ctx, stdio)
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // Built on the guest's first WASI call: most reconcilers never make one, and a
        // context costs about as much as the rest of instantiation.
        let name = &self.plugin.name;
        let (ctx, _) = self.wasi.get_or_insert_with(|| sealed_wasi(name));
        WasiCtxView {
            ctx,
            table: &mut self.table,
        }
    }
}

impl types::Host for State {}

impl host::Host for State {
    fn log(&mut self, level: Level, message: String) {
        self.log_lines += 1;
        if self.log_lines > LOG_LINES_MAX || !self.may_log() {
            return;
        }
        let message = truncate(&message, LOG_MESSAGE_MAX);
        let name = &self.plugin.name;
        let digest = self.plugin.digest_ref();
        macro_rules! emit {
            ($lvl:ident) => {
                tracing::$lvl!(plugin.name = %name, plugin.digest = %digest, "{message}")
            };
        }
        match level {
            Level::Trace => emit!(trace),
            Level::Debug => emit!(debug),
            Level::Info => emit!(info),
            Level::Warn => emit!(warn),
            Level::Error => emit!(error),
        }
    }
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub(super) fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Hit;

    const MIB: usize = 1 << 20;

    #[test]
    fn a_calls_memories_and_tables_are_capped_together_not_each() {
        let mut limiter = Limiter {
            max_bytes: 64 * MIB,
            used: 0,
            capped: false,
            budget: None,
            admission: None,
        };
        // Two memories of 30 MiB fit; a third does not, though each alone would.
        assert!(limiter.memory_growing(0, 30 * MIB, None).expect("first"));
        assert!(limiter.memory_growing(0, 30 * MIB, None).expect("second"));
        let third = limiter.memory_growing(0, 30 * MIB, None);
        assert!(third.is_err() && limiter.capped, "{third:?}");
        // Tables count too: 16 bytes an element, so 5 MiB worth is past the cap now.
        limiter.capped = false;
        let table = limiter.table_growing(0, 5 * MIB / TABLE_ELEMENT_BYTES, None);
        assert!(table.is_err() && limiter.capped, "{table:?}");
        assert!(limiter.table_growing(0, 1024, None).expect("a small table"));
        assert_eq!(limiter.used, 60 * MIB + 1024 * TABLE_ELEMENT_BYTES);
        // Past the element cap a table is refused outright, whatever the bytes.
        assert!(
            !limiter
                .table_growing(0, TABLE_ELEMENTS_MAX + 1, None)
                .expect("refused")
        );
    }

    /// A component of `n` core instances, each with a linear memory of its own, exporting
    /// `run(pages)`: every memory grows by `pages` (a refused growth traps); returns `n`.
    fn memories(n: usize) -> Vec<u8> {
        let instances: String = (0..n)
            .map(|i| format!("(core instance $i{i} (instantiate $m))\n"))
            .collect();
        let imports: String = (0..n)
            .map(|i| format!("(import \"i{i}\" \"grow\" (func $g{i} (param i32) (result i32)))\n"))
            .collect();
        let calls: String = (0..n)
            .map(|i| {
                format!(
                    "(if (i32.lt_s (call $g{i} (local.get 0)) (i32.const 0)) (then unreachable))\n"
                )
            })
            .collect();
        let with: String = (0..n)
            .map(|i| format!("(with \"i{i}\" (instance $i{i}))"))
            .collect();
        let text = format!(
            "(component
              (core module $m
                (memory (export \"memory\") 0)
                (func (export \"grow\") (param i32) (result i32) (memory.grow (local.get 0))))
              {instances}
              (core module $main
                {imports}
                (func (export \"run\") (param i32) (result i32)
                  {calls}
                  (i32.const {n})))
              (core instance $main (instantiate $main {with}))
              (func $run (param \"pages\" u32) (result u32) (canon lift (core func $main \"run\")))
              (export \"run\" (func $run)))"
        );
        wat::parse_str(text).expect("component text")
    }

    /// Instantiates `bytes` in a fresh store of `engine` under a call cap of `cap` bytes
    /// (admitted under the engine's tenant budget) and grows each memory by `pages`.
    async fn grow(
        engine: &crate::Engine,
        bytes: &[u8],
        cap: usize,
        pages: u32,
    ) -> (wasmtime::Result<u32>, wasmtime::Store<State>) {
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        let admission = engine.admit(deadline).await.expect("admitted");
        let mut store = wasmtime::Store::new(
            engine.wasmtime(),
            State::new(
                Arc::new(PluginId {
                    name: "memories".into(),
                    digest: String::new(),
                }),
                cap,
                Some(admission),
                Grants::default(),
                None,
                deadline,
                Arc::new(crate::Unobserved),
            ),
        );
        store.limiter(|s| &mut s.limiter);
        store.set_epoch_deadline(u64::MAX / 2);
        let component =
            wasmtime::component::Component::new(engine.wasmtime(), bytes).expect("compiles");
        let result = async {
            let instance = engine
                .linker()
                .instantiate_async(&mut store, &component)
                .await?;
            let run = instance.get_typed_func::<(u32,), (u32,)>(&mut store, "run")?;
            Ok(run.call_async(&mut store, (pages,)).await?.0)
        }
        .await;
        (result, store)
    }

    #[tokio::test]
    async fn a_real_components_memories_count_together_against_its_cap_and_its_tenants_budget() {
        let engine = crate::Engine::new(crate::EngineSettings {
            max_instances: 8,
            ..Default::default()
        })
        .expect("engine");
        let budget = |memory_bytes| {
            Some(crate::TenantBudget {
                calls: 4,
                memory_bytes,
                log_lines_per_second: 100,
                held_bytes: 64 * MIB,
                cpu: None,
            })
        };
        let four = memories(4);
        let a = engine.for_tenant("a", budget(40 * MIB));
        // Each memory of 6 MiB (96 pages) alone fits a 20 MiB cap; the four together do not.
        let (capped, store) = grow(&a, &four, 20 * MIB, 96).await;
        assert!(capped.is_err() && store.data().limiter.capped, "{capped:?}");
        assert!(store.data().limiter.budget.is_none());
        drop(store);
        // Under a 32 MiB cap the four (24 MiB in all) run.
        let (first, holding) = grow(&a, &four, 32 * MIB, 96).await;
        assert_eq!(first.expect("24 MiB in all fits"), 4);
        assert_eq!(holding.data().limiter.used, 24 * MIB);
        // While that call holds its 24 MiB, a second one of the same tenant passes the
        // tenant's 40 MiB at its third memory: it fails on the budget, not on its cap.
        let (second, store) = grow(&a, &four, 32 * MIB, 96).await;
        assert!(second.is_err(), "{second:?}");
        let hit = store
            .data()
            .limiter
            .budget
            .as_ref()
            .expect("a budget was hit");
        assert!(matches!(hit, Hit::TenantMemory { .. }), "{hit}");
        assert!(
            !store.data().limiter.capped,
            "the call's own cap was not reached"
        );
        drop(store);
        // Another tenant's call is untouched by A's budget.
        let b = engine.for_tenant("b", budget(40 * MIB));
        let (other, _) = grow(&b, &four, 32 * MIB, 96).await;
        assert_eq!(other.expect("B's own budget"), 4);
        drop(holding);
        // More memories than a component may define: its load is refused, naming them.
        let id = PluginId {
            name: "sixteen".into(),
            digest: "0".repeat(64),
        };
        let refused = b.component(&id, &memories(16)).expect_err("16 memories");
        let text = inrun_contract::errors::chain(&refused);
        assert!(text.contains("16 Wasm linear memories"), "{text}");
    }
}
