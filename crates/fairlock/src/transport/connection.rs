//! The command connection: one multiplexed, self-reconnecting connection per
//! client, and the script runner that maps Redis errors to [`Error`].
//!
//! ## Behavior
//! - A command that finds the connection broken fails with
//!   [`Error::Connection`]; the connection reconnects in the background and
//!   the next command uses the new one. Callers that wait (acquire loops)
//!   retry within the retry budget (see `retry.rs`).
//! - A command that gets no reply within the response timeout fails with
//!   [`Error::Connection`]. It may or may not have run on the server; the
//!   scripts are written so that a retry is safe (the base hold count in
//!   the acquire scripts and the unlock result cache).
//! - A script is sent with EVALSHA, and loaded again after NOSCRIPT (a
//!   restarted or flushed server).
//! - At connect the server's `maxmemory-policy` is read (`CONFIG GET`); a
//!   policy under which Redis may evict lock keys is logged as a warning
//!   (see `docs/deployment.md`). A server that refuses `CONFIG` is not
//!   checked, and the connect goes on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, FromRedisValue};

use super::cluster::{self, ClusterCommands};
use super::endpoint::Endpoint;
use super::errors::{from_first_reply, from_redis, from_redis_conn};
use super::pubsub::PubSubConnector;
use crate::error::{Error, Result};
use crate::events::{self, Event};

/// A Lua script: its SHA-1 computed once, run with EVALSHA. On a cluster
/// with sharded pub/sub the script's wake-up publications run as SPUBLISH
/// (a variant made once from the same source, see [`sharded_source`]).
pub(crate) struct Script {
    plain: redis::Script,
    plain_code: String,
    sharded: redis::Script,
    sharded_code: String,
}

impl Script {
    pub(crate) fn new(code: &str) -> Self {
        let sharded_code = sharded_source(code);
        Self {
            plain: redis::Script::new(code),
            plain_code: code.to_owned(),
            sharded: redis::Script::new(&sharded_code),
            sharded_code,
        }
    }
}

