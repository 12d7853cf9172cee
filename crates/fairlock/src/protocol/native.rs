//! The `native` protocol: the same locks without Redisson's weaknesses.
//!
//! Server time only, live waiters never evicted, dead ones skipped after
//! `waiter_ttl`, O(log N) scripts, direct handoff, fencing tokens. The
//! scripts, keys and invariants are described in `docs/native-protocol.md`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::{Acquire, AcquireArgs, Holder, LockInfo, Protocol, Release, ms, unexpected};
use crate::connection::Connection;
use crate::error::Result;
use crate::name::NativeKeys;

static ACQUIRE: LazyLock<Script> = protocol_script!("native", "acquire.lua");
static RELEASE: LazyLock<Script> = protocol_script!("native", "release.lua");
static GIVE_UP: LazyLock<Script> = protocol_script!("native", "give_up.lua");
static FORCE_RELEASE: LazyLock<Script> = protocol_script!("native", "force_release.lua");
static RENEW: LazyLock<Script> = protocol_script!("native", "renew.lua");
static INSPECT: LazyLock<Script> = protocol_script!("native", "inspect.lua");
static POSITION: LazyLock<Script> = protocol_script!("native", "position.lua");

/// How long a release's result stays cached for a retried release.
const RELEASE_CACHE_MS: u64 = 20_000;

/// The prefix of a grant message: `grant:TOKEN:SERVER_MS`.
pub(crate) const GRANT_PREFIX: &str = "grant:";

/// A grant message: the fencing token and the server time of the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    pub(crate) token: u64,
    pub(crate) granted_at_ms: i64,
}

/// How often a waiter refreshes its place: a third of `waiter_ttl`.
pub(crate) fn refresh_interval(waiter_ttl: Duration) -> Duration {
    (waiter_ttl / 3).max(Duration::from_millis(1))
}

/// The grant in `payload`, if it is a grant message.
pub(crate) fn parse_grant(payload: &str) -> Option<Grant> {
    let (token, at) = payload.strip_prefix(GRANT_PREFIX)?.split_once(':')?;
    Some(Grant {
        token: token.parse().ok()?,
        granted_at_ms: at.parse().ok()?,
    })
}

/// One lock under the native protocol.
#[derive(Debug, Clone)]
pub(crate) struct NativeLock {
    pub(crate) name: String,
    pub(crate) fair: bool,
    pub(crate) keys: NativeKeys,
}

impl NativeLock {
    pub(crate) fn new(name: &str, fair: bool) -> Self {
        Self {
            name: name.to_owned(),
            fair,
            keys: NativeKeys::new(name),
        }
    }

    fn keys(&self) -> [&str; 5] {
        let k = &self.keys.all;
        [&k[0], &k[1], &k[2], &k[3], &k[4]]
    }

    pub(crate) fn wake_channel(&self, owner: &str) -> String {
        if self.fair {
            format!("{}:{owner}", self.keys.channel)
        } else {
            self.keys.channel.clone()
        }
    }

    pub(crate) async fn acquire(
        &self,
        conn: &Connection,
        args: &AcquireArgs<'_>,
    ) -> Result<Acquire> {
        let waiter_ttl = args.slot;
        let script_args = [
            args.owner.to_owned(),
            ms(args.lease),
            ms(waiter_ttl),
            self.keys.channel.clone(),
            if self.fair { "fair" } else { "nonfair" }.to_owned(),
            if args.queue { "queue" } else { "once" }.to_owned(),
            args.base.map(|b| b.to_string()).unwrap_or_default(),
        ];
        let reply: Vec<i64> = conn
            .script(&ACQUIRE, &self.name, &self.keys(), &script_args)
            .await?;
        let token = |t: i64| u64::try_from(t).map_err(|_| unexpected("native acquire", &reply));
        match reply.as_slice() {
            [1, t] => Ok(Acquire::Acquired {
                token: Some(token(*t)?),
            }),
            [2, count, t] => Ok(Acquire::Reentered {
                count: u32::try_from(*count).map_err(|_| unexpected("native acquire", &reply))?,
                token: Some(token(*t)?),
            }),
            [3, pttl, position] => {
                let refresh = refresh_interval(waiter_ttl);
                let lock_left = u64::try_from(*pttl).ok().map(Duration::from_millis);
                let ttl = match (self.fair, *position, lock_left) {
                    // Non-fair: retry when the lease runs out or on "free".
                    (false, _, Some(left)) => left.max(Duration::from_millis(1)),
                    // First in line: retry right when the lease runs out.
                    (true, 1, Some(left)) => left.min(refresh).max(Duration::from_millis(1)),
                    _ => refresh,
                };
                Ok(Acquire::Queued {
                    ttl,
                    position: u64::try_from(*position).ok().filter(|p| *p > 0),
                })
            }
            [4] => Ok(Acquire::Busy),
            _ => Err(unexpected("native acquire", &reply)),
        }
    }

