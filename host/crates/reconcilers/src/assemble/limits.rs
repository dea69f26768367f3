//! The operator's policy a Blueprint is held to, and the plugin limits it yields: the
//! Blueprint's own, host defaults for what it leaves out, each held under a ceiling.

use std::time::Duration;

use inrun_blueprint::{self as blueprint, PluginLimits};
use inrun_wasm::Limits;

/// How large a tenant's Blueprint may be: each CRD is a cluster-wide watch of its CRs and
/// one per child kind, each worker a task, each plugin a compile and a cache entry, each
/// external call up to minutes of a pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TenantSize {
    /// CRDs.
    pub crds: usize,
    /// Distinct plugin locations.
    pub plugins: usize,
    /// Workers, summed over its CRDs.
    pub workers: usize,
    /// External calls in one reconcile block.
    pub external_calls: usize,
    /// Plugin module sizes and bytes loaded an hour.
    pub compile: crate::plugins::CompileLimits,
}

impl Default for TenantSize {
    fn default() -> Self {
        TenantSize {
            crds: 20,
            plugins: 20,
            workers: 100,
            external_calls: 8,
            compile: crate::plugins::CompileLimits::default(),
        }
    }
}

/// [`Policy::package_deadline`]'s default: six hours.
pub const DEFAULT_PACKAGE_CEILING: Duration = Duration::from_secs(6 * 3600);

/// The operator's rules every Blueprint is held to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// Limits for fields a Blueprint leaves out.
    pub defaults: Limits,
    /// Limits no Blueprint may exceed (`inrun run --max-plugin-*`).
    pub ceilings: Limits,
    /// The ceilings of Blueprint resources (tenants): [`Limits::tenant_ceilings`], or the
    /// operator's `--max-plugin-*` where set.
    pub tenant_ceilings: Limits,
    /// The longest deadline a package call may be given (`inrun run
    /// --max-package-deadline`): packages wait on backends, so hours, not the seconds of
    /// a Request/Result call.
    pub package_deadline: Duration,
    /// Writes a second a tenant (a `--tenants` file or a Blueprint resource, not the
    /// operator's `--blueprint`) may make to the API server; `0`: no limit.
    pub tenant_api_writes: u32,
    /// How large a tenant's Blueprint may be (the operator's `--blueprint` is not held to
    /// it).
    pub tenant_size: TenantSize,
    /// Whether plugin locations may be local paths. Off for Blueprints that arrive as
    /// custom resources: a tenant must not make the host read its files.
    pub local_plugins: bool,
    /// Whether the Blueprint may grant its plugins capabilities (cluster reads, HTTP) and
    /// adopt objects it did not create (`managedResources[].adopt`). Off by default for
    /// Blueprints that arrive as custom resources: whoever can create one could otherwise
    /// read, or take over, anything the host's identity can.
    pub capabilities: bool,
    /// Where the Blueprint's calls may go (remote, external, plugin HTTP); `None`: the
    /// Blueprint is the operator's own and may call anywhere.
    pub egress: Option<crate::egress::Egress>,
    /// Whether a `secretRef` may name a namespace other than the CR's. Off for Blueprint
    /// resources: whoever can create one could otherwise send any Secret the host can
    /// read, as a bearer token or a connection URL, to an endpoint of its choosing.
    pub foreign_secrets: bool,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            defaults: Limits::default(),
            ceilings: Limits::ceilings(),
            tenant_ceilings: Limits::tenant_ceilings(),
            package_deadline: DEFAULT_PACKAGE_CEILING,
            tenant_api_writes: 0,
            tenant_size: TenantSize::default(),
            local_plugins: true,
            capabilities: true,
            egress: None,
            foreign_secrets: true,
        }
    }
}

/// Turns a blueprint's plugin limits into the engine's, filling in the host defaults.
pub fn limits(spec: &PluginLimits) -> Limits {
    limits_within(spec, &Policy::default()).0
}