/// The script with every `redis.call('publish', ...)` on a lock's own
/// channel turned into `redis.call('spublish', ...)`. The lock channels
/// carry the lock's hash tag, so on a cluster they live in the slot of the
/// keys the script touches; the revocation channel
/// (`fairlock:revoked:CLIENT`, published with `revoked_prefix`) belongs to
/// no slot and stays a cluster-wide PUBLISH.
pub(crate) fn sharded_source(code: &str) -> String {
    code.lines()
        .map(|line| {
            if line.contains("revoked_prefix") {
                line.to_owned()
            } else {
                line.replace("redis.call('publish',", "redis.call('spublish',")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// How long connecting and each reply may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) response: Duration,
}

/// The command connection of one client. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connection {
    backend: Backend,
    addr: Arc<str>,
    maxmemory_policy: Option<Arc<str>>,
}

/// One server, or a cluster routed by key slot (`cluster.rs`).
#[derive(Clone)]
enum Backend {
    Single(ConnectionManager),
    Cluster(ClusterCommands),
}

impl Connection {
    /// Connect to `endpoint`: a probe tells apart a server that is down, is
    /// not Redis, refuses the credentials or lacks the database, then the
    /// reconnecting command connection is made. Also returns what opens
    /// pub/sub connections to the same server.
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        timeouts: Timeouts,
    ) -> Result<(Self, PubSubConnector)> {
        let addr: Arc<str> = endpoint.address().into();
        if let Some(seeds) = endpoint.cluster_seeds() {
            // Each seed in turn until one answers PING: a cluster whose
            // seeds all fail is reported as the first one failed (down,
            // not Redis, refusing the credentials), told apart as for one
            // server.
            let mut first_failure = None;
            for info in seeds.nodes.iter() {
                let seed = info.addr().to_string();
                let client = endpoint.client_for(info.clone())?;
                match probe_seed(&client, &seed, timeouts).await {
                    Ok(()) => {
                        first_failure = None;
                        break;
                    }
                    Err(err) => {
                        first_failure.get_or_insert(err);
                    }
                }
            }
            if let Some(err) = first_failure {
                return Err(err);
            }
            let builder = cluster::Builder::new(
                seeds.clone(),
                timeouts,
                #[cfg(feature = "tls")]
                endpoint.tls_certificates(),
            );
            let commands = ClusterCommands::connect(builder.clone()).await?;
            let pubsub = PubSubConnector::cluster(builder, commands.sharded(), timeouts);
            let connection = Self {
                maxmemory_policy: commands.maxmemory_policy().map(Arc::from),
                backend: Backend::Cluster(commands),
                addr,
            };
            return Ok((connection, pubsub));
        }
        let client = endpoint.redis_client()?;
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response));
        // The probe runs the handshake (AUTH) once, on database 0, then
        // selects the URL's database itself: a down server, a server of
        // another kind, a wrong password and a missing database are each
        // reported now and told apart.
        let mut probe = endpoint
            .probe_client()?
            .get_multiplexed_async_connection_with_config(&probe_config)
            .await
            .map_err(|e| from_first_reply(e, &addr))?;
        redis::cmd("PING")
            .query_async::<()>(&mut probe)
            .await
            .map_err(|e| from_first_reply(e, &addr))?;
        let db = endpoint.db();
        if db != 0 {
            redis::cmd("SELECT")
                .arg(db)
                .query_async::<()>(&mut probe)
                .await
                .map_err(|e| missing_database(e, &addr, db))?;
        }
        refuse_cluster_node(&mut probe, &addr).await?;
        let maxmemory_policy = read_eviction_policy(&mut probe, &addr).await;
        drop(probe);

        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(Some(timeouts.response))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500));
        let manager = ConnectionManager::new_with_config(client.clone(), manager_config)
            .await
            .map_err(|e| from_redis_conn(e, &addr))?;
        let connection = Self {
            backend: Backend::Single(manager),
            addr,
            maxmemory_policy,
        };
        Ok((connection, PubSubConnector::new(client, timeouts)))
    }

    /// The group of `key` for calls on several keys: keys of one group may
    /// go in one script call. Its hash slot on a cluster (a call whose keys
    /// span slots fails with CROSSSLOT); one group on a single server.
    pub(crate) fn key_group(&self, key: &str) -> u16 {
        match self.backend {
            Backend::Single(_) => 0,
            Backend::Cluster(_) => cluster::slot(key),
        }
    }

    /// `host:port` of the server that serves `key` of lock `name`: the
    /// master of its slot on a cluster, the server otherwise.
    pub(crate) async fn node_for(&self, name: &str, key: &str) -> Result<String> {
        match &self.backend {
            Backend::Single(_) => Ok(self.addr.to_string()),
            Backend::Cluster(cluster) => cluster.node_for(name, key).await,
        }
    }

    /// The server's `maxmemory-policy` as read at connect.
    pub(crate) fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// Run `script` for lock `name` (named in errors, with the first key).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        name: &str,
        keys: &[&str],
        args: &[String],
    ) -> Result<T> {
        let manager = match &self.backend {
            Backend::Single(manager) => manager,
            Backend::Cluster(cluster) => {
                let (hash, code) = if cluster.sharded() {
                    (script.sharded.get_hash(), script.sharded_code.as_str())
                } else {
                    (script.plain.get_hash(), script.plain_code.as_str())
                };
                return cluster.script(hash, code, name, keys, args).await;
            }
        };
        let mut invocation = script.plain.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg.as_str());
        }
        let mut manager = manager.clone();
        invocation
            .invoke_async(&mut manager)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, keys.first().copied().unwrap_or("")))
    }

    /// Run one command on `key` of lock `name`.
    pub(crate) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[&str],
    ) -> Result<T> {
        let manager = match &self.backend {
            Backend::Single(manager) => manager,
            Backend::Cluster(cluster) => return cluster.command(name, command, key, args).await,
        };
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        for arg in args {
            cmd.arg(*arg);
        }
        let mut manager = manager.clone();
        cmd.query_async(&mut manager)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, key))
    }
}

