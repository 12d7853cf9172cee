//! Fencing tokens (native): a lock's go up with every grant, a read-write
//! lock's wherever two holds could not share, and a semaphore's are unique.

use super::types::{Hold, Report, Side};

/// Fencing tokens (native). Rule: every valid hold has a token, strictly
/// above the token of every valid hold of that lock that started before
/// it. Holds told they lost the lock, and re-entries (whose token is their
/// owner's hold's), are left out.
pub(super) fn check_tokens(lock: &str, holds: &[&Hold], report: &mut Report) {
    if holds.iter().any(|h| h.mode.is_some()) {
        return check_shared_tokens(lock, holds, report);
    }
    let mut highest = 0u64;
    for hold in holds.iter().filter(|h| h.valid && !h.reentry) {
        let owner = &hold.owner;
        match hold.token {
            Some(t) if t > highest => highest = t,
            Some(t) => {
                report.token_violations += 1;
                report.example(format!(
                    "{lock}: {owner} at {} got token {t}, not above {highest}",
                    hold.start
                ));
            }
            None => {
                report.token_violations += 1;
                report.example(format!("{lock}: {owner} got no token"));
            }
        }
    }
}

/// A semaphore's tokens (native): every grant has one, and no two grants
/// share one.
pub(super) fn check_unique_tokens(lock: &str, holds: &[&Hold], report: &mut Report) {
    let mut seen = std::collections::HashSet::new();
    for hold in holds.iter().filter(|h| h.valid && !h.reentry) {
        match hold.token {
            Some(token) if seen.insert(token) => {}
            Some(token) => {
                report.token_violations += 1;
                report.example(format!("{lock}: token {token} granted twice"));
            }
            None => {
                report.token_violations += 1;
                report.example(format!("{lock}: {} got no token", hold.owner));
            }
        }
    }
}

/// Tokens of a read-write lock. Readers granted together draw their
/// tokens in line order but proceed (and record their start) in any order,
/// so only holds that could not share are ordered: every valid grant has a
/// token above every hold that ended before it started, when one of the
/// two writes. A grant without a token is a violation, as for a lock.
fn check_shared_tokens(lock: &str, holds: &[&Hold], report: &mut Report) {
    let grants: Vec<&Hold> = holds
        .iter()
        .copied()
        .filter(|h| h.valid && !h.reentry)
        .collect();
    let mut by_end = grants.clone();
    by_end.sort_by_key(|h| h.end);
    // The highest token among the holds ended so far, and among their
    // write holds, with who had it.
    let (mut ended, mut any, mut writes) = (0, None::<&Hold>, None::<&Hold>);
    fn higher<'h>(best: Option<&'h Hold>, h: &'h Hold) -> Option<&'h Hold> {
        match best {
            Some(b) if b.token >= h.token => Some(b),
            _ => Some(h),
        }
    }
    for hold in &grants {
        while ended < by_end.len() && by_end[ended].end <= hold.start {
            let done = by_end[ended];
            any = higher(any, done);
            if done.mode == Some(Side::Write) {
                writes = higher(writes, done);
            }
            ended += 1;
        }
        let Some(token) = hold.token else {
            report.token_violations += 1;
            report.example(format!("{lock}: {} got no token", hold.owner));
            continue;
        };
        let before = if hold.reads() { writes } else { any };
        if let Some(before) = before.filter(|b| b.token >= Some(token)) {
            report.token_violations += 1;
            report.example(format!(
                "{lock}: {} at {} got token {token}, not above {:?} of {}, which ended at {}",
                hold.owner, hold.start, before.token, before.owner, before.end
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;
    use crate::history::types::Event;

    #[test]
    fn shared_tokens_are_ordered_only_where_holds_could_not_share() {
        let with_token = |event: Event, token: u64| {
            let Event::Hold(mut hold) = event else {
                unreachable!()
            };
            hold.token = Some(token);
            Event::Hold(hold)
        };
        let tokens_of = |events: &[Event]| {
            let mut report = Report::default();
            check_tokens("l", &holds(events), &mut report);
            report.token_violations
        };
        // Two readers granted together (10, 11) start in the other order;
        // a writer after both, then a reader after it.
        let fine = [
            with_token(side("b", Side::Read, 10, 50), 11),
            with_token(side("a", Side::Read, 12, 40), 10),
            with_token(side("w:write", Side::Write, 60, 70), 12),
            with_token(side("c", Side::Read, 80, 90), 13),
        ];
        assert_eq!(tokens_of(&fine), 0);
        // A writer whose token is below a reader that ended before it.
        let stale_writer = [
            with_token(side("a", Side::Read, 10, 50), 11),
            with_token(side("w:write", Side::Write, 60, 70), 9),
        ];
        assert_eq!(tokens_of(&stale_writer), 1);
        // A reader whose token is below a writer that ended before it.
        let stale_reader = [
            with_token(side("w:write", Side::Write, 10, 50), 11),
            with_token(side("a", Side::Read, 60, 70), 10),
        ];
        assert_eq!(tokens_of(&stale_reader), 1);
    }

    #[test]
    fn tokens_must_go_up() {
        let mut events = vec![
            hold("a", 5, 0, 10, 20),
            // Equal: a violation.
            hold("b", 5, 0, 30, 40),
            hold("c", 6, 0, 50, 60),
            // Lower, but told it lost the lock: left out.
            hold("d", 1, 0, 70, 80),
            hold("e", 9, 0, 90, 95),
        ];
        if let Event::Hold(d) = &mut events[3] {
            d.valid = false;
        }
        if let Event::Hold(e) = &mut events[4] {
            e.token = None;
        }
        let mut report = Report::default();
        check_tokens("l", &holds(&events), &mut report);
        assert_eq!(report.token_violations, 2, "{report:?}");
        assert_eq!(
            report.examples,
            ["l: b at 30 got token 5, not above 5", "l: e got no token"]
        );
    }
}
