//! The holds registry and its watchdog: every hold this client has, and one
//! task that renews the watchdog-leased ones in batches every
//! `renew_interval`, and checks all of them at once when told that one was
//! taken away (a revocation message). A batch holds the keys of one
//! `Connection::key_group` only (on a Redis Cluster, one hash slot: a
//! script whose keys span slots is refused with CROSSSLOT), at most
//! `RENEW_BATCH` of them. Every batch of a round is sent at once (the
//! connection multiplexes them) and each answer is handled as it comes, so
//! a node that does not answer costs its own batches one response timeout
//! each, in parallel, and never holds up the others: a renewal of a lock on
//! a healthy master is delayed by at most one response timeout whatever
//! other nodes do. On a standalone server or Sentinel every key is in one
//! group: one call per `RENEW_BATCH` holds, as before.
//!
//! A renewal or check that finds the lock gone, owned by someone else or
//! (native) taken again under another token, or renewals that keep failing
//! until the lease the server last confirmed has run out, mark the hold
//! lost: every guard of that hold sees `is_held() == false` and its `lost()`
//! future resolves.
//!
//! One entry per (lock key, owner): the guards of one acquisition and its
//! re-entries share it. A fresh acquisition by the same owner retires the
//! entry of an older one (marks it lost, so that its guards can no longer
//! release or renew anything) and starts from its own lease.

use std::collections::HashMap;
use std::collections::hash_map::Entry as Slot;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::events::{Event, LostCause, Recorder};
use crate::owner::Owner;
use crate::protocol::{Dialect, HoldRef, ProtocolLock, RENEW_BATCH, Renewal};
use crate::stats::HeldLock;
use crate::transport::Connection;

/// What an unsure renewal (the hold's key on another node for now, half-way
/// through a Cluster slot migration) reports as its error: neither renewed
/// nor lost, it is retried as a failed call.
const UNSURE: &str = "the hold's key is not on the node that answered (a slot migration?): \
                      neither renewed nor lost; retried";

/// What is known about one hold: lost for sure, and until when the lease
/// the server last confirmed lasts (a local estimate, measured from when the
/// confirming call was sent, so never later than the server's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldStatus {
    pub(crate) lost: bool,
    pub(crate) expires: Instant,
}

impl HoldStatus {
    /// Held as far as this process can know: not lost and within the lease.
    pub(crate) fn is_held(&self) -> bool {
        !self.lost && Instant::now() < self.expires
    }
}

/// The lost-lock signal shared by the guards of one hold.
///
/// A status under a mutex and one [`Notify`] rather than a `watch`
/// channel: a `watch` channel wakes its eight internal `Notify`s on every
/// change and when it closes, and every hold made and dropped one (about
/// 500 instructions per lock + unlock, docs/performance.md).
#[derive(Debug)]
pub(crate) struct HeldState {
    signal: Arc<Signal>,
    /// Where its loss is recorded.
    events: Arc<Recorder>,
}

/// What [`lost`](Signal::lost) futures wait on: they hold this, not the
/// [`HeldState`], so that they never keep a hold's state alive.
#[derive(Debug)]
pub(crate) struct Signal {
    state: Mutex<Watched>,
    /// Woken after every change of `state`.
    changed: Notify,
}

#[derive(Debug, Clone, Copy)]
struct Watched {
    status: HoldStatus,
    /// Every holder of the [`HeldState`] (guards, the registry, a claim)
    /// is gone: the hold is over, its `lost()` futures resolve (as a
    /// `watch` receiver's did when its sender was dropped).
    closed: bool,
}

impl Signal {
    fn read(&self) -> Watched {
        *locked(&self.state)
    }

    /// Change the state with `change` (`true`: it changed), then wake the
    /// waiters if it did. The waiters read the new state under the lock,
    /// so a wait that registered before its read misses no change.
    fn update(&self, change: impl FnOnce(&mut Watched) -> bool) {
        let changed = change(&mut locked(&self.state));
        if changed {
            self.changed.notify_waiters();
        }
    }

    /// Resolves once the hold is lost or may be (see
    /// [`LockGuard::lost`](crate::LockGuard::lost)), or is over.
    pub(crate) async fn lost(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the read: a change made after it wakes
            // this wait.
            changed.as_mut().enable();
            let now = self.read();
            if now.closed || !now.status.is_held() {
                return;
            }
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep_until(now.status.expires) => {}
            }
        }
    }
}

