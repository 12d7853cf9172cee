//! The protocol seam: what a lock protocol must do, and the typed replies.
//!
//! Each protocol is a set of Lua scripts plus the Rust that calls them and
//! decodes their replies into the enums below; nothing above this module
//! sees a raw `redis::Value`.

/// A protocol's script `$file` from `protocol/$dir/`, behind the common
/// prelude and the protocol's own prelude (and, with three arguments,
/// behind a fast path `$head` in front of both); loaded once, run with
/// EVALSHA.
macro_rules! protocol_script {
    ($dir:literal, $file:literal) => {
        std::sync::LazyLock::new(|| {
            $crate::transport::Script::new(
                concat!($dir, "/", $file),
                concat!(
                    include_str!("common.lua"),
                    include_str!(concat!($dir, "/prelude.lua")),
                    include_str!(concat!($dir, "/", $file))
                ),
            )
        })
    };
    // With a fast path `$head` run first, before the preludes define
    // anything (it returns early or leaves its reads to `$file`).
    ($dir:literal, $head:literal, $file:literal) => {
        std::sync::LazyLock::new(|| {
            $crate::transport::Script::new(
                concat!($dir, "/", $file),
                concat!(
                    include_str!(concat!($dir, "/", $head)),
                    include_str!("common.lua"),
                    include_str!(concat!($dir, "/prelude.lua")),
                    include_str!(concat!($dir, "/", $file))
                ),
            )
        })
    };
}

pub(crate) mod latch;
pub(crate) mod native;
pub(crate) mod redisson;
pub(crate) mod side;

#[cfg(test)]
mod decode_tests;
#[cfg(test)]
mod model_tests;

use std::time::Duration;

use crate::decimal::Decimal;
use crate::error::Result;
use crate::kind::LockKind;
use crate::transport::{Connection, Script};
use native::NativeLock;
use native::read_write::NativeRwLock;
use redisson::RedissonLock;
use redisson::read_write::RedissonRwLock;
use side::RwMode;

/// The wire protocol a client speaks.
///
/// Locks taken under different protocols never exclude each other, even
/// with the same name (their keys differ): a deployment picks one protocol
/// per lock name, and every client of that lock must use it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Protocol {
    /// fairlock's own protocol (the default): all time from the Redis
    /// server, live waiters never evicted, dead waiters skipped after
    /// [`waiter_ttl`](crate::ClientConfig::waiter_ttl), O(log N) scripts,
    /// direct handoff to the next waiter, and a fencing token for every
    /// acquisition. Keys `fairlock:{NAME}:*`; see `docs/native-protocol.md`.
    #[default]
    Native,
    /// Redisson's `RFairLock` / `RLock` protocol, byte for byte: a Java
    /// service using `redisson.getFairLock(name)` or `getLock(name)` shares
    /// the lock with this client. Choose it for mixed Java/Rust fleets. It
    /// inherits Redisson's weaknesses (deadlines from client clocks, live
    /// waiters evicted after their slot, O(N) handoffs, no fencing tokens).
    Redisson,
}

impl Protocol {
    /// The protocol's name as used on the command line: `"native"` or `"redisson"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Redisson => "redisson",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Protocol {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "native" => Ok(Protocol::Native),
            "redisson" => Ok(Protocol::Redisson),
            other => Err(crate::Error::InvalidConfig(format!(
                "unknown protocol {other:?} (expected \"native\" or \"redisson\")"
            ))),
        }
    }
}

/// What a protocol needs from the client's settings.
#[derive(Debug, Clone)]
pub(crate) struct ProtocolSettings {
    pub(crate) protocol: Protocol,
    /// Native: how long a waiter's place lasts without a refresh. Both: a
    /// third of it bounds every wait between two attempts.
    pub(crate) waiter_ttl: Duration,
    /// Redisson: a waiter's slot when the wait has no bound of its own.
    pub(crate) waiter_slot: Duration,
    /// Redisson: the shift of this client's clock (a test hook).
    pub(crate) clock_offset_ms: i64,
    /// How long a release's result stays cached for a retry of the same
    /// request: longer than any retry of it can come.
    pub(crate) release_cache: Duration,
    /// The client's label, written next to the locks it takes or waits
    /// for (see `label.rs`).
    pub(crate) label: std::sync::Arc<str>,
    /// Whether the server still lets this client use the labels keys.
    pub(crate) labels: LabelsAccess,
}

