//! The command connection: one multiplexed, self-reconnecting connection per
//! client, a backend per topology (one server: `direct.rs`; Sentinel:
//! `sentinel.rs`; a cluster: `cluster.rs`), scripts run through `script.rs`
//! and Redis errors mapped to [`Error`](crate::Error).
//!
//! ## Behavior
//! - A command that finds the connection broken fails with
//!   [`Error::Connection`](crate::Error::Connection); the connection
//!   reconnects in the background and the next command uses the new one.
//!   Callers that wait (acquire loops) retry within the retry budget (see
//!   `retry.rs`).
//! - A command that gets no reply within the response timeout fails with
//!   [`Error::Connection`](crate::Error::Connection). It may or may not
//!   have run on the server; the scripts are written so that a retry is
//!   safe (the base hold count in the acquire scripts and the unlock result
//!   cache).
//! - A script is sent with EVALSHA, and loaded again after NOSCRIPT (a
//!   restarted or flushed server).
//! - At connect the server's `maxmemory-policy` is read (`CONFIG GET`); a
//!   policy under which Redis may evict lock keys is logged as a warning
//!   (see `docs/deployment.md`). A server that refuses `CONFIG` is not
//!   checked, and the connect goes on.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{AsyncConnectionConfig, FromRedisValue};

use super::cluster::{self, ClusterCommands};
use super::direct::Direct;
use super::endpoint::{Endpoint, Topology};
use super::errors::from_first_reply;
use super::pubsub::PubSubConnector;
use super::replica_sync::{HoldProof, ReplicasSynced};
use super::script::{Script, ScriptLog};
use super::sentinel::Follower;
use super::timeouts::Timeouts;
use crate::error::Result;
use crate::events::Recorder;

/// The command connection of one client: one server, or the master a
/// sentinel deployment names now (`sentinel.rs`). Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connection {
    backend: Backend,
    scripts: Arc<ScriptLog>,
}

#[derive(Clone)]
enum Backend {
    Standalone(Box<Direct>),
    Sentinel(Arc<Follower>),
    /// A cluster routed by key slot (`cluster.rs`).
    Cluster(Box<ClusterCommands>),
}

impl Connection {
    /// Connect to `endpoint`: a probe tells apart a server that is down, is
    /// not Redis, refuses the credentials or lacks the database, then the
    /// reconnecting command connection is made. Also returns what opens
    /// pub/sub connections to the same server (for Sentinel: to the master
    /// known at the time).
    pub(crate) async fn connect(
        endpoint: &Endpoint,
        timeouts: Timeouts,
        events: Arc<Recorder>,
    ) -> Result<(Self, PubSubConnector)> {
        let (backend, pubsub) = Self::connect_backend(endpoint, timeouts).await?;
        let groups = match backend {
            Backend::Cluster(_) => usize::from(cluster::SLOTS),
            Backend::Standalone(_) | Backend::Sentinel(_) => 1,
        };
        let scripts = Arc::new(ScriptLog::new(groups, events));
        Ok((Self { backend, scripts }, pubsub))
    }

    async fn connect_backend(
        endpoint: &Endpoint,
        timeouts: Timeouts,
    ) -> Result<(Backend, PubSubConnector)> {
        match endpoint.topology() {
            Topology::Standalone => {
                let direct = Direct::connect(endpoint, timeouts).await?;
                let pubsub = PubSubConnector::new(direct.client().clone(), timeouts);
                Ok((Backend::Standalone(Box::new(direct)), pubsub))
            }
            Topology::Sentinel(spec) => {
                let follower = Follower::connect(endpoint, Arc::clone(spec), timeouts).await?;
                let pubsub = PubSubConnector::following(Arc::clone(&follower), timeouts);
                Ok((Backend::Sentinel(follower), pubsub))
            }
            Topology::Cluster(seeds) => {
                // Each seed in turn until one answers PING: a cluster whose
                // seeds all fail is reported as the first one failed (down,
                // not Redis, refusing the credentials), told apart as for
                // one server.
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
                let commands = ClusterCommands::connect(builder.clone(), endpoint).await?;
                let pubsub = PubSubConnector::cluster(builder, commands.sharded(), timeouts);
                Ok((Backend::Cluster(Box::new(commands)), pubsub))
            }
        }
    }

