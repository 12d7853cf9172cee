//! Lock handles (`FairLock`, `Lock`) and the acquire loop.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::{Instrument, debug, debug_span, info, warn};

use crate::client::LockClient;
use crate::config::check_duration;
use crate::error::{Error, Result};
use crate::guard::{Lease, LockGuard};
use crate::owner::Owner;
use crate::protocol::native::parse_grant;
use crate::protocol::{Acquire, AcquireArgs, LockInfo, ProtocolLock, Release};
use crate::wakeup::{Subscription, Woken};

mod sealed {
    pub trait Sealed {}
}

/// The kind of a lock: [`Fair`] or [`NonFair`]. Sealed.
pub trait LockKind: sealed::Sealed + Send + Sync + 'static {
    /// `true` for the FIFO-fair lock.
    const FAIR: bool;
}

/// Marker for the fair (FIFO) lock, Redisson's `RFairLock`.
#[derive(Debug, Clone, Copy)]
pub enum Fair {}

/// Marker for the non-fair reentrant lock, Redisson's `RLock`.
#[derive(Debug, Clone, Copy)]
pub enum NonFair {}

impl sealed::Sealed for Fair {}
impl sealed::Sealed for NonFair {}
impl LockKind for Fair {
    const FAIR: bool = true;
}
impl LockKind for NonFair {
    const FAIR: bool = false;
}

/// A fair (FIFO) reentrant lock: waiters are granted the lock in the order
/// they asked for it. Redisson's `RFairLock`.
pub type FairLock = LockHandle<Fair>;

/// A non-fair reentrant lock: a free lock goes to whoever asks first after
/// it is released. Redisson's `RLock`.
pub type Lock = LockHandle<NonFair>;

/// What a lock handle and its guards share.
pub(crate) struct LockShared {
    pub(crate) client: LockClient,
    pub(crate) name: String,
    pub(crate) protocol: ProtocolLock,
}

impl LockShared {
    pub(crate) fn conn(&self) -> &crate::connection::Connection {
        &self.client.inner.conn
    }

    pub(crate) fn lock_key(&self) -> &str {
        self.protocol.lock_key()
    }

    fn waiter_ttl(&self) -> Duration {
        self.client.config().waiter_ttl
    }

    /// Release one hold of `owner`, retrying through connection errors within
    /// the retry budget with one request id (the unlock cache makes the
    /// retry answer what the first call did).
    pub(crate) async fn release(&self, owner: &Owner, lease: Duration) -> Result<Release> {
        let request = new_request_id();
        self.release_as_request(owner, lease, &request).await
    }

    /// [`release`](Self::release) under a given request id: a second call
    /// with the same id answers what the first did and changes nothing.
    pub(crate) async fn release_as_request(
        &self,
        owner: &Owner,
        lease: Duration,
        request: &str,
    ) -> Result<Release> {
        self.retrying(|| {
            self.protocol.release(
                self.conn(),
                owner.as_str(),
                lease,
                self.waiter_ttl(),
                request,
            )
        })
        .await
    }

    /// Leave the queue, retrying through connection errors within the retry
    /// budget; logged when it still fails (the entry then expires: native
    /// after the waiter ttl, redisson after its slot).
    async fn give_up(&self, owner: &Owner, slot: Duration) {
        let left = self
            .retrying(|| self.protocol.give_up(self.conn(), owner.as_str(), slot))
            .await;
        if let Err(err) = left {
            warn!(lock = %self.name, %owner, error = %err, "could not leave the queue; the entry expires on its own");
        }
    }