/// Whether the labels keys may be passed to the scripts: until the server
/// refuses one with `NOPERM` (an ACL user set up before labels existed,
/// without `~fairlock:labels:*` under redisson). Redis checks a script's
/// keys before it runs, so a refused call did nothing and is sent again
/// without them; from then on this client writes and reads no labels
/// (shared by all its locks).
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelsAccess(std::sync::Arc<std::sync::atomic::AtomicBool>);

impl LabelsAccess {
    /// `call(true)`, passing the labels keys, while they are usable; when
    /// the server refuses them (`NOPERM`: the call did nothing), labels are
    /// given up and `call(false)` is sent once more without them. Every
    /// script call that may pass a labels key goes through here.
    pub(crate) async fn call<T, F, Fut>(&self, call: F) -> Result<T>
    where
        F: Fn(bool) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let with = self.usable();
        match call(with).await {
            Err(err) if with && self.refused_by(&err) => call(false).await,
            reply => reply,
        }
    }

    pub(crate) fn usable(&self) -> bool {
        !self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `true` when `err` is a refusal of the keys (`NOPERM`) while labels
    /// were in use: labels are then given up for good, and the call should
    /// be sent again without them.
    pub(crate) fn refused_by(&self, err: &crate::Error) -> bool {
        let refused = matches!(err, crate::Error::Redis(e) if e.code() == Some("NOPERM"));
        if refused && self.usable() {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
            crate::events::record(crate::events::Event::LabelsRefused);
        }
        refused
    }
}

/// One protocol with this client's settings: makes the lock objects and
/// renews batches of holds.
#[derive(Debug, Clone)]
pub(crate) struct Dialect {
    settings: ProtocolSettings,
}

impl Dialect {
    pub(crate) fn new(settings: ProtocolSettings) -> Self {
        Self { settings }
    }

    pub(crate) fn protocol(&self) -> Protocol {
        self.settings.protocol
    }

    /// The lock `name` (already validated) of `kind`.
    pub(crate) fn lock(&self, name: &str, kind: LockKind) -> ProtocolLock {
        let settings = &self.settings;
        let side = match kind {
            LockKind::Read => RwMode::Read,
            _ => RwMode::Write,
        };
        match (settings.protocol, kind) {
            (Protocol::Redisson, LockKind::Fair | LockKind::NonFair) => {
                ProtocolLock::Redisson(RedissonLock::new(name, kind == LockKind::Fair, settings))
            }
            (Protocol::Native, LockKind::Fair | LockKind::NonFair) => {
                ProtocolLock::Native(NativeLock::new(name, kind == LockKind::Fair, settings))
            }
            (Protocol::Redisson, LockKind::Read | LockKind::Write) => {
                ProtocolLock::RedissonRw(RedissonRwLock::new(name, side, settings))
            }
            (Protocol::Native, LockKind::Read | LockKind::Write) => {
                ProtocolLock::NativeRw(NativeRwLock::new(name, side, settings))
            }
        }
    }

    /// The semaphore `name` (already validated) under the native protocol,
    /// with `permits` in all when it has no total yet.
    pub(crate) fn native_semaphore(&self, name: &str, permits: u32) -> ProtocolLock {
        ProtocolLock::NativeRw(NativeRwLock::semaphore(name, permits, &self.settings))
    }

