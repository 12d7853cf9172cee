//! Wake-ups on a Redis Cluster: one pub/sub cluster connection (RESP3, one
//! connection per master), opened by the wake-up router (`wakeup.rs`)
//! through [`PubSubConnector`](super::PubSubConnector).
//!
//! ## Behavior
//! - With sharded pub/sub (Redis 7+, probed at connect), a channel that
//!   carries a hash tag (every lock channel: `redisson_lock__channel:{name}`,
//!   `fairlock:{name}:...`) is subscribed with SSUBSCRIBE on the master of
//!   its slot, where the lock's scripts SPUBLISH. Redisson 3.22+ does the
//!   same in cluster mode, so Java and Rust clients hear each other.
//!   Channels without a tag (the client's revocation channel) and every
//!   channel on a cluster without sharded pub/sub use SUBSCRIBE: a PUBLISH
//!   reaches every node of a cluster.
//! - When a slot moves to another master, the old one ends the sharded
//!   subscriptions of its channels with an unsolicited SUNSUBSCRIBE. The
//!   channel is subscribed again (on the new master, found through the
//!   redirection) and its waiters are woken, since a release may have been
//!   published in between.
//! - A node connection that breaks, or a PING (sent to every master every
//!   health interval) that fails, ends the stream: the router wakes every
//!   waiter, opens a new connection and subscribes again. While a failed
//!   master is being replaced (a few seconds), subscribing to its slots
//!   fails and the router retries with backoff: the waiters of those locks
//!   re-check on their refresh interval meanwhile (polling).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use redis::cluster_async::ClusterConnection;
use redis::{PushKind, Value};

use super::cluster::Builder;
use super::errors::{bounded, from_redis_conn, timed_out};
use super::messages::{Incoming, Message, text};
use super::pushes::{self, Push, PushReceiver};
use super::timeouts::Timeouts;
use crate::error::Result;

/// Opens the pub/sub cluster connections of a client.
pub(crate) struct ShardedConnector {
    builder: Builder,
    sharded: bool,
    timeouts: Timeouts,
}

/// The sending half: (un)subscribe and PING.
pub(crate) struct ShardedSink {
    conn: ClusterConnection,
    wanted: Wanted,
    sharded: bool,
    timeouts: Timeouts,
    addr: String,
}

/// The receiving half: messages of every subscribed channel, and the
/// re-subscriptions after a slot moved.
pub(crate) struct ShardedStream {
    pushes: PushReceiver,
    conn: ClusterConnection,
    wanted: Wanted,
    timeouts: Timeouts,
}

/// The channels the router subscribed through this connection and did not
/// unsubscribe: an unsolicited SUNSUBSCRIBE of one of them is a slot move.
#[derive(Clone, Default)]
struct Wanted(Arc<Mutex<HashSet<String>>>);

impl Wanted {
    fn set(&self) -> MutexGuard<'_, HashSet<String>> {
        // Every update is a single insert/remove: a poisoned set is whole.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// `true` when `channel` carries a non-empty hash tag (`{...}`), so that it
/// lives in one slot.
fn has_hash_tag(channel: &str) -> bool {
    channel
        .split_once('{')
        .and_then(|(_, rest)| rest.find('}'))
        .is_some_and(|len| len > 0)
}

impl ShardedConnector {
    pub(super) fn new(builder: Builder, sharded: bool, timeouts: Timeouts) -> Self {
        Self {
            builder,
            sharded,
            timeouts,
        }
    }

    /// Open a new pub/sub cluster connection, within twice the connect
    /// timeout (the seeds, then the masters). Cancelling it drops the
    /// connections made so far.
    pub(crate) async fn connect(&self) -> Result<(ShardedSink, ShardedStream)> {
        let addr = self.builder.address();
        let (tx, pushes) = pushes::queue();
        let client = self
            .builder
            .builder()
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()
            .map_err(|e| from_redis_conn(e, &addr))?;
        let connect = client.get_async_connection();
        let conn = match tokio::time::timeout(self.timeouts.connect * 2, connect).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(err)) => return Err(from_redis_conn(err, &addr)),
            Err(_) => {
                return Err(from_redis_conn(
                    timed_out("pub/sub connect timed out"),
                    &addr,
                ));
            }
        };
        let wanted = Wanted::default();
        Ok((
            ShardedSink {
                conn: conn.clone(),
                wanted: wanted.clone(),
                sharded: self.sharded,
                timeouts: self.timeouts,
                addr,
            },
            ShardedStream {
                pushes,
                conn,
                wanted,
                timeouts: self.timeouts,
            },
        ))
    }
}

