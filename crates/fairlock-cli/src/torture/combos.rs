//! The feature combinations a worker round may draw besides its ordinary
//! rounds (named in `history::combo`): where two features meet, holes hide
//! that single-feature tests miss. Each round here returns the events it
//! recorded; holds keep their combination, so the checker counts them.
//!
//! - re-entry x lease kinds: a hold under the watchdog re-entered with an
//!   explicit lease, an explicit one re-entered under the watchdog or with
//!   another explicit lease, shorter (it runs out within the hold) or
//!   longer; released in either order;
//! - one owner, several tasks: a hold of a shared owner, then tasks
//!   re-entering it at once, each releasing its own hold; afterwards the
//!   owner must hold nothing;
//! - force-unlock at a handoff: sent right after a release, while the lock
//!   passes to the next waiter;
//! - names probing other keys: under redisson a lock's key is its name, so
//!   a name that spells another lock's key (`fairlock:{x}:lock`,
//!   `redisson_lock_queue:{x}`) must be refused with
//!   [`fairlock::Error::InvalidName`];
//! - application data under a lock's key (a hash, a string): acquire,
//!   force-unlock and inspect must refuse it with
//!   [`fairlock::Error::NotALock`] or [`fairlock::Error::WrongType`], and
//!   the data must be left as it was, byte for byte;
//! - stale x give-up, force-release and admission: a native semaphore's
//!   meta outliving every hold, then a give-up or a force-release that
//!   admits the line's head: its weight must be kept in meta, and its
//!   permits must come back.
//!
//! A call that answers otherwise is recorded as a finding
//! ([`Event::Answer`] with `ok` false), never dropped.

use std::time::Duration;

use fairlock::{
    AcquireOptions, Error, LockClient, LockGuard, LockHandle, LockKind, Owner, PermitLease,
    Protocol,
};
use redis::aio::ConnectionManager;

use crate::Failure;
use crate::history::{Event, Hold, Window, combo};

use super::workload::EventOut;
use super::{Rng, server_time_us};

/// What a combination round works with: one worker task's.
pub(super) struct Round<'a> {
    pub(super) client: &'a LockClient,
    /// The server's clock (standalone: the server itself, not the proxy).
    pub(super) conn: &'a mut ConnectionManager,
    pub(super) rng: &'a mut Rng,
    pub(super) fair_locks: &'a [String],
    pub(super) protocol: Protocol,
    /// The owner this task shares with the tasks it starts.
    pub(super) shared: &'a Owner,
    /// A name no other round uses, for application data.
    pub(super) fresh_name: String,
    /// The worker's history, for events that must be written before a
    /// call (the round's own events are written when it ends).
    pub(super) out: &'a EventOut,
}