    /// Renew (with `Some(lease)`) or only check (`None`) a batch of holds.
    /// Returns, per hold, what the server found.
    pub(crate) async fn renew(
        &self,
        conn: &Connection,
        batch: &[HoldRef<'_>],
        lease: Option<Duration>,
    ) -> Result<Vec<Renewal>> {
        Ok(self.renew_reporting(conn, batch, lease).await?.found)
    }

    /// [`renew`](Self::renew), with the TTL each hold's lock key had
    /// before the call, where the protocol reports it.
    pub(crate) async fn renew_reporting(
        &self,
        conn: &Connection,
        batch: &[HoldRef<'_>],
        lease: Option<Duration>,
    ) -> Result<Renewed> {
        let script: &Script = match self.settings.protocol {
            Protocol::Redisson => &redisson::RENEW,
            Protocol::Native => &native::RENEW,
        };
        let mut args = Vec::with_capacity(2 * batch.len() + 2);
        args.push(lease.map(|lease| ms(lease).to_string()).unwrap_or_default());
        args.push(self.settings.label.to_string());
        for (_, owner, token) in batch {
            args.push((*owner).to_owned());
            args.push(token.map(|t| t.to_string()).unwrap_or_default());
        }
        // The lock keys, then (unless the server's ACL refused them) the
        // keys of their labels, each in its lock's slot. A native hold
        // (layout version 2) keeps its holder's label in its own value (a
        // lock) or hold key (a read-write lock's or a semaphore's): its
        // own key stands in for a labels key, which it never writes, and
        // which would be missing while the lock key exists. (Half-way
        // through a Cluster slot migration, a script whose keys are partly
        // on the node and partly not is refused with TRYAGAIN: a renewal
        // naming the missing labels key failed until the lease ran out.)
        let labels: Vec<String> = batch
            .iter()
            .map(|(key, _, _)| match self.settings.protocol {
                Protocol::Redisson => crate::name::RedissonKeys::labels_of(key),
                Protocol::Native => (*key).to_owned(),
            })
            .collect();
        let keys: Vec<&str> = batch
            .iter()
            .map(|(key, _, _)| *key)
            .chain(labels.iter().map(String::as_str))
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let reply: Vec<i64> = self
            .settings
            .labels
            .call(|with| {
                let keys = if with {
                    &keys[..]
                } else {
                    &keys[..batch.len()]
                };
                conn.script(script, "", keys, &args)
            })
            .await?;
        // Redisson's script adds, per hold, the TTL its key had (see
        // `Renewed::ttls`); the native one reports none.
        let n = batch.len();
        let (codes, ttls) = match self.settings.protocol {
            Protocol::Redisson if reply.len() == 2 * n => reply.split_at(n),
            Protocol::Native if reply.len() == n => (&reply[..], &[][..]),
            _ => return Err(unexpected("renew", reply)),
        };
        let found = codes
            .iter()
            .map(|r| match r {
                1 => Ok(Renewal::Held),
                0 => Ok(Renewal::Gone),
                2 => Ok(Renewal::TakenOver),
                3 => Ok(Renewal::Unsure),
                _ => Err(unexpected("renew", &reply)),
            })
            .collect::<Result<Vec<_>>>()?;
        let ttls = (0..n)
            .map(|i| {
                let ttl = ttls.get(i).copied().unwrap_or(0);
                u64::try_from(ttl)
                    .ok()
                    .filter(|&ms| ms > 0)
                    .map(Duration::from_millis)
            })
            .collect();
        Ok(Renewed { found, ttls })
    }
}

/// What a renewal (or check) of a batch found.
#[derive(Debug, Clone)]
pub(crate) struct Renewed {
    /// Per hold, in the batch's order.
    pub(crate) found: Vec<Renewal>,
    /// Per hold: the TTL its lock key had before the call extended it,
    /// when the protocol reports one (`redisson`, for a read hold found
    /// held: the read-write lock keeps one TTL for its hash, which a
    /// Redisson reader's renewal sets to its own lease, however short).
    pub(crate) ttls: Vec<Option<Duration>>,
}

/// What a renewal (or check) found of one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewal {
    /// Still held by its owner (renewed, for a renewal).
    Held,
    /// The lock key is gone.
    Gone,
    /// Another owner (or acquisition) holds it, or the key holds another
    /// type.
    TakenOver,
    /// Neither renewed nor found lost: a weighted hold (read-write lock,
    /// semaphore) whose key is not on the node that ran the call while the
    /// holders set says its lease has not ended (half-way through a
    /// Cluster slot migration). As a failed call for this hold: tried
    /// again, and believed no longer than it was last confirmed.
    Unsure,
}

/// One acquire attempt's inputs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AcquireArgs<'a> {
    pub(crate) owner: &'a str,
    pub(crate) lease: Duration,
    /// The wait's bound, when it has one (Redisson makes it the waiter's
    /// slot).
    pub(crate) wait: Option<Duration>,
    /// Wait in line when busy (else a one-shot attempt).
    pub(crate) queue: bool,
    /// The owner's hold count before this acquisition (0 for a fresh owner).
    /// Finding `base + 1` means an earlier attempt of this acquisition
    /// already succeeded (its reply was lost) or, under native, the lock was
    /// handed over: it is taken as is, not counted again.
    pub(crate) base: u32,
    /// This acquisition's secret (native): stored with its queue entry, it
    /// authenticates the grant message sent to it.
    pub(crate) nonce: &'a str,
    /// What the acquisition weighs: the permits a native semaphore's
    /// acquisition asks for; 1 for everything else (and unused there).
    pub(crate) weight: u32,
}

