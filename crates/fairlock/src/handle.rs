//! Lock handles: [`LockHandle`] with what every lock kind does, and the
//! kinds as types: [`FairLock`] (FIFO, with a queue to look into) and
//! [`Lock`] (non-fair).

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{self, AcquireOptions};
use crate::core::ClientCore;
use crate::error::{Error, Result};
use crate::events::Event;
use crate::guard::LockGuard;
use crate::hold::LockShared;
use crate::kind::LockKind;
use crate::owner::Owner;
use crate::protocol::LockInfo;

/// A handle on one named lock, fair or not: every acquire and query both
/// kinds have. [`FairLock`] and [`Lock`] dereference to it; get one of
/// either kind with [`LockClient::handle`](crate::LockClient::handle) when
/// the kind is chosen at run time.
///
/// Cheap to clone. A handle holds nothing by itself: each acquire returns a
/// [`LockGuard`] for the hold it made.
#[derive(Clone)]
pub struct LockHandle {
    shared: Arc<LockShared>,
}

impl std::fmt::Debug for LockHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockHandle")
            .field("name", &self.name())
            .field("kind", &self.kind())
            .finish()
    }
}

impl LockHandle {
    /// A handle on `name` (already validated).
    pub(crate) fn new(core: &Arc<ClientCore>, name: &str, kind: LockKind) -> Self {
        let lock = core.dialect().lock(name, kind);
        Self {
            shared: LockShared::new(Arc::clone(core), Arc::new(lock)),
        }
    }

    /// A handle on the native semaphore `name` (already validated): its
    /// permits are acquired as weighted holds (see [`crate::Semaphore`]).
    pub(crate) fn native_semaphore(core: &Arc<ClientCore>, name: &str, permits: u32) -> Self {
        let lock = core.dialect().native_semaphore(name, permits);
        Self {
            shared: LockShared::new(Arc::clone(core), Arc::new(lock)),
        }
    }

    /// The protocol object behind the handle.
    pub(crate) fn protocol_lock(&self) -> &crate::protocol::ProtocolLock {
        self.shared.protocol()
    }

    /// The client behind the handle.
    pub(crate) fn core(&self) -> &Arc<ClientCore> {
        self.shared.core()
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        self.shared.name()
    }

    /// Fair or not, or which side of a read-write lock.
    pub fn kind(&self) -> LockKind {
        self.shared.protocol().kind()
    }

    /// The id under which `owner`'s holds of this lock are stored: a
    /// read-write lock's writer is `OWNER:write` (see [`ReadWriteLock`](crate::ReadWriteLock)).
    fn hold_owner(&self, owner: &Owner) -> Owner {
        self.shared.protocol().hold_owner(owner.clone())
    }

    /// Wait until the lock is granted; hold it with the watchdog lease.
    ///
    /// # Errors
    /// [`Error::Connection`] when Redis stays unreachable for the retry
    /// budget, [`Error::WrongType`] when a lock key holds another type,
    /// [`Error::NotALock`] when it holds data that is not a lock (nothing is
    /// written).
    ///
    /// # Cancel safety
    /// Dropping the future takes the waiter out of the queue; if the lock was
    /// granted while the future was being dropped, it is released. Either
    /// happens in the background, right away (dropped while an attempt's
    /// script is in flight, its outcome unknown, both are done: a few calls,
    /// which [`LockClient::shutdown`](crate::LockClient::shutdown) waits for).
    pub async fn lock(&self) -> Result<LockGuard> {
        self.acquire_granted(AcquireOptions::new()).await
    }

    /// Wait until the lock is granted; hold it for `lease`, not renewed.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus [`Error::InvalidDuration`] for a bad lease.
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard> {
        self.acquire_granted(AcquireOptions::new().lease(lease))
            .await
    }

