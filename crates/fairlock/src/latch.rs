//! The count-down latch: [`CountDownLatch`], set to a count, counted down
//! by any client, waited for until it reaches 0.
//!
//! A wait reads the count; while it is above 0 it subscribes to the
//! latch's channel through the client's wake-up router, reads again (an
//! opening published before the subscription is not missed), then waits
//! for a message or [`recheck_interval`] and reads again: a message only
//! wakes (anyone can publish anything), the read decides. Under `native`
//! a read that finds another round than the first read did (the latch
//! opened and was set again meanwhile) returns too.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::WakePacer;
use crate::config::check_duration;
use crate::core::ClientCore;
use crate::error::{Error, Result};
use crate::events::Event;
use crate::protocol::Protocol;
use crate::protocol::latch::{CountedDown, LatchObject, LatchState};

/// The longest count a latch is set to: Lua's numbers are exact up to
/// 2^53.
///
/// ```no_run
/// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
/// assert!(latch.try_set_count(fairlock::MAX_LATCH_COUNT + 1).await.is_err());
/// # Ok(()) }
/// ```
pub const MAX_LATCH_COUNT: u64 = (1 << 53) - 1;

/// The longest party id of [`CountDownLatch::count_down_as`], in bytes.
///
/// ```no_run
/// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
/// let too_long = "p".repeat(fairlock::MAX_PARTY_LEN + 1);
/// assert!(latch.count_down_as(&too_long).await.is_err());
/// # Ok(()) }
/// ```
pub const MAX_PARTY_LEN: usize = 256;

/// The longest a waiter goes without reading the count when no message
/// woke it: a third of the client's waiter ttl
/// ([`ClientConfig::waiter_ttl`](crate::ClientConfig::waiter_ttl), 6 s by
/// default, so 2 s). A lost opening message costs a waiter at most this.
fn recheck_interval(core: &ClientCore) -> Duration {
    crate::protocol::refresh_interval(core.config().waiter_ttl)
}

/// A distributed count-down latch: set to a count with
/// [`try_set_count`](Self::try_set_count), counted down by any client
/// ([`count_down`](Self::count_down), or once per party with
/// [`count_down_as`](Self::count_down_as)), and waited for until the count
/// reaches 0 ([`wait`](Self::wait), [`wait_for`](Self::wait_for)). Get one
/// with [`LockClient::count_down_latch`](crate::LockClient::count_down_latch).
///
/// Under the `native` protocol its keys are `fairlock:{NAME}:latch` (a
/// hash: count, expiry, round) and `fairlock:{NAME}:latch:parties`, its
/// channel `fairlock:{NAME}:latch:open`; an abandoned latch expires
/// ([`DEFAULT_EXPIRY`](Self::DEFAULT_EXPIRY) after its last set or
/// count-down). Under `redisson` it is Redisson's `RCountDownLatch`
/// (`redisson.getCountDownLatch(name)`), byte for byte: the count under the
/// name, messages on `redisson_countdownlatch__channel__{NAME}`; Java
/// services share it, and it never expires (Redisson's has no expiry).
///
/// Promises: a wait returns only once the count has been 0 (reached by
/// count-downs, or the latch deleted or expired) since the wait began or
/// is 0 when it begins; once it reaches 0, every waiter returns, woken by
/// one message, or at most [`ClientConfig::waiter_ttl`](crate::ClientConfig::waiter_ttl)
/// / 3 (2 s by default) later when the message was lost.
///
/// ```no_run
/// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
/// let ready = client.count_down_latch("workers-ready")?;
/// ready.try_set_count(3).await?;
/// // ... in each of three workers, once it is ready:
/// ready.count_down_as("worker-1").await?;
/// // ... and wherever the work must wait for all three:
/// ready.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct CountDownLatch {
    shared: Arc<Shared>,
}

struct Shared {
    core: Arc<ClientCore>,
    object: LatchObject,
}

