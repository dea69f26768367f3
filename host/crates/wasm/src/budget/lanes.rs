//! Waiters queued by lane (a tenant's), served round-robin across the lanes that wait and
//! first come first served within one: the order the gate hands turns at the cores in, and
//! the compile queue its turns at compiling.

use std::collections::{BTreeMap, VecDeque};

/// Waiters by lane, and the lane served last.
pub(super) struct Lanes<T> {
    waiting: BTreeMap<u64, VecDeque<T>>,
    /// The lane served last, where round-robin goes on from.
    last: u64,
}

impl<T> Default for Lanes<T> {
    fn default() -> Self {
        Lanes {
            waiting: BTreeMap::new(),
            last: 0,
        }
    }
}

impl<T> Lanes<T> {
    /// Queues `waiter` at the end of `lane`.
    pub(super) fn push(&mut self, lane: u64, waiter: T) {
        self.waiting.entry(lane).or_default().push_back(waiter);
    }

    /// The first waiter of the next lane after the last one served, and its lane.
    pub(super) fn pop(&mut self) -> Option<(u64, T)> {
        let lane = self
            .waiting
            .range(self.last + 1..)
            .chain(self.waiting.range(..=self.last))
            .map(|(&lane, _)| lane)
            .next()?;
        let queue = self.waiting.get_mut(&lane)?;
        let waiter = queue.pop_front()?;
        if queue.is_empty() {
            self.waiting.remove(&lane);
        }
        self.last = lane;
        Some((lane, waiter))
    }

    /// Whether nobody waits.
    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Whether a lane other than `lane` waits.
    pub(super) fn others_than(&self, lane: u64) -> bool {
        self.waiting.keys().any(|&l| l != lane)
    }

    /// Every waiter, lane after lane.
    pub(super) fn iter(&self) -> impl Iterator<Item = &T> {
        self.waiting.values().flatten()
    }

    /// Keeps the waiters `keep` says to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for queue in self.waiting.values_mut() {
            queue.retain(&mut keep);
        }
        self.waiting.retain(|_, q| !q.is_empty());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_served_in_turn_and_each_in_its_order() {
        let mut lanes = Lanes::default();
        for (lane, w) in [(1, "a1"), (1, "a2"), (2, "b1"), (3, "c1"), (2, "b2")] {
            lanes.push(lane, w);
        }
        assert!(lanes.others_than(1));
        let order: Vec<_> = std::iter::from_fn(|| lanes.pop()).map(|(_, w)| w).collect();
        assert_eq!(order, ["a1", "b1", "c1", "a2", "b2"]);
        assert!(lanes.is_empty() && !lanes.others_than(1));
        lanes.push(5, "e");
        lanes.retain(|w| *w != "e");
        assert!(lanes.is_empty());
    }
}
