//! The `redisson` protocol's read-write lock: Redisson's `RReadWriteLock`,
//! byte for byte (see `docs/redisson-protocol.md`, "Read-write lock").
//!
//! One hash under the name holds both sides: `mode` (`read` or `write`),
//! a field per reading owner (`CLIENT:THREAD`, its read hold count) and
//! one for the writer (`CLIENT:THREAD:write`, its write hold count). Each
//! read hold `N` of an owner also has a string key
//! `{NAME}:OWNER:rwlock_timeout:N` whose TTL is that hold's lease. Releases
//! publish `0` (a read release that frees the lock) or `1` (a write
//! release that frees it) on `redisson_rwlock:{NAME}`.
//!
//! Each side is a lock of its own to the rest of the crate: the read side
//! and the write side are two [`RedissonRwLock`]s on the same hash, told
//! apart by their [`RwMode`]. The writer's owner id is the owner's with
//! `:write` appended, as in Redisson's hash (see
//! [`hold_owner`](RedissonRwLock::hold_owner)), so that an owner's read and
//! write holds of one lock are two holds everywhere (its turns, the
//! watchdog's registry, the renewals).
//!
//! Not fair, as Redisson's: a reader is admitted whenever the lock is in
//! read mode, even while writers wait.

use std::sync::LazyLock;
use std::time::Duration;

use super::super::side::{RwMode, WRITE_SUFFIX};
use super::super::{
    Acquire, AcquireArgs, Grant, HoldMode, Holder, LockInfo, Protocol, ProtocolSettings,
    REVOKED_PREFIX, Release, Scope, ms, refresh_interval, unexpected,
};
use crate::decimal::Decimal;
use crate::error::{Error, Result};
use crate::name::RedissonKeys;
use crate::owner::Owner;
use crate::transport::{Connection, Script};

/// A read-write lock script: the common prelude, the read-write prelude,
/// then the script itself.
macro_rules! rw_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("redisson/", $file),
                concat!(
                    include_str!("../common.lua"),
                    include_str!("rw_prelude.lua"),
                    include_str!($file)
                ),
            )
        })
    };
}

static READ_ACQUIRE: LazyLock<Script> = rw_script!("rw_read_acquire.lua");
static WRITE_ACQUIRE: LazyLock<Script> = rw_script!("rw_write_acquire.lua");
static READ_RELEASE: LazyLock<Script> = rw_script!("rw_read_release.lua");
static WRITE_RELEASE: LazyLock<Script> = rw_script!("rw_write_release.lua");
static FORCE_RELEASE: LazyLock<Script> = rw_script!("rw_force_release.lua");
static INSPECT: LazyLock<Script> = rw_script!("rw_inspect.lua");

/// One side of a read-write lock under the redisson protocol.
#[derive(Debug, Clone)]
pub(crate) struct RedissonRwLock {
    pub(crate) name: String,
    /// Never fair (Redisson's read-write lock has no queue).
    pub(crate) fair: bool,
    pub(crate) mode: RwMode,
    /// The lock hash: the raw name.
    lock: String,
    /// `redisson_rwlock:{NAME}`.
    channel: String,
    /// `redisson_unlock_latch:{NAME}`; `:REQUEST` is appended per call.
    unlock_latch: String,
    /// fairlock's labels key (never a Redisson key).
    labels: String,
    waiter_ttl: Duration,
    /// The release cache's lifetime in milliseconds, as the scripts take
    /// it: written once, not on every call.
    release_cache_ms: Box<str>,
    label: std::sync::Arc<str>,
    settings_labels: super::super::LabelsAccess,
}

impl RedissonRwLock {
    pub(crate) fn new(name: &str, mode: RwMode, settings: &ProtocolSettings) -> Self {
        Self {
            name: name.to_owned(),
            fair: false,
            mode,
            lock: name.to_owned(),
            channel: crate::name::prefixed("redisson_rwlock", name),
            unlock_latch: crate::name::prefixed("redisson_unlock_latch", name),
            labels: RedissonKeys::labels_of(name),
            waiter_ttl: settings.waiter_ttl,
            release_cache_ms: (*ms(settings.release_cache)).into(),
            label: std::sync::Arc::clone(&settings.label),
            settings_labels: settings.labels.clone(),
        }
    }

    pub(crate) fn lock_key(&self) -> &str {
        &self.lock
    }

    /// The owner id this side stores (Redisson's field names, see
    /// [`RwMode::hold_owner`]).
    pub(crate) fn hold_owner(&self, owner: Owner) -> Owner {
        self.mode.hold_owner(owner)
    }

    /// A lost message costs at most the waiter ttl refresh interval, as for
    /// every lock.
    pub(crate) fn max_pause(&self) -> Duration {
        refresh_interval(self.waiter_ttl)
    }

    /// Every waiter of the lock listens on its one channel.
    pub(crate) fn wake_channel(&self, _owner: &str) -> String {
        self.channel.clone()
    }

    /// Redisson's messages carry no grant: every one is only a wake-up.
    pub(crate) fn verify_grant(&self, _payload: &str, _nonce: &str) -> Option<Grant> {
        None
    }

    /// The owner's hold count on this side (its field in the hash).
    pub(crate) async fn hold_count(&self, conn: &Connection, owner: &str) -> Result<u32> {
        let count: Option<u32> = conn
            .command(&self.name, "HGET", &self.lock, &[owner])
            .await?;
        Ok(count.unwrap_or(0))
    }