    /// One attempt: the guard if the lock was free (or, for a fair lock, free
    /// with nobody queued), `None` otherwise. Never queues.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), without retries.
    ///
    /// # Cancel safety
    /// If the lock was granted while the future was being dropped (or the
    /// attempt's script was still in flight), it is released in the
    /// background.
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(Duration::ZERO))
            .await
    }

    /// Wait at most `wait` for the lock; `None` when it was not granted in
    /// time (the waiter has then left the queue).
    ///
    /// # Errors
    /// As [`lock`](Self::lock), plus [`Error::InvalidDuration`] for a bad wait.
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait)).await
    }

    /// [`try_lock_for`](Self::try_lock_for) with an explicit lease.
    ///
    /// # Errors
    /// As [`try_lock_for`](Self::try_lock_for).
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire(AcquireOptions::new().wait(wait).lease(lease))
            .await
    }

    async fn acquire_granted(&self, options: AcquireOptions) -> Result<LockGuard> {
        match self.acquire(options).await? {
            Some(guard) => Ok(guard),
            None => Err(Error::Protocol(
                "an unbounded wait ended without a grant".into(),
            )),
        }
    }

    /// Acquire with `options`: `None` when the wait budget ran out.
    ///
    /// # Errors
    /// [`Error::InvalidDuration`] for a bad wait or lease;
    /// [`Error::Connection`] when Redis stays unreachable for the retry budget
    /// (or the wait budget, when shorter); [`Error::WrongType`] when a lock key
    /// holds another Redis type; [`Error::NotALock`] when it holds data that
    /// is not a lock (nothing is written); [`Error::Auth`] when credentials are refused
    /// after a reconnect.
    ///
    /// # Cancel safety
    /// Dropping the future at any await point takes the waiter out of the
    /// queue; if the lock was granted while the future was being dropped, it
    /// is released. No queue entry or hold is left behind.
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        let hold = acquire::acquire(Arc::clone(&self.shared), options).await?;
        Ok(hold.map(LockGuard::new))
    }

    /// Release whoever holds the lock and wake the next waiter. `true` when a
    /// lock was released. A fairlock holder's client is told at once (on its
    /// revocation channel) and checks its holds: its `lost()` resolves
    /// within a round trip. A Redisson (Java) holder learns at its next
    /// renewal.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`], [`Error::NotALock`]
    /// when the lock key holds data that is not a lock (left as it is).
    ///
    /// # Cancel safety
    /// The command may or may not have run when the future is dropped.
    pub async fn force_unlock(&self) -> Result<bool> {
        let shared = &self.shared;
        let released = shared.protocol().force_release(shared.conn()).await?;
        shared.core().events().record(Event::ForceUnlocked {
            lock: shared.name(),
            released,
        });
        Ok(released)
    }

    /// Release one hold of `owner` without a guard (for owners managed by
    /// hand, like Redisson's `unlock()`).
    ///
    /// # Errors
    /// [`Error::NotOwner`] when somebody else holds the lock,
    /// [`Error::LockLost`] when nobody does, [`Error::Connection`].
    ///
    /// # Cancel safety
    /// Dropping the future does not stop the release: it is sent again from
    /// the background under the same request id (which makes it count once).
    pub async fn unlock_as(&self, owner: &Owner) -> Result<()> {
        let owner = &self.hold_owner(owner);
        let lease = self.shared.core().config().lease;
        let reply = self.shared.release_once(owner, lease, None).await?;
        self.shared.check_release(owner, "unlock_as", reply)
    }

    /// `true` when somebody holds the lock (the side of a read-write lock:
    /// the write side while a writer holds it, the read side while readers
    /// do or the writer also reads, as Redisson's `isLocked`).
    ///
    /// # Errors
    /// [`Error::Connection`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn is_locked(&self) -> Result<bool> {
        self.shared.protocol().is_locked(self.shared.conn()).await
    }

    /// Time until the current holder's lease runs out; `None` when free.
    ///
    /// # Errors
    /// [`Error::Connection`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        self.shared
            .protocol()
            .remaining_lease(self.shared.conn())
            .await
    }

    /// How many times `owner` holds the lock (0 when it does not).
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn hold_count(&self, owner: &Owner) -> Result<u32> {
        self.shared
            .protocol()
            .hold_count(self.shared.conn(), self.hold_owner(owner).as_str())
            .await
    }

    /// `true` when `owner` holds the lock now, as the server says (a plain
    /// read: the native lock's `owner` field, or the Redisson lock hash's
    /// field named after the owner). Redisson's `isHeldByThread`. Unlike
    /// [`LockGuard::is_held`], which is what this client believes from its
    /// last renewal, it costs a round trip and sees a force-unlock at once.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn is_held_by(&self, owner: &Owner) -> Result<bool> {
        Ok(self.hold_count(owner).await? > 0)
    }

    /// The lock's whole state (holders, lease, queue) at one instant.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`], [`Error::NotALock`]
    /// when the lock key holds data that is not a lock (left as it is).
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.shared.protocol().inspect(self.shared.conn()).await
    }

    /// `owner`'s place in this lock's line: `Some((position, waiting))`
    /// with a 1-based position while it waits in line, `None` when it does
    /// not (it holds the lock, has not queued yet, or the lock has no line:
    /// Redisson's non-fair lock and read-write lock). The native read-write
    /// lock has one line for both sides: on the write side `owner` names
    /// its writer (`OWNER:write`), as everywhere. Cheap: O(log N) under
    /// `native`, unlike [`inspect`](Self::inspect).
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        let shared = &self.shared;
        let owner = self.hold_owner(owner);
        let (position, waiting) = shared
            .protocol()
            .queue_position(shared.conn(), owner.as_str())
            .await?;
        Ok((position > 0).then_some((position, waiting)))
    }
}

