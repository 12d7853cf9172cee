//! The server's `maxmemory-policy`, read at connect and recorded as an
//! event: a policy under which Redis may evict lock keys is logged as a
//! warning (see `docs/deployment.md`). A server that refuses `CONFIG` is
//! not checked.

use std::collections::HashMap;
use std::sync::Arc;

use redis::FromRedisValue;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::events::{self, Event};

/// `maxmemory-policy` of the server `probe` is connected to.
pub(super) async fn read_eviction_policy(
    probe: &mut MultiplexedConnection,
    addr: &str,
) -> Option<Arc<str>> {
    let reply = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(probe)
        .await;
    eviction_policy_from(reply, addr)
}

/// `maxmemory-policy` of one master (the cluster's nodes are expected to
/// share their settings), recorded as for one server.
pub(super) async fn read_cluster_eviction_policy(
    conn: &mut ClusterConnection,
    addr: &str,
) -> Option<Arc<str>> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory-policy");
    let reply = conn
        .route_command(
            cmd,
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary),
        )
        .await
        .and_then(|value| {
            HashMap::<String, String>::from_redis_value(value).map_err(redis::RedisError::from)
        });
    eviction_policy_from(reply, addr)
}

/// The policy in a `CONFIG GET maxmemory-policy` reply from `addr`,
/// recorded as an event (or the error that kept it from being read).
fn eviction_policy_from(
    reply: redis::RedisResult<HashMap<String, String>>,
    addr: &str,
) -> Option<Arc<str>> {
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
