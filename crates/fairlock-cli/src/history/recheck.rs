//! A saved history checked again with today's checker (tests only; the
//! file is the one a run writes under `$FAIRLOCK_TORTURE_HISTORY`).

use std::collections::HashMap;

use super::types::holds_by_lock;
use super::{
    Bounds, Event, Failover, Failovers, Fault, QueueLog, Report, check, longest_stall, tally,
};

/// Check a history written by a run with `$FAIRLOCK_TORTURE_HISTORY`
/// (events, then `fault AT CLIENT` lines, then `queue LOCK AT OWNER...`
/// lines) again, with today's checker: `native` or not, and loose liveness
/// bounds (the question is usually an overlap or an order). Failovers are
/// not in the file: none are assumed.
pub(crate) fn recheck(text: &str, native: bool) -> Report {
    let (events, faults, queues) = read_saved(text);
    let bounds = Bounds {
        max_hold_us: 60_000_000,
        handoff_us: 300_000,
        per_fault_us: 10_000_000,
        base_us: 60_000_000,
    };
    check(
        &events,
        &queues,
        native,
        &faults,
        bounds,
        &Failovers::default(),
    )
}

/// The events, faults and queue snapshots of a saved history (see
/// [`recheck`]).
fn read_saved(text: &str) -> (Vec<Event>, Vec<Fault>, HashMap<String, QueueLog>) {
    let mut events = Vec::new();
    let mut faults = Vec::new();
    let mut queues: HashMap<String, QueueLog> = HashMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("fault ") {
            let mut parts = rest.splitn(2, ' ');
            if let Some(Ok(at)) = parts.next().map(str::parse) {
                let client = parts.next().unwrap_or_default().trim().to_owned();
                faults.push(Fault { at, client });
            }
        } else if let Some(rest) = line.strip_prefix("queue ") {
            let mut parts = rest.split(' ');
            let (Some(lock), Some(Ok(at))) = (parts.next(), parts.next().map(str::parse)) else {
                continue;
            };
            let owners: Vec<String> = parts.filter(|o| !o.is_empty()).map(str::to_owned).collect();
            let log = queues.entry(lock.to_owned()).or_default();
            log.deadlines.push((at, vec![None; owners.len()]));
            log.snapshots.push(owners);
        } else if let Some(event) = Event::parse(line) {
            events.push(event);
        }
    }
    (events, faults, queues)
}

/// `FAIRLOCK_RECHECK=PATH cargo test -p fairlock-cli --bin fairlock
/// recheck_a_saved_history -- --ignored --nocapture`: the report of a saved
/// native history (`FAIRLOCK_RECHECK_REDISSON=1` for a redisson one).
#[test]
#[ignore = "reads a history file named by $FAIRLOCK_RECHECK"]
fn recheck_a_saved_history() {
    let path = std::env::var("FAIRLOCK_RECHECK").expect("$FAIRLOCK_RECHECK names a history file");
    let text = std::fs::read_to_string(path).expect("a readable history");
    let native = std::env::var_os("FAIRLOCK_RECHECK_REDISSON").is_none();
    let report = recheck(&text, native);
    println!("{report:#?}");
}

/// `FAIRLOCK_RECHECK=PATH cargo test -p fairlock-cli --bin fairlock
/// recheck_a_saved_history_in_full -- --ignored --nocapture`: everything
/// the checker computes from a saved history, to compare two versions of
/// the checker byte for byte: [`recheck`]'s report, the report under tight
/// liveness bounds with each fault taken for a failover (of every lock, or
/// of the first lock only, in turn; the first client acknowledged by a
/// replica), the tally, the longest stall, the lost holds and the
/// recoveries.
#[test]
#[ignore = "reads a history file named by $FAIRLOCK_RECHECK"]
fn recheck_a_saved_history_in_full() {
    let path = std::env::var("FAIRLOCK_RECHECK").expect("$FAIRLOCK_RECHECK names a history file");
    let text = std::fs::read_to_string(path).expect("a readable history");
    let native = std::env::var_os("FAIRLOCK_RECHECK_REDISSON").is_none();
    println!("{:#?}", recheck(&text, native));
    let (events, faults, queues) = read_saved(&text);
    let first_lock = holds_by_lock(&events)
        .keys()
        .next()
        .map(|lock| (*lock).to_owned())
        .unwrap_or_default();
    let acked_clients = events
        .iter()
        .find_map(|e| match e {
            Event::Client { id, .. } => Some(id.clone()),
            _ => None,
        })
        .into_iter()
        .collect();
    let failovers = Failovers {
        at: faults
            .iter()
            .enumerate()
            .map(|(i, fault)| match i % 2 {
                0 => Failover::of_all(fault.at, "even"),
                _ => Failover {
                    at: fault.at,
                    kind: "odd".into(),
                    locks: vec![first_lock.clone()],
                },
            })
            .collect(),
        settle_us: 100_000,
        window_us: 1_000_000,
        acked_clients,
    };
    let tight = Bounds {
        max_hold_us: 20_000,
        handoff_us: 5_000,
        per_fault_us: 500_000,
        base_us: 20_000,
    };
    let report = check(&events, &queues, native, &faults, tight, &failovers);
    println!("{report:#?}");
    println!("{:#?}", tally(&events));
    let starts = events.iter().filter_map(|e| match e {
        Event::Hold(hold) => Some(hold.start),
        _ => None,
    });
    let (from, to) = starts.fold((u64::MAX, 0), |(lo, hi), s| (lo.min(s), hi.max(s)));
    println!("{:?}", longest_stall(&events, from.min(to), to));
    println!("{:?}", failovers.lost(&events));
    println!("{:#?}", failovers.recovery(&events));
}