    /// Run `call` again after connection errors, with backoff, while the
    /// retry budget lasts. Only for calls that are safe to repeat.
    async fn retrying<T, F, Fut>(&self, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let budget = self.client.config().retry_budget;
        let started = Instant::now();
        let mut backoff = Duration::from_millis(20);
        loop {
            match call().await {
                Err(err) if err.is_connection() && started.elapsed() + backoff < budget => {
                    debug!(lock = %self.name, error = %err, "call failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                other => return other,
            }
        }
    }

    /// Undo an attempt whose caller went away before seeing the reply.
    async fn undo(
        &self,
        owner: &Owner,
        reply: &Result<Acquire>,
        lease: Duration,
        slot: Duration,
        base: Option<u32>,
    ) {
        match reply {
            Ok(Acquire::Acquired { .. } | Acquire::Reentered { .. }) => {
                debug!(lock = %self.name, %owner, "grant raced a cancellation; releasing it");
                if let Err(err) = self.release(owner, lease).await {
                    warn!(lock = %self.name, %owner, error = %err, "could not release a cancelled grant; it expires with its lease");
                }
            }
            Ok(Acquire::Queued { .. }) => self.give_up(owner, slot).await,
            Ok(Acquire::Busy) => {}
            Err(_) => {
                // Unknown outcome: leave the queue, and release the hold the
                // attempt may have added (the count is above its base).
                self.give_up(owner, slot).await;
                if let Some(base) = base {
                    match self.protocol.hold_count(self.conn(), owner.as_str()).await {
                        Ok(count) if count > base => {
                            let _ = self.release(owner, lease).await;
                        }
                        _ => {}
                    }
                }
            }
        }
    }
}

/// How to acquire: wait budget, lease and owner. Used with
/// [`LockHandle::acquire`]; the other acquire methods are shorthands for it.
///
/// ```
/// use std::time::Duration;
/// let options = fairlock::AcquireOptions::new()
///     .wait(Duration::from_secs(5))
///     .lease(Duration::from_secs(60));
/// ```
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    wait: Option<Duration>,
    lease: Option<Duration>,
    owner: Option<Owner>,
    /// Only a re-entry counts: a fresh grant is undone (`LockGuard::reenter`).
    reenter_only: bool,
}

impl AcquireOptions {
    /// Wait without a bound, watchdog lease, a fresh owner.
    pub fn new() -> Self {
        Self::default()
    }

    /// Give up after `wait` (`Duration::ZERO`: one attempt, never queue).
    /// Default: wait until granted.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Hold for `lease` and let it expire: the watchdog does not renew it.
    /// Default: the client's lease, renewed by the watchdog while held.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Only accept a re-entry; a grant of a lock the owner no longer held is
    /// released again and reported as `None`.
    pub(crate) fn reenter_only(mut self) -> Self {
        self.reenter_only = true;
        self
    }

    /// Acquire as `owner`: when it already holds the lock, this re-enters
    /// (the hold count goes up). Default: a fresh owner.
    ///
    /// The owner's hold count is read first (one more round trip), so that a
    /// retry after a lost reply neither counts a hold twice nor misses one.
    /// One owner must not wait for the same lock in two places at once (as
    /// a Redisson thread cannot): both would take the one grant as theirs.
    pub fn owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }
}

/// A handle on one named lock. Get one with [`LockClient::fair_lock`]
/// ([`FairLock`]) or [`LockClient::lock`] ([`Lock`]).
///
/// Cheap to clone. A handle holds nothing by itself: each acquire returns a
/// [`LockGuard`] for the hold it made.
///
/// # Fairness
/// For a [`FairLock`], waiters are granted the lock in the order in which
/// their first attempt reached Redis, across all clients and processes. A
/// waiter that stops waiting leaves the queue; one whose process dies is
/// skipped once its waiter slot runs out (Redisson's rule).
pub struct LockHandle<K: LockKind> {
    shared: Arc<LockShared>,
    _kind: PhantomData<K>,
}

impl<K: LockKind> Clone for LockHandle<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            _kind: PhantomData,
        }
    }
}

impl<K: LockKind> std::fmt::Debug for LockHandle<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(if K::FAIR { "FairLock" } else { "Lock" })
            .field("name", &self.shared.name)
            .finish()
    }
}

