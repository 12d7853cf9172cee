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
use crate::protocol::native::{Grant, refresh_interval};
use crate::protocol::{
    Acquire, AcquireArgs, LockInfo, ProtocolLock, Release, ReleaseSettings, Scope,
};
use crate::wakeup::{Subscription, Woken};
use crate::watchdog::HoldKind;

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

    /// Release one hold of `owner` (under native, only of the acquisition
    /// with `token`), retrying through connection errors within the retry
    /// budget with one request id (the unlock cache makes the retry answer
    /// what the first call did).
    pub(crate) async fn release(
        &self,
        owner: &Owner,
        lease: Duration,
        token: Option<u64>,
    ) -> Result<Release> {
        let request = new_request_id();
        let scope = Scope { token, nonce: None };
        self.release_as_request(owner, lease, &request, &scope)
            .await
    }

    /// [`release`](Self::release) under a given request id: a second call
    /// with the same id answers what the first did and changes nothing.
    pub(crate) async fn release_as_request(
        &self,
        owner: &Owner,
        lease: Duration,
        request: &str,
        scope: &Scope<'_>,
    ) -> Result<Release> {
        let config = self.client.config();
        let settings = ReleaseSettings {
            lease,
            waiter_ttl: config.waiter_ttl,
            // Longer than the last retry of this request can come: a retry
            // within the budget, re-sent once more from the background
            // after a drop, each call bounded by the response timeout.
            cache: (2 * (config.retry_budget + config.response_timeout))
                .max(Duration::from_secs(20)),
        };
        self.retrying(|| {
            self.protocol
                .release(self.conn(), owner.as_str(), settings, request, scope)
        })
        .await
    }

    /// Leave the queue, retrying through connection errors within the retry
    /// budget; logged when it still fails (the entry then expires: native
    /// after the waiter ttl, redisson after its slot).
    pub(crate) async fn give_up(&self, owner: &Owner, slot: Duration, nonce: &str) {
        let left = self
            .retrying(|| {
                self.protocol
                    .give_up(self.conn(), owner.as_str(), slot, nonce)
            })
            .await;
        if let Err(err) = left {
            warn!(lock = %self.name, %owner, error = %err, "could not leave the queue; the entry expires on its own");
        }
    }

    /// Run `call` again after connection errors and refusals of a busy or
    /// failing-over server, with backoff, while the retry budget lasts. Only
    /// for calls that are safe to repeat.
    pub(crate) async fn retrying<T, F, Fut>(&self, mut call: F) -> Result<T>
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
        base: u32,
        nonce: &str,
    ) {
        match reply {
            Ok(Acquire::Acquired { token } | Acquire::Reentered { token, .. }) => {
                debug!(lock = %self.name, %owner, "grant raced a cancellation; releasing it");
                if let Err(err) = self.release(owner, lease, *token).await {
                    warn!(lock = %self.name, %owner, error = %err, "could not release a cancelled grant; it expires with its lease");
                }
            }
            Ok(Acquire::Queued { .. }) => self.give_up(owner, slot, nonce).await,
            Ok(Acquire::Busy) => {}
            Err(_) => {
                // Unknown outcome: leave the queue, and release the hold the
                // attempt may have added (the count is above its base). A
                // fresh acquisition's hold is released only if it is this
                // acquisition's (native): the owner may have acquired again.
                self.give_up(owner, slot, nonce).await;
                match self.protocol.hold_count(self.conn(), owner.as_str()).await {
                    Ok(count) if count > base => {
                        let scope = Scope {
                            token: None,
                            nonce: (base == 0).then_some(nonce),
                        };
                        let request = new_request_id();
                        let _ = self
                            .release_as_request(owner, lease, &request, &scope)
                            .await;
                    }
                    _ => {}
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
/// skipped once it stopped refreshing for its waiter ttl (native,
/// [`ClientConfig::waiter_ttl`](crate::ClientConfig::waiter_ttl)), or once
/// its waiter slot ran out (redisson, Redisson's rule,
/// [`ClientConfig::waiter_slot`](crate::ClientConfig::waiter_slot)).
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
    /// lock was released. A fairlock holder's client is told at once (on its
    /// revocation channel) and checks its holds: its `lost()` resolves
    /// within a round trip. A Redisson (Java) holder learns at its next
    /// renewal.
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
        let mut release = ReleaseOnDrop::new(&self.shared, owner, lease, None);
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
    let inner = Arc::clone(&shared.client.inner);
    // Counted until this acquisition is over, so that `shutdown` can wait
    // for it to leave the queue or undo its grant.
    let _active = inner.enter_acquisition()?;
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
    let started = Instant::now();
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
            let count = shared.protocol.hold_count(shared.conn(), owner.as_str());
            // Within the wait budget too: a slow reply must not stretch it.
            let base = match wait {
                Some(wait) => match tokio::time::timeout_at(started + wait, count).await {
                    Ok(base) => base?,
                    Err(_) => return Ok(None),
                },
                None => count.await?,
            };
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
        nonce: new_request_id(),
    };
    let acquired = async move {
        let acquired = if once {
            attempt.run_once(reenter_only).await?
        } else {
            attempt.run(wait.map(|w| started + w)).await?
        };
        match acquired {
            // Shut down meanwhile: the hold must not outlive `shutdown`.
            Some(guard) if inner.is_closed() => {
                let _ = guard.unlock().await;
                Err(Error::Closed)
            }
            other => Ok(other),
        }
    };
    acquired.instrument(span).await
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

/// The shortest time between two attempts of one waiter woken by a message
/// that is not a grant to it (`free`, Redisson's `0`, or a forgery).
const MIN_ATTEMPT_GAP: Duration = Duration::from_millis(25);

/// One acquisition in progress.
struct Attempt {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Lease,
    slot: Duration,
    /// The owner's hold count before this acquisition.
    base: u32,
    /// This acquisition's secret: sent with its queue entry, it proves a
    /// grant message genuine (native).
    nonce: String,
}

/// A point on the server's clock and the local instant just before the
/// script that read it was sent: the script ran at or after `sent_at`.
/// Server times in later messages map to local instants no earlier than
/// `sent_at + (t - server_ms)`, with no client clock involved.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    server_ms: i64,
    sent_at: Instant,
}

impl Anchor {
    /// The earliest local instant at which `grant` may have expired on the
    /// server (`None` when it had before the anchoring call ran).
    fn grant_expiry(&self, grant: &Grant) -> Option<Instant> {
        let ends_at = grant
            .granted_at_ms
            .checked_add(i64::try_from(grant.expire_ms).ok()?)?;
        let after_anchor = u64::try_from(ends_at.checked_sub(self.server_ms)?).ok()?;
        self.sent_at
            .checked_add(Duration::from_millis(after_anchor))
    }
}

/// Takes the waiter out of the queue if the acquire future is dropped
/// between attempts (cancelled, timed out, or the client shut down).
struct LeaveQueueOnDrop {
    shared: Option<Arc<LockShared>>,
    owner: Owner,
    slot: Duration,
    nonce: String,
}

impl LeaveQueueOnDrop {
    /// The waiter left the queue by itself (it was granted the lock).
    fn disarm(&mut self) {
        self.shared = None;
    }

    /// Leave the queue now, from a background task (it goes on whatever
    /// happens to the caller); `None` when there is nothing to leave.
    fn leave(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        let shared = self.shared.take()?;
        let (owner, slot, nonce) = (self.owner.clone(), self.slot, self.nonce.clone());
        let inner = Arc::clone(&shared.client.inner);
        Some(inner.spawn_cleanup(async move { shared.give_up(&owner, slot, &nonce).await }))
    }
}

impl Drop for LeaveQueueOnDrop {
    fn drop(&mut self) {
        self.leave();
    }
}

/// A fresh id for one release request (32 hex digits, Redisson's format),
/// also used as an acquisition's secret.
pub(crate) fn new_request_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// Sends a release again from the background if the future that sent it is
/// dropped before it finished. The same request id makes the second send
/// answer what the first did, so the hold is released exactly once.
pub(crate) struct ReleaseOnDrop {
    shared: Arc<LockShared>,
    owner: Owner,
    lease: Duration,
    token: Option<u64>,
    request: String,
    armed: bool,
}

impl ReleaseOnDrop {
    pub(crate) fn new(
        shared: &Arc<LockShared>,
        owner: &Owner,
        lease: Duration,
        token: Option<u64>,
    ) -> Self {
        Self {
            shared: Arc::clone(shared),
            owner: owner.clone(),
            lease,
            token,
            request: new_request_id(),
            armed: true,
        }
    }

    /// Release (retrying through connection errors); disarms on completion.
    pub(crate) async fn run(&mut self) -> Result<Release> {
        let reply = self
            .shared
            .release_as_request(
                &self.owner,
                self.lease,
                &self.request,
                &Scope {
                    token: self.token,
                    nonce: None,
                },
            )
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
        let (shared, owner) = (Arc::clone(&self.shared), self.owner.clone());
        let (lease, token) = (self.lease, self.token);
        let request = std::mem::take(&mut self.request);
        let inner = Arc::clone(&shared.client.inner);
        inner.spawn_cleanup(async move {
            let scope = Scope { token, nonce: None };
            if let Err(err) = shared
                .release_as_request(&owner, lease, &request, &scope)
                .await
            {
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
    nonce: String,
}

impl Undo {
    async fn run(&self, reply: &Result<Acquire>) {
        self.shared
            .undo(
                &self.owner,
                reply,
                self.lease,
                self.slot,
                self.base,
                &self.nonce,
            )
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
            nonce: self.nonce.clone(),
        };
        let sender_undo = undo.clone();
        self.shared.client.inner.spawn_cleanup(async move {
            let Undo {
                shared,
                owner,
                lease,
                slot,
                base,
                nonce,
            } = &sender_undo;
            let args = AcquireArgs {
                owner: owner.as_str(),
                lease: *lease,
                slot: *slot,
                queue,
                base: *base,
                nonce,
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
    fn guard(&self, sent_at: Instant, token: Option<u64>, kind: HoldKind) -> LockGuard {
        debug!(lock = %self.shared.name, owner = %self.owner, ?token, "granted");
        let expires = sent_at + self.lease.duration();
        LockGuard::new(
            Arc::clone(&self.shared),
            self.owner.clone(),
            self.lease,
            token,
            expires,
            kind,
            false,
        )
    }

    /// The guard of a lock handed over by a release (native): the new holder
    /// proceeds at once, believing the grant no longer than `expires` (when
    /// the server may let it expire), and claims it (extends it from the
    /// short handoff lease to its own) in the background.
    fn handed_over(&self, token: u64, expires: Instant) -> LockGuard {
        debug!(lock = %self.shared.name, owner = %self.owner, token, "handed over");
        LockGuard::new(
            Arc::clone(&self.shared),
            self.owner.clone(),
            self.lease,
            Some(token),
            expires,
            HoldKind::Fresh,
            true,
        )
    }

    /// The last attempt's outcome is unknown (its reply was lost) and no
    /// attempt will follow to reconcile it: undo whatever it may have done
    /// (leave the queue; release a hold it may have added), from the
    /// background.
    fn undo_unknown_outcome(&self) {
        let undo = Undo {
            shared: Arc::clone(&self.shared),
            owner: self.owner.clone(),
            lease: self.lease.duration(),
            slot: self.slot,
            base: self.base,
            nonce: self.nonce.clone(),
        };
        let inner = Arc::clone(&self.shared.client.inner);
        inner.spawn_cleanup(async move { undo.run(&Err(Error::Closed)).await });
    }

    async fn run_once(self, reenter_only: bool) -> Result<Option<LockGuard>> {
        let sent_at = Instant::now();
        let reply = match self.send(false).await {
            Err(err) if err.is_connection() => {
                self.undo_unknown_outcome();
                return Err(err);
            }
            reply => reply?,
        };
        match reply {
            Acquire::Acquired { token } if reenter_only => {
                // The hold to re-enter was lost; this is a new grant nobody asked for.
                let reply = self
                    .shared
                    .release(&self.owner, self.lease.duration(), token)
                    .await;
                debug!(lock = %self.shared.name, owner = %self.owner, ?reply, "re-entry found the hold lost");
                Ok(None)
            }
            Acquire::Acquired { token } => Ok(Some(self.guard(sent_at, token, HoldKind::Fresh))),
            Acquire::Reentered { token, .. } => {
                Ok(Some(self.guard(sent_at, token, HoldKind::Reentry)))
            }
            Acquire::Busy | Acquire::Queued { .. } => Ok(None),
        }
    }

    /// Wait until granted, until `deadline`, or until the client shuts down.
    /// The deadline bounds everything, the calls in flight and the
    /// subscription included: when it passes, the wait is dropped where it
    /// is, and leaving the queue (or undoing a grant that raced it) goes on
    /// in the background.
    async fn run(self, deadline: Option<Instant>) -> Result<Option<LockGuard>> {
        let closing = self.shared.client.inner.closing();
        // Only a fair lock has a queue to leave.
        let mut leave_queue = LeaveQueueOnDrop {
            shared: self
                .shared
                .protocol
                .fair()
                .then(|| Arc::clone(&self.shared)),
            owner: self.owner.clone(),
            slot: self.slot,
            nonce: self.nonce.clone(),
        };
        // The last connection error, while attempts keep failing: a wait
        // that runs out then reports it instead of a plain "not acquired".
        let mut failing: Option<Error> = None;
        let outcome = {
            let waiting = async {
                let wait = self.wait(&mut failing, &mut leave_queue);
                match deadline {
                    Some(deadline) => tokio::time::timeout_at(deadline, wait).await.ok(),
                    None => Some(wait.await),
                }
            };
            tokio::select! {
                outcome = waiting => outcome,
                () = closing.cancelled() => return Err(Error::Closed),
            }
        };
        match outcome {
            Some(Err(err)) if err.is_connection() => {
                // Gave up after the retry budget: the last attempt may have
                // succeeded on the server.
                self.undo_unknown_outcome();
                Err(err)
            }
            Some(granted) => granted.map(Some),
            None => {
                debug!(lock = %self.shared.name, owner = %self.owner, "wait budget ran out");
                // Leave the queue: usually done within a round trip, but
                // the caller waits one response timeout at most; the rest
                // goes on in the background.
                if let Some(leaving) = leave_queue.leave() {
                    let limit = self.shared.client.config().response_timeout;
                    let _ = tokio::time::timeout(limit, leaving).await;
                }
                match failing {
                    Some(err) => {
                        self.undo_unknown_outcome();
                        Err(err)
                    }
                    None => Ok(None),
                }
            }
        }
    }

    async fn wait(
        &self,
        failing: &mut Option<Error>,
        leave_queue: &mut LeaveQueueOnDrop,
    ) -> Result<LockGuard> {
        let config = self.shared.client.config();
        // A lost wake-up costs at most this long, under every protocol. Also
        // at most half this waiter's lease: a grant lasts min(lease, waiter
        // ttl) until claimed, and a live waiter whose grant message was lost
        // must claim it by its next call, before the grant expires and the
        // waiter loses its place.
        let poll = refresh_interval(config.waiter_ttl)
            .min(self.lease.duration() / 2)
            .max(Duration::from_millis(1));
        // The first attempt goes out before subscribing, so an uncontended
        // lock costs one round trip. When it is not granted, the waiter
        // subscribes and attempts again at once: a release between the two
        // attempts is seen by the second, so no wake-up is lost. Every later
        // attempt marks the channel seen before it is sent.
        let mut subscription: Option<Subscription> = None;
        let mut failing_since: Option<Instant> = None;
        let mut backoff = Duration::from_millis(20);
        let mut idle_poll = Duration::from_millis(10);
        let mut anchor: Option<Anchor> = None;
        // When the last attempt woken by a plain message (not a grant) began.
        let mut message_woken_at: Option<Instant> = None;
        loop {
            if let Some(subscription) = subscription.as_mut() {
                subscription.mark_seen();
            }
            let sent_at = Instant::now();
            let reply = self.send(true).await;
            let pause = match reply {
                Ok(Acquire::Acquired { token }) => {
                    leave_queue.disarm();
                    return Ok(self.guard(sent_at, token, HoldKind::Fresh));
                }
                Ok(Acquire::Reentered { token, .. }) => {
                    leave_queue.disarm();
                    return Ok(self.guard(sent_at, token, HoldKind::Reentry));
                }
                Ok(Acquire::Queued {
                    ttl,
                    position,
                    server_ms,
                }) => {
                    *failing = None;
                    failing_since = None;
                    backoff = Duration::from_millis(20);
                    anchor = server_ms.map(|server_ms| Anchor { server_ms, sent_at });
                    if let Some(position) = position {
                        debug!(lock = %self.shared.name, owner = %self.owner, position, "waiting in queue");
                    }
                    let pause = if ttl.is_zero() {
                        // Free but not our turn: the head is about to take it,
                        // or is dead and will be purged. Poll, backing off.
                        let pause = idle_poll;
                        idle_poll = (idle_poll * 2).min(Duration::from_millis(500));
                        pause
                    } else {
                        idle_poll = Duration::from_millis(10);
                        ttl
                    };
                    pause.min(poll)
                }
                Ok(Acquire::Busy) => Duration::from_millis(100),
                Err(err) if err.is_connection() => {
                    let since = *failing_since.get_or_insert(sent_at);
                    if since.elapsed() + backoff >= config.retry_budget {
                        warn!(lock = %self.shared.name, owner = %self.owner, error = %err, "giving up: Redis unreachable or refusing service");
                        return Err(err);
                    }
                    debug!(lock = %self.shared.name, owner = %self.owner, error = %err, "attempt failed; retrying");
                    *failing = Some(err);
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
            // The pause runs from when the attempt was sent, so refreshes
            // reach the server every `poll` however long replies take.
            let pause = (sent_at + pause).saturating_duration_since(Instant::now());
            if let Woken::Message(payload) = subscription.wait(pause).await {
                // Direct handoff (native): a grant message that proves it was
                // written for this acquisition makes it the holder with no
                // further call, unless it may be half over (read late: this
                // process was paused, say, or pub/sub lagged); then the next
                // attempt confirms (and claims) it instead. Forged or stale
                // messages are only wake-ups.
                if let Some(grant) = self.shared.protocol.verify_grant(&payload, &self.nonce) {
                    let half = Duration::from_millis(grant.expire_ms / 2);
                    match anchor.and_then(|anchor| anchor.grant_expiry(&grant)) {
                        Some(expires)
                            if expires.saturating_duration_since(Instant::now()) > half =>
                        {
                            leave_queue.disarm();
                            return Ok(self.handed_over(grant.token, expires));
                        }
                        _ => {
                            debug!(lock = %self.shared.name, owner = %self.owner, ?grant, "handoff read late; confirming it");
                        }
                    }
                } else {
                    // Any other message is only a wake-up, and anyone can
                    // publish one: the first goes straight to an attempt,
                    // but back-to-back ones (a flood) make a waiter call at
                    // most once per MIN_ATTEMPT_GAP, not once per round trip.
                    if let Some(previous) = message_woken_at {
                        tokio::time::sleep_until(previous + MIN_ATTEMPT_GAP).await;
                    }
                    message_woken_at = Some(Instant::now());
                }
            } else {
                message_woken_at = None;
            }
        }
    }
}
