//! `WAIT` for replicas on one server, on connections of its own (a `WAIT`
//! blocks the connection it is sent on): a pool of idle ones, the holds
//! proven on the same server in the same pipeline, and what was found.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, FromRedisValue};

use super::errors::from_redis_conn;
use super::timeouts::Timeouts;
use crate::error::Result;

/// Connections for `WAIT` to one server (see
/// [`Connection::sync_replicas`](super::Connection::sync_replicas)): a pool
/// of idle ones. Cheap to clone.
#[derive(Clone)]
pub(super) struct ReplicaSync {
    client: redis::Client,
    addr: Arc<str>,
    idle: Arc<std::sync::Mutex<Vec<MultiplexedConnection>>>,
    /// The client's timeouts.
    pub(super) timeouts: Timeouts,
}

impl ReplicaSync {
    pub(super) fn new(client: redis::Client, addr: Arc<str>, timeouts: Timeouts) -> Self {
        Self {
            client,
            addr,
            idle: Arc::default(),
            timeouts,
        }
    }

    /// `write` (a write every replica receives, so that `WAIT` covers
    /// whatever this client or a handoff wrote before) then `WAIT`, on an
    /// idle connection of the pool (a new one when none is idle).
    ///
    /// A pooled connection that fails at once (closed by a server that
    /// restarted since) is dropped with the rest of the pool, and the sync
    /// runs once more on a new connection; a pooled connection that timed
    /// out is not retried (the master is slow, not gone: the caller's
    /// budget is spent). The `WAIT` is bounded by `timeout` plus one
    /// response timeout, the connect by the connect timeout.
    ///
    /// `asking`: each keyed command goes after `ASKING` (the node imports
    /// the slot of the keys).
    ///
    /// Cancelling drops the connection in use (it is not pooled again).
    pub(super) async fn sync(
        &self,
        write: &redis::Cmd,
        replicas: u32,
        timeout: Duration,
        proofs: &[HoldProof],
        asking: bool,
    ) -> Result<ReplicasSynced> {
        let pooled = self.idle.lock().ok().and_then(|mut idle| idle.pop());
        let run = |conn| {
            Wait {
                write,
                replicas,
                timeout,
                proofs,
                asking,
            }
            .run(self, conn)
        };
        if let Some(conn) = pooled {
            match run(conn).await {
                Err(err) if !err.is_timeout() => {
                    // The server closed it: the other idle ones are likely
                    // dead too.
                    if let Ok(mut idle) = self.idle.lock() {
                        idle.clear();
                    }
                }
                outcome => return outcome.map_err(|e| from_redis_conn(e, &self.addr)),
            }
        }
        // The reply to WAIT comes after `timeout` at worst.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeouts.connect))
            .set_response_timeout(Some(timeout.saturating_add(self.timeouts.response)));
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| from_redis_conn(e, &self.addr))?;
        run(conn).await.map_err(|e| from_redis_conn(e, &self.addr))
    }
}

/// One `WAIT` with its proofs (see [`ReplicaSync::sync`]).
struct Wait<'a> {
    write: &'a redis::Cmd,
    replicas: u32,
    timeout: Duration,
    proofs: &'a [HoldProof],
    asking: bool,
}

impl Wait<'_> {
    /// Each proof (the hold read, and its PTTL), then the write, then
    /// `WAIT`, in one pipeline on `conn`; puts `conn` back in `pool`'s idle
    /// connections when it answered.
    async fn run(
        self,
        pool: &ReplicaSync,
        mut conn: MultiplexedConnection,
    ) -> redis::RedisResult<ReplicasSynced> {
        let timeout_ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut pipe = redis::pipe();
        let asking = |pipe: &mut redis::Pipeline| {
            if self.asking {
                pipe.cmd("ASKING").ignore();
            }
        };
        for proof in self.proofs {
            asking(&mut pipe);
            match &proof.check {
                ProofCheck::Field { field, .. } => pipe.cmd("HGET").arg(&proof.key).arg(field),
                ProofCheck::Has { field } => pipe.cmd("HEXISTS").arg(&proof.key).arg(field),
                ProofCheck::Value { .. } => pipe.cmd("GET").arg(&proof.key),
            };
            asking(&mut pipe);
            pipe.cmd("PTTL").arg(&proof.key);
        }
        // A proof of a key that holds another type answers WRONGTYPE: that
        // hold is not proven, and the others are still judged.
        pipe.ignore_errors();
        asking(&mut pipe);
        pipe.add_command(self.write.clone())
            .ignore()
            .cmd("WAIT")
            .arg(self.replicas)
            .arg(timeout_ms);
        let sent_at = tokio::time::Instant::now();
        let replies: Vec<redis::Value> = pipe.query_async(&mut conn).await?;
        if let Ok(mut idle) = pool.idle.lock() {
            if idle.len() < 8 {
                idle.push(conn);
            }
        }
        Ok(ReplicasSynced::read(self.proofs, &replies, sent_at))
    }
}

