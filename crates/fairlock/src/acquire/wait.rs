//! The wait loop: attempt, read the reply, subscribe once, pause until a
//! wake-up or the next refresh, and again until granted, as explicit steps
//! of a [`Waiter`].
//!
//! The first attempt goes out before subscribing, so an uncontended lock
//! costs one round trip. When it is not granted, the waiter subscribes and
//! attempts again at once: a release between the two attempts is seen by
//! the second, so no wake-up is lost. Every later attempt marks the channel
//! seen before it is sent (register, then check).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::attempt::Acquisition;
use crate::disarm::DisarmOnDrop;
use crate::error::{Error, Result};
use crate::events::{self, Event, Handoff};
use crate::hold::ArmedHold;
use crate::protocol::{Acquire, Grant};
use crate::retry::Backoff;
use crate::wakeup::{Subscription, Woken};
use crate::watchdog::HoldKind;

/// The shortest time between two attempts of one waiter woken by a message
/// that is not a grant to it (`free`, Redisson's `0`, or a forgery); a
/// Redisson semaphore's waiters keep it too (`semaphore.rs`).
pub(crate) const MIN_ATTEMPT_GAP: Duration = Duration::from_millis(25);

/// Paces a waiter that anyone's messages wake (a Redisson semaphore's
/// waiters, a latch's): the first message goes straight to an attempt,
/// back-to-back ones (many releases, or a flood of anyone's PUBLISH) make
/// it try at most once per [`MIN_ATTEMPT_GAP`], as the lock's waiters do.
/// A wake-up that was not a message (a timeout, a reconnect) starts afresh.
#[derive(Debug, Default)]
pub(crate) struct WakePacer {
    /// When the last attempt that a message woke was let go.
    last: Option<Instant>,
}

impl WakePacer {
    /// After `woken`: wait until the next attempt is due (the rest of the
    /// gap since the last message-woken one, never past `deadline`).
    ///
    /// # Errors
    /// [`Error::Closed`] when the client closes meanwhile.
    ///
    /// # Cancel safety
    /// A sleep only; safe to drop.
    pub(crate) async fn pace(
        &mut self,
        woken: &Woken,
        deadline: Option<Instant>,
        closing: &CancellationToken,
    ) -> Result<()> {
        if !matches!(woken, Woken::Message(_)) {
            self.last = None;
            return Ok(());
        }
        if let Some(previous) = self.last {
            let mut due = previous + MIN_ATTEMPT_GAP;
            if let Some(deadline) = deadline {
                due = due.min(deadline);
            }
            tokio::select! {
                () = tokio::time::sleep_until(due) => {}
                () = closing.cancelled() => return Err(Error::Closed),
            }
        }
        self.last = Some(Instant::now());
        Ok(())
    }
}

/// Wait until granted, until `deadline`, or until the client shuts down.
/// The deadline bounds everything, the calls in flight and the subscription
/// included: when it passes, the wait is dropped where it is, and leaving
/// the queue (or undoing a grant that raced it) goes on in the background.
pub(super) async fn until(
    acquisition: &Arc<Acquisition>,
    deadline: Option<Instant>,
) -> Result<Option<ArmedHold>> {
    let core = Arc::clone(acquisition.shared.core());
    let closing = core.closing();
    // Undoes the wait if this future is dropped (cancelled, timed out, or
    // the client shut down): leaves the queue, and while attempts are
    // failing (the last one's outcome unknown) also releases a hold that
    // attempt may have taken.
    let failing = Arc::new(AtomicBool::new(false));
    let mut abandon = DisarmOnDrop::new(
        (Arc::clone(acquisition), Arc::clone(&failing)),
        |(acquisition, failing)| {
            if failing.load(Ordering::SeqCst) {
                acquisition.undo_unknown_outcome();
            } else {
                // Fair and native non-fair waiters queue (Redisson's
                // non-fair ones do not: their give-up is a no-op).
                leave_in_background(acquisition);
            }
        },
    );
    let mut waiter = Waiter::new(acquisition, failing);
    let outcome = {
        let waiting = async {
            let wait = waiter.run();
            match deadline {
                Some(deadline) => tokio::time::timeout_at(deadline, wait).await.ok(),
                None => Some(wait.await),
            }
        };
        tokio::select! {
            outcome = waiting => outcome,
            () = closing.cancelled() => return Err(Error::Closed),
        }
    };
    match outcome {
        Some(Ok(hold)) => {
            // Granted: the waiter left the queue by taking the lock.
            abandon.disarm();
            Ok(Some(hold))
        }
        Some(Err(err)) if err.is_connection() => {
            // Gave up after the retry budget: the last attempt may have
            // succeeded on the server.
            abandon.disarm();
            acquisition.undo_unknown_outcome();
            Err(err)
        }
        Some(Err(err)) => Err(err),
        None => {
            events::record(Event::WaitTimedOut {
                lock: acquisition.name(),
                owner: &acquisition.owner,
            });
            // Leave the queue: usually done within a round trip, but the
            // caller waits one response timeout at most; the rest goes on in
            // the background.
            abandon.disarm();
            match waiter.failing {
                Some(err) => {
                    acquisition.undo_unknown_outcome();
                    Err(err)
                }
                None => {
                    let leaving = leave_in_background(acquisition);
                    let limit = core.config().response_timeout;
                    let _ = tokio::time::timeout(limit, leaving).await;
                    Ok(None)
                }
            }
        }
    }
}

