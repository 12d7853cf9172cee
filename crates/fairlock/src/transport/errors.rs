//! Mapping the Redis client's errors to [`Error`].

use crate::error::{Error, RedisError};

/// Classify an error of a call on lock `name` whose first key is `key`.
pub(crate) fn from_redis(err: redis::RedisError, addr: &str, name: &str, key: &str) -> Error {
    if is_connection_error(&err) {
        return Error::Connection {
            addr: addr.to_owned(),
            source: RedisError::new(err),
        };
    }
    if is_unavailable_error(&err) {
        return Error::Unavailable {
            addr: addr.to_owned(),
            source: RedisError::new(err),
        };
    }
    if err.kind() == redis::ErrorKind::AuthenticationFailed
        || err.code() == Some("WRONGPASS")
        || err.code() == Some("NOAUTH")
    {
        return Error::Auth {
            addr: addr.to_owned(),
            source: RedisError::new(err),
        };
    }
    // A script that touches a key of another type fails with a script
    // error whose message carries WRONGTYPE.
    if err.code() == Some("WRONGTYPE") || err.to_string().contains("WRONGTYPE") {
        return Error::WrongType {
            name: name.to_owned(),
            key: key.to_owned(),
            source: RedisError::new(err),
        };
    }
    Error::Redis(RedisError::new(err))
}

/// The error code of a script's refusal of data that is not a lock's:
/// `NOTALOCK INDEX REASON`, INDEX the 1-based place in KEYS of the key that
/// holds it (see `not_a_lock` in `protocol/common.lua`).
const NOT_A_LOCK: &str = "NOTALOCK";

/// The error code of a script's refusal of a lock held in an older key
/// layout: `OLDLAYOUT INDEX VERSION WHY`, INDEX as for NOTALOCK (see
/// `layout_error` in `protocol/native/lock_prelude.lua`).
const OLD_LAYOUT: &str = "OLDLAYOUT";

/// Classify an error of a script call on lock `name` with `keys`.
pub(crate) fn from_script(err: redis::RedisError, addr: &str, name: &str, keys: &[&str]) -> Error {
    if err.code() == Some(OLD_LAYOUT) {
        let mut detail = err.detail().unwrap_or("").split(' ');
        let key = detail
            .next()
            .and_then(|index| index.parse::<usize>().ok())
            .and_then(|i| keys.get(i.checked_sub(1)?))
            .or(keys.first())
            .copied()
            .unwrap_or("");
        let version = detail.next().and_then(|v| v.parse().ok()).unwrap_or(1);
        return Error::OlderLayout {
            name: name.to_owned(),
            key: key.to_owned(),
            version,
        };
    }
    if err.code() == Some(NOT_A_LOCK) {
        let detail = err.detail().unwrap_or("");
        let (index, reason) = detail.split_once(' ').unwrap_or((detail, ""));
        let key = index
            .parse::<usize>()
            .ok()
            .and_then(|i| keys.get(i.checked_sub(1)?))
            .or(keys.first())
            .copied()
            .unwrap_or("");
        return Error::NotALock {
            name: name.to_owned(),
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
    }
    from_redis(err, addr, name, keys.first().copied().unwrap_or(""))
}

/// Classify an error of a call that concerns no lock (connecting).
pub(crate) fn from_redis_conn(err: redis::RedisError, addr: &str) -> Error {
    from_redis(err, addr, "", "")
}

/// Classify an error of the first exchange with a server: a reply that does
/// not parse means something other than Redis answered.
pub(crate) fn from_first_reply(err: redis::RedisError, addr: &str) -> Error {
    if matches!(
        err.kind(),
        redis::ErrorKind::Parse | redis::ErrorKind::UnexpectedReturnType
    ) {
        return Error::NotRedis {
            addr: addr.to_owned(),
            source: RedisError::new(err),
        };
    }
    from_redis_conn(err, addr)
}

/// An I/O-level failure: the call may or may not have run.
pub(crate) fn is_connection_error(err: &redis::RedisError) -> bool {
    err.is_io_error()
        || err.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
}

/// Refusals of a busy, loading, failing-over or full server, and the
/// redirections of a cluster whose slots are moving (left over when the
/// cluster connection's own redirections ran out): worth a retry.
const UNAVAILABLE_CODES: [&str; 9] = [
    "BUSY",
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "OOM",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
];

fn is_unavailable_error(err: &redis::RedisError) -> bool {
    matches!(
        err.kind(),
        redis::ErrorKind::Server(
            redis::ServerErrorKind::BusyLoading
                | redis::ServerErrorKind::TryAgain
                | redis::ServerErrorKind::MasterDown
                | redis::ServerErrorKind::ReadOnly
                | redis::ServerErrorKind::ClusterDown
                | redis::ServerErrorKind::Moved
                | redis::ServerErrorKind::Ask
        )
    ) || err
        .code()
        .is_some_and(|code| UNAVAILABLE_CODES.contains(&code))
}

/// A timeout as a Redis client error (for calls this crate bounds itself).
pub(crate) fn timed_out(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

/// A command that does not answer within `limit` counts as a broken
/// connection (the commands of the pub/sub connections: `server_pubsub.rs`,
/// `sharded.rs`).
pub(super) async fn bounded(
    limit: std::time::Duration,
    addr: &str,
    command: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> crate::error::Result<()> {
    match tokio::time::timeout(limit, command).await {
        Ok(result) => result.map_err(|e| from_redis_conn(e, addr)),
        Err(_) => Err(from_redis_conn(
            timed_out("pub/sub command timed out"),
            addr,
        )),
    }
}