impl Round<'_> {
    /// Run the round of `which`.
    pub(super) async fn run(&mut self, which: &str) -> Result<Vec<Event>, Failure> {
        match which {
            combo::REENTRY_LEASE => self.reentry_lease().await,
            combo::SHARED_OWNER => self.shared_owner().await,
            combo::FORCE_UNLOCK_AT_HANDOFF => self.force_unlock_at_handoff().await,
            combo::NAME_PROBE => Ok(self.name_probe().await),
            combo::FOREIGN_DATA => self.foreign_data().await,
            combo::SEMAPHORE_STALE_META => self.semaphore_stale_meta().await,
            combo::LATCH => self.latch().await,
            _ => Ok(Vec::new()),
        }
    }

    async fn now(&mut self) -> Result<u64, Failure> {
        server_time_us(self.conn).await
    }

    /// A lock the ordinary rounds take: a fair one (7 in 10) or the plain one.
    fn pick(&mut self) -> Result<(String, LockHandle), Failure> {
        let (name, kind) = if self.rng.below(10) < 7 && !self.fair_locks.is_empty() {
            let i = self.rng.below(self.fair_locks.len() as u64) as usize;
            (self.fair_locks[i].clone(), LockKind::Fair)
        } else {
            (super::PLAIN.to_owned(), LockKind::NonFair)
        };
        let handle = self.client.handle(&name, kind)?;
        Ok((name, handle))
    }

    fn kind(&mut self) -> LockKind {
        if self.rng.below(2) == 0 {
            LockKind::Fair
        } else {
            LockKind::NonFair
        }
    }

    /// An explicit lease: shorter than a hold (it runs out within it), a
    /// few holds long, or longer than the client's lease.
    fn explicit_lease(&mut self) -> Duration {
        let client = self.client.config().get_lease();
        match self.rng.below(3) {
            0 => Duration::from_millis(3 + self.rng.below(10)),
            1 => Duration::from_millis(20 + self.rng.below(180)),
            _ => client * 2 + Duration::from_millis(self.rng.below(1000)),
        }
    }

    fn sleep_ms(&mut self, below: u64) -> tokio::time::Sleep {
        tokio::time::sleep(Duration::from_millis(self.rng.below(below)))
    }

    /// A hold of `guard` from `start` to now, and the guard's word on it.
    async fn hold(
        &mut self,
        lock: &str,
        guard: &LockGuard,
        requested: u64,
        start: u64,
        which: &str,
        reentry: bool,
    ) -> Result<Event, Failure> {
        let end = self.now().await?;
        Ok(Event::Hold(Hold {
            lock: lock.to_owned(),
            owner: guard.owner().to_string(),
            token: guard.token(),
            requested,
            start,
            end,
            valid: guard.is_held(),
            combo: which.to_owned(),
            reentry,
            lease_ms: None,
            mode: None,
            permits: None,
        }))
    }

    /// Re-entry x lease kinds: the hold under one lease kind, the re-entry
    /// under the other (or another explicit length), released in either
    /// order. Every sleep together stays below the workers' longest hold.
    async fn reentry_lease(&mut self) -> Result<Vec<Event>, Failure> {
        let (name, handle) = self.pick()?;
        let watchdog_first = self.rng.below(2) == 0;
        let mut outer_options =
            AcquireOptions::new().wait(Duration::from_millis(50 + self.rng.below(400)));
        let outer_lease = (!watchdog_first).then(|| self.explicit_lease());
        if let Some(lease) = outer_lease {
            outer_options = outer_options.lease(lease);
        }
        let requested = self.now().await?;
        let outer = match handle.acquire(outer_options).await {
            Ok(Some(guard)) => guard,
            Ok(None) => return Ok(vec![no_grant(&name, "timeout")]),
            Err(_) => return Ok(vec![no_grant(&name, "error")]),
        };
        let start = self.now().await?;
        self.sleep_ms(4).await;
        let mut inner_options = AcquireOptions::new()
            .wait(Duration::ZERO)
            .owner(outer.owner().clone());
        if watchdog_first || self.rng.below(2) == 0 {
            inner_options = inner_options.lease(self.explicit_lease());
        }
        let inner_requested = self.now().await?;
        let inner = handle.acquire(inner_options).await.ok().flatten();
        let mut events = Vec::new();
        let Some(inner) = inner else {
            self.sleep_ms(4).await;
            events.push(
                self.hold(&name, &outer, requested, start, combo::REENTRY_LEASE, false)
                    .await?,
            );
            let _ = outer.unlock().await;
            return Ok(with_lease(events, start, outer_lease));
        };
        let inner_start = self.now().await?;
        // A fresh grant (the hold had run out) is no re-entry: it has a
        // token of its own.
        let reentry = inner.token() == outer.token();
        self.sleep_ms(5).await;
        if self.rng.below(3) == 0 {
            events.push(
                self.hold(&name, &outer, requested, start, combo::REENTRY_LEASE, false)
                    .await?,
            );
            let _ = outer.unlock().await;
            self.sleep_ms(4).await;
            events.push(
                self.hold(
                    &name,
                    &inner,
                    inner_requested,
                    inner_start,
                    combo::REENTRY_LEASE,
                    reentry,
                )
                .await?,
            );
            let _ = inner.unlock().await;
        } else {
            events.push(
                self.hold(
                    &name,
                    &inner,
                    inner_requested,
                    inner_start,
                    combo::REENTRY_LEASE,
                    reentry,
                )
                .await?,
            );
            let _ = inner.unlock().await;
            self.sleep_ms(4).await;
            events.push(
                self.hold(&name, &outer, requested, start, combo::REENTRY_LEASE, false)
                    .await?,
            );
            let _ = outer.unlock().await;
        }
        Ok(with_lease(events, start, outer_lease))
    }

    /// One owner, several tasks: a hold of the shared owner, then 2 to 4
    /// tasks re-entering it at once (one attempt each, never queueing: one
    /// owner must not wait in two places), each releasing its own hold.
    /// Once every guard released without an error, the owner must hold
    /// nothing (a count left behind is a finding).
    async fn shared_owner(&mut self) -> Result<Vec<Event>, Failure> {
        let (name, handle) = self.pick()?;
        let options = AcquireOptions::new()
            .owner(self.shared.clone())
            .wait(Duration::from_millis(50 + self.rng.below(400)));
        let requested = self.now().await?;
        let leader = match handle.acquire(options).await {
            Ok(Some(guard)) => guard,
            Ok(None) => return Ok(vec![no_grant(&name, "timeout")]),
            Err(_) => return Ok(vec![no_grant(&name, "error")]),
        };
        let start = self.now().await?;
        let tasks: Vec<_> = (0..2 + self.rng.below(3))
            .map(|_| {
                let handle = handle.clone();
                let owner = self.shared.clone();
                let mut conn = self.conn.clone();
                let name = name.clone();
                let hold_for = Duration::from_millis(self.rng.below(6));
                tokio::spawn(async move {
                    let requested = server_time_us(&mut conn).await?;
                    let options = AcquireOptions::new().owner(owner).wait(Duration::ZERO);
                    let Ok(Some(guard)) = handle.acquire(options).await else {
                        return Ok::<_, Failure>((None, true));
                    };
                    let start = server_time_us(&mut conn).await?;
                    tokio::time::sleep(hold_for).await;
                    let end = server_time_us(&mut conn).await?;
                    let hold = Hold {
                        lock: name,
                        owner: guard.owner().to_string(),
                        token: guard.token(),
                        requested,
                        start,
                        end,
                        valid: guard.is_held(),
                        combo: combo::SHARED_OWNER.to_owned(),
                        reentry: true,
                        lease_ms: None,
                        mode: None,
                        permits: None,
                    };
                    let released = guard.unlock().await.is_ok();
                    Ok((Some(Event::Hold(hold)), released))
                })
            })
            .collect();
        let mut events = Vec::new();
        let mut all_released = true;
        for task in tasks {
            match task.await {
                Ok(Ok((hold, released))) => {
                    events.extend(hold);
                    all_released &= released;
                }
                _ => all_released = false,
            }
        }
        self.sleep_ms(3).await;
        events.push(
            self.hold(&name, &leader, requested, start, combo::SHARED_OWNER, false)
                .await?,
        );
        all_released &= leader.unlock().await.is_ok();
        if all_released {
            match handle.hold_count(self.shared).await {
                Ok(0) | Err(_) => {}
                // Redisson's hash holds the owner's count only: a release of
                // another task's hold that lands between a lost reply and its
                // undo hides the attempt's hold, one too many (documented),
                // which must end with the lease now that nothing renews it.
                Ok(1)
                    if self.protocol == Protocol::Redisson
                        && self.ends_with_the_lease(&handle).await => {}
                Ok(count) => events.push(Event::Answer {
                    combo: combo::SHARED_OWNER.to_owned(),
                    target: name.clone(),
                    op: "hold_count after every guard was released".to_owned(),
                    answer: count.to_string(),
                    ok: false,
                    window: None,
                }),
            }
        }
        Ok(events)
    }

    /// Whether the shared owner's hold count on `handle` is 0 once the
    /// client's lease has passed (plus a second for a loaded machine).
    async fn ends_with_the_lease(&self, handle: &LockHandle) -> bool {
        let lease = self.client.config().get_lease();
        tokio::time::sleep(lease + Duration::from_secs(1)).await;
        matches!(handle.hold_count(self.shared).await, Ok(0))
    }

    /// A force-unlock right after a release: the lock is on its way to
    /// the next waiter (native hands it over within the release).
    async fn force_unlock_at_handoff(&mut self) -> Result<Vec<Event>, Failure> {
        let (name, handle) = self.pick()?;
        let wait = Duration::from_millis(50 + self.rng.below(400));
        let requested = self.now().await?;
        let guard = match handle.acquire(AcquireOptions::new().wait(wait)).await {
            Ok(Some(guard)) => guard,
            Ok(None) => return Ok(vec![no_grant(&name, "timeout")]),
            Err(_) => return Ok(vec![no_grant(&name, "error")]),
        };
        let start = self.now().await?;
        self.sleep_ms(super::MAX_HOLD_MS).await;
        let hold = self
            .hold(
                &name,
                &guard,
                requested,
                start,
                combo::FORCE_UNLOCK_AT_HANDOFF,
                false,
            )
            .await?;
        let Event::Hold(Hold { end: from, .. }) = hold else {
            unreachable!("hold() returns a hold")
        };
        let _ = guard.unlock().await;
        // Written first: a kill before the reply is recorded must not hide
        // the revocation from the checker.
        self.out
            .write(&Event::ForceUnlockSent {
                lock: name.clone(),
                from,
            })
            .await;
        // An error: it may have run (its reply lost), and revoked a hold.
        let released = handle.force_unlock().await.unwrap_or(true);
        if !released {
            // It revoked nothing: recorded as such with no further call
            // that could fail (a sent line alone counts as a revocation).
            return Ok(vec![
                hold,
                Event::ForceUnlock {
                    lock: name,
                    from,
                    at: from,
                    released,
                },
            ]);
        }
        let at = self.now().await?;
        Ok(vec![
            hold,
            Event::ForceUnlock {
                lock: name,
                from,
                at,
                released,
            },
        ])
    }

    /// A name that spells another lock's key. Under redisson a lock's key
    /// is its name: such a name must be refused, or its scripts would
    /// write into that lock's queue (it is not acquired here, whatever the
    /// answer, so as not to break the run). Under native every key of a
    /// name lives under `fairlock:{NAME}:`, apart from every other lock's:
    /// the name may be refused or served as a lock of its own.
    async fn name_probe(&mut self) -> Vec<Event> {
        let target = match self.fair_locks.first() {
            Some(name) => name.clone(),
            None => super::FAIR.to_owned(),
        };
        let names = [
            format!("fairlock:{{{target}}}:lock"),
            format!("fairlock:{{{target}}}:line"),
            format!("redisson_lock_queue:{{{target}}}"),
            format!("redisson_lock_timeout:{{{target}}}"),
        ];
        let name = names[self.rng.below(names.len() as u64) as usize].clone();
        let kind = self.kind();
        let (answer, ok) = match self.client.handle(&name, kind) {
            Err(Error::InvalidName { .. }) => ("InvalidName".to_owned(), true),
            Err(e) => (format!("another error: {e}"), false),
            Ok(_) if self.protocol == Protocol::Native => ("accepted".to_owned(), true),
            Ok(_) => ("accepted".to_owned(), false),
        };
        vec![Event::Answer {
            combo: combo::NAME_PROBE.to_owned(),
            target: name,
            op: format!("{kind:?} handle"),
            answer,
            ok,
            window: None,
        }]
    }

    /// Application data under a lock's key: an application hash, or a
    /// string. Acquire, force-unlock and inspect must refuse it with a
    /// typed error; the data must be untouched (its DUMP and PTTL the same
    /// after as before).
    async fn foreign_data(&mut self) -> Result<Vec<Event>, Failure> {
        let name = self.fresh_name.clone();
        let key = match self.protocol {
            Protocol::Redisson => name.clone(),
            _ => format!("fairlock:{{{name}}}:lock"),
        };
        let hash = self.rng.below(2) == 0;
        let write = if hash {
            let mut cmd = redis::cmd("HSET");
            cmd.arg(&key)
                .arg("customer")
                .arg("ada")
                .arg("visits")
                .arg("3")
                .arg("note")
                .arg("not a lock");
            cmd
        } else {
            let mut cmd = redis::cmd("SET");
            cmd.arg(&key).arg("application value");
            cmd
        };
        command::<()>(self.conn, &write).await?;
        let before = snapshot(self.conn, &key).await?;
        let kind = self.kind();
        let handle = self.client.handle(&name, kind)?;
        let mut events = Vec::new();
        let mut answer = |op: &str, result: Result<String, Error>| {
            let (answer, ok) = match result {
                Err(e @ (Error::NotALock { .. } | Error::WrongType { .. })) => {
                    (variant(&e).to_owned(), true)
                }
                // An injected fault (a BUSY script, a cut connection)
                // answered instead: honest, and the data check below still
                // applies.
                Err(e) if e.is_connection() => (format!("{} (a fault)", variant(&e)), true),
                Err(e) => (format!("{}: {e}", variant(&e)), false),
                Ok(answer) => (answer, false),
            };
            events.push(Event::Answer {
                combo: combo::FOREIGN_DATA.to_owned(),
                target: format!(
                    "an application {} at a {kind:?} lock's key",
                    if hash { "hash" } else { "string" }
                ),
                op: op.to_owned(),
                answer,
                ok,
                window: None,
            });
        };
        let acquired = handle
            .acquire(AcquireOptions::new().wait(Duration::from_secs(2)))
            .await;
        let acquired = match acquired {
            Ok(Some(guard)) => {
                let _ = guard.unlock().await;
                Ok("granted".to_owned())
            }
            Ok(None) => Ok("waited and timed out (took it for a held lock)".to_owned()),
            Err(e) => Err(e),
        };
        answer("acquire", acquired);
        let forced = handle.force_unlock().await;
        answer(
            "force_unlock",
            forced.map(|released| format!("Ok({released})")),
        );
        let inspected = handle.inspect().await;
        answer(
            "inspect",
            inspected.map(|info| format!("a lock with {} holders", info.holders.len())),
        );
        let after = snapshot(self.conn, &key).await?;
        events.push(Event::DataCheck {
            key: key.clone(),
            intact: before == after,
        });
        command::<()>(self.conn, redis::cmd("DEL").arg(&key)).await?;
        Ok(events)
    }
}

