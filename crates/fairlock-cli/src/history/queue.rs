//! The queue's history: the snapshots of one fair lock's queue, and what
//! they show owner by owner (arrivals, waiters moved back, who was ahead of
//! whom, a deadline that may have passed).

use std::collections::HashMap;

use super::types::SNAPSHOT_LAG_US;

/// Queue snapshots of one fair lock, in the order they were taken.
#[derive(Debug, Default, Clone)]
pub(crate) struct QueueLog {
    pub(crate) snapshots: Vec<Vec<String>>,
    /// Per snapshot (when known, for every snapshot): when it was taken
    /// (µs, taken before the read: a deadline derived from it is never
    /// later than the server's) and each waiter's deadline (µs, `None`:
    /// none), in queue order.
    pub(crate) deadlines: Vec<(u64, Vec<Option<u64>>)>,
    /// Redisson's waiter slot (µs), under the protocol that drops a waiter
    /// at the head of the line whose deadline has passed, live or not, and
    /// lowers every deadline behind the head by one slot at each grant from
    /// the queue: a waiter overtaken that way broke no promise of that
    /// protocol (see [`QueueLog::may_have_been_dropped`]). `None`: waiters
    /// are never dropped while they live (native).
    pub(crate) slot_us: Option<u64>,
}

impl QueueLog {
    /// Whether `granted` (µs) came before the snapshot that began `owner`'s
    /// current stay in line was taken (known when snapshot times are): that
    /// snapshot, read after its time, still showed the owner waiting, so
    /// the grant was of an earlier stay.
    pub(super) fn granted_before_stay(
        &self,
        arrivals: &Arrivals<'_>,
        owner: &str,
        granted: u64,
    ) -> bool {
        arrivals
            .last
            .get(owner)
            .and_then(|i| self.deadlines.get(*i))
            .is_some_and(|(at, _)| granted < *at)
    }

    /// Whether `first` was ahead of `second` in the last snapshot taken
    /// before `at` (µs) that shows both (`None`: none does, or snapshot
    /// times are unknown). Two waiters still waiting at `at` keep their
    /// order in line until then, so a snapshot read late (its time is taken
    /// before the read: the read may come after `at`, after the head was
    /// handed the lock and left the line) cannot put one ahead of another
    /// it was behind, as "the first in the last snapshot" can.
    ///
    /// `since`: the later of the two waits began then (µs), so snapshots
    /// taken more than [`SNAPSHOT_LAG_US`] before cannot show both; they
    /// are not read (a full scan per call took minutes on a long run).
    pub(super) fn ahead_before(
        &self,
        at: u64,
        since: u64,
        first: &str,
        second: &str,
    ) -> Option<bool> {
        let taken = self.deadlines.partition_point(|(t, _)| *t < at);
        let oldest = self
            .deadlines
            .partition_point(|(t, _)| t.saturating_add(SNAPSHOT_LAG_US) < since);
        let taken = taken.min(self.snapshots.len());
        self.snapshots[oldest.min(taken)..taken]
            .iter()
            .rev()
            .find_map(|line| {
                let x = line.iter().position(|o| o == first)?;
                let y = line.iter().position(|o| o == second)?;
                Some(x < y)
            })
    }

    /// Whether Redisson's rule can have dropped `owner` from the head of
    /// the line before `granted` (µs), the grant of a waiter that was behind
    /// it: its deadline, as the last snapshot before `granted` that shows it
    /// (from snapshot `from` on, its current stay) read it, lowered by one
    /// slot per grant made since to a waiter ahead of it in that snapshot
    /// (`grants`: the grant times of each owner; while anybody waits only
    /// the head is granted, so no other grant lowers it after the read, and
    /// a grant made before the read is in what it read) or never granted,
    /// had passed by then. A waiter whose deadline had not passed cannot
    /// have been dropped: its being overtaken is a violation.
    pub(super) fn may_have_been_dropped(
        &self,
        owner: &str,
        from: usize,
        granted: u64,
        grants: &HashMap<&str, Vec<u64>>,
    ) -> bool {
        let Some(slot) = self.slot_us else {
            return false;
        };
        let mut seen = None;
        for (i, snapshot) in self.snapshots.iter().enumerate().skip(from) {
            let Some((at, deadlines)) = self.deadlines.get(i) else {
                return false;
            };
            if *at >= granted {
                break;
            }
            match snapshot.iter().position(|o| o == owner) {
                Some(pos) => {
                    seen = Some((*at, deadlines.get(pos).copied().flatten(), &snapshot[..pos]));
                }
                None => break,
            }
        }
        let Some((at, Some(deadline), ahead)) = seen else {
            return false;
        };
        // A waiter ahead that left the line without a grant (gave up: it
        // lowers the deadlines behind it too) is counted as well: no record
        // says when it left. At most one slot per waiter ahead, either way.
        let since = ahead
            .iter()
            .filter(|o| {
                grants
                    .get(o.as_str())
                    .is_none_or(|times| times.iter().any(|t| *t > at && *t < granted))
            })
            .count() as u64;
        deadline.saturating_sub(since * slot) <= granted
    }
}

/// The queue's history, owner by owner.
pub(super) struct Arrivals<'a> {
    /// For each owner, the snapshot index of its latest (re)arrival: a
    /// waiter that left the queue without a grant (skipped while paused,
    /// say) and came back, or was moved back, is a new arrival; what was
    /// seen before does not count.
    pub(super) last: HashMap<&'a str, usize>,
    /// Each waiter moved behind a waiter that was behind it (dropped and
    /// queued again within one call, never seen absent), with the snapshot
    /// index, in snapshot order.
    pub(super) moved_back: Vec<(&'a str, usize)>,
}

impl<'a> Arrivals<'a> {
    pub(super) fn of(log: &'a QueueLog) -> Self {
        let mut last = HashMap::new();
        let mut moved_back = Vec::new();
        for (i, snapshot) in log.snapshots.iter().enumerate() {
            let previous = i.checked_sub(1).map(|p| &log.snapshots[p]);
            for (pos, owner) in snapshot.iter().enumerate() {
                let Some(previous) = previous else {
                    last.insert(owner.as_str(), i);
                    continue;
                };
                let Some(before) = previous.iter().position(|o| o == owner) else {
                    last.insert(owner.as_str(), i);
                    continue;
                };
                let overtaken = snapshot[..pos].iter().any(|o| {
                    previous
                        .iter()
                        .position(|p| p == o)
                        .is_some_and(|q| q > before)
                });
                if overtaken {
                    last.insert(owner.as_str(), i);
                    moved_back.push((owner.as_str(), i));
                }
            }
        }
        Self { last, moved_back }
    }

    /// Whether `owner` was seen in snapshot `i` during its latest stay.
    pub(super) fn current(&self, owner: &str, i: usize) -> bool {
        self.last.get(owner).is_some_and(|arrived| i >= *arrived)
    }
}
