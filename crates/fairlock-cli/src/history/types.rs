//! The history's records and what the checker reports: a hold and the
//! other events a worker writes (one line of JSON each), the faults
//! injected, the report and the inputs of the liveness bound; and the time
//! windows the checker's excuses are bounded by.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The feature combinations a torture round may draw, by the name the
/// history records.
pub(crate) mod combo {
    /// A re-entry with another lease kind than its hold (watchdog under
    /// explicit, explicit under watchdog, longer or shorter).
    pub(crate) const REENTRY_LEASE: &str = "reentry_lease";
    /// Several tasks acquiring at once under one explicit owner.
    pub(crate) const SHARED_OWNER: &str = "shared_owner";
    /// A force-unlock right after a release: during the handoff.
    pub(crate) const FORCE_UNLOCK_AT_HANDOFF: &str = "force_unlock_at_handoff";
    /// A name that spells another lock's keys (the other protocol's).
    pub(crate) const NAME_PROBE: &str = "name_probe";
    /// Application data (a hash, a string) under a lock's key.
    pub(crate) const FOREIGN_DATA: &str = "foreign_data";
    /// A native semaphore's meta outliving every hold (the holders set
    /// expired with the hold keys), then a give-up or a force-release
    /// admitting the line's head.
    pub(crate) const SEMAPHORE_STALE_META: &str = "semaphore_stale_meta";
    /// A failover right after a handoff, clients waiting for a replica
    /// (`min_replicas`). Drawn by the orchestrator, not by the workers.
    pub(crate) const FAILOVER_AT_HANDOFF: &str = "failover_at_handoff";
    /// A count-down latch with waiters, counted down to 0 under the faults.
    pub(crate) const LATCH: &str = "latch";
}

/// How long after a force-unlock the holder it revoked may still believe
/// it holds the lock (µs): it learns on its revocation channel, within a
/// round trip, and a torture hold lasts milliseconds. An overlap within
/// this is the operator's doing, counted apart like a failover's.
pub(crate) const REVOCATION_WINDOW_US: u64 = 2_000_000;

/// How long after its time a queue snapshot may have been read (µs): its
/// time is taken before the read, and a loaded machine delays the read.
/// A snapshot older than this before a wait began cannot show that wait.
pub(crate) const SNAPSHOT_LAG_US: u64 = 2_000_000;

/// A force-unlock that was sent and never recorded its reply (its worker
/// was killed, or the round failed after it) is taken to have run within
/// this of being sent (µs): a request a killed worker had sent runs within
/// milliseconds, and a call that failed gave up within the torture's
/// retry budget, well within this bound. It may have revoked a hold, as a
/// finished one that released.
pub(crate) const UNFINISHED_FORCE_UNLOCK_US: u64 = 2_000_000;

/// A force-unlock counts as timed at a handoff when it replied within this
/// of the release before it (µs).
pub(crate) const HANDOFF_WINDOW_US: u64 = 100_000;

/// One hold, from the acquire to the release (times are the server's, µs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Hold {
    pub(crate) lock: String,
    pub(crate) owner: String,
    pub(crate) token: Option<u64>,
    /// Server time before the acquire call.
    pub(crate) requested: u64,
    /// Server time right after the acquire returned.
    pub(crate) start: u64,
    /// Server time right before the release.
    pub(crate) end: u64,
    /// `is_held()` at the end: false when the holder was told it lost the
    /// lock (it paused past its lease, say).
    pub(crate) valid: bool,
    /// The combination the round drew ([`combo`]); empty for an ordinary
    /// round (and absent from its line).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) combo: String,
    /// A re-entry: a hold of an owner that held the lock already (its
    /// token is that hold's). Checked for overlaps with other owners, left
    /// out of the checks about grants (tokens, liveness, FIFO).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) reentry: bool,
    /// The acquisition's explicit lease (ms), when it asked for one; absent:
    /// the client's lease under the watchdog. A fair waiter is handed the
    /// lock for at most its lease: one whose lease is shorter than the
    /// time it takes to act on a handoff (a loaded machine) loses its turn
    /// by the protocol's rule: its being overtaken is not checked (its
    /// overtaking a waiter ahead of it is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) lease_ms: Option<u64>,
    /// The side of a read-write lock the hold is on; absent: a lock's
    /// exclusive hold. Read holds of different owners may intersect; a
    /// write hold intersects nobody else's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<Side>,
    /// A semaphore's hold: how many permits, of how many in all. Holds of
    /// a semaphore may intersect while their permits add up to the total.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) permits: Option<Permits>,
}

