//! The `redisson` protocol's semaphores, byte for byte (see
//! `docs/redisson-protocol.md`, "Semaphores"): Redisson's
//! `RPermitExpirableSemaphore` ([`ExpirableSemaphore`]) and `RSemaphore`
//! ([`CountingSemaphore`]).
//!
//! Both keep the available count as a decimal string under the name. The
//! expirable kind keeps each taken permit in the sorted set
//! `{NAME}:timeout` (member: the raw 16-byte id; score: the end of its
//! lease on the taking client's clock, or [`NOEXP`]); every script but
//! `set_permits` first reclaims the permits whose lease ended. Both publish
//! counts on `redisson_sc:{NAME}`. Neither is fair: no queue exists, and
//! whichever waiter's attempt runs first wins.

use std::sync::LazyLock;
use std::time::Duration;

use super::super::unexpected;
use crate::decimal::Decimal;
use crate::error::{Error, Result};
use crate::transport::{Connection, Script};

/// A semaphore script: the common prelude, the semaphore prelude, then the
/// script itself.
macro_rules! sem_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("redisson/", $file),
                concat!(
                    include_str!("../common.lua"),
                    include_str!("sem_prelude.lua"),
                    include_str!($file)
                ),
            )
        })
    };
}

static ACQUIRE: LazyLock<Script> = sem_script!("sem_acquire.lua");
static RELEASE: LazyLock<Script> = sem_script!("sem_release.lua");
static RENEW: LazyLock<Script> = sem_script!("sem_renew.lua");
static STATE: LazyLock<Script> = sem_script!("sem_state.lua");
static FORCE_RELEASE: LazyLock<Script> = sem_script!("sem_force_release.lua");
static SET_PERMITS: LazyLock<Script> = sem_script!("sem_set_permits.lua");
static COUNTER_ACQUIRE: LazyLock<Script> = sem_script!("counter_acquire.lua");
static COUNTER_RELEASE: LazyLock<Script> = sem_script!("counter_release.lua");
static COUNTER_AVAILABLE: LazyLock<Script> = sem_script!("counter_available.lua");

/// Redisson's score of a permit taken without a lease (`Long.MAX_VALUE /
/// 10000`): it never expires.
pub(crate) const NOEXP: i64 = 922_337_203_685_477;

/// The most permits one acquisition may take: each is one script argument
/// (and one sorted set member) per call.
pub(crate) const MAX_PERMITS_PER_ACQUIRE: u32 = 10_000;

/// A permit id: 16 random bytes, written as 32 lowercase hex digits (how
/// Redisson shows it to its users; Redis holds the raw bytes).
pub(crate) fn new_permit_id() -> String {
    let bytes = *uuid::Uuid::new_v4().as_bytes();
    let mut hex = String::with_capacity(32);
    for byte in bytes {
        hex.push_str(&format!("{byte:02x}"));
    }
    hex
}

/// One attempt's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SemAcquire {
    /// Taken: the ids are the caller's.
    Taken,
    /// Busy; the soonest lease ends at this client-clock epoch ms (a
    /// reclaim will give that permit back), when one does.
    Busy { soonest_expiry_ms: Option<i64> },
    /// More than the semaphore's total was asked for.
    AboveTotal { total: i64 },
}

/// One attempt of a plain semaphore.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CounterAcquire {
    /// Taken.
    Taken,
    /// Not enough available now.
    Busy,
    /// The semaphore does not exist, and more than the total it would be
    /// set up with was asked for (nothing written).
    AboveTotal { total: i64 },
}

/// What a release found of the caller's permits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SemRelease {
    pub(crate) released: u64,
    pub(crate) lost: u64,
}

/// The state after a reclaim: the available count, the number of taken
/// permits, (when asked for) each taken permit as (hex id, score), and
/// whether the count exists (absent: `available` reads 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SemState {
    pub(crate) available: i64,
    pub(crate) taken: u64,
    pub(crate) permits: Vec<(String, i64)>,
    pub(crate) exists: bool,
}

/// Redisson's `RPermitExpirableSemaphore` under one name.
#[derive(Debug)]
pub(crate) struct ExpirableSemaphore {
    pub(crate) name: String,
    /// The name itself, then `{NAME}:timeout`, then `redisson_sc:{NAME}`.
    keys: [String; 3],
    /// The total that initialises an absent semaphore.
    init: Box<str>,
    /// The same, as a number.
    pub(crate) permits: u32,
    /// Test hook: shifts this client's clock.
    clock_offset_ms: i64,
}