/// Leave the queue from a background task (it goes on whatever happens to
/// the caller).
fn leave_in_background(acquisition: &Arc<Acquisition>) -> tokio::task::JoinHandle<()> {
    let acquisition = Arc::clone(acquisition);
    let core = Arc::clone(acquisition.shared.core());
    core.spawn_cleanup(async move {
        let shared = &acquisition.shared;
        shared
            .give_up(&acquisition.owner, acquisition.wait, &acquisition.nonce)
            .await;
    })
}

/// A point on the server's clock and the local instant just before the
/// script that read it was sent: the script ran at or after `sent_at`.
/// Server times in later messages map to local instants no earlier than
/// `sent_at + (t - server_ms)`, with no client clock involved.
#[derive(Debug, Clone, Copy)]
struct Anchor {
    server_ms: i64,
    sent_at: Instant,
}

impl Anchor {
    /// The earliest local instant at which `grant` may have been written.
    fn granted_at(&self, grant: &Grant) -> Option<Instant> {
        let after_anchor = u64::try_from(grant.granted_at_ms.checked_sub(self.server_ms)?).ok()?;
        self.sent_at
            .checked_add(Duration::from_millis(after_anchor))
    }

    /// Whether `grant` may have been written before the anchoring call ran.
    /// That call queued this waiter instead of claiming the grant, so such a
    /// grant was already gone when it ran (force-unlocked, say), however
    /// authentic and long-lived its message: acting on it would leave the
    /// waiter's new place in line behind, to be handed the lock later with
    /// nobody to take it. Same millisecond: not known to be later.
    fn predates(&self, grant: &Grant) -> bool {
        grant.granted_at_ms <= self.server_ms
    }

    /// The earliest local instant at which `grant` may have expired on the
    /// server (`None` when it had before the anchoring call ran).
    fn grant_expiry(&self, grant: &Grant) -> Option<Instant> {
        let ends_at = grant
            .granted_at_ms
            .checked_add(i64::try_from(grant.expire_ms).ok()?)?;
        let after_anchor = u64::try_from(ends_at.checked_sub(self.server_ms)?).ok()?;
        self.sent_at
            .checked_add(Duration::from_millis(after_anchor))
    }
}

/// What to do after a reply.
enum Next {
    /// The lock is ours.
    Granted(ArmedHold),
    /// Attempt again now (after a backoff already slept).
    Again,
    /// Wait for a wake-up at most this long from when the attempt was sent.
    Pause(Duration),
}

/// One waiter's state between attempts.
struct Waiter<'a> {
    acquisition: &'a Arc<Acquisition>,
    subscription: Option<Subscription>,
    /// A lost wake-up costs at most this long, under every protocol. Also
    /// at most half this waiter's lease: a grant lasts min(lease, waiter
    /// ttl) until claimed, and a live waiter whose grant message was lost
    /// must claim it by its next call, before the grant expires.
    poll: Duration,
    /// The last connection error, while attempts keep failing: a wait that
    /// runs out then reports it instead of a plain "not acquired".
    failing: Option<Error>,
    /// Set while `failing` is: what a drop of the wait must undo.
    failing_flag: Arc<AtomicBool>,
    failing_since: Option<Instant>,
    backoff: Backoff,
    idle_poll: Backoff,
    /// The server clock of the last queued reply, to date grant messages.
    anchor: Option<Anchor>,
    /// When the last attempt woken by a plain message (not a grant) began.
    message_woken_at: Option<Instant>,
    /// When the last wake-up message (any) arrived, until a wait ends
    /// without one: a grant after it is a handoff.
    woken_at: Option<Instant>,
}

