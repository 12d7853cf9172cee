//! Plain-value views of a client: [`Statistics`] (counts since it
//! connected) and [`Status`] (what it holds and waits for now), and the
//! atomic counters behind the statistics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a [`LockClient`](crate::LockClient) has done since it connected,
/// from [`LockClient::statistics`](crate::LockClient::statistics). The same
/// counts the `metrics` feature exports, for code that does not run a
/// metrics exporter; available without the feature.
///
/// Each field is read on its own (relaxed atomics): a snapshot taken while
/// locks are being acquired may count an acquisition in one field and not
/// yet its hold in another. Counters only grow.
///
/// Every acquisition (every `lock`, `try_lock*`, `acquire`, re-entry or
/// not) ends in exactly one of the five outcomes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Statistics {
    /// Granted by the first attempt, without queueing (re-entries included).
    pub acquired_immediately: u64,
    /// Granted after waiting in the queue (or, for a non-fair lock, after
    /// finding it busy at least once).
    pub acquired_after_wait: u64,
    /// Not acquired within the wait budget (a `try_lock` that found the lock
    /// busy included).
    pub timed_out: u64,
    /// The acquire future was dropped before it finished.
    pub cancelled: u64,
    /// Ended with an error (Redis unreachable, the client shut down, ...).
    pub failed: u64,
    /// Total time acquisitions took, whatever their outcome (cancelled ones
    /// up to when they were dropped).
    pub wait_time: Duration,
    /// Acquire scripts that got an answer from Redis (or failed): every
    /// attempt of every acquisition, the first one, the re-check after
    /// subscribing, refreshes while waiting and retries after errors. The
    /// load acquisitions put on Redis.
    pub attempts: u64,
    /// Grants received from a release: the lock handed over directly
    /// (native) or taken on the attempt a release's wake-up message started.
    pub handoffs: u64,
    /// Holds released through this client (unlock, drop, shutdown), counted
    /// once per release call that reached Redis.
    pub releases: u64,
    /// Holds that ended (released, lost, or drained at shutdown); one per
    /// acquisition, whatever its number of re-entries.
    pub holds_ended: u64,
    /// Total time of the ended holds, from the grant to the release (or the
    /// moment the hold was known lost).
    pub hold_time: Duration,
    /// Watchdog renewals that confirmed a hold, one per hold renewed.
    pub renewals: u64,
    /// Watchdog renewals that failed on the connection (retried while the
    /// lease lasts), one per hold in the failed batch.
    pub renewal_failures: u64,
    /// Holds found held by another owner or acquisition (or their key
    /// holding something else) by a renewal or check.
    pub lost_taken_over: u64,
    /// Holds found gone or taken after a force-unlock message for their
    /// lock reached this client. The message is a hint (anyone allowed to
    /// `PUBLISH` can send one): a forged message that coincides with a real
    /// expiry puts that loss here instead of in `lost_expired`.
    pub lost_force_unlocked: u64,
    /// Holds found gone or taken after the server serving them changed: a
    /// Sentinel failover, a cluster failover or slot migration, or a server
    /// that restarted or flushed its scripts (asynchronous replication can
    /// lose a lock written just before the switch).
    pub lost_failover: u64,
    /// Holds whose lease ran out while renewals kept failing (Redis
    /// unreachable, a failover).
    pub lost_renewals_failed: u64,
    /// Holds whose lease ran out before they were released: an explicit
    /// lease (counted when the hold ends), or a watchdog lease whose key a
    /// renewal found gone with no force-unlock or server change seen
    /// (renewals that came too late, a key deleted by hand).
    pub lost_expired: u64,
    /// Handed-over grants that were gone before they were claimed.
    pub lost_grant_expired: u64,
    /// Handed-over grants that could not be claimed in time.
    pub lost_claim_failed: u64,
    /// `force_unlock` calls through this client that completed.
    pub force_unlocks: u64,
    /// Times the pub/sub (wake-up) connection was re-established after it
    /// broke.
    pub pubsub_reconnects: u64,
    /// Times the pub/sub (wake-up) connection fell behind and every waiter
    /// was woken to check (at most once per 25 ms): messages arrived faster
    /// than the client could take them and some were dropped (a PUBLISH
    /// flood), or the 1 s health-check PING was unanswered after 100 ms
    /// while messages waited unread (a backlog).
    pub pubsub_behind: u64,
    /// Scripts sent again in full (`EVAL`) after the server answered
    /// `NOSCRIPT`: the first use of each script on each server (or cluster
    /// node), and again after a restart, a `SCRIPT FLUSH` or a failover to
    /// a server that never ran it.
    pub script_reloads: u64,
}

impl Statistics {
    /// Acquisitions that finished, all outcomes together.
    pub fn acquisitions(&self) -> u64 {
        self.acquired_immediately
            + self.acquired_after_wait
            + self.timed_out
            + self.cancelled
            + self.failed
    }

