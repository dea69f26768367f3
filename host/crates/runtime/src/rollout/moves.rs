//! Which CRs a rollout's step puts on the new version: every `select`ed CR at the first
//! step, then the others in the order of a hash of their uid until the step's share of all
//! CRs is reached. The order is the same on every replica and after a restart, and a CR
//! moved stays moved for the rest of the rollout: no CR flaps between versions.

use std::collections::HashSet;

use inrun_blueprint::RolloutSelect;

/// A CR as the rollout sees it.
pub(super) struct Cr<'a> {
    pub(super) uid: &'a str,
    pub(super) namespace: Option<&'a str>,
}

/// Where the CR `uid` falls in the order CRs move: the first 8 bytes of the sha256 of its
/// uid.
pub(super) fn rank(uid: &str) -> u64 {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(uid.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The uids of `crs` on the new version at a step of `percent`: those of `already` still
/// there, every CR `select` names, then the others by [`rank`] until `percent` of all CRs
/// (rounded up) are.
pub(super) fn moved(
    crs: &[Cr<'_>],
    select: Option<&RolloutSelect>,
    percent: u8,
    already: &HashSet<String>,
) -> HashSet<String> {
    let want = (crs.len() * usize::from(percent)).div_ceil(100);
    let mut on: HashSet<String> = crs
        .iter()
        .filter(|cr| already.contains(cr.uid) || select.is_some_and(|s| s.selects(cr.namespace)))
        .map(|cr| cr.uid.to_string())
        .collect();
    if on.len() < want {
        let mut rest: Vec<(u64, &str)> = crs
            .iter()
            .filter(|cr| !on.contains(cr.uid))
            .map(|cr| (rank(cr.uid), cr.uid))
            .collect();
        rest.sort_unstable();
        let more = want - on.len();
        on.extend(rest.into_iter().take(more).map(|(_, uid)| uid.to_string()));
    }
    on
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn crs(uids: &[String]) -> Vec<Cr<'_>> {
        uids.iter()
            .enumerate()
            .map(|(i, uid)| Cr {
                uid,
                namespace: Some(if i % 10 == 0 { "canary-a" } else { "prod" }),
            })
            .collect()
    }

    #[test]
    fn each_step_moves_its_share_of_crs_rounded_up_and_the_selected_first() {
        let uids: Vec<String> = (0..200).map(|i| format!("uid-{i}")).collect();
        let all = crs(&uids);
        let none = HashSet::new();
        assert_eq!(moved(&all, None, 5, &none).len(), 10);
        assert_eq!(moved(&all, None, 1, &none).len(), 2);
        assert_eq!(moved(&all, None, 100, &none).len(), 200);
        let select = RolloutSelect {
            namespaces: vec!["canary-*".into()],
        };
        // 20 CRs are in canary-a: they go first, whatever the share.
        let first = moved(&all, Some(&select), 5, &none);
        assert_eq!(first.len(), 20);
        assert!(
            all.iter()
                .filter(|c| c.namespace == Some("canary-a"))
                .all(|c| first.contains(c.uid))
        );
        let next = moved(&all, Some(&select), 25, &first);
        assert_eq!(next.len(), 50);
        assert!(first.is_subset(&next));
    }

    proptest! {
        /// Whatever the CRs, a later step keeps every CR an earlier one moved, and the
        /// same CRs give the same set in any order.
        #[test]
        fn steps_only_add_and_the_order_does_not_matter(
            n in 1usize..300,
            a in 1u8..100,
            b in 1u8..=100,
            seed in any::<u64>(),
        ) {
            let (low, high) = (a.min(b), a.max(b));
            let uids: Vec<String> = (0..n).map(|i| format!("{seed}-{i}")).collect();
            let all = crs(&uids);
            let first = moved(&all, None, low, &HashSet::new());
            let second = moved(&all, None, high, &first);
            prop_assert!(first.is_subset(&second));
            prop_assert_eq!(second.len(), (n * usize::from(high)).div_ceil(100));
            let mut reversed: Vec<String> = uids.clone();
            reversed.reverse();
            prop_assert_eq!(moved(&crs(&reversed), None, low, &HashSet::new()).len(), first.len());
            let again = moved(&all, None, low, &HashSet::new());
            prop_assert_eq!(again, first);
        }
    }
}
