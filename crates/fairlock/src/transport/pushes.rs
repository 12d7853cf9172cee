//! The bounded queue between a RESP3 connection's reader (redis-rs's
//! driver task, which reads the socket as fast as it can) and the wake-up
//! router, which handles one message at a time.
//!
//! Anyone allowed to PUBLISH can send a client messages faster than it
//! handles them (its revocation channel, any lock's channel). With an
//! unbounded queue the client's memory grows without bound and a real
//! release or revocation waits behind the backlog: Redis's
//! `client-output-buffer-limit pubsub` never cuts the client off, since the
//! client does read the socket. So the queue is bounded, by messages and by
//! bytes, and drops what does not fit: the receiver then gets
//! [`Push::Overflowed`] once, and the router wakes every waiter as after a
//! reconnect (messages may have been missed), which is always safe — a
//! wake-up is only a hint to check. A disconnection is never dropped, and
//! a dropped cluster slot-move notice (`sunsubscribe`) counts as one.
//!
//! Bounds: at most [`MAX_MESSAGES`] messages and [`MAX_BYTES`] bytes of
//! channel names and payloads queued per connection (one message over the
//! byte bound is dropped on arrival). A message is still read off the
//! socket and parsed by redis-rs before it can be dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use redis::aio::{AsyncPushSender, SendError};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{Notify, mpsc};

/// The most messages queued per connection.
pub(crate) const MAX_MESSAGES: usize = 1024;
/// The most bytes (channel names and payloads) queued per connection.
pub(crate) const MAX_BYTES: usize = 1 << 20;

/// What the receiver gets.
#[derive(Debug)]
pub(crate) enum Push {
    /// A push from the server, in order.
    Info(PushInfo),
    /// Pushes were dropped since the last one received: some messages were
    /// never seen.
    Overflowed,
}

struct State {
    bytes: AtomicUsize,
    overflowed: AtomicBool,
    disconnected: AtomicBool,
    /// Wakes the receiver for a flag set while the queue was empty.
    flagged: Notify,
}

/// The sending half, given to redis-rs as the connection's push sender.
pub(crate) struct PushSender {
    queue: mpsc::Sender<(PushInfo, usize)>,
    state: Arc<State>,
}

/// The receiving half, read by the pub/sub stream.
pub(crate) struct PushReceiver {
    queue: mpsc::Receiver<(PushInfo, usize)>,
    state: Arc<State>,
}

/// A new queue with the bounds above.
pub(crate) fn queue() -> (PushSender, PushReceiver) {
    queue_with(MAX_MESSAGES, MAX_BYTES)
}

fn queue_with(messages: usize, bytes: usize) -> (PushSender, PushReceiver) {
    let (tx, rx) = mpsc::channel(messages);
    let state = Arc::new(State {
        bytes: AtomicUsize::new(bytes),
        overflowed: AtomicBool::new(false),
        disconnected: AtomicBool::new(false),
        flagged: Notify::new(),
    });
    (
        PushSender {
            queue: tx,
            state: Arc::clone(&state),
        },
        PushReceiver { queue: rx, state },
    )
}

/// The bytes a push holds (bulk strings: channel names, payloads).
fn size(info: &PushInfo) -> usize {
    info.data
        .iter()
        .map(|value| match value {
            Value::BulkString(bytes) => bytes.len(),
            Value::SimpleString(text) => text.len(),
            _ => 8,
        })
        .sum::<usize>()
        + 16
}

impl PushSender {
    /// `kind` did not fit. A dropped message is reported as an overflow; a
    /// dropped unsolicited `sunsubscribe` (a cluster slot moved: its
    /// channel must be subscribed again where it lives now) as a
    /// disconnection, so that the connection is made again and every
    /// channel subscribed anew.
    fn overflow(&self, kind: &PushKind) {
        if *kind == PushKind::SUnsubscribe {
            self.state.disconnected.store(true, Ordering::Release);
        } else {
            self.state.overflowed.store(true, Ordering::Release);
        }
        self.state.flagged.notify_one();
    }
}

impl PushSender {
    /// Resolves once the receiver is dropped (the connection was given up).
    pub(crate) async fn closed(&self) {
        self.queue.closed().await;
    }
}

impl AsyncPushSender for PushSender {
    fn send(&self, info: PushInfo) -> Result<(), SendError> {
        if self.queue.is_closed() {
            return Err(SendError);
        }
        if info.kind == PushKind::Disconnection {
            self.state.disconnected.store(true, Ordering::Release);
            self.state.flagged.notify_one();
            return Ok(());
        }
        let size = size(&info);
        // `bytes` counts the room left; take it before queueing (the
        // receiver gives it back), or drop the push.
        let taken = self
            .state
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(size)
            });
        if taken.is_err() {
            self.overflow(&info.kind);
            return Ok(());
        }
        match self.queue.try_send((info, size)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full((info, _))) => {
                self.state.bytes.fetch_add(size, Ordering::AcqRel);
                self.overflow(&info.kind);
                Ok(())
            }
            Err(mpsc::error::TrySendError::Closed(_)) => Err(SendError),
        }
    }
}

