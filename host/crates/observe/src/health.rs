//! The runtime's own account of what it runs (controllers, synced caches, leadership),
//! exported as gauges by [`crate::metrics`], and the checks `/healthz` and `/readyz`
//! answer from, with controller-runtime's semantics: a probe passes while the process
//! serves it. Readiness depends neither on leadership (a standby is ready) nor on how many
//! tenants or controllers run (a host serving none is ready); a reconcile's failures show
//! in the metrics and the CR's status, never in the probes.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use prometheus_client::metrics::gauge::Gauge;

/// A named check: `Err` says why it fails (logged, never served).
pub type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Which endpoint a check belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// `/healthz`: whether the process should be restarted.
    Liveness,
    /// `/readyz`: whether it should be sent traffic.
    Readiness,
}

/// Controllers, caches and leadership, updated by the runtime as they change, and the
/// probes' checks.
pub struct Health {
    pub(crate) controllers: Gauge,
    pub(crate) synced: Gauge,
    pub(crate) leader: Gauge,
    /// Under sharding every replica runs controllers, whoever leads its ring.
    sharded: std::sync::atomic::AtomicBool,
    checks: RwLock<[BTreeMap<String, Check>; 2]>,
    /// Plugins loading now, as `tenant T: plugin P`, with how many loads of each run and
    /// whether they are the host's own (the operator's Blueprint), which starting waits
    /// for, or a tenant's, which it never does.
    loading: std::sync::Mutex<BTreeMap<String, (usize, bool)>>,
}

impl std::fmt::Debug for Health {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Health")
            .field("controllers", &self.controllers.get())
            .field("synced", &self.synced.get())
            .field("leader", &self.leader.get())
            .finish_non_exhaustive()
    }
}

/// The check every probe has: it passes whenever the probe is answered.
fn ping() -> Check {
    Arc::new(|| Ok(()))
}

impl Default for Health {
    /// Both probes with one check, `ping`, as a kubebuilder project wires them.
    fn default() -> Self {
        let checks = || BTreeMap::from([("ping".to_string(), ping())]);
        Health {
            controllers: Gauge::default(),
            synced: Gauge::default(),
            leader: Gauge::default(),
            sharded: std::sync::atomic::AtomicBool::new(false),
            checks: RwLock::new([checks(), checks()]),
            loading: std::sync::Mutex::default(),
        }
    }
}

/// One check's state in an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Passed,
    Excluded,
    Failed,
}

/// What a probe answers: the HTTP status and the body (`text/plain; charset=utf-8`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// 200, 500 when a check failed, 404 for an unknown check.
    pub status: u16,
    /// `ok`, or one line per check (`[+]ping ok`) and a verdict.
    pub body: String,
}

impl Answer {
    fn new(status: u16, body: impl Into<String>) -> Answer {
        Answer {
            status,
            body: body.into(),
        }
    }
}

impl Health {
    /// One more controller runs (`false`: one stopped).
    pub fn controller_running(&self, running: bool) {
        if running {
            self.controllers.inc();
        } else {
            self.controllers.dec();
        }
    }

    /// One more controller's cache has synced (`false`: a synced one stopped).
    pub fn cache_synced(&self, synced: bool) {
        if synced {
            self.synced.inc();
        } else {
            self.synced.dec();
        }
    }

    /// This replica runs controllers (it leads, or runs without election), or not.
    pub fn set_leader(&self, leader: bool) {
        if !self.sharded.load(std::sync::atomic::Ordering::Acquire) {
            self.leader.set(i64::from(leader));
        }
    }

    /// This replica is one of a sharded ring: it runs controllers from now on, and the
    /// ring's leader election (which only decides who makes the host's own writes) does
    /// not change that.
    pub fn set_sharded(&self) {
        self.sharded
            .store(true, std::sync::atomic::Ordering::Release);
        self.leader.set(1);
    }

    /// Whether this replica leads.
    pub fn leader(&self) -> bool {
        self.leader.get() > 0
    }

    /// Controllers running now.
    pub fn controllers(&self) -> i64 {
        self.controllers.get()
    }

    /// Controllers whose cache has synced.
    pub fn caches_synced(&self) -> i64 {
        self.synced.get()
    }

    /// `tenant`'s `plugin` started (`true`) or finished loading; `own`: a plugin of the
    /// host's own Blueprint.
    pub fn plugin_loading(&self, tenant: &str, plugin: &str, loading: bool, own: bool) {
        let what = if tenant.is_empty() {
            format!("plugin {plugin}")
        } else {
            format!("tenant {tenant}: plugin {plugin}")
        };
        let mut map = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        if loading {
            map.entry(what).or_insert((0, own)).0 += 1;
        } else if let Some((n, _)) = map.get_mut(&what) {
            *n -= 1;
            if *n == 0 {
                map.remove(&what);
            }
        }
    }

