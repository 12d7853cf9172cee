//! RESP2 pub/sub, for a server that refuses `HELLO` (Redis before 6):
//! redis-rs's `aio::PubSub`, on a socket this module opens and reads only
//! while the client keeps up.
//!
//! redis-rs's driver task reads a RESP2 pub/sub socket as fast as it can
//! and queues every message without bound; a task of ours (`drain`) moves
//! them into the bounded queue of `pushes.rs`. Both run on the client's
//! runtime: when the process gets little CPU (a loaded machine), the drain
//! can fall behind the driver and the unbounded queue grows with a flood.
//! So the socket is read through [`Throttled`], which stops reading while
//! more than [`MAX_UNMOVED`] bytes read off it have not been moved by the
//! drain, and reads again once the drain catches up (it waits only while
//! the drain has messages to move: a single message larger than the bound
//! is read whole). A flood then waits in
//! the kernel's socket buffers and in the server's output buffer for this
//! client, which the server bounds (`client-output-buffer-limit pubsub`,
//! past which it closes the connection: a disconnection, after which the
//! router reconnects and wakes every waiter), not in this process.
//!
//! Over TLS (`rediss://`) the socket is redis-rs's own, unthrottled: TLS
//! came with Redis 6, which has `HELLO`, so this path is for a server that
//! disables `HELLO` and serves TLS, rare enough not to need TLS here too.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll, Waker};

use futures_util::task::AtomicWaker;
use futures_util::{FutureExt, StreamExt};
use redis::PushKind;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::task::coop::{consume_budget, unconstrained};

use super::errors::{from_redis_conn, timed_out};
use super::pushes::{self, PushReceiver};
use crate::error::Result;

/// The most bytes read off the socket and not yet moved into the bounded
/// queue: past it, the socket is not read. (redis-rs's queue holds these
/// as parsed messages, a few times the bytes; the bounded queue drops what
/// it has no room for, so moving never waits on the router.)
pub(crate) const MAX_UNMOVED: usize = 1 << 20;

/// Open a RESP2 pub/sub connection to `client`'s server within `connect`:
/// the sending half, and its messages in a bounded queue.
pub(super) async fn connect(
    client: &redis::Client,
    connect: std::time::Duration,
    addr: &str,
) -> Result<(redis::aio::PubSubSink, PushReceiver)> {
    let info = client.get_connection_info();
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP2);
    let opened = open(client, info.addr(), &settings);
    match tokio::time::timeout(connect, opened).await {
        Ok(Ok((sink, stream, unmoved))) => Ok((sink, drain(stream, unmoved))),
        Ok(Err(err)) => Err(from_redis_conn(err, addr)),
        Err(_) => Err(from_redis_conn(
            timed_out("pub/sub connect timed out"),
            addr,
        )),
    }
}

/// The connection's halves and what its reader and drain share.
type Halves = (
    redis::aio::PubSubSink,
    redis::aio::PubSubStream,
    Arc<Unmoved>,
);

async fn open(
    client: &redis::Client,
    addr: &redis::ConnectionAddr,
    settings: &redis::RedisConnectionInfo,
) -> redis::RedisResult<Halves> {
    match addr {
        redis::ConnectionAddr::Tcp(host, port) => {
            let socket = tokio::net::TcpStream::connect((host.as_str(), *port)).await?;
            throttled(settings, socket).await
        }
        #[cfg(unix)]
        redis::ConnectionAddr::Unix(path) => {
            let socket = tokio::net::UnixStream::connect(path).await?;
            throttled(settings, socket).await
        }
        // TLS: redis-rs's socket (see the module docs).
        _ => {
            let (sink, stream) = client.get_async_pubsub().await?.split();
            Ok((sink, stream, Arc::new(Unmoved::default())))
        }
    }
}

/// A RESP2 pub/sub connection over `socket`, read through [`Throttled`].
async fn throttled<S>(
    settings: &redis::RedisConnectionInfo,
    socket: S,
) -> redis::RedisResult<Halves>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let unmoved = Arc::new(Unmoved::default());
    let socket = Throttled {
        socket,
        unmoved: Arc::clone(&unmoved),
    };
    let (sink, stream) = redis::aio::PubSub::new(settings, socket).await?.split();
    Ok((sink, stream, unmoved))
}

