//! The count-down latch's combination round (`history::combo::LATCH`): a
//! latch of a fresh name set to 1 to 3, 1 to 8 waiters of this worker
//! waiting on it, then count-downs a few ms apart, under the run's faults.
//! Judged by the answers: no wait may return before the last count-down
//! was sent, and once that count-down answered 0 every waiter must return
//! within [`BLOCKED_AFTER`]. A count-down whose answer was lost (a
//! connection error) leaves the round unjudged, never a finding.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fairlock::{Error, Protocol};

use crate::Failure;
use crate::history::{Event, combo};

use super::combos::Round;

/// How long after the count-down that answered 0 a waiter may still be
/// waiting: the retry budget of a read through faults (10 s) twice, plus
/// the re-check interval (2 s by default), with room for a paused server.
const BLOCKED_AFTER: Duration = Duration::from_secs(30);

/// What one waiter saw.
enum Seen {
    /// Returned opened, at this instant, after (`true`) the last count-down
    /// was about to be sent.
    Opened(Instant, bool),
    /// The wait ran out.
    TimedOut,
    /// An error: a connection one (faults) or another.
    Failed(Error),
}

impl Round<'_> {
    /// The latch round (see the module docs).
    pub(super) async fn latch(&mut self) -> Result<Vec<Event>, Failure> {
        let name = format!("{}-latch", self.fresh_name);
        // One target for every round: the findings group by their answer.
        let answer = |op: &str, answer: String, ok: bool| Event::Answer {
            combo: combo::LATCH.to_owned(),
            target: "a fresh latch".to_owned(),
            op: op.to_owned(),
            answer,
            ok,
            window: None,
        };
        let latch = self.client.count_down_latch(&name)?;
        let count = 1 + self.rng.below(3);
        match latch.try_set_count(count).await {
            Ok(true) => {}
            Ok(false) => {
                return Ok(vec![answer(
                    "try_set_count",
                    "not set (a fresh name)".into(),
                    false,
                )]);
            }
            Err(e) if e.is_connection() => return Ok(Vec::new()),
            Err(e) => return Ok(vec![answer("try_set_count", e.to_string(), false)]),
        }
        let last_sent = Arc::new(AtomicBool::new(false));
        let waiters: Vec<_> = (0..1 + self.rng.below(8))
            .map(|_| {
                let (latch, last_sent) = (latch.clone(), Arc::clone(&last_sent));
                tokio::spawn(async move {
                    match latch.wait_for(BLOCKED_AFTER * 2).await {
                        Ok(true) => Seen::Opened(Instant::now(), last_sent.load(Ordering::SeqCst)),
                        Ok(false) => Seen::TimedOut,
                        Err(e) => Seen::Failed(e),
                    }
                })
            })
            .collect();
        // Judged only when every count-down answered: one whose answer was
        // lost may have counted.
        let mut judged = true;
        let mut opened_at = None;
        for i in 0..count {
            tokio::time::sleep(Duration::from_millis(self.rng.below(20))).await;
            if i + 1 == count {
                last_sent.store(true, Ordering::SeqCst);
            }
            let down = match self.protocol {
                Protocol::Native => latch.count_down_as(&format!("party-{i}")).await,
                _ => latch.count_down().await,
            };
            match down {
                Ok(0) if i + 1 == count => opened_at = Some(Instant::now()),
                Ok(left) if left == count - 1 - i => {}
                Ok(left) => {
                    let _ = latch.delete().await;
                    return Ok(vec![answer(
                        "count_down",
                        format!("{left} left after {} of {count}", i + 1),
                        false,
                    )]);
                }
                Err(e) if e.is_connection() => {
                    judged = false;
                    last_sent.store(true, Ordering::SeqCst);
                    break;
                }
                Err(e) => return Ok(vec![answer("count_down", e.to_string(), false)]),
            }
        }
        if !judged {
            // Open it for the waiters still there, and let them go.
            let _ = latch.delete().await;
        }
        // Every waiter's finding; the round records the first (one answer
        // per round, as the tally counts them).
        let mut findings: Vec<String> = Vec::new();
        let mut opened = 0;
        for waiter in waiters {
            let seen = waiter
                .await
                .unwrap_or_else(|e| Seen::Failed(Error::Protocol(e.to_string())));
            match seen {
                Seen::Opened(_, false) => {
                    findings.push("returned before the count reached 0".into());
                }
                Seen::Opened(at, true) => {
                    opened += 1;
                    let late = opened_at
                        .filter(|_| judged)
                        .map(|zero| at.saturating_duration_since(zero));
                    if late.is_some_and(|late| late > BLOCKED_AFTER) {
                        findings.push(format!("returned more than {BLOCKED_AFTER:?} after 0"));
                    }
                }
                Seen::TimedOut if judged => findings.push("stayed blocked after 0".into()),
                Seen::TimedOut => {}
                Seen::Failed(e) if e.is_connection() || matches!(e, Error::Closed) => {}
                Seen::Failed(e) => findings.push(e.to_string()),
            }
        }
        Ok(match findings.into_iter().next() {
            Some(first) => vec![answer("wait", first, false)],
            None if judged => vec![answer("wait", format!("{opened} waiters opened"), true)],
            None => Vec::new(),
        })
    }
}
