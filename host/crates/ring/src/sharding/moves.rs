//! What one member does next about its buckets: from the table every member computes
//! ([`super::assign::Assignment`]), the holders the bucket Leases record, and the members
//! it sees live. A bucket moves in two steps — its holder gives it up, then its target
//! takes it — so no bucket ever has two writers: a member takes only a bucket that is free
//! or whose holder it no longer sees live (and [`super::ownership`]'s compare-and-swap
//! takes it only from a holder the round saw gone, never from one that took it since).

use super::assign::Assignment;
use super::buckets::BUCKETS;

/// The buckets a member gives up and takes in one round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Moves {
    /// Held by this member, assigned elsewhere: give up once their writes have returned.
    pub release: Vec<usize>,
    /// Assigned to this member and free, or held by a member not seen live: take.
    pub acquire: Vec<usize>,
    /// Assigned to this member, still held by a live member that has yet to give it up.
    pub waiting: Vec<usize>,
}

/// The moves of `me`, given the `table`, each bucket's recorded holder and the `live`
/// members. At most `max_releases` buckets are given up in one round (a membership change
/// moves a few buckets at a time instead of stopping many at once); buckets whose holder
/// is gone are always taken, since nobody serves them.
pub fn moves(
    me: &str,
    table: &Assignment,
    holders: &[Option<String>],
    live: &[String],
    max_releases: usize,
) -> Moves {
    let mut next = Moves::default();
    for bucket in 0..BUCKETS {
        let target = table.holder(bucket);
        let holder = holders.get(bucket).cloned().flatten();
        let mine = target == Some(me);
        match holder.as_deref() {
            Some(h) if h == me && !mine && next.release.len() < max_releases => {
                next.release.push(bucket);
            }
            Some(h) if h == me => {}
            Some(h) if mine && live.iter().any(|m| m == h) => next.waiting.push(bucket),
            _ if mine => next.acquire.push(bucket),
            _ => {}
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_string()).collect()
    }

    /// Runs rounds of every live member's moves against shared holders until nothing
    /// changes; each round, releases land before acquires (as the Leases' compare-and-swap
    /// orders them). Returns the rounds taken.
    fn settle(live: &[String], holders: &mut [Option<String>], max_releases: usize) -> usize {
        let table = Assignment::new(live);
        for round in 1..=64 {
            let all_moves: Vec<(String, Moves)> = live
                .iter()
                .map(|m| (m.clone(), moves(m, &table, holders, live, max_releases)))
                .collect();
            let mut changed = false;
            for (_, p) in &all_moves {
                for b in &p.release {
                    holders[*b] = None;
                    changed = true;
                }
            }
            for (m, p) in &all_moves {
                for b in &p.acquire {
                    // Two members never both take one bucket: the Lease's CAS picks one.
                    assert!(
                        holders[*b]
                            .as_deref()
                            .is_none_or(|h| !live.contains(&h.to_string()) || h == m)
                    );
                    holders[*b] = Some(m.clone());
                    changed = true;
                }
            }
            if !changed {
                return round;
            }
        }
        panic!("never settled");
    }

    #[test]
    fn a_new_ring_takes_every_bucket_in_one_round() {
        let live = members(&["a", "b", "c"]);
        let mut holders = vec![None; BUCKETS];
        // The first round takes them all; the second finds nothing to do.
        assert_eq!(settle(&live, &mut holders, 64), 2);
        let table = Assignment::new(&live);
        for (b, h) in holders.iter().enumerate() {
            assert_eq!(h.as_deref(), table.holder(b));
        }
    }

    #[test]
    fn a_joining_member_gets_its_buckets_only_after_their_holders_give_them_up() {
        let three = members(&["a", "b", "c"]);
        let mut holders = vec![None; BUCKETS];
        settle(&three, &mut holders, 64);
        let four = members(&["a", "b", "c", "d"]);
        let table = Assignment::new(&four);
        let d = moves("d", &table, &holders, &four, 64);
        assert!(d.acquire.is_empty(), "d took held buckets: {:?}", d.acquire);
        assert_eq!(d.waiting, table.buckets_of("d"));
        // A few releases a round: the handover takes several rounds, never two writers.
        let rounds = settle(&four, &mut holders, 4);
        assert!(rounds > 2, "{rounds}");
        for (b, h) in holders.iter().enumerate() {
            assert_eq!(h.as_deref(), table.holder(b));
        }
    }

    #[test]
    fn buckets_of_a_member_gone_are_taken_at_once_whatever_the_release_limit() {
        let three = members(&["a", "b", "c"]);
        let mut holders = vec![None; BUCKETS];
        settle(&three, &mut holders, 64);
        let two = members(&["a", "c"]);
        let table = Assignment::new(&two);
        let taken: usize = two
            .iter()
            .map(|m| moves(m, &table, &holders, &two, 0).acquire.len())
            .sum();
        let of_b = holders.iter().filter(|h| h.as_deref() == Some("b")).count();
        assert!(taken >= of_b, "{taken} taken, b held {of_b}");
        settle(&two, &mut holders, 4);
        assert!(
            holders
                .iter()
                .all(|h| h.as_deref().is_some_and(|h| h != "b"))
        );
    }
}