/// The permits of a semaphore's hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Permits {
    pub(crate) n: u32,
    pub(crate) total: u32,
}

/// The side of a read-write lock a hold is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Side {
    Read,
    Write,
}

impl Hold {
    /// Whether the hold is a read hold (shared with other readers).
    pub(super) fn reads(&self) -> bool {
        self.mode == Some(Side::Read)
    }
}

/// The party an owner id names: a read-write lock's writer is its owner's
/// id with `:write` appended (Redisson's field), and a writer that also
/// reads (a downgrade) is one party with its read holds.
pub(super) fn party(owner: &str) -> &str {
    owner.strip_suffix(":write").unwrap_or(owner)
}

/// One record of a worker's history: one line of JSON, tagged by `kind`:
///
/// ```text
/// {"kind":"hold","lock":"l","owner":"a","token":1,"requested":2,"start":3,"end":4,"valid":true}
/// {"kind":"no_grant","lock":"l","outcome":"timeout"}
/// {"kind":"client","pid":42,"id":"0a1b…"}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Event {
    /// A hold, from the acquire to the release.
    Hold(Hold),
    /// A wait that ended without a grant: "timeout", "cancelled" or "error".
    NoGrant { lock: String, outcome: String },
    /// A worker process announces its client id (the prefix of its owners)
    /// and how many replicas it waits for (`min_replicas`; 0: none).
    Client {
        pid: u32,
        id: String,
        #[serde(default, skip_serializing_if = "is_zero")]
        min_replicas: u32,
    },
    /// A worker drew a combination ([`combo`]) for its next round.
    Drawn { combo: String },
    /// A force-unlock sent right after a release: `from` is the server time
    /// before the release, `at` right after the force-unlock replied;
    /// `released`: it released a hold (the handoff's new holder's).
    ForceUnlock {
        lock: String,
        from: u64,
        at: u64,
        released: bool,
    },
    /// A force-unlock about to be sent (`from` as in [`Event::ForceUnlock`]),
    /// written before the call: a worker killed after sending it, or a
    /// round that failed after it, leaves this line and no
    /// [`Event::ForceUnlock`], and the checker still knows a revocation may
    /// have happened (see [`UNFINISHED_FORCE_UNLOCK_US`]).
    ForceUnlockSent { lock: String, from: u64 },
    /// One call of a combination that the worker judged by its answer:
    /// `ok` false is a finding (the library answered otherwise than it
    /// should, e.g. accepted a name that spells another lock's key).
    Answer {
        combo: String,
        target: String,
        op: String,
        answer: String,
        ok: bool,
        /// For an answer about time (a wait's outcome): the client that
        /// waited and the server times (µs) the wait began and ended. A
        /// fault that hit that client, or every client, in between excuses
        /// an `ok` false: it is counted, not a finding.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        window: Option<Window>,
    },
    /// Application data under a lock's key, compared byte for byte after
    /// the lock calls on it: `intact` false is a violation.
    DataCheck { key: String, intact: bool },
}

/// How long a fault injected at one instant may still act: the longest
/// the torture injects lasts 5 s (a sentinel frozen for 2 to 5 s).
pub(crate) const FAULT_REACH_US: u64 = 5_000_000;

/// When a wait ran, and whose it was (see [`Event::Answer`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Window {
    pub(crate) client: String,
    pub(crate) from: u64,
    pub(crate) to: u64,
}