/// `{NAME}:SUFFIX`, or `NAME:SUFFIX` when the name has a `{` (Redisson's
/// `suffixName`).
fn suffixed(name: &str, suffix: &str) -> String {
    if name.contains('{') {
        format!("{name}:{suffix}")
    } else {
        format!("{{{name}}}:{suffix}")
    }
}

impl ExpirableSemaphore {
    pub(crate) fn new(name: &str, permits: u32, clock_offset_ms: i64) -> Self {
        Self {
            name: name.to_owned(),
            keys: [
                name.to_owned(),
                suffixed(name, "timeout"),
                crate::name::prefixed("redisson_sc", name),
            ],
            init: (*Decimal::new(permits.into())).into(),
            permits,
            clock_offset_ms,
        }
    }

    /// The channel on which releases (and reclaims) publish.
    pub(crate) fn channel(&self) -> &str {
        &self.keys[2]
    }

    /// This client's `now`, in epoch ms: permit expiry is client time.
    pub(crate) fn now_ms(&self) -> i64 {
        super::wall_clock_ms() + self.clock_offset_ms
    }

    fn keys(&self) -> [&str; 3] {
        [&self.keys[0], &self.keys[1], &self.keys[2]]
    }

    /// One attempt to take `ids.len()` permits, each until `expiry_ms`
    /// (client clock; [`NOEXP`] for none). Safe to repeat with the same
    /// ids: a repeat of a taken attempt answers taken.
    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        ids: &[String],
        expiry_ms: i64,
    ) -> Result<SemAcquire> {
        let (n, expiry) = (Decimal::new(ids.len() as u64), Decimal::signed(expiry_ms));
        let now = Decimal::signed(self.now_ms());
        let mut args: Vec<&str> = Vec::with_capacity(4 + ids.len());
        args.extend([&*n, &*expiry, &*now, &*self.init]);
        args.extend(ids.iter().map(String::as_str));
        let reply: Vec<i64> = conn
            .script(&ACQUIRE, &self.name, &self.keys(), &args)
            .await?;
        match reply[..] {
            [1] => Ok(SemAcquire::Taken),
            [2, at] => Ok(SemAcquire::Busy {
                soonest_expiry_ms: Some(at),
            }),
            [3] => Ok(SemAcquire::Busy {
                soonest_expiry_ms: None,
            }),
            [4, total] => Ok(SemAcquire::AboveTotal { total }),
            _ => Err(unexpected("semaphore acquire", &reply)),
        }
    }

    /// Give back the permits `ids` (those still taken and within their
    /// lease); reclaims expired permits first. Safe to repeat: a permit
    /// given back is not taken any more and counts as lost to a repeat.
    pub(crate) async fn release(&self, conn: &Connection, ids: &[String]) -> Result<SemRelease> {
        let now = Decimal::signed(self.now_ms());
        let mut args: Vec<&str> = Vec::with_capacity(1 + ids.len());
        args.push(&now);
        args.extend(ids.iter().map(String::as_str));
        let reply: Vec<i64> = conn
            .script(&RELEASE, &self.name, &self.keys(), &args)
            .await?;
        match reply[..] {
            [released, lost] if released >= 0 && lost >= 0 => Ok(SemRelease {
                released: released as u64,
                lost: lost as u64,
            }),
            _ => Err(unexpected("semaphore release", &reply)),
        }
    }

    /// Extend every one of `ids` to `now + lease` (Redisson's
    /// `updateLeaseTime`, which never writes a permit that is gone): the
    /// number of ids no longer taken.
    pub(crate) async fn renew(
        &self,
        conn: &Connection,
        ids: &[String],
        lease: Duration,
    ) -> Result<u64> {
        let now_ms = self.now_ms();
        let now = Decimal::signed(now_ms);
        let expiry = Decimal::signed(now_ms.saturating_add(ms_i64(lease)));
        let mut args: Vec<&str> = Vec::with_capacity(2 + ids.len());
        args.extend([&*now, &*expiry]);
        args.extend(ids.iter().map(String::as_str));
        let missing: i64 = conn.script(&RENEW, &self.name, &self.keys(), &args).await?;
        u64::try_from(missing).map_err(|_| unexpected("semaphore renew", missing))
    }

    /// The state after a reclaim; every taken permit with `all`, which
    /// also leaves an absent semaphore absent (without `all` it gets this
    /// handle's total, as any other call gives it).
    pub(crate) async fn state(&self, conn: &Connection, all: bool) -> Result<SemState> {
        let now = Decimal::signed(self.now_ms());
        let (init, which) = if all {
            ("", "all")
        } else {
            (&*self.init, "count")
        };
        let args: [&str; 3] = [&now, init, which];
        let (available, taken, flat, exists): (i64, i64, Vec<String>, i64) =
            conn.script(&STATE, &self.name, &self.keys(), &args).await?;
        let mut permits = Vec::with_capacity(flat.len() / 2);
        for pair in flat.chunks(2) {
            let [id, score] = pair else {
                return Err(unexpected("semaphore state", &flat));
            };
            // Redis writes integer scores without a fraction; a score
            // written by hand may have one.
            let score = score
                .parse::<f64>()
                .map_err(|_| unexpected("semaphore state", ("score", score)))?;
            permits.push((id.clone(), score as i64));
        }
        Ok(SemState {
            available,
            taken: u64::try_from(taken).map_err(|_| unexpected("semaphore state", taken))?,
            permits,
            exists: exists == 1,
        })
    }

    /// Give back every taken permit, whoever took it (after the reclaim of
    /// the expired ones): the number given back, published as a release
    /// publishes it.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<u64> {
        let now = Decimal::signed(self.now_ms());
        let released: i64 = conn
            .script(&FORCE_RELEASE, &self.name, &self.keys(), &[&now])
            .await?;
        u64::try_from(released).map_err(|_| unexpected("semaphore force release", released))
    }

    /// Make the total `permits` (Redisson's `setPermits`); the available
    /// count afterwards.
    pub(crate) async fn set_permits(&self, conn: &Connection, permits: u32) -> Result<i64> {
        let n = Decimal::new(permits.into());
        conn.script(&SET_PERMITS, &self.name, &self.keys(), &[&n])
            .await
    }
}