impl<K: LockKind> LockHandle<K> {
    pub(crate) fn new(client: LockClient, name: &str) -> Self {
        let config = client.config();
        let protocol = ProtocolLock::new(config.protocol, name, K::FAIR, config.clock_offset_ms);
        Self {
            shared: Arc::new(LockShared {
                client,
                name: name.to_owned(),
                protocol,
            }),
            _kind: PhantomData,
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Wait until the lock is granted; hold it with the watchdog lease.
    ///
    /// # Errors
    /// [`Error::Connection`] when Redis stays unreachable for the retry
    /// budget, [`Error::WrongType`] when a lock key holds another type.
    ///
    /// # Cancel safety
    /// Dropping the future takes the waiter out of the queue; if the lock was
    /// granted while the future was being dropped, it is released. Either
    /// happens in the background, right away.
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
    /// If the lock was granted while the future was being dropped, it is
    /// released in the background.
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
    /// holds another Redis type; [`Error::Auth`] when credentials are refused
    /// after a reconnect.
    ///
    /// # Cancel safety
    /// Dropping the future at any await point takes the waiter out of the
    /// queue; if the lock was granted while the future was being dropped, it
    /// is released. No queue entry or hold is left behind.
    pub async fn acquire(&self, options: AcquireOptions) -> Result<Option<LockGuard>> {
        acquire_with(Arc::clone(&self.shared), options).await
    }

    /// Release whoever holds the lock and wake the next waiter. `true` when a
    /// lock was released. Holders learn of it at their next renewal.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// The command may or may not have run when the future is dropped.
    pub async fn force_unlock(&self) -> Result<bool> {
        let released = self
            .shared
            .protocol
            .force_release(self.shared.conn(), self.shared.waiter_ttl())
            .await?;
        info!(lock = %self.shared.name, released, "force unlock");
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
        let lease = self.shared.client.config().lease;
        let mut release = ReleaseOnDrop::new(&self.shared, owner, lease);
        let reply = release.run().await?;
        check_release(&self.shared, owner, reply)
    }

    /// `true` when somebody holds the lock.
    ///
    /// # Errors
    /// [`Error::Connection`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn is_locked(&self) -> Result<bool> {
        let n: i64 = self
            .shared
            .conn()
            .command(
                &self.shared.name,
                "EXISTS",
                self.shared.lock_key(),
                &[] as &[&str],
            )
            .await?;
        Ok(n == 1)
    }

    /// Time until the current holder's lease runs out; `None` when free.
    ///
    /// # Errors
    /// [`Error::Connection`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        let pttl: i64 = self
            .shared
            .conn()
            .command(
                &self.shared.name,
                "PTTL",
                self.shared.lock_key(),
                &[] as &[&str],
            )
            .await?;
        Ok((pttl >= 0).then(|| Duration::from_millis(pttl as u64)))
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
            .protocol
            .hold_count(self.shared.conn(), owner.as_str())
            .await
    }

    /// `owner`'s place in this lock's queue: `Some((position, waiting))` with
    /// a 1-based position while it is queued, `None` when it is not (it
    /// holds the lock, has not queued yet, or the lock is non-fair). Cheap:
    /// O(log N) under `native`, unlike [`inspect`](Self::inspect), which
    /// reads the whole queue.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn queue_position(&self, owner: &Owner) -> Result<Option<(u64, u64)>> {
        let (position, waiting) = self
            .shared
            .protocol
            .queue_position(self.shared.conn(), owner.as_str())
            .await?;
        Ok((position > 0).then_some((position, waiting)))
    }

    /// The lock's whole state (holders, lease, queue) at one instant.
    ///
    /// # Errors
    /// [`Error::Connection`], [`Error::WrongType`].
    ///
    /// # Cancel safety
    /// Read-only; safe to drop.
    pub async fn inspect(&self) -> Result<LockInfo> {
        self.shared.protocol.inspect(self.shared.conn()).await
    }
}

