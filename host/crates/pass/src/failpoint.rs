//! Failpoints: named places at the step boundaries of a pass where a test build of the host
//! can be made to die on the spot (`abort`: no destructor, no flush, no lease given back,
//! as a SIGKILL leaves it) or fail the step, so a test can show that whatever a pass left
//! half done the next one finishes, and nothing is lost or done twice.
//!
//! They are compiled in only with the `failpoints` feature, which the host's own tests turn
//! on (a dev-dependency); in any other build [`hit`] is an empty inline function. A test
//! sets them for an `inrun run` process with `INRUN_FAILPOINTS`:
//! `NAME=ACTION[@N][;NAME=ACTION[@N]…]`, ACTION being `kill` or `error`. `kill` acts at the
//! Nth hit of that place in the process (the first without `@N`); `error` at the Nth only,
//! or at every hit without `@N`.

use std::fmt;

/// Every failpoint, in the order a pass meets them. A name not here is refused by
/// [`parse`], so a test cannot set one that no code reaches.
pub const ALL: &[&str] = &[
    // The reconcile steps.
    FINALIZER_STORED,
    APPLY_WAVE,
    PRUNE_DELETED,
    STATUS_BEFORE,
    STATUS_AFTER,
    // Deletion.
    TEARDOWN_DELETED,
    TEARDOWN_ORPHANED,
    RELEASE_BEFORE,
    CRD_RELEASED,
    // Packages.
    PACKAGE_IDENTITY_STORED,
    PACKAGE_CONVERGE_BEFORE,
    PACKAGE_CONVERGE_AFTER,
    PACKAGE_DELETE_BEFORE,
    PACKAGE_DELETE_AFTER,
    LOCK_CLAIM_BEFORE,
    LOCK_CLAIM_AFTER,
    LOCK_RELEASE_BEFORE,
    LOCK_RELEASE_AFTER,
];

/// The host's finalizers (and managed-by label) are stored on the CR.
pub const FINALIZER_STORED: &str = "finalizer.stored";
/// An apply wave was applied and a later one is next.
pub const APPLY_WAVE: &str = "apply.wave";
/// A prune deleted one stale child (of several, maybe).
pub const PRUNE_DELETED: &str = "prune.deleted";
/// The status is about to be written.
pub const STATUS_BEFORE: &str = "status.before";
/// The status was written.
pub const STATUS_AFTER: &str = "status.after";
/// A deletion deleted one child (of several, maybe).
pub const TEARDOWN_DELETED: &str = "teardown.deleted";
/// A deletion left one child in place (its owner reference removed): an `Orphan`
/// delete policy, or a CRD whose types have foreign instances at the finalizer timeout.
pub const TEARDOWN_ORPHANED: &str = "teardown.orphaned";
/// The CR's finalizers are about to be removed.
pub const RELEASE_BEFORE: &str = "release.before";
/// One CR of a CRD no tenant serves any more was let go (of several, maybe).
pub const CRD_RELEASED: &str = "crd.released";
/// A package CR's identity (and `Reconciling`) is stored in its status.
pub const PACKAGE_IDENTITY_STORED: &str = "package.identity.stored";
/// A package's `converge` is about to be called.
pub const PACKAGE_CONVERGE_BEFORE: &str = "package.converge.before";
/// A package's `converge` answered; nothing of its answer is stored yet.
pub const PACKAGE_CONVERGE_AFTER: &str = "package.converge.after";
/// A package's `delete` is about to be called.
pub const PACKAGE_DELETE_BEFORE: &str = "package.delete.before";
/// A package's `delete` answered; nothing of its answer is stored yet.
pub const PACKAGE_DELETE_AFTER: &str = "package.delete.after";
/// An identity lock is about to be claimed.
pub const LOCK_CLAIM_BEFORE: &str = "lock.claim.before";
/// An identity lock was claimed (its Lease written), nothing else yet.
pub const LOCK_CLAIM_AFTER: &str = "lock.claim.after";
/// An identity lock is about to be let go.
pub const LOCK_RELEASE_BEFORE: &str = "lock.release.before";
/// An identity lock was let go.
pub const LOCK_RELEASE_AFTER: &str = "lock.release.after";

/// The error a failpoint set to `error` fails its step with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected(pub &'static str);

impl fmt::Display for Injected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "failpoint {} failed this step", self.0)
    }
}

impl std::error::Error for Injected {}

/// What a failpoint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// End the process at once.
    Kill,
    /// Fail the step.
    Error,
}

/// One `NAME=ACTION[@N]` of `INRUN_FAILPOINTS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// A name of [`ALL`].
    pub name: &'static str,
    /// What it does.
    pub action: Action,
    /// The hit it acts at (1 is the first); `None`: the first for `kill`, every one for
    /// `error`.
    pub at: Option<u64>,
}

