//! FIFO (fair locks): live waiters are granted in the order the queue
//! snapshots show them, but for the excuses a force-unlock, a short lease
//! or Redisson's deadline give.

use std::collections::{HashMap, HashSet};

use super::queue::{Arrivals, QueueLog};
use super::types::Report;

/// What [`check_fifo`] reads besides the queue: the queue's history, the
/// grant times of the waiters that stayed alive (see
/// [`live_grants`](super::liveness::live_grants)), the
/// waiters a force-unlock may have revoked and queued again (see
/// `Revocations::requeued_by`, and short leases), and the grant times of
/// each owner of the lock.
pub(super) struct Order<'o, 'h> {
    pub(super) arrivals: &'o Arrivals<'h>,
    pub(super) live: &'o HashMap<&'h str, u64>,
    pub(super) spanned: &'o HashSet<&'h str>,
    pub(super) grants: &'o HashMap<&'h str, Vec<u64>>,
}

/// FIFO (fair locks). Rule: for two waiters that stayed alive (see
/// [`live_grants`](super::liveness::live_grants)) seen in one snapshot, a
/// ahead of b, taken after both last (re)arrived and before both were
/// granted (neither revoked and queued again by a force-unlock), a was
/// granted no later than b, unless the protocol dropped a at the head of
/// the line when its deadline had passed (Redisson, see
/// [`QueueLog::may_have_been_dropped`]: counted apart). Each ordered pair is
/// checked once, at the first snapshot that shows it.
pub(super) fn check_fifo(lock: &str, log: &QueueLog, order: &Order<'_, '_>, report: &mut Report) {
    let mut checked = HashSet::new();
    for (i, snapshot) in log.snapshots.iter().enumerate() {
        for (x, a) in snapshot.iter().enumerate() {
            for b in &snapshot[x + 1..] {
                let (Some(ga), Some(gb)) = (order.live.get(a.as_str()), order.live.get(b.as_str()))
                else {
                    continue;
                };
                // A waiter that may have been revoked and queued again has
                // no place in line to check, and a grant made before a
                // waiter's current stay began is not this stay's (a holder
                // whose hold was revoked and that asked again, say).
                // The excused waiter is excused being overtaken, not
                // overtaking a waiter ahead of it.
                if order.spanned.contains(a.as_str())
                    || log.granted_before_stay(order.arrivals, a, *ga)
                    || log.granted_before_stay(order.arrivals, b, *gb)
                    || !order.arrivals.current(a, i)
                    || !order.arrivals.current(b, i)
                    || !checked.insert((a.as_str(), b.as_str()))
                {
                    continue;
                }
                report.fifo_pairs_checked += 1;
                if ga <= gb {
                    continue;
                }
                if log.may_have_been_dropped(a, i, *gb, order.grants) {
                    report.overtaken_past_deadline += 1;
                    continue;
                }
                report.fifo_violations += 1;
                report.example(format!(
                    "{lock}: {a} queued ahead of {b} (snapshot {i}) but granted after it"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;
    use crate::history::{Bounds, Event, Failovers, Fault, Hold, check};

    #[test]
    fn invalid_holds_and_rearrivals_are_not_held_against() {
        let mut lost = hold("b", 4, 0, 50, 60);
        if let Event::Hold(Hold { valid, .. }) = &mut lost {
            *valid = false;
        }
        // b left the queue (skipped while paused) and came back behind c.
        let events = vec![
            hold("a", 5, 0, 10, 100),
            lost,
            hold("c", 6, 0, 200, 210),
            hold("b2", 7, 0, 300, 310),
        ];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![
                    vec!["b2".into(), "c".into()],
                    vec!["c".into()],
                    vec!["c".into(), "b2".into()],
                ],
                ..QueueLog::default()
            },
        )]);
        let report = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(report.overlaps, 0, "{report:?}");
        assert_eq!(report.token_violations, 0, "{report:?}");
        // The pair (b2, c) seen before b2 left does not count.
        assert_eq!(report.fifo_violations, 0, "{report:?}");
    }

    #[test]
    fn waiters_hit_by_a_fault_are_left_out_of_fifo() {
        // p:1 was queued ahead of q:1 but its process was paused while it
        // waited: it did not stay alive, so the order does not count.
        let events = vec![hold("q:1", 1, 0, 10, 20), hold("p:1", 2, 0, 30, 40)];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![vec!["p:1".into(), "q:1".into()]],
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
        assert_eq!(report.fifo_violations, 0, "{report:?}");
        let unfaulted = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(unfaulted.fifo_violations, 1, "{unfaulted:?}");
    }

    /// A waiter granted, and then seen in line again behind those once
    /// behind it, asked again (a re-entry on a hold it had lost): a new
    /// arrival, neither moved back nor overtaken. Before its grant it
    /// would have been both.
    #[test]
    fn a_waiter_seen_in_line_after_its_grant_asked_again() {
        let events = vec![hold("b", 200, 0, 200, 220), hold("a", 300, 0, 300, 350)];
        let run = |moved_at: u64| {
            let queues = HashMap::from([(
                "l".to_owned(),
                QueueLog {
                    snapshots: vec![vec!["b".into(), "a".into()], vec!["a".into(), "b".into()]],
                    deadlines: vec![(100, vec![None, None]), (moved_at, vec![None, None])],
                    slot_us: None,
                },
            )]);
            let report = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
            (report.requeued, report.fifo_violations)
        };
        assert_eq!(run(250), (0, 0));
        assert_eq!(run(150), (1, 1));
    }

    /// A waiter with a lease shorter than a handoff's allowance may see the
    /// grant handed to it run out before it acts on it, and ask again at
    /// the back: its place in line is not checked. With a lease of its
    /// client's (none given) it is.
    #[test]
    fn a_waiter_with_a_lease_shorter_than_a_handoff_may_lose_its_turn() {
        let run = |lease_ms: Option<u64>| {
            let a = with(hold("a", 300, 0, 300, 350), |h| h.lease_ms = lease_ms);
            let events = vec![hold("b", 200, 0, 200, 220), a];
            let queues = HashMap::from([(
                "l".to_owned(),
                QueueLog {
                    snapshots: vec![vec!["a".into(), "b".into()], vec!["b".into(), "a".into()]],
                    ..QueueLog::default()
                },
            )]);
            let report = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
            report.violations()
        };
        // BOUNDS' handoff allowance is 1 ms.
        assert_eq!(run(Some(0)), 0);
        assert_eq!(run(Some(1)), 1);
        assert_eq!(run(None), 1);
    }

    /// The waiter a force-unlock may have revoked and queued again is the
    /// head of the line when the release before it began (as the last
    /// snapshot before then shows it), not the waiter that asked first: a
    /// request can reach the queue after a later one. b asked first but
    /// queued behind a; the release at 100 handed the lock to a, the
    /// force-unlock revoked it, and a queued again behind b and c.
    #[test]
    fn the_waiter_excused_at_a_force_unlock_is_the_head_of_the_line() {
        let events = vec![
            hold("b", 200, 40, 200, 220),
            hold("c", 250, 45, 250, 270),
            hold("a", 300, 50, 300, 350),
            force_unlock(100, 110),
        ];
        let run = |times: Vec<(u64, Vec<Option<u64>>)>| {
            let queues = HashMap::from([(
                "l".to_owned(),
                QueueLog {
                    snapshots: vec![vec!["a".into(), "b".into(), "c".into()]],
                    deadlines: times,
                    slot_us: None,
                },
            )]);
            check(&events, &queues, true, &[], BOUNDS, &Failovers::default()).fifo_violations
        };
        assert_eq!(run(vec![(60, vec![None, None, None])]), 0);
        // Without snapshot times the first to ask (b) is excused, and a's
        // place is checked: ahead of c, and ahead of b (b excused being
        // overtaken, not overtaking).
        assert_eq!(run(Vec::new()), 2);
    }

    /// A chain of handoffs inside one force-unlock's window: the release
    /// before it handed the lock to a, a held it and let it go by its own
    /// release, which handed the lock to b, and the force-unlock revoked b
    /// before it proceeded: b queued again behind c. The waiter excused is
    /// b (a was served), so b granted after c is no FIFO violation; a
    /// waiter overtaken with no force-unlock in its wait still is (a
    /// torture under load reported the first as one).
    #[test]
    fn a_waiter_served_inside_a_force_unlocks_window_is_not_the_one_it_revoked() {
        let events = vec![
            hold("a", 102, 40, 103, 105),
            hold("c", 108, 50, 109, 140),
            hold("b", 150, 45, 151, 170),
            force_unlock(100, 112),
        ];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![vec!["a".into(), "b".into(), "c".into()]],
                deadlines: vec![(60, vec![None, None, None])],
                slot_us: None,
            },
        )]);
        let run = |events: &[Event]| {
            check(events, &queues, true, &[], BOUNDS, &Failovers::default()).fifo_violations
        };
        assert_eq!(run(&events), 0);
        assert_eq!(run(&events[..3]), 1, "no force-unlock: b overtaken by c");
    }

    /// The head of the line had a 4 ms lease: the handoff's grant ran out
    /// before it proceeded (it is excused for that on its own), a refresh
    /// handed the lock to b, and the force-unlock revoked b, who queued
    /// again behind c. The force-unlock's excuse is b's, not the short-lease
    /// head's (a torture under load reported b overtaken by c).
    #[test]
    fn a_short_lease_head_does_not_take_a_force_unlocks_excuse() {
        let events = vec![
            // A lease below the tests' handoff allowance (1 ms).
            with(hold("a", 102, 40, 103, 130), |h| {
                h.valid = false;
                h.lease_ms = Some(0);
            }),
            hold("c", 108, 50, 109, 140),
            hold("b", 150, 45, 151, 170),
            force_unlock(100, 112),
        ];
        let report = native(&events, timed(&[(60, &["a", "b", "c"])]));
        assert_eq!(report.fifo_violations, 0, "{report:?}");
    }

    /// Redisson drops the head of the line when its deadline has passed,
    /// live or not: a waiter overtaken then is counted apart; one whose
    /// deadline (lowered by one slot per grant since it was read) had not
    /// passed is a violation, and so is any overtaking where waiters are
    /// never dropped (native) or the deadline is unknown.
    #[test]
    fn an_overtaken_waiter_is_excused_only_past_its_deadline() {
        // c granted at 100, b at 200, a (ahead of b since 50) at 300.
        let events = vec![
            hold("c", 100, 0, 100, 150),
            hold("b", 200, 0, 200, 250),
            hold("a", 300, 0, 300, 350),
        ];
        let run = |deadline: Option<u64>, slot_us: Option<u64>| {
            let queues = HashMap::from([(
                "l".to_owned(),
                QueueLog {
                    // c ahead of a: its grant lowers a's deadline.
                    snapshots: vec![vec!["c".into(), "a".into(), "b".into()]],
                    deadlines: vec![(50, vec![Some(500), deadline, Some(9_000)])],
                    slot_us,
                },
            )]);
            let report = check(&events, &queues, false, &[], BOUNDS, &Failovers::default());
            (report.fifo_violations, report.overtaken_past_deadline)
        };
        // Deadline 1,150 lowered by c's grant (one slot of 1,000): 150,
        // passed at b's grant (200).
        assert_eq!(run(Some(1_150), Some(1_000)), (0, 1));
        // 1,250 - 1,000 = 250: not passed at 200.
        assert_eq!(run(Some(1_250), Some(1_000)), (1, 0));
        assert_eq!(run(Some(150), None), (1, 0), "no slot: never dropped");
        assert_eq!(run(None, Some(1_000)), (1, 0), "no deadline read");
    }

    #[test]
    fn fifo_pairs_are_checked_once_and_only_in_a_current_stay() {
        // (a, b) is seen three times: checked once. (c, a) and (c, b) were
        // seen before c left and came back: not checked (c was granted
        // after a). x was never granted (or not live): its pairs are not
        // checked. (b, c), seen at the end, was granted the other way.
        let log = queue(&[&["c", "a", "b", "x"], &["a", "b"], &["a", "b", "c"]]);
        let arrivals = Arrivals::of(&log);
        let live = HashMap::from([("a", 10), ("b", 20), ("c", 15)]);
        let mut report = Report::default();
        let order = Order {
            arrivals: &arrivals,
            live: &live,
            spanned: &HashSet::new(),
            grants: &HashMap::new(),
        };
        check_fifo("l", &log, &order, &mut report);
        assert_eq!(
            (report.fifo_pairs_checked, report.fifo_violations),
            (3, 1),
            "{report:?}"
        );
        assert_eq!(
            report.examples,
            ["l: b queued ahead of c (snapshot 2) but granted after it"]
        );
    }

    // ---- Adversary 3: the excuses of 059d527/d43bc04, each shown hiding a
    // ---- real violation. Every history below breaks a promise; each test
    // ---- fails while the checker passes it.

    /// Change 2 (`requeued_by`): the handoff's new holder a proceeded
    /// before the force-unlock revoked its hold (a recorded hold, found
    /// revoked): nobody was queued again. The native force-unlock hands
    /// the lock to the next live waiter, b; c, behind b, is granted before
    /// it. The checker hands the one excuse per force-unlock to b instead
    /// (a, revoked, is filtered out before the excuse is chosen) and b's
    /// overtaking goes unseen. Before d43bc04 (the excused waiter had to be
    /// seen moved back) it was caught.
    #[test]
    fn a_force_unlock_whose_revoked_holder_proceeded_excuses_no_waiter() {
        let events = vec![
            hold("h", 1, 0, 1, 100),
            force_unlock(100, 104),
            hold("a", 101, 5, 102, 150),
            hold("c", 200, 20, 200, 210),
            hold("b", 300, 10, 300, 310),
        ];
        let report = native(&events, timed(&[(50, &["a", "b", "c"])]));
        assert_eq!(report.revoked, 1, "a's hold is the revoked one: {report:?}");
        assert_eq!(
            report.fifo_violations, 1,
            "b, live and next in line, overtaken by c: {report:?}"
        );
    }

    /// Change 2 (`check_fifo` skips pairs where EITHER side is excused):
    /// x was handed the lock, revoked before it proceeded and queued again
    /// behind p (the snapshots show it), and the force-unlock handed the
    /// lock to p. x is then granted before p: the requeued waiter jumped
    /// back to the front over a live waiter ahead of it. An excuse for
    /// being overtaken is no excuse for overtaking. Caught before 059d527
    /// (only the waiter ahead was skipped).
    #[test]
    fn the_waiter_excused_at_a_force_unlock_does_not_jump_the_line() {
        let events = vec![
            hold("h", 1, 0, 1, 100),
            force_unlock(100, 104),
            hold("x", 200, 10, 200, 210),
            hold("p", 300, 20, 300, 310),
        ];
        let report = native(&events, timed(&[(50, &["x", "p"]), (120, &["p", "x"])]));
        assert_eq!(
            report.fifo_violations, 1,
            "x, queued behind p again, granted before it: {report:?}"
        );
    }

    /// Change 2 (`line_before`): a snapshot's time is read BEFORE its
    /// INSPECT, so "taken before the release" does not mean "read before
    /// it". Here the snapshot timed 99 was read after the release at 100
    /// had handed the lock to a (a, live and never faulted, is gone from
    /// it: it cannot have been read before a's grant). The excuse goes to
    /// b, the first in that line; the snapshot at 120 even shows b still
    /// ahead of c, so b was not queued again. c, behind b, is granted
    /// before it: unseen. Caught before 059d527.
    #[test]
    fn a_snapshot_read_after_the_release_does_not_pick_the_excused_waiter() {
        let events = vec![
            hold("h", 1, 0, 1, 100),
            force_unlock(100, 104),
            hold("c", 200, 20, 200, 210),
            hold("b", 300, 10, 300, 310),
            hold("a", 400, 5, 400, 410),
        ];
        let report = native(
            &events,
            timed(&[
                (50, &["a", "b", "c"]),
                (99, &["b", "c"]),
                (120, &["b", "c", "a"]),
            ]),
        );
        assert_eq!(
            report.fifo_violations, 1,
            "b overtaken by c, both live, b never requeued: {report:?}"
        );
    }

    /// Change 4 (`live_grants`): a short explicit lease may make a waiter
    /// LOSE its turn (a handed grant runs out before it acts), which
    /// excuses it being overtaken, not it overtaking. b (lease 10 ms, below
    /// the 300 ms handoff allowance of real runs) is granted before a, live
    /// and queued ahead of it: unseen, because b is dropped from the order
    /// check altogether.
    #[test]
    fn a_waiter_with_a_short_lease_does_not_overtake_unchecked() {
        let real = Bounds {
            handoff_us: 300_000,
            ..BOUNDS
        };
        let b = with(hold("b", 200, 0, 200, 220), |h| h.lease_ms = Some(10));
        let events = vec![b, hold("a", 300, 0, 300, 350)];
        let queues = HashMap::from([("l".to_owned(), queue(&[&["a", "b"]]))]);
        let report = check(&events, &queues, true, &[], real, &Failovers::default());
        assert_eq!(
            report.fifo_violations, 1,
            "a (client lease) overtaken by b: {report:?}"
        );
    }

    /// Change 5 (`may_have_been_dropped`): only a grant to a waiter AHEAD
    /// of a lowers a's deadline after the snapshot was read (Redisson
    /// grants only the head while anybody waits). x, in no snapshot, was
    /// granted before the read (its acquire returned at 100, after the
    /// snapshot's time, 50): the read deadline already counts it. a is the
    /// head with nobody ahead, its deadline 1,150 had not passed when b
    /// took the lock at 200: a live waiter overtaken. The checker lowers
    /// a's deadline by x's slot and calls it dropped. (The existing test
    /// `an_overtaken_waiter_is_excused_only_past_its_deadline` asserts the
    /// same history as an excuse.)
    #[test]
    fn redisson_lowers_a_deadline_only_by_grants_of_waiters_ahead() {
        let events = vec![
            hold("x", 100, 0, 100, 150),
            hold("b", 200, 0, 200, 250),
            hold("a", 300, 0, 300, 350),
        ];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![vec!["a".into(), "b".into()]],
                deadlines: vec![(50, vec![Some(1_150), Some(9_000)])],
                slot_us: Some(1_000),
            },
        )]);
        let report = check(&events, &queues, false, &[], BOUNDS, &Failovers::default());
        assert_eq!(
            (report.fifo_violations, report.overtaken_past_deadline),
            (1, 0),
            "a, at the head with its deadline ahead, overtaken by b: {report:?}"
        );
    }

    // ---- Adversary (checker review of 3e94bf2, cad4b44, 45a4a1d, 4ea0a7c):
    // ---- each history below holds a real violation; each test fails
    // ---- while the checker passes it.

    /// `served` (cad4b44) takes a grant that ended before the next grant
    /// for one let go by its own release, even when its holder was told it
    /// lost the lock (valid false): a proceeded, the force-unlock revoked
    /// it (nothing else can have: a normal lease, no fault), and handed the
    /// lock to b, the next in line; c granted at 106 overtook b. The excuse
    /// skips a and goes to b, and the breach goes unseen. With a valid
    /// (released) a, the excuse is b's rightly: see
    /// `a_waiter_served_inside_a_force_unlocks_window_is_not_the_one_it_revoked`.
    #[test]
    fn adv_a_holder_revoked_inside_the_window_is_not_served() {
        let events = vec![
            with(hold("a", 101, 40, 102, 104), |h| h.valid = false),
            hold("c", 106, 50, 107, 140),
            hold("b", 150, 45, 151, 170),
            force_unlock(100, 112),
        ];
        let queue = || timed(&[(60, &["a", "b", "c"])]);
        let control = native(&events[..3], queue());
        assert_eq!(control.fifo_violations, 1, "{control:?}");
        let report = native(&events, queue());
        assert_eq!(
            report.fifo_violations, 1,
            "a's proceeded hold was the revoked one: b overtaken by c: {report:?}"
        );
    }

    /// 45a4a1d: a short-lease head is no candidate for a force-unlock's
    /// excuse, even when it proceeded and its hold is the one the
    /// force-unlock revoked (valid to the end, taken away by c's grant
    /// inside the window: `revoked_holds` picks it). Then nobody was queued
    /// again: the lock went to b, next in line, and c overtook it. The
    /// excuse goes to b instead.
    #[test]
    fn adv_a_short_lease_head_whose_hold_was_revoked_spends_the_excuse() {
        let bounds = Bounds {
            handoff_us: 300_000,
            ..BOUNDS
        };
        let events = vec![
            // A 100 ms lease, below the 300 ms handoff allowance; it held
            // 27 µs and still held at its end.
            with(hold("a", 102, 40, 103, 130), |h| h.lease_ms = Some(100)),
            hold("c", 108, 50, 109, 140),
            hold("b", 150, 45, 151, 170),
            force_unlock(100, 112),
        ];
        let run = |events: &[Event]| {
            let queues = HashMap::from([("l".to_owned(), timed(&[(60, &["a", "b", "c"])]))]);
            check(events, &queues, true, &[], bounds, &Failovers::default())
        };
        let report = run(&events);
        assert_eq!(report.revoked, 1, "a's hold is the revoked one: {report:?}");
        assert_eq!(
            report.fifo_violations, 1,
            "nobody was queued again; b overtaken by c: {report:?}"
        );
    }

    // ---- Adversary 2: what the checker's exclusions can hide.

    /// A force-unlock can revoke at most one grant: the one the handoff
    /// made at that moment (to the head of the queue). The checker leaves
    /// out of the FIFO check *every* waiter whose wait spanned it, so a
    /// queue served in exactly the reverse order is not seen, and as long
    /// as another lock had one pair checked, `fifo_pairs_checked > 0` and
    /// the torture's verdict is "passed", not "inconclusive".
    #[test]
    fn a_reversed_queue_is_not_hidden_by_one_force_unlock() {
        let queues = HashMap::from([
            (
                "l".to_owned(),
                QueueLog {
                    snapshots: vec![
                        vec!["a".into(), "b".into(), "c".into(), "d".into()],
                        vec!["a".into(), "b".into(), "c".into(), "d".into()],
                    ],
                    ..QueueLog::default()
                },
            ),
            (
                "m".to_owned(),
                QueueLog {
                    snapshots: vec![vec!["x".into(), "y".into()]],
                    ..QueueLog::default()
                },
            ),
        ]);
        let events = vec![
            // h held l; an operator force-unlocked it while a..d waited.
            Event::Hold(Hold {
                lock: "l".into(),
                owner: "h".into(),
                token: Some(1),
                requested: 0,
                start: 1,
                end: 30,
                valid: false,
                combo: String::new(),
                reentry: false,
                lease_ms: None,
                mode: None,
                permits: None,
            }),
            force_unlock(20, 25),
            // Served in the reverse of arrival order, long after the
            // force-unlock (outside its revocation window).
            grant("l", "d", 2, 10, 5_000_000),
            grant("l", "c", 3, 9, 6_000_000),
            grant("l", "b", 4, 8, 7_000_000),
            grant("l", "a", 5, 7, 8_000_000),
            // Another lock, served in order: one pair checked.
            grant("m", "x", 1, 1, 100),
            grant("m", "y", 2, 2, 200),
        ];
        // The control: without the force-unlock, all six pairs are seen.
        let without: Vec<Event> = events
            .iter()
            .filter(|e| !matches!(e, Event::ForceUnlock { .. }))
            .cloned()
            .collect();
        let control = check(&without, &queues, true, &[], LOOSE, &Failovers::default());
        assert_eq!(control.fifo_violations, 6, "{control:?}");
        let report = check(&events, &queues, true, &[], LOOSE, &Failovers::default());
        // What the torture's verdict reads (report.rs): 0 violations and
        // some pair checked is "passed".
        let verdict_passed = report.violations() == 0 && report.fifo_pairs_checked > 0;
        // At most one of a..d can have been revoked (and requeued): among
        // the three others, every pair is served out of order.
        assert!(
            report.fifo_violations >= 3 || !verdict_passed,
            "a queue served in reverse went unseen and the run passed: {report:?}"
        );
    }
}