impl Window {
    /// Whether one of `faults` hit this window's client (or every client:
    /// the client id `""` never names one) between `from` and `to`, or up
    /// to [`FAULT_REACH_US`] before `from` (a fault lasts: a server pause,
    /// a 2 s flood, a frozen sentinel).
    pub(crate) fn hit_by(&self, faults: &[Fault]) -> bool {
        faults.iter().any(|f| {
            f.at + FAULT_REACH_US >= self.from
                && f.at <= self.to
                && (f.client.is_empty() || f.client == self.client)
        })
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Event {
    /// The event as one line of JSON (without the newline).
    pub(crate) fn to_line(&self) -> String {
        // Strings, numbers and booleans only: nothing that cannot be written.
        serde_json::to_string(self).expect("an event is plain data")
    }

    /// Parse one line; `None` for anything else (a line cut by SIGKILL).
    pub(crate) fn parse(line: &str) -> Option<Self> {
        serde_json::from_str(line).ok()
    }
}

/// A fault injected into one worker process, at a server time (µs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fault {
    pub(crate) at: u64,
    /// The client id of the process hit (`""` when unknown).
    pub(crate) client: String,
}

/// What the checker found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) holds: usize,
    pub(crate) overlaps: usize,
    /// Overlaps that start at a failover (the later hold began after a
    /// failover fault that came after the earlier hold began, within the
    /// failover window): the asynchronous-replication window, counted
    /// apart and never hidden, not counted as violations.
    pub(crate) failover_overlaps: usize,
    /// Overlaps with a hold that a force-unlock may have revoked (within
    /// [`REVOCATION_WINDOW_US`]): the revoked holder had not heard yet.
    /// Counted apart, never hidden, not violations.
    pub(crate) revoked_overlaps: usize,
    /// Holds that a force-unlock may have revoked (see
    /// `Revocations::revoked`): left out of the token and FIFO checks.
    pub(crate) revoked: usize,
    /// Application data changed by lock calls (see [`Event::DataCheck`]).
    pub(crate) data_changed: usize,
    pub(crate) fifo_pairs_checked: usize,
    pub(crate) fifo_violations: usize,
    /// Waiters overtaken after their deadline had passed, which Redisson's
    /// rule allows (see
    /// [`QueueLog::may_have_been_dropped`](super::QueueLog::may_have_been_dropped)): no violation.
    pub(crate) overtaken_past_deadline: usize,
    /// Waiters moved to the back of the queue while waiting (Redisson drops
    /// a live waiter whose slot ran out and queues it again). A violation
    /// when the protocol promises never to reorder (native).
    pub(crate) requeued: usize,
    /// Whether `requeued` counts as a violation.
    pub(crate) strict_order: bool,
    pub(crate) token_violations: usize,
    pub(crate) liveness_violations: usize,
    /// Read holds and write holds of read-write locks (valid ones).
    pub(crate) read_holds: usize,
    pub(crate) write_holds: usize,
    /// Read holds that began while another party's read hold was open:
    /// the sharing a read-write lock exists for, seen happening (none in a
    /// run with readers says the readers never met, not that they may).
    pub(crate) shared_reads: usize,
    /// Semaphore holds (valid ones), the most permits seen out at once, and
    /// the instants more than the total were out (violations).
    pub(crate) permit_holds: usize,
    pub(crate) most_permits_out: u32,
    pub(crate) permits_over: usize,
    pub(crate) examples: Vec<String>,
    /// The first overlap counted as a violation: the lock, when the
    /// earlier of the two holds started, when the overlap ended (µs), so
    /// that a report can show the history around it.
    pub(crate) first_overlap: Option<(String, u64, u64)>,
}

impl Report {
    pub(crate) fn violations(&self) -> usize {
        let requeued = if self.strict_order { self.requeued } else { 0 };
        self.overlaps
            + self.permits_over
            + self.fifo_violations
            + requeued
            + self.token_violations
            + self.liveness_violations
            + self.data_changed
    }

