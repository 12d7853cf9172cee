//! The `native` protocol: the same locks without Redisson's weaknesses.
//!
//! Server time only, live waiters never evicted, dead ones skipped after
//! `waiter_ttl`, O(log N) scripts, direct handoff, fencing tokens. The
//! scripts, keys and invariants are described in `docs/native-protocol.md`.

pub(crate) mod read_write;

use std::sync::LazyLock;
use std::time::Duration;

use super::{
    Acquire, AcquireArgs, Grant, Holder, LockInfo, Protocol, ProtocolSettings, REVOKED_PREFIX,
    Release, Scope, ms, refresh_interval, unexpected,
};
use crate::decimal::Decimal;
use crate::error::Result;
use crate::name::NativeKeys;
use crate::transport::{Connection, HoldProof, HoldsFn, Ints, ProofCheck, Script};

/// A native lock script `$file` from `protocol/native/`: the common prelude,
/// the line's helpers (`line.lua`, shared with the weighted engine's
/// scripts, `read_write.rs`) and the lock's own (`lock_prelude.lua`, the
/// key layout version 2), then the script.
macro_rules! lock_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("native/", $file),
                concat!(
                    include_str!("common.lua"),
                    include_str!("native/line.lua"),
                    include_str!("native/lock_prelude.lua"),
                    include_str!(concat!("native/", $file))
                ),
            )
        })
    };
    // With a fast path `$head` run first, before the preludes define
    // anything (it returns early or leaves its reads to `$file`).
    ($head:literal, $file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("native/", $file),
                concat!(
                    include_str!(concat!("native/", $head)),
                    include_str!("common.lua"),
                    include_str!("native/line.lua"),
                    include_str!("native/lock_prelude.lua"),
                    include_str!(concat!("native/", $file))
                ),
            )
        })
    };
}

static ACQUIRE: LazyLock<Script> = lock_script!("acquire_fast.lua", "acquire.lua");
static RELEASE: LazyLock<Script> = lock_script!("release_fast.lua", "release.lua");
static GIVE_UP: LazyLock<Script> = lock_script!("give_up.lua");
static FORCE_RELEASE: LazyLock<Script> = lock_script!("force_release.lua");
pub(crate) static RENEW: LazyLock<Script> = lock_script!("renew.lua");
static INSPECT: LazyLock<Script> = lock_script!("inspect.lua");
static LEASE: LazyLock<Script> = lock_script!("lease.lua");
pub(crate) static POSITION: LazyLock<Script> = lock_script!("position.lua");

/// A native lock key's value (layout version 2, see
/// `native/lock_prelude.lua`): `TOKEN:COUNT:FLAGS:NONCE:REQUEST:OWNER<TAB>LABEL`
/// while held, `TOKEN:0:FLAGS::REQUEST:` once released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LockValue<'a> {
    pub(crate) token: u64,
    pub(crate) count: u32,
    /// The holder, `None` when free.
    pub(crate) owner: Option<&'a str>,
}

impl<'a> LockValue<'a> {
    /// The value `text`, or `None` when it is not a lock's of this layout.
    pub(crate) fn parse(text: &'a str) -> Option<Self> {
        let mut fields = text.splitn(6, ':');
        let token = fields.next()?.parse().ok()?;
        let count = fields.next()?.parse().ok()?;
        let flags = fields.next()?;
        let (_nonce, _request) = (fields.next()?, fields.next()?);
        // The owner, up to the tab before the holder's label.
        let owner = fields.next()?.split('\t').next()?;
        if !flags.bytes().all(|b| b.is_ascii_lowercase()) || (count == 0) != owner.is_empty() {
            return None;
        }
        Some(Self {
            token,
            count,
            owner: (!owner.is_empty()).then_some(owner),
        })
    }

    /// Held by `owner` (under `token`, when given).
    pub(crate) fn held_by(text: &str, owner: &str, token: Option<u64>) -> bool {
        LockValue::parse(text)
            .is_some_and(|v| v.owner == Some(owner) && token.is_none_or(|token| v.token == token))
    }
}

/// The prefix of a grant message: `grant:TOKEN:SERVER_MS:EXPIRE_MS:MAC`.
pub(crate) const GRANT_PREFIX: &str = "grant:";

