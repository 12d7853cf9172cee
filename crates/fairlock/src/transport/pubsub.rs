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
use super::sharded::{ShardedConnector, ShardedSink, ShardedStream};
use crate::error::Result;

/// Opens pub/sub connections to the client's server (or cluster:
/// `sharded.rs`).
pub(crate) struct PubSubConnector {
    servers: Servers,
    timeouts: Timeouts,
}

enum Servers {
    Single(redis::Client),
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
            servers: Servers::Single(client),
            timeouts,
        }
    }

    /// Pub/sub on a cluster, sharded when `sharded` (see `sharded.rs`).
    pub(super) fn cluster(builder: Builder, sharded: bool, timeouts: Timeouts) -> Self {
        Self {
            servers: Servers::Cluster(ShardedConnector::new(builder, sharded, timeouts)),
            timeouts,
        }
    }

    /// Open a new pub/sub connection, within the connect timeout.
    pub(crate) async fn connect(&self) -> Result<(PubSubSink, PubSubStream)> {
        let client = match &self.servers {
            Servers::Single(client) => client,
            Servers::Cluster(cluster) => {
                let (sink, stream) = cluster.connect().await?;
                return Ok((
                    PubSubSink {
                        sink: SinkKind::Cluster(sink),
                        timeouts: self.timeouts,
                        addr: String::new(),
                    },
                    PubSubStream {
                        stream: StreamKind::Cluster(stream),
                    },
                ));
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
    /// The next message; `None` when the connection closed.
    pub(crate) async fn next(&mut self) -> Option<Message> {
        let stream = match &mut self.stream {
            StreamKind::Single(stream) => stream,
            StreamKind::Cluster(stream) => return stream.next().await,
        };
        let message = stream.next().await?;
        Some(Message {
            channel: message.get_channel_name().to_owned(),
            payload: String::from_utf8_lossy(message.get_payload_bytes()).into(),
        })
    }
}

/// A command that does not answer within `limit` counts as a broken
/// connection.
async fn bounded(
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
