//! Rules a parsed Blueprint must follow; every broken rule is reported, not just the first.

mod capabilities;
mod crd;
mod external;
mod managed;
pub(crate) mod names;
mod plugin;
mod reconcile;
mod refs;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::Hash;
use std::path::Path;
use std::time::Duration;

use super::crd::CrdSpec;
use super::error::{BlueprintError, Problem};
use super::model::{API_VERSION, Blueprint, KIND};
use super::runtime::RuntimeSpec;

use names::{is_dns_label, is_dns_subdomain};

/// Most workers one CRD may ask for.
const MAX_WORKERS: u32 = 1000;

/// Collects problems for one file and, optionally, one CRD.
struct Report<'a> {
    file: &'a Path,
    crd: Option<&'a str>,
    problems: Vec<Problem>,
}

impl<'a> Report<'a> {
    fn new(file: &'a Path, crd: Option<&'a str>) -> Self {
        Report {
            file,
            crd,
            problems: Vec::new(),
        }
    }

    fn add(&mut self, field: impl Into<String>, message: impl Into<String>) {
        self.problems
            .push(Problem::new(self.file, self.crd, field, message));
    }

    fn check(&mut self, ok: bool, field: impl Into<String>, message: impl Into<String>) {
        if !ok {
            self.add(field, message);
        }
    }
}

impl Blueprint {
    /// Checks every rule on this Blueprint as a whole (header, runtime, CRDs).
    ///
    /// # Errors
    /// [`BlueprintError::Invalid`] with every problem found.
    pub fn validate(&self) -> Result<(), BlueprintError> {
        let problems = blueprint(self);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(BlueprintError::Invalid { problems })
        }
    }
}

/// Every rule on one Blueprint.
pub(super) fn blueprint(bp: &Blueprint) -> Vec<Problem> {
    let mut problems = document(bp);
    problems.extend(crds(&bp.spec.crds));
    problems
}

/// The rules on one document apart from its CRDs: header and `spec.runtime`.
pub(super) fn document(bp: &Blueprint) -> Vec<Problem> {
    let mut r = Report::new(&bp.source, None);
    r.check(
        bp.api_version == API_VERSION,
        "apiVersion",
        format!("must be {API_VERSION}, not {:?}", bp.api_version),
    );
    r.check(
        bp.kind == KIND,
        "kind",
        format!("must be {KIND}, not {:?}", bp.kind),
    );
    r.check(
        is_dns_subdomain(&bp.metadata.name),
        "metadata.name",
        "must be a lowercase DNS subdomain (e.g. demo)",
    );
    runtime(&mut r, &bp.spec.runtime);
    if let Some(why) = bp.spec.service_account.as_ref().and_then(|sa| sa.problem()) {
        r.add("spec.serviceAccount", why.to_string());
    }
    r.problems
}

fn runtime(r: &mut Report<'_>, rt: &RuntimeSpec) {
    for (i, name) in rt.finalizers.names.iter().enumerate() {
        r.check(
            name.contains('/') && names::is_qualified_name(name),
            format!("spec.runtime.finalizers.names[{i}]"),
            format!("{name:?} must be a domain-qualified name like example.com/cleanup"),
        );
    }
    check_workers(r, rt.workers, "spec.runtime.workers");
    r.check(
        rt.backoff.base <= rt.backoff.max,
        "spec.runtime.backoff",
        "base must not be longer than max",
    );
    r.check(
        rt.min_requeue >= std::time::Duration::from_millis(100),
        "spec.runtime.minRequeue",
        "must be at least 100ms: a shorter requeue lets a reconciler make a write storm",
    );
    if let Some(resync) = rt.resync {
        r.check(
            resync >= std::time::Duration::from_secs(1),
            "spec.runtime.resync",
            "must be at least 1s: a resync reconciles every CR again",
        );
    }
    let le = &rt.leader_election;
    r.check(
        is_dns_subdomain(&le.lease_name),
        "spec.runtime.leaderElection.leaseName",
        "must be a lowercase DNS subdomain",
    );
    if let Some(ns) = &le.namespace {
        r.check(
            is_dns_label(ns),
            "spec.runtime.leaderElection.namespace",
            "must be a lowercase DNS label",
        );
    }
    r.check(
        le.lease_duration > le.renew_deadline,
        "spec.runtime.leaderElection.renewDeadline",
        "must be shorter than leaseDuration",
    );
    r.check(
        le.renew_deadline > le.retry_period,
        "spec.runtime.leaderElection.retryPeriod",
        "must be shorter than renewDeadline",
    );
    let sharding = &rt.sharding;
    // Member Leases are `<ring>-m-<16 hex digits>`: the ring leaves room for the suffix.
    r.check(
        is_dns_label(&sharding.ring) && sharding.ring.len() <= 40,
        "spec.runtime.sharding.ring",
        "must be a lowercase DNS label of at most 40 characters",
    );
    r.check(
        !(sharding.enabled && le.enabled),
        "spec.runtime.sharding.enabled",
        "cannot be on with leaderElection: a sharded host runs on every replica, leader election would idle all but one",
    );
}

