//! Requeues (fair locks): a live waiter is never moved back in line (a
//! violation under native only: Redisson drops a live waiter past its slot
//! and queues it again).

use std::collections::HashMap;

use super::queue::{Arrivals, QueueLog};
use super::types::Report;

/// Requeues (fair locks; a violation under native only, see
/// [`Report::strict_order`]). Rule: a waiter that stayed alive (see
/// [`live_grants`](super::liveness::live_grants)) is never moved behind a waiter that was behind it
/// before it is granted (one granted and seen in line again asked again). A
/// client that cannot refresh within its waiter ttl is dead by the
/// protocol's rule and queued again, as Redisson drops a waiter past its
/// slot.
pub(super) fn check_requeues(
    lock: &str,
    log: &QueueLog,
    arrivals: &Arrivals<'_>,
    live: &HashMap<&str, u64>,
    report: &mut Report,
) {
    for (owner, i) in &arrivals.moved_back {
        // Granted before the snapshot that shows it moved back was taken:
        // it asked again (a re-entry on a hold it had lost, say), a new
        // arrival.
        let asked_again =
            |granted: &u64| log.deadlines.get(*i).is_some_and(|(at, _)| *granted < *at);
        if live.get(owner).is_some_and(|granted| !asked_again(granted)) {
            report.requeued += 1;
            report.example(format!(
                "{lock}: {owner} was moved to the back of the queue (snapshot {i})"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;
    use crate::history::{Event, Failovers, Fault, check};

    #[test]
    fn requeued_waiters_hit_by_a_fault_are_not_held_against() {
        let events = vec![hold("q:1", 1, 0, 10, 20), hold("p:1", 2, 0, 30, 40)];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![
                    vec!["p:1".into(), "q:1".into()],
                    vec!["q:1".into(), "p:1".into()],
                ],
                ..QueueLog::default()
            },
        )]);
        let faults = [Fault {
            at: 5,
            client: "p".into(),
        }];
        let report = check(
            &events,
            &queues,
            true,
            &faults,
            BOUNDS,
            &Failovers::default(),
        );
        assert_eq!(report.requeued, 0, "{report:?}");
        let unfaulted = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(unfaulted.requeued, 1, "{unfaulted:?}");
    }

    #[test]
    fn requeued_waiters_are_reported() {
        // a was ahead of b, then behind it: dropped and queued again.
        let events = vec![hold("b", 1, 0, 10, 20), hold("a", 2, 0, 30, 40)];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![vec!["a".into(), "b".into()], vec!["b".into(), "a".into()]],
                ..QueueLog::default()
            },
        )]);
        let strict = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(
            (strict.requeued, strict.fifo_violations),
            (1, 0),
            "{strict:?}"
        );
        assert_eq!(strict.violations(), 1);
        let lenient = check(&events, &queues, false, &[], BOUNDS, &Failovers::default());
        assert_eq!(lenient.violations(), 0, "{lenient:?}");
    }

    #[test]
    fn requeues_are_live_waiters_moved_back() {
        // x and a are moved behind b (requeues; x is not live); c leaves
        // and comes back (a new arrival, not a requeue).
        let log = queue(&[
            &["x", "a", "b", "c"],
            &["b", "x", "a"],
            &["b", "x", "a", "c"],
        ]);
        let arrivals = Arrivals::of(&log);
        assert_eq!(arrivals.moved_back, [("x", 1), ("a", 1)]);
        assert_eq!(arrivals.last["c"], 2);
        let live = HashMap::from([("a", 10), ("b", 5), ("c", 20)]);
        let mut report = Report::default();
        check_requeues("l", &log, &arrivals, &live, &mut report);
        assert_eq!(report.requeued, 1, "{report:?}");
        assert_eq!(
            report.examples,
            ["l: a was moved to the back of the queue (snapshot 1)"]
        );
    }

    #[test]
    fn a_waiter_whose_grant_a_force_unlock_revoked_may_queue_again() {
        // a was handed the lock, a force-unlock revoked it before it
        // proceeded, and it queued again behind b: not a requeue of a live
        // waiter. Without the force-unlock it is one.
        let queues = HashMap::from([("l".to_owned(), queue(&[&["a", "b"], &["b", "a"]]))]);
        let mut events = vec![
            hold("b", 2, 5, 50, 60),
            hold("a", 3, 0, 70, 80),
            force_unlock(30, 40),
        ];
        let run =
            |events: &[Event]| check(events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(run(&events).requeued, 0, "{:?}", run(&events));
        events.pop();
        assert_eq!(run(&events).requeued, 1, "{:?}", run(&events));
    }
}
