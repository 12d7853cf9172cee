//! The `native` protocol's read-write lock: fair (FIFO across readers and
//! writers), with a fencing token per acquisition, direct handoff to the
//! next reader group or writer, and every key expiring on its own (see
//! `docs/read-write-lock.md` and the scripts' prelude,
//! `native/rw_prelude.lua`).
//!
//! Each holder has a key of its own shaped as the lock's hash (owner,
//! count, token, claimed, nonce), whose TTL is its lease: the renewal, the
//! claim of a grant, the replica acknowledgement of a hold and a release
//! scoped to one acquisition work on it as on a lock. The holders set
//! (`fairlock:{NAME}:rw:holders`) is the key both sides' holds are
//! registered, renewed and revoked under.

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
use crate::transport::{Connection, HoldProof, Script};

/// A read-write lock script: the common prelude, the native prelude, the
/// read-write prelude, then the script itself.
macro_rules! rw_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(
                concat!("native/", $file),
                concat!(
                    include_str!("../common.lua"),
                    include_str!("prelude.lua"),
                    include_str!("rw_prelude.lua"),
                    include_str!($file)
                ),
            )
        })
    };
}

static ACQUIRE: LazyLock<Script> = rw_script!("rw_acquire.lua");
static RELEASE: LazyLock<Script> = rw_script!("rw_release.lua");
static GIVE_UP: LazyLock<Script> = rw_script!("rw_give_up.lua");
static FORCE_RELEASE: LazyLock<Script> = rw_script!("rw_force_release.lua");
static INSPECT: LazyLock<Script> = rw_script!("rw_inspect.lua");

/// One side of a read-write lock under the native protocol.
#[derive(Debug, Clone)]
pub(crate) struct NativeRwLock {
    pub(crate) name: String,
    /// Always fair.
    pub(crate) fair: bool,
    pub(crate) mode: RwMode,
    keys: NativeRwKeys,
    waiter_ttl: Duration,
    /// As the scripts take them: written once, not on every call.
    waiter_ttl_ms: Box<str>,
    release_cache_ms: Box<str>,
    label: std::sync::Arc<str>,
    labels: super::super::LabelsAccess,
}

impl NativeRwLock {
    pub(crate) fn new(name: &str, mode: RwMode, settings: &ProtocolSettings) -> Self {
        Self {
            name: name.to_owned(),
            fair: true,
            mode,
            keys: NativeRwKeys::new(name),
            waiter_ttl: settings.waiter_ttl,
            waiter_ttl_ms: (*ms(settings.waiter_ttl)).into(),
            release_cache_ms: (*ms(settings.release_cache)).into(),
            label: std::sync::Arc::clone(&settings.label),
            labels: settings.labels.clone(),
        }
    }

    /// The holders set: every hold of the lock, both sides, is registered
    /// under it.
    pub(crate) fn lock_key(&self) -> &str {
        self.keys.holders()
    }

    /// The id under which this side stores `owner`'s holds.
    pub(crate) fn hold_owner(&self, owner: Owner) -> Owner {
        self.mode.hold_owner(owner)
    }

    /// The hold of the acquisition with `token` (any acquisition of `id`
    /// without one), proved on a replica as a lock's: its own key.
    pub(crate) fn hold_proof(&self, id: &str, token: Option<u64>) -> HoldProof {
        let key = self.keys.hold_of(id);
        match token {
            Some(token) => HoldProof {
                key,
                field: "token".to_owned(),
                value: Some(token.to_string()),
            },
            None => HoldProof {
                key,
                field: "owner".to_owned(),
                value: Some(id.to_owned()),
            },
        }
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

    fn keys(&self) -> [&str; 5] {
        let k = &self.keys.all;
        [&k[0], &k[1], &k[2], &k[3], &k[4]]
    }

    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        let (lease, base) = (ms(args.lease), Decimal::new(args.base.into()));
        let argv: [&str; 8] = [
            args.owner,
            &lease,
            &self.waiter_ttl_ms,
            &self.keys.channel,
            if args.queue { "queue" } else { "once" },
            &base,
            args.nonce,
            &self.label,
        ];
        let [k1, k2, k3, k4, k5] = self.keys();
        let all = [k1, k2, k3, k4, k5, &self.keys.labels];
        let reply: Vec<i64> = self
            .labels
            .call(|with| {
                let keys = if with { &all[..] } else { &all[..5] };
                conn.script(&ACQUIRE, &self.name, keys, &argv)
            })
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

    pub(crate) async fn give_up(
        &self,
        conn: &Connection,
        id: &str,
        _wait: Option<Duration>,
        nonce: &str,
    ) -> Result<bool> {
        let args: [&str; 4] = [id, &self.waiter_ttl_ms, &self.keys.channel, nonce];
        let reply: i64 = conn
            .script(&GIVE_UP, &self.name, &self.keys(), &args)
            .await?;
        Ok(reply > 0)
    }

    pub(crate) async fn release(
        &self,
        conn: &Connection,
        id: &str,
        _lease: Duration,
        request: &str,
        scope: &Scope<'_>,
    ) -> Result<Release> {
        let cache = crate::name::joined(&self.keys.release_cache, request);
        let [k1, k2, k3, k4, k5] = self.keys();
        let keys = [k1, k2, k3, k4, k5, &cache];
        let token = scope.token.map(Decimal::new);
        let args: [&str; 6] = [
            id,
            &self.waiter_ttl_ms,
            &self.keys.channel,
            &self.release_cache_ms,
            token.as_deref().unwrap_or_default(),
            scope.nonce.unwrap_or_default(),
        ];
        let reply: i64 = conn.script(&RELEASE, &self.name, &keys, &args).await?;
        Release::decode("native read-write release", reply)
    }

    /// Release every hold of this side. `true` when one was released.
    pub(crate) async fn force_release(&self, conn: &Connection) -> Result<bool> {
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

    pub(crate) async fn queue_position(&self, conn: &Connection, id: &str) -> Result<(u64, u64)> {
        let reply: Vec<i64> = conn
            .script(&super::POSITION, &self.name, &self.keys(), &[id])
            .await?;
        super::super::decode_position("native position", &reply)
    }

    /// Both sides and the line at one instant. The lease shown is the
    /// longest a holder has left, the token the newest holder's.
    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        type Reply = (Vec<String>, Vec<String>, Vec<String>, i64, Vec<String>);
        let [k1, k2, k3, k4, k5] = self.keys();
        let all = [k1, k2, k3, k4, k5, &self.keys.labels];
        let (held, queue, alive, now, labels): Reply = self
            .labels
            .call(|with| conn.script(&INSPECT, &self.name, &all[..if with { 6 } else { 5 }], &[]))
            .await?;
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
        Ok(LockInfo::from_parts(
            &self.name,
            Protocol::Native,
            holders,
            longest,
            newest,
            super::super::waiters(queue, &alive, now, &labels),
        ))
    }

    /// Whether this side holds the lock: a writer, or any reader.
    pub(crate) async fn is_locked(&self, conn: &Connection) -> Result<bool> {
        let info = self.inspect(conn).await?;
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