impl Setting {
    /// Whether the `hit`th hit (from 1) acts.
    pub fn acts_at(&self, hit: u64) -> bool {
        match (self.action, self.at) {
            (_, Some(n)) => hit == n,
            (Action::Kill, None) => hit == 1,
            (Action::Error, None) => true,
        }
    }
}

/// Reads `INRUN_FAILPOINTS`' syntax.
///
/// # Errors
/// The first entry that names no failpoint of [`ALL`], no action, or a bad count.
pub fn parse(text: &str) -> Result<Vec<Setting>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|entry| {
            let (name, action) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?}: expected NAME=ACTION[@N]"))?;
            let name = ALL.iter().find(|n| **n == name.trim()).ok_or_else(|| {
                format!("{name:?} is not a failpoint (known: {})", ALL.join(", "))
            })?;
            let (action, at) = match action.split_once('@') {
                Some((a, n)) => {
                    let n: u64 = n
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or_else(|| format!("{entry:?}: @N counts hits from 1"))?;
                    (a, Some(n))
                }
                None => (action, None),
            };
            let action = match action.trim() {
                "kill" => Action::Kill,
                "error" => Action::Error,
                other => return Err(format!("{entry:?}: {other:?} is not kill or error")),
            };
            Ok(Setting { name, action, at })
        })
        .collect()
}

#[cfg(feature = "failpoints")]
mod armed {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::{Action, Injected, Setting};

    /// The settings from the environment, each with its hits so far.
    fn table() -> &'static [(Setting, AtomicU64)] {
        static TABLE: OnceLock<Vec<(Setting, AtomicU64)>> = OnceLock::new();
        TABLE.get_or_init(|| {
            let text = std::env::var("INRUN_FAILPOINTS").unwrap_or_default();
            match super::parse(&text) {
                Ok(settings) => settings
                    .into_iter()
                    .map(|s| (s, AtomicU64::new(0)))
                    .collect(),
                Err(why) => {
                    // A test that sets a failpoint wrongly must not pass by never meeting it.
                    eprintln!("INRUN_FAILPOINTS: {why}");
                    std::process::abort();
                }
            }
        })
    }

    pub fn hit(name: &'static str) -> Result<(), Injected> {
        debug_assert!(super::ALL.contains(&name), "{name} is not in ALL");
        for (setting, hits) in table() {
            if setting.name != name {
                continue;
            }
            let hit = hits.fetch_add(1, Ordering::SeqCst) + 1;
            if !setting.acts_at(hit) {
                continue;
            }
            match setting.action {
                Action::Kill => {
                    // The test reads this line to know the process died here.
                    eprintln!("failpoint {name}: hit {hit}, killing the process");
                    std::process::abort();
                }
                Action::Error => {
                    // As for `kill`, a line the test reads to know the step failed here.
                    eprintln!("failpoint {name}: hit {hit}, failing the step");
                    return Err(Injected(name));
                }
            }
        }
        Ok(())
    }
}

/// Passes the failpoint `name` (one of [`ALL`]): ends the process, or fails with
/// [`Injected`], when `INRUN_FAILPOINTS` says so in a build with the `failpoints` feature.
///
/// # Errors
/// [`Injected`] when the failpoint is set to `error` at this hit.
#[cfg(feature = "failpoints")]
pub fn hit(name: &'static str) -> Result<(), Injected> {
    armed::hit(name)
}

/// Passes the failpoint `name`: nothing, in a build without the `failpoints` feature.
///
/// # Errors
/// Never.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn hit(_name: &'static str) -> Result<(), Injected> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_name_a_known_failpoint_an_action_and_the_hit_they_act_at() {
        let s = parse("status.after=kill; apply.wave=error@3;").expect("valid");
        assert_eq!(
            s,
            [
                Setting {
                    name: STATUS_AFTER,
                    action: Action::Kill,
                    at: None
                },
                Setting {
                    name: APPLY_WAVE,
                    action: Action::Error,
                    at: Some(3)
                },
            ]
        );
        // kill: the first hit only; error: every hit, or the Nth only.
        assert!(s[0].acts_at(1) && !s[0].acts_at(2));
        assert!(!s[1].acts_at(2) && s[1].acts_at(3) && !s[1].acts_at(4));
        let every = &parse("status.before=error").expect("valid")[0];
        assert!(every.acts_at(1) && every.acts_at(7));
        assert!(parse("").expect("none").is_empty());
        for bad in [
            "status.afterwards=kill",
            "status.after",
            "status.after=crash",
            "status.after=kill@0",
            "status.after=kill@x",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_failpoint_is_listed_once() {
        let mut names = ALL.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