/// A latch's state, as [`CountDownLatch::inspect`] read it.
///
/// ```no_run
/// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
/// let info: fairlock::LatchInfo = latch.inspect().await?;
/// if let Some(left) = info.expires_in {
///     println!("{}: {} to go, expires in {left:?}", info.name, info.count);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchInfo {
    /// The latch's name.
    pub name: String,
    /// The protocol it was read under.
    pub protocol: Protocol,
    /// The count; 0 when the latch is open (does not exist).
    pub count: u64,
    /// How many count-downs this round recorded (`native`: each
    /// [`count_down_as`](CountDownLatch::count_down_as) party once, each
    /// [`count_down`](CountDownLatch::count_down) call once; `None` under
    /// `redisson`, which records none).
    pub parties: Option<u64>,
    /// How long its keys live on unless counted down; `None` when open
    /// or when they have no expiry (a Redisson latch has none, unless
    /// something else set one).
    pub expires_in: Option<Duration>,
}

impl CountDownLatch {
    /// How long a `native` latch lives after its last set or count-down
    /// when [`try_set_count`](Self::try_set_count) sets it: 24 hours. A
    /// latch nobody counts down for that long is deleted by Redis, which
    /// opens it: its waiters return.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// use fairlock::CountDownLatch;
    /// // Twice the default, for a batch that may stall for a day.
    /// latch.try_set_count_with_expiry(8, CountDownLatch::DEFAULT_EXPIRY * 2).await?;
    /// # Ok(()) }
    /// ```
    pub const DEFAULT_EXPIRY: Duration = Duration::from_secs(24 * 3600);

    /// The latch `name`, its name checked: see
    /// [`LockClient::count_down_latch`](crate::LockClient::count_down_latch).
    pub(crate) fn new(core: Arc<ClientCore>, name: &str) -> Result<Self> {
        crate::name::validate(name)?;
        if core.dialect().protocol() == Protocol::Redisson {
            crate::name::validate_redisson(name)?;
            // Redisson's channel is `..._channel__{NAME}` whatever NAME
            // holds: for a name with braces its hash tag is not the name's,
            // and a cluster refuses the script's publication to another slot.
            if core.conn().is_cluster() && name.contains(['{', '}']) {
                return Err(Error::InvalidName {
                    name: crate::error::truncate_name(name),
                    reason: "on a cluster a Redisson count-down latch's channel \
                             (redisson_countdownlatch__channel__{NAME}) is in another slot \
                             than a name with braces",
                });
            }
        }
        let object = match core.dialect().protocol() {
            Protocol::Native => LatchObject::native(name),
            Protocol::Redisson => LatchObject::redisson(name),
        };
        Ok(Self {
            shared: Arc::new(Shared { core, object }),
        })
    }

    /// The latch's name.
    ///
    /// ```no_run
    /// # fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
    /// assert_eq!(client.count_down_latch("ready")?.name(), "ready");
    /// # Ok(()) }
    /// ```
    pub fn name(&self) -> &str {
        self.shared.object.name()
    }