impl HeldState {
    pub(crate) fn new(expires: Instant, events: Arc<Recorder>) -> Arc<Self> {
        Arc::new(Self {
            signal: Arc::new(Signal {
                state: Mutex::new(Watched {
                    status: HoldStatus {
                        lost: false,
                        expires,
                    },
                    closed: false,
                }),
                changed: Notify::new(),
            }),
            events,
        })
    }

    /// The hold is known lost: its guards see it at once.
    pub(crate) fn mark_lost(&self, lock: &str, owner: &str, cause: LostCause) {
        // Counted before `lost()` futures wake (and under the lock, before
        // anyone reads the loss), so that code woken by one sees the loss
        // in the statistics.
        self.signal.update(|state| {
            let newly = !std::mem::replace(&mut state.status.lost, true);
            if newly {
                self.events.record(Event::Lost { lock, owner, cause });
            }
            newly
        });
    }

    /// Known lost without a record (drained at shutdown: the caller
    /// releases it).
    fn mark_lost_silently(&self) {
        self.signal
            .update(|state| !std::mem::replace(&mut state.status.lost, true));
    }

    /// The server acknowledged by the replicas keeps the hold only until
    /// `until`: never believe it longer.
    pub(crate) fn cap(&self, until: Instant) {
        self.signal.update(|state| {
            let earlier = until < state.status.expires;
            if earlier {
                state.status.expires = until;
            }
            earlier
        });
    }

    /// A renewal confirmed the lease until `expires`.
    pub(crate) fn extend(&self, expires: Instant) {
        self.signal.update(|state| {
            let later = expires > state.status.expires;
            if later {
                state.status.expires = expires;
            }
            later
        });
    }

    pub(crate) fn status(&self) -> HoldStatus {
        self.signal.read().status
    }

    /// What `lost()` waits on.
    pub(crate) fn signal(&self) -> Arc<Signal> {
        Arc::clone(&self.signal)
    }
}

impl Drop for HeldState {
    fn drop(&mut self) {
        self.signal.update(|state| {
            state.closed = true;
            true
        });
    }
}

/// A registry key: (lock key, owner), compared and hashed by those two
/// strings, but held as the lock and the owner the hold has already (two
/// reference counts): registering and unregistering a hold allocate no
/// key (two `String`s per lookup cost about 700 instructions per lock +
/// unlock, docs/performance.md).
#[derive(Clone)]
struct Key {
    lock: Arc<ProtocolLock>,
    owner: Owner,
}

impl Key {
    fn lock_key(&self) -> &str {
        self.lock.lock_key()
    }

    fn owner(&self) -> &str {
        self.owner.as_str()
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        self.lock_key() == other.lock_key() && self.owner() == other.owner()
    }
}

impl Eq for Key {}

impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.lock_key().hash(state);
        self.owner().hash(state);
    }
}

struct Entry {
    /// The lock it holds, for renewals and for `shutdown`.
    lock: Arc<ProtocolLock>,
    /// The fencing token of the acquisition (native).
    token: Option<u64>,
    /// Live guards of this hold.
    holds: usize,
    /// Those of them with a watchdog lease: renewed while above 0.
    renewed: usize,
    state: Arc<HeldState>,
    /// When it was granted.
    since: Instant,
    /// [`Connection::server_changes`] when the hold was last confirmed
    /// (granted or renewed): a loss found after it grew is put down to the
    /// change of server.
    server_changes: u64,
    /// A force-unlock message naming this lock arrived since the hold was
    /// last confirmed (a hint: anyone may publish one).
    revoked: bool,
    /// The last renewal of this hold failed (no answer, or not acknowledged
    /// by the replicas): a lease that runs out now is put down to that.
    failing: bool,
    /// The last time a call found the hold's key with less time left than
    /// this client's renewals leave it (another client set it: a Redisson
    /// reader's renewal sets a read-write lock's one TTL to its own lease),
    /// and what it found. Forgotten once twice that long passed without
    /// another such finding.
    short: Option<ShortTtl>,
    /// When to renew the hold ahead of the round: a third of that TTL after
    /// the call that found it, so that the key never runs out while held.
    early: Option<Instant>,
}