/// Read a semaphore's weight record in meta and whether the hold key lives,
/// at one instant. KEYS[1] meta, KEYS[2] the hold key; ARGV[1] the field.
const RECORD_AND_HOLD: &str =
    "return {redis.call('hget', KEYS[1], ARGV[1]), redis.call('exists', KEYS[2])}";

impl Round<'_> {
    /// A native semaphore's meta outliving every hold, then a script that
    /// admits the head without an acquisition's own write of meta first
    /// (`combo::SEMAPHORE_STALE_META`).
    ///
    /// On a semaphore of 3 of its own (a fresh name: no other call cleans
    /// the stale meta up first): A takes the 3 permits on a short fixed
    /// lease and dies (its guard forgotten), so that its hold key and the
    /// holders set expire together while meta lives on; H asks for 2 and
    /// queues, and is then left unpolled (its own retry, due when A's lease
    /// ends, would write meta first); X asks for 1 behind it and gives up
    /// once A's lease ended, or an operator force-releases. Checked: while
    /// H's hold key lives, meta records its weight (read with the key at
    /// one instant); and once H released, or died and its lease ended, a
    /// request for its 2 permits beside a holder of 1 gets in (asked twice,
    /// so that a pause of this worker across the first wait is not taken
    /// for a lost permit). A call that fails (a fault), or a path that went
    /// otherwise (A's lease ran out before H queued), ends the round with
    /// what was judged so far.
    async fn semaphore_stale_meta(&mut self) -> Result<Vec<Event>, Failure> {
        let name = self.fresh_name.clone();
        let Ok(sem) = self.client.semaphore(&name, 3) else {
            return Ok(Vec::new());
        };
        let waiter_ttl = self.client.config().get_waiter_ttl();
        // Well within the waiter ttl: H, unpolled, must still be a live
        // waiter when it is admitted.
        let lease = (waiter_ttl / 8).clamp(Duration::from_millis(50), Duration::from_millis(150));
        let head_lease = lease * 2;
        let Ok(Some(dead)) = sem
            .acquire_with(3, Some(Duration::from_secs(1)), PermitLease::Fixed(lease))
            .await
        else {
            return Ok(Vec::new());
        };
        std::mem::forget(dead);
        let head = sem.acquire_with(
            2,
            Some(Duration::from_secs(5)),
            PermitLease::Fixed(head_lease),
        );
        let mut head = std::pin::pin!(head);
        let queue = format!("fairlock:{{{name}}}:sem:line");
        tokio::select! {
            outcome = &mut head => {
                // In at once: A's lease ran out first (a pause, a slow call).
                if let Ok(Some(permits)) = outcome {
                    let _ = permits.release().await;
                }
                return Ok(Vec::new());
            }
            queued = line_reaches(self.conn, &queue, 1) => {
                if !queued? {
                    return Ok(Vec::new());
                }
            }
        }
        let forced = self.rng.below(2) == 0;
        if forced {
            tokio::time::sleep(lease + Duration::from_millis(50)).await;
            if sem.force_release().await.is_err() {
                return Ok(Vec::new());
            }
        } else {
            let behind = sem.clone();
            let wait = lease + Duration::from_millis(50);
            let giving_up = tokio::spawn(async move { behind.try_acquire_for(1, wait).await });
            match giving_up.await {
                Ok(Ok(None)) => {}
                Ok(Ok(Some(permits))) => {
                    // In before H: H was no longer a live waiter.
                    let _ = permits.release().await;
                    return Ok(Vec::new());
                }
                _ => return Ok(Vec::new()),
            }
        }
        let how = if forced { "force-release" } else { "give-up" };
        let head = match tokio::time::timeout(Duration::from_secs(5), head).await {
            Ok(Ok(Some(permits))) => permits,
            _ => return Ok(Vec::new()),
        };
        let target =
            format!("native semaphore {name}: a request of 2 admitted on stale meta by a {how}");
        let id = head.ids().first().cloned().unwrap_or_default();
        let (recorded, lives): (Option<String>, i64) = command(
            self.conn,
            redis::cmd("EVAL")
                .arg(RECORD_AND_HOLD)
                .arg(2)
                .arg(format!("fairlock:{{{name}}}:sem:meta"))
                .arg(format!("fairlock:{{{name}}}:sem:hold:{id}"))
                .arg(format!("w:{id}")),
        )
        .await?;
        let mut events = Vec::new();
        if lives == 1 {
            let ok = recorded.as_deref() == Some("2");
            events.push(Event::Answer {
                combo: combo::SEMAPHORE_STALE_META.to_owned(),
                target: target.clone(),
                op: "meta's record of its weight while its hold key lives".to_owned(),
                answer: recorded.unwrap_or_else(|| "none".to_owned()),
                ok,
                window: None,
            });
        }
        let Ok(Some(beside)) = sem.try_acquire(1).await else {
            let _ = head.release().await;
            return Ok(events);
        };
        let from = server_time_us(self.conn).await?;
        let released = self.rng.below(2) == 0;
        if released {
            if head.release().await.is_err() {
                let _ = beside.release().await;
                return Ok(events);
            }
        } else {
            // H dies: its permits come back once its lease ended.
            std::mem::forget(head);
            tokio::time::sleep(head_lease + Duration::from_millis(100)).await;
        }
        let bound = Duration::from_secs(2) + head_lease;
        let mut again = None;
        for _ in 0..2 {
            match sem.try_acquire_for(2, bound).await {
                Ok(Some(permits)) => {
                    again = Some(permits);
                    break;
                }
                Ok(None) => {}
                Err(_) => {
                    let _ = beside.release().await;
                    return Ok(events);
                }
            }
        }
        let to = server_time_us(self.conn).await?;
        let answer = match &again {
            Some(_) => "granted".to_owned(),
            None => format!("not granted in 2 waits of {} ms", bound.as_millis()),
        };
        events.push(Event::Answer {
            combo: combo::SEMAPHORE_STALE_META.to_owned(),
            target,
            op: format!(
                "a request for the 2 permits it gave back ({}), beside a holder of 1",
                if released {
                    "released"
                } else {
                    "its lease ended"
                }
            ),
            answer,
            ok: again.is_some(),
            window: Some(Window {
                client: self.client.id().to_owned(),
                from,
                to,
            }),
        });
        if let Some(permits) = again {
            let _ = permits.release().await;
        }
        let _ = beside.release().await;
        Ok(events)
    }
}