/// Turns a blueprint's plugin limits into the engine's under `policy`: defaults for fields
/// left out (never above a ceiling), and, for each field above its ceiling, the field's
/// name and why, so the assembly can refuse it.
pub fn limits_within(
    spec: &PluginLimits,
    policy: &Policy,
) -> (Limits, Vec<(&'static str, String)>) {
    let (d, c) = (policy.defaults, policy.ceilings);
    let mut over = Vec::new();
    let deadline = Field {
        name: "deadline",
        given: spec.deadline.map(|d| d.as_millis()),
        default: d.deadline.as_millis(),
        ceiling: c.deadline.as_millis(),
        show: |v| inrun_contract::duration::format(Duration::from_millis(to_u64(v))),
    };
    let memory = Field::bytes("memory", spec.memory, d.memory_bytes, c.memory_bytes);
    let output = Field::bytes(
        "outputSize",
        spec.output_size,
        d.output_bytes,
        c.output_bytes,
    );
    let resources = Field {
        name: "resources",
        given: spec.resources.map(u128::from),
        default: d.max_resources as u128,
        ceiling: c.max_resources as u128,
        show: |v| v.to_string(),
    };
    let reuse = Field {
        name: "reuse.calls",
        given: spec.reuse.map(|r| u128::from(r.calls)),
        default: u128::from(d.reuse_calls),
        ceiling: u128::from(c.reuse_calls),
        show: |v| v.to_string(),
    };
    let limits = Limits {
        deadline: Duration::from_millis(to_u64(deadline.pick(&mut over))),
        memory_bytes: to_usize(memory.pick(&mut over)),
        output_bytes: to_usize(output.pick(&mut over)),
        max_resources: to_usize(resources.pick(&mut over)),
        reuse_calls: u32::try_from(reuse.pick(&mut over)).unwrap_or(u32::MAX),
    };
    (limits, over)
}

/// One limit as the Blueprint gives it, with the host's default and ceiling, in one unit
/// (milliseconds, bytes or a count).
struct Field {
    name: &'static str,
    given: Option<u128>,
    default: u128,
    ceiling: u128,
    /// The value as the Blueprint would write it, for the refusal.
    show: fn(u128) -> String,
}

impl Field {
    /// A size in bytes, counted as the host holds it (`usize`), as the engine's limits do.
    fn bytes(
        name: &'static str,
        given: Option<blueprint::Quantity>,
        default: usize,
        ceiling: usize,
    ) -> Self {
        Field {
            name,
            given: given.map(|q| to_usize(u128::from(q.bytes())) as u128),
            default: default as u128,
            ceiling: ceiling as u128,
            show: show_size,
        }
    }

    /// The value to use: the given one, else the default, never above the ceiling; a given
    /// value above it is told in `over`.
    fn pick(&self, over: &mut Vec<(&'static str, String)>) -> u128 {
        match self.given {
            Some(v) if v > self.ceiling => {
                over.push((
                    self.name,
                    format!(
                        "{} exceeds the host's ceiling of {}",
                        (self.show)(v),
                        (self.show)(self.ceiling)
                    ),
                ));
                self.ceiling
            }
            Some(v) => v,
            None => self.default.min(self.ceiling),
        }
    }
}

/// `v` as a `u64`, `u64::MAX` when it does not fit.
fn to_u64(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// `v` as a `usize`, `usize::MAX` when it does not fit.
fn to_usize(v: u128) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

/// A byte count as a Kubernetes quantity (`32Mi`).
fn show_size(v: u128) -> String {
    blueprint::Quantity::from_bytes(to_u64(v)).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(text: &str) -> PluginLimits {
        serde_yaml_ng::from_str(text).expect("limits")
    }

    #[test]
    fn limits_above_a_ceiling_are_named_and_defaults_never_exceed_one() {
        let policy = Policy {
            defaults: Limits::default(),
            ceilings: Limits {
                deadline: Duration::from_secs(1),
                memory_bytes: 32 << 20,
                output_bytes: 1 << 20,
                max_resources: 10,
                reuse_calls: 1,
            },
            tenant_ceilings: Limits::tenant_ceilings(),
            package_deadline: DEFAULT_PACKAGE_CEILING,
            tenant_api_writes: 0,
            tenant_size: TenantSize::default(),
            local_plugins: true,
            capabilities: true,
            egress: None,
            foreign_secrets: true,
        };
        let (limits, over) = limits_within(&spec("{ deadline: 5s, memory: 16Mi }"), &policy);
        assert_eq!(over.len(), 1, "{over:?}");
        assert_eq!(over[0].0, "deadline");
        assert_eq!(over[0].1, "5s exceeds the host's ceiling of 1s");
        assert_eq!(limits.memory_bytes, 16 << 20);
        // Defaults (2s, 100 resources) are lowered to the ceilings.
        let (limits, over) = limits_within(&spec("{}"), &policy);
        assert!(over.is_empty());
        assert_eq!(limits.deadline, Duration::from_secs(1));
        assert_eq!(limits.max_resources, 10);
        let (_, over) = limits_within(&spec("{ memory: 64Mi, resources: 11 }"), &policy);
        let fields: Vec<_> = over.iter().map(|o| o.0).collect();
        assert_eq!(fields, ["memory", "resources"]);
        assert_eq!(over[0].1, "64Mi exceeds the host's ceiling of 32Mi");
    }

    #[test]
    fn without_ceilings_a_blueprint_gets_what_it_asks_within_the_schema() {
        let (limits, over) =
            limits_within(&spec("{ deadline: 4m, memory: 2Gi }"), &Policy::default());
        assert!(over.is_empty());
        assert_eq!(limits.deadline, Duration::from_secs(240));
        assert_eq!(limits.memory_bytes, 2 << 30);
    }

    #[test]
    fn reuse_is_off_unless_the_blueprint_asks_and_refused_above_the_ceiling() {
        let policy = Policy::default();
        assert_eq!(limits_within(&spec("{}"), &policy).0.reuse_calls, 1);
        let asked = spec("{ reuse: { calls: 50 } }");
        assert_eq!(limits_within(&asked, &policy).0.reuse_calls, 50);
        let no_reuse = Policy {
            ceilings: Limits {
                reuse_calls: 1,
                ..Limits::ceilings()
            },
            ..policy
        };
        let (limits, over) = limits_within(&asked, &no_reuse);
        assert_eq!(limits.reuse_calls, 1);
        assert_eq!(
            over,
            [(
                "reuse.calls",
                "50 exceeds the host's ceiling of 1".to_string()
            )]
        );
    }
}