    pub(crate) async fn give_up(
        &self,
        conn: &Connection,
        owner: &str,
        waiter_ttl: Duration,
    ) -> Result<bool> {
        let args = [owner.to_owned(), ms(waiter_ttl), self.keys.channel.clone()];
        let reply: i64 = conn
            .script(&GIVE_UP, &self.name, &self.keys(), &args)
            .await?;
        Ok(reply > 0)
    }

    pub(crate) async fn release(
        &self,
        conn: &Connection,
        owner: &str,
        waiter_ttl: Duration,
        request: &str,
    ) -> Result<Release> {
        let cache = format!("{}:{request}", self.keys.release_cache);
        let [k1, k2, k3, k4, k5] = self.keys();
        let keys = [k1, k2, k3, k4, k5, &cache];
        let args = [
            owner.to_owned(),
            ms(waiter_ttl),
            self.keys.channel.clone(),
            RELEASE_CACHE_MS.to_string(),
        ];
        let reply: i64 = conn.script(&RELEASE, &self.name, &keys, &args).await?;
        match reply {
            1 => Ok(Release::Released),
            0 => Ok(Release::StillHeld),
            -1 => Ok(Release::NotOwner),
            -2 => Ok(Release::NotHeld),
            other => Err(unexpected("native release", other)),
        }
    }

    pub(crate) async fn force_release(
        &self,
        conn: &Connection,
        waiter_ttl: Duration,
    ) -> Result<bool> {
        let args = [ms(waiter_ttl), self.keys.channel.clone()];
        let reply: i64 = conn
            .script(&FORCE_RELEASE, &self.name, &self.keys(), &args)
            .await?;
        Ok(reply == 1)
    }

    /// `owner`'s place in line and the queue length.
    pub(crate) async fn queue_position(
        &self,
        conn: &Connection,
        owner: &str,
    ) -> Result<(u64, u64)> {
        let reply: Vec<i64> = conn
            .script(&POSITION, &self.name, &self.keys(), &[owner.to_owned()])
            .await?;
        super::decode_position("native position", &reply)
    }

    pub(crate) async fn inspect(&self, conn: &Connection) -> Result<LockInfo> {
        type Reply = (Vec<String>, i64, Vec<String>, Vec<String>, i64);
        let (fields, pttl, queue, alive, now): Reply =
            conn.script(&INSPECT, &self.name, &self.keys(), &[]).await?;
        let field = |name: &str| {
            fields
                .chunks(2)
                .find(|pair| pair[0] == name)
                .and_then(|pair| pair.get(1))
        };
        let holders = match (field("owner"), field("count")) {
            (Some(owner), Some(count)) => vec![Holder {
                owner: owner.clone(),
                count: count
                    .parse()
                    .map_err(|_| unexpected("native inspect", &fields))?,
            }],
            _ => Vec::new(),
        };
        let token = match field("token") {
            Some(token) => Some(
                token
                    .parse()
                    .map_err(|_| unexpected("native inspect", &fields))?,
            ),
            None => None,
        };
        Ok(LockInfo::from_parts(
            &self.name,
            Protocol::Native,
            holders,
            pttl,
            token,
            super::waiters(queue, &alive, now),
        ))
    }
}

/// Renew (or claim) a batch of held locks. Returns, per lock, whether it is
/// still held by its owner.
pub(crate) async fn renew(
    conn: &Connection,
    batch: &[(&str, &str)],
    lease: Duration,
) -> Result<Vec<bool>> {
    let keys: Vec<&str> = batch.iter().map(|(key, _)| *key).collect();
    let mut args = Vec::with_capacity(batch.len() + 1);
    args.push(ms(lease));
    args.extend(batch.iter().map(|(_, owner)| (*owner).to_owned()));
    let reply: Vec<i64> = conn.script(&RENEW, "", &keys, &args).await?;
    if reply.len() != batch.len() {
        return Err(unexpected("native renew", reply));
    }
    Ok(reply.into_iter().map(|r| r == 1).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants() {
        assert_eq!(
            parse_grant("grant:1763821234567890:1763821234567"),
            Some(Grant {
                token: 1_763_821_234_567_890,
                granted_at_ms: 1_763_821_234_567
            })
        );
        assert_eq!(parse_grant("free"), None);
        assert_eq!(parse_grant("grant:x:1"), None);
        assert_eq!(parse_grant("grant:1"), None);
        assert_eq!(parse_grant("0"), None);
    }
}
