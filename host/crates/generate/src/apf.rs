//! API Priority and Fairness for the host and its tenants (`flowcontrol.apiserver.k8s.io/v1`):
//! a priority level and FlowSchema for the host's own ServiceAccount, and one for the
//! tenants' ServiceAccounts in which each tenant is a flow of its own.
//!
//! The API server classifies a request *after* impersonation, so what the host does while
//! acting as a tenant's ServiceAccount counts as that ServiceAccount's: a FlowSchema that
//! matches the tenants' ServiceAccounts with `distinguisherMethod: ByUser` queues each
//! tenant apart and serves their queues in turn (fair queuing), and one that matches the
//! host's own ServiceAccount, at a lower `matchingPrecedence` (which wins), keeps the host
//! in a level of its own with more shares. Without these objects both fall in the
//! suggested `service-accounts` schema (`workload-low`), beside every workload's
//! ServiceAccount in the cluster.

use inrun_blueprint::{AccountPattern, ServiceAccountRef};
use serde_json::{Value, json};

/// The API version of the objects.
pub const API_VERSION: &str = "flowcontrol.apiserver.k8s.io/v1";

/// The host's FlowSchema's `matchingPrecedence`: after every suggested schema of the
/// cluster's own components (the last of them, `kube-system-service-accounts`, is 900), so
/// that it shadows none of them, and before `service-accounts` (9000), which would
/// otherwise take the host.
pub const HOST_PRECEDENCE: u32 = 1000;

/// The tenants' FlowSchema's `matchingPrecedence`: after the host's, so that a host whose
/// ServiceAccount lives in a namespace kept for tenants' identities is still the host.
pub const TENANTS_PRECEDENCE: u32 = 1100;

/// The most entropy the API server's shuffle sharding takes: `ceil(log2(queues)) ×
/// handSize` may not exceed it (its validation refuses the level otherwise).
const MAX_HASH_BITS: f64 = 60.0;

/// One priority level's settings (a `Limited` level whose requests queue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Level {
    /// `nominalConcurrencyShares`: the level's part of the server's concurrency, in
    /// proportion to every level's shares (the suggested levels hold 245 together).
    pub shares: u32,
    /// `lendablePercent`: how much of its nominal seats others may borrow while it idles.
    pub lendable_percent: u32,
    /// `borrowingLimitPercent`: how many seats it may borrow from idle levels, as a
    /// percentage of its own; `None`: no limit.
    pub borrowing_limit_percent: Option<u32>,
    /// `queues`: how many queues its flows are shuffle-sharded over.
    pub queues: u32,
    /// `handSize`: how many of them each flow may use.
    pub hand_size: u32,
    /// `queueLengthLimit`: requests one queue holds before the API server answers 429.
    pub queue_length_limit: u32,
}

impl Level {
    /// The host's level: as many shares as the suggested `workload-high` (where the
    /// cluster's own controllers run), twice the tenants' together, so the host's own
    /// reads and writes (consent checks, the Leases, the files it serves as itself) stay
    /// ahead of any tenant's; half of it lendable, since the host idles most of the time.
    /// One flow (the host is one identity, all its replicas too), so one queue.
    pub fn host() -> Level {
        Level {
            shares: 40,
            lendable_percent: 50,
            borrowing_limit_percent: None,
            queues: 1,
            hand_size: 1,
            queue_length_limit: 200,
        }
    }

    /// The tenants' level, shared by all of them: narrow on purpose — one share (3 of a
    /// default API server's 600 seats) and none borrowed from idle levels — so that a
    /// tenant that storms the API server queues behind its own requests (one flow each)
    /// instead of taking the server's CPU, which every tenant needs: with the shares of
    /// `global-default` (20) and borrowing, nothing queues on a quiet cluster and a storm
    /// costs another tenant twice its latency (the tenancy bench's write-storm rows). A
    /// tenant's host traffic is bounded by its write budget anyway; raise the shares
    /// (`--tenant-shares`) on an API server with cores to spare. Half lendable; queues as
    /// the suggested workload levels (128 queues, hands of 6, 50 requests a queue), so
    /// that tenants rarely share a queue and a tenant whose queues fill is refused (429:
    /// that reconcile fails and is retried with backoff) without holding up another's.
    pub fn tenants() -> Level {
        Level {
            shares: 1,
            lendable_percent: 50,
            borrowing_limit_percent: Some(0),
            queues: 128,
            hand_size: 6,
            queue_length_limit: 50,
        }
    }

