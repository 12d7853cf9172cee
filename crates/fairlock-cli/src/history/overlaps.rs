//! Mutual exclusion: no two valid holds of one lock by different parties
//! intersect, but for readers beside readers; an overlap that a failover
//! or a force-unlock explains is counted apart.

use std::collections::HashMap;

use super::failovers::Failovers;
use super::types::{Hold, REVOCATION_WINDOW_US, Report, Side, party};

/// Overlaps. Rule: two holds of one lock by different owners that were
/// both still valid at their end (`is_held()`) do not intersect in server
/// time: each valid hold starts no earlier than every earlier valid hold of
/// another owner ended (starting at the very moment it ended is fine).
/// Holds of one owner may intersect (re-entries, one owner shared by
/// several tasks, a read-write lock's writer and its own read holds: a
/// downgrade), and so may read holds of a read-write lock: a write hold
/// intersects no other owner's hold. Holds told they lost the lock are left
/// out. An overlap
/// that a failover or a force-unlock explains is counted apart: a
/// force-unlock explains it when it revoked one of the two holds and the
/// other began after the force-unlock began (the revoked holder had not
/// heard yet); an overlap that began before it is no operator's doing.
/// Each hold is checked against every earlier hold still open: one that
/// an explained overlap would mask is not hidden.
pub(super) fn check_overlaps(
    lock: &str,
    holds: &[&Hold],
    failovers: &Failovers,
    revoked: &HashMap<(&str, u64), u64>,
    report: &mut Report,
) {
    // Valid holds that may still intersect a later one: (end, start, owner,
    // token, whether it reads).
    let mut open: Vec<(u64, u64, &str, Option<u64>, bool)> = Vec::new();
    for hold in holds.iter().filter(|h| h.valid) {
        open.retain(|(end, ..)| *end > hold.start);
        match hold.mode {
            Some(Side::Read) => report.read_holds += 1,
            Some(Side::Write) => report.write_holds += 1,
            None => {}
        }
        // Either the earlier hold was revoked and this one began after its
        // force-unlock began, or this one was (it proceeded late, its start
        // read after the other's) and it was granted first: a revocation
        // explains what its holder did after being granted, never being
        // granted while another held.
        let explained_by_revocation = |start: u64, owner: &str, token: Option<u64>| {
            revoked
                .get(&(hold.owner.as_str(), hold.start))
                .is_some_and(|from| {
                    start >= *from && hold.start <= from.saturating_add(REVOCATION_WINDOW_US)
                })
                && match (hold.token, token) {
                    (Some(mine), Some(theirs)) => mine < theirs,
                    _ => true,
                }
                || revoked.get(&(owner, start)).is_some_and(|from| {
                    hold.start >= *from && hold.start <= from.saturating_add(REVOCATION_WINDOW_US)
                })
        };
        // Another party's holds, but for readers beside a reader.
        let party = party(&hold.owner);
        let others = || {
            open.iter()
                .filter(|(_, _, owner, ..)| self::party(owner) != party)
                .filter(|(.., reads)| !(*reads && hold.reads()))
        };
        if hold.reads()
            && open
                .iter()
                .any(|(_, _, owner, _, reads)| *reads && self::party(owner) != party)
        {
            report.shared_reads += 1;
        }
        let unexplained = others()
            .filter(|(_, start, owner, token, _)| {
                !failovers.excuse(lock, (owner, *start), (&hold.owner, hold.start))
                    && !explained_by_revocation(*start, owner, *token)
            })
            .max_by_key(|(end, ..)| *end)
            .copied();
        let earlier = unexplained.or_else(|| others().max_by_key(|(end, ..)| *end).copied());
        if let Some((end, start, owner, token, _)) = earlier {
            let at = format!(
                "{lock}: {} started at {} before {owner} ended at {end}",
                hold.owner, hold.start
            );
            if failovers.excuse(lock, (owner, start), (&hold.owner, hold.start)) {
                report.failover_overlaps += 1;
                report.example(format!(
                    "{at}, across a failover (asynchronous replication)"
                ));
            } else if explained_by_revocation(start, owner, token) {
                report.revoked_overlaps += 1;
                // A few examples: they must not crowd out the violations'.
                if report.revoked_overlaps <= 2 {
                    report.example(format!(
                        "{at}, after a force-unlock (the revoked holder had not heard yet)"
                    ));
                }
            } else {
                report.overlaps += 1;
                report
                    .first_overlap
                    .get_or_insert_with(|| (lock.to_owned(), start.min(hold.start), end));
                report.example(at);
            }
        }
        open.push((hold.end, hold.start, &hold.owner, hold.token, hold.reads()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;
    use crate::history::types::{Event, combo};

    fn overlaps_of(events: &[Event]) -> Report {
        let mut report = Report::default();
        check_overlaps(
            "l",
            &holds(events),
            &Failovers::default(),
            &HashMap::new(),
            &mut report,
        );
        report
    }

    #[test]
    fn readers_share_and_a_writer_overlaps_nobody() {
        // Readers a and b at once, then c writes while b still reads.
        let report = overlaps_of(&[
            side("a", Side::Read, 10, 100),
            side("b", Side::Read, 20, 200),
            side("c:write", Side::Write, 150, 160),
        ]);
        assert_eq!(
            (
                report.overlaps,
                report.shared_reads,
                report.read_holds,
                report.write_holds
            ),
            (1, 1, 2, 1),
            "{report:?}"
        );
        assert_eq!(
            report.examples[0],
            "l: c:write started at 150 before b ended at 200"
        );
        // A reader that begins inside a write hold.
        let report = overlaps_of(&[
            side("c:write", Side::Write, 10, 100),
            side("a", Side::Read, 50, 60),
        ]);
        assert_eq!((report.overlaps, report.shared_reads), (1, 0), "{report:?}");
        // Two writers.
        let report = overlaps_of(&[
            side("c:write", Side::Write, 10, 100),
            side("d:write", Side::Write, 50, 60),
        ]);
        assert_eq!(report.overlaps, 1, "{report:?}");
    }

    #[test]
    fn a_writer_reading_beside_its_own_write_hold_is_one_party() {
        // The downgrade: c writes, reads, releases the write hold, reads on.
        let report = overlaps_of(&[
            side("c:write", Side::Write, 10, 100),
            side("c", Side::Read, 50, 300),
            // Another reader once the write hold ended.
            side("a", Side::Read, 100, 200),
        ]);
        assert_eq!((report.overlaps, report.shared_reads), (0, 1), "{report:?}");
        // Another owner's reader during the write hold is not excused by
        // the writer's own read hold.
        let report = overlaps_of(&[
            side("c:write", Side::Write, 10, 100),
            side("c", Side::Read, 50, 300),
            side("a", Side::Read, 60, 200),
        ]);
        assert_eq!(report.overlaps, 1, "{report:?}");
    }

    #[test]
    fn overlaps_are_valid_holds_intersecting() {
        let mut events = vec![
            hold("a", 1, 0, 10, 100),
            // Inside a, both of them: two overlaps with a.
            hold("b", 2, 0, 20, 30),
            hold("c", 3, 0, 40, 50),
            // Starts as a ends: fine.
            hold("d", 4, 0, 100, 110),
            // Told it lost the lock: left out.
            hold("e", 5, 0, 105, 120),
        ];
        if let Event::Hold(e) = &mut events[4] {
            e.valid = false;
        }
        let mut report = Report::default();
        check_overlaps(
            "l",
            &holds(&events),
            &Failovers::default(),
            &HashMap::new(),
            &mut report,
        );
        assert_eq!(report.overlaps, 2, "{report:?}");
        assert_eq!(
            report.examples[0],
            "l: b started at 20 before a ended at 100"
        );
    }

    #[test]
    fn holds_of_one_owner_may_intersect_and_reentries_keep_their_token() {
        // a re-enters its own hold (same token); b overlaps a: one overlap.
        let events = vec![
            hold("a", 5, 0, 10, 100),
            combo_hold("a", 20, 30, combo::REENTRY_LEASE, true),
            hold("b", 6, 0, 50, 60),
        ];
        let report = native_unqueued(&events);
        assert_eq!(report.overlaps, 1, "{report:?}");
        assert_eq!(report.token_violations, 0, "{report:?}");
        assert!(report.examples[0].starts_with("l: b started at 50 before a"));
    }
}
