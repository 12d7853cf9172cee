//! One attempt, and undoing it exactly once when nobody takes its reply.
//!
//! An attempt of a fresh owner (the common case) runs in the caller's own
//! future: dropped while the script is in flight, a [`DisarmOnDrop`] undoes
//! whatever the attempt may have done, from the background, as after a
//! lost reply. That undo is exact for a fresh owner: nobody else acquires
//! or releases for it (see [`Acquisition::undo`]).
//!
//! An attempt of an explicit owner (a re-entry through a shared owner) runs
//! from a task of its own instead, so that a caller dropped while it runs
//! cannot lose its effect: whichever side sees the reply last undoes it,
//! knowing what the script did. The sender undoes when the caller is
//! already gone; the caller's [`DisarmOnDrop`] undoes a reply that arrived
//! but was never read. (Under `redisson` the undo of an unknown outcome
//! reads the owner's hold count, which another guard of a shared owner
//! may change meanwhile: the task keeps that undo for lost replies only.)

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::disarm::DisarmOnDrop;
use crate::error::{Error, Result};
use crate::events::{self, Event, LostCause, Progress};
use crate::hold::{ArmedHold, Granted, Hold, Lease, LockShared, new_request_id};
use crate::owner::{Owner, OwnerTurn};
use crate::protocol::{Acquire, AcquireArgs, Renewal, Scope};
use crate::watchdog::HoldKind;

/// One acquisition in progress: everything an attempt, its undo and the
/// hold it makes need.
pub(super) struct Acquisition {
    pub(super) shared: Arc<LockShared>,
    pub(super) owner: Owner,
    pub(super) lease: Lease,
    /// The wait's bound, when it has one.
    pub(super) wait: Option<Duration>,
    /// The owner's hold count before this acquisition.
    pub(super) base: u32,
    /// An explicit owner's turn, held while anything of this acquisition
    /// (a background attempt, its undo) can still change the hold count.
    /// `None` for a fresh owner.
    pub(super) turn: Option<OwnerTurn>,
    /// This acquisition's secret: sent with its queue entry, it proves a
    /// grant message genuine (native).
    pub(super) nonce: String,
    /// What a grant message for it is signed with: the nonce, and for a
    /// native semaphore's request `NONCE:wWEIGHT` (a grant made at the
    /// weight of a record another program wrote over is not trusted: the
    /// next attempt corrects the hold, `sem_acquire.lua`).
    pub(super) grant_key: String,
    /// What it weighs (a native semaphore's permits; 1 otherwise).
    pub(super) weight: u32,
    /// What its steps report (queued, handed over) for its record.
    pub(super) progress: Arc<Progress>,
    /// [`Connection::server_changes`](crate::transport::Connection::server_changes)
    /// when the last attempt's reply came: the server that made a grant (by
    /// that reply, or by the handoff its queue entry led to) is the one of
    /// that moment (read after the reply: a script reloaded after
    /// `NOSCRIPT` on a new server runs after the change it reports). See
    /// [`acquire`](super::acquire)'s replica check.
    pub(super) sent_changes: AtomicU64,
}

/// The caller's end of an attempt in flight.
type PendingReply = DisarmOnDrop<(oneshot::Receiver<Result<Acquire>>, Arc<Acquisition>)>;

impl Acquisition {
    pub(super) fn name(&self) -> &str {
        self.shared.name()
    }

    /// Send one attempt (`queue`: wait in line when busy).
    pub(super) async fn send(self: &Arc<Self>, queue: bool) -> Result<Acquire> {
        if self.turn.is_none() {
            return self.send_inline(queue).await;
        }
        let (tx, rx) = oneshot::channel();
        let acquisition = Arc::clone(self);
        self.shared.core().spawn_cleanup(async move {
            let reply = acquisition.run_script(queue).await;
            acquisition.record_attempt();
            // The caller is gone: undo what the attempt did.
            if let Err(reply) = tx.send(reply) {
                acquisition.undo(&reply).await;
            }
        });
        let mut pending: PendingReply =
            DisarmOnDrop::new((rx, Arc::clone(self)), |(rx, acquisition)| {
                // After close(), a send fails (and the sender undoes) or has
                // already happened (and the reply is here to undo).
                rx.close();
                if let Ok(reply) = rx.try_recv() {
                    let acquisition = Arc::clone(acquisition);
                    let core = Arc::clone(acquisition.shared.core());
                    core.spawn_cleanup(async move { acquisition.undo(&reply).await });
                }
            });
        let reply = (&mut pending.get_mut().0).await;
        // Taken: nothing to undo on drop.
        pending.disarm();
        let changes = self.shared.conn().server_changes();
        self.sent_changes.store(changes, Ordering::SeqCst);
        reply.map_err(|_| Error::Closed)?
    }

