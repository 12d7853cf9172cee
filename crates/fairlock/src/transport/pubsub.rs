//! Pub/sub connections: opened by the wake-up router (`wakeup.rs`), which
//! owns the channels and the reconnect loop. Every command on them is
//! bounded by the response timeout: a stalled server must not stall every
//! waiter's subscription.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;

use super::cluster::Builder;
use super::connection::Timeouts;
use super::errors::{from_redis_conn, timed_out};
use super::sentinel::Follower;
use super::sharded::{ShardedConnector, ShardedSink, ShardedStream};
use crate::error::Result;

/// Opens pub/sub connections to the client's server (for Sentinel: to the
/// master known at the time).
pub(crate) struct PubSubConnector {
    target: Target,
    timeouts: Timeouts,
}

enum Target {
    Fixed(Box<redis::Client>),
    /// The master a sentinel deployment names; a stream ends when it moves.
    Following(Arc<Follower>),
    /// A cluster: `sharded.rs`.
    Cluster(ShardedConnector),
}

/// The sending half of a pub/sub connection: (un)subscribe and PING.
pub(crate) struct PubSubSink {
    sink: SinkKind,
    timeouts: Timeouts,
    addr: String,
}

enum SinkKind {
    Single(redis::aio::PubSubSink),
    Cluster(ShardedSink),
}

/// The receiving half: the messages of every subscribed channel.
pub(crate) struct PubSubStream {
    stream: StreamKind,
    /// Sentinel: changes when the client switched to another master.
    moved: Option<tokio::sync::watch::Receiver<u64>>,
}

enum StreamKind {
    Single(BoxStream<'static, redis::Msg>),
    Cluster(ShardedStream),
}

/// One message: its channel and payload (not UTF-8: replaced lossily).
pub(crate) struct Message {
    pub(crate) channel: String,
    pub(crate) payload: Arc<str>,
}

impl PubSubConnector {
    pub(super) fn new(client: redis::Client, timeouts: Timeouts) -> Self {
        Self {
            target: Target::Fixed(Box::new(client)),
            timeouts,
        }
    }

    /// Pub/sub on a cluster, sharded when `sharded` (see `sharded.rs`).
    pub(super) fn cluster(builder: Builder, sharded: bool, timeouts: Timeouts) -> Self {
        Self {
            target: Target::Cluster(ShardedConnector::new(builder, sharded, timeouts)),
            timeouts,
        }
    }

    pub(super) fn following(follower: Arc<Follower>, timeouts: Timeouts) -> Self {
        Self {
            target: Target::Following(follower),
            timeouts,
        }
    }

    /// Open a new pub/sub connection, within the connect timeout. For
    /// Sentinel, its stream ends when the client switches to another master
    /// (the router then reconnects, to the new one).
    pub(crate) async fn connect(&self) -> Result<(PubSubSink, PubSubStream)> {
        let connected = self.connect_once().await;
        if let (Err(err), Target::Following(follower)) = (&connected, &self.target) {
            // The master may be gone: look it up again.
            follower.after_error(err, follower.current().1);
        }
        connected
    }

    async fn connect_once(&self) -> Result<(PubSubSink, PubSubStream)> {
        let (client, moved) = match &self.target {
            Target::Fixed(client) => (client.as_ref().clone(), None),
            Target::Cluster(cluster) => {
                let (sink, stream) = cluster.connect().await?;
                return Ok((
                    PubSubSink {
                        sink: SinkKind::Cluster(sink),
                        timeouts: self.timeouts,
                        addr: String::new(),
                    },
                    PubSubStream {
                        stream: StreamKind::Cluster(stream),
                        moved: None,
                    },
                ));
            }
            Target::Following(follower) => {
                // Watch first: a switch after this point ends the stream.
                let mut moved = follower.switches();
                moved.borrow_and_update();
                let (direct, _) = follower.current();
                (direct.client().clone(), Some(moved))
            }
        };
        let addr = client.get_connection_info().addr().to_string();
        let connected = tokio::time::timeout(self.timeouts.connect, client.get_async_pubsub());
        let pubsub = match connected.await {
            Ok(Ok(pubsub)) => pubsub,
            Ok(Err(err)) => return Err(from_redis_conn(err, &addr)),
            Err(_) => {
                return Err(from_redis_conn(
                    timed_out("pub/sub connect timed out"),
                    &addr,
                ));
            }
        };
        let (sink, stream) = pubsub.split();
        Ok((
            PubSubSink {
                sink: SinkKind::Single(sink),
                timeouts: self.timeouts,
                addr,
            },
            PubSubStream {
                stream: StreamKind::Single(stream.boxed()),
                moved,
            },
        ))
    }
}

impl PubSubSink {
    /// Subscribe to `channels`, confirmed by the server.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Single(sink) => bounded(limit, &self.addr, sink.subscribe(channels)).await,
            SinkKind::Cluster(sink) => sink.subscribe(channels).await,
        }
    }

    /// Unsubscribe from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Single(sink) => bounded(limit, &self.addr, sink.unsubscribe(channel)).await,
            SinkKind::Cluster(sink) => sink.unsubscribe(channel).await,
        }
    }

    /// Check that the connection still answers.
    pub(crate) async fn ping(&mut self) -> Result<()> {
        let limit = self.timeouts.response;
        let sink = match &mut self.sink {
            SinkKind::Single(sink) => sink,
            SinkKind::Cluster(sink) => return sink.ping().await,
        };
        let ping = async { sink.ping::<redis::Value>().await.map(drop) };
        bounded(limit, &self.addr, ping).await
    }
}

impl PubSubStream {
    /// The next message; `None` when the connection closed (or, for
    /// Sentinel, the client moved to another master).
    pub(crate) async fn next(&mut self) -> Option<Message> {
        let stream = match &mut self.stream {
            StreamKind::Single(stream) => stream,
            StreamKind::Cluster(stream) => return stream.next().await,
        };
        let message = match &mut self.moved {
            None => stream.next().await?,
            Some(moved) => tokio::select! {
                message = stream.next() => message?,
                _ = moved.changed() => return None,
            },
        };
        Some(Message {
            channel: message.get_channel_name().to_owned(),
            payload: String::from_utf8_lossy(message.get_payload_bytes()).into(),
        })
    }
}

/// A command that does not answer within `limit` counts as a broken
/// connection. (Also for the sharded connections of `sharded.rs`.)
pub(super) async fn bounded(
    limit: std::time::Duration,
    addr: &str,
    command: impl std::future::Future<Output = redis::RedisResult<()>>,
) -> Result<()> {
    match tokio::time::timeout(limit, command).await {
        Ok(result) => result.map_err(|e| from_redis_conn(e, addr)),
        Err(_) => Err(from_redis_conn(
            timed_out("pub/sub command timed out"),
            addr,
        )),
    }
}
