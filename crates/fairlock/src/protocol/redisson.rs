//! The `redisson` protocol: Redisson's `RFairLock` and `RLock`, byte for byte.
//!
//! Keys, field format (`UUID:N`), channels, release message (`0`), waiter
//! deadlines (client clock, `previous + slot`) and the unlock result cache
//! are Redisson's (see `docs/redisson-protocol.md`). Return values are fairlock's
//! own, so that "released" and "was not held" are told apart.

pub(crate) mod read_write;
pub(crate) mod semaphore;

use std::sync::LazyLock;
use std::time::Duration;

use super::{
    Acquire, AcquireArgs, Grant, Holder, LockInfo, Protocol, ProtocolSettings, REVOKED_PREFIX,
    Release, Scope, ms, refresh_interval, unexpected,
};
use crate::decimal::Decimal;
use crate::error::Result;
use crate::name::RedissonKeys;
use crate::transport::{Connection, Script};

static FAIR_ACQUIRE: LazyLock<Script> = protocol_script!("redisson", "fair_acquire.lua");
static FAIR_GIVE_UP: LazyLock<Script> = protocol_script!("redisson", "fair_give_up.lua");
static FAIR_RELEASE: LazyLock<Script> = protocol_script!("redisson", "fair_release.lua");
static FAIR_FORCE_RELEASE: LazyLock<Script> =
    protocol_script!("redisson", "fair_force_release.lua");
static NONFAIR_ACQUIRE: LazyLock<Script> = protocol_script!("redisson", "nonfair_acquire.lua");
static NONFAIR_RELEASE: LazyLock<Script> = protocol_script!("redisson", "nonfair_release.lua");
static NONFAIR_FORCE_RELEASE: LazyLock<Script> =
    protocol_script!("redisson", "nonfair_force_release.lua");
/// The watchdog's renewal of every redisson hold: a plain lock's, and both
/// sides of a read-write lock's (a read hold's timeout keys with the
/// helpers of `rw_prelude.lua`, hence that prelude instead of this
/// protocol's).
pub(crate) static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "redisson/renew.lua",
        concat!(
            include_str!("common.lua"),
            include_str!("redisson/rw_prelude.lua"),
            include_str!("redisson/renew.lua")
        ),
    )
});
static INSPECT: LazyLock<Script> = protocol_script!("redisson", "inspect.lua");
static FAIR_POSITION: LazyLock<Script> = protocol_script!("redisson", "fair_position.lua");

