//! `make bench`: N CRs to Ready on a real kube-apiserver, per reconciler kind, against a
//! plain kube-rs controller doing the same writes. Writes the "End to end" section of
//! BENCHMARKS.md.
//!
//! For each N (`INRUN_BENCH_CRS`, comma separated, default `100,1000`;
//! `100,1000,10000` gives the scaling curve) and each mode (`INRUN_BENCH_MODES`, default
//! `baseline,declarative,constructor,remote`; `python` adds the constructor written in
//! Python; `sharded` runs `INRUN_BENCH_REPLICAS` (default 3) `inrun run --sharding`
//! replicas; `remote-slow` and `sharded-remote` a remote reconciler answering after
//! `INRUN_BENCH_REMOTE_DELAY_MS`, behind one host and behind sharded replicas), in a
//! namespace and CRD group of its own:
//! N `Pair` CRs are created (16 at a time) before the controller starts; each must become
//! a ConfigMap and a headless Service in its namespace plus a status with
//! `observedGeneration` and `Ready=True`. Measured:
//!
//! - the time from spawning the controller process to every CR Ready (a LIST polled
//!   every 100 ms, or three times the last LIST's duration when that is longer);
//! - API writes per CR from the API server's own `apiserver_request_total` (POST, PUT,
//!   PATCH, APPLY, DELETE, DELETECOLLECTION on the CRs and their status, ConfigMaps,
//!   Services and Events), broken down by resource and verb;
//! - reconciles per CR (`controller_runtime_reconcile_total` from the process's /metrics);
//! - the process's CPU time (utime + stime) and peak RSS (VmHWM);
//! - a quiet window after Ready (`INRUN_BENCH_IDLE` seconds, default 10; at least three
//!   resync periods with `INRUN_BENCH_RESYNC`): writes, reconciles and CPU while nothing
//!   changes.
//!
//! The baseline is a kube-rs `Controller` in this same binary, run as a child process
//! (the binary re-executes itself with `INRUN_E2E_BASELINE` set), so its CPU and memory
//! are measured exactly like the host's. `INRUN_BENCH_RESYNC` (a duration such as `2s`)
//! writes `spec.runtime.resync` into the Blueprints and makes the baseline requeue every
//! CR that often; unset, neither does. `INRUN_BENCH_SECTION` names the BENCHMARKS.md
//! section written (default `e2e`), so a scaling run can keep its own.
//! `INRUN_BENCH_HOST_ENV` (`NAME=value` pairs, comma separated) adds to the environment of
//! `inrun run` only, e.g. a heap profiler's `LD_PRELOAD`. `INRUN_BENCH_RUNS` (default 1)
//! runs every mode that many times, the order reversed every other round; each row is then
//! the run with the median time to Ready, and its last column lists every run's time.

mod common;

use common::{plugin_dir, write_section};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use futures::TryStreamExt as _;
use inrun_testenv::{ControlPlane, install_crd};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

/// The CRs' kind; every mode has its own group.
const KIND: &str = "Pair";
/// The CRs' plural.
const PLURAL: &str = "pairs";
/// The CRs' version.
const VERSION: &str = "v1alpha1";
/// Reconciles at once: the host's `runtime.workers` and the baseline's concurrency.
const WORKERS: u16 = 16;
/// Client tasks creating CRs at once.
const CREATORS: usize = 16;
/// The shortest pause between two LISTs while waiting for Ready.
const POLL: Duration = Duration::from_millis(100);
/// How long a stopped controller may take to exit before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Set (to a JSON [`baseline::Spec`]) when this binary runs as the baseline controller.
const BASELINE_ENV: &str = "INRUN_E2E_BASELINE";
/// The API server verbs that write.
const WRITE_VERBS: &[&str] = &[
    "POST",
    "PUT",
    "PATCH",
    "APPLY",
    "DELETE",
    "DELETECOLLECTION",
];

fn main() -> Result<()> {
    if let Ok(spec) = std::env::var(BASELINE_ENV) {
        return baseline::main(&spec);
    }
    let settings = Settings::from_env()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the bench's runtime")?;
    let (rows, cluster) = runtime.block_on(run_all(&settings))?;
    let section = report(&settings, &cluster, &rows);
    println!("{section}");
    // A scaling run can keep its own section beside the default one.
    write_section(&env_or("INRUN_BENCH_SECTION", "e2e"), &section);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Settings and modes

/// What to run, from the environment.
struct Settings {
    /// Numbers of CRs, one run of every mode each.
    counts: Vec<usize>,
    /// The modes, in the order they run.
    modes: Vec<Mode>,
    /// `spec.runtime.resync` as written, and its length; `None` leaves the field out.
    resync: Option<(String, Duration)>,
    /// The idle window after Ready.
    idle: Duration,
    /// Runs of every mode at every N.
    runs: usize,
}

impl Settings {
    fn from_env() -> Result<Settings> {
        let counts = env_or("INRUN_BENCH_CRS", "100,1000")
            .split(',')
            .map(|n| {
                n.trim()
                    .parse::<usize>()
                    .context("INRUN_BENCH_CRS: a number")
            })
            .collect::<Result<Vec<_>>>()?;
        ensure!(
            counts.iter().all(|&n| n > 0),
            "INRUN_BENCH_CRS: counts above 0"
        );
        let modes = env_or(
            "INRUN_BENCH_MODES",
            "baseline,declarative,constructor,remote",
        )
        .split(',')
        .map(|m| Mode::parse(m.trim()))
        .collect::<Result<Vec<_>>>()?;
        let resync = match std::env::var("INRUN_BENCH_RESYNC") {
            Ok(text) if !text.is_empty() => {
                let length = parse_duration(&text).context("INRUN_BENCH_RESYNC")?;
                Some((text, length))
            }
            _ => None,
        };
        let idle = Duration::from_secs(
            env_or("INRUN_BENCH_IDLE", "10")
                .parse()
                .context("INRUN_BENCH_IDLE: whole seconds")?,
        );
        let runs = env_or("INRUN_BENCH_RUNS", "1")
            .parse::<usize>()
            .context("INRUN_BENCH_RUNS: a number")?;
        ensure!(runs > 0, "INRUN_BENCH_RUNS: at least 1");
        Ok(Settings {
            counts,
            modes,
            resync,
            idle,
            runs,
        })
    }

    /// The command that reproduces this run: `make bench`'s, plus the settings given.
    fn command() -> String {
        let mut command = "INRUN_CONTROLPLANE_BIN=\"$(tests/controlplane/build.sh)\"".to_owned();
        for name in SETTINGS {
            if let Ok(value) = std::env::var(name).map(|v| v.trim().to_owned())
                && !value.is_empty()
            {
                let _ = write!(command, " {name}={value}");
            }
        }
        command.push_str(" cargo bench -p inrun --bench e2e");
        if cfg!(debug_assertions) {
            command.push_str(" --profile dev");
        }
        command
    }

    /// The quiet window after Ready: the idle time, and at least three resync periods.
    fn window(&self) -> Duration {
        match &self.resync {
            Some((_, period)) => self.idle.max(*period * 3),
            None => self.idle,
        }
    }
}

/// The environment variables [`Settings::from_env`] reads.
const SETTINGS: &[&str] = &[
    "INRUN_BENCH_REPLICAS",
    "INRUN_BENCH_REMOTE_DELAY_MS",
    "INRUN_BENCH_CRS",
    "INRUN_BENCH_MODES",
    "INRUN_BENCH_RESYNC",
    "INRUN_BENCH_IDLE",
    "INRUN_BENCH_RUNS",
    "INRUN_BENCH_SECTION",
    "INRUN_BENCH_HOST_ENV",
];

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// A whole number with `ms`, `s`, `m` or `h`, as Blueprints write durations.
fn parse_duration(text: &str) -> Result<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let n: u64 = number
        .parse()
        .with_context(|| format!("{text:?}: a whole number and ms, s, m or h"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => bail!("{text:?}: the unit must be ms, s, m or h"),
    })
}

