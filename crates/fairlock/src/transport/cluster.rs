//! Redis Cluster: the command connection that routes every call by its
//! first key's hash slot, and the slot arithmetic the watchdog groups
//! renewals by (the seeds of a `redis+cluster://` URL are parsed in
//! `url.rs`).
//!
//! ## Behavior
//! - Connecting asks the seeds (any one that answers is enough) for the
//!   slot map; the connection keeps one multiplexed connection per master
//!   and follows `MOVED` (a slot moved for good, the map is refreshed) and
//!   `ASK` (a slot in migration) redirections itself, a few times per call.
//! - A script runs with EVALSHA on the master of its first key's slot. A
//!   NOSCRIPT reply (a promoted replica, a new node: scripts are not
//!   replicated) runs it once with EVAL, routed by the same key, which also
//!   leaves it in that node's script cache. (A separate SCRIPT LOAD routed
//!   by slot could reach another node than the redirected EVALSHA while the
//!   slot map is refreshed after a failover: the tests saw NOSCRIPT twice.)
//! - What the redirections do not fix within the call (`TRYAGAIN` during a
//!   migration, `CLUSTERDOWN` and refused connections while a failed master
//!   is replaced) is an [`Error::Unavailable`] or [`Error::Connection`],
//!   which the retry policy (`retry.rs`) retries within the retry budget.
//! - Wake-ups use sharded pub/sub when every master has it (Redis 7+,
//!   probed with `PUBSUB SHARDNUMSUB` as Redisson does): the scripts then
//!   publish with SPUBLISH to channels that carry the lock's hash tag, so a
//!   channel lives in its lock's slot. See `sharded.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::FromRedisValue;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::endpoint::Endpoint;
use super::errors::{from_first_reply, from_redis, from_redis_conn, from_script};
use super::eviction::read_cluster_eviction_policy;
use super::replica_sync::ReplicaSync;
use super::script::{Reload, eval_cached};
use super::timeouts::Timeouts;
use super::url::Seeds;
use crate::error::{Error, Result};

/// Number of hash slots of a Redis Cluster.
pub(crate) const SLOTS: u16 = 16384;

/// The hash slot of `key`: CRC16 (XMODEM) of the key, or of its hash tag
/// (the text between the first `{` and the next `}`, when not empty),
/// modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16(hashed) % SLOTS
}

/// A key that starts with `prefix` and lies in the slot of `key`: `key`'s
/// hash tag (or `key` itself when it has none) in braces after `prefix`.
/// A key without a hash tag that contains `}` cannot be a tag itself: then
/// the tag is a number whose slot is `key`'s, found by counting up.
pub(crate) fn same_slot_key(prefix: &str, key: &str) -> String {
    let wanted = slot(key);
    let tagged = |tag: &str| format!("{prefix}{{{tag}}}");
    let direct = tagged(tag_of(key).unwrap_or(key));
    if slot(&direct) == wanted {
        return direct;
    }
    // Every slot is the CRC of some number below a few hundred thousand.
    (0u32..)
        .map(|n| tagged(&n.to_string()))
        .find(|k| slot(k) == wanted)
        .unwrap_or(direct)
}