/// One lock under the redisson protocol.
#[derive(Debug, Clone)]
pub(crate) struct RedissonLock {
    pub(crate) name: String,
    pub(crate) fair: bool,
    keys: RedissonKeys,
    /// A waiter's slot when its wait has no bound of its own.
    waiter_slot: Duration,
    /// Bounds the pause between attempts (see [`max_pause`](Self::max_pause)).
    waiter_ttl: Duration,
    /// `waiter_ttl` and the release cache's lifetime in milliseconds, as
    /// the scripts take them: written once, not on every call.
    waiter_ttl_ms: Box<str>,
    release_cache_ms: Box<str>,
    /// Test hook: shifts this client's clock (see `ClientConfig::clock_offset_ms`).
    clock_offset_ms: i64,
    /// The client's label, written to fairlock's own labels key of the
    /// lock, never to a Redisson key (see `label.rs`).
    label: std::sync::Arc<str>,
    /// Whether the server lets this client use the labels key.
    settings_labels: super::LabelsAccess,
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl RedissonLock {
    pub(crate) fn new(name: &str, fair: bool, settings: &ProtocolSettings) -> Self {
        Self {
            name: name.to_owned(),
            fair,
            keys: RedissonKeys::new(name),
            waiter_slot: settings.waiter_slot,
            waiter_ttl: settings.waiter_ttl,
            waiter_ttl_ms: (*ms(settings.waiter_ttl)).into(),
            release_cache_ms: (*ms(settings.release_cache)).into(),
            clock_offset_ms: settings.clock_offset_ms,
            label: std::sync::Arc::clone(&settings.label),
            settings_labels: settings.labels.clone(),
        }
    }

    pub(crate) fn lock_key(&self) -> &str {
        &self.keys.lock
    }

    /// Redisson waiters sleep until the lease or their slot ends, which a
    /// lost message would turn into minutes: fairlock's bound the waiter ttl
    /// refresh interval, as under native.
    pub(crate) fn max_pause(&self) -> Duration {
        refresh_interval(self.waiter_ttl)
    }

    /// Redisson's messages carry no grant: every one is only a wake-up.
    pub(crate) fn verify_grant(&self, _payload: &str, _nonce: &str) -> Option<Grant> {
        None
    }

    /// The owner's hold count (its field in the lock hash).
    pub(crate) async fn hold_count(&self, conn: &Connection, owner: &str) -> Result<u32> {
        let count: Option<u32> = conn
            .command(&self.name, "HGET", &self.keys.lock, &[owner])
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// The waiter's slot: the wait's bound, or the configured slot.
    fn slot(&self, wait: Option<Duration>) -> Duration {
        wait.unwrap_or(self.waiter_slot)
    }

    /// This client's `now` (Redisson's deadlines come from client clocks).
    fn now_ms(&self) -> i64 {
        wall_clock_ms() + self.clock_offset_ms
    }

    /// The channel on which `owner` is woken while it waits.
    pub(crate) fn wake_channel(&self, owner: &str) -> String {
        if self.fair {
            self.keys.fair_channel(owner)
        } else {
            self.keys.channel.clone()
        }
    }

    /// One attempt. `base` (the owner's hold count before this acquisition)
    /// is passed as `reconcile`: finding `base + 1` means an earlier attempt
    /// whose reply was lost already succeeded; it is not counted again.
    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        let AcquireArgs {
            wait, queue, base, ..
        } = *args;
        let slot = self.slot(wait);
        let reconcile = Decimal::new(base.into());
        let reconcile = &reconcile;
        let reply = self
            .settings_labels
            .call(|with| self.acquire_call(conn, args, slot, reconcile, with))
            .await?;
        decode_acquire(self.fair, queue, &reply)
    }

    /// One acquire script call, with the labels key or without it.
    async fn acquire_call(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
        slot: Duration,
        reconcile: &str,
        with_labels: bool,
    ) -> Result<Vec<i64>> {
        let AcquireArgs {
            owner,
            lease,
            queue,
            ..
        } = *args;
        // The labels key last, when used: the keys are a prefix of these
        // (an array, not a `Vec` per call).
        let labels = &self.keys.labels;
        if self.fair {
            let all = [
                self.keys.lock.as_str(),
                &self.keys.queue,
                &self.keys.timeouts,
                labels,
            ];
            let keys = &all[..if with_labels { 4 } else { 3 }];
            let (lease, slot, now) = (ms(lease), ms(slot), Decimal::signed(self.now_ms()));
            let args: [&str; 8] = [
                &lease,
                owner,
                &slot,
                &now,
                if queue { "queue" } else { "once" },
                reconcile,
                &self.label,
                &self.waiter_ttl_ms,
            ];
            conn.script(&FAIR_ACQUIRE, &self.name, keys, &args).await
        } else {
            let all = [self.keys.lock.as_str(), labels];
            let keys = &all[..if with_labels { 2 } else { 1 }];
            let lease = ms(lease);
            let args: [&str; 4] = [&lease, owner, reconcile, &self.label];
            conn.script(&NONFAIR_ACQUIRE, &self.name, keys, &args).await
        }
    }

    /// Leave the queue (fair lock). `true` when the owner was queued.
    pub(crate) async fn give_up(
        &self,
        conn: &Connection,
        owner: &str,
        wait: Option<Duration>,
        _nonce: &str,
    ) -> Result<bool> {
        if !self.fair {
            return Ok(false);
        }
        let keys = [
            self.keys.lock.as_str(),
            &self.keys.queue,
            &self.keys.timeouts,
            &self.keys.channel,
        ];
        let reply: i64 = conn
            .script(
                &FAIR_GIVE_UP,
                &self.name,
                &keys,
                &[owner, &ms(self.slot(wait))],
            )
            .await?;
        Ok(reply == 1)
    }

    /// The key caching the answer of release `request`.
    pub(crate) fn release_cache_key(&self, request: &str) -> String {
        self.keys.unlock_latch(request)
    }

    /// Release one hold. `request` identifies this release across retries.
    pub(crate) async fn release(
        &self,
        conn: &Connection,
        owner: &str,
        lease: Duration,
        request: &str,
        _scope: &Scope<'_>,
    ) -> Result<Release> {
        let cache = self.release_cache_key(request);
        let reply: i64 = if self.fair {
            let keys = [
                self.keys.lock.as_str(),
                &self.keys.queue,
                &self.keys.timeouts,
                &self.keys.channel,
                &cache,
            ];
            let (lease, now) = (ms(lease), Decimal::signed(self.now_ms()));
            let args: [&str; 4] = [owner, &lease, &now, &self.release_cache_ms];
            conn.script(&FAIR_RELEASE, &self.name, &keys, &args).await?
        } else {
            let keys = [self.keys.lock.as_str(), &self.keys.channel, &cache];
            let lease = ms(lease);
            let args: [&str; 3] = [owner, &lease, &self.release_cache_ms];
            conn.script(&NONFAIR_RELEASE, &self.name, &keys, &args)
                .await?
        };
        Release::decode("release", reply)
    }

    /// Release whoever holds the lock. `true` when a lock was deleted.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<bool> {
        let reply: i64 = if self.fair {
            let keys = [
                self.keys.lock.as_str(),
                &self.keys.queue,
                &self.keys.timeouts,
                &self.keys.channel,
            ];
            let now = Decimal::signed(self.now_ms());
            let args: [&str; 2] = [&now, REVOKED_PREFIX];
            conn.script(&FAIR_FORCE_RELEASE, &self.name, &keys, &args)
                .await?
        } else {
            let keys = [self.keys.lock.as_str(), &self.keys.channel];
            conn.script(&NONFAIR_FORCE_RELEASE, &self.name, &keys, &[REVOKED_PREFIX])
                .await?
        };
        Ok(reply == 1)
    }