/// The acquire behind every acquire method (see [`LockHandle::acquire`]).
pub(crate) async fn acquire_with(
    shared: Arc<LockShared>,
    options: AcquireOptions,
) -> Result<Option<LockGuard>> {
    let config = shared.client.config();
    let lease = match options.lease {
        Some(lease) => {
            check_duration("lease", lease)?;
            Lease::Explicit(lease)
        }
        None => Lease::Watchdog(config.lease),
    };
    let once = options.wait == Some(Duration::ZERO);
    let wait = match options.wait {
        Some(wait) if !once => {
            check_duration("wait", wait)?;
            Some(wait)
        }
        _ => None,
    };
    let slot = if shared.protocol.is_native() {
        config.waiter_ttl
    } else {
        // Redisson gives a waiter that passes a wait time that wait as its slot.
        wait.unwrap_or(config.waiter_slot)
    };
    // The owner's hold count before this acquisition: 0 for a fresh owner,
    // read for an explicit one (a retry after a lost reply then neither
    // counts a hold twice nor misses one).
    let (owner, base) = match options.owner {
        Some(owner) => {
            let base = shared
                .protocol
                .hold_count(shared.conn(), owner.as_str())
                .await?;
            (owner, base)
        }
        None => (shared.client.new_owner(), 0),
    };
    let reenter_only = options.reenter_only;
    let span = debug_span!("acquire", lock = %shared.name, owner = %owner, fair = shared.protocol.fair(), protocol = %config.protocol);
    let attempt = Attempt {
        shared,
        owner,
        lease,
        slot,
        base,
    };
    async move {
        if once {
            attempt.run_once(reenter_only).await
        } else {
            attempt.run(wait.map(|w| Instant::now() + w)).await
        }
    }
    .instrument(span)
    .await
}

/// Map a release reply for a caller that believed it held the lock.
pub(crate) fn check_release(shared: &LockShared, owner: &Owner, reply: Release) -> Result<()> {
    match reply {
        Release::Released | Release::StillHeld => {
            debug!(lock = %shared.name, %owner, still_held = reply == Release::StillHeld, "released");
            Ok(())
        }
        Release::NotOwner => Err(Error::NotOwner {
            name: shared.name.clone(),
            owner: owner.to_string(),
        }),
        Release::NotHeld => Err(Error::LockLost {
            name: shared.name.clone(),
            owner: owner.to_string(),
        }),
    }
}

/// One acquisition in progress.
struct Attempt {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Lease,
    slot: Duration,
    /// The owner's hold count before this acquisition.
    base: u32,
}

/// Takes the waiter out of the queue if the acquire future is dropped
/// between attempts.
struct LeaveQueueOnDrop {
    shared: Option<Arc<LockShared>>,
    owner: Owner,
    slot: Duration,
}

impl Drop for LeaveQueueOnDrop {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            let owner = self.owner.clone();
            let slot = self.slot;
            let inner = Arc::clone(&shared.client.inner);
            inner.spawn_cleanup(async move { shared.give_up(&owner, slot).await });
        }
    }
}

/// A fresh id for one release request (32 hex digits, Redisson's format).
pub(crate) fn new_request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Sends a release again from the background if the future that sent it is
/// dropped before it finished. The same request id makes the second send
/// answer what the first did, so the hold is released exactly once.
pub(crate) struct ReleaseOnDrop {
    pub(crate) shared: Arc<LockShared>,
    pub(crate) owner: Owner,
    pub(crate) lease: Duration,
    pub(crate) request: String,
    pub(crate) armed: bool,
}

impl ReleaseOnDrop {
    pub(crate) fn new(shared: &Arc<LockShared>, owner: &Owner, lease: Duration) -> Self {
        Self {
            shared: Arc::clone(shared),
            owner: owner.clone(),
            lease,
            request: new_request_id(),
            armed: true,
        }
    }

    /// Release (retrying through connection errors); disarms on completion.
    pub(crate) async fn run(&mut self) -> Result<Release> {
        let reply = self
            .shared
            .release_as_request(&self.owner, self.lease, &self.request)
            .await;
        self.armed = false;
        reply
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (shared, owner, lease) = (Arc::clone(&self.shared), self.owner.clone(), self.lease);
        let request = std::mem::take(&mut self.request);
        let inner = Arc::clone(&shared.client.inner);
        inner.spawn_cleanup(async move {
            if let Err(err) = shared.release_as_request(&owner, lease, &request).await {
                warn!(lock = %shared.name, %owner, error = %err, "release failed; the lock expires with its lease");
            }
        });
    }
}

/// What is needed to undo an attempt whose caller went away.
#[derive(Clone)]
struct Undo {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Duration,
    slot: Duration,
    base: u32,
}