    /// The plugins loading now (`tenant T: plugin P`), the host's own and tenants'.
    pub fn loading(&self) -> Vec<String> {
        let map = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        map.keys().cloned().collect()
    }

    /// The plugins of the host's own Blueprint loading now.
    fn own_loading(&self) -> Vec<String> {
        let map = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .filter(|(_, (_, own))| *own)
            .map(|(what, _)| what.clone())
            .collect()
    }

    /// The readiness checks of a starting host: `plugins` fails until `loaded` is set (the
    /// initial Blueprint assembled) and while a plugin of the host's own Blueprint loads,
    /// naming them — never for a tenant's: a tenant whose compiles are slow must not get
    /// the pod restarted by its startup probe (they show in `/readyz?verbose` instead);
    /// `controllers` fails while this replica leads and a controller's cache has not
    /// synced. A standby is ready: it serves probes and metrics, and runs nothing.
    pub fn add_startup_checks(self: &Arc<Self>, loaded: Arc<std::sync::atomic::AtomicBool>) {
        let health = Arc::downgrade(self);
        self.add_check(
            Probe::Readiness,
            "plugins",
            Arc::new(move || {
                let Some(health) = health.upgrade() else {
                    return Ok(());
                };
                let loading = health.own_loading();
                if !loading.is_empty() {
                    return Err(format!("loading {}", loading.join(", ")));
                }
                if !loaded.load(std::sync::atomic::Ordering::Acquire) {
                    return Err("loading the Blueprint".into());
                }
                Ok(())
            }),
        );
        let health = Arc::downgrade(self);
        self.add_check(
            Probe::Readiness,
            "controllers",
            Arc::new(move || {
                let Some(health) = health.upgrade() else {
                    return Ok(());
                };
                let (running, synced) = (health.controllers(), health.caches_synced());
                if health.leader() && synced < running {
                    return Err(format!(
                        "{} of {running} controllers' caches not synced yet",
                        running - synced
                    ));
                }
                Ok(())
            }),
        );
    }

    /// Adds (or replaces) the check `name` of `probe`.
    pub fn add_check(&self, probe: Probe, name: &str, check: Check) {
        let mut checks = self.checks.write().unwrap_or_else(|p| p.into_inner());
        checks[probe as usize].insert(name.to_string(), check);
    }