/// Redisson's plain `RSemaphore` under one name: a counter, no owners.
#[derive(Debug)]
pub(crate) struct CountingSemaphore {
    pub(crate) name: String,
    /// The name itself, then `redisson_sc:{NAME}`.
    keys: [String; 2],
    init: Box<str>,
}

impl CountingSemaphore {
    pub(crate) fn new(name: &str, permits: u32) -> Self {
        Self {
            name: name.to_owned(),
            keys: [name.to_owned(), crate::name::prefixed("redisson_sc", name)],
            init: (*Decimal::new(permits.into())).into(),
        }
    }

    pub(crate) fn channel(&self) -> &str {
        &self.keys[1]
    }

    fn keys(&self) -> [&str; 2] {
        [&self.keys[0], &self.keys[1]]
    }

    /// One attempt to take `n` permits.
    pub(crate) async fn acquire(&self, conn: &Connection, n: u32) -> Result<CounterAcquire> {
        let n = Decimal::new(n.into());
        let reply: Vec<i64> = conn
            .script(
                &COUNTER_ACQUIRE,
                &self.name,
                &self.keys(),
                &[&n, &self.init],
            )
            .await?;
        match reply[..] {
            [1] => Ok(CounterAcquire::Taken),
            [0, _] => Ok(CounterAcquire::Busy),
            [2, total] => Ok(CounterAcquire::AboveTotal { total }),
            _ => Err(unexpected("semaphore acquire", &reply)),
        }
    }

    /// Give back `n` permits: the new count (published).
    pub(crate) async fn release(&self, conn: &Connection, n: u32) -> Result<i64> {
        let n = Decimal::new(n.into());
        conn.script(&COUNTER_RELEASE, &self.name, &self.keys(), &[&n])
            .await
    }

    /// The available count (initialising an absent semaphore).
    pub(crate) async fn available(&self, conn: &Connection) -> Result<i64> {
        conn.script(&COUNTER_AVAILABLE, &self.name, &self.keys(), &[&self.init])
            .await
    }
}

/// A duration in whole ms as an i64 (saturating).
fn ms_i64(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Refuse a count of permits to take: 0, or above what one call carries.
pub(crate) fn check_count(name: &str, n: u32) -> Result<()> {
    if n == 0 {
        return Err(Error::InvalidConfig(format!(
            "semaphore {name:?}: cannot take 0 permits (ask for 1 or more)"
        )));
    }
    if n > MAX_PERMITS_PER_ACQUIRE {
        return Err(Error::InvalidConfig(format!(
            "semaphore {name:?}: {n} permits in one acquisition is above the limit of \
             {MAX_PERMITS_PER_ACQUIRE}"
        )));
    }
    Ok(())
}