/// Which acquisition a release acts on (native; Redisson has no way to tell).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scope<'a> {
    /// The fencing token of the acquisition.
    pub(crate) token: Option<u64>,
    /// The acquisition's secret.
    pub(crate) nonce: Option<&'a str>,
}

/// A grant message, verified: the fencing token, the server time of the
/// grant and how long the grant lasts unless claimed (the PEXPIRE the
/// releasing script set), all as the server wrote them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: u64,
    pub(crate) granted_at_ms: i64,
    pub(crate) expire_ms: u64,
}

/// One lock under one protocol: the seam. Every method has one signature
/// for both protocols; what differs lives in the protocol's own object.
#[derive(Debug, Clone)]
pub(crate) enum ProtocolLock {
    Redisson(RedissonLock),
    Native(NativeLock),
    /// One side of a Redisson read-write lock.
    RedissonRw(RedissonRwLock),
    /// One side of a native (fair) read-write lock, or a native (fair)
    /// semaphore: the objects of the weighted engine.
    NativeRw(NativeRwLock),
}

/// Forward a call to the protocol's lock object.
macro_rules! dispatch {
    ($self:ident, $lock:ident => $call:expr) => {
        match $self {
            ProtocolLock::Redisson($lock) => $call,
            ProtocolLock::Native($lock) => $call,
            ProtocolLock::RedissonRw($lock) => $call,
            ProtocolLock::NativeRw($lock) => $call,
        }
    };
}

impl ProtocolLock {
    pub(crate) fn name(&self) -> &str {
        dispatch!(self, lock => &lock.name)
    }

    pub(crate) fn fair(&self) -> bool {
        dispatch!(self, lock => lock.fair)
    }

    /// The kind of lock this is.
    pub(crate) fn kind(&self) -> LockKind {
        match self {
            ProtocolLock::RedissonRw(lock) if lock.mode == RwMode::Read => LockKind::Read,
            // A semaphore's permits are not a lock's kind: handed out in
            // order, they are counted as a fair lock's holds.
            ProtocolLock::NativeRw(lock) if lock.is_semaphore() => LockKind::Fair,
            ProtocolLock::NativeRw(lock) if lock.mode == RwMode::Read => LockKind::Read,
            ProtocolLock::RedissonRw(_) | ProtocolLock::NativeRw(_) => LockKind::Write,
            _ if self.fair() => LockKind::Fair,
            _ => LockKind::NonFair,
        }
    }

    /// The owner id under which `owner`'s holds of this lock are stored
    /// (a read-write lock's writer is `OWNER:write`, as in Redisson's
    /// hash); every other lock stores the owner itself, also when it is
    /// named by a write guard's id (`OWNER:write`: a lock's scripts refuse
    /// a holder field of that form as not a lock's).
    pub(crate) fn hold_owner(&self, owner: crate::owner::Owner) -> crate::owner::Owner {
        match self {
            ProtocolLock::RedissonRw(lock) => lock.hold_owner(owner),
            ProtocolLock::NativeRw(lock) => lock.hold_owner(owner),
            _ => match owner.as_str().strip_suffix(side::WRITE_SUFFIX) {
                Some(base) => crate::owner::Owner::from_raw(base),
                None => owner,
            },
        }
    }