/// The hash tag of `key`: the text between its first `{` and the next `}`,
/// when not empty.
fn tag_of(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let len = key[open + 1..].find('}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster
/// hashes keys.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The command connection to a cluster. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ClusterCommands {
    conn: ClusterConnection,
    /// The seeds, `host:port,...`, for errors.
    addr: Arc<str>,
    /// `maxmemory-policy` of a master, read at connect.
    maxmemory_policy: Option<Arc<str>>,
    /// Every master has sharded pub/sub (scripts publish with SPUBLISH).
    sharded: bool,
    /// The response timeout: EVALSHA and the EVAL after its NOSCRIPT share
    /// one.
    response_timeout: Duration,
    /// For connections of `WAIT` to one master: the data nodes' settings
    /// (credentials, TLS) and the client's timeouts.
    endpoint: Endpoint,
    timeouts: Timeouts,
    /// Connections for `WAIT`, by master address (`host:port`).
    replica_syncs: Arc<std::sync::Mutex<HashMap<String, ReplicaSync>>>,
}

/// How to build more cluster clients for the same seeds (the pub/sub one).
#[derive(Clone)]
pub(crate) struct Builder {
    seeds: Seeds,
    timeouts: Timeouts,
    #[cfg(feature = "tls")]
    certs: Option<redis::TlsCertificates>,
}

impl Builder {
    pub(crate) fn new(
        seeds: Seeds,
        timeouts: Timeouts,
        #[cfg(feature = "tls")] certs: Option<redis::TlsCertificates>,
    ) -> Self {
        Self {
            seeds,
            timeouts,
            #[cfg(feature = "tls")]
            certs,
        }
    }

    /// A cluster client builder with this client's timeouts: redirections
    /// and refused nodes are retried a few times within one call (20 ms to
    /// 500 ms apart); the retry policy above does the rest.
    pub(crate) fn builder(&self) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(self.seeds.nodes.iter().cloned())
            .connection_timeout(self.timeouts.connect)
            .response_timeout(self.timeouts.response)
            .retries(4)
            .min_retry_wait(20)
            .max_retry_wait(500);
        #[cfg(feature = "tls")]
        if let Some(certs) = &self.certs {
            return builder.certs(certs.clone());
        }
        builder
    }

    /// Every seed, `host:port,...`, for errors.
    pub(crate) fn seeds_address(&self) -> String {
        let seeds: Vec<String> = self
            .seeds
            .nodes
            .iter()
            .map(|i| i.addr().to_string())
            .collect();
        seeds.join(",")
    }

    /// The first seed, `host:port`, for messages.
    pub(crate) fn address(&self) -> String {
        self.seeds
            .nodes
            .first()
            .map(|info| info.addr().to_string())
            .unwrap_or_default()
    }
}

impl ClusterCommands {
    /// Connect through the seeds; a probe PING tells apart seeds that are
    /// down, not Redis or refuse the credentials, then the sharded pub/sub
    /// support and the eviction policy are read. Cancelling it drops the
    /// connections made so far.
    pub(crate) async fn connect(builder: Builder, endpoint: &Endpoint) -> Result<Self> {
        let addr = builder.seeds_address();
        let client = builder
            .builder()
            .build()
            .map_err(|e| Error::InvalidConfig(format!("cannot use the cluster at {addr}: {e}")))?;
        let connect = client.get_async_connection();
        let mut conn = match tokio::time::timeout(builder.timeouts.connect * 2, connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) if err.to_string().contains("cluster support disabled") => {
                return Err(Error::InvalidConfig(format!(
                    "Redis at {addr} is not a Redis Cluster node (cluster support disabled): \
                     connect with redis://HOST:PORT instead of redis+cluster://"
                )));
            }
            Ok(Err(err)) => return Err(from_first_reply(err, &addr)),
            Err(_) => {
                return Err(from_redis_conn(
                    super::errors::timed_out("cluster connect timed out"),
                    &addr,
                ));
            }
        };
        redis::cmd("PING")
            .query_async::<()>(&mut conn)
            .await
            .map_err(|e| from_first_reply(e, &addr))?;
        // Redisson's probe: sharded pub/sub is used when every master
        // answers PUBSUB SHARDNUMSUB (Redis 7+).
        let sharded = redis::cmd("PUBSUB")
            .arg("SHARDNUMSUB")
            .query_async::<redis::Value>(&mut conn)
            .await
            .is_ok();
        let maxmemory_policy = read_cluster_eviction_policy(&mut conn, &addr).await;
        Ok(Self {
            conn,
            addr: builder.seeds_address().into(),
            maxmemory_policy,
            sharded,
            response_timeout: builder.timeouts.response,
            endpoint: endpoint.clone(),
            timeouts: builder.timeouts,
            replica_syncs: Arc::default(),
        })
    }

    /// The `WAIT` connections to the master at `addr` (`host:port`, as
    /// [`node_for`](Self::node_for) names it), made on first use.
    pub(super) fn replica_sync(&self, addr: &str) -> Result<ReplicaSync> {
        let mut syncs = self.replica_syncs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sync) = syncs.get(addr) {
            return Ok(sync.clone());
        }
        let (host, port) = addr
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
            .ok_or_else(|| Error::Protocol(format!("a master address without a port: {addr}")))?;
        let client = self.endpoint.for_data_node(host, port).redis_client()?;
        let sync = ReplicaSync::new(client, addr.into(), self.timeouts);
        // Masters come and go with failovers: a few are kept.
        if syncs.len() >= 64 {
            syncs.clear();
        }
        syncs.insert(addr.to_owned(), sync.clone());
        Ok(sync)
    }

    /// `maxmemory-policy` of a master, as read at connect.
    pub(crate) fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// The seeds, `host:port,...` (the node serving a call is redis-rs's
    /// choice; events name the cluster).
    pub(crate) fn seeds(&self) -> &str {
        &self.addr
    }

    /// `true` when wake-ups use sharded pub/sub (SPUBLISH/SSUBSCRIBE).
    pub(crate) fn sharded(&self) -> bool {
        self.sharded
    }

    /// Run the script whose SHA-1 is `hash` (source `code`) with `keys`
    /// and `args`, on the master of the first key's slot (see
    /// [`eval_cached`]: EVALSHA, then EVAL after `NOSCRIPT`, calling
    /// `reloaded`, within one response timeout). Cancelling it drops the
    /// reply; the script may have run. The cluster connection itself sends
    /// a call again after a dropped connection, so a script may run twice:
    /// every native script is safe to run again (request ids, acquisition
    /// secrets, a latch count-down's party); Redisson's scripts that count
    /// (a counting semaphore's release, a latch's count-down) are not, as
    /// in Redisson's own client, which retries them too.
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        hash: &str,
        code: &str,
        name: &str,
        keys: &[&str],
        args: &[&str],
        reloaded: impl FnOnce(),
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        eval_cached(
            &mut conn,
            hash,
            code,
            keys,
            args,
            self.response_timeout,
            Reload::Eval,
            reloaded,
        )
        .await
        .map_err(|e| from_script(e, &self.addr, name, keys))
    }

    /// Run one command on `key` of lock `name`. Cancelling it drops the
    /// reply (the command may have run).
    pub(crate) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[&str],
    ) -> Result<T> {
        let mut cmd = redis::cmd(command);
        cmd.arg(key).arg(args);
        let mut conn = self.conn.clone();
        cmd.query_async(&mut conn)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, key))
    }

    /// `host:port` of the master serving `key` now, as the cluster says
    /// (`CLUSTER SLOTS`, asked of that master). Read only: cancelling it
    /// changes nothing.
    pub(crate) async fn node_for(&self, name: &str, key: &str) -> Result<String> {
        let mut conn = self.conn.clone();
        let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(
            slot(key),
            SlotAddr::Master,
        )));
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let table = conn
            .route_command(cmd, route)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, key))?;
        let wanted = slot(key);
        serving(&table, wanted).ok_or_else(|| {
            Error::Protocol(format!("CLUSTER SLOTS names no master for slot {wanted}"))
        })
    }
}