impl ShardedSink {
    /// Subscribe to `channels`, each confirmed by the server. Cancelled or
    /// failed part-way, the channels are still in the wanted set: the
    /// router treats the connection as broken and subscribes again on a
    /// new one.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        for channel in channels {
            self.wanted.set().insert(channel.clone());
            let sharded = self.sharded && has_hash_tag(channel);
            let limit = self.timeouts.response;
            let conn = &mut self.conn;
            let subscribe = async {
                if sharded {
                    conn.ssubscribe(channel).await
                } else {
                    conn.subscribe(channel).await
                }
            };
            bounded(limit, &self.addr, subscribe).await?;
        }
        Ok(())
    }

    /// Unsubscribe from `channel`. Cancelled, the subscription may stay
    /// until the connection is replaced; its messages only wake nobody.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> Result<()> {
        self.wanted.set().remove(channel);
        let sharded = self.sharded && has_hash_tag(channel);
        let limit = self.timeouts.response;
        let conn = &mut self.conn;
        let unsubscribe = async {
            if sharded {
                conn.sunsubscribe(channel).await
            } else {
                conn.unsubscribe(channel).await
            }
        };
        bounded(limit, &self.addr, unsubscribe).await
    }

    /// Check that every master still answers (cancelling it changes
    /// nothing).
    pub(crate) async fn ping(&mut self) -> Result<()> {
        let limit = self.timeouts.response;
        let conn = &mut self.conn;
        let ping = async {
            redis::cmd("PING")
                .query_async::<Value>(conn)
                .await
                .map(drop)
        };
        bounded(limit, &self.addr, ping).await
    }
}

impl ShardedStream {
    /// Whether messages wait unread.
    pub(crate) fn backlogged(&self) -> bool {
        self.pushes.backlogged()
    }

    /// The next message; `None` when a node connection broke (the router
    /// then starts over with a new connection). Cancelled while it
    /// re-subscribes a moved channel, the channel stays unsubscribed until
    /// the next reconnect; its waiters still re-check on their wait bound.
    pub(crate) async fn next(&mut self) -> Option<Incoming> {
        loop {
            let push = match self.pushes.recv().await? {
                Push::Overflowed => return Some(Incoming::Overflowed),
                Push::Info(push) => push,
            };
            match push.kind {
                PushKind::Message | PushKind::SMessage => {
                    if let Some(message) = Message::of_push(push) {
                        return Some(Incoming::Message(message));
                    }
                }
                PushKind::SUnsubscribe => {
                    let Some(channel) = push.data.into_iter().next().and_then(text) else {
                        continue;
                    };
                    if !self.wanted.set().contains(&channel) {
                        // Our own SUNSUBSCRIBE, confirmed.
                        continue;
                    }
                    // The slot moved: subscribe where it lives now, then
                    // wake its waiters (a release may have gone unheard).
                    let limit = self.timeouts.response;
                    let resubscribe = tokio::time::timeout(limit, self.conn.ssubscribe(&channel));
                    if !matches!(resubscribe.await, Ok(Ok(()))) {
                        return None;
                    }
                    return Some(Incoming::Message(Message {
                        channel,
                        payload: "".into(),
                    }));
                }
                PushKind::Disconnection => return None,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::has_hash_tag;

    #[test]
    fn hash_tags() {
        assert!(has_hash_tag("redisson_lock__channel:{orders}"));
        assert!(has_hash_tag("fairlock:{a}:channel:x"));
        assert!(!has_hash_tag("fairlock:revoked:0c1d"));
        assert!(!has_hash_tag("a{}b"));
        assert!(!has_hash_tag("a{b"));
    }
}