/// A TTL a call found on a hold's key, shorter than this client keeps it.
#[derive(Debug, Clone, Copy)]
struct ShortTtl {
    ttl: Duration,
    seen: Instant,
}

/// The shortest time from the answer of a call to the early renewal it
/// schedules.
const MIN_EARLY_GAP: Duration = Duration::from_millis(50);

impl Entry {
    /// A call sent at `sent_at` found the hold's key with `ttl` left (`None`:
    /// not reported): note it when it is short (see [`Entry::short`]), and
    /// schedule the hold's early renewal from what is known.
    fn found_ttl(&mut self, schedule: &Schedule, sent_at: Instant, ttl: Option<Duration>) {
        match ttl.filter(|&ttl| schedule.is_short(ttl)) {
            Some(ttl) => self.short = Some(ShortTtl { ttl, seen: sent_at }),
            None => {
                if self
                    .short
                    .is_some_and(|short| sent_at >= short.seen + 2 * short.ttl)
                {
                    self.short = None;
                }
            }
        }
        // Never sooner than MIN_EARLY_GAP from now: a reply slower than a
        // third of the TTL must not chain calls back to back.
        self.early = self
            .short
            .map(|short| (sent_at + short.ttl / 3).max(Instant::now() + MIN_EARLY_GAP));
    }

    /// A renewal of this hold got no answer: an early one is tried again
    /// at the same pace (the round's retry may come too late for a short
    /// TTL).
    fn retry_early(&mut self) {
        self.early = self
            .short
            .map(|short| Instant::now() + (short.ttl / 3).max(MIN_EARLY_GAP));
    }

    /// A renewal (or check) of this hold failed, or answered neither held
    /// nor lost: a renewal marks it failing, and once the lease last
    /// confirmed ran out the hold is lost and leaves (returns true: the
    /// caller removes it from the registry).
    fn failed(&mut self, owner: &str, check_only: bool, events: &Recorder) -> bool {
        if !check_only {
            self.failing = true;
        }
        if Instant::now() < self.state.status().expires {
            return false;
        }
        self.state
            .mark_lost(self.lock.name(), owner, LostCause::RenewalsFailed);
        self.ended(owner, events);
        true
    }

    /// The hold of `owner` leaves the registry; a lease that ran out before
    /// (and was not reported lost) is reported now.
    fn ended(&self, owner: &str, events: &Recorder) {
        let status = self.state.status();
        if !status.lost && Instant::now() >= status.expires {
            let cause = if self.failing {
                LostCause::RenewalsFailed
            } else {
                LostCause::Expired
            };
            events.record(Event::Lost {
                lock: self.lock.name(),
                owner,
                cause,
            });
        }
        events.record(Event::HoldEnded {
            lock: self.lock.name(),
            held_for: self.since.elapsed(),
        });
    }
}

/// How a new hold relates to what the owner held before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldKind {
    /// A new acquisition: the owner held nothing (any older entry is stale).
    Fresh,
    /// One more hold of the acquisition the owner holds.
    Reentry,
}

/// One hold to register.
pub(crate) struct NewHold<'a> {
    pub(crate) lock: &'a Arc<ProtocolLock>,
    pub(crate) owner: &'a Owner,
    pub(crate) token: Option<u64>,
    pub(crate) expires: Instant,
    pub(crate) kind: HoldKind,
    /// Renewed by the watchdog (else an explicit lease that just expires).
    pub(crate) renew: bool,
    /// The TTL the lock key had before the acquisition extended it, and
    /// when the acquisition was sent, where the protocol reports it (see
    /// [`Entry::short`]).
    pub(crate) found_ttl: Option<(Instant, Duration)>,
}

/// A hold still registered, for [`Watchdog::drain`].
pub(crate) struct Registered {
    pub(crate) lock: Arc<ProtocolLock>,
    pub(crate) owner: Owner,
    pub(crate) token: Option<u64>,
    pub(crate) holds: usize,
}

/// Keyed by lock key and owner, which the application chooses (not a
/// remote party): a fast hasher, seeded per map, rather than SipHash.
type Entries = Mutex<HashMap<Key, Entry, foldhash::fast::RandomState>>;

/// The watchdog as the revocation listener sees it: it outlives neither
/// the watchdog nor its holds.
pub(crate) struct Revocations {
    entries: Weak<Entries>,
    check_now: Weak<Notify>,
}

