//! Where an identity lock is named: in the claiming tenant's own scope, or host-wide for a
//! boundary the operator shares between tenants it lists; and the Lease's name and labels
//! for each.

use std::time::Duration;

use sha2::{Digest, Sha256};

/// Names of host-wide locks (a boundary the operator shares, or the one Blueprint of
/// `inrun_runtime::run`): the same as before locks had scopes, so such a lock keeps its
/// Lease across an upgrade.
const HOST_WIDE_PREFIX: &str = "inrun-identity-";
/// Names of locks in one tenant's scope. A hex digest never starts with `t-`, so no
/// tenant's name can equal a host-wide one.
const TENANT_PREFIX: &str = "inrun-identity-t-";

/// How the host keeps package CRs' identity locks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockPolicy {
    /// Boundaries whose locks the operator shares between the tenants it lists
    /// (`--shared-identity-boundary`); every other boundary is locked per tenant.
    pub shared: Vec<SharedBoundary>,
    /// How long a Lease stands without renewal (`--identity-lock-duration`): its holder's
    /// host renews it every third of that; one left unrenewed for that long (as the
    /// claiming host watched it) may be taken over when its holder cannot be read.
    pub duration: Duration,
    /// The most locks one tenant's CRs may hold through this replica
    /// (`--max-tenant-identity-locks`); `0`: no cap. Each lock is a Lease in the host's
    /// namespace and a renewal every third of `duration`.
    pub max_per_tenant: usize,
}

impl Default for LockPolicy {
    fn default() -> Self {
        LockPolicy {
            shared: Vec::new(),
            duration: Duration::from_secs(15 * 60),
            max_per_tenant: 1000,
        }
    }
}

/// A boundary (or, ending in `*`, every boundary starting with what comes before it) whose
/// locks are host-wide, claimed only by the tenants listed. Written
/// `BOUNDARY=TENANT[,TENANT...]`, a tenant as `/tenants` names it (`Blueprint/team-a`, or
/// the path of a Blueprint file); the last `=` separates the two, since a boundary may be a
/// URL with a query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedBoundary {
    /// The boundary, or a prefix ending in `*`.
    pub pattern: String,
    /// The tenants that may claim it.
    pub tenants: Vec<String>,
}

impl SharedBoundary {
    fn matches(&self, boundary: &str) -> bool {
        match self.pattern.strip_suffix('*') {
            Some(prefix) => boundary.starts_with(prefix),
            None => boundary == self.pattern,
        }
    }
}

impl std::str::FromStr for SharedBoundary {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some((pattern, tenants)) = s.rsplit_once('=') else {
            return Err(format!("`{s}`: expected BOUNDARY=TENANT[,TENANT...]"));
        };
        let tenants: Vec<String> = tenants
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect();
        if pattern.is_empty() || tenants.is_empty() {
            return Err(format!(
                "`{s}`: expected a boundary and at least one tenant (BOUNDARY=TENANT[,TENANT...])"
            ));
        }
        Ok(SharedBoundary {
            pattern: pattern.to_string(),
            tenants,
        })
    }
}

/// Where a claim of a boundary is locked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Host-wide: every tenant allowed to claim the boundary meets the same lock.
    HostWide,
    /// The tenant's own: no other tenant meets it.
    Tenant(&'a str),
    /// The operator shares the boundary among other tenants only: this one may not claim it.
    Refused,
}

impl LockPolicy {
    /// Where `tenant` (`None`: the host's one Blueprint, no tenants) claiming `boundary` is
    /// locked: host-wide when a shared boundary that matches lists it, refused when some
    /// match and none lists it, its own scope otherwise.
    pub fn scope<'a>(&self, tenant: Option<&'a str>, boundary: &str) -> Scope<'a> {
        let Some(tenant) = tenant else {
            return Scope::HostWide;
        };
        let mut matching = self
            .shared
            .iter()
            .filter(|s| s.matches(boundary))
            .peekable();
        if matching.peek().is_none() {
            return Scope::Tenant(tenant);
        }
        if matching.any(|s| s.tenants.iter().any(|t| t == tenant)) {
            Scope::HostWide
        } else {
            Scope::Refused
        }
    }

    /// How often a held Lease is renewed: a third of its duration, so two renewals may fail
    /// before others may judge it stale.
    pub fn renew_every(&self) -> Duration {
        (self.duration / 3).max(Duration::from_millis(100))
    }
}

/// The Lease name for `boundary` and `identity` (the state identity's hash), in `tenant`'s
/// scope or, `None`, host-wide. Each part is framed by its length, so no two different
/// triples give one name.
pub fn lease_name(tenant: Option<&str>, boundary: &str, identity: &str) -> String {
    let mut hash = Sha256::new();
    let prefix = match tenant {
        // Host-wide: as named before scopes existed.
        None => {
            hash.update(boundary.as_bytes());
            hash.update([0]);
            hash.update(identity.as_bytes());
            HOST_WIDE_PREFIX
        }
        Some(tenant) => {
            for part in [tenant, boundary, identity] {
                hash.update((part.len() as u64).to_be_bytes());
                hash.update(part.as_bytes());
            }
            TENANT_PREFIX
        }
    };
    format!("{prefix}{}", hex(&hash.finalize()[..20]))
}

