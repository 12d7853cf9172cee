//! Lock histories and the checker behind `fairlock torture`.
//!
//! Workers record every hold with Redis server time read right after the
//! acquire returned and right before the release, the owner and the fencing
//! token; and every wait that ended without a grant. The orchestrator adds
//! snapshots of each fair lock's queue. The checker reports:
//! - overlaps: two holds of one lock, both still valid at their end
//!   (`is_held()`), whose server-time intervals intersect;
//! - FIFO violations (fair locks): two waiters seen queued in one order and
//!   granted in the other, counting only what was seen after each waiter's
//!   last (re)arrival in the queue;
//! - token violations (native): a valid hold whose token is not above every
//!   earlier valid hold's token of that lock;
//! - liveness violations: a grant that took longer than a bound computed
//!   from the holds granted meanwhile and the faults injected meanwhile.

use std::collections::HashMap;

use serde_json::{Value, json};

/// One record of a worker's history (one JSON line).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Event {
    /// A hold, from the acquire to the release.
    Hold {
        lock: String,
        owner: String,
        token: Option<u64>,
        /// Server time (µs) before the acquire call.
        requested: u64,
        /// Server time right after the acquire returned.
        start: u64,
        /// Server time right before the release.
        end: u64,
        /// `is_held()` at the end: false when the holder was told it lost
        /// the lock (it paused past its lease, say).
        valid: bool,
    },
    /// A wait that ended without a grant: "timeout", "cancelled" or "error".
    NoGrant { lock: String, outcome: String },
    /// A worker process announces its client id (the prefix of its owners).
    Client { pid: u32, id: String },
}

/// A fault injected into one worker process, at a server time (µs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) at: u64,
    /// The client id of the process hit (`""` when unknown).
    pub(crate) client: String,
}

impl Event {
    pub(crate) fn to_json(&self) -> Value {
        match self {
            Event::Hold {
                lock,
                owner,
                token,
                requested,
                start,
                end,
                valid,
            } => json!({"kind": "hold", "lock": lock, "owner": owner, "token": token,
                "requested": requested, "start": start, "end": end, "valid": valid}),
            Event::NoGrant { lock, outcome } => {
                json!({"kind": "no_grant", "lock": lock, "outcome": outcome})
            }
            Event::Client { pid, id } => json!({"kind": "client", "pid": pid, "id": id}),
        }
    }

    /// Parse one line; `None` for anything else (a line cut by SIGKILL).
    pub(crate) fn parse(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let text = |k: &str| v.get(k)?.as_str().map(str::to_owned);
        let num = |k: &str| v.get(k)?.as_u64();
        match v.get("kind")?.as_str()? {
            "hold" => Some(Event::Hold {
                lock: text("lock")?,
                owner: text("owner")?,
                token: num("token"),
                requested: num("requested")?,
                start: num("start")?,
                end: num("end")?,
                valid: v.get("valid")?.as_bool()?,
            }),
            "no_grant" => Some(Event::NoGrant {
                lock: text("lock")?,
                outcome: text("outcome")?,
            }),
            "client" => Some(Event::Client {
                pid: u32::try_from(num("pid")?).ok()?,
                id: text("id")?,
            }),
            _ => None,
        }
    }
}

/// Queue snapshots of one fair lock, in the order they were taken.
#[derive(Debug, Default, Clone)]
pub(crate) struct QueueLog {
    pub(crate) snapshots: Vec<Vec<String>>,
}

/// What the checker found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) holds: usize,
    pub(crate) overlaps: usize,
    pub(crate) fifo_pairs_checked: usize,
    pub(crate) fifo_violations: usize,
    /// Waiters moved to the back of the queue while waiting (Redisson drops
    /// a live waiter whose slot ran out and queues it again). A violation
    /// when the protocol promises never to reorder (native).
    pub(crate) requeued: usize,
    /// Whether `requeued` counts as a violation.
    pub(crate) strict_order: bool,
    pub(crate) token_violations: usize,
    pub(crate) liveness_violations: usize,
    pub(crate) examples: Vec<String>,
}

impl Report {
    pub(crate) fn violations(&self) -> usize {
        let requeued = if self.strict_order { self.requeued } else { 0 };
        self.overlaps
            + self.fifo_violations
            + requeued
            + self.token_violations
            + self.liveness_violations
    }

    fn example(&mut self, text: String) {
        if self.examples.len() < 10 {
            self.examples.push(text);
        }
    }
}

/// Inputs of the liveness bound.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bounds {
    /// Longest time a worker keeps a lock (µs).
    pub(crate) max_hold_us: u64,
    /// Allowance per handoff (µs).
    pub(crate) handoff_us: u64,
    /// Allowance per fault injected during the wait (µs): a dead holder's
    /// lease, a dead waiter's slot.
    pub(crate) per_fault_us: u64,
    /// Fixed allowance (µs).
    pub(crate) base_us: u64,
}

