//! `LockGuard`: one hold of a lock.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::{Error, Result};
use crate::lock::{AcquireOptions, LockShared, ReleaseOnDrop, check_release};
use crate::owner::Owner;
use crate::watchdog::{HeldState, HoldKind, NewHold};

/// How a hold's lease is kept.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Lease {
    /// Renewed by the client's watchdog while held.
    Watchdog(Duration),
    /// Set once; the lock expires after it.
    Explicit(Duration),
}

/// One hold of a lock, returned by every successful acquire.
///
/// - [`unlock`](Self::unlock) releases it and reports whether the lock was
///   still held;
/// - dropping the guard without `unlock` releases it in the background
///   (never blocking); that release needs the runtime to keep running, so
///   before a process exits call [`LockClient::shutdown`](crate::LockClient::shutdown),
///   which releases every hold still alive and waits for the background work;
/// - [`lost`](Self::lost) resolves when the hold is known lost (renewal found
///   another owner or none, or the lease ran out while Redis was unreachable),
///   and [`is_held`](Self::is_held) turns `false`.
///
/// The guard is `Send + Sync + 'static`: move it into tasks freely.
#[must_use = "dropping a guard releases the lock right away"]
pub struct LockGuard {
    held: Held,
    /// Cleared by `unlock`, so that `drop` does not release a second time.
    armed: bool,
}

struct Held {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Lease,
    token: Option<u64>,
    state: Arc<HeldState>,
    /// Set when this guard released (or forgot) its hold: a claim still in
    /// flight then no longer matters.
    released: Arc<AtomicBool>,
}

impl LockGuard {
    /// A new hold that expires at `expires` unless renewed. `claim`: the
    /// lock was handed over with a short lease; extend it right away.
    pub(crate) fn new(
        shared: Arc<LockShared>,
        owner: Owner,
        lease: Lease,
        token: Option<u64>,
        expires: Instant,
        kind: HoldKind,
        claim: bool,
    ) -> Self {
        let state = shared.client.inner.watchdog.register(NewHold {
            shared: &shared,
            lock_key: shared.lock_key(),
            owner: owner.as_str(),
            name: &shared.name,
            token,
            expires,
            kind,
            renew: lease.is_watchdog(),
        });
        let released = Arc::new(AtomicBool::new(false));
        if claim {
            claim_in_background(&shared, &owner, lease, token, &state, expires, &released);
        }
        Self {
            held: Held {
                shared,
                owner,
                lease,
                token,
                state,
                released,
            },
            armed: true,
        }
    }

    fn held(&self) -> &Held {
        &self.held
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.held().shared.name
    }

    /// The owner of this hold.
    pub fn owner(&self) -> &Owner {
        &self.held().owner
    }

    /// The fencing token of this acquisition, where the protocol gives one
    /// (`redisson` does not: `None`).
    pub fn token(&self) -> Option<u64> {
        self.held().token
    }

    /// `false` once the hold is known lost (see [`lost`](Self::lost)) or its
    /// lease may have run out: the lease the server last confirmed (measured
    /// from when the confirming call was sent) has passed without a renewal,
    /// as after a process pause longer than the lease.
    pub fn is_held(&self) -> bool {
        self.held().state.status().is_held()
    }

    /// A future that resolves when this hold is lost or may be: a renewal
    /// found the lock gone or held by another owner (force-unlocked,
    /// expired), or the last confirmed lease ran out without a renewal
    /// (renewals failing, the process paused past its lease, an explicit
    /// lease ending).
    ///
    /// The future is `'static`: spawn it, or `select!` on it next to the work
    /// the lock protects. It also resolves once the hold is released.
    ///
    /// # Cancel safety
    /// Dropping it has no effect.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut status = self.held().state.subscribe();
        async move {
            loop {
                let now = *status.borrow_and_update();
                if !now.is_held() {
                    return;
                }
                tokio::select! {
                    changed = status.changed() => {
                        if changed.is_err() {
                            return;
                        }
                    }
                    () = tokio::time::sleep_until(now.expires) => {}
                }
            }
        }
    }

    /// Acquire the lock once more as the same owner: while this guard holds
    /// it, the hold count goes up by one and the new guard releases that
    /// hold. One attempt, never queues: `None` when someone else holds the
    /// lock now (this hold was lost).
    ///
    /// # Errors
    /// As [`LockHandle::acquire`](crate::LockHandle::acquire).
    ///
    /// # Cancel safety
    /// If the re-entry was granted while the future was being dropped, that
    /// one hold is released in the background.
    pub async fn reenter(&self) -> Result<Option<LockGuard>> {
        let held = self.held();
        // One re-entry of this hold at a time (see `HeldState::reentry`).
        let _turn = held.state.reentry.lock().await;
        let mut options = AcquireOptions::new()
            .wait(Duration::ZERO)
            .owner(held.owner.clone())
            .reenter_only();
        if let Lease::Explicit(lease) = held.lease {
            options = options.lease(lease);
        }
        crate::lock::acquire_with(Arc::clone(&held.shared), options).await
    }

    /// Release this hold.
    ///
    /// # Errors
    /// [`Error::LockLost`] when the lock was no longer held by this owner
    /// (expired, force-unlocked, or taken by another owner since);
    /// [`Error::Connection`] when Redis stayed unreachable for the retry
    /// budget (the lock then expires with its lease).
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the release: it is sent again from
    /// the background under the same request id (which makes it count once).
    pub async fn unlock(mut self) -> Result<()> {
        self.armed = false;
        let held = &self.held;
        held.stop_renewing();
        // Known lost: a release now could only hit a later hold of the same
        // owner.
        if held.state.status().lost {
            return Err(Error::LockLost {
                name: held.shared.name.clone(),
                owner: held.owner.to_string(),
            });
        }
        let mut release =
            ReleaseOnDrop::new(&held.shared, &held.owner, held.lease_duration(), held.token);
        let reply = release.run().await?;
        check_release(&held.shared, &held.owner, reply).map_err(|err| match err {
            // We held it: another owner holding it now means ours was lost.
            Error::NotOwner { name, owner } => Error::LockLost { name, owner },
            other => other,
        })
    }
}

