//! Owns the control plane's processes and makes sure none of them outlives the test binary.
//!
//! # Why a watchdog process and not `PR_SET_PDEATHSIG`
//!
//! The parent-death signal fires when the *thread* that spawned a child exits, not the
//! process. Test harnesses run every test on its own thread, and each `#[tokio::test]` has
//! its own runtime threads, so a child spawned from one of them would be killed when that
//! test ends. Setting it also needs `unsafe` (`pre_exec`), which this workspace denies.
//!
//! Instead a tiny `sh` watchdog is started first, with a pipe on its stdin whose write end
//! only this process holds (Rust opens pipes close-on-exec, so no other child inherits
//! it). We write the pid of every process we start into that pipe. However this process
//! ends — normal exit, panic, `SIGKILL`, Ctrl-C — the kernel closes the write end, the
//! watchdog reads end-of-file, kills every pid it was given, waits for them to go and
//! removes the temporary directory. [`Supervisor`]'s `Drop` uses the same path, so there is
//! one way to stop, and it is the one that also covers a killed test binary.
//!
//! Every process is put in its own process group, so a Ctrl-C in a terminal reaches only
//! this process (which then stops the rest in order) and cannot kill the watchdog before
//! it has cleaned up.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};

/// Kills the given pids with SIGKILL once stdin closes, waits until they are gone, then
/// removes `$1`. SIGKILL, not SIGTERM: the data is thrown away anyway, and a SIGTERM'd
/// kube-apiserver whose etcd has already gone keeps retrying instead of exiting.
const WATCHDOG: &str = r#"
pids=""
while read -r pid; do pids="$pids $pid"; done
for p in $pids; do kill -KILL "$p" 2>/dev/null; done
for p in $pids; do
  n=0
  while kill -0 "$p" 2>/dev/null && [ "$n" -lt 100 ]; do sleep 0.05; n=$((n + 1)); done
done
rm -rf "$1"
"#;

/// Failures to start or watch a process.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The `sh` watchdog could not be started.
    #[error("could not start the watchdog shell (`sh`)")]
    Watchdog(#[source] io::Error),
    /// A log file in the temporary directory could not be created.
    #[error("could not create log file {path}")]
    Log {
        /// The log file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// The program could not be executed.
    #[error("could not run {program}")]
    Spawn {
        /// The program that was run.
        program: PathBuf,
        /// What went wrong.
        #[source]
        source: io::Error,
    },
    /// A process exited while it should have been serving.
    #[error("{name} exited ({status}); the end of {log}:\n{tail}")]
    Exited {
        /// Short name of the process (`etcd`, `kube-apiserver`).
        name: &'static str,
        /// How it exited.
        status: ExitStatus,
        /// Its log file.
        log: PathBuf,
        /// The last lines of that log.
        tail: String,
    },
}

/// One started process and the file its output goes to.
struct Process {
    name: &'static str,
    child: Child,
    log: PathBuf,
    /// How it was started, to start it again.
    program: std::ffi::OsString,
    args: Vec<std::ffi::OsString>,
    envs: Vec<(std::ffi::OsString, Option<std::ffi::OsString>)>,
}

/// Starts processes, watches them, and stops them (and removes `dir`) when dropped or when
/// this process dies, whichever comes first.
pub(crate) struct Supervisor {
    dir: PathBuf,
    /// Closing this tells the watchdog to clean up.
    watchdog_stdin: Option<ChildStdin>,
    watchdog: Child,
    processes: Vec<Process>,
}

impl Supervisor {
    /// Starts the watchdog that will remove `dir` and everything started through
    /// [`Supervisor::spawn`].
    pub(crate) fn new(dir: &Path) -> Result<Self, Error> {
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("inrun-testenv-watchdog")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(Error::Watchdog)?;
        let watchdog_stdin = watchdog.stdin.take();
        Ok(Self {
            dir: dir.to_owned(),
            watchdog_stdin,
            watchdog,
            processes: Vec::new(),
        })
    }

    /// Starts `command` with its stdout and stderr in `<dir>/<name>.log` and hands its pid
    /// to the watchdog.
    pub(crate) fn spawn(&mut self, name: &'static str, command: Command) -> Result<(), Error> {
        let log = self.dir.join(format!("{name}.log"));
        let out = File::create(&log).map_err(|source| Error::Log {
            path: log.clone(),
            source,
        })?;
        self.start(name, command, log, out)
    }

    /// Kills the process `name`, waits `down`, and starts it again as it was first started
    /// (its log continues).
    pub(crate) fn restart(&mut self, name: &str, down: std::time::Duration) -> Result<(), Error> {
        let Some(at) = self.processes.iter().position(|p| p.name == name) else {
            return Ok(());
        };
        let mut old = self.processes.remove(at);
        let _ = old.child.kill();
        let _ = old.child.wait();
        std::thread::sleep(down);
        let out = File::options()
            .append(true)
            .open(&old.log)
            .map_err(|source| Error::Log {
                path: old.log.clone(),
                source,
            })?;
        let mut command = Command::new(&old.program);
        command.args(&old.args);
        for (key, value) in &old.envs {
            match value {
                Some(v) => command.env(key, v),
                None => command.env_remove(key),
            };
        }
        self.start(old.name, command, old.log, out)
    }

    fn start(
        &mut self,
        name: &'static str,
        mut command: Command,
        log: PathBuf,
        out: File,
    ) -> Result<(), Error> {
        let program = command.get_program().to_owned();
        let args = command.get_args().map(ToOwned::to_owned).collect();
        let envs = command
            .get_envs()
            .map(|(k, v)| (k.to_owned(), v.map(ToOwned::to_owned)))
            .collect();
        let err = out.try_clone().map_err(|source| Error::Log {
            path: log.clone(),
            source,
        })?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(|source| Error::Spawn {
                program: PathBuf::from(command.get_program()),
                source,
            })?;
        if let Some(stdin) = self.watchdog_stdin.as_mut() {
            // If the watchdog is gone there is nobody to tell; `Drop` still kills the child.
            let _ = writeln!(stdin, "{}", child.id());
        }
        self.processes.push(Process {
            name,
            child,
            log,
            program,
            args,
            envs,
        });
        Ok(())
    }

    /// Fails if any started process has exited, with the end of its log.
    pub(crate) fn check_running(&mut self) -> Result<(), Error> {
        for process in &mut self.processes {
            if let Ok(Some(status)) = process.child.try_wait() {
                return Err(Error::Exited {
                    name: process.name,
                    status,
                    log: process.log.clone(),
                    tail: log_tail(&process.log, TAIL_LINES),
                });
            }
        }
        Ok(())
    }

    /// The log files of the started processes, with their names.
    pub(crate) fn logs(&self) -> Vec<(&'static str, PathBuf)> {
        self.processes
            .iter()
            .map(|p| (p.name, p.log.clone()))
            .collect()
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // End of file: the watchdog kills the processes and removes the directory.
        drop(self.watchdog_stdin.take());
        for process in &mut self.processes {
            // Killing here too does not depend on the watchdog being alive; reaping keeps
            // the watchdog from waiting on zombies that never go away.
            let _ = process.child.kill();
            let _ = process.child.wait();
        }
        let _ = self.watchdog.wait();
    }
}

/// How many log lines [`log_tail`] shows by default.
pub(crate) const TAIL_LINES: usize = 40;

/// The last `lines` lines of a log file (at most its last 64 KiB), or a note saying why
/// it could not be read.
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let read = || -> io::Result<String> {
        let mut file = File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(err) => format!("(could not read {}: {err})", path.display()),
    }
}

