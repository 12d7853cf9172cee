//! What a lock handle and its guards share: the lock on its client, and one
//! registered hold with its release, give-up and claim, each retried within
//! the client's retry policy.
//!
//! The acquire engine (`acquire/`) makes holds; guards (`guard.rs`) own
//! them. Neither reaches into the client's fields: they go through the
//! accessors of [`LockShared`] and [`ClientCore`].

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::core::ClientCore;
use crate::disarm::DisarmOnDrop;
use crate::error::{Error, Result};
use crate::events::{self, Event, LostCause};
use crate::owner::Owner;
use crate::protocol::{ProtocolLock, Release, Scope};
use crate::transport::Connection;
use crate::watchdog::{HeldState, HoldKind, NewHold};

/// One lock on one client: what a handle and its guards share.
pub(crate) struct LockShared {
    core: Arc<ClientCore>,
    lock: Arc<ProtocolLock>,
    /// The last acquisition through this handle had to wait: the next one
    /// subscribes to its wake-up channel before its first attempt (which
    /// saves the re-check a subscription made after queueing needs).
    contended: AtomicBool,
}

impl LockShared {
    pub(crate) fn new(core: Arc<ClientCore>, lock: Arc<ProtocolLock>) -> Arc<Self> {
        Arc::new(Self {
            core,
            lock,
            contended: AtomicBool::new(false),
        })
    }

    /// Whether the last acquisition through this handle had to wait.
    pub(crate) fn was_contended(&self) -> bool {
        self.contended.load(Ordering::Relaxed)
    }

    pub(crate) fn set_contended(&self, contended: bool) {
        self.contended.store(contended, Ordering::Relaxed);
    }

    pub(crate) fn core(&self) -> &Arc<ClientCore> {
        &self.core
    }

    /// The lock under this client's protocol.
    pub(crate) fn protocol(&self) -> &ProtocolLock {
        &self.lock
    }

    pub(crate) fn name(&self) -> &str {
        self.lock.name()
    }

    pub(crate) fn conn(&self) -> &Connection {
        self.core.conn()
    }

    /// With [`min_replicas`](crate::ClientConfig::min_replicas) set: wait
    /// until that many replicas acknowledged what this client wrote so far
    /// (`what`: the acquisition, claim or release just made). `hold`: the
    /// hold (owner, token) the acknowledgement must prove on the server it
    /// goes to (see [`HoldProof`](crate::transport::HoldProof)); the answer
    /// is then the local instant before which that server keeps it, to
    /// bound what the client believes. `Ok(None)` without `min_replicas`
    /// or without a hold to prove.
    ///
    /// # Errors
    /// [`Error::ReplicasNotSynced`] when fewer acknowledged within the
    /// timeout, or the server acknowledged does not hold `hold` (`acked`
    /// 0); [`Error::Connection`] when the master did not answer.
    pub(crate) async fn sync_replicas(
        &self,
        what: &'static str,
        hold: Option<(&Owner, Option<u64>)>,
    ) -> Result<Option<Instant>> {
        let Some((wanted, timeout)) = self.core.config().min_replicas else {
            return Ok(None);
        };
        let proofs: Vec<_> = hold
            .map(|(owner, token)| self.lock.hold_proof(owner.as_str(), token))
            .into_iter()
            .collect();
        let synced = self
            .conn()
            .sync_replicas(self.name(), self.lock.lock_key(), wanted, timeout, &proofs)
            .await?;
        let held_until = synced.held_until.first().copied();
        let acked = match held_until {
            Some(None) => 0,
            _ => synced.acked,
        };
        if acked >= wanted {
            return Ok(held_until.flatten());
        }
        Err(Error::ReplicasNotSynced {
            name: self.name().to_owned(),
            what,
            wanted,
            acked,
            timeout,
        })
    }

    /// Release one hold of `owner` (under native, only of the acquisition
    /// with `token`) under a fresh request id.
    pub(crate) async fn release(
        &self,
        owner: &Owner,
        lease: Duration,
        token: Option<u64>,
    ) -> Result<Release> {
        let scope = Scope { token, nonce: None };
        self.release_as_request(owner, lease, &new_request_id(), &scope)
            .await
    }

    /// Release one hold under `request`, retrying within the retry policy: a
    /// second call with the same id answers what the first did and changes
    /// nothing (the release cache).
    pub(crate) async fn release_as_request(
        &self,
        owner: &Owner,
        lease: Duration,
        request: &str,
        scope: &Scope<'_>,
    ) -> Result<Release> {
        self.send_release(owner, lease, request, scope, Sending::First)
            .await
    }