/// The value of the Lease's `inrun.dev/lock-tenant` label for `tenant`: a Blueprint
/// resource's name when it fits a label (a resource name is a DNS subdomain, whose every
/// character a label value allows), else `h-` and a digest of the tenant's name (a file's
/// path, a long name). The `inrun.dev/tenant` annotation carries the name whole.
pub fn tenant_label(tenant: &str) -> String {
    if let Some(name) = tenant.strip_prefix("Blueprint/")
        && name.len() <= 63
        && !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
    {
        return name.to_string();
    }
    format!("h-{}", hex(&Sha256::digest(tenant.as_bytes())[..20]))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn valid_name(name: &str) -> bool {
        name.len() <= 63
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    }

    #[test]
    fn a_host_wide_lease_name_is_the_name_locks_had_before_scopes() {
        let a = lease_name(None, "https://api.example", "abc");
        assert_eq!(a, lease_name(None, "https://api.example", "abc"));
        assert!(valid_name(&a) && a.starts_with("inrun-identity-"), "{a}");
        assert_ne!(a, lease_name(None, "https://api.example", "abd"));
        assert_ne!(a, lease_name(None, "https://other.example", "abc"));
        // The parts are framed: moving a character across the boundary changes the name.
        assert_ne!(lease_name(None, "ab", "c"), lease_name(None, "a", "bc"));
        // sha256("https://api.example\0abc"), its first 20 bytes: the name earlier
        // versions gave, so a shared boundary's Lease survives the upgrade.
        let mut h = Sha256::new();
        h.update(b"https://api.example\0abc");
        assert_eq!(a, format!("inrun-identity-{}", hex(&h.finalize()[..20])));
    }

    #[test]
    fn each_tenant_names_the_same_identity_in_a_scope_of_its_own() {
        let (b, id) = ("postgres://db.internal:5432", "abc");
        let a = lease_name(Some("Blueprint/team-a"), b, id);
        let other = lease_name(Some("Blueprint/team-b"), b, id);
        assert_ne!(a, other, "another tenant meets another lock");
        assert_ne!(a, lease_name(None, b, id), "not the host-wide lock either");
        assert_eq!(a, lease_name(Some("Blueprint/team-a"), b, id));
        assert!(valid_name(&a) && a.starts_with("inrun-identity-t-"), "{a}");
        // Framed by length: no tenant can spell its way into another's scope.
        assert_ne!(
            lease_name(Some("Blueprint/a"), "b", id),
            lease_name(Some("Blueprint/"), "ab", id)
        );
        assert_ne!(
            lease_name(Some("t"), "x", "yz"),
            lease_name(Some("t"), "xy", "z")
        );
    }

    #[test]
    fn a_tenant_label_is_its_blueprints_name_or_a_digest() {
        assert_eq!(tenant_label("Blueprint/team-a"), "team-a");
        let file = tenant_label("/etc/inrun/tenants/a.yaml");
        assert!(file.starts_with("h-") && file.len() == 42, "{file}");
        assert_ne!(file, tenant_label("/etc/inrun/tenants/b.yaml"));
        let long = tenant_label(&format!("Blueprint/{}", "x".repeat(64)));
        assert!(long.starts_with("h-") && long.len() <= 63, "{long}");
    }

    #[test]
    fn a_shared_boundary_is_host_wide_for_the_tenants_listed_and_refused_to_others() {
        let policy = LockPolicy {
            shared: vec![
                "postgres://db.internal:5432=Blueprint/a,Blueprint/b"
                    .parse()
                    .expect("shared"),
                "s3://logs-*=Blueprint/c".parse().expect("prefix"),
            ],
            ..LockPolicy::default()
        };
        let db = "postgres://db.internal:5432";
        assert_eq!(policy.scope(Some("Blueprint/a"), db), Scope::HostWide);
        assert_eq!(policy.scope(Some("Blueprint/b"), db), Scope::HostWide);
        assert_eq!(policy.scope(Some("Blueprint/c"), db), Scope::Refused);
        assert_eq!(
            policy.scope(Some("Blueprint/c"), "s3://logs-eu"),
            Scope::HostWide
        );
        assert_eq!(
            policy.scope(Some("Blueprint/a"), "s3://logs-eu"),
            Scope::Refused
        );
        // Any other boundary: the tenant's own.
        assert_eq!(
            policy.scope(Some("Blueprint/c"), "postgres://db.internal:5433"),
            Scope::Tenant("Blueprint/c")
        );
        // No tenants at all (one Blueprint): host-wide.
        assert_eq!(policy.scope(None, db), Scope::HostWide);
    }

    #[test]
    fn a_shared_boundary_is_written_boundary_equals_tenants() {
        let s: SharedBoundary = "https://x.example/?a=b=Blueprint/a, /etc/t/b.yaml"
            .parse()
            .expect("parse");
        assert_eq!(s.pattern, "https://x.example/?a=b");
        assert_eq!(s.tenants, ["Blueprint/a", "/etc/t/b.yaml"]);
        for bad in ["no-tenants", "=Blueprint/a", "x=", "x= , "] {
            let e = bad.parse::<SharedBoundary>().unwrap_err();
            assert!(e.contains("BOUNDARY=TENANT"), "{bad}: {e}");
        }
    }
}