/// What the socket's reader and the drain share: the bytes read and not yet
/// moved, whether the drain waits for a message, and the reader's waker
/// while it waits for the drain.
#[derive(Default)]
struct Unmoved {
    bytes: AtomicUsize,
    /// The drain found redis-rs's queue empty and no message was queued
    /// since: what the reader reads meanwhile is part of a message not yet
    /// complete (one larger than `MAX_UNMOVED`, say), which must be read
    /// whole before the drain has anything to move.
    parked: AtomicBool,
    reader: AtomicWaker,
    /// How often the drain found the queue empty.
    #[cfg(test)]
    emptied: AtomicUsize,
}

impl Unmoved {
    /// The drain moved a message of `size` bytes (as read off the socket).
    fn moved(&self, size: usize) {
        self.parked.store(false, Ordering::Release);
        let before = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(size))
            })
            .unwrap_or(0);
        if before >= MAX_UNMOVED && before.saturating_sub(size) < MAX_UNMOVED {
            self.reader.wake();
        }
    }

    /// redis-rs's queue is empty: whatever was read is moved, or was no
    /// message (replies to (un)subscribe and PING, protocol overhead the
    /// estimate in `wire_size` missed). Starting again from zero keeps that
    /// from adding up; what it forgets is at most one read the driver has
    /// not parsed yet.
    fn caught_up(&self) {
        #[cfg(test)]
        self.emptied.fetch_add(1, Ordering::AcqRel);
        self.bytes.store(0, Ordering::Release);
        self.parked.store(true, Ordering::Release);
        self.reader.wake();
    }

    /// Whether the reader must wait for the drain.
    fn full(&self) -> bool {
        self.bytes.load(Ordering::Acquire) >= MAX_UNMOVED && !self.parked.load(Ordering::Acquire)
    }
}

/// The drain's waker while it waits for redis-rs's queue: a message queued
/// ends the drain's `parked` state at once, in the driver's task, not when
/// the drain next runs (on a starved machine that may be much later, and
/// the reader would read on meanwhile).
struct Arrival {
    unmoved: Arc<Unmoved>,
    drain: AtomicWaker,
}

impl std::task::Wake for Arrival {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.unmoved.parked.store(false, Ordering::Release);
        self.drain.wake();
    }
}

/// A socket that is not read while [`MAX_UNMOVED`] bytes or more read off it
/// wait to be moved by the drain. Writes pass at once (a PING or an
/// UNSUBSCRIBE still reaches the server; its answer comes after the
/// messages before it).
struct Throttled<S> {
    socket: S,
    unmoved: Arc<Unmoved>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Throttled<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.unmoved.full() {
            // Registered before checking again: a drain that catches up
            // in between wakes this task.
            this.unmoved.reader.register(cx.waker());
            if this.unmoved.full() {
                return Poll::Pending;
            }
        }
        let before = buf.filled().len();
        let read = Pin::new(&mut this.socket).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            let n = buf.filled().len() - before;
            this.unmoved.bytes.fetch_add(n, Ordering::AcqRel);
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Throttled<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().socket).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().socket).poll_shutdown(cx)
    }
}

/// The bytes a RESP2 `message` push takes on the wire:
/// `*3\r\n$7\r\nmessage\r\n$N\r\nCHANNEL\r\n$M\r\nPAYLOAD\r\n`.
fn wire_size(channel: usize, payload: usize) -> usize {
    fn bulk(len: usize) -> usize {
        1 + len.to_string().len() + 2 + len + 2
    }
    4 + bulk("message".len()) + bulk(channel) + bulk(payload)
}