    /// What the API server would refuse in this level, if anything.
    fn problem(&self) -> Option<String> {
        if self.shares == 0 {
            return Some("shares must be at least 1".into());
        }
        if self.lendable_percent > 100 {
            return Some(format!(
                "lendable percent {} is more than 100",
                self.lendable_percent
            ));
        }
        if self.queues == 0 || self.hand_size == 0 || self.queue_length_limit == 0 {
            return Some("queues, hand size and queue length limit must be at least 1".into());
        }
        if self.hand_size > self.queues {
            return Some(format!(
                "hand size {} is more than the {} queues",
                self.hand_size, self.queues
            ));
        }
        let entropy = (f64::from(self.queues).log2() * f64::from(self.hand_size)).ceil();
        if entropy > MAX_HASH_BITS {
            return Some(format!(
                "{} queues with hands of {} need {entropy} bits of hash, more than the API server's {MAX_HASH_BITS}",
                self.queues, self.hand_size
            ));
        }
        None
    }

    /// The `spec` of its PriorityLevelConfiguration.
    fn spec(&self) -> Value {
        let mut limited = json!({
            "nominalConcurrencyShares": self.shares,
            "lendablePercent": self.lendable_percent,
            "limitResponse": {
                "type": "Queue",
                "queuing": {
                    "queues": self.queues,
                    "handSize": self.hand_size,
                    "queueLengthLimit": self.queue_length_limit,
                },
            },
        });
        if let Some(limit) = self.borrowing_limit_percent {
            limited["borrowingLimitPercent"] = json!(limit);
        }
        json!({"type": "Limited", "limited": limited})
    }
}

/// What `inrun generate apf` is given: the host's ServiceAccount, the tenants'
/// ServiceAccounts (the same flags `inrun generate rbac` and `inrun run` take for them),
/// and the two levels.
#[derive(Debug, Clone)]
pub struct ApfOptions {
    /// The objects' names: `<name>-host` and `<name>-tenants`.
    pub name: String,
    /// Namespace of the host's ServiceAccount (`-n`).
    pub namespace: String,
    /// The ServiceAccount the host runs as.
    pub service_account: String,
    /// Tenants' ServiceAccounts named one by one (`--impersonate`).
    pub impersonate: Vec<ServiceAccountRef>,
    /// The ServiceAccounts of Blueprint resources that name none
    /// (`--default-tenant-service-account`): every ServiceAccount of its namespace, which
    /// the operator keeps for tenants' identities (a FlowSchema names a ServiceAccount
    /// exactly or by `*`, not by a prefix).
    pub tenant_accounts: Option<AccountPattern>,
    /// Namespaces kept for tenants' identities (`--tenant-identity-namespaces`): every
    /// ServiceAccount in them.
    pub tenant_identity_namespaces: Vec<String>,
    /// The host's priority level.
    pub host: Level,
    /// The tenants' priority level.
    pub tenants: Level,
}

impl Default for ApfOptions {
    fn default() -> Self {
        ApfOptions {
            name: "inrun".into(),
            namespace: "inrun-system".into(),
            service_account: "inrun".into(),
            impersonate: Vec::new(),
            tenant_accounts: None,
            tenant_identity_namespaces: Vec::new(),
            host: Level::host(),
            tenants: Level::tenants(),
        }
    }
}