    /// Set the count to `count` if the latch is open (does not exist);
    /// Redisson's `trySetCount`. `true` when set, `false` when it is
    /// counting down already (left alone). A `native` latch set here
    /// expires [`DEFAULT_EXPIRY`](Self::DEFAULT_EXPIRY) after its last set
    /// or count-down.
    ///
    /// ```no_run
    /// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
    /// let latch = client.count_down_latch("batch-42")?;
    /// if !latch.try_set_count(10).await? {
    ///     println!("already counting down: {} left", latch.count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for a `count`
    /// of 0 or above [`MAX_LATCH_COUNT`]; [`Error::NotALock`](crate::Error::NotALock)
    /// or [`Error::WrongType`](crate::Error::WrongType) for other data
    /// under the latch's keys (nothing written);
    /// [`Error::Connection`](crate::Error::Connection) when the call got no
    /// answer: it is not sent again (it **may have set the count**: read
    /// it with [`count`](Self::count)).
    ///
    /// # Cancel safety
    /// Dropping the future after the call was sent may leave the count
    /// set; nothing else.
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        self.try_set(count, Self::DEFAULT_EXPIRY).await
    }

    /// As [`try_set_count`](Self::try_set_count), the `native` latch's keys
    /// living `expiry` after its last set or count-down (at least 1 ms, at
    /// most [`MAX_DURATION`](crate::MAX_DURATION)).
    ///
    /// ```no_run
    /// # async fn demo(client: fairlock::LockClient) -> fairlock::Result<()> {
    /// use std::time::Duration;
    /// let latch = client.count_down_latch("nightly-export")?;
    /// latch.try_set_count_with_expiry(4, Duration::from_secs(3600)).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`try_set_count`](Self::try_set_count);
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for an
    /// `expiry` out of range; [`Error::InvalidConfig`](crate::Error::InvalidConfig)
    /// under `redisson` (Redisson's latch has no expiry).
    ///
    /// # Cancel safety
    /// As [`try_set_count`](Self::try_set_count).
    pub async fn try_set_count_with_expiry(&self, count: u64, expiry: Duration) -> Result<bool> {
        check_duration("latch expiry", expiry)?;
        if matches!(self.shared.object, LatchObject::Redisson { .. }) {
            return Err(Error::InvalidConfig(format!(
                "count-down latch {:?}: Redisson's latch has no expiry (use try_set_count)",
                self.name()
            )));
        }
        self.try_set(count, expiry).await
    }

    async fn try_set(&self, count: u64, expiry: Duration) -> Result<bool> {
        if count == 0 || count > MAX_LATCH_COUNT {
            return Err(Error::InvalidConfig(format!(
                "count-down latch {:?}: a count of {count} (from 1 to {MAX_LATCH_COUNT})",
                self.name()
            )));
        }
        // Sent once: sent again after a lost reply, it could set a latch
        // that was set, counted down to 0 and opened in between.
        let shared = &self.shared;
        let round = uuid::Uuid::new_v4().simple().to_string();
        shared
            .object
            .try_set(shared.core.conn(), count, expiry, &round)
            .await
    }

    /// Count down once; Redisson's `countDown`. Returns the count after
    /// it. Reaching 0 opens the latch: its keys are deleted and one message
    /// wakes every waiter. On an open latch it does nothing (0).
    ///
    /// Under `native` the call counts once however often it is sent: it
    /// counts as a party of its own (a fresh id of 33 bytes, which no
    /// [`count_down_as`](Self::count_down_as) party can spell, kept in the
    /// parties' set until the latch opens, is deleted or expires), so a call
    /// without an answer is sent again within the retry budget, and a
    /// connection that sends it again by itself (a Redis Cluster's, after a
    /// dropped connection) counts nothing more. Under `redisson` it is
    /// Redisson's script, sent once.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// let left = latch.count_down().await?;
    /// println!("{left} to go");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) for other data under
    /// the latch's keys (nothing written);
    /// [`Error::Connection`](crate::Error::Connection) when the call got no
    /// answer (`native`: within the retry budget): it **may have counted**,
    /// once. Under `redisson` on a Redis Cluster, the cluster connection
    /// sends a call again by itself after a dropped connection, so a
    /// Redisson count-down whose reply was lost may count twice (as it may
    /// in Redisson's own client, which retries too).
    ///
    /// # Cancel safety
    /// Dropping the future after the call was sent may or may not count
    /// (once).
    pub async fn count_down(&self) -> Result<u64> {
        let shared = &self.shared;
        let conn = shared.core.conn();
        if matches!(shared.object, LatchObject::Redisson { .. }) {
            let done = shared.object.count_down(conn, "").await?;
            return Ok(self.recorded(&done));
        }
        // A party id no caller's can be (they hold no control character).
        let party = format!("\u{1}{}", crate::hold::new_request_id());
        let done = shared
            .core
            .retry()
            .run(|| shared.object.count_down(conn, &party))
            .await?;
        Ok(self.recorded(&done))
    }

    /// Count down once as `party`, at most once per party per setting of
    /// the latch (`native` only): a call sent again after a lost reply, or
    /// repeated by the party, counts nothing more. Returns the count after
    /// it. The parties are kept in a set beside the count, at most one per
    /// count, and deleted with the latch (at 0, at
    /// [`delete`](Self::delete) or at its expiry). A call sent again after
    /// the latch opened and was set again counts in the new setting.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// latch.count_down_as("shard-7").await?;
    /// latch.count_down_as("shard-7").await?; // counts nothing more
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidConfig`](crate::Error::InvalidConfig) for an empty
    /// `party`, one above [`MAX_PARTY_LEN`] bytes or with a control
    /// character, and under `redisson` (Redisson's latch records no
    /// parties); as [`count_down`](Self::count_down) otherwise, but a call
    /// without an answer is sent again within the retry budget.
    ///
    /// # Cancel safety
    /// Dropping the future after the call was sent may or may not count;
    /// calling it again counts at most once in all.
    pub async fn count_down_as(&self, party: &str) -> Result<u64> {
        if matches!(self.shared.object, LatchObject::Redisson { .. }) {
            return Err(Error::InvalidConfig(format!(
                "count-down latch {:?}: Redisson's latch records no parties (use count_down)",
                self.name()
            )));
        }
        if party.is_empty() || party.len() > MAX_PARTY_LEN || party.chars().any(char::is_control) {
            return Err(Error::InvalidConfig(format!(
                "count-down latch {:?}: a party id is 1 to {MAX_PARTY_LEN} bytes without \
                 control characters",
                self.name()
            )));
        }
        let shared = &self.shared;
        let conn = shared.core.conn();
        let done = shared
            .core
            .retry()
            .run(|| shared.object.count_down(conn, party))
            .await?;
        Ok(self.recorded(&done))
    }

    /// Record an answered count-down; its count after it.
    fn recorded(&self, done: &CountedDown) -> u64 {
        self.shared.core.events().record(Event::LatchCountedDown {
            latch: self.name(),
            counted: done.counted,
        });
        done.count
    }

    /// The count now; 0 when the latch is open (Redisson's `getCount`; a
    /// Redisson latch set to a negative count reads 0).
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// println!("{} to go", latch.count().await?);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::NotALock`](crate::Error::NotALock) or
    /// [`Error::WrongType`](crate::Error::WrongType) for other data under
    /// the latch's keys, or a count that is not one;
    /// [`Error::Connection`](crate::Error::Connection).
    ///
    /// # Cancel safety
    /// Safe to drop: it only reads.
    pub async fn count(&self) -> Result<u64> {
        Ok(self.state(None).await?.count)
    }

    /// The latch's state: count, parties, expiry.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// let info = latch.inspect().await?;
    /// println!("{}: {} to go", info.name, info.count);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`count`](Self::count).
    ///
    /// # Cancel safety
    /// Safe to drop: it only reads.
    pub async fn inspect(&self) -> Result<LatchInfo> {
        let state = self.state(None).await?;
        let native = matches!(self.shared.object, LatchObject::Native { .. });
        Ok(LatchInfo {
            name: self.name().to_owned(),
            protocol: self.shared.core.dialect().protocol(),
            count: state.count,
            parties: native.then_some(state.parties),
            expires_in: state.ttl,
        })
    }

    /// Delete the latch, which opens it (its waiters return); Redisson's
    /// `delete`. `true` when there was one.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// latch.delete().await?;
    /// assert_eq!(latch.count().await?, 0);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`count_down`](Self::count_down): other data under the latch's
    /// keys is refused, never deleted.
    ///
    /// # Cancel safety
    /// Dropping the future after the call was sent may or may not delete.
    pub async fn delete(&self) -> Result<bool> {
        let shared = &self.shared;
        shared.object.delete(shared.core.conn()).await
    }

    /// Wait until the count is 0; Redisson's `await`.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// latch.wait().await?;
    /// println!("everyone is ready");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`count`](Self::count) (a read that fails on the connection is
    /// sent again within the retry budget);
    /// [`Error::Closed`](crate::Error::Closed) after the client shut down.
    ///
    /// # Cancel safety
    /// Safe to drop: a wait only reads and listens; dropping it
    /// unsubscribes (the last waiter of the channel leaves it) and leaves
    /// nothing on the server.
    pub async fn wait(&self) -> Result<()> {
        match self.wait_within(None).await? {
            true => Ok(()),
            false => Err(Error::Protocol("a wait without a bound ended".into())),
        }
    }

    /// Wait at most `timeout` until the count is 0; Redisson's
    /// `await(timeout)`. `true` when it reached 0, `false` when the time
    /// ran out first. A zero `timeout` reads the count once.
    ///
    /// ```no_run
    /// # async fn demo(latch: fairlock::CountDownLatch) -> fairlock::Result<()> {
    /// use std::time::Duration;
    /// if !latch.wait_for(Duration::from_secs(30)).await? {
    ///     eprintln!("still {} to go after 30 s", latch.count().await?);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`wait`](Self::wait), and
    /// [`Error::InvalidDuration`](crate::Error::InvalidDuration) for a
    /// `timeout` above zero and below 1 ms, or above
    /// [`MAX_DURATION`](crate::MAX_DURATION).
    ///
    /// # Cancel safety
    /// As [`wait`](Self::wait).
    pub async fn wait_for(&self, timeout: Duration) -> Result<bool> {
        self.wait_within(Some(timeout)).await
    }

    /// One read of the state, sent again on connection errors until
    /// `deadline` (the retry budget from now without one).
    async fn state(&self, deadline: Option<Instant>) -> Result<LatchState> {
        let shared = &self.shared;
        let conn = shared.core.conn();
        let until = deadline.unwrap_or_else(|| Instant::now() + shared.core.config().retry_budget);
        shared
            .core
            .retry()
            .run_until(until, || shared.object.state(conn))
            .await
    }

    /// Wait as [`wait_until_open`](Self::wait_until_open) does and record
    /// how the wait ended (a wait that fails or is dropped is not
    /// recorded).
    async fn wait_within(&self, wait: Option<Duration>) -> Result<bool> {
        let started = Instant::now();
        let opened = self.wait_until_open(wait).await?;
        self.shared.core.events().record(Event::LatchWaitEnded {
            latch: self.name(),
            opened,
            waited: started.elapsed(),
        });
        Ok(opened)
    }

    /// `true` once the latch opened, `false` when `wait` ran out first.
    async fn wait_until_open(&self, wait: Option<Duration>) -> Result<bool> {
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            check_duration("wait", wait)?;
        }
        let core = &self.shared.core;
        let _counted = core.enter_acquisition()?;
        let closing = core.closing();
        let deadline = wait.map(|wait| Instant::now() + wait);
        let first = self.state(deadline).await?;
        if first.count == 0 {
            return Ok(true);
        }
        // The round this waiter waits for (native): a read that finds
        // another one means the latch opened and was set again meanwhile.
        let round = first.round;
        let left = |deadline: Option<Instant>| {
            deadline.map(|d| d.saturating_duration_since(Instant::now()))
        };
        if left(deadline) == Some(Duration::ZERO) {
            return Ok(false);
        }
        let mut confirm = core.config().response_timeout;
        if let Some(left) = left(deadline) {
            confirm = confirm.min(left);
        }
        let mut listening = core
            .wakeups()
            .subscribe(self.shared.object.channel(), confirm)
            .await;
        // A flood of messages (anyone can PUBLISH): paced, not a read per
        // message.
        let mut pacer = WakePacer::default();
        loop {
            listening.mark_seen();
            let state = self.state(deadline).await?;
            if state.count == 0 || state.round != round {
                return Ok(true);
            }
            let mut pause = recheck_interval(core);
            if let Some(left) = left(deadline) {
                if left.is_zero() {
                    return Ok(false);
                }
                pause = pause.min(left);
            }
            let woken = tokio::select! {
                woken = listening.wait(pause) => woken,
                () = closing.cancelled() => return Err(Error::Closed),
            };
            // A message only wakes: anyone can publish anything (the
            // opening's round too, read from the hash), so the read decides.
            pacer.pace(&woken, deadline, &closing).await?;
        }
    }
}

impl std::fmt::Debug for CountDownLatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountDownLatch")
            .field("name", &self.name())
            .field("key", &self.shared.object.key())
            .finish()
    }
}