/// Who reconciles the CRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A hand-written kube-rs controller.
    Baseline,
    /// `inrun run` with `onReconcile` templates.
    Declarative,
    /// `inrun run` with the `pair` Wasm constructor.
    Constructor,
    /// `inrun run` with a remote reconciler served by this process.
    Remote,
    /// `inrun run` with the same constructor written in Python (componentize-py's 18 MB
    /// component): its cost in memory and time beside the Rust one. Not in the defaults.
    Python,
    /// `inrun run --sharding` replicas (`INRUN_BENCH_REPLICAS`, default 3) sharing the
    /// CRs, with `onReconcile` templates. Not in the defaults.
    Sharded,
    /// A remote reconciler behind one `inrun run` (`remote-slow`) or sharded replicas
    /// (`sharded-remote`), the endpoint answering after `INRUN_BENCH_REMOTE_DELAY_MS`
    /// (default 100): capacity when reconciles wait. Not in the defaults.
    RemoteSlow,
    ShardedRemote,
}

impl Mode {
    fn parse(name: &str) -> Result<Mode> {
        Ok(match name {
            "baseline" => Mode::Baseline,
            "declarative" => Mode::Declarative,
            "constructor" => Mode::Constructor,
            "remote" => Mode::Remote,
            "python" => Mode::Python,
            "sharded" => Mode::Sharded,
            "remote-slow" => Mode::RemoteSlow,
            "sharded-remote" => Mode::ShardedRemote,
            _ => bail!(
                "INRUN_BENCH_MODES: unknown mode {name:?} (baseline, declarative, constructor, remote, python, sharded, remote-slow, sharded-remote)"
            ),
        })
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Baseline => "baseline",
            Mode::Declarative => "declarative",
            Mode::Constructor => "constructor",
            Mode::Remote => "remote",
            Mode::Python => "python",
            Mode::Sharded => "sharded",
            Mode::RemoteSlow => "remote-slow",
            Mode::ShardedRemote => "sharded-remote",
        }
    }

    /// Whether `inrun plan` is timed after the mode's CRs are Ready (one host, a
    /// reconciler a plan renders).
    fn plans(self) -> bool {
        matches!(
            self,
            Mode::Declarative | Mode::Constructor | Mode::Python | Mode::Remote
        )
    }

    /// How many `inrun run` processes serve the CRs.
    fn replicas(self) -> usize {
        match self {
            Mode::Sharded | Mode::ShardedRemote => env_or("INRUN_BENCH_REPLICAS", "3")
                .parse()
                .unwrap_or(3)
                .max(1),
            _ => 1,
        }
    }

    /// How long the remote endpoint takes to answer.
    fn remote_delay(self) -> Duration {
        match self {
            Mode::RemoteSlow | Mode::ShardedRemote => Duration::from_millis(
                env_or("INRUN_BENCH_REMOTE_DELAY_MS", "100")
                    .parse()
                    .unwrap_or(100),
            ),
            _ => Duration::ZERO,
        }
    }
}

/// The compiled `pair` constructor.
fn pair_plugin() -> PathBuf {
    plugin_dir().join("inrun_bench_pair.wasm")
}

/// The `pair` constructor in Python (`plugins/python/pair`).
fn python_pair_plugin() -> PathBuf {
    plugin_dir().join("inrun_bench_pair_python.wasm")
}

/// The `Pair` resource of `group`.
fn pair_resource(group: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: VERSION.to_owned(),
        api_version: format!("{group}/{VERSION}"),
        kind: KIND.to_owned(),
        plural: PLURAL.to_owned(),
    }
}

// ---------------------------------------------------------------------------------------
// One run of one mode

/// What one mode measured at one N.
struct Row {
    mode: Mode,
    crs: usize,
    /// How long until every CR was Ready, or how far it got before the deadline.
    ready: Readiness,
    /// API writes from controller start to Ready (or the deadline).
    writes: Counts,
    /// Reconciles from controller start to Ready.
    reconciles: f64,
    /// The controller's CPU time from its start to Ready.
    cpu: Duration,
    /// The controller's peak resident memory, in KiB.
    peak_rss_kib: u64,
    /// The window after Ready; none when the CRs never got Ready.
    quiet: Option<Quiet>,
    /// What went wrong beside the numbers (a controller that had to be killed).
    notes: Vec<String>,
    /// `inrun plan` over the mode's CRs once they were Ready, the host stopped.
    plan: Option<PlanCost>,
    /// (declarative) a template change reaching every CR, with the host running: at once,
    /// then rolled out.
    change: Option<ChangeCost>,
}

/// How a template change reaches every CR of a mode: the time from the Blueprint's write
/// until every CR's `status.reconciledBy` names the new version and it is Ready, and the
/// API writes meanwhile.
struct ChangeCost {
    /// The change with no `rollout`: every CR at once.
    at_once: (Duration, Counts),
    /// The next change rolled out (`steps: 10 %, 50 % (2 s each), 100 %`).
    rolled: (Duration, Counts),
}

/// How long `inrun plan` took over every CR of a mode: each CR rendered by both versions,
/// its children read by one LIST per kind.
struct PlanCost {
    /// The same Blueprint as running (`--crd` names the CRD): nothing changes, no dry run.
    unchanged: Duration,
    /// (declarative) a template change that moves every CR's ConfigMap: each dry-run
    /// applied.
    changed: Option<Duration>,
}

/// The end of the wait for Ready.
enum Readiness {
    /// Every CR was Ready after this long.
    Ready(Duration),
    /// Only `ready` CRs were Ready when the deadline passed.
    TimedOut { ready: usize, after: Duration },
}

/// What happened in the quiet window after Ready.
struct Quiet {
    length: Duration,
    writes: Counts,
    reconciles: f64,
    cpu: Duration,
}

/// Facts about the cluster for the report's header.
struct Cluster {
    version: String,
}

async fn run_all(settings: &Settings) -> Result<(Vec<Row>, Cluster)> {
    if settings.modes.contains(&Mode::Constructor) {
        ensure!(
            pair_plugin().exists(),
            "{} is missing: build it with `make plugins-rust`",
            pair_plugin().display()
        );
    }
    if settings.modes.contains(&Mode::Python) {
        ensure!(
            python_pair_plugin().exists(),
            "{} is missing: build it with `make plugins-python`",
            python_pair_plugin().display()
        );
    }
    let mut version = String::new();
    let mut rows = Vec::new();
    for &crs in &settings.counts {
        for round in 0..settings.runs {
            // Every other round in reverse, so no mode always runs first or last.
            let mut order = settings.modes.clone();
            if round % 2 == 1 {
                order.reverse();
            }
            for mode in order {
                eprintln!(
                    "e2e: {} with {crs} CRs (run {} of {})",
                    mode.name(),
                    round + 1,
                    settings.runs
                );
                // A fresh API server and etcd for every run, so no run pays for the objects
                // an earlier one left in the store, and run order cannot favour a mode.
                let cp = ControlPlane::start().context("starting a control plane")?;
                version = cp
                    .client()
                    .apiserver_version()
                    .await
                    .context("reading the API server's version")?
                    .git_version;
                let row = run_mode(&cp, settings, mode, crs)
                    .await
                    .with_context(|| format!("{} with {crs} CRs", mode.name()))?;
                eprintln!("e2e: {}", row_line(&row, None, None));
                rows.push(row);
            }
        }
    }
    Ok((rows, Cluster { version }))
}

/// One mode at one N: prepares its stage, then measures its controller on it.
async fn run_mode(cp: &ControlPlane, settings: &Settings, mode: Mode, crs: usize) -> Result<Row> {
    let stage = Stage::prepare(cp, settings, mode, crs).await?;
    let mut row = measure(cp, settings, &stage).await;
    if let Ok(row) = &mut row
        && mode.plans()
        && matches!(row.ready, Readiness::Ready(_))
    {
        row.plan = Some(plan_cost(cp, &stage).await?);
    }
    if let Some(server) = stage.remote {
        server.stop();
    }
    row
}

