//! A connection to one server: the probe at connect that tells apart a
//! server that is down, is not Redis, refuses the credentials or lacks the
//! database (and refuses a cluster node); the reconnecting multiplexed
//! connection and its script and command calls; its `WAIT` connections.
//! The standalone backend of [`Connection`](super::Connection), and the
//! master's connection a Sentinel `Follower` holds.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, FromRedisValue};

use super::endpoint::Endpoint;
use super::errors::{from_first_reply, from_redis, from_redis_conn, from_script};
use super::eviction::read_eviction_policy;
use super::replica_sync::ReplicaSync;
use super::script::{Reload, Script, ScriptLog, eval_cached};
use super::timeouts::Timeouts;
use crate::error::{Error, Result};

/// A connection to one server. Cheap to clone.
#[derive(Clone)]
pub(super) struct Direct {
    manager: ConnectionManager,
    client: redis::Client,
    addr: Arc<str>,
    maxmemory_policy: Option<Arc<str>>,
    /// Connections for `WAIT` (see
    /// [`Connection::sync_replicas`](super::Connection::sync_replicas)).
    replica_sync: ReplicaSync,
}

impl Direct {
    /// Connect to the server of a standalone `endpoint` (see
    /// [`Connection::connect`](super::Connection::connect)).
    pub(super) async fn connect(endpoint: &Endpoint, timeouts: Timeouts) -> Result<Self> {
        let addr: Arc<str> = endpoint.address().into();
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
        Ok(Self {
            manager,
            replica_sync: ReplicaSync::new(client.clone(), Arc::clone(&addr), timeouts),
            client,
            addr,
            maxmemory_policy,
        })
    }

    /// The server's `maxmemory-policy` as read at connect.
    pub(super) fn maxmemory_policy(&self) -> Option<&str> {
        self.maxmemory_policy.as_deref()
    }

    /// `host:port` of the server.
    pub(super) fn address(&self) -> &str {
        &self.addr
    }

    /// The connections for `WAIT` to this server.
    pub(super) fn replica_sync(&self) -> &ReplicaSync {
        &self.replica_sync
    }

    /// The Redis client of this server (for pub/sub connections).
    pub(super) fn client(&self) -> &redis::Client {
        &self.client
    }

    pub(super) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        name: &str,
        keys: &[&str],
        args: &[&str],
        log: &ScriptLog,
        group: u16,
    ) -> Result<T> {
        let mut manager = self.manager.clone();
        let reloaded = || log.reloaded(script, group, &self.addr);
        eval_cached(
            &mut manager,
            script.plain.get_hash(),
            &script.plain_code,
            keys,
            args,
            self.replica_sync.timeouts.response,
            Reload::Load,
            reloaded,
        )
        .await
        .map_err(|e| from_script(e, &self.addr, name, keys))
    }

    pub(super) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[&str],
    ) -> Result<T> {
        let mut cmd = redis::cmd(command);
        cmd.arg(key);
        for arg in args {
            cmd.arg(*arg);
        }
        let mut manager = self.manager.clone();
        cmd.query_async(&mut manager)
            .await
            .map_err(|e| from_redis(e, &self.addr, name, key))
    }
}

/// A cluster node reached with `redis://` would answer MOVED for most
/// locks and CROSSSLOT for batched renewals: refused at connect with the
/// URL to use. Read with `CONFIG GET cluster-enabled` (the optional
/// `+config|get` permission of `docs/deployment.md`); a server that
/// refuses CONFIG is not checked.
async fn refuse_cluster_node(probe: &mut MultiplexedConnection, addr: &str) -> Result<()> {
    let reply: redis::RedisResult<HashMap<String, String>> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-enabled")
        .query_async(probe)
        .await;
    match reply {
        Ok(settings) if settings.get("cluster-enabled").map(String::as_str) == Some("yes") => {
            Err(Error::InvalidConfig(format!(
                "Redis at {addr} is a Redis Cluster node: connect with \
                 redis+cluster://{addr} (add more nodes, comma-separated, as seeds)"
            )))
        }
        _ => Ok(()),
    }
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
