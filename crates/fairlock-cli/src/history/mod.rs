//! Lock histories and the checker behind `fairlock torture`.
//!
//! Workers record every hold with Redis server time read right after the
//! acquire returned and right before the release, the owner and the fencing
//! token; and every wait that ended without a grant. The orchestrator adds
//! snapshots of each fair lock's queue. [`check`] composes one checker per
//! property, each in a module of its own, documented with the rule it
//! checks and tested beside it:
//! - [`overlaps`]: no two valid holds of one lock intersect (the excuses
//!   are a force-unlock's, see [`revocations`], and a failover's, see
//!   [`failovers`]);
//! - [`tokens`] (native): tokens of valid holds only go up (a semaphore's:
//!   unique);
//! - [`permits`] (semaphores): never more permits out than the total;
//! - [`liveness`] (fair locks): every grant within its bound;
//! - [`requeues`] (fair locks): no live waiter moved back in line;
//! - [`fifo`] (fair locks): live waiters granted in queue order;
//! - [`data`]: application data under a lock's key left intact.
//!
//! What they read is in [`types`] (the holds and other events, the faults,
//! the report) and [`queue`] (the queue snapshots).
//!
//! Holds carry the feature combination their round drew (see [`combo`]);
//! [`tally()`] counts, per combination, how often it was drawn and how often
//! it was actually checked, so that a run which drew a combination but
//! never exercised it says so instead of passing.

mod data;
mod failovers;
mod fifo;
mod liveness;
mod overlaps;
mod permits;
mod queue;
#[cfg(test)]
mod recheck;
mod requeues;
mod revocations;
mod tally;
#[cfg(test)]
pub(crate) mod test_support;
mod tokens;
mod types;

use std::collections::HashMap;

use data::check_data;
use fifo::{Order, check_fifo};
use liveness::{FaultTimes, check_liveness, live_grants};
use overlaps::check_overlaps;
use permits::check_permits;
use queue::Arrivals;
use requeues::check_requeues;
use revocations::Revocations;
use tokens::{check_tokens, check_unique_tokens};
use types::holds_by_lock;

pub(crate) use failovers::{Failover, Failovers};
pub(crate) use queue::QueueLog;
pub(crate) use tally::{Tally, longest_stall, tally};
pub(crate) use types::{
    Bounds, Event, Fault, Hold, Permits, Report, Side, UNFINISHED_FORCE_UNLOCK_US, Window, combo,
};

/// Check `events` (all workers) against `queues` (one per fair lock name:
/// FIFO, requeues and liveness are checked for those locks only; a non-fair
/// lock may starve a waiter by design); `faults` are the faults injected,
/// at server times (µs). `native`: tokens are checked, and a requeue is a
/// violation.
pub(crate) fn check(
    events: &[Event],
    queues: &HashMap<String, QueueLog>,
    native: bool,
    faults: &[Fault],
    bounds: Bounds,
    failovers: &Failovers,
) -> Report {
    let mut report = Report {
        strict_order: native,
        ..Report::default()
    };
    let run = Run {
        native,
        bounds,
        faults: FaultTimes::new(faults),
        failovers,
        revocations: Revocations::of(events),
    };
    for (lock, holds) in holds_by_lock(events) {
        check_lock(&run, lock, holds, queues.get(lock), &mut report);
    }
    check_data(events, &mut report);
    report
}

/// What the checks of every lock share: the run's settings, its faults,
/// failovers and force-unlocks.
struct Run<'a> {
    native: bool,
    bounds: Bounds,
    faults: FaultTimes<'a>,
    failovers: &'a Failovers,
    revocations: Revocations,
}

/// The checks of one lock's holds (in start order): a semaphore's permits
/// and tokens; a lock's overlaps and tokens, and for a fair lock (`log`,
/// its queue) the order of its grants.
fn check_lock(
    run: &Run<'_>,
    lock: &str,
    holds: Vec<&Hold>,
    log: Option<&QueueLog>,
    report: &mut Report,
) {
    let (native, failovers) = (run.native, run.failovers);
    report.holds += holds.len();
    let revoked_holds = run.revocations.revoked_holds(&holds);
    let revoked = |h: &Hold| revoked_holds.contains_key(&(h.owner.as_str(), h.start));
    if holds.iter().any(|h| h.permits.is_some()) {
        // A semaphore: permits add up, tokens are unique (holders share,
        // so grant order says nothing about start order).
        check_permits(lock, &holds, failovers, report);
        if native {
            check_unique_tokens(lock, &holds, report);
        }
        return;
    }
    check_overlaps(lock, &holds, failovers, &revoked_holds, report);
    if native {
        let kept: Vec<&Hold> = holds.iter().copied().filter(|h| !revoked(h)).collect();
        check_tokens(lock, &kept, report);
    }
    let Some(log) = log else {
        return;
    };
    check_order(run, lock, holds, log, &revoked_holds, report);
}