impl Undo {
    async fn run(&self, reply: &Result<Acquire>) {
        self.shared
            .undo(&self.owner, reply, self.lease, self.slot, Some(self.base))
            .await;
    }
}

/// The caller's end of an attempt. Exactly one side undoes an attempt whose
/// reply nobody took: the sender when the receiver was already gone, or this
/// receiver's `drop` when a reply had arrived but was never read.
struct PendingReply {
    rx: oneshot::Receiver<Result<Acquire>>,
    undo: Option<Undo>,
}

impl Drop for PendingReply {
    fn drop(&mut self) {
        let Some(undo) = self.undo.take() else { return };
        // After close(), a send fails (and the sender undoes) or has already
        // happened (and the reply is here to undo).
        self.rx.close();
        if let Ok(reply) = self.rx.try_recv() {
            let inner = Arc::clone(&undo.shared.client.inner);
            inner.spawn_cleanup(async move { undo.run(&reply).await });
        }
    }
}

impl Attempt {
    /// Send one attempt from a task of its own: if the caller is dropped while
    /// the script runs, the task still sees the reply and undoes it.
    async fn send(&self, queue: bool) -> Result<Acquire> {
        let (tx, rx) = oneshot::channel();
        let undo = Undo {
            shared: Arc::clone(&self.shared),
            owner: self.owner.clone(),
            lease: self.lease.duration(),
            slot: self.slot,
            base: self.base,
        };
        let sender_undo = undo.clone();
        self.shared.client.inner.spawn_cleanup(async move {
            let Undo {
                shared,
                owner,
                lease,
                slot,
                base,
            } = &sender_undo;
            let args = AcquireArgs {
                owner: owner.as_str(),
                lease: *lease,
                slot: *slot,
                queue,
                base: Some(*base),
            };
            let reply = shared.protocol.acquire(shared.conn(), &args).await;
            // The caller is gone: undo what the attempt did.
            if let Err(reply) = tx.send(reply) {
                sender_undo.run(&reply).await;
            }
        });
        let mut pending = PendingReply {
            rx,
            undo: Some(undo),
        };
        let reply = (&mut pending.rx).await;
        // Taken: nothing to undo on drop.
        pending.undo = None;
        reply.map_err(|_| Error::Closed)?
    }

    /// The guard of a grant confirmed by a script reply sent at `sent_at`.
    fn guard(self, sent_at: Instant, token: Option<u64>) -> LockGuard {
        debug!(lock = %self.shared.name, owner = %self.owner, ?token, "granted");
        let expires = sent_at + self.lease.duration();
        LockGuard::new(self.shared, self.owner, self.lease, token, expires, false)
    }

    /// The guard of a lock handed over by a release (native): the new holder
    /// proceeds at once and claims the grant (extends it from the short
    /// handoff lease to its own) in the background.
    fn handed_over(self, token: u64, age: Duration) -> LockGuard {
        debug!(lock = %self.shared.name, owner = %self.owner, token, ?age, "handed over");
        let handoff = self.lease.duration().min(self.shared.waiter_ttl());
        let expires = Instant::now() + handoff.saturating_sub(age);
        LockGuard::new(
            self.shared,
            self.owner,
            self.lease,
            Some(token),
            expires,
            true,
        )
    }

    async fn run_once(self, reenter_only: bool) -> Result<Option<LockGuard>> {
        let sent_at = Instant::now();
        match self.send(false).await? {
            Acquire::Acquired { .. } if reenter_only => {
                // The hold to re-enter was lost; this is a new grant nobody asked for.
                let reply = self
                    .shared
                    .release(&self.owner, self.lease.duration())
                    .await;
                debug!(lock = %self.shared.name, owner = %self.owner, ?reply, "re-entry found the hold lost");
                Ok(None)
            }
            Acquire::Acquired { token } => Ok(Some(self.guard(sent_at, token))),
            Acquire::Reentered { token, .. } => Ok(Some(self.guard(sent_at, token))),
            Acquire::Busy | Acquire::Queued { .. } => Ok(None),
        }
    }

