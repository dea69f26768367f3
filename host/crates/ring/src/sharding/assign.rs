//! Which member holds which bucket: rendezvous (highest random weight) hashing with a cap.
//!
//! Each bucket ranks the members by `fnv1a64("<bucket>|<member>")`; walking the buckets in
//! order, each goes to the best-ranked member that holds fewer than `⌈BUCKETS / N⌉`. The
//! table is a function of the set of live members alone (not of their order, nor of who
//! computes it), so every replica that sees the same members computes the same table.
//! Plain rendezvous hashing moves the fewest buckets but can leave one member with 1.4× its
//! share of 64 buckets; the cap keeps every member within one bucket of its share, for a
//! few more moves when membership changes.

use super::buckets::{BUCKETS, fnv1a64};

/// The holder of each bucket, as an index into the sorted, deduplicated members
/// ([`Assignment::members`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    members: Vec<String>,
    holders: Vec<Option<usize>>,
}

impl Assignment {
    /// The table for `members` (identities; order and repeats do not matter). No member:
    /// no bucket is held.
    pub fn new<S: AsRef<str>>(members: &[S]) -> Self {
        let mut members: Vec<String> = members.iter().map(|m| m.as_ref().to_string()).collect();
        members.sort();
        members.dedup();
        let mut holders = vec![None; BUCKETS];
        if members.is_empty() {
            return Assignment { members, holders };
        }
        let cap = BUCKETS.div_ceil(members.len());
        let mut load = vec![0usize; members.len()];
        for (bucket, holder) in holders.iter_mut().enumerate() {
            let best = (0..members.len())
                .filter(|m| load[*m] < cap)
                // Highest score first; equal scores (never seen in practice) by name.
                .max_by_key(|m| (score(bucket, &members[*m]), std::cmp::Reverse(*m)));
            if let Some(m) = best {
                load[m] += 1;
                *holder = Some(m);
            }
        }
        Assignment { members, holders }
    }

    /// The members the table was computed for, sorted.
    pub fn members(&self) -> &[String] {
        &self.members
    }

    /// Who holds `bucket`, if anyone.
    pub fn holder(&self, bucket: usize) -> Option<&str> {
        let m = (*self.holders.get(bucket)?)?;
        Some(self.members[m].as_str())
    }

    /// The buckets `member` holds, in order.
    pub fn buckets_of(&self, member: &str) -> Vec<usize> {
        (0..BUCKETS)
            .filter(|b| self.holder(*b) == Some(member))
            .collect()
    }

    /// The buckets whose holder differs between `self` and `next`.
    pub fn moves(&self, next: &Assignment) -> Vec<usize> {
        (0..BUCKETS)
            .filter(|b| self.holder(*b) != next.holder(*b))
            .collect()
    }
}

/// A member's weight for `bucket`.
fn score(bucket: usize, member: &str) -> u64 {
    fnv1a64(format!("{bucket}|{member}").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::super::buckets::bucket_of;
    use super::*;

    fn set(prefix: &str, n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("{prefix}-inrun-{i}-{}", 7 + i * 13))
            .collect()
    }

    #[test]
    fn every_bucket_has_one_holder_and_no_member_more_than_its_share_rounded_up() {
        for n in 1..=7 {
            let members = set("pod", n);
            let table = Assignment::new(&members);
            let cap = BUCKETS.div_ceil(n);
            let mut held = 0;
            for m in &members {
                let mine = table.buckets_of(m).len();
                assert!(
                    mine <= cap,
                    "{m} holds {mine} of {BUCKETS} with {n} members"
                );
                held += mine;
            }
            assert_eq!(held, BUCKETS, "{n} members");
        }
    }

    #[test]
    fn every_replica_computes_the_same_table_from_the_same_members() {
        let members = set("pod", 4);
        let mut shuffled = vec![
            members[2].clone(),
            members[0].clone(),
            members[3].clone(),
            members[1].clone(),
            members[0].clone(),
        ];
        assert_eq!(Assignment::new(&members), Assignment::new(&shuffled));
        shuffled.reverse();
        assert_eq!(Assignment::new(&members), Assignment::new(&shuffled));
    }

    #[test]
    fn no_member_holds_nothing() {
        let table = Assignment::new::<&str>(&[]);
        assert!((0..BUCKETS).all(|b| table.holder(b).is_none()));
    }

    #[test]
    fn a_membership_change_moves_few_more_buckets_than_it_must() {
        // Over 50 member sets: 3 → 4 must move a quarter of the buckets (16), 3 → 2 a third
        // (21.3). Plain rendezvous hashing would move exactly those on average.
        let (mut grow, mut shrink, mut grow_max, mut shrink_max) = (0, 0, 0, 0);
        for round in 0..50 {
            let three = set(&format!("r{round}"), 3);
            let mut four = three.clone();
            four.push(format!("r{round}-inrun-new"));
            let before = Assignment::new(&three);
            let up = before.moves(&Assignment::new(&four)).len();
            let down = before.moves(&Assignment::new(&three[..2])).len();
            grow += up;
            shrink += down;
            grow_max = grow_max.max(up);
            shrink_max = shrink_max.max(down);
            // A departing member's buckets always move; nobody else's beyond the cap.
            assert!(down >= before.buckets_of(&three[2]).len());
        }
        let (grow, shrink) = (grow as f64 / 50.0, shrink as f64 / 50.0);
        eprintln!(
            "buckets moved over 50 sets: 3→4 mean {grow} (most {grow_max}), 3→2 mean {shrink} (most {shrink_max})"
        );
        assert!(
            grow <= 16.0 * 1.25 && grow_max <= 32,
            "3→4 moved {grow} (most {grow_max})"
        );
        assert!(
            shrink <= 21.4 * 1.25 && shrink_max <= 36,
            "3→2 moved {shrink} (most {shrink_max})"
        );
    }

    #[test]
    fn the_busiest_of_three_replicas_holds_at_most_a_tenth_over_its_share_of_crs() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let uids: Vec<String> = (0..10_000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                format!("{:016x}-{:016x}", state, state.rotate_left(29))
            })
            .collect();
        let mut worst = 0f64;
        for round in 0..20 {
            let members = set(&format!("b{round}"), 3);
            let table = Assignment::new(&members);
            let mut per = std::collections::HashMap::new();
            for uid in &uids {
                *per.entry(table.holder(bucket_of(uid))).or_insert(0usize) += 1;
            }
            let busiest = per.values().copied().max().unwrap_or_default();
            let share = busiest as f64 / (10_000.0 / 3.0);
            worst = worst.max(share);
            assert!(
                share <= 1.10,
                "round {round}: busiest holds {share:.3}× its share"
            );
        }
        eprintln!("busiest of 3 over 20 sets, 10,000 CRs: {worst:.3}× its share");
    }
}