/// The end of each log, under a header naming the process and the file.
pub(crate) fn format_tails(logs: &[(&'static str, PathBuf)]) -> String {
    let mut out = String::new();
    for (name, path) in logs {
        out.push_str(&format!(
            "\n----- last {TAIL_LINES} lines of {name} ({}) -----\n{}",
            path.display(),
            log_tail(path, TAIL_LINES)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_only_the_last_lines() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let log = dir.path().join("x.log");
        std::fs::write(&log, "one\ntwo\nthree\n").expect("writing the log");
        assert_eq!(log_tail(&log, 2), "two\nthree");
        assert!(log_tail(&dir.path().join("missing.log"), 2).starts_with("(could not read"));
    }

    #[test]
    fn dropping_the_supervisor_kills_its_processes_and_removes_the_directory() {
        let dir = tempfile::tempdir().expect("a temp dir").keep();
        let mut supervisor = Supervisor::new(&dir).expect("the watchdog starts");
        let mut sleep = Command::new("sleep");
        sleep.arg("600");
        supervisor.spawn("sleep", sleep).expect("sleep starts");
        let pid = supervisor.processes[0].child.id();
        supervisor.check_running().expect("sleep is still running");

        drop(supervisor);
        assert!(!dir.exists(), "{} should be removed", dir.display());
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} should be gone"
        );
    }

    #[test]
    fn a_process_that_exits_is_reported_with_its_log() {
        let dir = tempfile::tempdir().expect("a temp dir").keep();
        let mut supervisor = Supervisor::new(&dir).expect("the watchdog starts");
        let mut failing = Command::new("sh");
        failing.args(["-c", "echo bind: address already in use; exit 3"]);
        supervisor.spawn("failing", failing).expect("sh starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let exited = loop {
            if let Err(err) = supervisor.check_running() {
                break err;
            }
            assert!(std::time::Instant::now() < deadline, "sh did not exit");
            std::thread::yield_now();
        };
        match exited {
            Error::Exited { name, tail, .. } => {
                assert_eq!(name, "failing");
                assert_eq!(tail, "bind: address already in use");
            }
            other => panic!("expected Exited, got {other}"),
        }
    }
}
