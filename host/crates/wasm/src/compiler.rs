//! Compiles in a child process, so that a plugin's compile is bounded like its calls: it
//! is stopped at a time limit, cannot take more memory than its limit (the kernel refuses
//! the child's allocations past it, and the child is the first the OOM killer picks), and
//! whatever a crafted module does to the compiler, the host keeps serving.
//!
//! The child is the host's own program run as `<program> <COMPILE_COMMAND> <config>`: it
//! reads the module on standard input, builds an engine of the same [`CompileConfig`] as
//! the host's (checked by the engines' compatibility key) and writes the compiled
//! component on standard output, or why not on standard error.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::config::{CompileConfig, PoolTuning, wasmtime_engine};

/// The subcommand the host's program runs a compile under (`inrun __compile-plugin`).
pub const COMPILE_COMMAND: &str = "__compile-plugin";

/// How compiles run out of process.
#[derive(Debug, Clone)]
pub struct Compiler {
    /// The program to run: the host's own (`std::env::current_exe()`).
    pub program: PathBuf,
    /// How long one compile may take; past it the child is killed and the load fails.
    pub timeout: Duration,
    /// The most memory one compile may allocate (`RLIMIT_DATA` of the child).
    pub memory_bytes: u64,
}

/// Why a compile in a child process failed.
#[derive(Debug, thiserror::Error)]
pub enum CompileFailure {
    /// The module is not a valid component (the compiler's own message).
    #[error("{0}")]
    Invalid(String),
    /// The compile ran past its time limit and was stopped.
    #[error("the compile took longer than the limit of {}s and was stopped", .0.as_secs_f64())]
    Time(Duration),
    /// The compile needed more memory than its limit.
    #[error("the compile needed more than its memory limit of {} MiB and was stopped", .0 >> 20)]
    Memory(u64),
    /// The compiled form came out larger than a module of its size may compile to.
    #[error(
        "the compiled form of this {} KiB module passed its limit of {} MiB (compiled code and memory images may take at most {COMPILED_PER_MODULE_BYTE} times the module and {} MiB more) and was refused",
        .module >> 10, .max >> 20, COMPILED_FLOOR >> 20
    )]
    TooLarge {
        /// The module's bytes.
        module: usize,
        /// The most its compiled form may take, in bytes.
        max: usize,
    },
    /// The child ended without an answer (its exit status and what it wrote to stderr).
    #[error("the compiler process failed: {0}")]
    Process(String),
    /// The child could not be started.
    #[error("the compiler process failed: running {}", program.display())]
    Spawn {
        /// The program that was run.
        program: PathBuf,
        /// Why it could not be.
        #[source]
        source: std::io::Error,
    },
    /// Talking to the child failed: its standard input, or waiting for it.
    #[error("the compiler process failed")]
    Io(#[source] std::io::Error),
    /// The compile settings could not be written for the child.
    #[error("the compiler process failed")]
    Settings(#[source] serde_json::Error),
}

impl Compiler {
    /// The default memory of one compile: three quarters of the container's memory limit
    /// (384 MiB of 512 MiB: an 18 MB Python or JavaScript guest needs about 400 MB of
    /// data to compile on two threads), 1 GiB without a limit. The child is the first the
    /// kernel kills when the container runs out, so even a compile that fits its own
    /// limit cannot take the host down with it.
    pub fn default_memory() -> u64 {
        crate::budget::container_memory_limit().map_or(1 << 30, |limit| limit as u64 / 4 * 3)
    }
}

/// A compiled component may take at most this many times its module's bytes, plus
/// [`COMPILED_FLOOR`]: Cranelift's code of the guests built here takes 1.5 to 3 times
/// their code, and a memory image at most twice the data it is made from (or
/// [`crate::config::DENSE_IMAGE_BYTES`] whatever the data), so only a module crafted to
/// blow up (sparse data segments far apart, one image per memory) comes near it.
pub const COMPILED_PER_MODULE_BYTE: usize = 4;
/// See [`COMPILED_PER_MODULE_BYTE`].
pub const COMPILED_FLOOR: usize = 16 << 20;

/// The most the compiled form of a module of `module` bytes may take.
pub fn compiled_max(module: usize) -> usize {
    module
        .saturating_mul(COMPILED_PER_MODULE_BYTE)
        .saturating_add(COMPILED_FLOOR)
}

/// What the child's standard error says when an allocation failed past its limit.
const OUT_OF_MEMORY: &str = "memory allocation of";

impl Compiler {
    /// Compiles `bytes` in a child process: the serialized component, for
    /// `Component::deserialize` of an engine whose compatibility key is `engine_key`. The
    /// child's output is read only up to [`compiled_max`] of the module: past it the child
    /// is stopped and nothing more is read.
    ///
    /// # Errors
    /// [`CompileFailure`]: an invalid module, a limit passed, or a child that failed.
    pub fn compile(
        &self,
        config: &CompileConfig,
        engine_key: &str,
        bytes: &[u8],
    ) -> Result<Vec<u8>, CompileFailure> {
        let max = compiled_max(bytes.len());
        let mut child = self.spawn(config, engine_key)?;
        // Feed and drain on threads of their own: a child blocked on a full pipe must not
        // block the wait below.
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| CompileFailure::Io(std::io::ErrorKind::BrokenPipe.into()))?;
        let input = bytes.to_vec();
        let feeder = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let too_large = Arc::new(AtomicBool::new(false));
        let stdout = drain(child.stdout.take(), max, Some(too_large.clone()));
        let stderr = drain(child.stderr.take(), STDERR_MAX, None);
        let status = self.wait(&mut child, &too_large)?;
        let _ = feeder.join();
        let out = stdout.join().unwrap_or_default();
        let err = stderr.join().unwrap_or_default();
        if too_large.load(Ordering::Acquire) {
            return Err(CompileFailure::TooLarge {
                module: bytes.len(),
                max,
            });
        }
        let Some(status) = status else {
            return Err(CompileFailure::Time(self.timeout));
        };
        self.verdict(status, out, &err)
    }

    /// The child, told the compile settings, the engine's key and its memory limit, with
    /// piped standard streams and no environment.
    fn spawn(&self, config: &CompileConfig, engine_key: &str) -> Result<Child, CompileFailure> {
        let config_arg = serde_json::to_string(config).map_err(CompileFailure::Settings)?;
        Command::new(&self.program)
            .arg(COMPILE_COMMAND)
            .arg(config_arg)
            .arg(engine_key)
            .arg(self.memory_bytes.to_string())
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| CompileFailure::Spawn {
                program: self.program.clone(),
                source,
            })
    }

    /// The child's exit status, or `None` once it ran past the time limit or wrote more
    /// than its output may take (`too_large`): then it is killed.
    fn wait(
        &self,
        child: &mut Child,
        too_large: &AtomicBool,
    ) -> Result<Option<ExitStatus>, CompileFailure> {
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(CompileFailure::Io)? {
                return Ok(Some(status));
            }
            if started.elapsed() >= self.timeout || too_large.load(Ordering::Acquire) {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(None);
            }
            // Polling a child's exit: there is no portable wait with a timeout in std.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What a finished child's exit status and standard error say: the compiled
    /// component (`out`), or why there is none.
    fn verdict(
        &self,
        status: ExitStatus,
        out: Vec<u8>,
        err: &[u8],
    ) -> Result<Vec<u8>, CompileFailure> {
        let err = String::from_utf8_lossy(err).trim().to_string();
        if status.success() {
            return Ok(out);
        }
        if err.contains(OUT_OF_MEMORY) || status.code() == Some(NO_MEMORY) || killed(&status) {
            return Err(CompileFailure::Memory(self.memory_bytes));
        }
        match status.code() {
            Some(INVALID) => Err(CompileFailure::Invalid(err)),
            _ => Err(CompileFailure::Process(format!("{status}: {err}"))),
        }
    }
}

