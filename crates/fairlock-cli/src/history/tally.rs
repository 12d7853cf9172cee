//! What a run exercised: per feature combination, how often a round drew
//! it and how often it was checked; and the longest stretch without a
//! grant.

use std::collections::BTreeMap;

use super::types::{Event, HANDOFF_WINDOW_US, combo, holds_by_lock};

/// Per combination: how often a round drew it, and how often it was
/// checked.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) drawn: usize,
    pub(crate) checked: usize,
}

/// Count, per combination, the rounds that drew it and the times it was
/// checked. Checked means:
/// - a re-entry (of any combination): it stayed valid and intersected
///   another valid hold of its owner: it re-entered a live hold, and went
///   through the overlap check against every other owner;
/// - a force-unlock at a handoff: it released a hold and replied within
///   [`HANDOFF_WINDOW_US`] of the release before it;
/// - a name probe: the call answered (right or wrong: a wrong answer is a
///   finding);
/// - foreign data: the data was compared after the calls;
/// - a latch: its waiters were judged (every count-down answered).
pub(crate) fn tally(events: &[Event]) -> BTreeMap<String, Tally> {
    let mut tally: BTreeMap<String, Tally> = BTreeMap::new();
    fn count<'t>(tally: &'t mut BTreeMap<String, Tally>, combo: &str) -> &'t mut Tally {
        tally.entry(combo.to_owned()).or_default()
    }
    for event in events {
        match event {
            Event::Drawn { combo } => count(&mut tally, combo).drawn += 1,
            Event::ForceUnlock {
                from,
                at,
                released: true,
                ..
            } if at.saturating_sub(*from) <= HANDOFF_WINDOW_US => {
                count(&mut tally, combo::FORCE_UNLOCK_AT_HANDOFF).checked += 1;
            }
            Event::Answer { combo, .. }
                if combo == combo::NAME_PROBE
                    || combo == combo::SEMAPHORE_STALE_META
                    || combo == combo::LATCH =>
            {
                count(&mut tally, combo).checked += 1;
            }
            Event::DataCheck { .. } => count(&mut tally, combo::FOREIGN_DATA).checked += 1,
            _ => {}
        }
    }
    for holds in holds_by_lock(events).values() {
        for (i, hold) in holds.iter().enumerate() {
            if !hold.reentry || !hold.valid || hold.combo.is_empty() {
                continue;
            }
            let intersects = holds.iter().enumerate().any(|(j, other)| {
                j != i
                    && other.valid
                    && other.owner == hold.owner
                    && other.start < hold.end
                    && hold.start < other.end
            });
            if intersects {
                count(&mut tally, &hold.combo).checked += 1;
            }
        }
    }
    tally
}

/// The longest stretch without a grant of any lock between `from` and
/// `to` (server time, µs), and where it began. A wait that never ends in a
/// grant leaves no hold behind for the other checks: a run where nothing
/// is granted any more shows here.
pub(crate) fn longest_stall(events: &[Event], from: u64, to: u64) -> (u64, u64) {
    let mut starts: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Hold(hold) => Some(hold.start.clamp(from, to)),
            _ => None,
        })
        .collect();
    starts.push(to);
    starts.sort_unstable();
    let mut previous = from;
    let mut longest = (0, from);
    for start in starts {
        if start - previous > longest.0 {
            longest = (start - previous, previous);
        }
        previous = start;
    }
    longest
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;

    #[test]
    fn the_longest_stall_runs_to_the_end_of_the_run() {
        let events = vec![hold("a", 1, 0, 10, 11), hold("b", 2, 0, 30, 31)];
        assert_eq!(longest_stall(&events, 0, 100), (70, 30));
        assert_eq!(longest_stall(&events, 0, 40), (20, 10));
        assert_eq!(longest_stall(&[], 5, 9), (4, 5));
    }

    #[test]
    fn tally_counts_what_was_drawn_and_what_was_checked() {
        let drawn = |combo: &str| Event::Drawn {
            combo: combo.into(),
        };
        let mut lost = combo_hold("c", 200, 230, combo::SHARED_OWNER, true);
        if let Event::Hold(hold) = &mut lost {
            hold.valid = false;
        }
        let events = vec![
            drawn(combo::SHARED_OWNER),
            drawn(combo::SHARED_OWNER),
            hold("a", 1, 0, 10, 100),
            // Intersects a's hold: checked.
            combo_hold("a", 20, 30, combo::SHARED_OWNER, true),
            // Alone: a re-entry of nothing live.
            combo_hold("b", 120, 130, combo::SHARED_OWNER, true),
            hold("c", 2, 0, 190, 240),
            lost,
            drawn(combo::FORCE_UNLOCK_AT_HANDOFF),
            drawn(combo::FORCE_UNLOCK_AT_HANDOFF),
            Event::ForceUnlock {
                lock: "l".into(),
                from: 0,
                at: HANDOFF_WINDOW_US,
                released: true,
            },
            Event::ForceUnlock {
                lock: "l".into(),
                from: 0,
                at: HANDOFF_WINDOW_US + 1,
                released: true,
            },
            drawn(combo::FOREIGN_DATA),
            Event::Answer {
                combo: combo::FOREIGN_DATA.into(),
                target: "k".into(),
                op: "acquire".into(),
                answer: "NotALock".into(),
                ok: true,
                window: None,
            },
            Event::DataCheck {
                key: "k".into(),
                intact: true,
            },
        ];
        let tally = tally(&events);
        let of = |combo: &str| tally.get(combo).copied().unwrap_or_default();
        assert_eq!(
            of(combo::SHARED_OWNER),
            Tally {
                drawn: 2,
                checked: 1
            }
        );
        assert_eq!(
            of(combo::FORCE_UNLOCK_AT_HANDOFF),
            Tally {
                drawn: 2,
                checked: 1
            }
        );
        assert_eq!(
            of(combo::FOREIGN_DATA),
            Tally {
                drawn: 1,
                checked: 1
            }
        );
    }
}
