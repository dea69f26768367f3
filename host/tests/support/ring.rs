//! Sharded hosts in tests: `inrun run` replicas as processes, the ring's bucket Leases as
//! the API server has them, and the API server's audit log read back to check that every
//! write for a CR came from the replica holding the CR's bucket at that moment.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use inrun::ring::sharding::buckets::{BUCKETS, bucket_of};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use serde_json::Value;

/// How long a ring test waits for replicas to act.
const WAIT: Duration = Duration::from_secs(120);

/// A Blueprint `name` whose CRD `kind` in `group` makes two ConfigMaps a CR
/// (`<name>-a`, `<name>-b`) carrying its `spec.value`; `runtime` is its runtime section's
/// body (each line indented four spaces).
pub fn two_configmaps(name: &str, group: &str, kind: &str, runtime: &str) -> String {
    format!(
        r#"apiVersion: inrun.dev/v1alpha1
kind: Blueprint
metadata: {{name: {name}}}
spec:
  runtime:
{runtime}  crds:
    - group: {group}
      version: v1alpha1
      kind: {kind}
      reconcile:
        onReconcile:
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-a"}}
            data: {{value: "{{{{ .spec.value }}}}"}}
          - apiVersion: v1
            kind: ConfigMap
            metadata: {{name: "{{{{ .metadata.name }}}}-b"}}
            data: {{value: "{{{{ .spec.value }}}}"}}
        managedResources:
          - {{apiVersion: v1, kind: ConfigMap}}
"#
    )
}

/// An `inrun run --blueprint` process (`INRUN_CHAOS_LOG` sets its log level, `info` by
/// default); killed when dropped.
pub struct Replica {
    /// Its `--identity`.
    pub name: String,
    child: tokio::process::Child,
    log: PathBuf,
    /// How many processes under this name logged their health port before this one (a
    /// replica started again appends to the same log).
    earlier: usize,
}

/// The line a host logs when its health port listens.
const HEALTH_LINE: &str = "health port listening";

impl Replica {
    pub fn spawn(kubeconfig: &Path, blueprint: &Path, dir: &Path, name: &str) -> Replica {
        Self::spawn_with(kubeconfig, blueprint, dir, name, &[])
    }

    /// [`Replica::spawn`] with more flags for `inrun run`.
    pub fn spawn_with(
        kubeconfig: &Path,
        blueprint: &Path,
        dir: &Path,
        name: &str,
        more: &[&str],
    ) -> Replica {
        Self::spawn_env(kubeconfig, blueprint, dir, name, more, &[])
    }

    /// [`Replica::spawn_with`] with more environment variables (`INRUN_FAILPOINTS`, say).
    pub fn spawn_env(
        kubeconfig: &Path,
        blueprint: &Path,
        dir: &Path,
        name: &str,
        more: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        let program = Path::new(env!("CARGO_BIN_EXE_inrun"));
        Self::spawn_program(program, kubeconfig, blueprint, dir, name, more, env)
    }

    /// [`Replica::spawn_env`] running `program`: another build of `inrun` (the previous
    /// release, for the upgrade tests).
    pub fn spawn_program(
        program: &Path,
        kubeconfig: &Path,
        blueprint: &Path,
        dir: &Path,
        name: &str,
        more: &[&str],
        env: &[(&str, &str)],
    ) -> Replica {
        let log = dir.join(format!("{name}.log"));
        let earlier = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .matches(HEALTH_LINE)
            .count();
        // Appended to: a replica started again under its name keeps one log.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = tokio::process::Command::new(program)
            .arg("run")
            .arg("--blueprint")
            .arg(blueprint)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--install-crds", "--health-port", "0"])
            .args(["--health-address", "127.0.0.1", "--console-port", "0"])
            .args(["--identity", name])
            .args(more)
            .arg("--cache-dir")
            .arg(dir.join("cache"))
            .env(
                "INRUN_LOG",
                std::env::var("INRUN_CHAOS_LOG").unwrap_or_else(|_| "info".into()),
            )
            .envs(env.iter().copied())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn inrun");
        Replica {
            name: name.to_string(),
            child,
            log,
            earlier,
        }
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("running");
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{signal} {pid}");
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub async fn port(&self) -> u16 {
        inrun_testenv::wait_for("the health port to be logged", WAIT, || async {
            let log = self.log();
            let line = log
                .lines()
                .filter(|l| l.contains(HEALTH_LINE))
                .nth(self.earlier)?;
            let after = line.split("127.0.0.1:").nth(1)?;
            let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", self.log()))
    }

    /// The sum of the samples of `metric` on its `/metrics`.
    pub async fn metric(&self, metric: &str) -> f64 {
        let port = self.port().await;
        let text = reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await
            .expect("the health port answers")
            .text()
            .await
            .expect("a body");
        text.lines()
            .filter(|l| {
                l.strip_prefix(metric)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Whether the process has exited, or its log says `line`.
    pub fn exited_or_said(&mut self, line: &str) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_))) || self.log().contains(line)
    }

    /// SIGKILL, and waits for the process to end.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Fails if the process exited.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}): {}", self.name, self.log());
        }
    }