impl Revocations {
    /// A force-unlock message arrived (`key`: the lock key it names), or
    /// the wake-up connection came back (`None`: one may have been
    /// missed): check every hold at once. Holds of `key` found lost from
    /// now on are put down to a force-unlock; only holds in the registry
    /// are marked, so a flood of forged names costs a scan of the held
    /// locks each and no memory. Calls made while a check runs are served
    /// by the next one. `false` once the watchdog is gone.
    pub(crate) fn revoked(&self, key: Option<&str>) -> bool {
        let (Some(entries), Some(check)) = (self.entries.upgrade(), self.check_now.upgrade())
        else {
            return false;
        };
        if let Some(key) = key {
            for (held, entry) in locked(&entries).iter_mut() {
                if held.lock_key() == key {
                    entry.revoked = true;
                }
            }
        }
        check.notify_one();
        true
    }
}

pub(crate) struct Watchdog {
    entries: Arc<Entries>,
    /// Wakes the task for an immediate check of every hold.
    check_now: Arc<Notify>,
    /// Wakes the task to plan again: a hold registered with an early
    /// renewal due before what the task waits for.
    replan: Arc<Notify>,
    schedule: Schedule,
    /// The renewal task, stopped by [`stop`](Self::stop) at shutdown.
    task: tokio::task::AbortHandle,
    events: Arc<Recorder>,
    conn: Connection,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Updates are single inserts/removes; a poisoned map is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watchdog {
    /// Start the renewal task on `runtime`; it ends when the watchdog is
    /// dropped. From `config`: the lease and renew interval; with
    /// `min_replicas`, a renewal extends a hold's lease only once that many
    /// replicas acknowledged it (within the timeout).
    pub(crate) fn start(
        events: Arc<Recorder>,
        dialect: Dialect,
        conn: Connection,
        config: &crate::config::ClientConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let (lease, interval) = (config.lease, config.get_renew_interval());
        let entries = Arc::new(Mutex::new(HashMap::default()));
        let check_now = Arc::new(Notify::new());
        let replan = Arc::new(Notify::new());
        let schedule = Schedule {
            lease,
            interval,
            min_replicas: config.min_replicas,
            recheck: config.response_timeout / 2,
        };
        let task = runtime.spawn(run(
            Arc::downgrade(&entries),
            Signals {
                check_now: Arc::downgrade(&check_now),
                replan: Arc::downgrade(&replan),
            },
            dialect,
            conn.clone(),
            schedule,
            Arc::clone(&events),
        ));
        Self {
            entries,
            check_now,
            replan,
            schedule,
            task: task.abort_handle(),
            events,
            conn,
        }
    }

    /// Stop the renewal task (the client shut down; every hold was drained).
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// Register one hold; returns the state its guard shares.
    pub(crate) fn register(&self, hold: NewHold<'_>) -> Arc<HeldState> {
        let mut entries = locked(&self.entries);
        let key = Key {
            lock: Arc::clone(hold.lock),
            owner: hold.owner.clone(),
        };
        // One lookup (the key hashed once) for the check and the insert.
        let mut slot = entries.entry(key);
        if let Slot::Occupied(held) = &mut slot {
            let entry = held.get_mut();
            let stale = hold.kind == HoldKind::Fresh
                || entry.state.status().lost
                || (hold.token.is_some() && entry.token != hold.token);
            if !stale {
                entry.holds += 1;
                entry.renewed += usize::from(hold.renew);
                // The scripts never shorten a lease (PEXPIRE ... GT): the
                // lock lasts until the latest end any hold of it was given.
                entry.state.extend(hold.expires);
                if let Some((sent_at, ttl)) = hold.found_ttl {
                    entry.found_ttl(&self.schedule, sent_at, Some(ttl));
                    if entry.early.is_some() {
                        self.replan.notify_one();
                    }
                }
                return Arc::clone(&entry.state);
            }
            // An older acquisition of this owner is over (lost, or replaced
            // by this one): retire its guards before they act on the new hold.
            let owner = hold.owner.as_str();
            entry
                .state
                .mark_lost(entry.lock.name(), owner, LostCause::Retired);
            entry.ended(owner, &self.events);
        }
        let state = HeldState::new(hold.expires, Arc::clone(&self.events));
        self.events.record(Event::HoldStarted {
            lock: hold.lock.name(),
        });
        let entry = Entry {
            lock: Arc::clone(hold.lock),
            token: hold.token,
            holds: 1,
            renewed: usize::from(hold.renew),
            state: Arc::clone(&state),
            since: Instant::now(),
            server_changes: self.conn.server_changes(),
            revoked: false,
            failing: false,
            short: None,
            early: None,
        };
        let mut entry = entry;
        if let Some((sent_at, ttl)) = hold.found_ttl {
            entry.found_ttl(&self.schedule, sent_at, Some(ttl));
            if entry.early.is_some() {
                self.replan.notify_one();
            }
        }
        match slot {
            // The retired entry's place (its key is equal to this one's).
            Slot::Occupied(mut held) => {
                held.insert(entry);
            }
            Slot::Vacant(free) => {
                free.insert(entry);
            }
        }
        state
    }

    /// One hold of `state` ends; the entry goes when none is left. An entry
    /// replaced by a newer acquisition is left alone.
    pub(crate) fn unregister(
        &self,
        lock: &Arc<ProtocolLock>,
        owner: &Owner,
        state: &Arc<HeldState>,
        renew: bool,
    ) {
        let mut entries = locked(&self.entries);
        let key = Key {
            lock: Arc::clone(lock),
            owner: owner.clone(),
        };
        // One lookup (the key hashed once) for the update and the removal.
        let Slot::Occupied(mut held) = entries.entry(key) else {
            return;
        };
        if !Arc::ptr_eq(&held.get().state, state) {
            return;
        }
        let entry = held.get_mut();
        entry.holds = entry.holds.saturating_sub(1);
        if renew {
            entry.renewed = entry.renewed.saturating_sub(1);
        }
        if entry.holds == 0 {
            entry.ended(owner.as_str(), &self.events);
            held.remove();
        }
    }

    /// What the revocation listener reports to: see [`Revocations`].
    pub(crate) fn revocations(&self) -> Revocations {
        Revocations {
            entries: Arc::downgrade(&self.entries),
            check_now: Arc::downgrade(&self.check_now),
        }
    }

    /// Take every hold out of the registry, marking each lost (so that no
    /// guard releases or renews it any more), for the caller to release.
    pub(crate) fn drain(&self) -> Vec<Registered> {
        locked(&self.entries)
            .drain()
            .map(|(Key { owner, .. }, entry)| {
                // Silently: the caller releases it.
                entry.ended(owner.as_str(), &self.events);
                entry.state.mark_lost_silently();
                Registered {
                    lock: entry.lock,
                    owner,
                    token: entry.token,
                    holds: entry.holds,
                }
            })
            .collect()
    }
}

impl Drop for Watchdog {
    /// The client is gone (no guard is left to end them): the holds still
    /// registered (forgotten ones are not) end here for the counts and
    /// gauges.
    fn drop(&mut self) {
        for (key, entry) in locked(&self.entries).drain() {
            entry.ended(key.owner(), &self.events);
        }
    }
}

impl Watchdog {
    /// Every hold in the registry, ordered by lock name then owner.
    pub(crate) fn snapshot(&self) -> Vec<HeldLock> {
        let mut held: Vec<HeldLock> = locked(&self.entries)
            .iter()
            .map(|(key, entry)| HeldLock {
                name: entry.lock.name().to_owned(),
                owner: key.owner().to_owned(),
                holds: entry.holds,
                held_for: entry.since.elapsed(),
                token: entry.token,
                lost: entry.state.status().lost,
            })
            .collect();
        held.sort_by(|a, b| (&a.name, &a.owner).cmp(&(&b.name, &b.owner)));
        held
    }
}

/// The shortest time between two checks of every hold.
const CHECK_GAP: Duration = Duration::from_millis(50);

/// The watchdog's settings: the lease it renews to, how often, and the
/// replicas a renewal must reach before it is believed.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    lease: Duration,
    interval: Duration,
    min_replicas: Option<(u32, Duration)>,
    /// After a check that got no answer, the next one: half a response
    /// timeout (at most the renewals' retry delay), so that a revocation
    /// it was to act on is learnt soon after the server answers again.
    recheck: Duration,
}