/// Everything a mode needs before its controller starts: a namespace and CRD group of
/// its own, the CRD installed, the N CRs created, and its Blueprint (the baseline's only
/// serves to generate the same CRD).
struct Stage {
    mode: Mode,
    crs: usize,
    namespace: String,
    group: String,
    /// The CRs of this mode.
    api: Api<DynamicObject>,
    /// The controllers' health (metrics) ports, one a replica.
    ports: Vec<u16>,
    /// Holds the Blueprint and the controller's log.
    dir: tempfile::TempDir,
    blueprint: PathBuf,
    /// The remote reconciler, in remote mode.
    remote: Option<remote::Server>,
}

impl Stage {
    async fn prepare(
        cp: &ControlPlane,
        settings: &Settings,
        mode: Mode,
        crs: usize,
    ) -> Result<Stage> {
        /// Runs so far: a repeated mode still gets a group of its own.
        static RUNS: AtomicUsize = AtomicUsize::new(0);
        let client = cp.client();
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}-{crs}-{run}", mode.name());
        let namespace = cp
            .namespace(&format!("e2e-{tag}"))
            .await
            .context("creating the namespace")?;
        let group = format!("{tag}.e2e.bench.inrun.dev");
        let resource = pair_resource(&group);
        let dir = tempfile::tempdir().context("creating a temporary directory")?;
        let remote = match mode {
            Mode::Remote | Mode::RemoteSlow | Mode::ShardedRemote => {
                Some(remote::Server::start(mode.remote_delay()).await?)
            }
            _ => None,
        };
        let reconcile = match (mode, &remote) {
            (Mode::Constructor, _) => Reconcile::Constructor(pair_plugin()),
            (Mode::Python, _) => Reconcile::Constructor(python_pair_plugin()),
            (_, Some(server)) => Reconcile::Remote(server.url.clone()),
            _ => Reconcile::Templates,
        };
        let ports = (0..mode.replicas())
            .map(|_| free_port())
            .collect::<Result<Vec<_>>>()?;
        let blueprint = dir.path().join("blueprint.yaml");
        let sharding = (mode.replicas() > 1).then_some(namespace.as_str());
        let yaml = blueprint_yaml(
            &group,
            &reconcile,
            ports[0],
            settings.resync.as_ref(),
            sharding,
        );
        std::fs::write(&blueprint, yaml).context("writing the Blueprint")?;
        install_crds(&client, &blueprint).await?;
        if mode != Mode::Baseline {
            validate(&blueprint).await?;
        }
        let api = Api::namespaced_with(client, &namespace, &resource);
        create_crs(&api, &resource, crs).await?;
        Ok(Stage {
            mode,
            crs,
            namespace,
            group,
            api,
            ports,
            dir,
            blueprint,
            remote,
        })
    }

    /// Spawns the mode's controllers.
    fn spawn(&self, cp: &ControlPlane, settings: &Settings) -> Result<Replicas> {
        let dir = self.dir.path();
        match self.mode {
            Mode::Baseline => Ok(Replicas(vec![baseline::spawn(
                cp,
                &self.namespace,
                &self.group,
                self.ports[0],
                settings,
                dir,
            )?])),
            _ => self
                .ports
                .iter()
                .enumerate()
                .map(|(i, port)| {
                    // The mode whose change is timed reads its Blueprint within a second;
                    // the others check at the default interval, as before.
                    let reload = (self.mode == Mode::Declarative).then_some("1s");
                    Process::host(cp, &self.blueprint, *port, dir, i, reload)
                })
                .collect::<Result<Vec<_>>>()
                .map(Replicas),
        }
    }
}

/// Starts the controller, waits for Ready, watches the quiet window and stops the
/// controller.
async fn measure(cp: &ControlPlane, settings: &Settings, stage: &Stage) -> Result<Row> {
    let client = cp.client();
    let (crs, group) = (stage.crs, stage.group.as_str());
    let before = api_writes(&client, group).await?;
    let started = Instant::now();
    let mut process = stage.spawn(cp, settings)?;
    let deadline = Duration::from_secs(120)
        + Duration::from_millis(100) * u32::try_from(crs).unwrap_or(u32::MAX);
    let ready = wait_ready(&stage.api, crs, started, deadline, &mut process).await?;
    let at_ready = api_writes(&client, group).await?;
    let reconciles = process.reconciles().await?;
    let cpu = process.cpu()?;

    let quiet = match ready {
        Readiness::Ready(_) => {
            let length = settings.window();
            tokio::time::sleep(length).await;
            process.check_running()?;
            Some(Quiet {
                length,
                writes: api_writes(&client, group).await?.minus(&at_ready),
                reconciles: process.reconciles().await? - reconciles,
                cpu: process.cpu()?.saturating_sub(cpu),
            })
        }
        Readiness::TimedOut { .. } => None,
    };
    let running = std::fs::read_to_string(&stage.blueprint)?;
    let change = match (&ready, stage.mode) {
        (Readiness::Ready(_), Mode::Declarative) => {
            let cost = change_cost(&client, stage).await?;
            process.check_running()?;
            Some(cost)
        }
        _ => None,
    };
    let peak_rss_kib = process.peak_rss_kib()?;
    let mut notes = process.per_replica().await?;
    // Where the memory is now (anonymous heap, mapped files such as compiled plugins,
    // shared memory such as memory images): says what the peak is made of.
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", process.0[0].pid)) {
        let parts: Vec<&str> = status
            .lines()
            .filter(|l| {
                l.starts_with("RssAnon") || l.starts_with("RssFile") || l.starts_with("RssShmem")
            })
            .collect();
        eprintln!("e2e: {} × {crs}: {}", stage.mode.name(), parts.join(", "));
    }
    if let Readiness::TimedOut { .. } = ready {
        eprintln!(
            "e2e: not every CR got Ready; the end of the controller's log:\n{}",
            process.log_tail()
        );
    }
    notes.extend(process.stop().await?);
    // The Blueprint as the CRs were made: what `inrun plan` compares a change with.
    std::fs::write(&stage.blueprint, running)?;
    Ok(Row {
        mode: stage.mode,
        crs,
        ready,
        writes: at_ready.minus(&before),
        reconciles,
        cpu,
        peak_rss_kib,
        quiet,
        notes,
        plan: None,
        change,
    })
}

