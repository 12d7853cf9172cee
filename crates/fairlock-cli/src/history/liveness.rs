//! Liveness (fair locks): every grant within a bound that grows with the
//! grants and the faults during the wait; and which waiters stayed alive,
//! those whose place in line is checked (`requeues.rs`, `fifo.rs`).

use std::collections::{BTreeMap, HashMap};

use super::types::{Bounds, Fault, Hold, Report};

/// Liveness (fair locks). Rule: every hold (valid or not) was granted
/// within `(g + 1) × (max hold + handoff) + f × per fault + base` of its
/// request, where `g` counts the holds of that lock granted strictly
/// between its request and its grant, and `f` the faults injected from
/// `per fault` before its request up to its grant.
pub(super) fn check_liveness(
    lock: &str,
    holds: &[&Hold],
    faults: &FaultTimes<'_>,
    bounds: Bounds,
    report: &mut Report,
) {
    // In start order (see `holds_by_lock`).
    let starts: Vec<u64> = holds.iter().map(|h| h.start).collect();
    for hold in holds {
        let (requested, start) = (hold.requested, hold.start);
        let granted_meanwhile = {
            let after_request = starts.partition_point(|s| *s <= requested);
            let before_grant = starts.partition_point(|s| *s < start);
            before_grant.saturating_sub(after_request) as u64
        };
        let faults_meanwhile = count_between(
            &faults.all,
            requested.saturating_sub(bounds.per_fault_us),
            start,
        ) as u64;
        let bound = (granted_meanwhile + 1) * (bounds.max_hold_us + bounds.handoff_us)
            + faults_meanwhile * bounds.per_fault_us
            + bounds.base_us;
        let waited = start.saturating_sub(requested);
        if waited > bound {
            report.liveness_violations += 1;
            report.example(format!(
                "{lock}: {} waited {waited} µs, bound {bound} µs ({granted_meanwhile} grants, {faults_meanwhile} faults meanwhile)",
                hold.owner
            ));
        }
    }
}

/// The grant time of each owner whose wait stayed alive, the waiters FIFO
/// and requeues are checked for (an owner granted more than once: its
/// latest such grant). (A waiter with an explicit lease shorter than a
/// handoff's allowance may lose a grant before it acts on it: see
/// [`check`](super::check), which excuses it being overtaken, not it overtaking.) A
/// waiter whose process was paused or killed while it
/// waited (from `per fault` before its request up to its grant) did not
/// stay alive; under Redisson (`strict_order` false) neither did any waiter
/// that waited through a fault anywhere, since a stall anywhere can push a
/// live waiter past its slot (Redisson then drops it).
pub(super) fn live_grants<'a>(
    holds: &[&'a Hold],
    faults: &FaultTimes<'_>,
    bounds: Bounds,
    strict_order: bool,
) -> HashMap<&'a str, u64> {
    holds
        .iter()
        .filter(|hold| {
            let from = hold.requested.saturating_sub(bounds.per_fault_us);
            let hit = |times: &[u64]| count_between(times, from, hold.start) > 0;
            let hit = if strict_order {
                // Only the paused or killed process's own waiters.
                faults
                    .by_client
                    .iter()
                    .any(|(client, times)| hold.owner.starts_with(client) && hit(times))
            } else {
                hit(&faults.all)
            };
            !hit
        })
        // When it was granted: under native its fencing token (drawn from
        // the server clock in µs when the grant was made, strictly
        // increasing), exact; else when the acquire returned.
        .map(|hold| (hold.owner.as_str(), hold.token.unwrap_or(hold.start)))
        .collect()
}

/// Fault times, sorted: all of them, and per client id (faults of an
/// unknown client, `""`, hit no client in particular).
pub(super) struct FaultTimes<'a> {
    all: Vec<u64>,
    by_client: Vec<(&'a str, Vec<u64>)>,
}

