//! Pub/sub connections: opened by the wake-up router (`wakeup.rs`), which
//! owns the channels and the reconnect loop. Every command on them is
//! bounded by the response timeout: a stalled server must not stall every
//! waiter's subscription.
//!
//! A connection speaks RESP3 and its messages go through a bounded queue
//! (`pushes.rs`): a flood of PUBLISHes costs the client a bounded amount of
//! memory and ends in [`Incoming::Overflowed`], never in a backlog that
//! delays real messages. A server without RESP3 (`HELLO`, Redis before 6)
//! gets a RESP2 pub/sub connection instead (`resp2.rs`), whose messages
//! reach the same bounded queue.

use std::sync::Arc;

use redis::PushKind;

use super::cluster::Builder;
use super::errors::{from_redis_conn, timed_out};
use super::pushes::{self, Push, PushReceiver};
use super::resp2;
use super::sentinel::Follower;
use super::sharded::{ShardedConnector, ShardedSink, ShardedStream};
use super::timeouts::Timeouts;
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
    Single(redis::aio::MultiplexedConnection),
    Resp2(redis::aio::PubSubSink),
    Cluster(ShardedSink),
}

/// The receiving half: the messages of every subscribed channel.
pub(crate) struct PubSubStream {
    stream: StreamKind,
    /// Sentinel: changes when the client switched to another master.
    moved: Option<tokio::sync::watch::Receiver<u64>>,
}

enum StreamKind {
    /// RESP3, or RESP2 moved to a bounded queue (`resp2.rs`).
    Single(PushReceiver),
    Cluster(ShardedStream),
}

/// What a pub/sub stream yields.
pub(crate) enum Incoming {
    Message(Message),
    /// Messages were dropped (more arrived than the client could take):
    /// any channel may have missed one.
    Overflowed,
}

/// One message: its channel and payload (not UTF-8: replaced lossily).
pub(crate) struct Message {
    pub(crate) channel: String,
    pub(crate) payload: Arc<str>,
}

impl Message {
    /// The message a push carries, if it is one (`message`, `smessage`).
    pub(super) fn of_push(push: redis::PushInfo) -> Option<Self> {
        if !matches!(push.kind, PushKind::Message | PushKind::SMessage) {
            return None;
        }
        let mut data = push.data.into_iter();
        let (channel, payload) = (text(data.next()?)?, text(data.next()?)?);
        Some(Self {
            channel,
            payload: payload.into(),
        })
    }
}

/// A channel name or payload (not UTF-8: replaced lossily).
pub(super) fn text(value: redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
        redis::Value::SimpleString(text) => Some(text),
        _ => None,
    }
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
        match self.connect_resp3(&client, &addr).await {
            Err(err) if err.to_string().contains("HELLO") => {}
            connected => {
                let (sink, pushes) = connected?;
                return Ok((
                    PubSubSink {
                        sink: SinkKind::Single(sink),
                        timeouts: self.timeouts,
                        addr,
                    },
                    PubSubStream {
                        stream: StreamKind::Single(pushes),
                        moved,
                    },
                ));
            }
        }
        // The server refused HELLO: RESP2 pub/sub.
        let (sink, pushes) = resp2::connect(&client, self.timeouts.connect, &addr).await?;
        Ok((
            PubSubSink {
                sink: SinkKind::Resp2(sink),
                timeouts: self.timeouts,
                addr,
            },
            PubSubStream {
                stream: StreamKind::Single(pushes),
                moved,
            },
        ))
    }

    /// A RESP3 connection whose pushes go to a bounded queue. An error that
    /// names `HELLO` means the server has no RESP3.
    async fn connect_resp3(
        &self,
        client: &redis::Client,
        addr: &str,
    ) -> Result<(redis::aio::MultiplexedConnection, PushReceiver)> {
        let info = client.get_connection_info().clone();
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client = redis::Client::open(info.set_redis_settings(settings))
            .map_err(|e| from_redis_conn(e, addr))?;
        let (tx, pushes) = pushes::queue();
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeouts.connect))
            .set_response_timeout(Some(self.timeouts.response))
            .set_push_sender(tx);
        let connected = client.get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(self.timeouts.connect, connected).await {
            Ok(Ok(conn)) => Ok((conn, pushes)),
            Ok(Err(err)) => Err(from_redis_conn(err, addr)),
            Err(_) => Err(from_redis_conn(
                timed_out("pub/sub connect timed out"),
                addr,
            )),
        }
    }
}

impl PubSubSink {
    /// Subscribe to `channels`, confirmed by the server.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Single(conn) => bounded(limit, &self.addr, conn.subscribe(channels)).await,
            SinkKind::Resp2(sink) => bounded(limit, &self.addr, sink.subscribe(channels)).await,
            SinkKind::Cluster(sink) => sink.subscribe(channels).await,
        }
    }

    /// Unsubscribe from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Single(conn) => bounded(limit, &self.addr, conn.unsubscribe(channel)).await,
            SinkKind::Resp2(sink) => bounded(limit, &self.addr, sink.unsubscribe(channel)).await,
            SinkKind::Cluster(sink) => sink.unsubscribe(channel).await,
        }
    }

    /// Check that the connection still answers.
    pub(crate) async fn ping(&mut self) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Single(conn) => {
                let ping = async {
                    redis::cmd("PING")
                        .query_async::<redis::Value>(conn)
                        .await
                        .map(drop)
                };
                bounded(limit, &self.addr, ping).await
            }
            SinkKind::Resp2(sink) => {
                let ping = async { sink.ping::<redis::Value>().await.map(drop) };
                bounded(limit, &self.addr, ping).await
            }
            SinkKind::Cluster(sink) => sink.ping().await,
        }
    }
}

impl PubSubStream {
    /// Whether messages wait unread: the client is behind.
    pub(crate) fn backlogged(&self) -> bool {
        match &self.stream {
            StreamKind::Single(pushes) => pushes.backlogged(),
            StreamKind::Cluster(stream) => stream.backlogged(),
        }
    }

    /// The next message, or [`Incoming::Overflowed`] after messages were
    /// dropped; `None` when the connection closed (or, for Sentinel, the
    /// client moved to another master). Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Incoming> {
        let moved = &mut self.moved;
        let next = async {
            match &mut self.stream {
                StreamKind::Single(pushes) => loop {
                    match pushes.recv().await? {
                        Push::Overflowed => return Some(Incoming::Overflowed),
                        Push::Info(push) => {
                            if let Some(message) = Message::of_push(push) {
                                return Some(Incoming::Message(message));
                            }
                        }
                    }
                },
                StreamKind::Cluster(stream) => stream.next().await,
            }
        };
        match moved {
            None => next.await,
            Some(moved) => tokio::select! {
                incoming = next => incoming,
                _ = moved.changed() => None,
            },
        }
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
