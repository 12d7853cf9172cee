//! Wake-ups: one pub/sub connection per client, shared by every waiter.
//!
//! A waiter subscribes to its channel *before* its first attempt and marks
//! the channel's generation as seen before each attempt (register, then
//! check, as `tokio::sync::Notify::enable` does). A message bumps the
//! generation, so a release published between the attempt and the wait is
//! never lost. Every wait is still bounded by the TTL the script returned:
//! a message lost to a broken connection costs at most that TTL.
//!
//! The connection is owned by one background task. When it breaks, the task
//! wakes every waiter (they re-check the lock over the command connection),
//! reconnects with backoff and subscribes again to every channel that still
//! has waiters. A channel is unsubscribed when its last waiter leaves.
//!
//! A connection can also die silently (a dropped NAT entry, a peer that
//! vanished without a FIN): the task PINGs it every [`HEALTH_INTERVAL`] and
//! treats a PING unanswered within the response timeout as a broken
//! connection. A dead subscription is thus replaced within
//! `HEALTH_INTERVAL` + the response timeout; meanwhile every waiter still
//! re-checks at least once per refresh interval.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};

use crate::events::{self, BehindReason, Event, Recorder};
use crate::protocol::REVOKED_PREFIX;
use crate::retry::Backoff;
use crate::transport::{Incoming, Message, PubSubConnector, PubSubSink};

/// How often the pub/sub connection is checked with a PING.
pub(crate) const HEALTH_INTERVAL: Duration = Duration::from_secs(1);

/// The shortest time between two wake-ups of every waiter because the
/// connection fell behind: a sustained flood makes each waiter check at
/// most once per gap (as a flood on its own channel does, `acquire/wait.rs`).
const BEHIND_WAKE_GAP: Duration = Duration::from_millis(25);

/// A health-check PING unanswered after this long while messages wait
/// unread means a backlog: every waiter is woken to check, and again every
/// `PING_LAG` until it is answered (it still gets until the response
/// timeout before the connection counts as broken).
const PING_LAG: Duration = Duration::from_millis(100);

/// Wake-ups of every waiter because the connection fell behind, at most
/// one per [`BEHIND_WAKE_GAP`]: one asked for within the gap is owed and
/// made when the gap ends (messages dropped meanwhile are covered).
#[derive(Default)]
struct Behind {
    woken_at: Option<tokio::time::Instant>,
    owed: bool,
}

impl Behind {
    fn wake(&mut self, shared: &Shared, events: &Recorder, reason: BehindReason) {
        let now = tokio::time::Instant::now();
        if self.woken_at.is_some_and(|at| now < at + BEHIND_WAKE_GAP) {
            self.owed = true;
            return;
        }
        let first = self
            .woken_at
            .is_none_or(|at| now >= at + Duration::from_secs(10));
        self.owed = false;
        self.woken_at = Some(now);
        events.record(Event::PubSubBehind { reason, first });
        shared.bump_all();
    }

    /// Ready when an owed wake-up is due (never when none is owed).
    async fn owed(&self) {
        match self.woken_at.filter(|_| self.owed) {
            Some(at) => tokio::time::sleep_until(at + BEHIND_WAKE_GAP).await,
            None => std::future::pending().await,
        }
    }
}

/// Routes pub/sub messages to the waiters of each channel.
#[derive(Clone)]
pub(crate) struct WakeupRouter {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    /// The pub/sub task, stopped by [`stop`](Self::stop) at shutdown.
    task: tokio::task::AbortHandle,
}

struct Shared {
    channels: Mutex<HashMap<String, Channel>>,
    /// Wake-ups routed so far (messages, reconnects, overflows), in the
    /// order the one connection delivered them: each wake-up's number.
    routed: AtomicU64,
    /// The number of the last wake-up that may have been a revocation (a
    /// message on a revocation channel, or a reconnect or overflow that
    /// may have lost one). See [`WakeupRouter::revoked_since`].
    revoked_at: AtomicU64,
}

struct Channel {
    latest: watch::Sender<Wake>,
    waiters: usize,
}

/// The latest wake-up of a channel: a generation number and the message
/// payload (`None` for a wake-up caused by a reconnect).
#[derive(Debug, Clone, Default)]
struct Wake {
    generation: u64,
    payload: Option<Arc<str>>,
    /// Its number among all wake-ups of the connection.
    routed: u64,
}

/// Why a wait ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Woken {
    /// A message arrived on the channel.
    Message(Arc<str>),
    /// The pub/sub connection was re-established; messages may have been lost.
    Reconnected,
    /// The wait's bound ran out.
    Timeout,
}