/// Why the objects cannot be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApfError {
    /// No tenant's ServiceAccount is named: the tenants' FlowSchema would match nothing.
    #[error(
        "no tenant's ServiceAccount is named: give --default-tenant-service-account, --tenant-identity-namespaces or --impersonate, as for inrun run"
    )]
    NoTenants,
    /// A namespace or ServiceAccount the API server would refuse.
    #[error("ServiceAccount {sa}")]
    Account {
        /// The ServiceAccount, as `namespace/name`.
        sa: String,
        /// What is wrong with it.
        #[source]
        why: inrun_blueprint::AccountError,
    },
    /// A namespace of `--tenant-identity-namespaces` that is not one.
    #[error("tenant identity namespace {0:?} must be a lowercase DNS label")]
    Namespace(String),
    /// A level the API server would refuse.
    #[error("the {level} priority level: {why}")]
    Level {
        /// `host` or `tenants`.
        level: &'static str,
        /// What is wrong with it.
        why: String,
    },
}

/// The PriorityLevelConfigurations, then the FlowSchemas: the host's and the tenants'.
///
/// # Errors
/// [`ApfError::NoTenants`] when no tenant's ServiceAccount is named; the others when a
/// name or a level is one the API server would refuse.
pub fn manifests(options: &ApfOptions) -> Result<Vec<Value>, ApfError> {
    let host = ServiceAccountRef {
        namespace: options.namespace.clone(),
        name: options.service_account.clone(),
    };
    ServiceAccountRef::parse(&host.to_string()).map_err(|why| ApfError::Account {
        sa: host.to_string(),
        why,
    })?;
    let tenants = tenant_subjects(options)?;
    if tenants.is_empty() {
        return Err(ApfError::NoTenants);
    }
    for (level, settings) in [("host", &options.host), ("tenants", &options.tenants)] {
        if let Some(why) = settings.problem() {
            return Err(ApfError::Level { level, why });
        }
    }
    let (host_name, tenants_name) = names(&options.name);
    Ok(vec![
        priority_level(&host_name, &options.host),
        priority_level(&tenants_name, &options.tenants),
        flow_schema(
            &host_name,
            HOST_PRECEDENCE,
            None,
            vec![subject(&host.namespace, &host.name)],
        ),
        flow_schema(&tenants_name, TENANTS_PRECEDENCE, Some("ByUser"), tenants),
    ])
}

/// The host's and the tenants' object names.
pub fn names(name: &str) -> (String, String) {
    (format!("{name}-host"), format!("{name}-tenants"))
}

/// The tenants' FlowSchema subjects: every ServiceAccount of each namespace kept for
/// them (the default pattern's and `tenant_identity_namespaces`), then each one named
/// outside those namespaces; sorted, each once.
fn tenant_subjects(options: &ApfOptions) -> Result<Vec<Value>, ApfError> {
    let mut whole: Vec<&String> = options
        .tenant_accounts
        .iter()
        .map(|p| &p.namespace)
        .chain(&options.tenant_identity_namespaces)
        .collect();
    whole.sort();
    whole.dedup();
    for ns in &whole {
        // A namespace is valid where a ServiceAccount named in it is.
        let probe = ServiceAccountRef {
            namespace: (*ns).clone(),
            name: "probe".into(),
        };
        if probe.problem().is_some() {
            return Err(ApfError::Namespace((*ns).clone()));
        }
    }
    let mut named: Vec<&ServiceAccountRef> = options
        .impersonate
        .iter()
        .filter(|sa| !whole.contains(&&sa.namespace))
        .collect();
    named.sort();
    named.dedup();
    let mut subjects: Vec<Value> = whole.iter().map(|ns| subject(ns, "*")).collect();
    subjects.extend(named.iter().map(|sa| subject(&sa.namespace, &sa.name)));
    Ok(subjects)
}

/// A FlowSchema subject: the ServiceAccount `name` (`*`: any) in `namespace`.
fn subject(namespace: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}})
}

/// The labels the generated objects carry, as the generated RBAC's.
fn labels() -> Value {
    json!({"app.kubernetes.io/name": "inrun", "app.kubernetes.io/managed-by": "inrun"})
}

fn priority_level(name: &str, level: &Level) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "PriorityLevelConfiguration",
        "metadata": {"name": name, "labels": labels()},
        "spec": level.spec(),
    })
}