/// The most of the child's standard error read: its message is one line.
const STDERR_MAX: usize = 64 << 10;

/// Reads `pipe` to its end on a thread of its own, keeping at most `max` bytes. Past
/// them, with `over`, it is set, reading stops and what was read is dropped (the child is
/// then stopped); without, the rest is read and thrown away.
fn drain(
    pipe: Option<impl Read + Send + 'static>,
    max: usize,
    over: Option<Arc<AtomicBool>>,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let Some(mut pipe) = pipe else { return out };
        let limit = u64::try_from(max).unwrap_or(u64::MAX);
        let _ = (&mut pipe).take(limit).read_to_end(&mut out);
        let mut one = [0u8; 1];
        if matches!(pipe.read(&mut one), Ok(1)) {
            match over {
                Some(over) => {
                    over.store(true, Ordering::Release);
                    return Vec::new();
                }
                None => {
                    let _ = std::io::copy(&mut pipe, &mut std::io::sink());
                }
            }
        }
        out
    })
}

/// The child's exit code for a module that is not a valid component.
const INVALID: i32 = 3;
/// The child's exit code when its memory limit refused it what it asked for without
/// aborting (reading the module).
const NO_MEMORY: i32 = 4;

/// Killed by SIGKILL: not by us (a timeout returns before this), so by the kernel's OOM
/// killer, which picks the compile first ([`child_main`]).
fn killed(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

/// The child's side, run by the host's program for [`COMPILE_COMMAND`] with the rest of
/// its arguments: limits itself, compiles standard input, and writes the compiled
/// component to standard output. Returns the process's exit code.
pub fn child_main(args: &[String]) -> i32 {
    match child(args) {
        Ok(()) => 0,
        Err((code, message)) => {
            eprintln!("{message}");
            code
        }
    }
}

fn child(args: &[String]) -> Result<(), (i32, String)> {
    let usage = || {
        (
            2,
            format!("usage: {COMPILE_COMMAND} CONFIG ENGINE-KEY MEMORY-BYTES"),
        )
    };
    let [config, key, memory] = args else {
        return Err(usage());
    };
    let config: CompileConfig = serde_json::from_str(config).map_err(|_| usage())?;
    // Compiled code does not depend on the pool (`the_pool_does_not_change_…`): the child
    // reserves none.
    let config = CompileConfig {
        pooling: None,
        ..config
    };
    let memory: u64 = memory.parse().map_err(|_| usage())?;
    // The kernel picks this process first when memory runs out, never the host.
    let _ = std::fs::write("/proc/self/oom_score_adj", "1000");
    let limit = rustix::process::Rlimit {
        current: Some(memory),
        maximum: Some(memory),
    };
    rustix::process::setrlimit(rustix::process::Resource::Data, limit)
        .map_err(|e| (1, format!("limiting the compile's memory: {e}")))?;
    let engine =
        wasmtime_engine(&config, &PoolTuning::default()).map_err(|e| (1, format!("{e:#}")))?;
    if super::cache::engine_key(&engine) != *key {
        return Err((
            1,
            "the compiler's engine differs from the host's: is it the same program?".into(),
        ));
    }
    let mut bytes = Vec::new();
    std::io::stdin().read_to_end(&mut bytes).map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::OutOfMemory {
            NO_MEMORY
        } else {
            1
        };
        (code, format!("reading the module: {e}"))
    })?;
    let compiled = engine
        .precompile_component(&bytes)
        .map_err(|e| (INVALID, format!("{e:#}")))?;
    std::io::stdout()
        .write_all(&compiled)
        .and_then(|()| std::io::stdout().flush())
        .map_err(|e| (1, format!("writing the compiled component: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_childs_output_past_its_cap_is_dropped_and_told_and_its_errors_are_cut() {
        let over = Arc::new(AtomicBool::new(false));
        let out = drain(
            Some(std::io::Cursor::new(vec![7u8; 100])),
            50,
            Some(over.clone()),
        );
        assert!(out.join().expect("drained").is_empty());
        assert!(over.load(Ordering::Acquire), "told");
        let over = Arc::new(AtomicBool::new(false));
        let out = drain(
            Some(std::io::Cursor::new(vec![7u8; 50])),
            50,
            Some(over.clone()),
        );
        assert_eq!(
            out.join().expect("drained").len(),
            50,
            "at the cap is within it"
        );
        assert!(!over.load(Ordering::Acquire));
        // Standard error keeps its start and reads the rest away, so the child never
        // blocks on a full pipe.
        let err = drain(Some(std::io::Cursor::new(vec![1u8; 1000])), 10, None);
        assert_eq!(err.join().expect("drained"), vec![1u8; 10]);
        assert_eq!(compiled_max(1 << 20), (4 << 20) + (16 << 20));
    }

    #[test]
    fn a_child_without_the_pool_compiles_code_the_pooled_host_loads() {
        let config = |pooling| CompileConfig {
            pooling,
            max_memory_bytes: 1 << 30,
            threads: 1,
        };
        let key = |c| {
            crate::cache::engine_key(&wasmtime_engine(&c, &PoolTuning::default()).expect("engine"))
        };
        assert_eq!(key(config(Some(64))), key(config(None)));
    }
}