    /// One attempt (there is no queue: a busy lock is waited for on the
    /// channel, or for the lease left, as Redisson waits).
    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        let reply = self
            .settings_labels
            .call(|with| self.acquire_call(conn, args, with))
            .await?;
        let ttl = |v: i64| Duration::from_millis(v.max(0).unsigned_abs());
        // A read acquisition adds the hash's TTL as it found it (0: none
        // to report), for the watchdog's early renewals.
        let key_ttl = |found: &[i64]| match found {
            [found, ..] if *found > 0 => Some(ttl(*found)),
            _ => None,
        };
        match reply[..] {
            [1, _, ref found @ ..] => Ok(Acquire::Acquired {
                token: None,
                key_ttl: key_ttl(found),
            }),
            [2, count, ref found @ ..] => Ok(Acquire::Reentered {
                count: u32::try_from(count).map_err(|_| unexpected("acquire", &reply))?,
                token: None,
                key_ttl: key_ttl(found),
            }),
            [3, t] if args.queue => Ok(Acquire::Queued {
                ttl: ttl(t),
                position: None,
                server_ms: None,
            }),
            [3, _] => Ok(Acquire::Busy),
            [5] => Err(Error::WouldDeadlock {
                name: self.name.clone(),
                owner: args.owner.to_owned(),
            }),
            _ => Err(unexpected("acquire", &reply)),
        }
    }

    async fn acquire_call(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
        with_labels: bool,
    ) -> Result<Vec<i64>> {
        // The labels key last, when used: the keys are a prefix of these.
        let all = [self.lock.as_str(), &self.labels];
        let keys = &all[..if with_labels { 2 } else { 1 }];
        let (lease, base) = (ms(args.lease), Decimal::new(args.base.into()));
        let argv: [&str; 4] = [&lease, args.owner, &base, &self.label];
        let script = match self.mode {
            RwMode::Read => &READ_ACQUIRE,
            RwMode::Write => &WRITE_ACQUIRE,
        };
        conn.script(script, &self.name, keys, &argv).await
    }

    /// No queue to leave.
    pub(crate) async fn give_up(
        &self,
        _conn: &Connection,
        _owner: &str,
        _wait: Option<Duration>,
        _nonce: &str,
    ) -> Result<bool> {
        Ok(false)
    }

    /// The key caching the answer of release `request`.
    pub(crate) fn release_cache_key(&self, request: &str) -> String {
        crate::name::joined(&self.unlock_latch, request)
    }

    /// Release one hold of this side. `request` identifies this release
    /// across retries.
    pub(crate) async fn release(
        &self,
        conn: &Connection,
        owner: &str,
        lease: Duration,
        request: &str,
        _scope: &Scope<'_>,
    ) -> Result<Release> {
        let cache = self.release_cache_key(request);
        let keys = [self.lock.as_str(), &self.channel, &cache];
        let cache_ttl = &*self.release_cache_ms;
        let reply: i64 = match self.mode {
            RwMode::Read => {
                conn.script(&READ_RELEASE, &self.name, &keys, &[owner, cache_ttl])
                    .await?
            }
            RwMode::Write => {
                let lease = ms(lease);
                conn.script(
                    &WRITE_RELEASE,
                    &self.name,
                    &keys,
                    &[owner, &lease, cache_ttl],
                )
                .await?
            }
        };
        Release::decode("release", reply)
    }

    /// Release every hold of this side (Redisson's `forceUnlock` of the
    /// read or the write lock): `true` when the lock was in this mode.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<bool> {
        let keys = [self.lock.as_str(), &self.channel];
        let reply: i64 = conn
            .script(
                &FORCE_RELEASE,
                &self.name,
                &keys,
                &[self.mode.as_str(), REVOKED_PREFIX],
            )
            .await?;
        Ok(reply == 1)
    }

    /// No queue: nobody has a place in line.
    pub(crate) async fn queue_position(
        &self,
        _conn: &Connection,
        _owner: &str,
    ) -> Result<(u64, u64)> {
        Ok((0, 0))
    }

    /// Both sides at one instant: every reader and the writer, with their
    /// hold counts.
    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        let keys = [self.lock.as_str(), &self.labels];
        type Reply = (Vec<String>, i64, Vec<String>);
        let (fields, pttl, labels): Reply = self
            .settings_labels
            .call(|with| conn.script(&INSPECT, &self.name, &keys[..if with { 2 } else { 1 }], &[]))
            .await?;
        let labels = super::super::Labels::from_fields(&labels);
        let mut holders = Vec::new();
        for pair in fields.chunks(2) {
            let [field, value] = pair else { continue };
            if field == "mode" {
                continue;
            }
            let count = value
                .parse()
                .map_err(|_| unexpected("inspect", ("hold count", value)))?;
            let mode = if field.ends_with(WRITE_SUFFIX) {
                HoldMode::Write
            } else {
                HoldMode::Read
            };
            holders.push(Holder {
                label: labels.of(field),
                owner: field.clone(),
                count,
                mode,
            });
        }
        // The writer first, then the readers in the hash's order.
        holders.sort_by_key(|holder| holder.mode != HoldMode::Write);
        Ok(LockInfo::from_parts(
            &self.name,
            Protocol::Redisson,
            holders,
            pttl,
            None,
            Vec::new(),
        ))
    }

    /// Redisson's `isLocked` of this side: the write side is locked while
    /// the hash is in write mode; the read side while it is in read mode,
    /// or in write mode with the writer also reading.
    pub(crate) async fn is_locked(&self, conn: &Connection) -> Result<bool> {
        let fields: Vec<String> = conn.command(&self.name, "HGETALL", &self.lock, &[]).await?;
        let mode = fields
            .chunks(2)
            .find(|pair| pair.first().is_some_and(|field| field == "mode"))
            .and_then(|pair| pair.get(1).map(String::as_str));
        Ok(match (self.mode, mode) {
            (RwMode::Write, Some("write")) => true,
            (RwMode::Read, Some("read")) => true,
            (RwMode::Read, Some("write")) => fields.len() > 4,
            _ => false,
        })
    }
}