/// A FlowSchema sending every request of `subjects` (resource or not, any verb, anywhere)
/// to the level of the same name; one flow per user with `distinguisher` `ByUser`, one
/// flow for all without.
fn flow_schema(
    name: &str,
    precedence: u32,
    distinguisher: Option<&str>,
    subjects: Vec<Value>,
) -> Value {
    let mut spec = json!({
        "priorityLevelConfiguration": {"name": name},
        "matchingPrecedence": precedence,
        "rules": [{
            "subjects": subjects,
            "resourceRules": [{
                "verbs": ["*"],
                "apiGroups": ["*"],
                "resources": ["*"],
                "clusterScope": true,
                "namespaces": ["*"],
            }],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }],
    });
    if let Some(method) = distinguisher {
        spec["distinguisherMethod"] = json!({"type": method});
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "FlowSchema",
        "metadata": {"name": name, "labels": labels()},
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(text: &str) -> ServiceAccountRef {
        ServiceAccountRef::parse(text).expect("sa")
    }

    fn with_tenants() -> ApfOptions {
        ApfOptions {
            namespace: "inrun-system".into(),
            service_account: "inrun".into(),
            tenant_accounts: Some(AccountPattern::parse("inrun-tenants/t-{name}").expect("p")),
            tenant_identity_namespaces: vec!["team-ids".into(), "inrun-tenants".into()],
            impersonate: vec![
                sa("files/team-a"),
                sa("inrun-tenants/covered"),
                sa("files/team-a"),
            ],
            ..ApfOptions::default()
        }
    }

    fn of_kind<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no {kind} {name}"))
    }

    #[test]
    fn levels_come_before_the_flow_schemas_that_name_them() {
        let docs = manifests(&with_tenants()).expect("manifests");
        let kinds: Vec<(&str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap_or(""),
                    d["metadata"]["name"].as_str().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("PriorityLevelConfiguration", "inrun-host"),
                ("PriorityLevelConfiguration", "inrun-tenants"),
                ("FlowSchema", "inrun-host"),
                ("FlowSchema", "inrun-tenants"),
            ]
        );
        for doc in &docs {
            assert_eq!(doc["apiVersion"], "flowcontrol.apiserver.k8s.io/v1");
            let name = &doc["metadata"]["name"];
            if doc["kind"] == "FlowSchema" {
                assert_eq!(&doc["spec"]["priorityLevelConfiguration"]["name"], name);
            }
        }
    }

    #[test]
    fn each_tenant_is_a_flow_of_its_own_and_the_host_wins_over_tenants() {
        let docs = manifests(&with_tenants()).expect("manifests");
        let tenants = &of_kind(&docs, "FlowSchema", "inrun-tenants")["spec"];
        assert_eq!(tenants["distinguisherMethod"], json!({"type": "ByUser"}));
        // Every ServiceAccount of the kept namespaces, then those named elsewhere, once;
        // one named in a kept namespace is already covered.
        assert_eq!(
            tenants["rules"][0]["subjects"],
            json!([
                {"kind": "ServiceAccount", "serviceAccount": {"namespace": "inrun-tenants", "name": "*"}},
                {"kind": "ServiceAccount", "serviceAccount": {"namespace": "team-ids", "name": "*"}},
                {"kind": "ServiceAccount", "serviceAccount": {"namespace": "files", "name": "team-a"}},
            ])
        );
        let host = &of_kind(&docs, "FlowSchema", "inrun-host")["spec"];
        assert_eq!(
            host["rules"][0]["subjects"],
            json!([{"kind": "ServiceAccount", "serviceAccount": {"namespace": "inrun-system", "name": "inrun"}}])
        );
        assert!(host.get("distinguisherMethod").is_none(), "{host}");
        // Lower wins: the host before tenants, both after the cluster's own components
        // (kube-system-service-accounts, 900) and before service-accounts (9000).
        let precedence = |spec: &Value| spec["matchingPrecedence"].as_u64().unwrap_or(0);
        assert!(900 < precedence(host), "{host}");
        assert!(precedence(host) < precedence(tenants));
        assert!(precedence(tenants) < 9000, "{tenants}");
        // Every request of theirs, resource or not, anywhere.
        for spec in [host, tenants] {
            let rule = &spec["rules"][0];
            assert_eq!(
                rule["resourceRules"],
                json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}])
            );
            assert_eq!(
                rule["nonResourceRules"],
                json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}])
            );
        }
    }

    #[test]
    fn the_host_level_has_more_shares_and_neither_is_exempt() {
        let docs = manifests(&with_tenants()).expect("manifests");
        let host = &of_kind(&docs, "PriorityLevelConfiguration", "inrun-host")["spec"];
        let tenants = &of_kind(&docs, "PriorityLevelConfiguration", "inrun-tenants")["spec"];
        for spec in [host, tenants] {
            assert_eq!(spec["type"], "Limited", "{spec}");
            assert_eq!(spec["limited"]["limitResponse"]["type"], "Queue", "{spec}");
        }
        let shares = |spec: &Value| {
            spec["limited"]["nominalConcurrencyShares"]
                .as_u64()
                .unwrap_or(0)
        };
        assert!(shares(host) > shares(tenants), "{host} {tenants}");
        assert_eq!(
            tenants["limited"]["limitResponse"]["queuing"],
            json!({"queues": 128, "handSize": 6, "queueLengthLimit": 50})
        );
        assert_eq!(tenants["limited"]["lendablePercent"], 50);
        // Narrow and borrowing nothing unless the operator says otherwise.
        assert_eq!(shares(tenants), 1);
        assert_eq!(tenants["limited"]["borrowingLimitPercent"], 0);
        let unbounded = ApfOptions {
            tenants: Level {
                borrowing_limit_percent: None,
                ..Level::tenants()
            },
            ..with_tenants()
        };
        let docs = manifests(&unbounded).expect("manifests");
        let tenants = &of_kind(&docs, "PriorityLevelConfiguration", "inrun-tenants")["spec"];
        assert!(tenants["limited"].get("borrowingLimitPercent").is_none());
    }

    #[test]
    fn the_names_follow_the_given_name() {
        let docs = manifests(&ApfOptions {
            name: "shop".into(),
            ..with_tenants()
        })
        .expect("manifests");
        let names: Vec<&str> = docs
            .iter()
            .filter_map(|d| d["metadata"]["name"].as_str())
            .collect();
        assert_eq!(
            names,
            ["shop-host", "shop-tenants", "shop-host", "shop-tenants"]
        );
    }

    #[test]
    fn without_tenants_or_with_what_the_api_server_refuses_nothing_is_written() {
        assert_eq!(manifests(&ApfOptions::default()), Err(ApfError::NoTenants));
        let bad_ns = manifests(&ApfOptions {
            tenant_identity_namespaces: vec!["Team_A".into()],
            ..ApfOptions::default()
        });
        assert_eq!(bad_ns, Err(ApfError::Namespace("Team_A".into())));
        let bad_host = manifests(&ApfOptions {
            service_account: "Not Valid".into(),
            ..with_tenants()
        });
        assert!(
            matches!(&bad_host, Err(ApfError::Account { sa, .. }) if sa == "inrun-system/Not Valid"),
            "{bad_host:?}"
        );
        for (level, why) in [
            (
                Level {
                    hand_size: 200,
                    ..Level::tenants()
                },
                "more than the 128 queues",
            ),
            (
                Level {
                    queues: 1 << 20,
                    hand_size: 4,
                    ..Level::tenants()
                },
                "bits of hash",
            ),
            (
                Level {
                    shares: 0,
                    ..Level::tenants()
                },
                "at least 1",
            ),
            (
                Level {
                    lendable_percent: 101,
                    ..Level::tenants()
                },
                "more than 100",
            ),
        ] {
            let err = manifests(&ApfOptions {
                tenants: level,
                ..with_tenants()
            })
            .expect_err("refused");
            assert!(err.to_string().contains(why), "{err}");
            assert!(err.to_string().contains("tenants"), "{err}");
        }
    }
}