    /// [`release_as_request`](Self::release_as_request), sent for the first
    /// time under `request` or again (a release whose first sending was
    /// dropped). When it was sent once, by its first sending, and its reply
    /// read, no other sending of it exists: its cached answer is deleted
    /// (in the background, as Redisson deletes its own after an unlock).
    /// Otherwise an earlier sending may still reach the server (on a
    /// connection given up as stalled, say), and the answer is left for
    /// its TTL, longer than any sending of it can come.
    async fn send_release(
        &self,
        owner: &Owner,
        lease: Duration,
        request: &str,
        scope: &Scope<'_>,
        sending: Sending,
    ) -> Result<Release> {
        let mut sent = 0_u32;
        let reply = self
            .core
            .retry()
            .run(|| {
                sent += 1;
                self.lock
                    .release(self.conn(), owner.as_str(), lease, request, scope)
            })
            .await;
        if let Ok(answer) = &reply {
            if sent == 1 && sending == Sending::First && self.lock.release_cached(answer, scope) {
                self.forget_release(request);
            }
        }
        reply
    }

    /// Delete the cached answer of release `request`, from the background;
    /// a failure only leaves it to its TTL. Not on a Redis Cluster: its
    /// client library sends a call again by itself after a timeout or a
    /// dropped connection, so a reply read after one sending of ours may
    /// follow another that can still reach the server; the answer is left
    /// for its TTL there.
    fn forget_release(&self, request: &str) {
        if self.conn().is_cluster() {
            return;
        }
        let (core, lock) = (Arc::clone(&self.core), Arc::clone(&self.lock));
        let key = lock.release_cache_key(request);
        self.core.spawn_cleanup(async move {
            let _: Result<i64> = core.conn().command(lock.name(), "DEL", &key, &[]).await;
        });
    }

    /// Leave the queue, retrying within the retry policy; recorded when it
    /// still fails (the entry then expires: native after the waiter ttl,
    /// redisson after its slot).
    pub(crate) async fn give_up(&self, owner: &Owner, wait: Option<Duration>, nonce: &str) {
        let left = self
            .core
            .retry()
            .run(|| self.lock.give_up(self.conn(), owner.as_str(), wait, nonce))
            .await;
        if let Err(err) = left {
            events::record(Event::CleanupFailed {
                lock: self.name(),
                owner,
                what: "leaving the queue",
                error: &err,
            });
        }
    }

    /// Release one hold with a single call (bounded by the response timeout,
    /// never retried): for a hold whose lease this client already believes
    /// over, where the lock has expired or soon will, so that a release
    /// that cannot get through does not hold anybody up for the retry
    /// budget.
    pub(crate) async fn release_single(
        &self,
        owner: &Owner,
        lease: Duration,
        token: Option<u64>,
    ) -> Result<Release> {
        let (scope, request) = (Scope { token, nonce: None }, new_request_id());
        let reply = self
            .lock
            .release(self.conn(), owner.as_str(), lease, &request, &scope)
            .await;
        if let Ok(answer) = &reply {
            if self.lock.release_cached(answer, &scope) {
                self.forget_release(&request);
            }
        }
        reply
    }

    /// Release one hold as a request that is sent again from the background
    /// if this future is dropped before it finished (the same request id
    /// makes the second send count once).
    pub(crate) async fn release_once(
        self: &Arc<Self>,
        owner: &Owner,
        lease: Duration,
        token: Option<u64>,
    ) -> Result<Release> {
        let mut request = DisarmOnDrop::new(
            ReleaseRequest {
                shared: Arc::clone(self),
                owner: owner.clone(),
                lease,
                token,
                id: new_request_id(),
            },
            ReleaseRequest::send_in_background,
        );
        let reply = request.get().send(Sending::First).await;
        request.disarm();
        reply
    }

    /// Map a release reply for a caller that believed it held the lock.
    pub(crate) fn check_release(
        &self,
        owner: &Owner,
        how: &'static str,
        reply: Release,
    ) -> Result<()> {
        self.core.events().record(Event::Released {
            lock: self.name(),
            owner,
            how,
            outcome: &reply,
        });
        match reply {
            Release::Released | Release::StillHeld => Ok(()),
            Release::NotOwner => Err(Error::NotOwner {
                name: self.name().to_owned(),
                owner: owner.to_string(),
            }),
            Release::NotHeld => Err(Error::LockLost {
                name: self.name().to_owned(),
                owner: owner.to_string(),
            }),
        }
    }
}