    pub(super) fn example(&mut self, text: String) {
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

/// The holds of each lock, in the order they started (holds that started at
/// the same time in the order they were recorded).
pub(super) fn holds_by_lock(events: &[Event]) -> BTreeMap<&str, Vec<&Hold>> {
    let mut by_lock: BTreeMap<&str, Vec<&Hold>> = BTreeMap::new();
    for event in events {
        if let Event::Hold(hold) = event {
            by_lock.entry(hold.lock.as_str()).or_default().push(hold);
        }
    }
    for holds in by_lock.values_mut() {
        holds.sort_by_key(|h| h.start);
    }
    by_lock
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::test_support::*;

    #[test]
    fn a_window_is_hit_by_its_own_clients_faults_and_everyones() {
        let window = Window {
            client: "a".into(),
            from: 10_000_000,
            to: 12_000_000,
        };
        let fault = |at: u64, client: &str| Fault {
            at,
            client: client.into(),
        };
        assert!(window.hit_by(&[fault(11_000_000, "a")]));
        assert!(window.hit_by(&[fault(11_000_000, "")]));
        // A fault that began before the wait and may still act.
        assert!(window.hit_by(&[fault(10_000_000 - FAULT_REACH_US, "a")]));
        assert!(!window.hit_by(&[fault(10_000_000 - FAULT_REACH_US - 1, "a")]));
        assert!(!window.hit_by(&[fault(12_000_001, "a")]));
        assert!(!window.hit_by(&[fault(11_000_000, "b")]));
        assert!(!window.hit_by(&[]));
    }

    #[test]
    fn lines_round_trip() {
        let e = hold("a", 1, 2, 3, 4);
        assert_eq!(Event::parse(&e.to_line()), Some(e));
        let n = Event::NoGrant {
            lock: "l".into(),
            outcome: "timeout".into(),
        };
        assert_eq!(Event::parse(&n.to_line()), Some(n));
        assert_eq!(Event::parse("{\"kind\":\"hold\",\"lo"), None);
    }

    /// The lines on disk are those the workers always wrote.
    #[test]
    fn line_format_is_unchanged() {
        let lines = [
            (
                hold("a", 1, 2, 3, 4),
                r#"{"kind":"hold","lock":"l","owner":"a","token":1,"requested":2,"start":3,"end":4,"valid":true}"#,
            ),
            (
                Event::NoGrant {
                    lock: "l".into(),
                    outcome: "cancelled".into(),
                },
                r#"{"kind":"no_grant","lock":"l","outcome":"cancelled"}"#,
            ),
            (
                Event::Client {
                    pid: 42,
                    id: "c1".into(),
                    min_replicas: 0,
                },
                r#"{"kind":"client","pid":42,"id":"c1"}"#,
            ),
        ];
        for (event, line) in lines {
            assert_eq!(event.to_line(), line);
            assert_eq!(Event::parse(line), Some(event));
        }
        // A hold without a token (Redisson): null, or (as read before) absent.
        let Some(Event::Hold(tokenless)) = Event::parse(
            r#"{"kind":"hold","lock":"l","owner":"a","token":null,"requested":2,"start":3,"end":4,"valid":false}"#,
        ) else {
            panic!("a hold");
        };
        assert_eq!((tokenless.token, tokenless.valid), (None, false));
        let absent = r#"{"kind":"hold","lock":"l","owner":"a","requested":2,"start":3,"end":4,"valid":false}"#;
        assert_eq!(Event::parse(absent), Some(Event::Hold(tokenless)));
    }

    /// A line cut anywhere (SIGKILL in the middle of a write), an unknown
    /// kind or a missing field is skipped, never an error.
    #[test]
    fn cut_and_foreign_lines_are_skipped() {
        let line = hold("a", 1, 2, 3, 4).to_line();
        for cut in 0..line.len() {
            assert_eq!(Event::parse(&line[..cut]), None, "{}", &line[..cut]);
        }
        for foreign in [
            "",
            "not json",
            r#"{"kind":"other","lock":"l"}"#,
            r#"{"lock":"l","outcome":"timeout"}"#,
            r#"{"kind":"no_grant","lock":"l"}"#,
            r#"{"kind":"client","pid":-1,"id":"c"}"#,
        ] {
            assert_eq!(Event::parse(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn new_lines_round_trip_and_ordinary_holds_keep_their_line() {
        let e = combo_hold("a", 1, 2, combo::REENTRY_LEASE, true);
        assert!(
            e.to_line()
                .ends_with(r#","combo":"reentry_lease","reentry":true}"#)
        );
        assert_eq!(Event::parse(&e.to_line()), Some(e));
        for e in [
            Event::Drawn {
                combo: combo::NAME_PROBE.into(),
            },
            Event::Answer {
                combo: combo::NAME_PROBE.into(),
                target: "t".into(),
                op: "name".into(),
                answer: "InvalidName".into(),
                ok: true,
                window: None,
            },
        ] {
            assert_eq!(Event::parse(&e.to_line()), Some(e));
        }
    }
}