    /// Whether the lock records the secret of its holder's latest
    /// acquisition (native: taking, a handoff and a re-entry write it), so
    /// that a release scoped to that secret undoes exactly the hold an
    /// attempt with a lost reply made, if it made one. Redisson's hash has
    /// the owner's count only: the undo compares the count with the one
    /// read before the attempt.
    pub(crate) fn records_acquisitions(&self) -> bool {
        matches!(self, ProtocolLock::Native(_) | ProtocolLock::NativeRw(_))
    }

    /// The key the watchdog renews and `is_locked` looks at.
    pub(crate) fn lock_key(&self) -> &str {
        dispatch!(self, lock => lock.lock_key())
    }

    /// How a replica acknowledgement proves `owner`'s hold (of the
    /// acquisition with `token`, under native) on the server it goes to.
    pub(crate) fn hold_proof(
        &self,
        owner: &str,
        token: Option<u64>,
    ) -> crate::transport::HoldProof {
        match self {
            ProtocolLock::NativeRw(lock) => lock.hold_proof(owner, token),
            ProtocolLock::Native(lock) => lock.hold_proof(owner, token),
            ProtocolLock::Redisson(_) | ProtocolLock::RedissonRw(_) => {
                crate::transport::HoldProof {
                    key: self.lock_key().to_owned(),
                    check: crate::transport::ProofCheck::Has {
                        field: owner.to_owned(),
                    },
                }
            }
        }
    }

    /// The longest pause between two attempts of a waiter: a lost wake-up
    /// costs at most this long, under every protocol.
    pub(crate) fn max_pause(&self) -> Duration {
        dispatch!(self, lock => lock.max_pause())
    }

    /// The channel on which `owner` is woken while it waits.
    pub(crate) fn wake_channel(&self, owner: &str) -> String {
        dispatch!(self, lock => lock.wake_channel(owner))
    }

    /// Decode a wake-up message for the waiter whose secret is `nonce`: the
    /// grant it proves, if it is a grant to that waiter (native only; any
    /// other message is only a wake-up).
    pub(crate) fn verify_grant(&self, payload: &str, nonce: &str) -> Option<Grant> {
        dispatch!(self, lock => lock.verify_grant(payload, nonce))
    }

    /// How many holds `owner` has.
    pub(crate) async fn hold_count(&self, conn: &Connection, owner: &str) -> Result<u32> {
        dispatch!(self, lock => lock.hold_count(conn, owner).await)
    }