/// Times a template change reaching every CR of `stage` with its host running: once with
/// no `rollout` (every CR at once), then the next change rolled out in three steps.
async fn change_cost(client: &Client, stage: &Stage) -> Result<ChangeCost> {
    let running = std::fs::read_to_string(&stage.blueprint)?;
    let data = r#"data: { message: "{{ .spec.message }}" }"#;
    let with = |field: &str| {
        running.replace(
            data,
            &format!(r#"data: {{ message: "{{{{ .spec.message }}}}", change: "{field}" }}"#),
        )
    };
    let at_once = change_to(client, stage, &with("one")).await?;
    let rollout = "        rollout: { steps: [ { percent: 10, pause: 2s }, { percent: 50, pause: 2s }, { percent: 100 } ] }\n";
    let rolled_text = with("two").replace(
        "        managedResources:\n",
        &format!("{rollout}        managedResources:\n"),
    );
    let rolled = change_to(client, stage, &rolled_text).await?;
    Ok(ChangeCost { at_once, rolled })
}

/// Writes `text` as `stage`'s Blueprint, and waits until every CR was reconciled by the
/// new version and is Ready: how long that took, and the API writes meanwhile.
async fn change_to(client: &Client, stage: &Stage, text: &str) -> Result<(Duration, Counts)> {
    let by = |cr: &DynamicObject| {
        cr.data["status"]["reconciledBy"]
            .as_str()
            .map(str::to_owned)
    };
    let list = stage.api.list(&ListParams::default()).await?;
    let before: std::collections::BTreeSet<Option<String>> = list.items.iter().map(by).collect();
    let writes = api_writes(client, &stage.group).await?;
    let started = Instant::now();
    std::fs::write(&stage.blueprint, text)?;
    let deadline = Duration::from_secs(120)
        + Duration::from_millis(50) * u32::try_from(stage.crs).unwrap_or(u32::MAX);
    loop {
        let list = stage.api.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .all(|cr| !before.contains(&by(cr)) && is_ready(cr));
        if done && list.items.len() == stage.crs {
            break;
        }
        ensure!(
            started.elapsed() < deadline,
            "the change did not reach every CR within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = started.elapsed();
    Ok((took, api_writes(client, &stage.group).await?.minus(&writes)))
}

/// Times `inrun plan` over the stage's CRs (its host stopped): against the running
/// Blueprint itself, and for templates against one whose ConfigMap has a field more.
async fn plan_cost(cp: &ControlPlane, stage: &Stage) -> Result<PlanCost> {
    let crd = format!("{PLURAL}.{}", stage.group);
    let changed_blueprint = stage.dir.path().join("blueprint-changed.yaml");
    let running = std::fs::read_to_string(&stage.blueprint)?;
    let changed_text = running.replace(
        r#"data: { message: "{{ .spec.message }}" }"#,
        r#"data: { message: "{{ .spec.message }}", planned: "yes" }"#,
    );
    let changes = changed_text != running;
    std::fs::write(&changed_blueprint, changed_text)?;
    let run = |new: &Path, only: Option<&str>, want: i32| -> Result<Duration> {
        let mut command = std::process::Command::new(INRUN);
        command
            .arg("--cache-dir")
            .arg(cache_dir())
            .arg("plan")
            .arg("--current")
            .arg(&stage.blueprint)
            .arg("--blueprint")
            .arg(new)
            .args(["-n", &stage.namespace, "-o", "json", "--kubeconfig"])
            .arg(cp.kubeconfig());
        if let Some(crd) = only {
            command.args(["--crd", crd]);
        }
        let started = Instant::now();
        let out = command.output().context("running inrun plan")?;
        let took = started.elapsed();
        let report: Vec<Value> = serde_json::from_slice(&out.stdout)
            .with_context(|| format!("inrun plan: {}", String::from_utf8_lossy(&out.stderr)))?;
        ensure!(
            out.status.code() == Some(want) && report.len() == stage.crs,
            "inrun plan exited {:?} with {} CRs planned, expected {want} and {}",
            out.status.code(),
            report.len(),
            stage.crs
        );
        Ok(took)
    };
    let unchanged = run(&stage.blueprint, Some(&crd), 0)?;
    let changed = if changes {
        Some(run(&changed_blueprint, None, 2)?)
    } else {
        None
    };
    Ok(PlanCost { unchanged, changed })
}

/// A port nothing listens on now (bound to 127.0.0.1:0 and released).
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Creates `count` CRs named `pair-<i>`, [`CREATORS`] at a time.
async fn create_crs(api: &Api<DynamicObject>, resource: &ApiResource, count: usize) -> Result<()> {
    futures::stream::iter((0..count).map(Ok))
        .try_for_each_concurrent(CREATORS, |i| async move {
            let name = format!("pair-{i}");
            let object = DynamicObject::new(&name, resource)
                .data(json!({"spec": {"message": format!("hello from {name}")}}));
            api.create(&PostParams::default(), &object)
                .await
                .with_context(|| format!("creating CR {name}"))
                .map(drop)
        })
        .await
}

/// Whether the controller has written status for the CR's current generation, with
/// `Ready=True`.
fn is_ready(object: &DynamicObject) -> bool {
    let status = &object.data["status"];
    let current = object.metadata.generation.is_some()
        && status["observedGeneration"].as_i64() == object.metadata.generation;
    let ready = status["conditions"].as_array().is_some_and(|conditions| {
        conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    });
    current && ready
}

/// Lists the CRs until all `count` are Ready or `deadline` (from `started`) passes.
/// Lists are served from the API server's watch cache (resourceVersion 0), and spaced
/// [`POLL`] apart, or three times the last list's duration when that is longer, so
/// polling takes at most a quarter of the time.
async fn wait_ready(
    api: &Api<DynamicObject>,
    count: usize,
    started: Instant,
    deadline: Duration,
    process: &mut Replicas,
) -> Result<Readiness> {
    loop {
        let asked = Instant::now();
        let list = api
            .list(&ListParams::default().match_any())
            .await
            .context("listing the CRs")?;
        let ready = list.items.iter().filter(|o| is_ready(o)).count();
        if ready >= count {
            return Ok(Readiness::Ready(started.elapsed()));
        }
        process.check_running()?;
        if started.elapsed() >= deadline {
            return Ok(Readiness::TimedOut {
                ready,
                after: started.elapsed(),
            });
        }
        tokio::time::sleep(POLL.max(asked.elapsed() * 3)).await;
    }
}

// ---------------------------------------------------------------------------------------
// Blueprints and the host

/// How a Blueprint reconciles `Pair`.
enum Reconcile {
    /// `onReconcile` templates.
    Templates,
    /// The `pair` component at this path.
    Constructor(PathBuf),
    /// A remote reconciler at this URL.
    Remote(String),
}

/// The Blueprint for `group`: 16 workers, the health port on `port`, `resync` when given,
/// and a reconcile block that yields the same ConfigMap and Service as
/// `inrun_bench_pair::children`.
fn blueprint_yaml(
    group: &str,
    reconcile: &Reconcile,
    port: u16,
    resync: Option<&(String, Duration)>,
    sharding: Option<&str>,
) -> String {
    let mut resync = resync.map_or(String::new(), |(text, _)| format!("    resync: {text}\n"));
    if let Some(namespace) = sharding {
        let _ = write!(
            resync,
            "    sharding: {{ enabled: true, ring: bench }}\n    leaderElection: {{ namespace: {namespace} }}\n"
        );
    }
    let reconcile = match reconcile {
        Reconcile::Templates => TEMPLATES.to_owned(),
        Reconcile::Constructor(path) => format!(
            "        default: false\n        constructor: {{ location: {} }}\n",
            path.display()
        ),
        Reconcile::Remote(url) => {
            format!("        default: false\n        remote: {{ endpoint: \"{url}\" }}\n")
        }
    };
    format!(
        "apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{ name: e2e }}
spec:
  runtime:
    workers: {WORKERS}
    healthPort: {port}
{resync}  crds:
    - group: {group}
      version: {VERSION}
      kind: {KIND}
      reconcile:
{reconcile}        managedResources:
          - {{ apiVersion: v1, kind: ConfigMap }}
          - {{ apiVersion: v1, kind: Service }}
"
    )
}

/// `onReconcile` templates for the same objects as `inrun_bench_pair::children`.
const TEMPLATES: &str = r#"        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: { name: "{{ .metadata.name }}", namespace: "{{ .metadata.namespace }}" }
            data: { message: "{{ .spec.message }}" }
          - apiVersion: v1
            kind: Service
            metadata: { name: "{{ .metadata.name }}", namespace: "{{ .metadata.namespace }}" }
            spec:
              clusterIP: None
              selector: { app: "{{ .metadata.name }}" }
              ports: [ { name: http, port: 80, targetPort: 8080, protocol: TCP } ]
"#;

/// The `inrun` binary of this build.
const INRUN: &str = env!("CARGO_BIN_EXE_inrun");

/// The compile cache every host of the bench shares; `inrun validate` fills it first, so
/// no timed start compiles a plugin.
fn cache_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("e2e-wasm-cache")
}

/// Installs the Blueprint's CRDs (`inrun generate crds`) with server-side apply and waits
/// until they are served; the host then finds them in place.
async fn install_crds(client: &Client, blueprint: &Path) -> Result<()> {
    let out = tokio::process::Command::new(INRUN)
        .args(["generate", "crds", "--blueprint"])
        .arg(blueprint)
        .output()
        .await
        .context("running inrun generate crds")?;
    ensure!(
        out.status.success(),
        "inrun generate crds failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).context("inrun generate crds: not UTF-8")?;
    for document in serde_yaml_ng::Deserializer::from_str(&text) {
        let value: Value = serde::Deserialize::deserialize(document).context("CRD YAML")?;
        if value.is_null() {
            continue;
        }
        let crd: CustomResourceDefinition =
            serde_json::from_value(value).context("a CustomResourceDefinition")?;
        install_crd(client, &crd)
            .await
            .context("installing a CRD")?;
    }
    Ok(())
}

/// `inrun validate`: the Blueprint is sound, and its plugins are compiled into the cache.
async fn validate(blueprint: &Path) -> Result<()> {
    let out = tokio::process::Command::new(INRUN)
        .env("INRUN_CACHE_DIR", cache_dir())
        .args(["validate", "--blueprint"])
        .arg(blueprint)
        .output()
        .await
        .context("running inrun validate")?;
    ensure!(
        out.status.success(),
        "inrun validate refused the bench's Blueprint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A controller running as a child process, with its health port's /metrics.
struct Process {
    child: tokio::process::Child,
    pid: u32,
    metrics: String,
    log: PathBuf,
}

impl Process {
    /// Spawns `command` with its output going to `dir/<log>`.
    fn spawn(
        mut command: tokio::process::Command,
        port: u16,
        dir: &Path,
        log: &str,
    ) -> Result<Process> {
        let log = dir.join(log);
        let file = std::fs::File::create(&log).context("creating the controller's log")?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .context("spawning the controller")?;
        let pid = child.id().context("the controller has no process id")?;
        Ok(Process {
            child,
            pid,
            metrics: format!("http://127.0.0.1:{port}/metrics"),
            log,
        })
    }

    /// `inrun run` on `blueprint`, replica `replica`, its health port on
    /// 127.0.0.1:`port`.
    fn host(
        cp: &ControlPlane,
        blueprint: &Path,
        port: u16,
        dir: &Path,
        replica: usize,
        reload: Option<&str>,
    ) -> Result<Process> {
        let mut command = tokio::process::Command::new(INRUN);
        if let Ok(pairs) = std::env::var("INRUN_BENCH_HOST_ENV") {
            for pair in pairs.split(',').filter(|p| !p.trim().is_empty()) {
                let (name, value) = pair
                    .split_once('=')
                    .with_context(|| format!("INRUN_BENCH_HOST_ENV: {pair:?} is not NAME=value"))?;
                command.env(name.trim(), value);
            }
        }
        command
            .env("INRUN_CACHE_DIR", cache_dir())
            .args([
                "run",
                "--health-address",
                "127.0.0.1",
                "--console-port",
                "0",
                "--blueprint",
            ])
            .arg(blueprint)
            .arg("--kubeconfig")
            .arg(cp.kubeconfig())
            .args(["--context", "inrun"])
            .args(["--health-port", &port.to_string()])
            .args(["--identity", &format!("replica-{replica}")]);
        if let Some(every) = reload {
            command.args(["--reload-interval", every]);
        }
        Process::spawn(command, port, dir, &format!("controller-{replica}.log"))
    }

    /// An error carrying the end of the log when the process has exited.
    fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!(
                "the controller exited ({status}); the end of its log:\n{}",
                self.log_tail()
            ),
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// `controller_runtime_reconcile_total` summed over its labels.
    async fn reconciles(&mut self) -> Result<f64> {
        self.metric("controller_runtime_reconcile_total").await
    }

    /// The samples of `name` on its /metrics, summed.
    async fn metric(&mut self, name: &str) -> Result<f64> {
        self.check_running()?;
        let text = reqwest::get(&self.metrics)
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("GET {}", self.metrics))?
            .text()
            .await?;
        Ok(samples(&text, name).map(|s| s.value).sum())
    }

    /// User and system CPU time so far, from /proc/PID/stat.
    fn cpu(&self) -> Result<Duration> {
        let path = format!("/proc/{}/stat", self.pid);
        let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        // The command name (field 2) is in parentheses and may hold spaces; utime and
        // stime are fields 14 and 15, so the 12th and 13th after it.
        let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let ticks = |i: usize| -> Result<f64> {
            Ok(fields
                .get(i)
                .with_context(|| format!("{path}: too few fields"))?
                .parse::<f64>()?)
        };
        let seconds = (ticks(11)? + ticks(12)?) / clock_ticks();
        Ok(Duration::from_secs_f64(seconds))
    }

    /// The peak resident set (VmHWM), in KiB.
    fn peak_rss_kib(&self) -> Result<u64> {
        let path = format!("/proc/{}/status", self.pid);
        let status = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .with_context(|| format!("{path} has no VmHWM"))?;
        let kib = line.trim().trim_end_matches("kB").trim();
        kib.parse().with_context(|| format!("VmHWM {line:?}"))
    }

    /// SIGTERM, then waits for the exit; after [`STOP_GRACE`] SIGKILL, and the note
    /// saying so.
    async fn stop(mut self) -> Result<Option<String>> {
        self.check_running()?;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill -TERM")?;
        ensure!(status.success(), "kill -TERM {} failed", self.pid);
        if let Ok(exit) = tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            exit.context("waiting for the controller")?;
            return Ok(None);
        }
        self.child.kill().await?;
        eprintln!(
            "e2e: the controller did not stop within {STOP_GRACE:?} of SIGTERM; the end of its log:\n{}",
            self.log_tail()
        );
        Ok(Some(format!(
            "did not stop within {} s of SIGTERM (killed)",
            STOP_GRACE.as_secs()
        )))
    }
}

/// The processes of one mode: one, or the replicas of a ring.
struct Replicas(Vec<Process>);

impl Replicas {
    fn check_running(&mut self) -> Result<()> {
        self.0.iter_mut().try_for_each(Process::check_running)
    }

    fn log_tail(&self) -> String {
        self.0
            .iter()
            .map(Process::log_tail)
            .collect::<Vec<_>>()
            .join("\n---\n")
    }

    /// Reconciles, all replicas together.
    async fn reconciles(&mut self) -> Result<f64> {
        let mut sum = 0.0;
        for p in &mut self.0 {
            sum += p.reconciles().await?;
        }
        Ok(sum)
    }

    /// CPU time, all replicas together.
    fn cpu(&self) -> Result<Duration> {
        self.0.iter().map(Process::cpu).sum()
    }

    /// The largest replica's peak RSS, in KiB.
    fn peak_rss_kib(&self) -> Result<u64> {
        self.0
            .iter()
            .map(Process::peak_rss_kib)
            .try_fold(0, |max, rss| rss.map(|r| max.max(r)))
    }

    /// For a ring: each replica's peak RSS, reconciles and CR watch events, as a note.
    async fn per_replica(&mut self) -> Result<Vec<String>> {
        if self.0.len() < 2 {
            return Ok(Vec::new());
        }
        let (mut rss, mut reconciles, mut events) = (Vec::new(), Vec::new(), Vec::new());
        for p in &mut self.0 {
            rss.push(format!("{:.0}", p.peak_rss_kib()? as f64 / 1024.0));
            reconciles.push(format!("{:.0}", p.reconciles().await?));
            events.push(format!(
                "{:.0}",
                p.metric("inrun_cr_watch_events_total").await?
            ));
        }
        Ok(vec![format!(
            "{} replicas: peak RSS {} MiB, reconciles {}, CR watch events {}",
            self.0.len(),
            rss.join(" / "),
            reconciles.join(" / "),
            events.join(" / ")
        )])
    }

    /// Stops every replica; the notes of those that had to be killed.
    async fn stop(self) -> Result<Vec<String>> {
        let mut notes = Vec::new();
        for p in self.0 {
            notes.extend(p.stop().await?);
        }
        Ok(notes)
    }
}

/// Clock ticks per second for /proc times (`getconf CLK_TCK`; 100 on every Linux we know).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

// ---------------------------------------------------------------------------------------
// Metrics

/// One sample of a Prometheus text exposition.
struct Sample {
    labels: BTreeMap<String, String>,
    value: f64,
}

/// The samples of metric `name` in `text` (the Prometheus text format).
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = Sample> + 'a {
    text.lines().filter_map(move |line| {
        let rest = line.strip_prefix(name)?;
        let (labels, value) = match rest.strip_prefix('{') {
            Some(rest) => {
                let (labels, value) = rest.rsplit_once('}')?;
                (parse_labels(labels), value)
            }
            None if rest.starts_with(' ') => (BTreeMap::new(), rest),
            None => return None,
        };
        let value = value.split_whitespace().next()?.parse().ok()?;
        Some(Sample { labels, value })
    })
}

/// `a="x",b="y\"z"` as a map.
fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, other)) => value.push(other),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    labels
}