/// The grant in `payload` if it is a grant message authenticated with
/// `nonce`: its MAC is the SHA-1 of `NONCE:grant:TOKEN:SERVER_MS:EXPIRE_MS`,
/// which only the server (that stored the nonce when the waiter queued) and
/// the waiter can compute (a semaphore's request passes `NONCE:wWEIGHT`:
/// its grant is signed over the weight granted too). Anything else, forged
/// or malformed, is `None`.
pub(crate) fn verify_grant(payload: &str, nonce: &str) -> Option<Grant> {
    let (signed, mac) = payload.rsplit_once(':')?;
    let mut fields = signed.strip_prefix(GRANT_PREFIX)?.split(':');
    let grant = Grant {
        token: fields.next()?.parse().ok()?,
        granted_at_ms: fields.next()?.parse().ok()?,
        expire_ms: fields.next()?.parse().ok()?,
    };
    if fields.next().is_some() || nonce.is_empty() {
        return None;
    }
    let mut sha = sha1_smol::Sha1::new();
    sha.update(nonce.as_bytes());
    sha.update(b":");
    sha.update(signed.as_bytes());
    // Both sides are lowercase hex of a fixed length.
    (sha.digest().to_string() == mac).then_some(grant)
}

/// Decode an acquire reply (see `acquire.lua`).
pub(crate) fn decode_acquire(fair: bool, waiter_ttl: Duration, reply: &[i64]) -> Result<Acquire> {
    let bad = || unexpected("native acquire", reply);
    let token = |t: i64| u64::try_from(t).map_err(|_| bad());
    match *reply {
        [1, t] => Ok(Acquire::Acquired {
            token: Some(token(t)?),
            key_ttl: None,
        }),
        [2, count, t] => Ok(Acquire::Reentered {
            count: u32::try_from(count).map_err(|_| bad())?,
            token: Some(token(t)?),
            key_ttl: None,
        }),
        [3, pttl, position, server_ms] => {
            let refresh = refresh_interval(waiter_ttl);
            let lock_left = u64::try_from(pttl).ok().map(Duration::from_millis);
            let ttl = match (fair, position, lock_left) {
                // First in line: retry right when the lease runs out.
                (true, 1, Some(left)) => left.min(refresh),
                // Non-fair: retry when the lease runs out or on "free"; at
                // least every refresh interval, as a lost message costs no more.
                (false, _, Some(left)) => left.min(refresh),
                _ => refresh,
            }
            .max(Duration::from_millis(1));
            Ok(Acquire::Queued {
                ttl,
                position: u64::try_from(position).ok().filter(|p| *p > 0),
                server_ms: Some(server_ms),
            })
        }
        [4] => Ok(Acquire::Busy),
        _ => Err(bad()),
    }
}

/// One lock under the native protocol.
#[derive(Debug, Clone)]
pub(crate) struct NativeLock {
    pub(crate) name: String,
    pub(crate) fair: bool,
    keys: NativeKeys,
    waiter_ttl: Duration,
    /// `waiter_ttl` and the release cache's lifetime in milliseconds, as
    /// the scripts take them: written once, not on every call.
    waiter_ttl_ms: Box<str>,
    release_cache_ms: Box<str>,
    /// The client's label, written next to the lock (see `label.rs`).
    label: std::sync::Arc<str>,
}

impl NativeLock {
    pub(crate) fn new(name: &str, fair: bool, settings: &ProtocolSettings) -> Self {
        Self {
            name: name.to_owned(),
            fair,
            keys: NativeKeys::new(name),
            waiter_ttl: settings.waiter_ttl,
            waiter_ttl_ms: (*ms(settings.waiter_ttl)).into(),
            release_cache_ms: (*ms(settings.release_cache)).into(),
            label: std::sync::Arc::clone(&settings.label),
        }
    }

    pub(crate) fn lock_key(&self) -> &str {
        self.keys.lock()
    }

    pub(crate) fn max_pause(&self) -> Duration {
        refresh_interval(self.waiter_ttl)
    }

    pub(crate) fn verify_grant(&self, payload: &str, nonce: &str) -> Option<Grant> {
        verify_grant(payload, nonce)
    }

    /// The owner's hold count: the lock's value names one owner. A lock
    /// key of another type counts as none here (the acquisition's script
    /// then says what it holds: another program's data, or a lock of the
    /// older layout).
    pub(crate) async fn hold_count(&self, conn: &Connection, owner: &str) -> Result<u32> {
        let value: Option<String> =
            match conn.command(&self.name, "GET", self.keys.lock(), &[]).await {
                Err(crate::Error::WrongType { .. }) => None,
                other => other?,
            };
        Ok(value
            .as_deref()
            .and_then(LockValue::parse)
            .filter(|v| v.owner == Some(owner))
            .map_or(0, |v| v.count))
    }