/// Check `events` (all workers) against `queues` (one per fair lock name:
/// FIFO and liveness are checked for those locks only);
/// `faults` are server times (µs) at which faults were injected.
pub(crate) fn check(
    events: &[Event],
    queues: &HashMap<String, QueueLog>,
    native: bool,
    faults: &[Fault],
    bounds: Bounds,
) -> Report {
    let tokens = native;
    let mut report = Report {
        strict_order: native,
        ..Report::default()
    };
    let mut by_lock: HashMap<&str, Vec<&Event>> = HashMap::new();
    for event in events {
        if let Event::Hold { lock, .. } = event {
            by_lock.entry(lock.as_str()).or_default().push(event);
            report.holds += 1;
        }
    }
    for (lock, mut holds) in by_lock {
        holds.sort_by_key(|e| match e {
            Event::Hold { start, .. } => *start,
            _ => 0,
        });
        let valid: Vec<(u64, u64, Option<u64>, &str)> = holds
            .iter()
            .filter_map(|e| match e {
                Event::Hold {
                    start,
                    end,
                    token,
                    owner,
                    valid: true,
                    ..
                } => Some((*start, *end, *token, owner.as_str())),
                _ => None,
            })
            .collect();
        // Overlaps: any valid hold starting before the previous one ended.
        let mut latest_end = 0u64;
        let mut latest_owner = "";
        for (start, end, _, owner) in &valid {
            if *start < latest_end {
                report.overlaps += 1;
                report.example(format!(
                    "{lock}: {owner} started at {start} before {latest_owner} ended at {latest_end}"
                ));
            }
            if *end > latest_end {
                latest_end = *end;
                latest_owner = owner;
            }
        }
        if tokens {
            let mut highest = 0u64;
            for (start, _, token, owner) in &valid {
                match token {
                    Some(t) if *t > highest => highest = *t,
                    Some(t) => {
                        report.token_violations += 1;
                        report.example(format!(
                            "{lock}: {owner} at {start} got token {t}, not above {highest}"
                        ));
                    }
                    None => {
                        report.token_violations += 1;
                        report.example(format!("{lock}: {owner} got no token"));
                    }
                }
            }
        }
        // Liveness: each grant of a fair lock within its bound (a non-fair
        // lock may starve a waiter by design).
        if !queues.contains_key(lock) {
            continue;
        }
        let starts: Vec<u64> = holds
            .iter()
            .filter_map(|e| match e {
                Event::Hold { start, .. } => Some(*start),
                _ => None,
            })
            .collect();
        for event in &holds {
            if let Event::Hold {
                requested,
                start,
                owner,
                ..
            } = event
            {
                let granted_meanwhile = starts
                    .iter()
                    .filter(|s| **s > *requested && **s < *start)
                    .count() as u64;
                let faults_meanwhile = faults
                    .iter()
                    .filter(|f| {
                        f.at >= requested.saturating_sub(bounds.per_fault_us) && f.at <= *start
                    })
                    .count() as u64;
                let bound = (granted_meanwhile + 1) * (bounds.max_hold_us + bounds.handoff_us)
                    + faults_meanwhile * bounds.per_fault_us
                    + bounds.base_us;
                let waited = start.saturating_sub(*requested);
                if waited > bound {
                    report.liveness_violations += 1;
                    report.example(format!(
                        "{lock}: {owner} waited {waited} µs, bound {bound} µs ({granted_meanwhile} grants, {faults_meanwhile} faults meanwhile)"
                    ));
                }
            }
        }
        check_fifo(lock, &holds, &queues[lock], faults, bounds, &mut report);
    }
    report
}