/// Write requests by resource and verb (a failed request's code is added to its verb).
#[derive(Default)]
struct Counts(BTreeMap<String, f64>);

impl Counts {
    fn total(&self) -> f64 {
        // A fold from +0.0: an empty `sum` of floats is -0.0, which would print as "-0".
        self.0.values().fold(0.0, |a, b| a + b)
    }

    /// The increase from `earlier`, without keys that did not change.
    fn minus(&self, earlier: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .map(|(k, v)| (k.clone(), v - earlier.0.get(k).copied().unwrap_or(0.0)))
                .filter(|(_, v)| *v != 0.0)
                .collect(),
        )
    }

    /// `CR APPLY 1.00 · CR/status APPLY 1.00 · ...`, per CR.
    fn per_cr(&self, crs: usize) -> String {
        if self.0.is_empty() {
            return "none".to_owned();
        }
        self.0
            .iter()
            .map(|(k, v)| format!("{k} {:.2}", v / crs as f64))
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// The API server's write requests so far for one mode's resources: its CRs in `group`
/// (with subresources), ConfigMaps, Services and Events.
async fn api_writes(client: &Client, group: &str) -> Result<Counts> {
    let request = axum::http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(request)
        .await
        .context("GET /metrics from the API server")?;
    let mut counts = Counts::default();
    for sample in samples(&text, "apiserver_request_total") {
        if let Some(key) = write_key(&sample.labels, group) {
            *counts.0.entry(key).or_default() += sample.value;
        }
    }
    Ok(counts)
}

/// How an `apiserver_request_total` sample is counted: `resource[/subresource] VERB`
/// (plus the code when it is not 2xx), or `None` for other resources and reads.
fn write_key(labels: &BTreeMap<String, String>, group: &str) -> Option<String> {
    let label = |name: &str| labels.get(name).map_or("", String::as_str);
    let verb = label("verb");
    if !WRITE_VERBS.contains(&verb) {
        return None;
    }
    let resource = match (label("group"), label("resource")) {
        (g, PLURAL) if g == group => "CR",
        ("", "configmaps") => "configmaps",
        ("", "services") => "services",
        ("", "events") => "events",
        ("events.k8s.io", "events") => "events.k8s.io/events",
        _ => return None,
    };
    let mut key = resource.to_owned();
    if !label("subresource").is_empty() {
        let _ = write!(key, "/{}", label("subresource"));
    }
    let _ = write!(key, " {verb}");
    if !label("code").starts_with('2') {
        let _ = write!(key, " {}", label("code"));
    }
    Some(key)
}

// ---------------------------------------------------------------------------------------
// The report

fn report(settings: &Settings, cluster: &Cluster, rows: &[Row]) -> String {
    let counts: Vec<String> = settings.counts.iter().map(usize::to_string).collect();
    let resync = settings
        .resync
        .as_ref()
        .map_or("off".to_owned(), |(text, _)| format!("every {text}"));
    let mut out = format!(
        "## End to end: N CRs to Ready\n\n\
         `{command}` (`make bench` runs it with `INRUN_BENCH_RUNS=3` and the defaults otherwise; `INRUN_BENCH_CRS=100,1000,10000` gives the scaling \
         curve, `INRUN_BENCH_IDLE=60` a longer idle window), {runs}, against the test harness's kube-apiserver \
         {version} and etcd on 127.0.0.1. Machine: {machine}, shared by the API server, etcd, the controller and the bench. \
         Build profile: {profile}. N = {n}. Resync: {resync}. Quiet window: {window} s.\n\n\
         Each mode gets its own namespace and CRD group. N `Pair` CRs are created (16 at a time) before the controller \
         starts; each becomes a ConfigMap and a headless Service in its namespace, and a status with `observedGeneration` \
         and `Ready=True`. Modes run one after another, each on a fresh API server and etcd (started for that row and \
         stopped after it), so no row pays for objects an earlier one left and run order favours no mode.\n\n\
         - **baseline**: a kube-rs `Controller` on the CRD as `DynamicObject` (generation predicate), owning ConfigMaps \
         and Services, concurrency {WORKERS}; each reconcile server-side applies (field manager `baseline`, forced) the \
         ConfigMap and the Service with an owner reference, then the status. It runs as a process of its own, measured \
         like the host.\n\
         - **declarative**, **constructor**, **remote**: `inrun run` of this build with `runtime.workers: {WORKERS}` and \
         `onReconcile` templates / the `pair` Wasm constructor / a remote reconciler served by the bench on 127.0.0.1 \
         (the bench's own CPU is not counted); **python**: the same `pair` constructor written in Python \
         (`plugins/python/pair`, an 18 MB componentize-py component); **sharded**: {replicas} `inrun run --sharding` \
         replicas in one ring sharing the CRs (declarative); **remote-slow** / **sharded-remote**: the remote reconciler \
         answering after {delay} ms, behind one host / {replicas} sharded replicas. The CRD is installed beforehand.\n\n\
         Columns: **to Ready**: from spawning the controller until a LIST shows every CR Ready (polled every 100 ms or \
         more). **writes / CR**: write requests (POST, PUT, PATCH, APPLY, DELETE) the API server counted \
         (`apiserver_request_total`) on the CRs and their status, ConfigMaps, Services and Events, from spawn to Ready, \
         over N. **reconciles / CR**: `controller_runtime_reconcile_total` over N. **CPU / 1k CRs**: the controller \
         process's user + system time from spawn to Ready (start-up included, which dominates at small N), per 1,000 \
         CRs. **peak RSS**: VmHWM. **quiet window**: writes and reconciles in the {window} s after Ready, when nothing \
         changes (writes there without reconciles are the tail of passes still in flight when the LIST saw every CR \
         Ready). **idle CPU**: the controller's CPU in that window, % of one core.\n\n\
         **Goals:** within 1.15× of baseline time for every kind at 1,000 CRs; ≤ 4 writes + 1 event per new CR; \
         0 writes for a no-op resync; 10,000 CRs × 2 children under 150 MiB RSS.\n\n\
         | mode | CRs | to Ready | × baseline | writes / CR | reconciles / CR | CPU / 1k CRs | peak RSS | quiet window | idle CPU |{runs_head}\n\
         |---|---|---|---|---|---|---|---|---|---|{runs_rule}\n",
        command = Settings::command(),
        replicas = Mode::Sharded.replicas(),
        delay = Mode::RemoteSlow.remote_delay().as_millis(),
        version = cluster.version,
        machine = machine(),
        profile = if cfg!(debug_assertions) {
            "dev (unoptimised; `cargo bench` builds release)"
        } else {
            "release"
        },
        n = counts.join(", "),
        window = settings.window().as_secs(),
        runs = if settings.runs == 1 {
            "one run".to_owned()
        } else {
            format!(
                "{} runs of every mode (the order reversed every other round; each row is the run with the median time \
                 to Ready, its last column every run's time)",
                settings.runs
            )
        },
        runs_head = if settings.runs > 1 { " all runs |" } else { "" },
        runs_rule = if settings.runs > 1 { "---|" } else { "" },
    );
    let medians = medians(settings, rows);
    for (row, all) in &medians {
        let baseline = medians
            .iter()
            .map(|(b, _)| *b)
            .find(|b| b.mode == Mode::Baseline && b.crs == row.crs);
        let all = (settings.runs > 1).then(|| {
            all.iter()
                .map(|r| ready_text(&r.ready))
                .collect::<Vec<_>>()
                .join(" · ")
        });
        out.push_str(&row_line(row, baseline, all.as_deref()));
        out.push('\n');
    }
    let rows: Vec<&Row> = medians.iter().map(|(r, _)| *r).collect();
    out.push_str(
        "\nWrites per CR by resource and verb, spawn to Ready (then the quiet window):\n\n",
    );
    for row in &rows {
        let quiet = row
            .quiet
            .as_ref()
            .map_or("—".to_owned(), |q| q.writes.per_cr(row.crs));
        let notes = row.notes.iter().fold(String::new(), |mut out, note| {
            let _ = write!(out, "; {note}");
            out
        });
        let _ = writeln!(
            out,
            "- {} × {}: {} (quiet: {quiet}){notes}",
            row.mode.name(),
            row.crs,
            row.writes.per_cr(row.crs),
        );
    }
    out.push_str(&plan_table(&rows));
    out.push_str(&change_table(&rows));
    out
}

/// `inrun plan` over each mode's CRs, once Ready and the host stopped.
fn plan_table(rows: &[&Row]) -> String {
    let planned: Vec<(&Row, &PlanCost)> = rows
        .iter()
        .filter_map(|r| r.plan.as_ref().map(|p| (*r, p)))
        .collect();
    if planned.is_empty() {
        return String::new();
    }
    let rate = |n: usize, d: Duration| format!("{:.0}", n as f64 / d.as_secs_f64().max(1e-9));
    let mut out = String::from(
        "\n### `inrun plan` over the same CRs\n\n\
         Once every CR was Ready, the host stopped: `inrun plan -n NS -o json` (this build) against the API server \
         as its admin. **Nothing changes**: `--blueprint` is the running Blueprint and `--crd` names the CRD, so \
         every CR is rendered by both versions (its children read by one LIST per kind) and none is dry-run. \
         **Every CR changes** (templates only): the new Blueprint gives each ConfigMap a field more, so each CR's \
         ConfigMap is also applied with `dryRun=All`. Wall time of the command, process start and plugin load \
         (from the compile cache) included.\n\n\
         | mode | CRs | nothing changes | CRs/s | every CR changes | CRs/s |\n|---|---|---|---|---|---|\n",
    );
    for (row, plan) in planned {
        let changed = plan.changed.map_or(("—".to_owned(), "—".to_owned()), |d| {
            (format!("{:.2} s", d.as_secs_f64()), rate(row.crs, d))
        });
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} s | {} | {} | {} |",
            row.mode.name(),
            row.crs,
            plan.unchanged.as_secs_f64(),
            rate(row.crs, plan.unchanged),
            changed.0,
            changed.1
        );
    }
    out
}