/// A fair (FIFO) reentrant lock: waiters are granted the lock in the order
/// they asked for it. Redisson's `RFairLock`. Get one with
/// [`LockClient::fair_lock`](crate::LockClient::fair_lock); every acquire
/// and query is on [`LockHandle`], which it dereferences to.
///
/// # Fairness
/// Waiters are granted the lock in the order in which their first attempt
/// reached Redis, across all clients and processes. A waiter that stops
/// waiting leaves the queue; one whose process dies is skipped once it
/// stopped refreshing for its waiter ttl (native,
/// [`ClientConfig::waiter_ttl`](crate::ClientConfig::waiter_ttl)), or once
/// its waiter slot ran out (redisson, Redisson's rule,
/// [`ClientConfig::waiter_slot`](crate::ClientConfig::waiter_slot)).
#[derive(Clone)]
pub struct FairLock {
    handle: LockHandle,
}

/// A non-fair reentrant lock: a free lock goes to whoever asks first after
/// it is released. Redisson's `RLock`. Get one with
/// [`LockClient::lock`](crate::LockClient::lock); every acquire and query is
/// on [`LockHandle`], which it dereferences to.
#[derive(Clone)]
pub struct Lock {
    handle: LockHandle,
}

impl FairLock {
    pub(crate) fn new(handle: LockHandle) -> Self {
        Self { handle }
    }

    /// `owner`'s place in this lock's queue: `Some((position, waiting))` with
    /// a 1-based position while it is queued, `None` when it is not (it
    /// holds the lock, or has not queued yet). Cheap: O(log N) under
    /// `native`, unlike [`inspect`](LockHandle::inspect), which reads the
    /// whole queue.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        self.handle.queue_position(owner).await
    }
}

impl Lock {
    pub(crate) fn new(handle: LockHandle) -> Self {
        Self { handle }
    }
}

/// `Deref` from each lock kind type to the handle type with the methods
/// all kinds share (here and in the blocking API).
macro_rules! kinds_deref_to {
    ($handle:ty: $($kind:ty),+) => {
        $(impl std::ops::Deref for $kind {
            type Target = $handle;

            fn deref(&self) -> &$handle {
                &self.handle
            }
        })+
    };
}
pub(crate) use kinds_deref_to;

kinds_deref_to!(LockHandle: FairLock, Lock);

impl From<FairLock> for LockHandle {
    fn from(lock: FairLock) -> Self {
        lock.handle
    }
}

impl From<Lock> for LockHandle {
    fn from(lock: Lock) -> Self {
        lock.handle
    }
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.name())
            .finish()
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock").field("name", &self.name()).finish()
    }
}