/// A hold to prove on the server a `WAIT` is sent to, in the same pipeline
/// (so on the same server): `WAIT` acknowledges what *that* server has,
/// which after a failover behind one address (or a master switch not yet
/// noticed) may not be the server that made the grant or took the
/// renewal.
#[derive(Debug, Clone)]
pub(crate) struct HoldProof {
    /// The lock key.
    pub(crate) key: String,
    /// What the key must hold.
    pub(crate) check: ProofCheck,
}

/// What a [`HoldProof`]'s key must hold.
#[derive(Debug, Clone)]
pub(crate) enum ProofCheck {
    /// A hash: `HGET key field` must answer `value`.
    Field { field: String, value: String },
    /// A hash: `HEXISTS key field` must answer 1.
    Has { field: String },
    /// A string (a native lock's value): `GET key` must answer a value
    /// that `holds(value)` accepts (the protocol knows its format).
    Value { holds: HoldsFn },
}

/// A check of a lock key's value, made by the protocol (which knows its
/// format).
#[derive(Clone)]
pub(crate) struct HoldsFn(pub(crate) std::sync::Arc<dyn Fn(&str) -> bool + Send + Sync>);

impl std::fmt::Debug for HoldsFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HoldsFn")
    }
}

/// What a `WAIT` with proofs found.
#[derive(Debug, Clone)]
pub(crate) struct ReplicasSynced {
    /// Replicas that acknowledged.
    pub(crate) acked: u32,
    /// For each proof: the local instant before which the server the `WAIT`
    /// went to keeps that hold (the pipeline's send time + the PTTL it
    /// read: the server read it later), `None` when it does not hold it.
    pub(crate) held_until: Vec<Option<tokio::time::Instant>>,
    /// The node a proof was redirected to with `ASK` (`host:port`): the
    /// slot is migrating there and the hold's key has moved.
    pub(crate) asked: Option<String>,
}

impl ReplicasSynced {
    fn read(proofs: &[HoldProof], replies: &[redis::Value], sent_at: tokio::time::Instant) -> Self {
        let held_until = proofs
            .iter()
            .enumerate()
            .map(|(i, proof)| {
                let found = replies
                    .get(2 * i)
                    .and_then(|v| String::from_redis_value(v.clone()).ok());
                let proven = match &proof.check {
                    ProofCheck::Field { value, .. } => found.as_deref() == Some(value.as_str()),
                    ProofCheck::Has { .. } => found.as_deref() == Some("1"),
                    ProofCheck::Value { holds } => found.as_deref().is_some_and(|v| (holds.0)(v)),
                };
                let pttl = replies
                    .get(2 * i + 1)
                    .and_then(|v| i64::from_redis_value(v.clone()).ok())
                    .and_then(|ms| u64::try_from(ms).ok());
                match (proven, pttl) {
                    (true, Some(ms)) => sent_at.checked_add(Duration::from_millis(ms)),
                    _ => None,
                }
            })
            .collect();
        let acked = replies
            .last()
            .and_then(|v| i64::from_redis_value(v.clone()).ok())
            .unwrap_or(0);
        let asked = replies.iter().find_map(|reply| match reply {
            redis::Value::ServerError(err) if err.code() == "ASK" => err
                .details()
                .and_then(|details| details.split_whitespace().nth(1))
                .map(str::to_owned),
            _ => None,
        });
        Self {
            acked: u32::try_from(acked.max(0)).unwrap_or(u32::MAX),
            held_until,
            asked,
        }
    }
}