    /// Runs `probe`'s checks as controller-runtime's handler does. `only`: one check
    /// (`/readyz/<name>`); otherwise every check but those in `exclude`, each on its own
    /// line when `verbose` or when one fails. A failure's reason is logged, never served,
    /// whether one check or all were asked for (controller-runtime's single-check handler
    /// writes it; its aggregate withholds it).
    pub fn answer(
        &self,
        probe: Probe,
        only: Option<&str>,
        verbose: bool,
        exclude: &[&str],
    ) -> Answer {
        let checks = self.checks.read().unwrap_or_else(|p| p.into_inner());
        let checks = &checks[probe as usize];
        let failed = |name: &str, why: String| {
            // Probes are public: why is logged, not served.
            tracing::info!(check = %name, error = %why, "health check failed");
        };
        if let Some(name) = only {
            return match checks.get(name) {
                None => Answer::new(404, "404 page not found\n"),
                Some(check) => match check() {
                    Ok(()) => Answer::new(200, "ok"),
                    Err(why) => {
                        failed(name, why);
                        Answer::new(500, "internal server error: reason withheld\n")
                    }
                },
            };
        }
        let mut unknown: Vec<&str> = exclude.to_vec();
        let parts: Vec<(&str, Status)> = checks
            .iter()
            .map(|(name, check)| {
                if exclude.contains(&name.as_str()) {
                    unknown.retain(|e| e != name);
                    return (name.as_str(), Status::Excluded);
                }
                match check() {
                    Ok(()) => (name.as_str(), Status::Passed),
                    Err(why) => {
                        failed(name, why);
                        (name.as_str(), Status::Failed)
                    }
                }
            })
            .collect();
        let failed = parts.iter().any(|(_, s)| *s == Status::Failed);
        let status = if failed { 500 } else { 200 };
        // Failures are always told check by check.
        if !failed && !verbose {
            return Answer::new(status, "ok");
        }
        let mut body = String::new();
        for (name, state) in &parts {
            body.push_str(&match state {
                Status::Excluded => format!("[+]{name} excluded: ok\n"),
                Status::Passed => format!("[+]{name} ok\n"),
                Status::Failed => format!("[-]{name} failed: reason withheld\n"),
            });
        }
        if probe == Probe::Readiness {
            for what in self.loading() {
                body.push_str(&format!("info: {what} loading\n"));
            }
        }
        if !unknown.is_empty() {
            unknown.sort_unstable();
            unknown.dedup();
            let quoted: Vec<String> = unknown.iter().map(|u| format!("{u:?}")).collect();
            body.push_str(&format!(
                "warn: some health checks cannot be excluded: no matches for {}\n",
                quoted.join(",")
            ));
        }
        body.push_str(if failed {
            "healthz check failed\n"
        } else {
            "healthz check passed\n"
        });
        Answer::new(status, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_probes_pass_with_no_controller_running_and_without_leading() {
        let h = Health::default();
        assert_eq!((h.controllers(), h.leader()), (0, false));
        for probe in [Probe::Liveness, Probe::Readiness] {
            assert_eq!(h.answer(probe, None, false, &[]), Answer::new(200, "ok"));
            assert_eq!(
                h.answer(probe, None, true, &[]),
                Answer::new(200, "[+]ping ok\nhealthz check passed\n")
            );
            assert_eq!(
                h.answer(probe, Some("ping"), false, &[]),
                Answer::new(200, "ok")
            );
            assert_eq!(h.answer(probe, Some("nope"), false, &[]).status, 404);
        }
    }

    #[test]
    fn a_starting_host_waits_for_its_own_plugins_never_for_a_tenants() {
        let h = Arc::new(Health::default());
        h.add_startup_checks(Arc::new(std::sync::atomic::AtomicBool::new(true)));
        // A tenant's slow compile: ready all the same, and the verbose answer says it.
        h.plugin_loading("team-a", "slow", true, false);
        assert_eq!(
            h.answer(Probe::Readiness, Some("plugins"), false, &[])
                .status,
            200
        );
        let verbose = h.answer(Probe::Readiness, None, true, &[]);
        assert_eq!(verbose.status, 200);
        assert!(
            verbose
                .body
                .contains("info: tenant team-a: plugin slow loading"),
            "{}",
            verbose.body
        );
        // The host's own plugin loading: not ready until it has loaded.
        h.plugin_loading("", "webapp", true, true);
        assert_eq!(
            h.answer(Probe::Readiness, Some("plugins"), false, &[])
                .status,
            500
        );
        h.plugin_loading("", "webapp", false, true);
        assert_eq!(
            h.answer(Probe::Readiness, Some("plugins"), false, &[])
                .status,
            200
        );
        h.plugin_loading("team-a", "slow", false, false);
        assert!(h.loading().is_empty());
    }

    #[test]
    fn a_sharded_replica_runs_controllers_whoever_leads_its_ring() {
        let h = Health::default();
        h.set_sharded();
        h.set_leader(false);
        assert!(
            h.leader(),
            "the ring's election decides only the host's own writes"
        );
        let plain = Health::default();
        plain.set_leader(true);
        plain.set_leader(false);
        assert!(!plain.leader());
    }

    #[test]
    fn a_failing_check_fails_its_probe_verbosely_and_can_be_excluded() {
        let h = Health::default();
        h.add_check(
            Probe::Readiness,
            "blueprint",
            Arc::new(|| Err("not loaded".into())),
        );
        assert_eq!(
            h.answer(Probe::Readiness, None, false, &[]),
            Answer::new(
                500,
                "[-]blueprint failed: reason withheld\n[+]ping ok\nhealthz check failed\n"
            )
        );
        assert_eq!(
            h.answer(Probe::Readiness, Some("blueprint"), false, &[]),
            Answer::new(500, "internal server error: reason withheld\n"),
            "the reason is logged, not served, for one check as for all"
        );
        assert_eq!(
            h.answer(Probe::Readiness, None, true, &["blueprint", "other"]),
            Answer::new(
                200,
                "[+]blueprint excluded: ok\n[+]ping ok\nwarn: some health checks cannot be excluded: no matches for \"other\"\nhealthz check passed\n"
            )
        );
        assert_eq!(
            h.answer(Probe::Readiness, None, false, &["blueprint"]),
            Answer::new(200, "ok")
        );
        assert_eq!(
            h.answer(Probe::Liveness, None, false, &[]).status,
            200,
            "only readiness has it"
        );
    }
}