impl Schedule {
    /// Whether a hold's key found with `ttl` left has less than this
    /// client's renewals leave it (a renewal every `interval` keeps it
    /// above `lease - interval`): another client set it shorter.
    fn is_short(&self, ttl: Duration) -> bool {
        ttl < self.lease.saturating_sub(self.interval)
    }
}

/// What wakes the task besides its timers.
struct Signals {
    /// An immediate check of every hold (a revocation message).
    check_now: Weak<Notify>,
    /// A hold registered with an early renewal: plan again.
    replan: Weak<Notify>,
}

/// What a round of the task does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Renew every watchdog-leased hold.
    Renewal,
    /// Renew the holds whose early renewal is due (see [`Entry::early`]).
    Early,
    /// Check every hold without extending it.
    Check,
    /// Nothing: plan again.
    Replan,
}

/// One hold in a round of renewals or checks: its key, token, state and lock.
type Batched = (Key, Option<u64>, Arc<HeldState>, Arc<ProtocolLock>);

async fn run(
    entries: Weak<Entries>,
    signals: Signals,
    dialect: Dialect,
    conn: Connection,
    schedule: Schedule,
    events: Arc<Recorder>,
) {
    let Schedule {
        lease,
        interval,
        min_replicas,
        recheck: recheck_delay,
    } = schedule;
    // After a failed renewal, retry sooner: the lease keeps running out.
    let retry = crate::retry::renewal_retry_delay(interval);
    // Renewals keep their own schedule: checks (revocation messages, which
    // anyone may publish, and pub/sub reconnects) never push them back.
    let mut next_renewal = Instant::now() + interval;
    // Checks come at most every CHECK_GAP: a flood of forged revocation
    // messages costs Redis one call per client per CHECK_GAP.
    let mut last_check: Option<Instant> = None;
    let mut recheck: Option<Instant> = None;
    loop {
        let (Some(kick), Some(replan), Some(registry)) = (
            signals.check_now.upgrade(),
            signals.replan.upgrade(),
            entries.upgrade(),
        ) else {
            return;
        };
        // The soonest early renewal due (a hold whose key was found with a
        // short TTL: see `Entry::early`).
        let early_at = locked(&registry)
            .values()
            .filter(|entry| entry.renewed > 0 && !entry.state.status().lost)
            .filter_map(|entry| entry.early)
            .min();
        drop(registry);
        let early_due = async {
            match early_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // A check renews nothing: explicit leases must not be extended.
        // A renewal that is due goes first: checks never starve renewals.
        // A check that got no answer is made again (a revocation it was
        // to act on must not be forgotten: an explicit lease is never
        // renewed, so nothing else would find the hold gone).
        let recheck_due = async {
            match recheck {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let round = tokio::select! {
            biased;
            () = tokio::time::sleep_until(next_renewal) => Round::Renewal,
            () = kick.notified() => Round::Check,
            () = recheck_due => Round::Check,
            () = early_due => Round::Early,
            () = replan.notified() => Round::Replan,
        };
        if round == Round::Replan {
            continue;
        }
        let check_only = round == Round::Check;
        if check_only {
            recheck = None;
        }
        drop((kick, replan));
        if check_only {
            if let Some(due) = last_check.map(|at| at + CHECK_GAP) {
                tokio::time::sleep_until(due).await;
            }
            last_check = Some(Instant::now());
        }
        let Some(entries) = entries.upgrade() else {
            return;
        };
        if round == Round::Renewal {
            next_renewal = Instant::now() + interval;
        }
        let now = Instant::now();
        let mut batch: Vec<Batched> = locked(&entries)
            .iter()
            // A hold known lost is never renewed: its lock must expire.
            .filter(|(_, entry)| {
                !entry.state.status().lost
                    && match round {
                        Round::Check => true,
                        Round::Renewal => entry.renewed > 0,
                        Round::Early => {
                            entry.renewed > 0 && entry.early.is_some_and(|at| at <= now)
                        }
                        Round::Replan => false,
                    }
            })
            .map(|(key, entry)| {
                let lock = Arc::clone(&entry.lock);
                (key.clone(), entry.token, Arc::clone(&entry.state), lock)
            })
            .collect();
        // One script call may only touch keys of one group (one hash slot
        // on a cluster, where other calls fail with CROSSSLOT).
        batch.sort_by_key(|(key, ..)| conn.key_group(key.lock_key()));
        let groups = batch.chunk_by(|(a, ..), (b, ..)| {
            conn.key_group(a.lock_key()) == conn.key_group(b.lock_key())
        });
        // Every batch is sent at once and each answer is handled as it
        // comes: a node that does not answer costs its own batches one
        // response timeout each, in parallel, and never delays the batches
        // of other nodes (the connection multiplexes them).
        let renewal = (!check_only).then_some(lease);
        let mut calls: FuturesUnordered<_> = groups
            .flat_map(|group| group.chunks(RENEW_BATCH))
            .map(|chunk| {
                let dialect = &dialect;
                let conn = &conn;
                async move {
                    let holds: Vec<HoldRef<'_>> = chunk
                        .iter()
                        .map(|(key, token, ..)| (key.lock_key(), key.owner(), *token))
                        .collect();
                    let sent_at = Instant::now();
                    let mut result = dialect
                        .renew_reporting(conn, &holds, renewal)
                        .await
                        .map(|renewed| (renewed.found, renewed.ttls));
                    // Read after the reply (a reload after NOSCRIPT on a new
                    // server ran after the change it reports).
                    let changes = conn.server_changes();
                    // With min_replicas, a renewal is relied on only once the
                    // replicas have it: a failover to one of them must not
                    // lose a lease this client believes in. Not acknowledged
                    // in time counts as a failed renewal (retried soon; the
                    // hold is lost once the lease last confirmed ran out).
                    // Each renewed hold is proven on the server the WAIT
                    // goes to, and believed no longer than that server keeps
                    // it (`held_until`).
                    let mut held_until = None;
                    if let (Ok(_), Some((wanted, timeout)), Some(_), Some(first)) =
                        (&result, min_replicas, renewal, chunk.first())
                    {
                        let (key, _, _, lock) = first;
                        let proofs: Vec<_> = chunk
                            .iter()
                            .map(|(key, token, _, lock)| lock.hold_proof(key.owner(), *token))
                            .collect();
                        let synced = conn
                            .sync_replicas(lock.name(), key.lock_key(), wanted, timeout, &proofs)
                            .await;
                        // Acknowledged by the replicas of another server than
                        // the one renewed (a failover in between): counts as
                        // none. A hold that server does not have is judged on
                        // its own below (it may just have been released).
                        let synced = synced.map(|synced| {
                            if conn.server_changes() == changes {
                                held_until = Some(synced.held_until);
                                synced.acked
                            } else {
                                0
                            }
                        });
                        match synced {
                            Ok(acked) if acked >= wanted => {}
                            Ok(acked) => {
                                result = Err(crate::error::Error::ReplicasNotSynced {
                                    name: lock.name().to_owned(),
                                    what: "renewal",
                                    wanted,
                                    acked,
                                    timeout,
                                })
                            }
                            Err(err) => result = Err(err),
                        }
                    }
                    (chunk, sent_at, result, held_until)
                }
            })
            .collect();
        while let Some((chunk, sent_at, result, held_until)) = calls.next().await {
            let mut map = locked(&entries);
            match result {
                Ok((found, ttls)) => {
                    // Read once per answer: it survived (or not) whatever
                    // change came before it.
                    let changes = conn.server_changes();
                    for (i, ((key, _, state, _), found)) in chunk.iter().zip(found).enumerate() {
                        // Released (or replaced) meanwhile: the answer no longer matters.
                        let Some(entry) = map.get_mut(key).filter(|e| Arc::ptr_eq(&e.state, state))
                        else {
                            continue;
                        };
                        if found == Renewal::Unsure {
                            // Neither renewed nor lost (the hold's key on
                            // another node for now): as a failed call for
                            // this hold alone.
                            if check_only {
                                recheck = Some(Instant::now() + recheck_delay.min(retry));
                            } else {
                                next_renewal = next_renewal.min(Instant::now() + retry);
                                entry.retry_early();
                            }
                            events.record(Event::RenewalFailed {
                                lock: entry.lock.name(),
                                owner: key.owner(),
                                error: &UNSURE,
                            });
                            if entry.failed(key.owner(), check_only, &events) {
                                map.remove(key);
                            }
                            continue;
                        }
                        if found != Renewal::Held {
                            let cause = if entry.revoked {
                                LostCause::ForceUnlocked
                            } else if changes != entry.server_changes {
                                LostCause::Failover
                            } else if found == Renewal::TakenOver {
                                LostCause::TakenOver
                            } else {
                                LostCause::Expired
                            };
                            entry.state.mark_lost(entry.lock.name(), key.owner(), cause);
                            entry.ended(key.owner(), &events);
                            map.remove(key);
                        } else {
                            entry.server_changes = changes;
                            entry.revoked = false;
                            // The key's TTL as found (a read-write lock's,
                            // under redisson): renewed early while short.
                            entry.found_ttl(&schedule, sent_at, ttls.get(i).copied().flatten());
                            if !check_only {
                                let until = sent_at + lease;
                                match held_until.as_ref().map(|h| h.get(i).copied().flatten()) {
                                    // No replicas to wait for.
                                    None => entry.state.extend(until),
                                    Some(Some(held)) => entry.state.extend(held.min(until)),
                                    // Renewed, but the server the replicas
                                    // acknowledged does not have it: not
                                    // believed; lost once the acknowledged
                                    // lease ran out.
                                    Some(None) => {
                                        entry.failing = true;
                                        if Instant::now() >= entry.state.status().expires {
                                            entry.state.mark_lost(
                                                entry.lock.name(),
                                                key.owner(),
                                                LostCause::RenewalsFailed,
                                            );
                                            entry.ended(key.owner(), &events);
                                            map.remove(key);
                                        }
                                        continue;
                                    }
                                }
                                entry.failing = false;
                                events.record(Event::Renewed {
                                    lock: entry.lock.name(),
                                });
                            }
                        }
                    }
                }
                Err(err) => {
                    if check_only {
                        recheck = Some(Instant::now() + recheck_delay.min(retry));
                    } else {
                        next_renewal = next_renewal.min(Instant::now() + retry);
                    }
                    for (key, _, state, _) in chunk {
                        let Some(entry) = map.get_mut(key).filter(|e| Arc::ptr_eq(&e.state, state))
                        else {
                            continue;
                        };
                        if !check_only {
                            entry.retry_early();
                        }
                        events.record(Event::RenewalFailed {
                            lock: entry.lock.name(),
                            owner: key.owner(),
                            error: &err,
                        });
                        if entry.failed(key.owner(), check_only, &events) {
                            map.remove(key);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meters::LockLabel;

    fn state(expires_in: Duration) -> Arc<HeldState> {
        let events = Recorder::new("native", LockLabel::Off, false, "test");
        HeldState::new(Instant::now() + expires_in, events)
    }

    /// Whether `lost` has resolved after the runtime ran everything ready.
    async fn resolved(lost: &mut std::pin::Pin<Box<impl Future<Output = ()>>>) -> bool {
        tokio::time::timeout(Duration::from_millis(1), lost.as_mut())
            .await
            .is_ok()
    }

    #[tokio::test(start_paused = true)]
    async fn lost_resolves_on_a_loss_an_end_or_the_lease_and_not_before() {
        // Pending while held; resolves when marked lost.
        let held = state(Duration::from_secs(30));
        let signal = held.signal();
        let mut lost = Box::pin(async move { signal.lost().await });
        assert!(!resolved(&mut lost).await, "held: pending");
        held.extend(Instant::now() + Duration::from_secs(60));
        assert!(!resolved(&mut lost).await, "a renewal does not resolve it");
        held.mark_lost("lock", "owner", LostCause::TakenOver);
        assert!(resolved(&mut lost).await, "lost: resolves");

        // Lost before the wait began: resolves at once.
        let signal = held.signal();
        let mut late = Box::pin(async move { signal.lost().await });
        assert!(resolved(&mut late).await, "lost before the wait");

        // Every holder of the state gone (the hold is over): resolves.
        let held = state(Duration::from_secs(30));
        let signal = held.signal();
        let mut ended = Box::pin(async move { signal.lost().await });
        assert!(!resolved(&mut ended).await);
        drop(held);
        assert!(resolved(&mut ended).await, "the hold's state dropped");

        // The confirmed lease runs out: resolves then, not before.
        let held = state(Duration::from_secs(30));
        let signal = held.signal();
        let mut expiring = Box::pin(async move { signal.lost().await });
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(!resolved(&mut expiring).await, "within the lease");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(resolved(&mut expiring).await, "past the lease");
        drop(held);
    }
}
