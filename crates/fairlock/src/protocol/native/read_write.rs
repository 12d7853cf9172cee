//! The `native` protocol's weighted engine: its read-write lock, fair
//! (FIFO across readers and writers), and its semaphore, fair (FIFO across
//! requests of any size); both with a fencing token per acquisition, direct
//! handoff to the next waiters that fit, and every key expiring on its own
//! (see `docs/read-write-lock.md`, `docs/semaphore.md` and the scripts'
//! preludes, `native/weighted_prelude.lua`, `rw_prelude.lua` and
//! `sem_prelude.lua`).
//!
//! The line is the lock's layout version 2 (`line` and `waiters`, with
//! `rw:` or `sem:` in front). Each holder has a key of its own, a hash
//! (owner, count, token, claimed, nonce, label), whose TTL is its lease: the renewal, the
//! claim of a grant, the replica acknowledgement of a hold and a release
//! scoped to one acquisition work on it as on a lock. The holders set
//! (`fairlock:{NAME}:rw:holders`, `fairlock:{NAME}:sem:holders`) is the key
//! every hold of the object is registered, renewed and revoked under.

use std::sync::LazyLock;
use std::time::Duration;

use super::super::side::{RwMode, WRITE_SUFFIX};
use super::super::{
    Acquire, AcquireArgs, Grant, HoldMode, Holder, LockInfo, Protocol, ProtocolSettings,
    REVOKED_PREFIX, Release, Scope, ms, refresh_interval, unexpected,
};
use crate::decimal::Decimal;
use crate::error::{Error, Result};
use crate::name::NativeRwKeys;
use crate::owner::Owner;
use crate::transport::{Connection, HoldProof, ProofCheck, Script};

/// A script of the weighted engine: the common prelude, the line's helpers
/// (`line.lua`, shared with the lock's scripts), the engine's, the object's (`$object`: the read-write lock's or
/// the semaphore's), then the script itself. With `admin`: the helpers of
/// inspect and force-release (`weighted_admin.lua`) before it, which the
/// other scripts do not define (a chunk's every function is defined again
/// at each call).
macro_rules! weighted_script {
    ($object:literal, admin, $file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("native/", $file),
                concat!(
                    include_str!("../common.lua"),
                    include_str!("line.lua"),
                    include_str!("weighted_prelude.lua"),
                    include_str!($object),
                    include_str!("weighted_admin.lua"),
                    include_str!($file)
                ),
            )
        })
    };
    ($object:literal, $name:literal, $file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("native/", $name),
                concat!(
                    include_str!("../common.lua"),
                    include_str!("line.lua"),
                    include_str!("weighted_prelude.lua"),
                    include_str!($object),
                    include_str!($file)
                ),
            )
        })
    };
}

/// A read-write lock's script.
macro_rules! rw_script {
    ($file:literal) => {
        weighted_script!("rw_prelude.lua", $file, $file)
    };
    ($name:literal, $file:literal) => {
        weighted_script!("rw_prelude.lua", $name, $file)
    };
}

/// A semaphore's script.
macro_rules! sem_script {
    ($file:literal) => {
        weighted_script!("sem_prelude.lua", $file, $file)
    };
    ($name:literal, $file:literal) => {
        weighted_script!("sem_prelude.lua", $name, $file)
    };
}

static ACQUIRE: LazyLock<Script> = rw_script!("rw_acquire.lua");
static RELEASE: LazyLock<Script> = rw_script!("rw_release.lua", "weighted_release.lua");
static GIVE_UP: LazyLock<Script> = rw_script!("rw_give_up.lua", "weighted_give_up.lua");
static FORCE_RELEASE: LazyLock<Script> =
    weighted_script!("rw_prelude.lua", admin, "rw_force_release.lua");
static INSPECT: LazyLock<Script> = weighted_script!("rw_prelude.lua", admin, "rw_inspect.lua");
static SEM_ACQUIRE: LazyLock<Script> = sem_script!("sem_acquire.lua");
static SEM_RELEASE: LazyLock<Script> = sem_script!("sem_release.lua", "weighted_release.lua");
static SEM_GIVE_UP: LazyLock<Script> = sem_script!("sem_give_up.lua", "weighted_give_up.lua");
static SEM_FORCE_RELEASE: LazyLock<Script> =
    weighted_script!("sem_prelude.lua", admin, "sem_force_release.lua");
