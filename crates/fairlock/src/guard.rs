//! `LockGuard`: one hold of a lock, as its user sees it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{self, AcquireOptions};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::hold::{ArmedHold, Hold, Lease};
use crate::owner::Owner;

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
    /// Released from the background when the guard is dropped, unless
    /// `unlock` or `forget` disarmed it.
    hold: ArmedHold,
}

impl LockGuard {
    pub(crate) fn new(hold: ArmedHold) -> Self {
        Self { hold }
    }

    fn held(&self) -> &Hold {
        self.hold.get()
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.held().shared().name()
    }

    /// The owner of this hold.
    pub fn owner(&self) -> &Owner {
        self.held().owner()
    }

    /// The fencing token of this acquisition, where the protocol gives one
    /// (`redisson` does not: `None`).
    pub fn token(&self) -> Option<u64> {
        self.held().token()
    }

    /// `false` once the hold is known lost (see [`lost`](Self::lost)) or its
    /// lease may have run out: the lease the server last confirmed (measured
    /// from when the confirming call was sent) has passed without a renewal,
    /// as after a process pause longer than the lease.
    pub fn is_held(&self) -> bool {
        self.held().state().status().is_held()
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
        let signal = self.held().state().signal();
        async move { signal.lost().await }
    }

    /// Acquire the lock once more as the same owner: while this guard holds
    /// it, the hold count goes up by one and the new guard releases that
    /// hold. One attempt, never queues: `None` when someone else holds the
    /// lock now (this hold was lost). While another call of the same owner
    /// is under way (another re-entry, or the undo of one whose reply was
    /// lost, which retries for at most the retry budget), it waits for that
    /// call first: at most the retry budget and one response timeout.
    ///
    /// # Errors
    /// As [`LockHandle::acquire`](crate::LockHandle::acquire).
    ///
    /// # Cancel safety
    /// If the re-entry was granted while the future was being dropped, that
    /// one hold is released in the background.
    pub async fn reenter(&self) -> Result<Option<LockGuard>> {
        // One acquisition of this owner at a time: `acquire` takes the
        // owner's turn (see `OwnerTurns`).
        let held = self.held();
        let mut options = AcquireOptions::new()
            .wait(Duration::ZERO)
            .owner(held.owner().clone())
            .reenter_only();
        if let Lease::Explicit(lease) = held.lease() {
            options = options.lease(lease);
        }
        let hold = acquire::acquire(Arc::clone(held.shared()), options).await?;
        Ok(hold.map(LockGuard::new))
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
        self.hold.disarm();
        self.hold.get().release().await
    }

    /// Keep the hold without this guard: the watchdog stops renewing it and
    /// nothing is released now. The hold ends with
    /// [`LockHandle::unlock_as`](crate::LockHandle::unlock_as) for the same
    /// owner, a force-unlock, or when its lease runs out.
    pub fn forget(mut self) {
        self.hold.disarm();
        self.hold.get().forget();
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let held = self.held();
        f.debug_struct("LockGuard")
            .field("name", &held.shared().name())
            .field("owner", held.owner())
            .field("token", &held.token())
            .field("lease", &held.lease())
            .finish()
    }
}