/// The master of `slot` in a `CLUSTER SLOTS` reply:
/// `[[first, last, [host, port, id, ...], replicas...], ...]`.
fn serving(table: &redis::Value, slot: u16) -> Option<String> {
    let redis::Value::Array(ranges) = table else {
        return None;
    };
    ranges.iter().find_map(|range| {
        let redis::Value::Array(fields) = range else {
            return None;
        };
        let (redis::Value::Int(first), redis::Value::Int(last)) = (fields.first()?, fields.get(1)?)
        else {
            return None;
        };
        if !(*first..=*last).contains(&i64::from(slot)) {
            return None;
        }
        let redis::Value::Array(master) = fields.get(2)? else {
            return None;
        };
        let host = String::from_redis_value_ref(master.first()?).ok()?;
        let port = i64::from_redis_value_ref(master.get(1)?).ok()?;
        Some(format!("{host}:{port}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from `CLUSTER KEYSLOT` on Redis 7.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{foo}:bar"), 12182);
        assert_eq!(slot("a{foo}"), 12182);
        // An empty tag hashes the whole key; only the first tag counts.
        assert_eq!(slot("{}foo"), crc16(b"{}foo") % SLOTS);
        assert_eq!(slot("{foo}{bar}"), 12182);
        assert_eq!(slot("{foo"), crc16(b"{foo") % SLOTS);
    }

    #[test]
    fn same_slot_keys() {
        for key in [
            "fairlock:{job}:lock",
            "job",
            "redisson_lock_queue:{job}",
            "a}b",
            "{}x",
            "x{y",
            "",
        ] {
            let same = same_slot_key("fairlock:replica-sync:", key);
            assert!(same.starts_with("fairlock:replica-sync:{"), "{same}");
            assert_eq!(slot(&same), slot(key), "{key:?} -> {same:?}");
        }
        assert_eq!(
            same_slot_key("p:", "fairlock:{job}:lock"),
            "p:{job}".to_owned()
        );
    }
}