static SEM_INSPECT: LazyLock<Script> =
    weighted_script!("sem_prelude.lua", admin, "sem_inspect.lua");
static SEM_SET_PERMITS: LazyLock<Script> = sem_script!("sem_set_permits.lua");

/// A native semaphore's state at one instant (`sem_inspect.lua`).
#[derive(Debug, Clone)]
pub(crate) struct SemState {
    /// The permits in all (the stored capacity, or the one this handle
    /// would set).
    pub(crate) capacity: u64,
    /// Whether meta stores the capacity (else the semaphore has none yet,
    /// or forgot it, and `capacity` is the handle's).
    pub(crate) stored: bool,
    /// Each live hold.
    pub(crate) holds: Vec<SemHold>,
    /// The line, first first, each with the permits it asks for.
    pub(crate) queue: Vec<super::super::QueuedWaiter>,
}

/// One live hold of a native semaphore.
#[derive(Debug, Clone)]
pub(crate) struct SemHold {
    /// The holder id (the acquisition's owner id).
    pub(crate) id: String,
    /// The label of its client, when it wrote one.
    pub(crate) label: Option<String>,
    /// Its permits.
    pub(crate) weight: u32,
    pub(crate) token: u64,
    /// Ms left of its lease.
    pub(crate) pttl: i64,
}

impl SemState {
    /// The permits the live holds take.
    pub(crate) fn used(&self) -> u64 {
        self.holds.iter().map(|hold| u64::from(hold.weight)).sum()
    }
}

/// What a force-release of a native semaphore removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SemForceRelease {
    pub(crate) holds: u64,
    pub(crate) permits: u64,
}

/// One side of a read-write lock, or a semaphore, under the native
/// protocol: an object of the weighted engine.
#[derive(Debug, Clone)]
pub(crate) struct NativeRwLock {
    pub(crate) name: String,
    /// Always fair.
    pub(crate) fair: bool,
    /// The side, for a read-write lock (a semaphore's is `Write`, unused).
    pub(crate) mode: RwMode,
    /// A semaphore: the capacity it gets when it has none yet. `None` for
    /// a read-write lock.
    permits: Option<u32>,
    keys: NativeRwKeys,
    waiter_ttl: Duration,
    /// As the scripts take them: written once, not on every call.
    waiter_ttl_ms: Box<str>,
    release_cache_ms: Box<str>,
    label: std::sync::Arc<str>,
}

impl NativeRwLock {
    pub(crate) fn new(name: &str, mode: RwMode, settings: &ProtocolSettings) -> Self {
        Self {
            name: name.to_owned(),
            fair: true,
            mode,
            permits: None,
            keys: NativeRwKeys::new(name),
            waiter_ttl: settings.waiter_ttl,
            waiter_ttl_ms: (*ms(settings.waiter_ttl)).into(),
            release_cache_ms: (*ms(settings.release_cache)).into(),
            label: std::sync::Arc::clone(&settings.label),
        }
    }

    /// The semaphore `name` under the native protocol, with `permits` in
    /// all when it has no capacity yet.
    pub(crate) fn semaphore(name: &str, permits: u32, settings: &ProtocolSettings) -> Self {
        Self {
            permits: Some(permits),
            keys: NativeRwKeys::semaphore(name),
            ..Self::new(name, RwMode::Write, settings)
        }
    }

    /// Whether this is a semaphore (not a read-write lock's side).
    pub(crate) fn is_semaphore(&self) -> bool {
        self.permits.is_some()
    }

    /// The holders set: every hold of the object, both sides of a
    /// read-write lock, is registered under it.
    pub(crate) fn lock_key(&self) -> &str {
        self.keys.holders()
    }

    /// The id under which this side stores `owner`'s holds.
    pub(crate) fn hold_owner(&self, owner: Owner) -> Owner {
        if self.is_semaphore() {
            return owner;
        }
        self.mode.hold_owner(owner)
    }

    /// The hold of the acquisition with `token` (any acquisition of `id`
    /// without one), proved on a replica as a lock's: its own key.
    pub(crate) fn hold_proof(&self, id: &str, token: Option<u64>) -> HoldProof {
        let key = self.keys.hold_of(id);
        let check = match token {
            Some(token) => ProofCheck::Field {
                field: "token".to_owned(),
                value: token.to_string(),
            },
            None => ProofCheck::Field {
                field: "owner".to_owned(),
                value: id.to_owned(),
            },
        };
        HoldProof { key, check }
    }