/// A cluster node reached with `redis://` would answer MOVED for most
/// locks and CROSSSLOT for batched renewals: refused at connect with the
/// URL to use. A server that refuses INFO is not checked.
async fn refuse_cluster_node(probe: &mut MultiplexedConnection, addr: &str) -> Result<()> {
    let info: redis::RedisResult<String> =
        redis::cmd("INFO").arg("cluster").query_async(probe).await;
    match info {
        Ok(text) if text.lines().any(|line| line.trim() == "cluster_enabled:1") => {
            Err(Error::InvalidConfig(format!(
                "Redis at {addr} is a Redis Cluster node: connect with \
                 redis+cluster://{addr} (add more nodes, comma-separated, as seeds)"
            )))
        }
        _ => Ok(()),
    }
}

/// Connect to one cluster seed and PING it, within the timeouts.
async fn probe_seed(client: &redis::Client, addr: &str, timeouts: Timeouts) -> Result<()> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeouts.connect))
        .set_response_timeout(Some(timeouts.response));
    let mut probe = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| from_first_reply(e, addr))?;
    redis::cmd("PING")
        .query_async::<()>(&mut probe)
        .await
        .map_err(|e| from_first_reply(e, addr))
}

async fn read_eviction_policy(probe: &mut MultiplexedConnection, addr: &str) -> Option<Arc<str>> {
    let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(probe)
        .await;
    let policy = match reply {
        Ok(mut settings) => settings.remove("maxmemory-policy"),
        Err(err) => {
            events::record(Event::EvictionPolicy {
                addr,
                policy: Err(&err),
            });
            return None;
        }
    };
    events::record(Event::EvictionPolicy {
        addr,
        policy: Ok(policy.as_deref()),
    });
    policy.map(Arc::from)
}

fn missing_database(err: redis::RedisError, addr: &str, db: i64) -> Error {
    if err.kind() != redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError) {
        return from_redis_conn(err, addr);
    }
    let said = err.detail().unwrap_or("refused");
    Error::InvalidConfig(format!(
        "Redis at {addr} has no database {db} (it answered: {said}); use a database the \
         server has, from 0 to its `databases` setting minus one (0 to 15 by default), \
         as in redis://HOST:PORT/0"
    ))
}

#[cfg(test)]
mod tests {
    use super::sharded_source;

    /// Every publication in every protocol script: on a lock's channel it
    /// becomes SPUBLISH in the sharded variant, on the revocation channel
    /// it stays PUBLISH; nothing else changes.
    #[test]
    fn sharded_scripts_publish_lock_channels_with_spublish() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/protocol");
        let mut spublish = 0;
        for sub in ["native", "redisson"] {
            for entry in std::fs::read_dir(format!("{dir}/{sub}")).unwrap() {
                let path = entry.unwrap().path();
                let code = std::fs::read_to_string(&path).unwrap();
                let sharded = sharded_source(&code);
                assert_eq!(sharded.lines().count(), code.lines().count(), "{path:?}");
                for (before, after) in code.lines().zip(sharded.lines()) {
                    if !before.contains("redis.call('publish'") {
                        assert_eq!(before, after, "{path:?}");
                    } else if before.contains("revoked_prefix") {
                        assert_eq!(before, after, "{path:?}: revocations stay PUBLISH");
                    } else {
                        assert!(after.contains("redis.call('spublish'"), "{path:?}: {after}");
                        assert!(!after.contains("redis.call('publish'"), "{path:?}: {after}");
                        spublish += 1;
                    }
                }
                // A publication written another way would escape the rule.
                assert_eq!(
                    code.matches("'publish'").count(),
                    code.matches("redis.call('publish'").count(),
                    "{path:?}"
                );
            }
        }
        // native: grant and free; redisson: head and non-fair releases.
        assert!(spublish >= 4, "{spublish}");
    }
}