    /// [`send`](Self::send) for a fresh owner: the script runs in this
    /// future, with no task of its own. Dropped while the script is in
    /// flight, its outcome is unknown: the undo of a lost reply runs from
    /// the background (leave the line; release the hold the attempt may
    /// have made, which for a fresh owner can only be this attempt's).
    async fn send_inline(self: &Arc<Self>, queue: bool) -> Result<Acquire> {
        let mut in_flight = DisarmOnDrop::new(Arc::clone(self), |acquisition| {
            // Counted as the task of a shared owner's attempt counts it:
            // the script was sent (or about to be), load on Redis all the
            // same (`Statistics::attempts`).
            acquisition.record_attempt();
            acquisition.undo_unknown_outcome();
        });
        let reply = self.run_script(queue).await;
        // The reply is here: whatever it says is acted on by the caller.
        in_flight.disarm();
        self.record_attempt();
        let changes = self.shared.conn().server_changes();
        self.sent_changes.store(changes, Ordering::SeqCst);
        reply
    }

    /// The attempt's script, for both ways of sending it.
    async fn run_script(&self, queue: bool) -> Result<Acquire> {
        let args = AcquireArgs {
            owner: self.owner.as_str(),
            lease: self.lease.duration(),
            wait: self.wait,
            queue,
            base: self.base,
            nonce: &self.nonce,
            weight: self.weight,
        };
        let shared = &self.shared;
        shared.protocol().acquire(shared.conn(), &args).await
    }

    /// One attempt sent (`Statistics::attempts`).
    fn record_attempt(&self) {
        let shared = &self.shared;
        shared.core().events().record(Event::Attempted {
            lock: shared.name(),
        });
    }

    /// Undo an attempt whose caller went away before seeing `reply`.
    pub(super) async fn undo(&self, reply: &Result<Acquire>) {
        let shared = &self.shared;
        let owner = &self.owner;
        let lease = self.lease.duration();
        match reply {
            Ok(Acquire::Acquired { token, .. } | Acquire::Reentered { token, .. }) => {
                events::record(Event::GrantUndone {
                    lock: shared.name(),
                    owner,
                });
                if let Err(err) = shared.release(owner, lease, *token).await {
                    events::record(Event::CleanupFailed {
                        lock: shared.name(),
                        owner,
                        what: "releasing a cancelled grant",
                        error: &err,
                    });
                }
            }
            Ok(Acquire::Queued { .. }) => shared.give_up(owner, self.wait, &self.nonce).await,
            Ok(Acquire::Busy) => {}
            Err(_) => {
                // Unknown outcome: leave the queue, and release the hold the
                // attempt may have added.
                shared.give_up(owner, self.wait, &self.nonce).await;
                if shared.protocol().records_acquisitions() {
                    // Native: the hold is this acquisition's if the lock
                    // names its secret (a fresh grant, a handoff, a
                    // re-entry); the release changes nothing otherwise. Exact
                    // even when releases of the owner's other holds came in
                    // between (they lower the count, never the secret).
                    self.release_undone(&Scope {
                        token: None,
                        nonce: Some(self.nonce.as_str()),
                    })
                    .await;
                    return;
                }
                // Redisson: the count above its base is the attempt's hold.
                // Read within the retry policy, as the release is: the fault
                // that lost the reply often fails the next call too. Exact
                // for a fresh owner (base 0, no other guard). For a shared
                // owner, a release of another of its holds that lands
                // between the attempt and this read hides it: one hold too
                // many, which ends with the lease once the owner's last
                // guard is gone (docs/reliability.md); never one too few.
                let count = shared
                    .core()
                    .retry()
                    .run(|| shared.protocol().hold_count(shared.conn(), owner.as_str()))
                    .await;
                match count {
                    Ok(count) if count > self.base => {
                        self.release_undone(&Scope::default()).await;
                    }
                    Ok(_) => {}
                    Err(err) => events::record(Event::CleanupFailed {
                        lock: shared.name(),
                        owner,
                        what: "reading the hold count after a lost reply",
                        error: &err,
                    }),
                }
            }
        }
    }

    /// Release, within the retry policy, the hold an attempt whose reply
    /// was lost may have made (`scope` says which); recorded when it fails.
    async fn release_undone(&self, scope: &Scope<'_>) {
        let shared = &self.shared;
        let released = shared
            .release_as_request(&self.owner, self.lease.duration(), &new_request_id(), scope)
            .await;
        if let Err(err) = released {
            events::record(Event::CleanupFailed {
                lock: shared.name(),
                owner: &self.owner,
                what: "releasing the hold of an attempt whose reply was lost",
                error: &err,
            });
        }
    }

    /// The last attempt's outcome is unknown (its reply was lost) and no
    /// attempt will follow to reconcile it: undo whatever it may have done,
    /// from the background.
    pub(super) fn undo_unknown_outcome(self: &Arc<Self>) {
        let acquisition = Arc::clone(self);
        let core = Arc::clone(self.shared.core());
        core.spawn_cleanup(async move { acquisition.undo(&Err(Error::Closed)).await });
    }