/// A template change reaching every CR of a running host: at once, and rolled out.
fn change_table(rows: &[&Row]) -> String {
    let changed: Vec<(&Row, &ChangeCost)> = rows
        .iter()
        .filter_map(|r| r.change.as_ref().map(|c| (*r, c)))
        .collect();
    if changed.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n### A template change reaching every CR: at once, and rolled out\n\n\
         With the host running and every CR Ready, the Blueprint's ConfigMap template gets a field more: \
         **at once** (no `rollout`: every CR reconciled by the new version as soon as the host reads the file, \
         within its `--reload-interval 1s`), then another field with \
         `rollout: {steps: [{percent: 10, pause: 2s}, {percent: 50, pause: 2s}, {percent: 100}]}` (**rolled out**: \
         10 %, then 50 %, then every CR, each step judged first). Time from the file's write until every CR's \
         `status.reconciledBy` names the new version and it is Ready; API writes meanwhile (`apiserver_request_total`), \
         per CR.\n\n\
         | mode | CRs | at once | writes / CR | rolled out | writes / CR | writes by resource, rolled out |\n|---|---|---|---|---|---|---|\n",
    );
    for (row, change) in changed {
        let per = |c: &Counts| c.total() / row.crs as f64;
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} s | {:.2} | {:.2} s | {:.2} | {} |",
            row.mode.name(),
            row.crs,
            change.at_once.0.as_secs_f64(),
            per(&change.at_once.1),
            change.rolled.0.as_secs_f64(),
            per(&change.rolled.1),
            change.rolled.1.per_cr(row.crs),
        );
    }
    out
}