/// Whether the line at `queue` (a sorted set) reaches `len` waiters within
/// 2 s.
async fn line_reaches(
    conn: &mut ConnectionManager,
    queue: &str,
    len: usize,
) -> Result<bool, Failure> {
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while std::time::Instant::now() < until {
        let n: usize = command(conn, redis::cmd("ZCARD").arg(queue)).await?;
        if n >= len {
            return Ok(true);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(false)
}

fn no_grant(lock: &str, outcome: &str) -> Event {
    Event::NoGrant {
        lock: lock.to_owned(),
        outcome: outcome.to_owned(),
    }
}

/// The variant's name, for the findings.
fn variant(error: &Error) -> &'static str {
    match error {
        Error::NotALock { .. } => "NotALock",
        Error::WrongType { .. } => "WrongType",
        Error::InvalidName { .. } => "InvalidName",
        Error::Protocol(_) => "Protocol",
        Error::Redis(_) => "Redis",
        Error::Connection { .. } | Error::Unavailable { .. } => "Connection",
        _ => "another error",
    }
}

/// A key's value and expiry, byte for byte: `DUMP` (the serialized value)
/// and `PTTL`.
async fn snapshot(
    conn: &mut ConnectionManager,
    key: &str,
) -> Result<(Option<Vec<u8>>, i64), Failure> {
    let dump = command(conn, redis::cmd("DUMP").arg(key)).await?;
    let pttl = command(conn, redis::cmd("PTTL").arg(key)).await?;
    Ok((dump, pttl))
}

/// `cmd`, retried for up to 10 s (the torture's own BUSY scripts refuse
/// calls for a while).
async fn command<T: redis::FromRedisValue>(
    conn: &mut ConnectionManager,
    cmd: &redis::Cmd,
) -> Result<T, Failure> {
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match cmd.query_async::<T>(conn).await {
            Ok(value) => return Ok(value),
            Err(e) if std::time::Instant::now() >= give_up => {
                return Err(Failure::new(
                    crate::exit::UNAVAILABLE,
                    format!("foreign data: {e}"),
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// `events` with the explicit lease of the acquisition that started at
/// `start` (the outer hold of a re-entry round) set on its hold.
fn with_lease(mut events: Vec<Event>, start: u64, lease: Option<Duration>) -> Vec<Event> {
    for event in &mut events {
        if let Event::Hold(hold) = event
            && hold.start == start
            && !hold.reentry
        {
            hold.lease_ms = lease.map(|l| l.as_millis() as u64);
        }
    }
    events
}