    /// The hold of a grant confirmed by a script reply sent at `sent_at`
    /// (which found the lock key with `key_ttl` left, when it says).
    pub(super) fn granted(
        &self,
        sent_at: Instant,
        token: Option<u64>,
        kind: HoldKind,
        key_ttl: Option<Duration>,
    ) -> ArmedHold {
        events::record(Event::Granted {
            lock: self.name(),
            owner: &self.owner,
            token,
            reentry: kind == HoldKind::Reentry,
        });
        let expires = sent_at + self.lease.duration();
        Hold::register(
            Arc::clone(&self.shared),
            self.owner.clone(),
            self.lease,
            Granted {
                token,
                expires,
                kind,
                claim: false,
                found_ttl: key_ttl.map(|ttl| (sent_at, ttl)),
            },
        )
    }

    /// A hold just registered from a grant made after the wake-up numbered
    /// `mark` (see [`WakeupRouter::revoked_since`](crate::wakeup::WakeupRouter::revoked_since)):
    /// when a revocation of this client's holds may have arrived since, the
    /// grant may have been force-unlocked before its hold was registered
    /// (the watchdog's check of the revocation would then have missed it),
    /// so the server is asked once. A revocation that comes with or after a
    /// grant wins over it. `None` (the hold given up) when the server says
    /// it is not this acquisition's: the caller waits on (or reports "not
    /// acquired"). When the check gets no answer, the hold is kept and the
    /// watchdog checks it (the path of a revocation that arrives after a
    /// hold was registered).
    pub(super) async fn confirm_unrevoked(&self, hold: ArmedHold, mark: u64) -> Option<ArmedHold> {
        let core = self.shared.core();
        if !core.wakeups().revoked_since(mark) {
            return Some(hold);
        }
        let held = hold.get();
        let check = [(
            self.shared.protocol().lock_key(),
            self.owner.as_str(),
            held.token(),
        )];
        let found = core.dialect().renew(self.shared.conn(), &check, None).await;
        events::record(Event::GrantRechecked {
            lock: self.name(),
            owner: &self.owner,
            held: matches!(found.as_deref(), Ok([Renewal::Held])),
        });
        match found.as_deref() {
            Ok([Renewal::Held]) => Some(hold),
            // Not ours any more: nothing to release.
            Ok(found) if !found.contains(&Renewal::Unsure) => {
                held.state()
                    .mark_lost(self.name(), self.owner.as_str(), LostCause::ForceUnlocked);
                None
            }
            // Unknown (the call failed, or the hold's key is on another
            // node for now): keep the hold and let the watchdog check it at once,
            // as for a revocation that came after the registration (its
            // `lost()` resolves if the check finds it gone). Releasing it
            // here instead would race the next attempt, which re-claims
            // the same grant with the same secret: the release could then
            // delete the grant under a guard that believes it.
            Ok(_) | Err(_) => {
                core.watchdog()
                    .revocations()
                    .revoked(Some(self.shared.protocol().lock_key()));
                Some(hold)
            }
        }
    }

    /// The hold of a lock handed over by a release (native): the new holder
    /// proceeds at once, believing the grant no longer than `expires` (when
    /// the server may let it expire), and claims it (extends it from the
    /// short handoff grant to its own lease) in the background.
    pub(super) fn handed_over(&self, token: u64, expires: Instant) -> ArmedHold {
        events::record(Event::HandedOver {
            lock: self.name(),
            owner: &self.owner,
            token,
        });
        Hold::register(
            Arc::clone(&self.shared),
            self.owner.clone(),
            self.lease,
            Granted {
                token: Some(token),
                expires,
                kind: HoldKind::Fresh,
                claim: true,
                found_ttl: None,
            },
        )
    }
}

/// One attempt that never queues: the hold when granted, `None` when busy.
/// `reenter_only`: a fresh grant (the hold to re-enter was lost) is
/// released again and reported as `None`.
pub(super) async fn once(
    acquisition: &Arc<Acquisition>,
    reenter_only: bool,
) -> Result<Option<ArmedHold>> {
    let mark = acquisition.shared.core().wakeups().mark();
    let sent_at = Instant::now();
    let reply = match acquisition.send(false).await {
        Err(err) if err.is_connection() => {
            acquisition.undo_unknown_outcome();
            return Err(err);
        }
        reply => reply?,
    };
    match reply {
        Acquire::Acquired { token, .. } if reenter_only => {
            // The hold to re-enter was lost; this is a new grant nobody asked for.
            let shared = &acquisition.shared;
            let _ = shared
                .release(&acquisition.owner, acquisition.lease.duration(), token)
                .await;
            events::record(Event::ReentryFoundLost {
                lock: acquisition.name(),
                owner: &acquisition.owner,
            });
            Ok(None)
        }
        Acquire::Acquired { token, key_ttl } => {
            let hold = acquisition.granted(sent_at, token, HoldKind::Fresh, key_ttl);
            Ok(acquisition.confirm_unrevoked(hold, mark).await)
        }
        Acquire::Reentered { token, key_ttl, .. } => {
            let hold = acquisition.granted(sent_at, token, HoldKind::Reentry, key_ttl);
            Ok(acquisition.confirm_unrevoked(hold, mark).await)
        }
        Acquire::Busy | Acquire::Queued { .. } => Ok(None),
    }
}
