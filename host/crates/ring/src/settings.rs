//! Host-wide settings of `inrun run` — the health port, this replica's name, leader
//! election — resolved in one place from the command line, the host's own Blueprint
//! (`--blueprint`; never a tenant's, which may not move the host's port or lease) and the
//! environment.

use inrun_blueprint::RuntimeSpec;

use crate::leader::LeaderConfig;
use crate::sharding::keeper::KeeperConfig;
use crate::sharding::members::Ring;

/// What the command line says; `None` and `false` defer to the Blueprint.
#[derive(Debug, Clone, Default)]
pub struct HostFlags {
    /// `--health-port`: overrides `runtime.healthPort`.
    pub health_port: Option<u16>,
    /// `--leader-elect`: turns election on whatever the Blueprint says.
    pub leader_elect: bool,
    /// `--leader-elect-namespace`: the Lease's namespace when the Blueprint names none.
    pub leader_elect_namespace: Option<String>,
    /// `--leader-elect-lease`: the Lease's name, over `runtime.leaderElection.leaseName`
    /// (two hosts in one namespace each need their own).
    pub leader_elect_lease: Option<String>,
    /// `--sharding`: turns sharding on whatever the Blueprint says.
    pub sharding: bool,
    /// `--sharding-ring`: the ring's name, over `runtime.sharding.ring`.
    pub sharding_ring: Option<String>,
    /// `--sharding-watch`: over `runtime.sharding.watch`.
    pub sharding_watch: Option<inrun_blueprint::ShardWatch>,
    /// The namespace of the kubeconfig's context (in a cluster, the pod's own), as kubectl
    /// takes it: the Lease's when neither the Blueprint, the flag nor `$POD_NAMESPACE`
    /// names one.
    pub context_namespace: Option<String>,
}

/// The settings `inrun run` runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostSettings {
    /// The health port (0: any free port).
    pub health_port: u16,
    /// This replica's name ([`replica_name`]), as the controllers' `Shared`'s `instance`.
    pub instance: String,
    /// The Lease to hold before reconciling; `None` runs without election.
    pub leader: Option<LeaderConfig>,
    /// The ring this replica shares the CRs in; `None`: it serves every CR.
    pub sharding: Option<KeeperConfig>,
}

/// This replica's name in events and the Lease: `given` (`--identity`), else the host name
/// (`HOSTNAME` through `env`) and the process id. Known before any Blueprint is read, since
/// loading the host Blueprint already records events.
pub fn replica_name(given: Option<String>, env: impl Fn(&str) -> Option<String>) -> String {
    given.unwrap_or_else(|| {
        let host = env("HOSTNAME").unwrap_or_else(|| "inrun".into());
        format!("{host}-{}", std::process::id())
    })
}

/// The namespace a host keeps its Leases in (leader election, identity locks, rollout
/// records) when `given` (a flag, or the Blueprint) names none: `$POD_NAMESPACE` read
/// through `env` (empty counts as unset), else `context` — the kubeconfig context's
/// namespace, in a cluster the pod's own, as kubectl takes it — else `default`.
pub fn host_namespace(
    given: Option<String>,
    env: impl Fn(&str) -> Option<String>,
    context: Option<&str>,
) -> String {
    given
        .or_else(|| env("POD_NAMESPACE").filter(|n| !n.is_empty()))
        .or_else(|| context.map(str::to_string))
        .unwrap_or_else(|| "default".into())
}