/// Move a RESP2 connection's messages out of redis-rs's unbounded queue into
/// a bounded one, as they come, telling the socket's reader what was moved.
/// Ends when the connection closes (then reported as a disconnection) or
/// the receiver is dropped; its end closes the connection.
fn drain(mut stream: redis::aio::PubSubStream, unmoved: Arc<Unmoved>) -> PushReceiver {
    let (tx, pushes) = pushes::queue();
    let arrival = Arc::new(Arrival {
        unmoved: Arc::clone(&unmoved),
        drain: AtomicWaker::new(),
    });
    let arrival_waker = Waker::from(Arc::clone(&arrival));
    tokio::spawn(async move {
        loop {
            // Unconstrained: with tokio's cooperative budget spent, a
            // receiver says "nothing yet" although messages wait, and the
            // count would start again from zero with them unmoved.
            let message = match unconstrained(stream.next()).now_or_never() {
                Some(message) => message,
                None => {
                    unmoved.caught_up();
                    let next = std::future::poll_fn(|cx| {
                        arrival.drain.register(cx.waker());
                        stream.poll_next_unpin(&mut Context::from_waker(&arrival_waker))
                    });
                    // A connection given up while quiet: ending here drops
                    // the stream, which stops redis-rs's driver and closes
                    // the socket (both would otherwise wait for a message).
                    tokio::select! {
                        message = next => message,
                        () = tx.closed() => return,
                    }
                }
            };
            let Some(message) = message else { break };
            let (channel, payload) = (message.get_channel_name(), message.get_payload_bytes());
            unmoved.moved(wire_size(channel.len(), payload.len()));
            let push = redis::PushInfo {
                kind: PushKind::Message,
                data: vec![
                    redis::Value::BulkString(channel.as_bytes().to_vec()),
                    redis::Value::BulkString(payload.to_vec()),
                ],
            };
            if redis::aio::AsyncPushSender::send(&tx, push).is_err() {
                return;
            }
            // Through a flood the queue is never empty: yield now and then,
            // as the receiver would have.
            consume_budget().await;
        }
        let disconnected = redis::PushInfo {
            kind: PushKind::Disconnection,
            data: Vec::new(),
        };
        let _ = redis::aio::AsyncPushSender::send(&tx, disconnected);
    });
    pushes
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::UnixStream;

    use super::*;
    use crate::transport::pushes::Push;

    #[test]
    fn wire_size_counts_the_resp2_frame() {
        let frame = b"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$10\r\n0123456789\r\n";
        assert_eq!(wire_size(2, 10), frame.len());
    }

    fn frame(payload: &str) -> Vec<u8> {
        format!(
            "*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n${}\r\n{payload}\r\n",
            payload.len()
        )
        .into_bytes()
    }

    /// Write all of `bytes` to `socket`, reading and ignoring whatever the
    /// client sends meanwhile.
    async fn send(socket: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
        let mut ignored = [0u8; 1024];
        while !bytes.is_empty() {
            socket.writable().await?;
            match socket.try_write(bytes) {
                Ok(n) => bytes = &bytes[n..],
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                Err(err) => return Err(err),
            }
            let _ = socket.try_read(&mut ignored);
        }
        Ok(())
    }

    /// A fake server on the other end of a socket pair: `frames` messages of
    /// `payload` bytes, written as fast as the client reads them. Returns
    /// the bytes written so far, shared.
    fn flood(server: UnixStream, frames: usize, payload: usize) -> Arc<AtomicUsize> {
        let written = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&written);
        tokio::spawn(async move {
            let frame = frame(&"x".repeat(payload));
            for _ in 0..frames {
                if send(&server, &frame).await.is_err() {
                    return;
                }
                counter.fetch_add(frame.len(), Ordering::AcqRel);
            }
            // Kept open until the test ends.
            std::future::pending::<()>().await;
        });
        written
    }

    /// No command before the messages (no AUTH, SELECT or CLIENT SETINFO):
    /// the fake server answers nothing.
    fn quiet() -> redis::RedisConnectionInfo {
        redis::RedisConnectionInfo::default()
            .set_protocol(redis::ProtocolVersion::RESP2)
            .set_skip_set_lib_name()
    }

    /// The drain does not run (a process starved of CPU, at its worst): the
    /// socket is read no further than `MAX_UNMOVED` (plus the driver's read
    /// buffer), whatever the server sends; the rest waits in the socket's
    /// buffers and on the server's side. Once the drain runs, everything
    /// arrives. (With redis-rs's own socket, all 11 MB are read at once.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_drain_stops_the_socket_being_read() {
        let (client, server) = UnixStream::pair().unwrap();
        let (frames, payload) = (20_000, 512);
        let (_sink, stream, unmoved) = throttled(&quiet(), client).await.unwrap();
        let written = flood(server, frames, payload);
        // Until the writer stops making progress.
        let mut last = usize::MAX;
        while written.load(Ordering::Acquire) != last {
            last = written.load(Ordering::Acquire);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let total = frames * wire_size(2, payload);
        // The socket pair's own buffers hold a few hundred kB more.
        assert!(
            last < 2 * MAX_UNMOVED,
            "read {last} of {total} bytes with nothing moved"
        );
        let mut pushes = drain(stream, unmoved);
        let mut received = 0;
        let mut overflowed = false;
        while received < frames {
            match tokio::time::timeout(Duration::from_secs(5), pushes.recv()).await {
                Ok(Some(Push::Info(_))) => received += 1,
                Ok(Some(Push::Overflowed)) => overflowed = true,
                Ok(None) => panic!("disconnected after {received} messages"),
                Err(_) => break,
            }
        }
        assert_eq!(written.load(Ordering::Acquire), total);
        // What the bounded queue had no room for was dropped, and it said so.
        assert!(received == frames || overflowed, "{received} of {frames}");
    }

    /// Without a flood the throttle never gets in the way: every message of
    /// a steady stream arrives, and the connection's end is reported.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn messages_and_the_end_pass_through() {
        let (client, server) = UnixStream::pair().unwrap();
        let (_sink, stream, unmoved) = throttled(&quiet(), client).await.unwrap();
        let mut pushes = drain(stream, unmoved);
        for n in 0..3000 {
            let body = format!("{n:0>600}");
            send(&server, &frame(&body)).await.unwrap();
            match pushes.recv().await {
                Some(Push::Info(info)) => {
                    assert_eq!(info.data[1], redis::Value::BulkString(body.into_bytes()))
                }
                other => panic!("{n}: {other:?}"),
            }
        }
        drop(server);
        let end = tokio::time::timeout(Duration::from_secs(5), pushes.recv()).await;
        assert!(matches!(end, Ok(None)), "{end:?}");
    }

    /// A connection given up while no message comes (the router dropped
    /// both halves) is closed at once: the server sees it go.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_connection_closes_its_socket() {
        let (client, server) = UnixStream::pair().unwrap();
        let (sink, stream, unmoved) = throttled(&quiet(), client).await.unwrap();
        let mut pushes = drain(stream, unmoved);
        send(&server, &frame("one")).await.unwrap();
        // Received: the drain waits for the next message.
        assert!(matches!(pushes.recv().await, Some(Push::Info(_))));
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop((sink, pushes));
        let closed = async {
            let mut buf = [0u8; 64];
            loop {
                server.readable().await.unwrap();
                match server.try_read(&mut buf) {
                    Ok(0) => return,
                    Ok(_) => {}
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                    Err(err) => panic!("{err}"),
                }
            }
        };
        let closed = tokio::time::timeout(Duration::from_secs(5), closed).await;
        assert!(closed.is_ok(), "the client's socket stayed open");
    }

    /// A message larger than `MAX_UNMOVED` is read whole (the drain has
    /// nothing to move until it is), and the ones after it too. (The
    /// bounded queue drops it: larger than its byte bound.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_message_larger_than_the_bound_passes() {
        let (client, server) = UnixStream::pair().unwrap();
        let (_sink, stream, unmoved) = throttled(&quiet(), client).await.unwrap();
        let mut pushes = drain(stream, unmoved);
        let big = "y".repeat(3 * MAX_UNMOVED);
        let writer = tokio::spawn(async move {
            send(&server, &frame(&big)).await.unwrap();
            send(&server, &frame("after")).await.unwrap();
            server
        });
        let mut overflowed = false;
        loop {
            let push = tokio::time::timeout(Duration::from_secs(10), pushes.recv()).await;
            match push {
                Ok(Some(Push::Overflowed)) => overflowed = true,
                Ok(Some(Push::Info(info))) => {
                    assert_eq!(info.data[1], redis::Value::BulkString(b"after".to_vec()));
                    break;
                }
                other => panic!("the message after the big one never came: {other:?}"),
            }
        }
        let overflowed = overflowed
            || tokio::time::timeout(Duration::from_secs(1), pushes.recv())
                .await
                .is_ok_and(|push| matches!(push, Some(Push::Overflowed)));
        assert!(
            overflowed,
            "the big message was neither received nor dropped"
        );
        drop(writer.await.unwrap());
    }

    /// The count starts again from zero only when redis-rs's queue is
    /// empty: a backlog of more messages than tokio's cooperative budget
    /// lets one task receive in a row (128) is moved without a reset on the
    /// way (one would let the socket be read again with the backlog still
    /// queued).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_backlog_is_moved_without_a_reset_on_the_way() {
        let (client, server) = UnixStream::pair().unwrap();
        let (frames, payload) = (1000, 100);
        let (_sink, stream, unmoved) = throttled(&quiet(), client).await.unwrap();
        let written = flood(server, frames, payload);
        let total = frames * wire_size(2, payload);
        assert!(total < MAX_UNMOVED);
        while written.load(Ordering::Acquire) < total
            || unmoved.bytes.load(Ordering::Acquire) < total
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Everything read; give the driver time to queue it all.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut pushes = drain(stream, Arc::clone(&unmoved));
        for n in 0..frames {
            match tokio::time::timeout(Duration::from_secs(5), pushes.recv()).await {
                Ok(Some(Push::Info(_))) => {}
                other => panic!("message {n}: {other:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(unmoved.emptied.load(Ordering::Acquire), 1);
    }
}