impl PushReceiver {
    /// Whether pushes wait unread (or some were dropped since the last
    /// one received).
    pub(crate) fn backlogged(&self) -> bool {
        !self.queue.is_empty() || self.state.overflowed.load(Ordering::Acquire)
    }

    /// The next push, or [`Push::Overflowed`] once after pushes were
    /// dropped; `None` when the connection is gone. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> Option<Push> {
        loop {
            if self.state.disconnected.load(Ordering::Acquire) {
                return None;
            }
            if self.state.overflowed.swap(false, Ordering::AcqRel) {
                return Some(Push::Overflowed);
            }
            tokio::select! {
                biased;
                pushed = self.queue.recv() => {
                    let (info, size) = pushed?;
                    self.state.bytes.fetch_add(size, Ordering::AcqRel);
                    return Some(Push::Info(info));
                }
                () = self.state.flagged.notified() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &str) -> PushInfo {
        PushInfo {
            kind: PushKind::Message,
            data: vec![
                Value::BulkString(b"ch".to_vec()),
                Value::BulkString(payload.as_bytes().to_vec()),
            ],
        }
    }

    fn payload(push: Push) -> String {
        match push {
            Push::Info(info) => match &info.data[1] {
                Value::BulkString(bytes) => String::from_utf8(bytes.clone()).unwrap(),
                other => panic!("{other:?}"),
            },
            Push::Overflowed => "overflowed".into(),
        }
    }

    #[tokio::test]
    async fn drops_what_does_not_fit_and_says_so_once() {
        let (tx, mut rx) = queue_with(2, 1 << 20);
        for n in 0..5 {
            tx.send(message(&n.to_string())).unwrap();
        }
        assert_eq!(payload(rx.recv().await.unwrap()), "overflowed");
        assert_eq!(payload(rx.recv().await.unwrap()), "0");
        assert_eq!(payload(rx.recv().await.unwrap()), "1");
        tx.send(message("5")).unwrap();
        assert_eq!(payload(rx.recv().await.unwrap()), "5");
        // Nothing left, nothing flagged: the receiver waits.
        let waited = tokio::time::timeout(std::time::Duration::from_millis(50), rx.recv()).await;
        assert!(waited.is_err());
    }

    #[tokio::test]
    async fn bytes_are_bounded_and_given_back() {
        let big = "x".repeat(400);
        let (tx, mut rx) = queue_with(100, 1000);
        tx.send(message(&big)).unwrap();
        tx.send(message(&big)).unwrap();
        // A third would pass 1000 bytes: dropped.
        tx.send(message(&big)).unwrap();
        assert_eq!(payload(rx.recv().await.unwrap()), "overflowed");
        assert_eq!(payload(rx.recv().await.unwrap()), big);
        assert_eq!(payload(rx.recv().await.unwrap()), big);
        // The room came back.
        tx.send(message(&big)).unwrap();
        tx.send(message(&big)).unwrap();
        assert_eq!(payload(rx.recv().await.unwrap()), big);
        assert_eq!(payload(rx.recv().await.unwrap()), big);
        // One message larger than the whole bound is dropped on arrival.
        tx.send(message(&"y".repeat(2000))).unwrap();
        assert_eq!(payload(rx.recv().await.unwrap()), "overflowed");
    }

    #[tokio::test]
    async fn a_dropped_slot_move_ends_the_connection() {
        let (tx, mut rx) = queue_with(1, 1 << 20);
        tx.send(message("0")).unwrap();
        tx.send(PushInfo {
            kind: PushKind::SUnsubscribe,
            data: vec![Value::BulkString(b"fairlock:{a}:wake:x".to_vec())],
        })
        .unwrap();
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_disconnection_is_heard_even_when_full() {
        let (tx, mut rx) = queue_with(1, 1 << 20);
        tx.send(message("0")).unwrap();
        tx.send(message("1")).unwrap();
        tx.send(PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        })
        .unwrap();
        assert!(rx.recv().await.is_none());
    }

    #[tokio::test]
    async fn a_flag_set_while_waiting_wakes_the_receiver() {
        let (tx, mut rx) = queue_with(1, 1 << 20);
        let waiting = tokio::spawn(async move { rx.recv().await.is_none() });
        tokio::task::yield_now().await;
        tx.send(PushInfo {
            kind: PushKind::Disconnection,
            data: vec![],
        })
        .unwrap();
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn a_dropped_receiver_closes_the_sender() {
        let (tx, rx) = queue_with(1, 1 << 20);
        drop(rx);
        assert!(tx.send(message("0")).is_err());
    }
}
