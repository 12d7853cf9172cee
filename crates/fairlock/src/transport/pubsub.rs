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
//! reach the same bounded queue. One server's connection (also a Sentinel
//! master's) is `server_pubsub.rs`; a cluster's, `sharded.rs`.

use std::sync::Arc;

use super::cluster::Builder;
use super::messages::Incoming;
use super::sentinel::Follower;
use super::server_pubsub::{self, ServerSink, ServerStream};
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
}

enum SinkKind {
    Server(ServerSink),
    Cluster(ShardedSink),
}

/// The receiving half: the messages of every subscribed channel.
pub(crate) struct PubSubStream {
    stream: StreamKind,
    /// Sentinel: changes when the client switched to another master.
    moved: Option<tokio::sync::watch::Receiver<u64>>,
}

enum StreamKind {
    Server(ServerStream),
    Cluster(ShardedStream),
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
        let (sink, stream) = server_pubsub::connect(&client, self.timeouts).await?;
        Ok((
            PubSubSink {
                sink: SinkKind::Server(sink),
            },
            PubSubStream {
                stream: StreamKind::Server(stream),
                moved,
            },
        ))
    }
}

impl PubSubSink {
    /// Subscribe to `channels`, confirmed by the server.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        match &mut self.sink {
            SinkKind::Server(sink) => sink.subscribe(channels).await,
            SinkKind::Cluster(sink) => sink.subscribe(channels).await,
        }
    }

    /// Unsubscribe from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> Result<()> {
        match &mut self.sink {
            SinkKind::Server(sink) => sink.unsubscribe(channel).await,
            SinkKind::Cluster(sink) => sink.unsubscribe(channel).await,
        }
    }

    /// Check that the connection still answers.
    pub(crate) async fn ping(&mut self) -> Result<()> {
        match &mut self.sink {
            SinkKind::Server(sink) => sink.ping().await,
            SinkKind::Cluster(sink) => sink.ping().await,
        }
    }
}

impl PubSubStream {
    /// Whether messages wait unread: the client is behind.
    pub(crate) fn backlogged(&self) -> bool {
        match &self.stream {
            StreamKind::Server(stream) => stream.backlogged(),
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
                StreamKind::Server(stream) => stream.next().await,
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