impl HostSettings {
    /// Resolves `flags` over `host` (the `--blueprint` tenant's runtime section, `None`
    /// without one) for the replica named `instance`, reading `POD_NAMESPACE` through
    /// `env`.
    pub fn resolve(
        flags: HostFlags,
        instance: String,
        host: Option<&RuntimeSpec>,
        env: impl Fn(&str) -> Option<String>,
    ) -> HostSettings {
        let defaults = RuntimeSpec::default();
        let spec = host.unwrap_or(&defaults);
        let le = &spec.leader_election;
        let namespace = host_namespace(
            le.namespace.clone().or(flags.leader_elect_namespace),
            env,
            flags.context_namespace.as_deref(),
        );
        let sharding = (flags.sharding || spec.sharding.enabled).then(|| KeeperConfig {
            ring: Ring {
                name: flags
                    .sharding_ring
                    .unwrap_or_else(|| spec.sharding.ring.clone()),
                namespace: namespace.clone(),
                lease_duration: le.lease_duration,
            },
            identity: instance.clone(),
            renew_deadline: le.renew_deadline,
            retry_period: le.retry_period,
            max_releases: 16,
            watch: flags.sharding_watch.unwrap_or(spec.sharding.watch),
        });
        // Sharded replicas all work: none waits for a leader.
        let leader =
            (sharding.is_none() && (flags.leader_elect || le.enabled)).then(|| LeaderConfig {
                lease_name: flags
                    .leader_elect_lease
                    .unwrap_or_else(|| le.lease_name.clone()),
                namespace,
                identity: instance.clone(),
                lease_duration: le.lease_duration,
                renew_deadline: le.renew_deadline,
                retry_period: le.retry_period,
            });
        HostSettings {
            health_port: flags.health_port.unwrap_or(spec.health_port),
            instance,
            leader,
            sharding,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_namespace_is_the_flag_then_the_pods_then_the_contexts_then_default() {
        let none = |_: &str| None;
        let pod = |_: &str| Some("pod-ns".to_string());
        let empty = |_: &str| Some(String::new());
        assert_eq!(
            host_namespace(Some("flag".into()), pod, Some("ctx")),
            "flag"
        );
        assert_eq!(host_namespace(None, pod, Some("ctx")), "pod-ns");
        assert_eq!(host_namespace(None, empty, Some("ctx")), "ctx");
        assert_eq!(host_namespace(None, none, Some("ctx")), "ctx");
        assert_eq!(host_namespace(None, none, None), "default");
    }

    fn env(name: &str) -> Option<String> {
        match name {
            "HOSTNAME" => Some("pod-7".into()),
            "POD_NAMESPACE" => Some("ops".into()),
            _ => None,
        }
    }

    #[test]
    fn sharding_takes_the_lease_namespace_and_timings_and_turns_election_off() {
        let mut spec = RuntimeSpec::default();
        spec.leader_election.renew_deadline = std::time::Duration::from_secs(4);
        let flags = HostFlags {
            sharding: true,
            leader_elect: true,
            sharding_ring: Some("web".into()),
            ..HostFlags::default()
        };
        let s = HostSettings::resolve(flags, "me".into(), Some(&spec), env);
        assert_eq!(s.leader, None, "sharded replicas all work");
        let ring = s.sharding.expect("sharding on");
        assert_eq!(
            (ring.ring.name.as_str(), ring.ring.namespace.as_str()),
            ("web", "ops")
        );
        assert_eq!(ring.renew_deadline, std::time::Duration::from_secs(4));
        assert_eq!(ring.identity, "me");
        let off = HostSettings::resolve(HostFlags::default(), "me".into(), Some(&spec), env);
        assert_eq!(off.sharding, None);
    }

    #[test]
    fn without_a_host_blueprint_the_defaults_and_flags_decide() {
        let s = HostSettings::resolve(HostFlags::default(), replica_name(None, env), None, env);
        assert_eq!(s.health_port, RuntimeSpec::default().health_port);
        assert!(s.instance.starts_with("pod-7-"), "{}", s.instance);
        assert_eq!(replica_name(Some("me".into()), env), "me");
        assert_eq!(s.leader, None);
    }

    #[test]
    fn flags_override_the_blueprint_and_the_lease_namespace_falls_back_in_order() {
        let mut spec = RuntimeSpec {
            health_port: 9000,
            ..RuntimeSpec::default()
        };
        spec.leader_election.enabled = true;
        let flags = HostFlags {
            health_port: Some(0),
            ..HostFlags::default()
        };
        let s = HostSettings::resolve(flags.clone(), "me".into(), Some(&spec), env);
        assert_eq!(s.health_port, 0);
        let leader = s.leader.expect("election is on in the Blueprint");
        assert_eq!(
            (leader.identity.as_str(), leader.namespace.as_str()),
            ("me", "ops")
        );

        let given = HostFlags {
            leader_elect_namespace: Some("flag-ns".into()),
            ..flags.clone()
        };
        let s = HostSettings::resolve(given, "me".into(), Some(&spec), env);
        assert_eq!(s.leader.map(|l| l.namespace), Some("flag-ns".into()));

        spec.leader_election.namespace = Some("bp-ns".into());
        let s = HostSettings::resolve(flags, "me".into(), Some(&spec), |_| None);
        assert_eq!(s.leader.map(|l| l.namespace), Some("bp-ns".into()));
    }

    #[test]
    fn the_lease_flag_names_the_lease_over_the_blueprint_and_turns_nothing_on() {
        let mut spec = RuntimeSpec::default();
        spec.leader_election.lease_name = "from-blueprint".into();
        let flags = HostFlags {
            leader_elect_lease: Some("release-a".into()),
            ..HostFlags::default()
        };
        let off = HostSettings::resolve(flags.clone(), "me".into(), Some(&spec), env);
        assert_eq!(
            off.leader, None,
            "naming the Lease does not turn election on"
        );

        spec.leader_election.enabled = true;
        let s = HostSettings::resolve(flags, "me".into(), Some(&spec), env);
        assert_eq!(s.leader.map(|l| l.lease_name), Some("release-a".into()));
        let s = HostSettings::resolve(HostFlags::default(), "me".into(), Some(&spec), env);
        assert_eq!(
            s.leader.map(|l| l.lease_name),
            Some("from-blueprint".into())
        );
    }

    #[test]
    fn the_flag_turns_election_on_with_the_default_lease() {
        let flags = HostFlags {
            leader_elect: true,
            ..HostFlags::default()
        };
        let s = HostSettings::resolve(flags, "me".into(), None, |_| None);
        let leader = s.leader.expect("--leader-elect");
        assert_eq!(leader.namespace, "default");
        assert_eq!(
            leader.lease_name,
            RuntimeSpec::default().leader_election.lease_name
        );
    }
}