    /// How a replica acknowledgement proves `owner`'s hold (of the
    /// acquisition with `token`): the lock's value names them.
    pub(crate) fn hold_proof(&self, owner: &str, token: Option<u64>) -> HoldProof {
        let owner = owner.to_owned();
        HoldProof {
            key: self.keys.lock().to_owned(),
            check: ProofCheck::Value {
                holds: HoldsFn(std::sync::Arc::new(move |value| {
                    LockValue::held_by(value, &owner, token)
                })),
            },
        }
    }

    /// The lock, the line and the records: KEYS[1..3] of every script.
    fn keys(&self) -> [&str; 3] {
        let [lock, line, waiters] = &self.keys.all;
        [lock, line, waiters]
    }

    /// Every waiter, fair or not, has its own channel: a release wakes one
    /// waiter, not all.
    pub(crate) fn wake_channel(&self, owner: &str) -> String {
        format!("{}:{owner}", self.keys.channel)
    }

    /// The scripts' fair or non-fair letter.
    fn kind(&self) -> &'static str {
        if self.fair { "f" } else { "n" }
    }

    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        let waiter_ttl = self.waiter_ttl;
        let (lease, base) = (ms(args.lease), Decimal::new(args.base.into()));
        let mode = match (self.fair, args.queue) {
            (true, true) => "fq",
            (true, false) => "fo",
            (false, true) => "nq",
            (false, false) => "no",
        };
        let script_args: [&str; 7] = [
            args.owner,
            &lease,
            &self.waiter_ttl_ms,
            mode,
            &base,
            args.nonce,
            &self.label,
        ];
        // The uncontended take (`acquire_fast.lua`) answers with the new
        // hold's token alone: an integer, which the client reads for less
        // than an array; every other outcome is an array.
        let reply: Ints = conn
            .script(&ACQUIRE, &self.name, &self.keys(), &script_args)
            .await?;
        match reply {
            Ints::One(token) => decode_acquire(self.fair, waiter_ttl, &[1, token]),
            Ints::Many(reply) => decode_acquire(self.fair, waiter_ttl, &reply),
        }
    }

    pub(crate) async fn give_up(
        &self,
        conn: &Connection,
        owner: &str,
        _wait: Option<Duration>,
        nonce: &str,
    ) -> Result<bool> {
        let args: [&str; 3] = [owner, nonce, self.kind()];
        let reply: i64 = conn
            .script(&GIVE_UP, &self.name, &self.keys(), &args)
            .await?;
        Ok(reply > 0)
    }

    /// The key caching the answer of release `request`.
    pub(crate) fn release_cache_key(&self, request: &str) -> String {
        crate::name::joined(&self.keys.release_cache, request)
    }

    /// Whether a release that answered `reply` wrote an answer cache: a
    /// partial one, or a full one that names no hold (`scope` without a
    /// token: `unlock_as`, the undo of an attempt), which a retry tells from
    /// a release of the owner's next hold by its answer only. A full release
    /// of a named hold leaves its request id in the lock's value instead
    /// (see `release.lua`).
    pub(crate) fn release_cached(&self, reply: &Release, scope: &Scope<'_>) -> bool {
        *reply == Release::StillHeld || (scope.token.is_none() && *reply == Release::Released)
    }

    pub(crate) async fn release(
        &self,
        conn: &Connection,
        owner: &str,
        _lease: Duration,
        request: &str,
        scope: &Scope<'_>,
    ) -> Result<Release> {
        let cache = self.release_cache_key(request);
        let [lock, line, waiters] = self.keys();
        let keys = [lock, line, waiters, &cache];
        let token = scope.token.map(Decimal::new);
        let args: [&str; 5] = [
            owner,
            &self.release_cache_ms,
            token.as_deref().unwrap_or_default(),
            scope.nonce.unwrap_or_default(),
            self.kind(),
        ];
        let reply: i64 = conn.script(&RELEASE, &self.name, &keys, &args).await?;
        Release::decode("native release", reply)
    }

    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<bool> {
        let args: [&str; 2] = [REVOKED_PREFIX, self.kind()];
        let reply: i64 = conn
            .script(&FORCE_RELEASE, &self.name, &self.keys(), &args)
            .await?;
        Ok(reply == 1)
    }

    /// The holder's remaining lease, `None` when free (the key absent, or
    /// the marker a release leaves).
    pub(crate) async fn remaining_lease(&self, conn: &Connection) -> Result<Option<Duration>> {
        let pttl: i64 = conn
            .script(&LEASE, &self.name, &[self.keys.lock()], &[])
            .await?;
        Ok(u64::try_from(pttl).ok().map(Duration::from_millis))
    }

    /// `owner`'s place in line and the queue length.
    pub(crate) async fn queue_position(
        &self,
        conn: &Connection,
        owner: &str,
    ) -> Result<(u64, u64)> {
        let reply: Vec<i64> = conn
            .script(&POSITION, &self.name, &self.keys(), &[owner])
            .await?;
        super::decode_position("native position", &reply)
    }

    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        type Reply = (
            String,
            i64,
            String,
            i64,
            Vec<String>,
            Vec<String>,
            i64,
            Vec<String>,
        );
        let (holder, count, token, pttl, line, deadlines, now, labels): Reply =
            conn.script(&INSPECT, &self.name, &self.keys(), &[]).await?;
        let labels = super::Labels::from_fields(&labels);
        let bad = || unexpected("native inspect", (&holder, count, &token));
        let (holders, token) = if holder.is_empty() {
            (Vec::new(), None)
        } else {
            let count = u32::try_from(count).map_err(|_| bad())?;
            let token: u64 = token.parse().map_err(|_| bad())?;
            let holder = Holder {
                label: labels.of(&holder),
                owner: holder,
                count,
                mode: super::HoldMode::Exclusive,
            };
            (vec![holder], Some(token))
        };
        Ok(LockInfo::from_parts(
            &self.name,
            Protocol::Native,
            holders,
            pttl,
            token,
            super::waiters(line, &deadlines, now, &labels),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(nonce: &str, grant: &str) -> String {
        let mut sha = sha1_smol::Sha1::new();
        sha.update(format!("{nonce}:{grant}").as_bytes());
        format!("{grant}:{}", sha.digest())
    }

    #[test]
    fn lock_values() {
        let held = LockValue::parse("1795956774627633:2:uw:n1:r1:c1:1\thost:1").unwrap();
        assert_eq!(
            held,
            LockValue {
                token: 1_795_956_774_627_633,
                count: 2,
                owner: Some("c1:1"),
            }
        );
        let free = LockValue::parse("1795956774627633:0:wk::r1:").unwrap();
        assert_eq!((free.count, free.owner), (0, None));
        assert!(LockValue::held_by("5:1::n::c:1\tl", "c:1", Some(5)));
        assert!(LockValue::held_by("5:1::n::c:1\tl", "c:1", None));
        assert!(!LockValue::held_by("5:1::n::c:1\tl", "c:1", Some(6)));
        assert!(!LockValue::held_by("5:1::n::c:10\tl", "c:1", None));
        assert!(!LockValue::held_by("5:0:::r:", "", None));
        // Not a lock's value: a holder with a count of 0, a count without
        // one, flags that are not lowercase letters, missing fields, junk.
        for junk in [
            "5:0::n::c:1",
            "5:1::n::",
            "5:1:X:n::c:1",
            "5:1::n",
            "x:1::n::c:1",
            "",
            "hello",
        ] {
            assert_eq!(LockValue::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn grants() {
        let message = signed("n0nce", "grant:1763821234567890:1763821234567:6000");
        assert_eq!(
            verify_grant(&message, "n0nce"),
            Some(Grant {
                token: 1_763_821_234_567_890,
                granted_at_ms: 1_763_821_234_567,
                expire_ms: 6000,
            })
        );
        // Another waiter's secret, a forged MAC, an empty secret, junk.
        assert_eq!(verify_grant(&message, "other"), None);
        assert_eq!(
            verify_grant("grant:9000000000000000000:1:6000:00", "n0nce"),
            None
        );
        assert_eq!(verify_grant(&signed("", "grant:1:1:1"), ""), None);
        for junk in [
            "free",
            "grant:x:1:1:aa",
            "grant:1",
            "0",
            "",
            ":",
            "grant:1:2:3:4:5",
        ] {
            assert_eq!(verify_grant(junk, "n0nce"), None, "{junk:?}");
        }
        // Extreme values decode without overflow.
        let extreme = signed("k", "grant:18446744073709551615:-9223372036854775808:0");
        assert!(verify_grant(&extreme, "k").is_some());
    }
}
