//! Failovers: when they were injected, and the window after one in which
//! two holds may meet (asynchronous replication) or a hold may be lost.
//! The overlap and permit checks take their excuse from here, the summary
//! the lost holds and how long each failover stopped its locks.

use super::types::{Event, Hold, holds_by_lock};

/// When failovers were injected (server time, µs); how long one may take
/// until the new master serves (the old master may grant until then: a
/// `SENTINEL FAILOVER` does not stop it at once); and how long after one a
/// second holder may still meet a first one that the failover made lose
/// the lock without knowing yet (µs).
#[derive(Debug, Clone, Default)]
pub(crate) struct Failovers {
    pub(crate) at: Vec<Failover>,
    pub(crate) settle_us: u64,
    pub(crate) window_us: u64,
    /// The client ids (owner prefixes) of the workers that wait for a
    /// replica after each acquisition and renewal (`min_replicas`): two of
    /// their holds never overlap across a failover (a promoted replica has
    /// both), so such an overlap is a violation, never the window's.
    pub(crate) acked_clients: Vec<String>,
}

/// One failover fault: when (server time, µs), what kind (for the report),
/// and the locks it may lose (those the failed master served; empty: every
/// lock, as under Sentinel, where one master serves them all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failover {
    pub(crate) at: u64,
    pub(crate) kind: String,
    pub(crate) locks: Vec<String>,
}

impl Failover {
    /// A failover of the one master that serves every lock.
    pub(crate) fn of_all(at: u64, kind: &str) -> Self {
        Self {
            at,
            kind: kind.to_owned(),
            locks: Vec::new(),
        }
    }

    fn hits(&self, lock: &str) -> bool {
        self.locks.is_empty() || self.locks.iter().any(|l| l == lock)
    }
}

impl Failovers {
    /// Whether `owner`'s holds were acknowledged by a replica.
    fn acked(&self, owner: &str) -> bool {
        self.acked_clients.iter().any(|client| {
            owner
                .strip_prefix(client.as_str())
                .is_some_and(|rest| rest.starts_with(':'))
        })
    }

    /// The overlap of `earlier` (began at `earlier_start`) and `later` (began
    /// at `later_start`) is the failover window's: a failover came between
    /// (see [`Failovers::between`]) and at least one of the two holds was
    /// not acknowledged by a replica (lost at the promotion, or taken on a
    /// master already replaced).
    pub(super) fn excuse(&self, lock: &str, earlier: (&str, u64), later: (&str, u64)) -> bool {
        self.between(lock, earlier.1, later.1) && !(self.acked(earlier.0) && self.acked(later.0))
    }

    /// The hold of `lock` that began at `earlier` may have been granted by
    /// a master that a failover of that lock's master then replaced (it
    /// began before that failover settled), and the one that began at
    /// `later` came after the failover began, within its window.
    fn between(&self, lock: &str, earlier: u64, later: u64) -> bool {
        self.at.iter().any(|f| {
            f.hits(lock)
                && earlier <= f.at.saturating_add(self.settle_us)
                && f.at <= later
                && later - f.at <= self.window_us
        })
    }

    /// Holds told they lost the lock (`is_held()` false at their end):
    /// all of them, and those of a lock a failover hit that ended within
    /// that failover's window.
    pub(crate) fn lost(&self, events: &[Event]) -> (usize, usize) {
        let lost: Vec<&Hold> = events
            .iter()
            .filter_map(|e| match e {
                Event::Hold(hold) if !hold.valid => Some(hold),
                _ => None,
            })
            .collect();
        let at_failover = lost
            .iter()
            .filter(|h| {
                self.at.iter().any(|f| {
                    f.hits(&h.lock)
                        && h.start <= f.at.saturating_add(self.settle_us)
                        && h.end >= f.at
                        && h.end - f.at <= self.window_us
                })
            })
            .count();
        (lost.len(), at_failover)
    }