    pub(crate) fn max_pause(&self) -> Duration {
        refresh_interval(self.waiter_ttl)
    }

    /// Every waiter has its own channel: a release tells each waiter it
    /// admits, and nobody else.
    pub(crate) fn wake_channel(&self, id: &str) -> String {
        crate::name::joined(&self.keys.channel, id)
    }

    pub(crate) fn verify_grant(&self, payload: &str, nonce: &str) -> Option<Grant> {
        super::verify_grant(payload, nonce)
    }

    /// The hold count of holder `id` on this side.
    pub(crate) async fn hold_count(&self, conn: &Connection, id: &str) -> Result<u32> {
        let (holder, count): (Option<String>, Option<u32>) = conn
            .command(
                &self.name,
                "HMGET",
                &self.keys.hold_of(id),
                &["owner", "count"],
            )
            .await?;
        Ok(if holder.as_deref() == Some(id) {
            count.unwrap_or(0)
        } else {
            0
        })
    }

    fn keys(&self) -> [&str; 4] {
        let k = &self.keys.all;
        [&k[0], &k[1], &k[2], &k[3]]
    }

    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        if let Some(permits) = self.permits {
            return self.acquire_permits(conn, args, permits).await;
        }
        let (lease, base) = (ms(args.lease), Decimal::new(args.base.into()));
        let argv: [&str; 9] = [
            args.owner,
            &lease,
            &self.waiter_ttl_ms,
            &self.keys.channel,
            if args.queue { "queue" } else { "once" },
            &base,
            args.nonce,
            &self.label,
            slots_move(conn),
        ];
        let reply: Vec<i64> = conn
            .script(&ACQUIRE, &self.name, &self.keys(), &argv)
            .await?;
        if reply[..] == [5] {
            return Err(Error::WouldDeadlock {
                name: self.name.clone(),
                owner: args.owner.to_owned(),
            });
        }
        // The same replies as the lock's acquire: a waiter at the head of
        // the line tries again when the soonest holder's lease may end.
        super::decode_acquire(true, self.waiter_ttl, &reply)
    }

    /// A semaphore's attempt: the lock's replies, and
    /// [`Error::InvalidConfig`] for more permits than the semaphore has.
    async fn acquire_permits(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
        permits: u32,
    ) -> Result<Acquire> {
        let (lease, base) = (ms(args.lease), Decimal::new(args.base.into()));
        let (weight, permits) = (
            Decimal::new(args.weight.into()),
            Decimal::new(permits.into()),
        );
        let argv: [&str; 11] = [
            args.owner,
            &lease,
            &self.waiter_ttl_ms,
            &self.keys.channel,
            if args.queue { "queue" } else { "once" },
            &base,
            args.nonce,
            &self.label,
            &weight,
            &permits,
            slots_move(conn),
        ];
        let reply: Vec<i64> = conn
            .script(&SEM_ACQUIRE, &self.name, &self.keys(), &argv)
            .await?;
        if let [6, capacity] = reply[..] {
            return Err(Error::InvalidConfig(format!(
                "semaphore {:?}: {} permits asked for, above its total of {capacity}",
                self.name, args.weight
            )));
        }
        super::decode_acquire(true, self.waiter_ttl, &reply)
    }

    /// The script of this object: the read-write lock's or the semaphore's.
    fn script<'a>(&self, rw: &'a Script, sem: &'a Script) -> &'a Script {
        if self.is_semaphore() { sem } else { rw }
    }

    pub(crate) async fn give_up(
        &self,
        conn: &Connection,
        id: &str,
        _wait: Option<Duration>,
        nonce: &str,
    ) -> Result<bool> {
        let args: [&str; 4] = [id, &self.waiter_ttl_ms, &self.keys.channel, nonce];
        let script = self.script(&GIVE_UP, &SEM_GIVE_UP);
        let reply: i64 = conn.script(script, &self.name, &self.keys(), &args).await?;
        Ok(reply > 0)
    }

    /// The key caching the answer of release `request`.
    pub(crate) fn release_cache_key(&self, request: &str) -> String {
        crate::name::joined(&self.keys.release_cache, request)
    }

    pub(crate) async fn release(
        &self,
        conn: &Connection,
        id: &str,
        _lease: Duration,
        request: &str,
        scope: &Scope<'_>,
    ) -> Result<Release> {
        let cache = self.release_cache_key(request);
        let [k1, k2, k3, k4] = self.keys();
        let keys = [k1, k2, k3, k4, &cache];
        let token = scope.token.map(Decimal::new);
        let args: [&str; 6] = [
            id,
            &self.waiter_ttl_ms,
            &self.keys.channel,
            &self.release_cache_ms,
            token.as_deref().unwrap_or_default(),
            scope.nonce.unwrap_or_default(),
        ];
        let script = self.script(&RELEASE, &SEM_RELEASE);
        let reply: i64 = conn.script(script, &self.name, &keys, &args).await?;
        Release::decode("native weighted release", reply)
    }

    /// Release every hold of this side (of a semaphore: every hold).
    /// `true` when one was released.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<bool> {
        if self.is_semaphore() {
            return Ok(self.sem_force_release(conn).await?.holds > 0);
        }
        let args: [&str; 4] = [
            &self.waiter_ttl_ms,
            &self.keys.channel,
            REVOKED_PREFIX,
            self.mode.as_str(),
        ];
        let reply: i64 = conn
            .script(&FORCE_RELEASE, &self.name, &self.keys(), &args)
            .await?;
        Ok(reply > 0)
    }

    /// Release every hold of a semaphore, each revoked on its client's
    /// channel, and admit the line's head while it fits.
    pub(crate) async fn sem_force_release(&self, conn: &Connection) -> Result<SemForceRelease> {
        let args: [&str; 3] = [&self.waiter_ttl_ms, &self.keys.channel, REVOKED_PREFIX];
        let reply: Vec<i64> = conn
            .script(&SEM_FORCE_RELEASE, &self.name, &self.keys(), &args)
            .await?;
        match reply[..] {
            [holds, permits] if holds >= 0 && permits >= 0 => Ok(SemForceRelease {
                holds: holds as u64,
                permits: permits as u64,
            }),
            _ => Err(unexpected("native semaphore force release", &reply)),
        }
    }

    pub(crate) async fn queue_position(&self, conn: &Connection, id: &str) -> Result<(u64, u64)> {
        let reply: Vec<i64> = conn
            .script(&super::POSITION, &self.name, &self.keys(), &[id])
            .await?;
        super::super::decode_position("native position", &reply)
    }

    /// A semaphore's holds, capacity and line at one instant.
    pub(crate) async fn sem_state(&self, conn: &Connection) -> Result<SemState> {
        type Reply = (
            Vec<String>,
            Vec<String>,
            Vec<String>,
            i64,
            Vec<String>,
            i64,
            i64,
            Vec<i64>,
        );
        let permits = Decimal::new(self.permits.unwrap_or(0).into());
        let args: [&str; 1] = [&permits];
        let (held, queue, deadlines, now, labels, capacity, stored, asked): Reply = conn
            .script(&SEM_INSPECT, &self.name, &self.keys(), &args)
            .await?;
        let labels = super::super::Labels::from_fields(&labels);
        let bad = || unexpected("native semaphore inspect", &held);
        let mut holds = Vec::new();
        for entry in held.chunks(4) {
            let [id, weight, token, pttl] = entry else {
                return Err(bad());
            };
            holds.push(SemHold {
                id: id.clone(),
                label: labels.of(id),
                weight: weight.parse().map_err(|_| bad())?,
                token: token.parse().map_err(|_| bad())?,
                pttl: pttl.parse().map_err(|_| bad())?,
            });
        }
        if asked.len() != queue.len() {
            return Err(unexpected("native semaphore inspect", ("asked", &asked)));
        }
        let mut queue = super::super::waiters(queue, &deadlines, now, &labels);
        for (waiter, asked) in queue.iter_mut().zip(asked) {
            waiter.mode = HoldMode::Permits;
            waiter.permits = u32::try_from(asked).map_err(|_| bad())?;
        }
        Ok(SemState {
            capacity: u64::try_from(capacity).map_err(|_| bad())?,
            stored: stored == 1,
            holds,
            queue,
        })
    }

    /// Make a semaphore's capacity `permits`; the capacity before (`None`
    /// when it had none stored).
    pub(crate) async fn set_permits(&self, conn: &Connection, permits: u32) -> Result<Option<u64>> {
        let permits = Decimal::new(permits.into());
        let args: [&str; 3] = [&permits, &self.waiter_ttl_ms, &self.keys.channel];
        let reply: Vec<i64> = conn
            .script(&SEM_SET_PERMITS, &self.name, &self.keys(), &args)
            .await?;
        match reply[..] {
            [before, _] => Ok(u64::try_from(before).ok()),
            _ => Err(unexpected("native semaphore set permits", &reply)),
        }
    }

    /// Both sides and the line at one instant. The lease shown is the
    /// longest a holder has left, the token the newest holder's.
    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        if self.is_semaphore() {
            let state = self.sem_state(conn).await?;
            let longest = state.holds.iter().map(|hold| hold.pttl).max().unwrap_or(-2);
            let newest = state.holds.iter().map(|hold| hold.token).max();
            let holders = state
                .holds
                .into_iter()
                .map(|hold| Holder {
                    label: hold.label,
                    owner: hold.id,
                    count: hold.weight,
                    mode: HoldMode::Permits,
                })
                .collect();
            return Ok(LockInfo::from_parts(
                &self.name,
                Protocol::Native,
                holders,
                longest,
                newest,
                state.queue,
            ));
        }
        type Reply = (Vec<String>, Vec<String>, Vec<String>, i64, Vec<String>);
        let (held, queue, deadlines, now, labels): Reply =
            conn.script(&INSPECT, &self.name, &self.keys(), &[]).await?;
        let labels = super::super::Labels::from_fields(&labels);
        let bad = || unexpected("native read-write inspect", &held);
        let mut holders = Vec::new();
        let (mut longest, mut newest) = (-2_i64, None::<u64>);
        for entry in held.chunks(4) {
            let [id, count, token, pttl] = entry else {
                return Err(bad());
            };
            let token: u64 = token.parse().map_err(|_| bad())?;
            newest = newest.max(Some(token));
            longest = longest.max(pttl.parse().map_err(|_| bad())?);
            holders.push(Holder {
                label: labels.of(id),
                owner: id.clone(),
                count: count.parse().map_err(|_| bad())?,
                mode: if id.ends_with(WRITE_SUFFIX) {
                    HoldMode::Write
                } else {
                    HoldMode::Read
                },
            });
        }
        // The writer first, then the readers in the set's order.
        holders.sort_by_key(|holder| holder.mode != HoldMode::Write);
        // One line for both sides: a waiter's id says which it asks for.
        let mut queue = super::super::waiters(queue, &deadlines, now, &labels);
        for waiter in &mut queue {
            waiter.mode = if waiter.owner.ends_with(WRITE_SUFFIX) {
                HoldMode::Write
            } else {
                HoldMode::Read
            };
        }
        Ok(LockInfo::from_parts(
            &self.name,
            Protocol::Native,
            holders,
            longest,
            newest,
            queue,
        ))
    }

    /// Whether this side holds the lock: a writer, or any reader.
    pub(crate) async fn is_locked(&self, conn: &Connection) -> Result<bool> {
        let info = self.inspect(conn).await?;
        if self.is_semaphore() {
            return Ok(info.is_locked());
        }
        let side = match self.mode {
            RwMode::Read => HoldMode::Read,
            RwMode::Write => HoldMode::Write,
        };
        Ok(info.holders.iter().any(|holder| holder.mode == side))
    }

    /// The longest lease a holder of the lock (either side) has left.
    pub(crate) async fn remaining_lease(&self, conn: &Connection) -> Result<Option<Duration>> {
        Ok(self.inspect(conn).await?.remaining_lease)
    }
}

/// The acquire scripts' last argument: `cluster` on a Redis Cluster, where
/// a hold key missing while its lease runs may be on the other node of a
/// slot migration half-way (the scripts answer TRYAGAIN), `''` elsewhere,
/// where it is gone (deleted, evicted: the acquisition goes on as a fresh
/// one).
fn slots_move(conn: &Connection) -> &'static str {
    if conn.is_cluster() { "cluster" } else { "" }
}
