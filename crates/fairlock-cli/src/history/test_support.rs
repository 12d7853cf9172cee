//! Histories for the checker's tests, built small: holds, queues,
//! force-unlocks, and the check run on them.

use std::collections::HashMap;

use super::types::holds_by_lock;
use super::{Bounds, Event, Failovers, Hold, QueueLog, Report, Side, check};

pub(crate) fn hold(owner: &str, token: u64, requested: u64, start: u64, end: u64) -> Event {
    Event::Hold(Hold {
        lock: "l".into(),
        owner: owner.into(),
        token: Some(token),
        requested,
        start,
        end,
        valid: true,
        combo: String::new(),
        reentry: false,
        lease_ms: None,
        mode: None,
        permits: None,
    })
}

/// The holds among `events`, as the check functions take them.
pub(crate) fn holds(events: &[Event]) -> Vec<&Hold> {
    holds_by_lock(events).remove("l").unwrap_or_default()
}

pub(crate) fn queue(snapshots: &[&[&str]]) -> QueueLog {
    QueueLog {
        snapshots: snapshots
            .iter()
            .map(|s| s.iter().map(|o| (*o).to_owned()).collect())
            .collect(),
        ..QueueLog::default()
    }
}

pub(crate) const BOUNDS: Bounds = Bounds {
    max_hold_us: 1_000,
    handoff_us: 1_000,
    per_fault_us: 10_000,
    base_us: 1_000,
};

/// A hold on `side` of a read-write lock.
pub(crate) fn side(owner: &str, side: Side, start: u64, end: u64) -> Event {
    let Event::Hold(mut hold) = hold(owner, 0, 0, start, end) else {
        unreachable!("hold() makes a hold")
    };
    hold.token = None;
    hold.mode = Some(side);
    Event::Hold(hold)
}

/// `hold` with a combination, as a re-entry or not.
pub(crate) fn combo_hold(owner: &str, start: u64, end: u64, combo: &str, reentry: bool) -> Event {
    let Event::Hold(mut hold) = hold(owner, 1, start, start, end) else {
        unreachable!()
    };
    hold.combo = combo.into();
    hold.reentry = reentry;
    Event::Hold(hold)
}

pub(crate) fn force_unlock(from: u64, at: u64) -> Event {
    Event::ForceUnlock {
        lock: "l".into(),
        from,
        at,
        released: true,
    }
}

/// Snapshots with the times they were taken (deadlines unknown).
pub(crate) fn timed(snapshots: &[(u64, &[&str])]) -> QueueLog {
    QueueLog {
        snapshots: snapshots
            .iter()
            .map(|(_, s)| s.iter().map(|o| (*o).to_owned()).collect())
            .collect(),
        deadlines: snapshots
            .iter()
            .map(|(at, s)| (*at, vec![None; s.len()]))
            .collect(),
        slot_us: None,
    }
}

pub(crate) fn native(events: &[Event], log: QueueLog) -> Report {
    let queues = HashMap::from([("l".to_owned(), log)]);
    check(events, &queues, true, &[], BOUNDS, &Failovers::default())
}

/// `events` checked under native, with no queue snapshots.
pub(crate) fn native_unqueued(events: &[Event]) -> Report {
    check(
        events,
        &HashMap::new(),
        true,
        &[],
        BOUNDS,
        &Failovers::default(),
    )
}

/// `event` (a hold) changed by `change`.
pub(crate) fn with(mut event: Event, change: impl FnOnce(&mut Hold)) -> Event {
    if let Event::Hold(hold) = &mut event {
        change(hold);
    }
    event
}

pub(crate) fn grant(lock: &str, owner: &str, token: u64, requested: u64, start: u64) -> Event {
    Event::Hold(Hold {
        lock: lock.into(),
        owner: owner.into(),
        token: Some(token),
        requested,
        start,
        end: start + 10,
        valid: true,
        combo: String::new(),
        reentry: false,
        lease_ms: None,
        mode: None,
        permits: None,
    })
}

/// Bounds loose enough that only the order is judged.
pub(crate) const LOOSE: Bounds = Bounds {
    max_hold_us: 100_000_000,
    handoff_us: 100_000_000,
    per_fault_us: 1,
    base_us: 100_000_000,
};

pub(crate) fn valid_hold(owner: &str, token: u64, requested: u64, start: u64, end: u64) -> Event {
    Event::Hold(Hold {
        lock: "l".into(),
        owner: owner.into(),
        token: Some(token),
        requested,
        start,
        end,
        valid: true,
        combo: String::new(),
        reentry: false,
        lease_ms: None,
        mode: None,
        permits: None,
    })
}
