//! Lock events: the one place where what happens to locks is recorded.
//!
//! Every module reports through a client's [`Recorder`] (or, for events
//! that concern no client's counts, the free [`record`]). Each event is
//! written as a `tracing` event (target `fairlock`), counted in the
//! client's [`Statistics`], and, with the `metrics` feature, in the
//! `metrics` facade (`meters.rs`). Acquisitions get a span of their own
//! ([`AcquireRecord`]). `docs/observability.md` lists all of it.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{Span, debug, field, info, warn};

use crate::meters::{LockLabel, Meters};
use crate::owner::Owner;
use crate::stats::{Counters, Statistics, add_time, bump};

/// Why a hold is known lost (or may be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LostCause {
    /// A renewal or check found the lock held by another owner or
    /// acquisition (or its key holding something else).
    TakenOver,
    /// A renewal or check found the lock gone or taken after a
    /// force-unlock message for it reached this client (a hint: anyone may
    /// publish one, see `docs/observability.md`).
    ForceUnlocked,
    /// A renewal or check found the lock gone or taken after the server
    /// serving it changed: a Sentinel failover, a cluster failover or slot
    /// migration, or a restarted or flushed server (seen as a script cache
    /// emptied under the client).
    Failover,
    /// Renewals kept failing until the confirmed lease ran out.
    RenewalsFailed,
    /// A handed-over grant was gone before it was claimed.
    GrantExpired,
    /// A handed-over grant could not be claimed before it ran out.
    ClaimFailed,
    /// A new acquisition by the same owner retired it.
    Retired,
    /// The lease ran out before the hold was released: an explicit lease
    /// seen run out when the hold ends, or a renewal or check that found the
    /// key gone with no force-unlock or server change seen (renewals that
    /// came too late, or a key deleted by something other than a
    /// force-unlock).
    Expired,
}

impl LostCause {
    /// The `cause` label of `fairlock_locks_lost_total`.
    fn label(self) -> &'static str {
        match self {
            LostCause::TakenOver => "taken_over",
            LostCause::ForceUnlocked => "force_unlocked",
            LostCause::Failover => "failover",
            LostCause::RenewalsFailed => "renewals_failed",
            LostCause::GrantExpired => "grant_expired",
            LostCause::ClaimFailed => "claim_failed",
            LostCause::Retired => "retired",
            LostCause::Expired => "expired",
        }
    }
}

impl fmt::Display for LostCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostCause::TakenOver => "another owner or acquisition holds it",
            LostCause::ForceUnlocked => "it was force-unlocked",
            LostCause::Failover => {
                "it did not survive a change of the server serving it (failover, migration, restart)"
            }
            LostCause::RenewalsFailed => "the lease ran out while renewals failed",
            LostCause::GrantExpired => "the handed-over grant was gone before it was claimed",
            LostCause::ClaimFailed => "the handed-over grant could not be claimed in time",
            LostCause::Retired => "a new acquisition by the same owner replaced it",
            LostCause::Expired => {
                "its lease ran out before it was released (or its key was deleted)"
            }
        })
    }
}