/// A fresh id for one release request (32 hex digits, Redisson's format),
/// also used as an acquisition's secret.
pub(crate) fn new_request_id() -> String {
    // Written into a buffer and copied once: `to_string` goes through the
    // formatting machinery (about 250 instructions per id).
    let mut id = [0; uuid::fmt::Simple::LENGTH];
    uuid::Uuid::new_v4()
        .simple()
        .encode_lower(&mut id)
        .to_owned()
}

/// Whether a release request is sent for the first time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    First,
    /// Again, after its first sending was dropped (it may have run).
    Again,
}

/// One release request, for [`LockShared::release_once`].
struct ReleaseRequest {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Duration,
    token: Option<u64>,
    id: String,
}

impl ReleaseRequest {
    async fn send(&self, sending: Sending) -> Result<Release> {
        let scope = Scope {
            token: self.token,
            nonce: None,
        };
        self.shared
            .send_release(&self.owner, self.lease, &self.id, &scope, sending)
            .await
    }

    fn send_in_background(&mut self) {
        let request = Self {
            shared: Arc::clone(&self.shared),
            owner: self.owner.clone(),
            lease: self.lease,
            token: self.token,
            id: std::mem::take(&mut self.id),
        };
        let core = Arc::clone(self.shared.core());
        core.spawn_cleanup(async move {
            if let Err(err) = request.send(Sending::Again).await {
                events::record(Event::CleanupFailed {
                    lock: request.shared.name(),
                    owner: &request.owner,
                    what: "release",
                    error: &err,
                });
            }
        });
    }
}

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog while held.
    Watchdog(Duration),
    /// Set once; the lock expires after it.
    Explicit(Duration),
}

impl Lease {
    pub(crate) fn duration(&self) -> Duration {
        match *self {
            Lease::Watchdog(d) | Lease::Explicit(d) => d,
        }
    }

    pub(crate) fn is_watchdog(&self) -> bool {
        matches!(self, Lease::Watchdog(_))
    }
}

/// [`PendingClaim::ended`]: the hold goes on.
const HELD: u8 = 0;
/// Released (or being released, or drained at shutdown).
const RELEASED: u8 = 1;
/// Kept without a guard (`LockGuard::forget`).
const FORGOTTEN: u8 = 2;

/// A registered hold that is released from the background if dropped
/// before it was disarmed (handed to a guard that unlocked it, or forgotten).
pub(crate) type ArmedHold = DisarmOnDrop<Hold>;

/// One hold, registered with the client's watchdog: what a guard owns.
pub(crate) struct Hold {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Lease,
    token: Option<u64>,
    state: Arc<HeldState>,
    /// A handed-over grant's claim (see [`PendingClaim`]).
    claim: Option<Arc<PendingClaim>>,
}

/// What a hold is registered with: its grant.
pub(crate) struct Granted {
    pub(crate) token: Option<u64>,
    /// Confirmed until then (unless renewed).
    pub(crate) expires: Instant,
    pub(crate) kind: HoldKind,
    /// The lock was handed over with a short grant: extend it to the lease
    /// right away, from the background.
    pub(crate) claim: bool,
    /// When the call that granted it was sent, and the TTL it found the
    /// lock key with, where the protocol reports one (see the watchdog's
    /// early renewals).
    pub(crate) found_ttl: Option<(Instant, Duration)>,
}

impl Hold {
    /// Register a hold of `owner` from its grant.
    pub(crate) fn register(
        shared: Arc<LockShared>,
        owner: Owner,
        lease: Lease,
        granted: Granted,
    ) -> ArmedHold {
        let Granted {
            token,
            expires,
            kind,
            claim,
            found_ttl,
        } = granted;
        let state = shared.core().watchdog().register(NewHold {
            lock: &shared.lock,
            owner: &owner,
            token,
            expires,
            kind,
            renew: lease.is_watchdog(),
            found_ttl,
        });
        let claim = claim.then(|| {
            Arc::new(PendingClaim {
                shared: Arc::clone(&shared),
                owner: owner.clone(),
                lease: lease.duration(),
                token,
                state: Arc::clone(&state),
                ended: AtomicU8::new(HELD),
                until: Mutex::new(Some(expires)),
                now: tokio::sync::Notify::new(),
            })
        });
        if let Some(claim) = &claim {
            claim.defer(expires);
        }
        let hold = Self {
            shared,
            owner,
            lease,
            token,
            state,
            claim,
        };
        DisarmOnDrop::new(hold, Hold::release_in_background)
    }

