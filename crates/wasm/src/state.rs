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

use super::PluginId;
use super::bindings::Level;
use super::bindings::reconciler::inrun::reconciler::{host, types};
use super::budget::{Admission, Hit};
use super::grants::Grants;

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
    pub(super) hit: bool,
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
            self.hit = true;
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

/// Captured stdout and stderr of one call.
pub(super) struct Stdio {
    pub(super) stdout: MemoryOutputPipe,
    pub(super) stderr: MemoryOutputPipe,
}

/// Everything a store holds for one call.
pub(super) struct State {
    /// Where host calls are reported.
    pub(super) observer: Arc<dyn super::Observer>,
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
        observer: Arc<dyn super::Observer>,
    ) -> Self {
        State {
            observer,
            plugin,
            limiter: Limiter {
                max_bytes: max_memory,
                used: 0,
                hit: false,
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
        let Some(stdio) = self.stdio() else { return };
        let pipes = [
            ("stdout", stdio.stdout.contents()),
            ("stderr", stdio.stderr.contents()),
        ];
        for (stream, bytes) in pipes {
            if bytes.is_empty() {
                continue;
            }
            let text = String::from_utf8_lossy(&bytes);
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
        let bytes = self.stdio()?.stderr.contents();
        let text = String::from_utf8_lossy(&bytes);
        text.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| truncate(l, 300).to_string())
    }
}

/// A WASI context that grants nothing: no environment, arguments, preopened directories,
/// network or inherited stdio. Stdout and stderr go to bounded in-memory pipes.
fn sealed_wasi() -> (WasiCtx, Stdio) {
    let stdio = Stdio {
        stdout: MemoryOutputPipe::new(STDIO_CAPTURE),
        stderr: MemoryOutputPipe::new(STDIO_CAPTURE),
    };
    let ctx = WasiCtxBuilder::new()
        .stdout(stdio.stdout.clone())
        .stderr(stdio.stderr.clone())
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build();
    (ctx, stdio)
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        // Built on the guest's first WASI call: most reconcilers never make one, and a
        // context costs about as much as the rest of instantiation.
        let (ctx, _) = self.wasi.get_or_insert_with(sealed_wasi);
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

    const MIB: usize = 1 << 20;

    #[test]
    fn a_calls_memories_and_tables_are_capped_together_not_each() {
        let mut limiter = Limiter {
            max_bytes: 64 * MIB,
            used: 0,
            hit: false,
            budget: None,
            admission: None,
        };
        // Two memories of 30 MiB fit; a third does not, though each alone would.
        assert!(limiter.memory_growing(0, 30 * MIB, None).expect("first"));
        assert!(limiter.memory_growing(0, 30 * MIB, None).expect("second"));
        let third = limiter.memory_growing(0, 30 * MIB, None);
        assert!(third.is_err() && limiter.hit, "{third:?}");
        // Tables count too: 16 bytes an element, so 5 MiB worth is past the cap now.
        limiter.hit = false;
        let table = limiter.table_growing(0, 5 * MIB / TABLE_ELEMENT_BYTES, None);
        assert!(table.is_err() && limiter.hit, "{table:?}");
        assert!(limiter.table_growing(0, 1024, None).expect("a small table"));
        assert_eq!(limiter.used, 60 * MIB + 1024 * TABLE_ELEMENT_BYTES);
        // Past the element cap a table is refused outright, whatever the bytes.
        assert!(
            !limiter
                .table_growing(0, TABLE_ELEMENTS_MAX + 1, None)
                .expect("refused")
        );
    }
}