/// For every N and mode, in the settings' order: the run with the median time to Ready,
/// and every run in the order they ran.
fn medians<'r>(settings: &Settings, rows: &'r [Row]) -> Vec<(&'r Row, Vec<&'r Row>)> {
    let mut out = Vec::new();
    for &crs in &settings.counts {
        for &mode in &settings.modes {
            let all: Vec<&Row> = rows
                .iter()
                .filter(|r| r.mode == mode && r.crs == crs)
                .collect();
            let mut sorted = all.clone();
            sorted.sort_by_key(|r| match r.ready {
                Readiness::Ready(d) => (0, d),
                Readiness::TimedOut { after, .. } => (1, after),
            });
            if let Some(median) = sorted.get(sorted.len() / 2) {
                out.push((*median, all));
            }
        }
    }
    out
}

fn ready_text(ready: &Readiness) -> String {
    match ready {
        Readiness::Ready(d) => format!("{:.2} s", d.as_secs_f64()),
        Readiness::TimedOut { ready, after } => {
            format!("> {:.0} s ({ready} Ready)", after.as_secs_f64())
        }
    }
}

/// One table row; `baseline` is the baseline's row at the same N; `all`, every run's time.
fn row_line(row: &Row, baseline: Option<&Row>, all: Option<&str>) -> String {
    let n = row.crs as f64;
    let ready = match row.ready {
        Readiness::Ready(d) => format!("{:.2} s", d.as_secs_f64()),
        Readiness::TimedOut { ready, after } => {
            format!("> {:.0} s ({ready}/{} Ready)", after.as_secs_f64(), row.crs)
        }
    };
    let ratio = match (&row.ready, baseline.map(|b| &b.ready)) {
        (Readiness::Ready(d), Some(Readiness::Ready(b))) => {
            format!("{:.2}×", d.as_secs_f64() / b.as_secs_f64())
        }
        _ => "—".to_owned(),
    };
    let (quiet, idle) = match &row.quiet {
        Some(q) => (
            format!(
                "{:.0} writes, {:.0} reconciles",
                q.writes.total(),
                q.reconciles
            ),
            format!(
                "{:.2} %",
                100.0 * q.cpu.as_secs_f64() / q.length.as_secs_f64().max(1e-9)
            ),
        ),
        None => ("—".to_owned(), "—".to_owned()),
    };
    let all = all.map(|a| format!(" {a} |")).unwrap_or_default();
    format!(
        "| {} | {} | {ready} | {ratio} | {:.2} | {:.2} | {:.2} s | {:.0} MiB | {quiet} | {idle} |{all}",
        row.mode.name(),
        row.crs,
        row.writes.total() / n,
        row.reconciles / n,
        row.cpu.as_secs_f64() / n * 1000.0,
        row.peak_rss_kib as f64 / 1024.0,
    )
}

/// `N cores (model)` from this machine.
fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
        });
    match model {
        Some(model) => format!("{cores} cores ({model})"),
        None => format!("{cores} cores"),
    }
}

// ---------------------------------------------------------------------------------------
// The remote reconciler

mod remote {
    //! The remote reconciler: `inrun_bench_pair::children` behind an HTTP endpoint on
    //! 127.0.0.1, in the bench's process.

    use anyhow::{Context as _, Result};
    use axum::Json;
    use serde_json::{Value, json};

    /// A running endpoint.
    pub struct Server {
        /// `http://127.0.0.1:<port>/reconcile`.
        pub url: String,
        task: tokio::task::JoinHandle<()>,
    }