/// Pairs (a ahead of b) seen in a snapshot taken after both last (re)joined
/// the queue must be granted a before b. Waiters whose process was paused or
/// killed while they waited did not stay alive: they are left out (under
/// Redisson, every waiter that waited through a fault: a stall anywhere can
/// push it past its slot).
fn check_fifo(
    lock: &str,
    holds: &[&Event],
    log: &QueueLog,
    faults: &[Fault],
    bounds: Bounds,
    report: &mut Report,
) {
    let granted: HashMap<&str, u64> = holds
        .iter()
        .filter_map(|e| match e {
            Event::Hold {
                owner,
                start,
                requested,
                ..
            } => {
                // Native: only the paused or killed process's own waiters.
                // Redisson: any fault while it waited, since a stall anywhere
                // can push a live waiter past its slot (Redisson then drops it).
                let hit = faults.iter().any(|f| {
                    let ours = !f.client.is_empty() && owner.starts_with(f.client.as_str());
                    (ours || !report.strict_order)
                        && f.at + bounds.per_fault_us >= *requested
                        && f.at <= *start
                });
                (!hit).then_some((owner.as_str(), *start))
            }
            _ => None,
        })
        .collect();
    // For each owner, the snapshot index of its latest (re)arrival: a
    // waiter that left the queue without a grant (skipped while paused, say)
    // and came back is a new arrival; what was seen before does not count.
    let mut last_arrival: HashMap<&str, usize> = HashMap::new();
    for (i, snapshot) in log.snapshots.iter().enumerate() {
        let previous = i.checked_sub(1).map(|p| &log.snapshots[p]);
        for (pos, owner) in snapshot.iter().enumerate() {
            let Some(previous) = previous else {
                last_arrival.insert(owner.as_str(), i);
                continue;
            };
            let Some(before) = previous.iter().position(|o| o == owner) else {
                last_arrival.insert(owner.as_str(), i);
                continue;
            };
            // Moved behind a waiter that was behind it: dropped and queued
            // again within one call (never seen absent).
            let overtaken = snapshot[..pos].iter().any(|o| {
                previous
                    .iter()
                    .position(|p| p == o)
                    .is_some_and(|q| q > before)
            });
            if overtaken {
                last_arrival.insert(owner.as_str(), i);
                // As for FIFO: only a waiter that stayed alive (its own
                // process, or under a network or server fault every
                // process, was not hit while it waited) was promised its
                // place; a client that cannot refresh within its waiter ttl
                // is dead by the protocol's rule and queued again.
                if !granted.contains_key(owner.as_str()) {
                    continue;
                }
                report.requeued += 1;
                report.example(format!(
                    "{lock}: {owner} was moved to the back of the queue (snapshot {i})"
                ));
            }
        }
    }
    let mut checked = std::collections::HashSet::new();
    for (i, snapshot) in log.snapshots.iter().enumerate() {
        for (x, a) in snapshot.iter().enumerate() {
            for b in &snapshot[x + 1..] {
                let (Some(ga), Some(gb)) = (granted.get(a.as_str()), granted.get(b.as_str()))
                else {
                    continue;
                };
                let current = |o: &str| last_arrival.get(o).is_some_and(|arrived| i >= *arrived);
                if !current(a) || !current(b) || !checked.insert((a.as_str(), b.as_str())) {
                    continue;
                }
                report.fifo_pairs_checked += 1;
                if ga > gb {
                    report.fifo_violations += 1;
                    report.example(format!(
                        "{lock}: {a} queued ahead of {b} (snapshot {i}) but granted after it"
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(owner: &str, token: u64, requested: u64, start: u64, end: u64) -> Event {
        Event::Hold {
            lock: "l".into(),
            owner: owner.into(),
            token: Some(token),
            requested,
            start,
            end,
            valid: true,
        }
    }

    const BOUNDS: Bounds = Bounds {
        max_hold_us: 1_000,
        handoff_us: 1_000,
        per_fault_us: 10_000,
        base_us: 1_000,
    };

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
            },
        )]);
        let report = check(&events, &queues, true, &[], BOUNDS);
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
            },
        )]);
        let report = check(&events, &queues, true, &[], BOUNDS);
        assert_eq!(report.overlaps, 1, "{report:?}");
        assert_eq!(report.token_violations, 1, "{report:?}");
        assert_eq!(report.fifo_violations, 1, "{report:?}");
        assert_eq!(report.liveness_violations, 1, "{report:?}");
    }

    #[test]
    fn invalid_holds_and_rearrivals_are_not_held_against() {
        let mut lost = hold("b", 4, 0, 50, 60);
        if let Event::Hold { valid, .. } = &mut lost {
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
            },
        )]);
        let report = check(&events, &queues, true, &[], BOUNDS);
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
            },
        )]);
        let faults = [Fault {
            at: 5,
            client: "p".into(),
        }];
        let report = check(&events, &queues, true, &faults, BOUNDS);
        assert_eq!(report.fifo_violations, 0, "{report:?}");
        let unfaulted = check(&events, &queues, true, &[], BOUNDS);
        assert_eq!(unfaulted.fifo_violations, 1, "{unfaulted:?}");
    }

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
            },
        )]);
        let faults = [Fault {
            at: 5,
            client: "p".into(),
        }];
        let report = check(&events, &queues, true, &faults, BOUNDS);
        assert_eq!(report.requeued, 0, "{report:?}");
        let unfaulted = check(&events, &queues, true, &[], BOUNDS);
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
            },
        )]);
        let strict = check(&events, &queues, true, &[], BOUNDS);
        assert_eq!(
            (strict.requeued, strict.fifo_violations),
            (1, 0),
            "{strict:?}"
        );
        assert_eq!(strict.violations(), 1);
        let lenient = check(&events, &queues, false, &[], BOUNDS);
        assert_eq!(lenient.violations(), 0, "{lenient:?}");
    }

    #[test]
    fn lines_round_trip() {
        let e = hold("a", 1, 2, 3, 4);
        assert_eq!(Event::parse(&e.to_json().to_string()), Some(e));
        let n = Event::NoGrant {
            lock: "l".into(),
            outcome: "timeout".into(),
        };
        assert_eq!(Event::parse(&n.to_json().to_string()), Some(n));
        assert_eq!(Event::parse("{\"kind\":\"hold\",\"lo"), None);
    }
}