    /// `owner`'s place in line and the queue length (the non-fair lock has no queue).
    pub(crate) async fn queue_position(
        &self,
        conn: &Connection,
        owner: &str,
    ) -> Result<(u64, u64)> {
        if !self.fair {
            return Ok((0, 0));
        }
        let keys = [
            self.keys.lock.as_str(),
            &self.keys.queue,
            &self.keys.timeouts,
        ];
        let reply: Vec<i64> = conn
            .script(&FAIR_POSITION, &self.name, &keys, &[owner])
            .await?;
        super::decode_position("position", &reply)
    }

    /// Read the whole state at one instant.
    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        let keys = [
            self.keys.lock.as_str(),
            &self.keys.queue,
            &self.keys.timeouts,
            &self.keys.labels,
        ];
        type Reply = (Vec<String>, i64, Vec<String>, Vec<String>, Vec<String>);
        let (fields, pttl, queue, deadlines, labels): Reply = self
            .settings_labels
            .call(|with| conn.script(&INSPECT, &self.name, &keys[..if with { 4 } else { 3 }], &[]))
            .await?;
        let labels = super::Labels::from_fields(&labels);
        let mut holders = Vec::new();
        for pair in fields.chunks(2) {
            if let [owner, count] = pair {
                let count = count
                    .parse()
                    .map_err(|_| unexpected("inspect", ("hold count", count)))?;
                holders.push(Holder {
                    label: labels.of(owner),
                    owner: owner.clone(),
                    count,
                    mode: super::HoldMode::Exclusive,
                });
            }
        }
        Ok(LockInfo::from_parts(
            &self.name,
            Protocol::Redisson,
            holders,
            pttl,
            None,
            super::waiters(queue, &deadlines, self.now_ms(), &labels),
        ))
    }
}

/// Decode an acquire reply (see `fair_acquire.lua`, `nonfair_acquire.lua`).
/// Every wait is also bounded by `poll` (the caller caps it): Redisson
/// waiters sleep until the lease or their slot ends, which a lost message
/// would turn into minutes.
pub(crate) fn decode_acquire(fair: bool, queue: bool, reply: &[i64]) -> Result<Acquire> {
    let ttl = |v: i64| Duration::from_millis(v.max(0).unsigned_abs());
    match *reply {
        [1, _] => Ok(Acquire::Acquired {
            token: None,
            key_ttl: None,
        }),
        [2, count] => Ok(Acquire::Reentered {
            count: u32::try_from(count).map_err(|_| unexpected("acquire", reply))?,
            token: None,
            key_ttl: None,
        }),
        [3, t] if !queue || !fair => {
            if queue {
                Ok(Acquire::Queued {
                    ttl: ttl(t),
                    position: None,
                    server_ms: None,
                })
            } else {
                Ok(Acquire::Busy)
            }
        }
        [3, t, position] => Ok(Acquire::Queued {
            ttl: ttl(t),
            position: u64::try_from(position).ok().filter(|p| *p > 0),
            server_ms: None,
        }),
        [4, _] => Ok(Acquire::Busy),
        _ => Err(unexpected("acquire", reply)),
    }
}