impl<'a> Waiter<'a> {
    fn new(acquisition: &'a Arc<Acquisition>, failing_flag: Arc<AtomicBool>) -> Self {
        let poll = acquisition
            .shared
            .protocol()
            .max_pause()
            .min(acquisition.lease.duration() / 2)
            .max(Duration::from_millis(1));
        Self {
            acquisition,
            subscription: None,
            poll,
            failing: None,
            failing_flag,
            failing_since: None,
            backoff: Backoff::commands(),
            idle_poll: Backoff::idle_poll(),
            anchor: None,
            message_woken_at: None,
            woken_at: None,
        }
    }

    async fn run(&mut self) -> Result<ArmedHold> {
        let shared = &self.acquisition.shared;
        // A lock that made the last acquisition wait probably makes this
        // one wait too: subscribe first. Once the server confirmed the
        // subscription, every grant or wake-up published after the first
        // attempt reaches this waiter, so no re-check is needed after it
        // queues (one script call less per contended acquisition).
        let mut recheck = true;
        if shared.was_contended() {
            self.subscribe().await;
            recheck = !self.subscription.as_ref().is_some_and(|s| s.confirmed());
        }
        let mut first = true;
        loop {
            if let Some(subscription) = self.subscription.as_mut() {
                subscription.mark_seen();
            }
            let mark = shared.core().wakeups().mark();
            let sent_at = Instant::now();
            let reply = self.acquisition.send(true).await;
            let next = match self.on_reply(reply, sent_at).await? {
                // A force-unlock may have overtaken the grant: confirmed first.
                Next::Granted(hold) => match self.acquisition.confirm_unrevoked(hold, mark).await {
                    Some(hold) => Next::Granted(hold),
                    None => Next::Again,
                },
                next => next,
            };
            match &next {
                Next::Granted(_) if first => shared.set_contended(false),
                Next::Pause(_) => shared.set_contended(true),
                _ => {}
            }
            first = false;
            let pause = match next {
                Next::Granted(hold) => return Ok(hold),
                Next::Again => continue,
                Next::Pause(pause) => pause,
            };
            if self.subscription.is_none() {
                // Subscribed after queueing: a message published in
                // between was missed, so check again at once.
                self.subscribe().await;
                recheck = false;
                continue;
            }
            if recheck {
                recheck = false;
                continue;
            }
            // The pause runs from when the attempt was sent, so refreshes
            // reach the server every `poll` however long replies take.
            if let Some(hold) = self.pause_until(sent_at + pause).await {
                return Ok(hold);
            }
        }
    }

    /// Step 1: what a reply means.
    async fn on_reply(&mut self, reply: Result<Acquire>, sent_at: Instant) -> Result<Next> {
        let acquisition = self.acquisition;
        let pause = match reply {
            Ok(Acquire::Acquired { token, key_ttl }) => {
                self.note_woken_grant();
                return Ok(Next::Granted(acquisition.granted(
                    sent_at,
                    token,
                    HoldKind::Fresh,
                    key_ttl,
                )));
            }
            Ok(Acquire::Reentered { token, key_ttl, .. }) => {
                self.note_woken_grant();
                return Ok(Next::Granted(acquisition.granted(
                    sent_at,
                    token,
                    HoldKind::Reentry,
                    key_ttl,
                )));
            }
            Ok(Acquire::Queued {
                ttl,
                position,
                server_ms,
            }) => {
                self.failing = None;
                self.failing_flag.store(false, Ordering::SeqCst);
                self.failing_since = None;
                self.backoff.reset();
                self.anchor = server_ms.map(|server_ms| Anchor { server_ms, sent_at });
                acquisition.progress.queued(position);
                if position.is_some() {
                    events::record(Event::Queued {
                        lock: acquisition.name(),
                        owner: &acquisition.owner,
                        position,
                    });
                }
                if ttl.is_zero() {
                    // Free but not our turn: the head is about to take it,
                    // or is dead and will be skipped. Poll, backing off.
                    self.idle_poll.next_delay()
                } else {
                    self.idle_poll.reset();
                    ttl
                }
            }
            Ok(Acquire::Busy) => {
                acquisition.progress.queued(None);
                Duration::from_millis(100)
            }
            Err(err) if err.is_connection() => {
                let since = *self.failing_since.get_or_insert(sent_at);
                let retry = acquisition.shared.core().retry();
                let giving_up = !retry.may_retry(since, &self.backoff);
                events::record(Event::AttemptFailed {
                    lock: acquisition.name(),
                    owner: &acquisition.owner,
                    error: &err,
                    giving_up,
                });
                if giving_up {
                    return Err(err);
                }
                self.failing = Some(err);
                self.failing_flag.store(true, Ordering::SeqCst);
                tokio::time::sleep(self.backoff.next_delay()).await;
                return Ok(Next::Again);
            }
            Err(err) => return Err(err),
        };
        Ok(Next::Pause(pause.min(self.poll)))
    }