/// Something that happened to a lock, a hold or a connection.
pub(crate) enum Event<'a> {
    /// An attempt found the lock busy; the waiter is in line.
    Queued {
        lock: &'a str,
        owner: &'a Owner,
        position: Option<u64>,
    },
    /// A script reply granted the lock (`reentry`: one more hold).
    Granted {
        lock: &'a str,
        owner: &'a Owner,
        token: Option<u64>,
        reentry: bool,
    },
    /// A release handed the lock to this waiter (native direct handoff).
    HandedOver {
        lock: &'a str,
        owner: &'a Owner,
        token: u64,
    },
    /// A grant message arrived too late to trust, or was written before the
    /// waiter's last attempt ran; the next attempt confirms it.
    LateGrant { lock: &'a str, owner: &'a Owner },
    /// A grant that a revocation may have overtaken was checked with the
    /// server; `held`: it was still this acquisition's.
    GrantRechecked {
        lock: &'a str,
        owner: &'a Owner,
        held: bool,
    },
    /// A wait ran out of its budget.
    WaitTimedOut { lock: &'a str, owner: &'a Owner },
    /// An attempt failed on the connection and will be retried.
    AttemptFailed {
        lock: &'a str,
        owner: &'a Owner,
        error: &'a dyn fmt::Display,
        giving_up: bool,
    },
    /// A call that is safe to repeat failed on the connection; retried.
    CallRetried { error: &'a dyn fmt::Display },
    /// A re-entry found the hold lost and undid the fresh grant it got.
    ReentryFoundLost { lock: &'a str, owner: &'a Owner },
    /// A grant raced a cancellation and is released again.
    GrantUndone { lock: &'a str, owner: &'a Owner },
    /// One hold released (`how`: "unlock", "drop", "shutdown", ...).
    Released {
        lock: &'a str,
        owner: &'a Owner,
        how: &'static str,
        outcome: &'a dyn fmt::Debug,
    },
    /// A release or a queue exit failed for good; the lease or the waiter
    /// entry ends on its own.
    CleanupFailed {
        lock: &'a str,
        owner: &'a Owner,
        what: &'static str,
        error: &'a dyn fmt::Display,
    },
    /// Somebody force-unlocked the lock through this client.
    ForceUnlocked { lock: &'a str, released: bool },
    /// A hold is known lost.
    Lost {
        lock: &'a str,
        owner: &'a str,
        cause: LostCause,
    },
    /// A renewal failed; it is retried while the lease lasts.
    RenewalFailed {
        lock: &'a str,
        owner: &'a str,
        error: &'a dyn fmt::Display,
    },
    /// The pub/sub connection broke (or did not answer a PING); waiters are
    /// woken and it reconnects.
    PubSubLost { error: Option<&'a dyn fmt::Display> },
    /// A pub/sub (re)connection or (re)subscription failed; retried.
    PubSubRetry { error: &'a dyn fmt::Display },
    /// The client shut down; `unfinished` acquisitions outlived the wait.
    ShutDown { client: &'a str, unfinished: bool },
    /// The server's ACL refused the labels keys: the client goes on without
    /// labels.
    LabelsRefused,
    /// An acquire script got its answer (or failed).
    Attempted { lock: &'a str },
    /// A hold renewed by the watchdog.
    Renewed { lock: &'a str },
    /// A new hold entered the registry (not a re-entry).
    HoldStarted { lock: &'a str },
    /// A hold left the registry: released, lost, or drained at shutdown.
    HoldEnded { lock: &'a str, held_for: Duration },
    /// A latch count-down was answered (`counted`: it took one off the
    /// count; not: a party's repeat, or the latch was open).
    LatchCountedDown { latch: &'a str, counted: bool },
    /// A latch wait ended: the latch `opened`, or the time ran out.
    LatchWaitEnded {
        latch: &'a str,
        opened: bool,
        waited: Duration,
    },
    /// The pub/sub connection is up (`reconnect`: not the first time).
    PubSubConnected { reconnect: bool },
    /// The pub/sub connection fell behind (messages dropped, or the health
    /// PING answered late) and every waiter was woken to check. `first`:
    /// the first time in 10 s.
    PubSubBehind { reason: BehindReason, first: bool },
    /// A server answered `NOSCRIPT` and the script was sent in full;
    /// `ran_before`: it had run there (the server changed, restarted or
    /// flushed its scripts).
    ScriptReloaded {
        script: &'a str,
        server: &'a str,
        ran_before: bool,
    },
    /// Sentinel: the client switched to the master the sentinels name now.
    MasterSwitched {
        service: &'a str,
        from: &'a str,
        to: &'a str,
    },
    /// Sentinel: resolving the master failed; retried.
    SentinelRetry {
        service: &'a str,
        error: &'a dyn fmt::Display,
    },
    /// The server's eviction policy was read at connect (`Err`: it would
    /// not say).
    EvictionPolicy {
        addr: &'a str,
        policy: Result<Option<&'a str>, &'a dyn fmt::Display>,
    },
}

/// Why the wake-up router woke every waiter while connected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BehindReason {
    /// Messages were dropped (more arrived than the client could take).
    Dropped,
    /// The health-check PING was answered late while messages waited.
    SlowPing,
}

/// One client's recording point: its counters and its metric labels.
pub(crate) struct Recorder {
    counters: Counters,
    meters: Meters,
    protocol: &'static str,
    /// The client's label, in the log line of a lost lock.
    label: Box<str>,
}

impl Recorder {
    pub(crate) fn new(
        protocol: &'static str,
        lock_label: LockLabel,
        metrics: bool,
        label: &str,
    ) -> Arc<Self> {
        Arc::new(Self {
            counters: Counters::default(),
            meters: Meters::new(protocol, lock_label, metrics),
            protocol,
            label: label.into(),
        })
    }

    /// The counts so far.
    pub(crate) fn statistics(&self) -> Statistics {
        self.counters.snapshot()
    }

    /// Count `event`, then record it as [`record`] does.
    pub(crate) fn record(&self, event: Event<'_>) {
        let c = &self.counters;
        match &event {
            Event::Released { lock, how, .. } => {
                bump(&c.releases);
                self.meters.released(lock, how);
            }
            Event::ForceUnlocked { lock, released } => {
                bump(&c.force_unlocks);
                self.meters.force_unlock(lock, *released);
            }
            Event::Lost { lock, cause, .. } => {
                let counter = match cause {
                    LostCause::TakenOver => &c.lost_taken_over,
                    LostCause::ForceUnlocked => &c.lost_force_unlocked,
                    LostCause::Failover => &c.lost_failover,
                    LostCause::RenewalsFailed => &c.lost_renewals_failed,
                    LostCause::GrantExpired => &c.lost_grant_expired,
                    LostCause::ClaimFailed => &c.lost_claim_failed,
                    LostCause::Expired => &c.lost_expired,
                    // Not a loss: the owner acquired the lock again.
                    LostCause::Retired => return record(event),
                };
                bump(counter);
                self.meters.lost(lock, cause.label());
                // The log line names this client by its label too: lost
                // locks are read in logs gathered from many hosts.
                if let Event::Lost { lock, owner, cause } = event {
                    warn!(lock, owner, label = &*self.label, %cause, "lock lost");
                    return;
                }
            }
            Event::Attempted { lock } => {
                bump(&c.attempts);
                self.meters.attempt(lock);
            }
            Event::Renewed { lock } => {
                bump(&c.renewals);
                self.meters.renewal(lock, "ok");
            }
            Event::RenewalFailed { lock, .. } => {
                bump(&c.renewal_failures);
                self.meters.renewal(lock, "failed");
            }
            Event::HoldStarted { .. } => self.meters.hold_started(),
            Event::HoldEnded { lock, held_for } => {
                bump(&c.holds_ended);
                add_time(&c.hold_nanos, *held_for);
                self.meters.hold_ended(lock, *held_for);
            }
            Event::LatchCountedDown { latch, counted } => {
                self.meters.latch_count_down(latch, *counted);
            }
            Event::LatchWaitEnded {
                latch,
                opened,
                waited,
            } => self.meters.latch_wait(latch, *opened, *waited),
            Event::PubSubConnected { reconnect: true } => {
                bump(&c.pubsub_reconnects);
                self.meters.pubsub_reconnect();
            }
            Event::PubSubBehind { reason, .. } => {
                bump(&c.pubsub_behind);
                self.meters.pubsub_behind(match reason {
                    BehindReason::Dropped => "dropped",
                    BehindReason::SlowPing => "slow_ping",
                });
            }
            Event::ScriptReloaded { .. } => {
                bump(&c.script_reloads);
                self.meters.script_reload();
            }
            _ => {}
        }
        record(event);
    }
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Immediate,
    AfterWait,
    TimedOut,
    Cancelled,
    Error,
}

impl Outcome {
    /// Every outcome.
    #[cfg(test)]
    const ALL: [Outcome; 5] = [
        Outcome::Immediate,
        Outcome::AfterWait,
        Outcome::TimedOut,
        Outcome::Cancelled,
        Outcome::Error,
    ];

    /// The `outcome` label and span field (all of them in
    /// [`meters::OUTCOMES`](crate::meters::OUTCOMES)).
    fn label(self) -> &'static str {
        match self {
            Outcome::Immediate => "immediate",
            Outcome::AfterWait => "after_wait",
            Outcome::TimedOut => "timed_out",
            Outcome::Cancelled => "cancelled",
            Outcome::Error => "error",
        }
    }
}

/// How a waiter got the lock from a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handoff {
    /// The release named it the holder and told it so (native).
    Direct,
    /// The release's wake-up message started the attempt that got it.
    Woken,
}

/// What the steps of one acquisition report while it runs (shared with
/// the tasks that send its attempts).
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// A reply said the lock was busy: the acquisition waited.
    queued: AtomicBool,
    /// Last queue position + 1 (0: none reported).
    position: AtomicU64,
    /// 0: no handoff; 1: direct; 2: woken.
    handoff: AtomicU8,
    handoff_nanos: AtomicU64,
}

impl Progress {
    /// A reply found the lock busy (`position`: the place in line, when the
    /// protocol tells).
    pub(crate) fn queued(&self, position: Option<u64>) {
        self.queued.store(true, Ordering::Relaxed);
        if let Some(position) = position {
            self.position
                .store(position.saturating_add(1), Ordering::Relaxed);
        }
    }

    /// The grant came from a release, `latency` after it (an upper bound:
    /// see `docs/observability.md`).
    pub(crate) fn handed_off(&self, how: Handoff, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.handoff_nanos.store(nanos, Ordering::Relaxed);
        let code = match how {
            Handoff::Direct => 1,
            Handoff::Woken => 2,
        };
        self.handoff.store(code, Ordering::Relaxed);
    }

    fn position(&self) -> Option<u64> {
        self.position.load(Ordering::Relaxed).checked_sub(1)
    }

    fn handoff(&self) -> Option<(Handoff, Duration)> {
        let how = match self.handoff.load(Ordering::Relaxed) {
            1 => Handoff::Direct,
            2 => Handoff::Woken,
            _ => return None,
        };
        let latency = Duration::from_nanos(self.handoff_nanos.load(Ordering::Relaxed));
        Some((how, latency))
    }
}

/// One acquisition, from its start to its outcome: its `acquire` span, its
/// place in the waiting-tasks gauge, and its count. Dropped unfinished, it
/// counts as cancelled.
pub(crate) struct AcquireRecord {
    recorder: Arc<Recorder>,
    /// The lock's name, kept only when its metrics carry it (a copy per
    /// acquisition otherwise for nothing).
    lock: Option<Box<str>>,
    fair: bool,
    started: Instant,
    span: Span,
    progress: Arc<Progress>,
    finished: bool,
}

impl AcquireRecord {
    /// An acquisition of `lock` begins.
    pub(crate) fn start(recorder: &Arc<Recorder>, lock: &str, fair: bool) -> Self {
        let started = Instant::now();
        let span = tracing::debug_span!(
            "acquire",
            lock,
            fair,
            protocol = recorder.protocol,
            owner = field::Empty,
            outcome = field::Empty,
            wait_ms = field::Empty,
            position = field::Empty,
            token = field::Empty,
            handoff = field::Empty,
        );
        recorder.meters.waiting(1.0);
        Self {
            recorder: Arc::clone(recorder),
            lock: recorder.meters.labels_locks().then(|| lock.into()),
            fair,
            started,
            span,
            progress: Arc::default(),
            finished: false,
        }
    }

    /// The span the acquisition runs in.
    pub(crate) fn span(&self) -> Span {
        self.span.clone()
    }

    /// What the acquisition's steps report to.
    pub(crate) fn progress(&self) -> Arc<Progress> {
        Arc::clone(&self.progress)
    }

    /// The owner is known (read or made once the acquisition began).
    pub(crate) fn owner(&self, owner: &Owner) {
        self.span.record("owner", field::display(owner));
    }

    /// The acquisition ended: `granted` with its fencing token, not
    /// acquired in time, or failed.
    pub(crate) fn finish(mut self, result: Result<Option<Option<u64>>, &dyn fmt::Display>) {
        let outcome = match &result {
            Ok(Some(token)) => {
                if let Some(token) = token {
                    self.span.record("token", token);
                }
                if self.progress.queued.load(Ordering::Relaxed) {
                    Outcome::AfterWait
                } else {
                    Outcome::Immediate
                }
            }
            Ok(None) => Outcome::TimedOut,
            Err(_) => Outcome::Error,
        };
        self.end(outcome);
        if let Err(error) = result {
            debug!(parent: &self.span, %error, "acquisition failed");
        }
    }

    fn end(&mut self, outcome: Outcome) {
        self.finished = true;
        let waited = self.started.elapsed();
        let recorder = &self.recorder;
        let c = &recorder.counters;
        bump(match outcome {
            Outcome::Immediate => &c.acquired_immediately,
            Outcome::AfterWait => &c.acquired_after_wait,
            Outcome::TimedOut => &c.timed_out,
            Outcome::Cancelled => &c.cancelled,
            Outcome::Error => &c.failed,
        });
        add_time(&c.wait_nanos, waited);
        let meters = &recorder.meters;
        meters.waiting(-1.0);
        let lock = self.lock.as_deref().unwrap_or_default();
        meters.acquisition(lock, self.fair, outcome.label(), waited);
        let span = &self.span;
        span.record("outcome", outcome.label());
        span.record(
            "wait_ms",
            u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
        );
        if let Some(position) = self.progress.position() {
            span.record("position", position);
        }
        if matches!(outcome, Outcome::Immediate | Outcome::AfterWait) {
            if let Some((how, latency)) = self.progress.handoff() {
                bump(&c.handoffs);
                let how = match how {
                    Handoff::Direct => "direct",
                    Handoff::Woken => "woken",
                };
                span.record("handoff", how);
                meters.handoff(lock, how, latency);
            }
        }
        debug!(parent: span, outcome = outcome.label(), ?waited, "acquisition finished");
    }
}

impl Drop for AcquireRecord {
    fn drop(&mut self) {
        if !self.finished {
            self.end(Outcome::Cancelled);
        }
    }
}

/// Record `event` in the log only (events that no client counts, or that
/// come from below the client: the transport, the retry policy).
pub(crate) fn record(event: Event<'_>) {
    match event {
        Event::Queued {
            lock,
            owner,
            position,
        } => debug!(lock, %owner, ?position, "waiting in queue"),
        Event::Granted {
            lock,
            owner,
            token,
            reentry,
        } => debug!(lock, %owner, ?token, reentry, "granted"),
        Event::HandedOver { lock, owner, token } => {
            debug!(lock, %owner, token, "handed over")
        }
        Event::LateGrant { lock, owner } => {
            debug!(lock, %owner, "handoff read late; confirming it")
        }
        Event::GrantRechecked { lock, owner, held } => {
            debug!(lock, %owner, held, "grant checked after a revocation")
        }
        Event::WaitTimedOut { lock, owner } => debug!(lock, %owner, "wait budget ran out"),
        Event::AttemptFailed {
            lock,
            owner,
            error,
            giving_up: true,
        } => warn!(lock, %owner, %error, "giving up: Redis unreachable or refusing service"),
        Event::AttemptFailed {
            lock, owner, error, ..
        } => {
            debug!(lock, %owner, %error, "attempt failed; retrying")
        }
        Event::CallRetried { error } => debug!(%error, "call failed; retrying"),
        Event::ReentryFoundLost { lock, owner } => {
            debug!(lock, %owner, "re-entry found the hold lost")
        }
        Event::GrantUndone { lock, owner } => {
            debug!(lock, %owner, "grant raced a cancellation; releasing it")
        }
        Event::Released {
            lock,
            owner,
            how,
            outcome,
        } => debug!(lock, %owner, how, ?outcome, "released"),
        Event::CleanupFailed {
            lock,
            owner,
            what,
            error,
        } => warn!(lock, %owner, %error, "{what} failed; it ends on its own (lease or waiter ttl)"),
        Event::ForceUnlocked { lock, released } => info!(lock, released, "force unlock"),
        Event::Lost {
            lock,
            owner,
            cause: LostCause::Retired,
        } => debug!(
            lock,
            owner, "a new acquisition retires an older hold of the same owner"
        ),
        Event::Lost { lock, owner, cause } => warn!(lock, owner, %cause, "lock lost"),
        Event::RenewalFailed { lock, owner, error } => {
            debug!(lock, owner, %error, "renewal failed; will retry")
        }
        Event::PubSubLost { error: Some(error) } => {
            warn!(%error, "pub/sub connection lost; waking all waiters and reconnecting")
        }
        Event::PubSubLost { error: None } => {
            warn!("pub/sub connection lost; waking all waiters and reconnecting")
        }
        Event::PubSubRetry { error } => debug!(%error, "pub/sub connection failed; retrying"),
        Event::LabelsRefused => warn!(
            "the Redis user may not use the labels keys (NOPERM); going on without client labels \
             (grant ~fairlock:labels:* and +hlen, see docs/deployment.md)"
        ),
        Event::ShutDown { client, unfinished } => {
            if unfinished {
                warn!("shutdown: some acquisitions did not finish within the response timeout");
            }
            info!(client, "lock client shut down")
        }
        Event::Renewed { lock } => tracing::trace!(lock, "renewed"),
        Event::Attempted { .. } => {}
        Event::HoldStarted { lock } => tracing::trace!(lock, "hold started"),
        Event::HoldEnded { lock, held_for } => tracing::trace!(lock, ?held_for, "hold ended"),
        Event::LatchCountedDown { latch, counted } => {
            tracing::trace!(latch, counted, "latch counted down")
        }
        Event::LatchWaitEnded {
            latch,
            opened,
            waited,
        } => tracing::trace!(latch, opened, ?waited, "latch wait ended"),
        Event::PubSubConnected { reconnect } => debug!(reconnect, "pub/sub connected"),
        Event::PubSubBehind {
            reason: BehindReason::Dropped,
            first,
        } => {
            if first {
                warn!(
                    "pub/sub messages arrive faster than they can be handled (a PUBLISH \
                     flood?); dropping them and waking every waiter to check"
                )
            } else {
                debug!("pub/sub messages dropped; waking every waiter")
            }
        }
        Event::PubSubBehind {
            reason: BehindReason::SlowPing,
            first,
        } => {
            if first {
                info!(
                    "pub/sub health check answered late (a backlog of messages, or a busy \
                     server); waking every waiter to check"
                )
            } else {
                debug!("pub/sub health check answered late; waking every waiter")
            }
        }
        Event::ScriptReloaded {
            script,
            server,
            ran_before: false,
        } => debug!(script, server, "script sent in full after NOSCRIPT"),
        Event::ScriptReloaded {
            script,
            server,
            ran_before: true,
        } => info!(
            script,
            server,
            "script sent in full after NOSCRIPT: the server had run it before (failover, restart or SCRIPT FLUSH)"
        ),
        Event::MasterSwitched { service, from, to } => {
            warn!(
                service,
                from, to, "sentinel: the master moved; following it"
            )
        }
        Event::SentinelRetry { service, error } => {
            debug!(service, %error, "sentinel: resolving the master failed; retrying")
        }
        Event::EvictionPolicy { addr, policy } => match policy {
            Err(error) => {
                debug!(addr, %error, "cannot read maxmemory-policy; eviction check skipped")
            }
            Ok(None) => debug!(addr, "no maxmemory-policy reported; eviction check skipped"),
            Ok(Some("noeviction")) => debug!(addr, "maxmemory-policy is noeviction"),
            Ok(Some(policy)) => warn!(
                addr,
                policy,
                "this maxmemory-policy lets Redis evict lock keys under memory pressure, and a \
                 lock whose key was evicted can be taken by a second holder while the first \
                 still holds it: set maxmemory-policy noeviction on servers that hold locks"
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meters_know_every_outcome_label() {
        assert_eq!(Outcome::ALL.map(Outcome::label), crate::meters::OUTCOMES);
    }
}