/// The value first recorded under `key`, recording `value` when there is none.
fn first_seen<K: Eq + Hash, V: Copy>(seen: &mut HashMap<K, V>, key: K, value: V) -> Option<V> {
    match seen.entry(key) {
        Entry::Occupied(e) => Some(*e.get()),
        Entry::Vacant(e) => {
            e.insert(value);
            None
        }
    }
}

fn check_workers(r: &mut Report<'_>, workers: u32, field: &str) {
    r.check(
        (1..=MAX_WORKERS).contains(&workers),
        field,
        format!("must be between 1 and {MAX_WORKERS}"),
    );
}

/// The rules on a list of CRDs (each named by its own file), including duplicates.
pub(super) fn crds(crds: &[CrdSpec]) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut by_kind: HashMap<(&str, &str), &CrdSpec> = HashMap::new();
    let mut by_name: HashMap<String, &CrdSpec> = HashMap::new();
    // kubectl resolves a short name across every group: one name, one type.
    let mut by_short_name: HashMap<&str, &CrdSpec> = HashMap::new();
    for c in crds {
        problems.extend(crd::check(c));
        let mut r = Report::new(&c.source.file, Some(&c.kind));
        if let Some(first) = first_seen(&mut by_kind, (&c.group, &c.kind), c) {
            r.add(
                c.source.field(),
                format!(
                    "{} {} is declared twice (first in {} {})",
                    c.group,
                    c.kind,
                    first.source.file.display(),
                    first.source.field()
                ),
            );
        } else if let Some(first) = first_seen(&mut by_name, c.crd_name(), c) {
            r.add(
                format!("{}.plural", c.source.field()),
                format!(
                    "the CRD name {} is already taken by crd {} ({} {})",
                    c.crd_name(),
                    first.kind,
                    first.source.file.display(),
                    first.source.field()
                ),
            );
        }
        for (i, short) in c.short_names.iter().enumerate() {
            if let Some(first) = first_seen(&mut by_short_name, short.as_str(), c) {
                r.add(
                    format!("{}.shortNames[{i}]", c.source.field()),
                    format!(
                        "the short name {short:?} is already taken by crd {} ({} {})",
                        first.kind,
                        first.source.file.display(),
                        first.source.field()
                    ),
                );
            }
        }
        problems.extend(r.problems);
    }
    problems
}

/// Upper bound of every plugin deadline and call timeout.
const MAX_CALL_TIME: Duration = Duration::from_secs(300);

#[cfg(test)]
mod tests {
    use crate::error::BlueprintError;
    use crate::load::{from_str, load};