    /// A grant answered an attempt that a wake-up message started: a
    /// handoff, `latency` since the attempt began.
    fn note_woken_grant(&self) {
        if let Some(woken_at) = self.woken_at {
            self.acquisition
                .progress
                .handed_off(Handoff::Woken, woken_at.elapsed());
        }
    }

    /// Step 2 (once, after the first reply that queued): subscribe to the
    /// wake-up channel, bounded by the response timeout.
    async fn subscribe(&mut self) {
        let shared = &self.acquisition.shared;
        let channel = shared
            .protocol()
            .wake_channel(self.acquisition.owner.as_str());
        let core = shared.core();
        let limit = core.config().response_timeout;
        self.subscription = Some(core.wakeups().subscribe(&channel, limit).await);
    }

    /// Step 3: wait for a wake-up until `until`. A grant message that proves
    /// it was written for this acquisition (native direct handoff) makes it
    /// the holder with no further call, unless it may be half over (read
    /// late: this process was paused, say, or pub/sub lagged); then the
    /// next attempt confirms (and claims) it instead, as it does for a grant
    /// written before the last attempt ran (that attempt queued this waiter
    /// again: the grant was gone by then). Forged or stale messages are
    /// only wake-ups.
    async fn pause_until(&mut self, until: Instant) -> Option<ArmedHold> {
        let subscription = self.subscription.as_mut()?;
        let pause = until.saturating_duration_since(Instant::now());
        let Woken::Message(mut payload) = subscription.wait(pause).await else {
            self.message_woken_at = None;
            self.woken_at = None;
            return None;
        };
        self.woken_at = Some(Instant::now());
        let acquisition = self.acquisition;
        let protocol = acquisition.shared.protocol();
        loop {
            if let Some(grant) = protocol.verify_grant(&payload, &acquisition.grant_key) {
                let half = Duration::from_millis(grant.expire_ms / 2);
                // Only a grant written after the last attempt ran (which
                // queued this waiter): an older one is a wake-up, and the
                // next attempt claims it if it is still this acquisition's.
                let expiry = self
                    .anchor
                    .filter(|anchor| !anchor.predates(&grant))
                    .and_then(|anchor| anchor.grant_expiry(&grant));
                match expiry {
                    Some(expires) if expires.saturating_duration_since(Instant::now()) > half => {
                        // From the grant on the server's clock (mapped no
                        // later than it happened) to now: an upper bound.
                        if let Some(granted) = self.anchor.and_then(|a| a.granted_at(&grant)) {
                            acquisition
                                .progress
                                .handed_off(Handoff::Direct, granted.elapsed());
                        }
                        let hold = acquisition.handed_over(grant.token, expires);
                        // A revocation routed after the grant wins over it.
                        return acquisition
                            .confirm_unrevoked(hold, subscription.routed())
                            .await;
                    }
                    _ => events::record(Event::LateGrant {
                        lock: acquisition.name(),
                        owner: &acquisition.owner,
                    }),
                }
                return None;
            }
            // Any other message is only a wake-up, and anyone can publish
            // one: the first goes straight to an attempt, but back-to-back
            // ones (a flood) make a waiter call at most once per
            // MIN_ATTEMPT_GAP, not once per round trip. Messages that come
            // meanwhile are still read: a grant (a non-fair waiter woken
            // and overtaken, then handed the lock as it starved) is taken
            // at once instead of after the gap.
            if let Some(previous) = self.message_woken_at {
                let due = previous + MIN_ATTEMPT_GAP;
                let left = due.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    match subscription.wait(left).await {
                        Woken::Message(next) => {
                            payload = next;
                            continue;
                        }
                        // Messages may have been missed: check now.
                        Woken::Reconnected => {}
                        Woken::Timeout => {}
                    }
                }
            }
            self.message_woken_at = Some(Instant::now());
            return None;
        }
    }
}