    /// Holds lost, all causes together.
    pub fn locks_lost(&self) -> u64 {
        self.lost_taken_over
            + self.lost_force_unlocked
            + self.lost_failover
            + self.lost_renewals_failed
            + self.lost_expired
            + self.lost_grant_expired
            + self.lost_claim_failed
    }
}

/// What a client holds and waits for at one moment, from
/// [`LockClient::status`](crate::LockClient::status).
///
/// Not atomic: each part is read under its own lock, one after another, so
/// a lock granted meanwhile can show both as held and as still waited for,
/// or as neither. Take it as a picture for dashboards and debugging, not as
/// a basis for decisions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Status {
    /// The holds this client keeps (renews, releases at shutdown), ordered
    /// by lock name then owner.
    pub held: Vec<HeldLock>,
    /// Acquisitions in progress (tasks inside a `lock` or `try_lock*` call).
    pub waiting: usize,
    /// Pub/sub channels the wake-up connection is subscribed to (or will
    /// subscribe to on reconnect): one per lock with waiters, plus this
    /// client's revocation channel.
    pub subscribed_channels: usize,
    /// Clean-up work in flight in the background: releases of dropped
    /// guards, queue exits of cancelled waiters, undos of attempts whose
    /// caller left (and a shared owner's attempts, which run as tasks).
    pub background_tasks: usize,
    /// `true` once [`shutdown`](crate::LockClient::shutdown) began.
    pub closed: bool,
}

/// One hold in a [`Status`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldLock {
    /// The lock's name.
    pub name: String,
    /// The owner id holding it.
    pub owner: String,
    /// Live guards of this hold (1 plus re-entries still held).
    pub holds: usize,
    /// How long it has been held.
    pub held_for: Duration,
    /// The fencing token (native protocol).
    pub token: Option<u64>,
    /// Known lost (its guards see `is_held() == false`) but not yet dropped.
    pub lost: bool,
}

/// The counters behind [`Statistics`]: one atomic per field.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) acquired_immediately: AtomicU64,
    pub(crate) acquired_after_wait: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    pub(crate) cancelled: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) wait_nanos: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) handoffs: AtomicU64,
    pub(crate) releases: AtomicU64,
    pub(crate) holds_ended: AtomicU64,
    pub(crate) hold_nanos: AtomicU64,
    pub(crate) renewals: AtomicU64,
    pub(crate) renewal_failures: AtomicU64,
    pub(crate) lost_taken_over: AtomicU64,
    pub(crate) lost_force_unlocked: AtomicU64,
    pub(crate) lost_failover: AtomicU64,
    pub(crate) lost_renewals_failed: AtomicU64,
    pub(crate) lost_expired: AtomicU64,
    pub(crate) lost_grant_expired: AtomicU64,
    pub(crate) lost_claim_failed: AtomicU64,
    pub(crate) force_unlocks: AtomicU64,
    pub(crate) pubsub_reconnects: AtomicU64,
    pub(crate) pubsub_behind: AtomicU64,
    pub(crate) script_reloads: AtomicU64,
}

/// Add one.
pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Add a duration, in nanoseconds (saturating at about 584 years).
pub(crate) fn add_time(counter: &AtomicU64, time: Duration) {
    let nanos = u64::try_from(time.as_nanos()).unwrap_or(u64::MAX);
    counter.fetch_add(nanos, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn snapshot(&self) -> Statistics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Statistics {
            acquired_immediately: get(&self.acquired_immediately),
            acquired_after_wait: get(&self.acquired_after_wait),
            timed_out: get(&self.timed_out),
            cancelled: get(&self.cancelled),
            failed: get(&self.failed),
            wait_time: Duration::from_nanos(get(&self.wait_nanos)),
            attempts: get(&self.attempts),
            handoffs: get(&self.handoffs),
            releases: get(&self.releases),
            holds_ended: get(&self.holds_ended),
            hold_time: Duration::from_nanos(get(&self.hold_nanos)),
            renewals: get(&self.renewals),
            renewal_failures: get(&self.renewal_failures),
            lost_taken_over: get(&self.lost_taken_over),
            lost_force_unlocked: get(&self.lost_force_unlocked),
            lost_failover: get(&self.lost_failover),
            lost_renewals_failed: get(&self.lost_renewals_failed),
            lost_expired: get(&self.lost_expired),
            lost_grant_expired: get(&self.lost_grant_expired),
            lost_claim_failed: get(&self.lost_claim_failed),
            force_unlocks: get(&self.force_unlocks),
            pubsub_reconnects: get(&self.pubsub_reconnects),
            pubsub_behind: get(&self.pubsub_behind),
            script_reloads: get(&self.script_reloads),
        }
    }
}