    /// One attempt.
    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        dispatch!(self, lock => lock.acquire(conn, args).await)
    }

    /// Leave the queue. `wait`: the wait's bound, as in the attempts;
    /// `nonce`: the acquisition's secret (native: only its own unclaimed
    /// grant is passed on). `true` when the owner was queued.
    pub(crate) async fn give_up(
        &self,
        conn: &Connection,
        owner: &str,
        wait: Option<Duration>,
        nonce: &str,
    ) -> Result<bool> {
        dispatch!(self, lock => lock.give_up(conn, owner, wait, nonce).await)
    }

    /// Release one hold of `owner`; under native only a hold of the
    /// acquisition `scope` names (a later acquisition by the same owner is
    /// left alone). `lease`: the hold's lease (Redisson sets it again when
    /// one of several holds goes). The result is cached under `request`.
    pub(crate) async fn release(
        &self,
        conn: &Connection,
        owner: &str,
        lease: Duration,
        request: &str,
        scope: &Scope<'_>,
    ) -> Result<Release> {
        dispatch!(self, lock => lock.release(conn, owner, lease, request, scope).await)
    }

    /// The key that caches the answer of release `request` (for a retry of
    /// it), deleted once the answer was read by a release sent only once.
    pub(crate) fn release_cache_key(&self, request: &str) -> String {
        dispatch!(self, lock => lock.release_cache_key(request))
    }

    /// Whether a release answering `reply` cached its answer under its
    /// request (to be deleted once read, see `hold.rs`): always, but under
    /// the native lock's layout version 2, only for a partial release or one
    /// whose `scope` names no hold (a full one naming its hold leaves its
    /// request id in the lock's value).
    pub(crate) fn release_cached(&self, reply: &Release, scope: &Scope<'_>) -> bool {
        match self {
            ProtocolLock::Native(lock) => lock.release_cached(reply, scope),
            _ => true,
        }
    }

    /// Release whoever holds the lock. `true` when a lock was released.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<bool> {
        dispatch!(self, lock => lock.force_release(conn).await)
    }

    /// `owner`'s 1-based place in line (0 when not queued) and the queue length.
    pub(crate) async fn queue_position(
        &self,
        conn: &Connection,
        owner: &str,
    ) -> Result<(u64, u64)> {
        dispatch!(self, lock => lock.queue_position(conn, owner).await)
    }

    /// The lock's whole state at one instant, and the server that serves
    /// it (on a cluster: the master of its slot, asked after the state was
    /// read; `None` when that second call failed).
    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        let mut info = dispatch!(self, lock => lock.inspect(conn).await)?;
        info.node = conn.node_for(self.name(), self.lock_key()).await.ok();
        Ok(info)
    }

    /// `true` when somebody holds the lock (a read-write lock's side:
    /// when the lock is held in that side's mode).
    pub(crate) async fn is_locked(&self, conn: &Connection) -> Result<bool> {
        match self {
            ProtocolLock::RedissonRw(lock) => return lock.is_locked(conn).await,
            ProtocolLock::NativeRw(lock) => return lock.is_locked(conn).await,
            // A free native lock may keep a marker under its key.
            ProtocolLock::Native(lock) => return Ok(lock.remaining_lease(conn).await?.is_some()),
            ProtocolLock::Redisson(_) => {}
        }
        let n: i64 = conn
            .command(self.name(), "EXISTS", self.lock_key(), &[])
            .await?;
        Ok(n == 1)
    }

    /// Time until the holder's lease runs out; `None` when free.
    pub(crate) async fn remaining_lease(&self, conn: &Connection) -> Result<Option<Duration>> {
        match self {
            ProtocolLock::NativeRw(lock) => return lock.remaining_lease(conn).await,
            ProtocolLock::Native(lock) => return lock.remaining_lease(conn).await,
            _ => {}
        }
        let pttl: i64 = conn
            .command(self.name(), "PTTL", self.lock_key(), &[])
            .await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }
}

/// How often a waiter refreshes its place: a third of `waiter_ttl`.
pub(crate) fn refresh_interval(waiter_ttl: Duration) -> Duration {
    (waiter_ttl / 3).max(Duration::from_millis(1))
}

/// A duration as whole milliseconds, for a script argument.
fn ms(duration: Duration) -> Decimal {
    // As u64 (584 million years of milliseconds): a u128 costs several
    // times as much to write.
    Decimal::new(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// A script reply this version does not understand.
fn unexpected(script: &str, reply: impl std::fmt::Debug) -> crate::Error {
    crate::Error::Protocol(format!("{script} script answered {reply:?}"))
}

/// Decode a `{position, length}` reply.
fn decode_position(script: &str, reply: &[i64]) -> Result<(u64, u64)> {
    match *reply {
        [position, length] if position >= 0 && length >= position => {
            Ok((position as u64, length as u64))
        }
        _ => Err(unexpected(script, reply)),
    }
}

/// The channel prefix on which a client hears that one of its holds was
/// taken away (force-unlocked): `fairlock:revoked:CLIENT_ID`, both protocols.
pub(crate) const REVOKED_PREFIX: &str = "fairlock:revoked:";

/// One hold in a renewal or check batch: lock key, owner, and the token of
/// its acquisition (native; `None` matches any hold of the owner).
pub(crate) type HoldRef<'a> = (&'a str, &'a str, Option<u64>);

/// Locks renewed per script call (Redisson's batch size).
pub(crate) const RENEW_BATCH: usize = 100;

/// Outcome of one acquire attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Granted to an owner that did not hold it. `key_ttl`: the TTL the
    /// lock key had before this acquisition extended it, where the
    /// protocol reports one (a redisson read-write lock's hash, whose one
    /// TTL another client's renewal may have set short; see the watchdog's
    /// early renewals).
    Acquired {
        token: Option<u64>,
        key_ttl: Option<Duration>,
    },
    /// The owner already held it; its hold count is now `count`. `token`:
    /// the fencing token of the acquisition it re-entered, where there is
    /// one. `key_ttl`: as for `Acquired`.
    Reentered {
        count: u32,
        token: Option<u64>,
        key_ttl: Option<Duration>,
    },
    /// Held by someone else (or not our turn); we are queued. Try again
    /// after a wake-up or `ttl`. `position` is 1-based when known.
    /// `server_ms`: the server's clock when the script ran (native), which
    /// dates a later grant message without trusting any client clock.
    Queued {
        ttl: Duration,
        position: Option<u64>,
        server_ms: Option<i64>,
    },
    /// Held by someone else; not queued (one-shot attempt).
    Busy,
}

/// Outcome of releasing one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The last hold was released; the lock is free (or handed on).
    Released,
    /// One hold was released; the owner still holds the lock.
    StillHeld,
    /// Somebody else holds the lock.
    NotOwner,
    /// Nobody holds the lock (it expired or was force-unlocked).
    NotHeld,
}