    pub async fn exited(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

/// The holder of each bucket of `ring`, each named by the replica it is an
/// incarnation of (`name#suffix`).
pub async fn holders(leases: &Api<Lease>, ring: &str) -> Vec<Option<String>> {
    let list = leases
        .list(
            &ListParams::default().labels(&format!("inrun.dev/ring={ring},inrun.dev/role=bucket")),
        )
        .await
        .expect("list bucket Leases");
    let mut holders = vec![None; BUCKETS];
    for lease in list.items {
        let bucket: usize = lease.metadata.labels.as_ref().expect("labels")["inrun.dev/bucket"]
            .parse()
            .expect("bucket");
        holders[bucket] = lease
            .spec
            .and_then(|s| s.holder_identity)
            .and_then(|h| h.split('#').next().map(str::to_string));
    }
    holders
}

/// Polls until every bucket is held, the holders are exactly `names` and none holds
/// more than its capped share (⌈64/n⌉: the ring has settled); the count held by each.
pub async fn held_by(leases: &Api<Lease>, ring: &str, names: &[&str]) -> BTreeMap<String, usize> {
    inrun_testenv::wait_for(
        "the buckets held by the expected replicas",
        WAIT,
        || async {
            let holders = holders(leases, ring).await;
            let mut counts = BTreeMap::new();
            for h in &holders {
                *counts.entry(h.clone()?).or_insert(0) += 1;
            }
            let seen: Vec<&str> = counts.keys().map(String::as_str).collect();
            let cap = BUCKETS.div_ceil(names.len());
            (seen == names && counts.values().all(|n| *n <= cap)).then_some(counts)
        },
    )
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}",
            futures::executor::block_on(holders(leases, ring))
        )
    })
}

/// One write the audit log recorded: who, on what, when the API server received it and
/// when it answered (RFC 3339 with microseconds: ordered as text).
#[derive(Debug, Clone)]
struct Write {
    user: String,
    resource: String,
    name: String,
    received: String,
    answered: String,
    /// For a Lease: the holder its request body names.
    holder: Option<String>,
}

/// The successful writes in namespace `ns` the audit log at `path` recorded.
fn audited_writes(path: &Path, ns: &str) -> Vec<Write> {
    let text = std::fs::read_to_string(path).expect("the audit log");
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| e["objectRef"]["namespace"] == ns)
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_i64()
                .is_some_and(|c| c < 300)
        })
        .map(|e| Write {
            user: e["user"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            resource: e["objectRef"]["resource"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            name: e["objectRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            received: e["requestReceivedTimestamp"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            answered: e["stageTimestamp"].as_str().unwrap_or_default().to_string(),
            holder: e["requestObject"]["spec"]["holderIdentity"]
                .as_str()
                .filter(|h| !h.is_empty())
                .and_then(|h| h.split('#').next())
                .map(str::to_string),
        })
        .collect()
}

/// The users whose writes to the cluster-scoped `resource` `name` succeeded, in the order
/// the audit log at `path` recorded them.
pub fn cluster_writers(path: &Path, resource: &str, name: &str) -> Vec<String> {
    let text = std::fs::read_to_string(path).expect("the audit log");
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["stage"] == "ResponseComplete")
        .filter(|e| e["objectRef"]["resource"] == resource && e["objectRef"]["name"] == name)
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_i64()
                .is_some_and(|c| c < 300)
        })
        .filter_map(|e| e["user"]["username"].as_str().map(str::to_string))
        .collect()
}