    impl Server {
        pub async fn start(delay: std::time::Duration) -> Result<Server> {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .context("binding the remote reconciler")?;
            let url = format!("http://{}/reconcile", listener.local_addr()?);
            let app = axum::Router::new().route(
                "/reconcile",
                axum::routing::post(move |request| async move {
                    tokio::time::sleep(delay).await;
                    reconcile(request).await
                }),
            );
            let task = tokio::spawn(async move {
                let _ = axum::serve(listener, app).await;
            });
            Ok(Server { url, task })
        }

        pub fn stop(self) {
            self.task.abort();
        }
    }

    /// The Request's CR becomes its two children; a finalizing CR gets none.
    async fn reconcile(Json(request): Json<Value>) -> Json<Value> {
        if request["finalizing"] == true {
            return Json(json!({"result": "ok", "resources": []}));
        }
        let object = &request["object"];
        let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        let children = inrun_bench_pair::children(
            &text(&object["metadata"]["name"]),
            &text(&object["metadata"]["namespace"]),
            &text(&object["spec"]["message"]),
        );
        Json(json!({"result": "ok", "resources": children}))
    }
}

// ---------------------------------------------------------------------------------------
// The baseline controller

mod baseline {
    //! A plain kube-rs controller doing the same job, as its users write one: a
    //! `Controller` on the CRD (as `DynamicObject`) whose watch passes only generation
    //! changes, so its own status writes do not trigger it again; `owns` ConfigMaps and
    //! Services; each reconcile applies both children and then the status.

    use super::{Process, Settings, WORKERS, pair_resource};

    use std::path::{Path, PathBuf};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use anyhow::{Context as _, Result};
    use futures::StreamExt as _;
    use inrun_testenv::ControlPlane;
    use k8s_openapi::api::core::v1::{ConfigMap, Service};
    use kube::api::{Api, DynamicObject, Patch, PatchParams};
    use kube::config::{KubeConfigOptions, Kubeconfig};
    use kube::runtime::controller::{Action, Config, Controller};
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::{WatchStreamExt as _, predicates, watcher};
    use kube::{Client, ResourceExt as _};
    use serde::{Deserialize, Serialize};
    use serde_json::{Value, json};

    /// The field manager of every apply.
    const MANAGER: &str = "baseline";

    /// What the child process needs, passed as JSON in `INRUN_E2E_BASELINE`.
    #[derive(Serialize, Deserialize)]
    pub struct Spec {
        kubeconfig: PathBuf,
        namespace: String,
        group: String,
        metrics_port: u16,
        resync_ms: Option<u64>,
    }

    /// Starts this binary as the baseline controller for `group` in `namespace`, with
    /// its reconcile count on 127.0.0.1:`port`/metrics.
    pub fn spawn(
        cp: &ControlPlane,
        namespace: &str,
        group: &str,
        port: u16,
        settings: &Settings,
        dir: &Path,
    ) -> Result<Process> {
        let spec = Spec {
            kubeconfig: cp.kubeconfig().to_path_buf(),
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            metrics_port: port,
            resync_ms: settings
                .resync
                .as_ref()
                .map(|(_, d)| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        };
        let exe = std::env::current_exe().context("finding the bench binary")?;
        let mut command = tokio::process::Command::new(exe);
        command.env(super::BASELINE_ENV, serde_json::to_string(&spec)?);
        Process::spawn(command, port, dir, "controller-0.log")
    }

    /// The child process: runs the controller until killed.
    pub fn main(spec: &str) -> Result<()> {
        let spec: Spec = serde_json::from_str(spec).context("the baseline's spec")?;
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .context("starting the baseline's runtime")?
            .block_on(run(spec))
    }

    /// What every reconcile shares.
    struct Context {
        crs: Api<DynamicObject>,
        config_maps: Api<ConfigMap>,
        services: Api<Service>,
        resync: Option<Duration>,
        reconciles: AtomicU64,
        errors: AtomicU64,
    }

    async fn run(spec: Spec) -> Result<()> {
        let kubeconfig = Kubeconfig::read_from(&spec.kubeconfig).context("the kubeconfig")?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .context("the kubeconfig")?;
        let client = Client::try_from(config)?;
        let resource = pair_resource(&spec.group);
        let ns = &spec.namespace;
        let context = Arc::new(Context {
            crs: Api::namespaced_with(client.clone(), ns, &resource),
            config_maps: Api::namespaced(client.clone(), ns),
            services: Api::namespaced(client.clone(), ns),
            resync: spec.resync_ms.map(Duration::from_millis),
            reconciles: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", spec.metrics_port))
            .await
            .context("binding the metrics port")?;
        let metrics = tokio::spawn(serve_metrics(listener, context.clone()));

        let writer = Writer::new(resource.clone());
        let reader = writer.as_reader();
        let crs = watcher(context.crs.clone(), watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .applied_objects()
            .predicate_filter(predicates::generation, Default::default());
        Controller::for_stream_with(crs, reader, resource)
            .owns(context.config_maps.clone(), watcher::Config::default())
            .owns(context.services.clone(), watcher::Config::default())
            .with_config(Config::default().concurrency(WORKERS))
            .run(reconcile, error_policy, context)
            .for_each(|_| std::future::ready(()))
            .await;
        metrics.abort();
        Ok(())
    }

    /// Applies the CR's ConfigMap and Service (owned by it), then its status.
    async fn reconcile(cr: Arc<DynamicObject>, ctx: Arc<Context>) -> Result<Action, kube::Error> {
        ctx.reconciles.fetch_add(1, Ordering::Relaxed);
        let name = cr.name_any();
        let namespace = cr.namespace().unwrap_or_default();
        let message = cr.data["spec"]["message"].as_str().unwrap_or_default();
        let owner = json!({
            "apiVersion": cr.types.as_ref().map_or("", |t| t.api_version.as_str()),
            "kind": cr.types.as_ref().map_or("", |t| t.kind.as_str()),
            "name": name,
            "uid": cr.uid().unwrap_or_default(),
            "controller": true,
            "blockOwnerDeletion": true,
        });
        let apply = PatchParams::apply(MANAGER).force();
        let [mut config_map, mut service] = inrun_bench_pair::children(&name, &namespace, message);
        config_map["metadata"]["ownerReferences"] = json!([owner]);
        service["metadata"]["ownerReferences"] = json!([owner]);
        ctx.config_maps
            .patch(&name, &apply, &Patch::Apply(&config_map))
            .await?;
        ctx.services
            .patch(&name, &apply, &Patch::Apply(&service))
            .await?;
        let generation = cr.metadata.generation;
        let status: Value = json!({
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "status": {
                "observedGeneration": generation,
                "conditions": [{
                    "type": "Ready",
                    "status": "True",
                    "reason": "Reconciled",
                    "message": "",
                    "observedGeneration": generation,
                }],
            },
        });
        ctx.crs
            .patch_status(&name, &apply, &Patch::Apply(&status))
            .await?;
        Ok(ctx.resync.map_or(Action::await_change(), Action::requeue))
    }

    fn error_policy(_: Arc<DynamicObject>, _: &kube::Error, ctx: Arc<Context>) -> Action {
        ctx.errors.fetch_add(1, Ordering::Relaxed);
        Action::requeue(Duration::from_secs(1))
    }

    /// `controller_runtime_reconcile_total` by result, like the host's health port.
    async fn serve_metrics(listener: tokio::net::TcpListener, ctx: Arc<Context>) {
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let ctx = ctx.clone();
                async move {
                    let errors = ctx.errors.load(Ordering::Relaxed);
                    let success = ctx.reconciles.load(Ordering::Relaxed).saturating_sub(errors);
                    format!(
                        "controller_runtime_reconcile_total{{controller=\"baseline\",result=\"success\"}} {success}\n\
                         controller_runtime_reconcile_total{{controller=\"baseline\",result=\"error\"}} {errors}\n"
                    )
                }
            }),
        );
        let _ = axum::serve(listener, app).await;
    }
}