    pub(crate) fn shared(&self) -> &Arc<LockShared> {
        &self.shared
    }

    pub(crate) fn owner(&self) -> &Owner {
        &self.owner
    }

    pub(crate) fn lease(&self) -> Lease {
        self.lease
    }

    pub(crate) fn token(&self) -> Option<u64> {
        self.token
    }

    pub(crate) fn state(&self) -> &Arc<HeldState> {
        &self.state
    }

    /// The watchdog stops renewing this hold; a claim in flight stops.
    pub(crate) fn stop_renewing(&self) {
        if let Some(claim) = &self.claim {
            claim.ended.store(RELEASED, Ordering::SeqCst);
            claim.now.notify_one();
        }
        self.unregister();
    }

    fn unregister(&self) {
        self.shared.core().watchdog().unregister(
            &self.shared.lock,
            &self.owner,
            &self.state,
            self.lease.is_watchdog(),
        );
    }

    /// Release this hold (`unlock`); with
    /// [`min_replicas`](crate::ClientConfig::min_replicas), then wait for
    /// the replicas.
    pub(crate) async fn release(&self) -> Result<()> {
        self.release_unsynced().await?;
        self.shared.sync_replicas("release", None).await.map(drop)
    }

    /// Release this hold without waiting for replicas (the undo of an
    /// acquisition the replicas did not acknowledge).
    pub(crate) async fn release_unsynced(&self) -> Result<()> {
        self.stop_renewing();
        let status = self.state.status();
        let lost = || Error::LockLost {
            name: self.shared.name().to_owned(),
            owner: self.owner.to_string(),
        };
        // Known lost: a release now could only hit a later hold of the same
        // owner.
        if status.lost {
            return Err(lost());
        }
        // The lease this client last had confirmed ran out (renewals failed,
        // or an explicit lease ended): the lock expired or soon will. One
        // call frees it early if it can; the caller is not held up for the
        // retry budget by a server that is gone.
        if !status.is_held() {
            let (lease, token) = (self.lease.duration(), self.token);
            // Recorded as any release; whatever it finds, the hold was not
            // known held all along.
            if let Ok(reply) = self.shared.release_single(&self.owner, lease, token).await {
                let _ = self.shared.check_release(&self.owner, "unlock", reply);
            }
            return Err(lost());
        }
        let reply = self
            .shared
            .release_once(&self.owner, self.lease.duration(), self.token)
            .await?;
        self.shared
            .check_release(&self.owner, "unlock", reply)
            .map_err(|err| match err {
                // We held it: another owner holding it now means ours was lost.
                Error::NotOwner { name, owner } => Error::LockLost { name, owner },
                other => other,
            })
    }

    /// Release this hold from the background (its guard was dropped).
    pub(crate) fn release_in_background(&mut self) {
        self.stop_renewing();
        let status = self.state.status();
        if status.lost {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let owner = self.owner.clone();
        let (lease, token) = (self.lease.duration(), self.token);
        let core = Arc::clone(shared.core());
        // Believed over already (see `release_unsynced`): one call, no
        // retries, so that `shutdown` is not held up by a server that is gone.
        let single = !status.is_held();
        core.spawn_cleanup(async move {
            let released = if single {
                shared.release_single(&owner, lease, token).await
            } else {
                shared.release(&owner, lease, token).await
            };
            match released {
                Ok(reply) => {
                    let _ = shared.check_release(&owner, "drop", reply);
                }
                Err(err) => events::record(Event::CleanupFailed {
                    lock: shared.name(),
                    owner: &owner,
                    what: "release on drop",
                    error: &err,
                }),
            }
        });
    }

    /// Keep the hold without a guard (`LockGuard::forget`): the watchdog
    /// stops renewing it, and a handed-over grant not claimed yet is claimed
    /// now, so that it lasts the lease as documented.
    pub(crate) fn forget(&self) {
        if let Some(claim) = &self.claim {
            claim.ended.store(FORGOTTEN, Ordering::SeqCst);
        }
        self.unregister();
        // Claimed from here, as tracked clean-up work (which shutdown waits
        // for), not by the deferred task, which shutdown may stop first.
        if let Some(claim) = &self.claim {
            claim.start();
            claim.now.notify_one();
        }
    }
}

/// The claim of a handed-over grant: extend it to the holder's lease,
/// retrying until the short handoff grant runs out; the hold is lost if
/// that fails.
///
/// The claim waits a third of the grant's life first (2 s with the default
/// 6 s waiter ttl), and is not sent at all when the hold is released
/// before: most critical sections are shorter, and each claim is one script
/// call on the lock's server. Two thirds of the grant are left for the
/// claim's retries, as the watchdog leaves two thirds of a lease for its
/// renewals. `LockGuard::forget` starts it at once.
struct PendingClaim {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Duration,
    token: Option<u64>,
    state: Arc<HeldState>,
    /// [`HELD`], [`RELEASED`] (a claim still to come or in flight then no
    /// longer matters) or [`FORGOTTEN`] (a claim is made now). Here, not
    /// in the [`Hold`]: a hold without a claim needs none (one allocation
    /// less per acquisition).
    ended: AtomicU8,
    /// The grant's end until the claim started: taken by whoever starts it
    /// (the deferred task, or `forget`), exactly once.
    until: Mutex<Option<Instant>>,
    /// Wakes the deferred task when the hold ends.
    now: tokio::sync::Notify,
}

impl PendingClaim {
    /// Wait a third of the grant's life (or until the hold ends), then
    /// start the claim unless the hold was released. The wait is not
    /// tracked as clean-up work: `flush` and shutdown need not wait for it.
    fn defer(self: &Arc<Self>, until: Instant) {
        let this = Arc::clone(self);
        let closing = self.shared.core().closing();
        let delay = until.saturating_duration_since(Instant::now()) / 3;
        self.shared.core().spawn_detached(async move {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = this.now.notified() => {}
                () = closing.cancelled() => return,
            }
            if this.ended.load(Ordering::SeqCst) != RELEASED {
                this.start();
            }
        });
    }