/// The checks of a fair lock's grants: liveness, then requeues and FIFO
/// among the waiters that stayed alive, each waiter a force-unlock or a
/// short lease may have made lose its turn excused being overtaken.
/// `revoked_holds`: the holds a force-unlock may have revoked (see
/// `Revocations::revoked_holds`).
fn check_order(
    run: &Run<'_>,
    lock: &str,
    holds: Vec<&Hold>,
    log: &QueueLog,
    revoked_holds: &HashMap<(&str, u64), u64>,
    report: &mut Report,
) {
    let (native, bounds, faults) = (run.native, run.bounds, &run.faults);
    let revoked = |h: &Hold| revoked_holds.contains_key(&(h.owner.as_str(), h.start));
    // Re-entries are no grants: the checks below are about grants.
    let holds: Vec<&Hold> = holds.into_iter().filter(|h| !h.reentry).collect();
    check_liveness(lock, &holds, faults, bounds, report);
    // A hold a force-unlock revoked did not stay a live holder.
    let kept: Vec<&Hold> = holds.iter().copied().filter(|h| !revoked(h)).collect();
    report.revoked += holds.len() - kept.len();
    // An owner that acquired more than once (an explicit owner shared
    // by tasks and reused, say) cannot be told apart in the queue
    // snapshots, which name owners, not acquisitions: its order is not
    // checked.
    let mut grants_of: HashMap<&str, usize> = HashMap::new();
    for hold in &holds {
        *grants_of.entry(hold.owner.as_str()).or_default() += 1;
    }
    let kept: Vec<&Hold> = kept
        .into_iter()
        .filter(|h| grants_of[h.owner.as_str()] == 1)
        .collect();
    // A waiter whose wait spanned a force-unlock, at the head of the
    // line, may have been handed the lock and had it revoked before it
    // proceeded, and queued again at the back: it may be granted after
    // those once behind it, and its requeue is no violation; every
    // other pair is checked.
    let live = live_grants(&kept, faults, bounds, native);
    let arrivals = Arrivals::of(log);
    // Chosen among every grant: when the head of the line was the
    // handoff's new holder and its hold is the revoked one (it
    // proceeded), nobody was queued again, and the excuse is spent on
    // it, not on the waiter behind it.
    let short_lease = |h: &Hold| {
        h.lease_ms
            .is_some_and(|lease| lease.saturating_mul(1000) < bounds.handoff_us)
    };
    // A short-lease waiter whose own hold the force-unlock revoked is
    // still the one to excuse.
    let mut spanned = run
        .revocations
        .requeued_by(&holds, log, |h| short_lease(h) && !revoked(h));
    // A waiter with a lease shorter than a handoff's allowance may lose
    // a grant handed to it before it acts on it, and queue again at the
    // back: its being overtaken (and moved back) is not checked; its
    // overtaking others is.
    spanned.extend(
        kept.iter()
            .filter(|h| short_lease(h))
            .map(|h| h.owner.as_str()),
    );
    let steady: HashMap<&str, u64> = live
        .iter()
        .filter(|(owner, _)| !spanned.contains(*owner))
        .map(|(owner, at)| (*owner, *at))
        .collect();
    check_requeues(lock, log, &arrivals, &steady, report);
    let mut grants: HashMap<&str, Vec<u64>> = HashMap::new();
    for hold in &holds {
        grants
            .entry(hold.owner.as_str())
            .or_default()
            .push(hold.token.unwrap_or(hold.start));
    }
    let order = Order {
        arrivals: &arrivals,
        live: &live,
        spanned: &spanned,
        grants: &grants,
    };
    check_fifo(lock, log, &order, report);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;

    #[test]
    fn clean_history_passes() {
        let events = vec![
            hold("a", 1, 0, 10, 20),
            hold("b", 2, 5, 30, 40),
            hold("c", 3, 6, 50, 60),
        ];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![vec!["b".into()], vec!["b".into(), "c".into()]],
                ..QueueLog::default()
            },
        )]);
        let report = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(report.violations(), 0, "{report:?}");
        assert_eq!(report.holds, 3);
        assert_eq!(report.fifo_pairs_checked, 1);
    }

    #[test]
    fn each_violation_is_caught() {
        // b overlaps a, has a lower token, and was granted before c although
        // queued after it; d waited far too long.
        let events = vec![
            hold("a", 5, 0, 10, 100),
            hold("b", 4, 0, 50, 60),
            hold("c", 6, 0, 200, 210),
            hold("d", 7, 0, 900_000, 900_010),
        ];
        let queues = HashMap::from([(
            "l".to_owned(),
            QueueLog {
                snapshots: vec![vec!["c".into(), "b".into()]],
                ..QueueLog::default()
            },
        )]);
        let report = check(&events, &queues, true, &[], BOUNDS, &Failovers::default());
        assert_eq!(report.overlaps, 1, "{report:?}");
        assert_eq!(report.token_violations, 1, "{report:?}");
        assert_eq!(report.fifo_violations, 1, "{report:?}");
        assert_eq!(report.liveness_violations, 1, "{report:?}");
    }
}