    /// Whether this is a Redis Cluster connection (where a slot migration
    /// half-way may leave a key a script builds on the other node).
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster(_))
    }

    /// The group of `key` for calls on several keys: keys of one group may
    /// go in one script call. Its hash slot on a cluster (a call whose keys
    /// span slots fails with CROSSSLOT); one group on one server.
    pub(crate) fn key_group(&self, key: &str) -> u16 {
        match &self.backend {
            Backend::Standalone(_) | Backend::Sentinel(_) => 0,
            Backend::Cluster(_) => cluster::slot(key),
        }
    }

    /// `host:port` of the server that serves `key` of lock `name`: the
    /// master of its slot on a cluster, the (current) master otherwise.
    pub(crate) async fn node_for(&self, name: &str, key: &str) -> Result<String> {
        match &self.backend {
            Backend::Standalone(direct) => Ok(direct.address().to_owned()),
            Backend::Sentinel(follower) => Ok(follower.current().0.address().to_owned()),
            Backend::Cluster(cluster) => cluster.node_for(name, key).await,
        }
    }

    /// The server's `maxmemory-policy` as read at connect (for Sentinel:
    /// on the master found first).
    pub(crate) fn maxmemory_policy(&self) -> Option<&str> {
        match &self.backend {
            Backend::Standalone(direct) => direct.maxmemory_policy(),
            Backend::Sentinel(follower) => follower.first_maxmemory_policy(),
            Backend::Cluster(cluster) => cluster.maxmemory_policy(),
        }
    }

    /// Run `script` for lock `name` (named in errors, with the first key).
    pub(crate) async fn script<T: FromRedisValue>(
        &self,
        script: &Script,
        name: &str,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let group = keys.first().map_or(0, |key| self.key_group(key));
        let log = &*self.scripts;
        let reply = match &self.backend {
            Backend::Standalone(direct) => {
                direct.script(script, name, keys, args, log, group).await
            }
            Backend::Cluster(cluster) => {
                let (hash, code) = if cluster.sharded() {
                    (script.sharded.get_hash(), script.sharded_code.as_str())
                } else {
                    (script.plain.get_hash(), script.plain_code.as_str())
                };
                let reloaded = || log.reloaded(script, group, cluster.seeds());
                cluster.script(hash, code, name, keys, args, reloaded).await
            }
            Backend::Sentinel(follower) => {
                follower
                    .on_master(|direct| async move {
                        direct.script(script, name, keys, args, log, group).await
                    })
                    .await
            }
        };
        if reply.is_ok() {
            log.ran(script, group);
        }
        reply
    }

    /// How many times the server serving some of this client's locks is
    /// known to have changed: Sentinel master switches, and `NOSCRIPT`
    /// replies for scripts that had run on the same server or slot before
    /// (a failover, a slot migration, a restart, a `SCRIPT FLUSH`). Only
    /// grows.
    pub(crate) fn server_changes(&self) -> u64 {
        let switches = match &self.backend {
            Backend::Sentinel(follower) => follower.generation(),
            Backend::Standalone(_) | Backend::Cluster(_) => 0,
        };
        switches + self.scripts.changes.load(Ordering::Relaxed)
    }

    /// Run one command on `key` of lock `name`.
    pub(crate) async fn command<T: FromRedisValue>(
        &self,
        name: &str,
        command: &str,
        key: &str,
        args: &[&str],
    ) -> Result<T> {
        match &self.backend {
            Backend::Standalone(direct) => direct.command(name, command, key, args).await,
            Backend::Cluster(cluster) => cluster.command(name, command, key, args).await,
            Backend::Sentinel(follower) => {
                follower
                    .on_master(
                        |direct| async move { direct.command(name, command, key, args).await },
                    )
                    .await
            }
        }
    }

    /// Wait until `replicas` replicas acknowledged every write this client
    /// made so far to the master serving `key` of lock `name`, at most
    /// `timeout` (Redis `WAIT`); returns how many did. Runs on a connection
    /// of its own: a `WAIT` blocks the connection it is sent on, and must
    /// not hold up the client's other commands.
    ///
    /// `WAIT` waits for the writes of the connection it is sent on, so that
    /// connection writes first, after every write of the client: a
    /// `PUBLISH` on one server (it is replicated), and on a cluster (where
    /// `PUBLISH` goes over the cluster bus, not to the replicas) a `SET` of
    /// a key in `key`'s slot that expires on its own, [`SYNC_KEY_TTL`] later,
    /// on the master of that slot.
    pub(crate) async fn sync_replicas(
        &self,
        name: &str,
        key: &str,
        replicas: u32,
        timeout: Duration,
        proofs: &[HoldProof],
    ) -> Result<ReplicasSynced> {
        match &self.backend {
            Backend::Standalone(direct) => {
                direct
                    .replica_sync()
                    .sync(&publish_sync(), replicas, timeout, proofs, false)
                    .await
            }
            Backend::Cluster(cluster) => {
                let addr = cluster.node_for(name, key).await?;
                let sync = cluster.replica_sync(&addr)?;
                let synced = sync
                    .sync(&set_sync(key), replicas, timeout, proofs, false)
                    .await?;
                // The slot is migrating and the hold's key has moved: the
                // calls that wrote it followed the ASK redirection to the
                // importing node, so the WAIT and the proofs go there too
                // (each after ASKING).
                match &synced.asked {
                    Some(target) if *target != addr => {
                        cluster
                            .replica_sync(target)?
                            .sync(&set_sync(key), replicas, timeout, proofs, true)
                            .await
                    }
                    _ => Ok(synced),
                }
            }
            Backend::Sentinel(follower) => {
                follower
                    .on_master(|direct| async move {
                        direct
                            .replica_sync()
                            .sync(&publish_sync(), replicas, timeout, proofs, false)
                            .await
                    })
                    .await
            }
        }
    }
}

/// The write before a `WAIT` on one server: a `PUBLISH` nobody listens to
/// (it leaves nothing behind, and is replicated).
fn publish_sync() -> redis::Cmd {
    let mut cmd = redis::cmd("PUBLISH");
    cmd.arg(REPLICA_SYNC_CHANNEL).arg("");
    cmd
}

/// How long the key written before a `WAIT` on a cluster lives.
pub(crate) const SYNC_KEY_TTL: Duration = Duration::from_secs(10);

/// The write before a `WAIT` on a cluster master: `SET` of a key in the
/// slot of `key` (see [`cluster::same_slot_key`]) that expires on its own.
fn set_sync(key: &str) -> redis::Cmd {
    let mut cmd = redis::cmd("SET");
    cmd.arg(cluster::same_slot_key("fairlock:replica-sync:", key))
        .arg("")
        .arg("PX")
        .arg(SYNC_KEY_TTL.as_millis() as u64);
    cmd
}

/// The channel `sync_replicas` publishes on (nobody listens; the message
/// only advances the replication offset that `WAIT` waits for).
const REPLICA_SYNC_CHANNEL: &str = "fairlock:replica-sync";

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
