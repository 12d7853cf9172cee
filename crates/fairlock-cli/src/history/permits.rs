//! A semaphore's permits: never more of them out at once than its total
//! (more across a failover of its master are counted apart).

use super::failovers::Failovers;
use super::types::{Hold, Permits, Report};

/// A semaphore's holds. Rule: at no server instant do the permits of the
/// valid holds then open add up to more than the total (a hold starting
/// at the very moment another ended is not open beside it).
pub(super) fn check_permits(
    lock: &str,
    holds: &[&Hold],
    failovers: &Failovers,
    report: &mut Report,
) {
    // The holds out: end, permits, owner, start.
    let mut open: Vec<(u64, u32, &str, u64)> = Vec::new();
    for hold in holds.iter().filter(|h| h.valid) {
        let Some(Permits { n, total }) = hold.permits else {
            continue;
        };
        report.permit_holds += 1;
        open.retain(|(end, ..)| *end > hold.start);
        let out = open.iter().map(|(_, n, ..)| n).sum::<u32>() + n;
        report.most_permits_out = report.most_permits_out.max(out);
        if out > total {
            // Holds that a failover of this semaphore's master may have
            // lost (or that a master already replaced granted) count apart,
            // as the exclusive locks' overlaps do (check_overlaps).
            let unexcused = n + open
                .iter()
                .filter(|(_, _, owner, start)| {
                    !failovers.excuse(lock, (owner, *start), (&hold.owner, hold.start))
                })
                .map(|(_, k, ..)| *k)
                .sum::<u32>();
            let others = open
                .iter()
                .map(|(_, n, owner, _)| format!("{owner}: {n}"))
                .collect::<Vec<_>>()
                .join(", ");
            let at = format!(
                "{lock}: {} took {n} permits at {} while {} were out of {total} ({others})",
                hold.owner,
                hold.start,
                out - n,
            );
            if unexcused <= total {
                report.failover_overlaps += 1;
                report.example(format!(
                    "{at}, across a failover (asynchronous replication)"
                ));
            } else {
                report.permits_over += 1;
                report.first_overlap.get_or_insert_with(|| {
                    let first = open.iter().map(|(end, ..)| *end).min().unwrap_or(hold.end);
                    (lock.to_owned(), hold.start, first)
                });
                report.example(at);
            }
        }
        open.push((hold.end, n, &hold.owner, hold.start));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Failover;
    use crate::history::test_support::*;
    use crate::history::tokens::check_unique_tokens;
    use crate::history::types::Event;

    /// Permits over the total across a failover of the semaphore's master
    /// are the failover's (asynchronous replication), as exclusive locks'
    /// overlaps are; a failover of another master explains nothing.
    #[test]
    fn permits_over_the_total_across_a_failover_count_apart() {
        let permits = |owner: &str, start: u64, end: u64, token: u64| {
            let Event::Hold(mut hold) = hold(owner, token, 0, start, end) else {
                unreachable!()
            };
            hold.permits = Some(Permits { n: 3, total: 3 });
            Event::Hold(hold)
        };
        let events = [permits("a", 10, 100, 1), permits("b", 20, 30, 2)];
        let failover_of = |lock: &str| Failovers {
            at: vec![Failover {
                at: 5,
                kind: "test".into(),
                locks: vec![lock.to_owned()],
            }],
            settle_us: 10,
            window_us: 1000,
            acked_clients: Vec::new(),
        };
        let mut report = Report::default();
        check_permits("l", &holds(&events), &failover_of("l"), &mut report);
        assert_eq!(
            (report.permits_over, report.failover_overlaps),
            (0, 1),
            "{report:?}"
        );
        assert!(
            report.examples[0].contains("across a failover"),
            "{report:?}"
        );
        let mut report = Report::default();
        check_permits("l", &holds(&events), &failover_of("other"), &mut report);
        assert_eq!(
            (report.permits_over, report.failover_overlaps),
            (1, 0),
            "{report:?}"
        );
    }

    #[test]
    fn permits_add_up_to_the_total_at_most() {
        let permits = |owner: &str, n: u32, start: u64, end: u64, token: u64| {
            let Event::Hold(mut hold) = hold(owner, token, 0, start, end) else {
                unreachable!()
            };
            hold.permits = Some(Permits { n, total: 3 });
            Event::Hold(hold)
        };
        let check = |events: &[Event]| {
            let mut report = Report::default();
            check_permits("l", &holds(events), &Failovers::default(), &mut report);
            check_unique_tokens("l", &holds(events), &mut report);
            report
        };
        // 2 + 1 out at once, then 3 once both ended (one at the very
        // instant the 3 began).
        let fine = check(&[
            permits("a", 2, 10, 50, 1),
            permits("b", 1, 20, 40, 2),
            permits("c", 3, 50, 60, 3),
        ]);
        assert_eq!(
            (
                fine.permits_over,
                fine.most_permits_out,
                fine.token_violations
            ),
            (0, 3, 0),
            "{fine:?}"
        );
        // 2 + 2 of 3; and a token granted twice.
        let over = check(&[permits("a", 2, 10, 50, 1), permits("b", 2, 20, 40, 1)]);
        assert_eq!(
            (over.permits_over, over.token_violations),
            (1, 1),
            "{over:?}"
        );
        assert_eq!(
            over.examples[0],
            "l: b took 2 permits at 20 while 2 were out of 3 (a: 2)"
        );
    }
}