enum Command {
    Subscribe(String, oneshot::Sender<()>),
    Unsubscribe(String),
}

impl Shared {
    fn channels(&self) -> MutexGuard<'_, HashMap<String, Channel>> {
        // A panic while holding this lock cannot leave the map inconsistent
        // (every update is a single insert/remove), so poisoning is ignored.
        self.channels.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump(&self, channel: &str, payload: Option<Arc<str>>) {
        let routed = self.routed.fetch_add(1, Ordering::SeqCst) + 1;
        // Noted before anyone is woken by it: a grant registered after this
        // sees it (see `revoked_since`).
        if channel.starts_with(REVOKED_PREFIX) {
            self.revoked_at.store(routed, Ordering::SeqCst);
        }
        if let Some(entry) = self.channels().get(channel) {
            entry.latest.send_modify(|wake| {
                wake.generation = wake.generation.wrapping_add(1);
                wake.payload = payload;
                wake.routed = routed;
            });
        }
    }

    /// Wake every waiter: messages may have been lost (a revocation among
    /// them).
    fn bump_all(&self) {
        let routed = self.routed.fetch_add(1, Ordering::SeqCst) + 1;
        self.revoked_at.store(routed, Ordering::SeqCst);
        for entry in self.channels().values() {
            entry.latest.send_modify(|wake| {
                wake.generation = wake.generation.wrapping_add(1);
                wake.payload = None;
                wake.routed = routed;
            });
        }
    }
}

impl WakeupRouter {
    /// Start the router's task on `runtime`. The task ends when the last
    /// clone of the router is dropped.
    pub(crate) fn start(
        connector: PubSubConnector,
        events: Arc<Recorder>,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            routed: AtomicU64::new(0),
            revoked_at: AtomicU64::new(0),
        });
        let (commands, rx) = mpsc::unbounded_channel();
        let task = runtime.spawn(run(connector, Arc::clone(&shared), rx, events));
        Self {
            shared,
            commands,
            task: task.abort_handle(),
        }
    }

    /// Stop the pub/sub task and close its connection (the client shut
    /// down). Waits in progress then rely on their bounded sleeps.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// Register interest in `channel` and wait (at most `confirm_timeout`) until
    /// the server confirmed the subscription. When the pub/sub connection is
    /// down the subscription is kept and made on reconnect; the waiter then
    /// relies on its TTL-bounded waits.
    pub(crate) async fn subscribe(&self, channel: &str, confirm_timeout: Duration) -> Subscription {
        let (rx, first) = {
            let mut channels = self.shared.channels();
            match channels.get_mut(channel) {
                Some(entry) => {
                    entry.waiters += 1;
                    (entry.latest.subscribe(), false)
                }
                None => {
                    let (tx, rx) = watch::channel(Wake::default());
                    channels.insert(
                        channel.to_owned(),
                        Channel {
                            latest: tx,
                            waiters: 1,
                        },
                    );
                    (rx, true)
                }
            }
        };
        let mut subscription = Subscription {
            router: self.clone(),
            channel: channel.to_owned(),
            latest: rx,
            confirmed: false,
            routed: 0,
        };
        if first {
            let (ack, confirmed) = oneshot::channel();
            if self
                .commands
                .send(Command::Subscribe(channel.to_owned(), ack))
                .is_ok()
            {
                subscription.confirmed = matches!(
                    tokio::time::timeout(confirm_timeout, confirmed).await,
                    Ok(Ok(()))
                );
            }
        }
        subscription
    }

    /// A mark of the wake-ups routed so far, for
    /// [`revoked_since`](Self::revoked_since).
    pub(crate) fn mark(&self) -> u64 {
        self.shared.routed.load(Ordering::SeqCst)
    }

    /// Whether a revocation of this client's holds may have arrived after
    /// the wake-up numbered `mark` (a [`mark`](Self::mark), or a grant
    /// message's [`Subscription::routed`]): a message on the revocation
    /// channel, or a reconnect or overflow that may have lost one.
    ///
    /// A hold made from a grant registers *first* and asks this *then*: a
    /// revocation routed before the question is seen here, and one routed
    /// after it finds the hold in the registry when the watchdog checks
    /// (the revocation listener wakes only after the routing). Messages of
    /// one connection arrive in order, so a force-unlock published after a
    /// grant message is routed after it: it always wins over the grant.
    pub(crate) fn revoked_since(&self, mark: u64) -> bool {
        self.shared.revoked_at.load(Ordering::SeqCst) > mark
    }

    /// Channels with at least one waiter (subscribed, or to subscribe on
    /// reconnect).
    pub(crate) fn channel_count(&self) -> usize {
        self.shared.channels().len()
    }

    fn release(&self, channel: &str) {
        let mut channels = self.shared.channels();
        if let Some(entry) = channels.get_mut(channel) {
            entry.waiters -= 1;
            if entry.waiters == 0 {
                channels.remove(channel);
                let _ = self.commands.send(Command::Unsubscribe(channel.to_owned()));
            }
        }
    }
}

