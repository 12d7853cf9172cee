//! Pub/sub on one server: a RESP3 connection whose messages go through a
//! bounded queue (`pushes.rs`), or a RESP2 one on a server without `HELLO`
//! (`resp2.rs`), each command bounded by the response timeout. The wake-up
//! connections of one server and of a Sentinel master (through
//! `pubsub.rs`), and the sentinels' `+switch-master` listener
//! (`sentinel.rs`).

use super::errors::{bounded, from_redis_conn, timed_out};
use super::messages::{Incoming, Message};
use super::pushes::{self, Push, PushReceiver};
use super::resp2;
use super::timeouts::Timeouts;
use crate::error::Result;

/// The sending half of a pub/sub connection to one server: (un)subscribe
/// and PING.
pub(crate) struct ServerSink {
    sink: SinkKind,
    timeouts: Timeouts,
    addr: String,
}

enum SinkKind {
    Resp3(redis::aio::MultiplexedConnection),
    Resp2(redis::aio::PubSubSink),
}

/// The receiving half: the messages of every subscribed channel, through
/// the bounded queue (RESP3, or RESP2 moved to it: `resp2.rs`).
pub(crate) struct ServerStream {
    pushes: PushReceiver,
}

/// Open a pub/sub connection to the server of `client`, within the connect
/// timeout: RESP3, or RESP2 when the server refuses `HELLO` (Redis before
/// 6).
pub(super) async fn connect(
    client: &redis::Client,
    timeouts: Timeouts,
) -> Result<(ServerSink, ServerStream)> {
    let addr = client.get_connection_info().addr().to_string();
    match connect_resp3(client, timeouts, &addr).await {
        Err(err) if err.to_string().contains("HELLO") => {}
        connected => {
            let (sink, pushes) = connected?;
            return Ok((
                ServerSink {
                    sink: SinkKind::Resp3(sink),
                    timeouts,
                    addr,
                },
                ServerStream { pushes },
            ));
        }
    }
    // The server refused HELLO: RESP2 pub/sub.
    let (sink, pushes) = resp2::connect(client, timeouts.connect, &addr).await?;
    Ok((
        ServerSink {
            sink: SinkKind::Resp2(sink),
            timeouts,
            addr,
        },
        ServerStream { pushes },
    ))
}

/// A RESP3 connection whose pushes go to a bounded queue. An error that
/// names `HELLO` means the server has no RESP3.
async fn connect_resp3(
    client: &redis::Client,
    timeouts: Timeouts,
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
        .set_connection_timeout(Some(timeouts.connect))
        .set_response_timeout(Some(timeouts.response))
        .set_push_sender(tx);
    let connected = client.get_multiplexed_async_connection_with_config(&config);
    match tokio::time::timeout(timeouts.connect, connected).await {
        Ok(Ok(conn)) => Ok((conn, pushes)),
        Ok(Err(err)) => Err(from_redis_conn(err, addr)),
        Err(_) => Err(from_redis_conn(
            timed_out("pub/sub connect timed out"),
            addr,
        )),
    }
}

impl ServerSink {
    /// Subscribe to `channels`, confirmed by the server.
    pub(crate) async fn subscribe(&mut self, channels: &[String]) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Resp3(conn) => bounded(limit, &self.addr, conn.subscribe(channels)).await,
            SinkKind::Resp2(sink) => bounded(limit, &self.addr, sink.subscribe(channels)).await,
        }
    }

    /// Unsubscribe from `channel`.
    pub(crate) async fn unsubscribe(&mut self, channel: &str) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Resp3(conn) => bounded(limit, &self.addr, conn.unsubscribe(channel)).await,
            SinkKind::Resp2(sink) => bounded(limit, &self.addr, sink.unsubscribe(channel)).await,
        }
    }

    /// Check that the connection still answers.
    pub(crate) async fn ping(&mut self) -> Result<()> {
        let limit = self.timeouts.response;
        match &mut self.sink {
            SinkKind::Resp3(conn) => {
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
        }
    }
}

impl ServerStream {
    /// Whether messages wait unread: the client is behind.
    pub(crate) fn backlogged(&self) -> bool {
        self.pushes.backlogged()
    }

    /// The next message, or [`Incoming::Overflowed`] after messages were
    /// dropped; `None` when the connection closed. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Incoming> {
        loop {
            match self.pushes.recv().await? {
                Push::Overflowed => return Some(Incoming::Overflowed),
                Push::Info(push) => {
                    if let Some(message) = Message::of_push(push) {
                        return Some(Incoming::Message(message));
                    }
                }
            }
        }
    }
}