impl Release {
    /// Decode a release script's reply (both protocols' scripts answer
    /// 1 released, 0 still held, -1 another owner holds it, -2 not held).
    fn decode(script: &str, reply: i64) -> Result<Self> {
        match reply {
            1 => Ok(Release::Released),
            0 => Ok(Release::StillHeld),
            -1 => Ok(Release::NotOwner),
            -2 => Ok(Release::NotHeld),
            other => Err(unexpected(script, other)),
        }
    }
}

/// A point-in-time view of one lock, from [`LockHandle::inspect`](crate::LockHandle::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// The protocol the lock was read with.
    pub protocol: Protocol,
    /// Owners holding the lock with their hold counts (at most one entry
    /// for a well-formed lock).
    pub holders: Vec<Holder>,
    /// Time until the lease runs out, when held.
    pub remaining_lease: Option<Duration>,
    /// Fencing token of the current holder, where the protocol has one.
    pub token: Option<u64>,
    /// Waiters of a fair lock, first in line first.
    pub queue: Vec<QueuedWaiter>,
    /// `host:port` of the server that serves the lock: the server itself,
    /// or on a Redis Cluster the master of the lock's hash slot (all of a
    /// lock's keys share it). `None` when it could not be read.
    pub node: Option<String>,
}

impl LockInfo {
    /// Assemble from what an inspect script read (see [`waiters`]).
    pub(crate) fn from_parts(
        name: &str,
        protocol: Protocol,
        holders: Vec<Holder>,
        pttl: i64,
        token: Option<u64>,
        queue: Vec<QueuedWaiter>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            protocol,
            remaining_lease: (pttl > 0 && !holders.is_empty())
                .then(|| Duration::from_millis(pttl as u64)),
            holders,
            token,
            queue,
            node: None,
        }
    }

    /// `true` when somebody holds the lock.
    pub fn is_locked(&self) -> bool {
        !self.holders.is_empty()
    }
}

/// The queue in order, with each waiter's time left from the flat
/// `[owner, deadline ms, ...]` list of deadlines and `now_ms` on the same
/// clock. O(N). Scores that are not numbers (or are infinite) give no time
/// left rather than a panic.
pub(crate) fn waiters(
    queue: Vec<String>,
    deadlines: &[String],
    now_ms: i64,
    labels: &Labels,
) -> Vec<QueuedWaiter> {
    let deadline_of: std::collections::HashMap<&str, f64> = deadlines
        .chunks_exact(2)
        .filter_map(|pair| Some((pair[0].as_str(), pair[1].parse::<f64>().ok()?)))
        .collect();
    queue
        .into_iter()
        .enumerate()
        .map(|(i, owner)| QueuedWaiter {
            position: i + 1,
            mode: HoldMode::Exclusive,
            permits: 1,
            expires_in: deadline_of.get(owner.as_str()).map(|&deadline| {
                // `as` saturates (NaN -> 0); the subtraction must too.
                let left = (deadline as i64).saturating_sub(now_ms).max(0);
                Duration::from_millis(left as u64)
            }),
            label: labels.of(&owner),
            owner,
        })
        .collect()
}