    /// Send the claim, as tracked clean-up work, unless it started already.
    fn start(self: &Arc<Self>) {
        let until = self.until.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(until) = until {
            let this = Arc::clone(self);
            self.shared
                .core()
                .spawn_cleanup(async move { this.run(until).await });
        }
    }

    async fn run(&self, until: Instant) {
        let Self {
            shared,
            owner,
            lease,
            token,
            state,
            ended,
            ..
        } = self;
        let (lease, token) = (*lease, *token);
        let lock_key = shared.protocol().lock_key();
        // Every error is retried until the grant ends: a failure that
        // passes (an ACL being edited, say) must not cost a live grant.
        let claimed = crate::retry::retry_until(
            until,
            |_| true,
            || async {
                if ended.load(Ordering::SeqCst) == RELEASED {
                    return Ok(None);
                }
                let sent_at = Instant::now();
                let hold = [(lock_key, owner.as_str(), token)];
                let held = shared
                    .core()
                    .dialect()
                    .renew(shared.conn(), &hold, Some(lease))
                    .await?;
                if held == [crate::protocol::Renewal::Unsure] {
                    // The hold's key is on another node for now (a slot
                    // migration half-way): retried, as a failed call.
                    return Err(crate::Error::Protocol(
                        "the hold's key is not on the node that ran the claim".into(),
                    ));
                }
                // Read after the reply (a reload after NOSCRIPT on a new
                // server ran after the change it reports).
                let changes = shared.conn().server_changes();
                Ok(Some((
                    held == [crate::protocol::Renewal::Held],
                    (sent_at, changes),
                )))
            },
        )
        .await;
        match claimed {
            Ok(None) => {}
            // With min_replicas, the claim's longer lease is relied on only
            // once the replicas have it (a failover to one that missed it
            // would end the lock with the short grant); until then the hold
            // is believed no longer than the grant, which they have.
            Ok(Some((true, (sent_at, changes)))) => {
                match shared.sync_replicas("claim", Some((owner, token))).await {
                    // Acknowledged by the replicas of the server that took the
                    // claim (none changed meanwhile: else the claim may be lost
                    // with the old master, and the grant's end stays the
                    // belief), and no longer than that server keeps the hold.
                    Ok(held_until) if shared.conn().server_changes() == changes => {
                        let until = sent_at + lease;
                        state.extend(held_until.map_or(until, |held| held.min(until)));
                    }
                    Ok(_) => {}
                    Err(err) => events::record(Event::CleanupFailed {
                        lock: shared.name(),
                        owner,
                        what: "replica acknowledgement of a claim",
                        error: &err,
                    }),
                }
            }
            Ok(Some((false, _))) if ended.load(Ordering::SeqCst) != HELD => {}
            Ok(Some((false, _))) => {
                state.mark_lost(shared.name(), owner.as_str(), LostCause::GrantExpired)
            }
            Err(_) => state.mark_lost(shared.name(), owner.as_str(), LostCause::ClaimFailed),
        }
    }
}