impl<'a> FaultTimes<'a> {
    pub(super) fn new(faults: &'a [Fault]) -> Self {
        let mut all: Vec<u64> = faults.iter().map(|f| f.at).collect();
        all.sort_unstable();
        let mut by_client: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for fault in faults.iter().filter(|f| !f.client.is_empty()) {
            by_client
                .entry(fault.client.as_str())
                .or_default()
                .push(fault.at);
        }
        let by_client = by_client
            .into_iter()
            .map(|(client, mut times)| {
                times.sort_unstable();
                (client, times)
            })
            .collect();
        Self { all, by_client }
    }
}

/// How many of `sorted` lie in `from..=to`.
fn count_between(sorted: &[u64], from: u64, to: u64) -> usize {
    let below = sorted.partition_point(|t| *t < from);
    let up_to = sorted.partition_point(|t| *t <= to);
    up_to.saturating_sub(below)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;

    #[test]
    fn liveness_bound_grows_with_grants_and_faults_meanwhile() {
        // Alone: bound (0 + 1) x 2_000 + 1_000 = 3_000 µs.
        let on_time = [hold("a", 1, 1_000, 4_000, 4_010)];
        let late = [hold("a", 1, 1_000, 4_001, 4_010)];
        let faults = FaultTimes::new(&[]);
        let mut report = Report::default();
        check_liveness("l", &holds(&on_time), &faults, BOUNDS, &mut report);
        assert_eq!(report.liveness_violations, 0, "{report:?}");
        check_liveness("l", &holds(&late), &faults, BOUNDS, &mut report);
        assert_eq!(report.liveness_violations, 1, "{report:?}");
        assert_eq!(
            report.examples[0],
            "l: a waited 3001 µs, bound 3000 µs (0 grants, 0 faults meanwhile)"
        );
        // One grant in between: 5_000 µs for b.
        let events = [
            hold("a", 1, 0, 2_000, 2_010),
            hold("b", 2, 1_000, 6_000, 6_010),
        ];
        let mut report = Report::default();
        check_liveness("l", &holds(&events), &faults, BOUNDS, &mut report);
        assert_eq!(report.liveness_violations, 0, "{report:?}");
        // A fault up to per_fault_us before the request counts: 13_000 µs.
        let slow = [hold("a", 1, 20_000, 33_000, 33_010)];
        let mut report = Report::default();
        let before = [Fault {
            at: 10_000,
            client: String::new(),
        }];
        check_liveness(
            "l",
            &holds(&slow),
            &FaultTimes::new(&before),
            BOUNDS,
            &mut report,
        );
        assert_eq!(report.liveness_violations, 0, "{report:?}");
        let too_early = [Fault {
            at: 9_999,
            client: String::new(),
        }];
        check_liveness(
            "l",
            &holds(&slow),
            &FaultTimes::new(&too_early),
            BOUNDS,
            &mut report,
        );
        assert_eq!(report.liveness_violations, 1, "{report:?}");
    }

    #[test]
    fn live_grants_leave_out_waiters_hit_by_a_fault() {
        let events = [
            hold("p:1", 1, 20_000, 30_000, 30_010),
            hold("q:1", 2, 20_000, 40_000, 40_010),
        ];
        let faults = [Fault {
            at: 10_000,
            client: "p".into(),
        }];
        let faults = FaultTimes::new(&faults);
        // Native: only p's own waiters; Redisson: every waiter meanwhile.
        let native = live_grants(&holds(&events), &faults, BOUNDS, true);
        assert_eq!(native, HashMap::from([("q:1", 2)]));
        let redisson = live_grants(&holds(&events), &faults, BOUNDS, false);
        assert!(redisson.is_empty(), "{redisson:?}");
        // A fault after the grant hits nobody.
        let after = [Fault {
            at: 30_001,
            client: "p".into(),
        }];
        let after = FaultTimes::new(&after);
        let native = live_grants(&holds(&events), &after, BOUNDS, true);
        assert_eq!(native.len(), 2, "{native:?}");
    }
}