/// One waiter's registration on a channel; unregisters on drop.
pub(crate) struct Subscription {
    router: WakeupRouter,
    channel: String,
    latest: watch::Receiver<Wake>,
    /// This call made the subscription and the server confirmed it.
    confirmed: bool,
    /// The number of the last wake-up [`wait`](Self::wait) returned.
    routed: u64,
}

impl Subscription {
    /// Whether the server confirmed this subscription before `subscribe`
    /// returned (every message published afterwards reaches it, unless the
    /// connection breaks, which wakes it). `false` when another waiter of
    /// the channel made it, or no confirmation came in time.
    pub(crate) fn confirmed(&self) -> bool {
        self.confirmed
    }

    /// The number of the last wake-up [`wait`](Self::wait) returned, among
    /// all wake-ups of the connection (see [`WakeupRouter::revoked_since`]).
    pub(crate) fn routed(&self) -> u64 {
        self.routed
    }

    /// Mark every wake-up so far as seen. Call before each attempt.
    pub(crate) fn mark_seen(&mut self) {
        self.latest.borrow_and_update();
    }

    /// Wait until a wake-up arrives after the last `mark_seen`, or `timeout`.
    pub(crate) async fn wait(&mut self, timeout: Duration) -> Woken {
        match tokio::time::timeout(timeout, self.latest.changed()).await {
            Ok(Ok(())) => {
                let wake = self.latest.borrow_and_update();
                self.routed = wake.routed;
                match wake.payload.clone() {
                    Some(payload) => Woken::Message(payload),
                    None => Woken::Reconnected,
                }
            }
            // The router is gone (client dropped): nothing will wake us.
            Ok(Err(_)) => {
                tokio::time::sleep(timeout).await;
                Woken::Timeout
            }
            Err(_) => Woken::Timeout,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.router.release(&self.channel);
    }
}

/// The pub/sub task: connect, subscribe, route messages; on a broken
/// connection wake everyone and start over.
async fn run(
    connector: PubSubConnector,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    events: Arc<Recorder>,
) {
    let mut backoff = Backoff::reconnect();
    let mut reconnect = false;
    loop {
        let (mut sink, mut stream) = match connector.connect().await {
            Ok(halves) => halves,
            Err(err) => {
                events::record(Event::PubSubRetry { error: &err });
                if !sleep_or_drain(&mut commands, backoff.next_delay()).await {
                    return;
                }
                continue;
            }
        };
        let wanted: Vec<String> = shared.channels().keys().cloned().collect();
        if !wanted.is_empty() {
            if let Err(err) = sink.subscribe(&wanted).await {
                events::record(Event::PubSubRetry { error: &err });
                if !sleep_or_drain(&mut commands, backoff.next_delay()).await {
                    return;
                }
                continue;
            }
            // Messages may have been missed while disconnected.
            shared.bump_all();
        }
        events.record(Event::PubSubConnected { reconnect });
        reconnect = true;
        let connected_at = tokio::time::Instant::now();
        let mut health = tokio::time::interval(HEALTH_INTERVAL);
        health.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        health.reset();
        let mut behind = Behind::default();
        // One command at a time is in flight (it has the sink), and
        // messages are read and routed while it waits for its reply: a
        // reply that is slow to come (a slow or paused server, a lagging
        // connection) must not hold up a message that already arrived, a
        // revocation above all (a holder would go on believing in a lock
        // taken from it for as long as the reply takes).
        let mut sink = Some(sink);
        let mut in_flight: Option<InFlight> = None;
        let mut ping = PingWatch::default();
        let broken = loop {
            tokio::select! {
                // A PING is answered after every message the server sent
                // before it. Late, with messages arriving meanwhile, it
                // means a backlog (a flood's) that a real message may wait
                // behind: until it is answered, every waiter checks once per
                // PING_LAG while messages come. Late with nothing arriving
                // is only a slow server: waking everyone would only load it
                // more.
                _ = health.tick(), if sink.is_some() => {
                    if let Some(idle) = sink.take() {
                        in_flight = Some(send(idle, Op::Ping));
                        ping.sent();
                    }
                }
                (idle, op, result) = async { in_flight.as_mut().expect("in flight").await },
                    if in_flight.is_some() =>
                {
                    in_flight = None;
                    sink = Some(idle);
                    if let Err(err) = result {
                        break Some(err);
                    }
                    match op {
                        Op::Subscribe(_, ack) => {
                            let _ = ack.send(());
                        }
                        Op::Ping => ping.answered(),
                        Op::Unsubscribe(_) => {}
                    }
                }
                () = ping.lagging() => {
                    if ping.messages_since || stream.backlogged() {
                        behind.wake(&shared, &events, BehindReason::SlowPing);
                    }
                    ping.lag_checked();
                }
                () = behind.owed() => behind.wake(&shared, &events, BehindReason::Dropped),
                message = stream.next() => match message {
                    Some(Incoming::Message(Message { channel, payload })) => {
                        ping.message();
                        shared.bump(&channel, Some(payload));
                    }
                    Some(Incoming::Overflowed) => behind.wake(&shared, &events, BehindReason::Dropped),
                    None => break None,
                },
                command = commands.recv(), if sink.is_some() => match command {
                    Some(Command::Subscribe(channel, ack)) => {
                        if let Some(idle) = sink.take() {
                            in_flight = Some(send(idle, Op::Subscribe(channel, ack)));
                        }
                    }
                    Some(Command::Unsubscribe(channel)) => {
                        // A new waiter may have come back for it meanwhile.
                        if !shared.channels().contains_key(&channel) {
                            if let Some(idle) = sink.take() {
                                in_flight = Some(send(idle, Op::Unsubscribe(channel)));
                            }
                        }
                    }
                    None => return,
                },
            }
        };
        events::record(Event::PubSubLost {
            error: broken.as_ref().map(|err| err as &dyn std::fmt::Display),
        });
        shared.bump_all();
        // A connection that keeps failing at once (a refused SUBSCRIBE, say)
        // must not turn into a busy loop.
        if connected_at.elapsed() > Duration::from_secs(5) {
            backoff.reset();
        } else if !sleep_or_drain(&mut commands, backoff.next_delay()).await {
            return;
        }
    }
}

/// A command sent on the pub/sub connection.
enum Op {
    Subscribe(String, oneshot::Sender<()>),
    Unsubscribe(String),
    Ping,
}

/// A command in flight: the sink comes back with the command and its
/// outcome (each bounded by the response timeout).
type InFlight = Pin<Box<dyn Future<Output = (PubSubSink, Op, crate::error::Result<()>)> + Send>>;

/// Send `op` on `sink`, which the returned future owns until the reply.
fn send(mut sink: PubSubSink, op: Op) -> InFlight {
    Box::pin(async move {
        let result = match &op {
            Op::Subscribe(channel, _) => sink.subscribe(std::slice::from_ref(channel)).await,
            Op::Unsubscribe(channel) => sink.unsubscribe(channel).await,
            Op::Ping => sink.ping().await,
        };
        (sink, op, result)
    })
}

/// The health-check PING in flight: when its lag is next checked, and
/// whether messages arrived since it was sent.
#[derive(Default)]
struct PingWatch {
    lag_check: Option<tokio::time::Instant>,
    messages_since: bool,
}

impl PingWatch {
    fn sent(&mut self) {
        self.lag_check = Some(tokio::time::Instant::now() + PING_LAG);
        self.messages_since = false;
    }

    fn answered(&mut self) {
        self.lag_check = None;
    }

    fn message(&mut self) {
        if self.lag_check.is_some() {
            self.messages_since = true;
        }
    }

    /// Ready when the PING in flight is due for a check of its lag (never
    /// when none is in flight).
    async fn lagging(&self) {
        match self.lag_check {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    fn lag_checked(&mut self) {
        self.lag_check = Some(tokio::time::Instant::now() + PING_LAG);
    }
}

/// Sleep for `delay` while answering commands (subscriptions are recorded
/// in the shared map and made on reconnect). `false` when the router is gone.
async fn sleep_or_drain(commands: &mut mpsc::UnboundedReceiver<Command>, delay: Duration) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            () = &mut sleep => return true,
            command = commands.recv() => match command {
                // Not confirmed: the waiter stops waiting for the ack at once.
                Some(Command::Subscribe(_, ack)) => drop(ack),
                Some(Command::Unsubscribe(_)) => {}
                None => return false,
            },
        }
    }
}