    /// How long each failover stopped its locks (µs), by kind: the longest
    /// stretch, from the fault or a grant within the window, to the next
    /// grant of any lock the failover hit. The window ends at the next
    /// failover, if that comes first (a stretch across it counts up to it).
    /// Measured from the holds; a failover after which no hit lock was
    /// granted again is left out (the run ended first).
    pub(crate) fn recovery(&self, events: &[Event]) -> Vec<(String, u64)> {
        let by_lock = holds_by_lock(events);
        let mut times: Vec<u64> = self.at.iter().map(|f| f.at).collect();
        times.sort_unstable();
        self.at
            .iter()
            .filter_map(|f| {
                let next = times.iter().find(|&&t| t > f.at).copied();
                let mut starts: Vec<u64> = by_lock
                    .iter()
                    .filter(|(lock, _)| f.hits(lock))
                    .flat_map(|(_, holds)| holds.iter().map(|h| h.start))
                    .filter(|&s| s >= f.at)
                    .collect();
                starts.sort_unstable();
                let end =
                    f.at.saturating_add(self.window_us)
                        .min(next.unwrap_or(u64::MAX));
                let mut longest = 0;
                let mut from = f.at;
                for start in starts {
                    longest = longest.max(start.min(end) - from);
                    if start >= end {
                        return Some((f.kind.clone(), longest));
                    }
                    from = start;
                }
                (from > f.at).then(|| (f.kind.clone(), longest))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::history::overlaps::check_overlaps;
    use crate::history::test_support::*;
    use crate::history::types::Report;

    /// Two holds whose clients both wait for a replica (`min_replicas`)
    /// never overlap across a failover: the promoted replica has both. Such
    /// an overlap is a violation; with either client not waiting, it is the
    /// failover window's.
    #[test]
    fn replica_acknowledged_holds_get_no_failover_window() {
        let events = vec![
            hold("p:1", 1, 0, 10, 100),
            // A failover at 15: the next hold began after it.
            hold("q:1", 2, 0, 20, 30),
        ];
        let run = |acked: &[&str]| {
            let failovers = Failovers {
                at: vec![Failover::of_all(15, "test")],
                settle_us: 0,
                window_us: 10,
                acked_clients: acked.iter().map(|c| (*c).to_owned()).collect(),
            };
            let mut report = Report::default();
            check_overlaps(
                "l",
                &holds(&events),
                &failovers,
                &HashMap::new(),
                &mut report,
            );
            (report.overlaps, report.failover_overlaps)
        };
        assert_eq!(run(&["p", "q"]), (1, 0));
        assert_eq!(run(&["p"]), (0, 1));
        assert_eq!(run(&["q"]), (0, 1));
        // A prefix of a client id is not that client.
        assert_eq!(run(&["p:", "q:1"]), (0, 1));
    }

    #[test]
    fn overlaps_across_a_failover_are_counted_apart() {
        let events = vec![
            hold("a", 1, 0, 10, 100),
            // A failover at 15: b began after it (within the window).
            hold("b", 2, 0, 20, 30),
            // c began after the window of the failover at 15 ended.
            hold("c", 3, 0, 40, 50),
        ];
        let failovers = Failovers {
            at: vec![Failover::of_all(15, "test")],
            settle_us: 0,
            window_us: 10,
            acked_clients: Vec::new(),
        };
        let mut report = Report::default();
        check_overlaps(
            "l",
            &holds(&events),
            &failovers,
            &HashMap::new(),
            &mut report,
        );
        assert_eq!(
            (report.overlaps, report.failover_overlaps),
            (1, 1),
            "{report:?}"
        );
        assert!(
            report.examples[0].contains("across a failover"),
            "{report:?}"
        );
        assert_eq!(report.violations(), 1);
        // A failover that settled before the earlier hold began explains
        // nothing; one still settling when it began does.
        let before = Failovers {
            at: vec![Failover::of_all(5, "test")],
            settle_us: 4,
            window_us: 1000,
            acked_clients: Vec::new(),
        };
        let mut report = Report::default();
        check_overlaps("l", &holds(&events), &before, &HashMap::new(), &mut report);
        assert_eq!((report.overlaps, report.failover_overlaps), (2, 0));
        let settling = Failovers {
            settle_us: 5,
            ..before
        };
        let mut report = Report::default();
        check_overlaps(
            "l",
            &holds(&events),
            &settling,
            &HashMap::new(),
            &mut report,
        );
        assert_eq!((report.overlaps, report.failover_overlaps), (0, 2));
    }

    #[test]
    fn a_failover_explains_overlaps_of_the_locks_it_hit_only() {
        let events = vec![hold("a", 1, 0, 10, 100), hold("b", 2, 0, 20, 30)];
        let scoped = |locks: &[&str]| Failovers {
            at: vec![Failover {
                at: 15,
                kind: "test".into(),
                locks: locks.iter().map(|l| (*l).to_owned()).collect(),
            }],
            settle_us: 0,
            window_us: 10,
            acked_clients: Vec::new(),
        };
        let mut report = Report::default();
        check_overlaps(
            "l",
            &holds(&events),
            &scoped(&["other"]),
            &HashMap::new(),
            &mut report,
        );
        assert_eq!((report.overlaps, report.failover_overlaps), (1, 0));
        let mut report = Report::default();
        check_overlaps(
            "l",
            &holds(&events),
            &scoped(&["other", "l"]),
            &HashMap::new(),
            &mut report,
        );
        assert_eq!((report.overlaps, report.failover_overlaps), (0, 1));
    }

    #[test]
    fn recovery_is_the_longest_stall_of_the_hit_locks_after_a_failover() {
        let events = vec![
            hold("a", 1, 0, 10, 11),
            // Fault at 100: grants at 105, then none until 400.
            hold("b", 2, 0, 105, 106),
            hold("c", 3, 0, 400, 401),
            hold("d", 4, 0, 410, 411),
        ];
        let failovers = Failovers {
            at: vec![Failover::of_all(100, "kill")],
            settle_us: 0,
            window_us: 1_000,
            acked_clients: Vec::new(),
        };
        assert_eq!(failovers.recovery(&events), vec![("kill".to_owned(), 295)]);
        // A failover of another lock's master measures that lock only: none
        // granted after it.
        let other = Failovers {
            at: vec![Failover {
                at: 100,
                kind: "kill".into(),
                locks: vec!["other".into()],
            }],
            ..failovers.clone()
        };
        assert_eq!(other.recovery(&events), Vec::new());
        // A second failover at 300 ends the first one's window: the stall
        // counts up to it, and the second one's from its own fault.
        let two = Failovers {
            at: vec![Failover::of_all(100, "kill"), Failover::of_all(300, "stop")],
            ..failovers
        };
        assert_eq!(
            two.recovery(&events),
            vec![("kill".to_owned(), 195), ("stop".to_owned(), 100)]
        );
    }

    #[test]
    fn lost_holds_are_counted_and_those_at_a_failover_apart() {
        let mut events = vec![
            hold("a", 1, 0, 10, 20),
            // Lost across the failover at 100.
            hold("b", 2, 0, 90, 150),
            // Lost long after the window.
            hold("c", 3, 0, 5_000, 5_010),
        ];
        for e in &mut events[1..] {
            if let Event::Hold(h) = e {
                h.valid = false;
            }
        }
        let failovers = Failovers {
            at: vec![Failover::of_all(100, "kill")],
            settle_us: 0,
            window_us: 1_000,
            acked_clients: Vec::new(),
        };
        assert_eq!(failovers.lost(&events), (2, 1));
    }
}