impl LockGuard {
    /// Keep the hold without this guard: the watchdog stops renewing it and
    /// nothing is released now. The hold ends with
    /// [`LockHandle::unlock_as`](crate::LockHandle::unlock_as) for the same
    /// owner, a force-unlock, or when its lease runs out.
    pub fn forget(mut self) {
        self.armed = false;
        self.held.stop_renewing();
    }
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

impl Held {
    fn stop_renewing(&self) {
        self.released.store(true, Ordering::SeqCst);
        self.shared.client.inner.watchdog.unregister(
            self.shared.lock_key(),
            self.owner.as_str(),
            &self.state,
            self.lease.is_watchdog(),
        );
    }

    fn lease_duration(&self) -> Duration {
        self.lease.duration()
    }
}

/// Extend a handed-over grant to the holder's lease, retrying until the
/// short handoff lease (`until`) runs out; the hold is lost if that fails.
fn claim_in_background(
    shared: &Arc<LockShared>,
    owner: &Owner,
    lease: Lease,
    token: Option<u64>,
    state: &Arc<HeldState>,
    until: Instant,
    released: &Arc<AtomicBool>,
) {
    let (shared, owner, state) = (Arc::clone(shared), owner.clone(), Arc::clone(state));
    let released = Arc::clone(released);
    let inner = Arc::clone(&shared.client.inner);
    inner.spawn_cleanup(async move {
        let protocol = shared.client.config().protocol;
        let mut backoff = Duration::from_millis(20);
        loop {
            if released.load(Ordering::SeqCst) {
                return;
            }
            let sent_at = Instant::now();
            let hold = [(shared.lock_key(), owner.as_str(), token)];
            let claim = crate::protocol::renew(protocol, shared.conn(), &hold, Some(lease.duration()));
            match claim.await {
                Ok(held) if held == [true] => {
                    state.extend(sent_at + lease.duration());
                    return;
                }
                Ok(_) if released.load(Ordering::SeqCst) => return,
                Ok(_) => {
                    warn!(lock = %shared.name, %owner, "lock lost: the handed-over grant was gone before it was claimed");
                    state.mark_lost();
                    return;
                }
                Err(err) if Instant::now() + backoff < until => {
                    debug!(lock = %shared.name, %owner, error = %err, "claim failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Err(err) => {
                    warn!(lock = %shared.name, %owner, error = %err, "lock lost: could not claim the handed-over grant in time");
                    state.mark_lost();
                    return;
                }
            }
        }
    });
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let held = &self.held;
        held.stop_renewing();
        if held.state.status().lost {
            return;
        }
        let shared = Arc::clone(&held.shared);
        let owner = held.owner.clone();
        let (lease, token) = (held.lease_duration(), held.token);
        let inner = Arc::clone(&shared.client.inner);
        inner.spawn_cleanup(async move {
            match shared.release(&owner, lease, token).await {
                Ok(reply) => debug!(lock = %shared.name, %owner, ?reply, "released on drop"),
                Err(err) => warn!(lock = %shared.name, %owner, error = %err, "release on drop failed; the lock expires with its lease"),
            }
        });
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = &self.held;
        f.debug_struct("LockGuard")
            .field("name", &held.shared.name)
            .field("owner", &held.owner)
            .field("token", &held.token)
            .field("lease", &held.lease)
            .finish()
    }
}