/// Who held each bucket when: per bucket, (replica, from, until) — from the answer to the
/// write that named it holder until the API server received the next write changing the
/// holder (`None`: still held at the end).
type Tenures = HashMap<usize, Vec<(String, String, Option<String>)>>;

fn tenures(writes: &[Write], ring: &str) -> Tenures {
    let prefix = format!("{ring}-b-");
    let mut changes: HashMap<usize, Vec<&Write>> = HashMap::new();
    for w in writes.iter().filter(|w| w.resource == "leases") {
        if let Some(b) = w.name.strip_prefix(&prefix).and_then(|b| b.parse().ok()) {
            changes.entry(b).or_default().push(w);
        }
    }
    let mut tenures = Tenures::new();
    for (bucket, mut list) in changes {
        list.sort_by(|a, b| a.answered.cmp(&b.answered));
        let mut held: Vec<(String, String, Option<String>)> = Vec::new();
        for w in list {
            let current = held
                .last()
                .filter(|(_, _, until)| until.is_none())
                .map(|(h, _, _)| h.clone());
            if current == w.holder {
                continue;
            }
            if let Some(last) = held.last_mut().filter(|(_, _, until)| until.is_none()) {
                last.2 = Some(w.received.clone());
            }
            if let Some(h) = &w.holder {
                held.push((h.clone(), w.answered.clone(), None));
            }
        }
        tenures.insert(bucket, held);
    }
    tenures
}

/// A write outside its writer's tenure.
#[derive(Debug, Clone)]
pub struct Outside {
    /// The replica that made it.
    pub replica: String,
    /// When the API server received it.
    pub received: k8s_openapi::jiff::Timestamp,
    /// What, when, and the bucket's tenures.
    pub text: String,
}

/// Every write in `ns` to a CR of `plural` or to one of its ConfigMaps (`<cr>-<suffix>`)
/// that its writer (a replica, by the ServiceAccount in `replicas`) made while not holding
/// the CR's bucket (by the uids in `uids`), as the bucket Leases of `ring` record it: a
/// write received before its writer's tenure began or answered after it ended. With the
/// number of writes checked.
pub fn writes_outside_tenure(
    audit_log: &Path,
    ns: &str,
    ring: &str,
    plural: &str,
    replicas: &BTreeMap<String, String>,
    uids: &BTreeMap<String, String>,
) -> (usize, Vec<Outside>) {
    let writes = audited_writes(audit_log, ns);
    let tenures = tenures(&writes, ring);
    let mut checked = 0;
    let mut outside = Vec::new();
    for w in &writes {
        let cr = match w.resource.as_str() {
            r if r == plural => w.name.as_str(),
            "configmaps" => w
                .name
                .rsplit_once('-')
                .map_or(w.name.as_str(), |(cr, _)| cr),
            _ => continue,
        };
        let (Some(replica), Some(uid)) = (replicas.get(&w.user), uids.get(cr)) else {
            continue;
        };
        checked += 1;
        let bucket = bucket_of(uid);
        let inside = tenures.get(&bucket).is_some_and(|list| {
            list.iter().any(|(holder, from, until)| {
                holder == replica
                    && from.as_str() <= w.received.as_str()
                    && until
                        .as_ref()
                        .is_none_or(|u| w.answered.as_str() <= u.as_str())
            })
        });
        if !inside {
            outside.push(Outside {
                replica: replica.clone(),
                received: w.received.parse().expect("an RFC 3339 time"),
                text: format!(
                    "{replica} wrote {} {} (bucket {bucket:02}) received {} answered {}; tenures {:?}",
                    w.resource,
                    w.name,
                    w.received,
                    w.answered,
                    tenures.get(&bucket)
                ),
            });
        }
    }
    (checked, outside)
}