    /// A Blueprint with the given `spec.crds` entries, one flow mapping per line.
    pub(super) fn with_crds(crds: &[&str]) -> String {
        let mut text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: demo }\nspec:\n  crds:\n".to_string();
        for crd in crds {
            text.push_str(&format!("    - {crd}\n"));
        }
        text
    }

    /// Where the problems of [`reconcile`]'s CRD are reported.
    pub(super) const AT: &str = "web.yaml: crd WebApp: spec.crds[0].reconcile";

    /// Every problem line for a Blueprint whose one CRD, `WebApp`, has `block` as its
    /// `reconcile`.
    pub(super) fn reconcile(block: &str) -> Vec<String> {
        lines(&with_crds(&[&format!(
            "{{ group: demo.inrun.dev, version: v1, kind: WebApp, reconcile: {block} }}"
        )]))
    }

    /// Every problem line for `text`, read as `web.yaml`.
    pub(super) fn lines(text: &str) -> Vec<String> {
        match from_str(text, "web.yaml") {
            Ok(_) => panic!("expected the Blueprint to be refused:\n{text}"),
            Err(err) => err.problems().iter().map(ToString::to_string).collect(),
        }
    }

    #[test]
    fn the_header_must_name_a_blueprint() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: { name: Demo }\n";
        assert_eq!(
            lines(text),
            [
                "web.yaml: apiVersion: must be inrun.dev/v1alpha1, not \"v1\"",
                "web.yaml: kind: must be Blueprint, not \"ConfigMap\"",
                "web.yaml: metadata.name: must be a lowercase DNS subdomain (e.g. demo)",
            ]
        );
    }

    #[test]
    fn a_crd_declared_twice_is_refused() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp }",
            "{ group: demo.inrun.dev, version: v2, kind: WebApp }",
        ]);
        assert_eq!(
            lines(&text),
            [
                "web.yaml: crd WebApp: spec.crds[1]: demo.inrun.dev WebApp is declared twice (first in web.yaml spec.crds[0])"
            ]
        );
    }

    #[test]
    fn a_plural_taken_by_another_crd_is_refused() {
        let text = with_crds(&[
            "{ group: demo.inrun.dev, version: v1, kind: WebApp }",
            "{ group: demo.inrun.dev, version: v1, kind: Site, plural: webapps }",
        ]);
        let got = lines(&text);
        assert_eq!(got.len(), 1);
        assert!(got[0].starts_with("web.yaml: crd Site: spec.crds[1].plural: the CRD name webapps.demo.inrun.dev is already taken by crd WebApp"), "{}", got[0]);
    }

    #[test]
    fn runtime_settings_are_checked() {
        let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: demo }\nspec:\n  runtime:\n    workers: 0\n    finalizers: { names: [cleanup] }\n    backoff: { base: 10m, max: 5m }\n    leaderElection: { leaseDuration: 5s, renewDeadline: 10s }\n";
        assert_eq!(
            lines(text),
            [
                "web.yaml: spec.runtime.finalizers.names[0]: \"cleanup\" must be a domain-qualified name like example.com/cleanup",
                "web.yaml: spec.runtime.workers: must be between 1 and 1000",
                "web.yaml: spec.runtime.backoff: base must not be longer than max",
                "web.yaml: spec.runtime.leaderElection.renewDeadline: must be shorter than leaseDuration",
            ]
        );
    }

    #[test]
    fn sharding_needs_a_short_ring_name_and_no_leader_election() {
        let text = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: demo }\nspec:\n  runtime:\n    sharding: { enabled: true, ring: Web_Ring }\n    leaderElection: { enabled: true }\n";
        assert_eq!(
            lines(text),
            [
                "web.yaml: spec.runtime.sharding.ring: must be a lowercase DNS label of at most 40 characters",
                "web.yaml: spec.runtime.sharding.enabled: cannot be on with leaderElection: a sharded host runs on every replica, leader election would idle all but one",
            ]
        );
        let ok = "apiVersion: inrun.dev/v1alpha1\nkind: Blueprint\nmetadata: { name: demo }\nspec:\n  runtime:\n    sharding: { enabled: true }\n    leaderElection: { namespace: ops, leaseDuration: 6s, renewDeadline: 4s, retryPeriod: 1s }\n";
        let spec = from_str(ok, "web.yaml").expect("valid").spec.runtime;
        assert!(spec.sharding.enabled);
        assert_eq!(spec.sharding.ring, "inrun");
    }

    #[test]
    fn every_problem_in_every_crd_is_collected() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/blueprints/bad/many-problems.yaml");
        let err = load(&path).expect_err("many problems");
        let file = path.display().to_string();
        let got: Vec<String> = err.problems().iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                format!(
                    "{file}: crd WebApp: spec.crds[0].reconcile: default: false needs a constructor, a remote or a package"
                ),
                format!(
                    "{file}: crd WebApp: spec.crds[0].reconcile.hooks: hooks adjust what templates render, so they need default: true"
                ),
                format!(
                    "{file}: crd Job: spec.crds[1].reconcile: set only one of constructor and remote"
                ),
                format!(
                    "{file}: crd WebApp: spec.crds[2]: demo.inrun.dev WebApp is declared twice (first in {file} spec.crds[0])"
                ),
            ]
        );
        assert_eq!(err.to_string(), got.join("\n"));
        assert!(matches!(err, BlueprintError::Invalid { .. }));
    }

    #[test]
    fn a_blueprint_built_in_code_can_be_validated() {
        let text = with_crds(&["{ group: demo.inrun.dev, version: v1, kind: WebApp }"]);
        let mut bp = from_str(&text, "web.yaml").expect("valid");
        assert!(bp.validate().is_ok());
        bp.spec.crds[0].workers = Some(0);
        let err = bp.validate().expect_err("zero workers");
        assert_eq!(
            err.to_string(),
            "web.yaml: crd WebApp: spec.crds[0].workers: must be between 1 and 1000"
        );
    }
}