/// A lock's client labels as an inspect script read them (the flat
/// `[client id, label, ...]` of HGETALL): the label of each owner's client.
pub(crate) struct Labels(std::collections::HashMap<String, String>);

impl Labels {
    /// Labels this library would not write (empty, too long, control
    /// characters: written by hand, or by anyone allowed to write the key)
    /// are left out rather than printed.
    pub(crate) fn from_fields(fields: &[String]) -> Self {
        Self(
            fields
                .chunks_exact(2)
                .filter_map(|pair| Some((pair[0].clone(), crate::label::read_back(&pair[1])?)))
                .collect(),
        )
    }

    /// The label of `owner`'s client (`CLIENT_UUID:N` -> `CLIENT_UUID`;
    /// a read-write lock's writer `CLIENT_UUID:N:write` too), if it wrote
    /// one.
    pub(crate) fn of(&self, owner: &str) -> Option<String> {
        let owner = owner.strip_suffix(":write").unwrap_or(owner);
        let (client, _) = owner.rsplit_once(':')?;
        self.0.get(client).cloned()
    }
}

/// An owner holding a lock, in a [`LockInfo`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The owner id (`CLIENT_UUID:N`).
    pub owner: String,
    /// Its hold count (re-entries + 1).
    pub count: u32,
    /// How it holds the lock: alone (a lock, or a read-write lock's
    /// writer) or beside other readers.
    pub mode: HoldMode,
    /// The label of the owner's client
    /// ([`ClientConfig::label`](crate::ClientConfig::label); `HOST:PID`
    /// by default), when the client wrote one: `None` for a Java Redisson
    /// client, or once the labels key expired or was emptied (it is written
    /// again at the client's next renewal).
    pub label: Option<String>,
}

/// How a [`Holder`] holds its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldMode {
    /// The holder of a lock ([`FairLock`](crate::FairLock),
    /// [`Lock`](crate::Lock)): nobody else holds it.
    Exclusive,
    /// A reader of a [`ReadWriteLock`](crate::ReadWriteLock): other readers
    /// may hold it too, never a writer other than itself.
    Read,
    /// The writer of a [`ReadWriteLock`](crate::ReadWriteLock): nobody else
    /// holds it (its owner may also read: a downgrade).
    Write,
    /// A holder or request of a [`Semaphore`](crate::Semaphore): it takes
    /// some of the semaphore's permits, beside other holders while the
    /// total lasts ([`QueuedWaiter::permits`] says how many it asks for).
    Permits,
}

/// A queued waiter, in a [`LockInfo`] or a
/// [`SemaphoreInfo`](crate::SemaphoreInfo).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWaiter {
    /// 1-based position in the queue.
    pub position: usize,
    /// The owner id (`CLIENT_UUID:N`; a read-write lock's writer
    /// `CLIENT_UUID:N:write`).
    pub owner: String,
    /// What it waits for: [`HoldMode::Exclusive`] for a lock,
    /// [`HoldMode::Read`] or [`HoldMode::Write`] for the side of a native
    /// read-write lock (whose line holds both), [`HoldMode::Permits`] for a
    /// native semaphore's request. (Redisson's read-write lock and
    /// semaphore have no line.)
    pub mode: HoldMode,
    /// How many permits it asks for: the `n` of a semaphore's request, 1
    /// for a lock's waiter. 0 for a semaphore's request whose record was
    /// lost (evicted or deleted): what it asked for is unknown, and it waits
    /// at the head of the line until its next attempt writes it again.
    pub permits: u32,
    /// Time left before the entry is considered dead and skipped; `None`
    /// when it has no deadline. Under `redisson` this is measured against
    /// the reading client's clock.
    pub expires_in: Option<Duration>,
    /// The label of the owner's client, when it wrote one (see
    /// [`Holder::label`]).
    pub label: Option<String>,
}