    async fn run(self, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        let config = self.shared.client.config();
        // Only a fair lock has a queue to leave.
        let mut leave_queue = LeaveQueueOnDrop {
            shared: self
                .shared
                .protocol
                .fair()
                .then(|| Arc::clone(&self.shared)),
            owner: self.owner.clone(),
            slot: self.slot,
        };
        // The first attempt goes out before subscribing, so an uncontended
        // lock costs one round trip. When it is not granted, the waiter
        // subscribes and attempts again at once: a release between the two
        // attempts is seen by the second, so no wake-up is lost. Every later
        // attempt marks the channel seen before it is sent.
        let mut subscription: Option<Subscription> = None;
        let mut failing_since: Option<Instant> = None;
        let mut backoff = Duration::from_millis(20);
        let mut idle_poll = Duration::from_millis(10);
        loop {
            if let Some(subscription) = subscription.as_mut() {
                subscription.mark_seen();
            }
            let sent_at = Instant::now();
            let reply = self.send(true).await;
            let pause = match reply {
                Ok(Acquire::Acquired { token }) => {
                    leave_queue.shared = None;
                    return Ok(Some(self.guard(sent_at, token)));
                }
                Ok(Acquire::Reentered { token, .. }) => {
                    leave_queue.shared = None;
                    return Ok(Some(self.guard(sent_at, token)));
                }
                Ok(Acquire::Queued { ttl, position }) => {
                    failing_since = None;
                    backoff = Duration::from_millis(20);
                    if let Some(position) = position {
                        debug!(lock = %self.shared.name, owner = %self.owner, position, "waiting in queue");
                    }
                    if ttl.is_zero() {
                        // Free but not our turn: the head is about to take it,
                        // or is dead and will be purged. Poll, backing off.
                        let pause = idle_poll;
                        idle_poll = (idle_poll * 2).min(Duration::from_millis(500));
                        pause
                    } else {
                        idle_poll = Duration::from_millis(10);
                        ttl
                    }
                }
                Ok(Acquire::Busy) => Duration::from_millis(100),
                Err(err) if err.is_connection() => {
                    let since = *failing_since.get_or_insert(sent_at);
                    let out_of_budget = since.elapsed() + backoff >= config.retry_budget
                        || deadline.is_some_and(|d| Instant::now() + backoff >= d);
                    if out_of_budget {
                        warn!(lock = %self.shared.name, owner = %self.owner, error = %err, "giving up: Redis unreachable");
                        return Err(err);
                    }
                    debug!(lock = %self.shared.name, owner = %self.owner, error = %err, "attempt failed; retrying");
                    let pause = backoff;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(err) => return Err(err),
            };
            let Some(subscription) = subscription.as_mut() else {
                let channel = self.shared.protocol.wake_channel(self.owner.as_str());
                let wakeups = &self.shared.client.inner.wakeups;
                subscription = Some(wakeups.subscribe(&channel, config.response_timeout).await);
                continue;
            };
            let pause = match deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        leave_queue.shared = None;
                        self.shared.give_up(&self.owner, self.slot).await;
                        debug!(lock = %self.shared.name, owner = %self.owner, "wait budget ran out");
                        return Ok(None);
                    }
                    pause.min(left)
                }
                None => pause,
            };
            if let Woken::Message(payload) = subscription.wait(pause).await {
                // Direct handoff (native): the lock is ours, no call needed,
                // unless the message was read late (this process was paused,
                // say): the short handoff lease may be over, so the next
                // attempt confirms (and claims) it instead.
                if let Some(grant) = parse_grant(&payload) {
                    let handoff = self.lease.duration().min(self.shared.waiter_ttl());
                    let age_ms = self.shared.conn().server_now_estimate_ms() - grant.granted_at_ms;
                    if (-1000..(handoff.as_millis() as i64 / 2)).contains(&age_ms) {
                        leave_queue.shared = None;
                        let age = Duration::from_millis(age_ms.max(0) as u64);
                        return Ok(Some(self.handed_over(grant.token, age)));
                    }
                    debug!(lock = %self.shared.name, owner = %self.owner, age_ms, "handoff read late; confirming it");
                }
            }
        }
    }
}
