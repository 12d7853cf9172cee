//! Acquisitions that a test needs acknowledged by the replicas
//! ([`min_replicas`](fairlock::ClientConfig::min_replicas)) while they are
//! up.
//!
//! A test of `min_replicas` usually has two kinds of phase: with the
//! replica running, where it needs an acknowledged acquisition to go on
//! (or to check that the replica has the lock), and with the replica
//! stopped or paused, whose refusal is the claim under test. It keeps the
//! `WAIT` timeout short so that the refusals come soon. But on a loaded
//! machine a healthy replica (a separate process, just restarted, or
//! simply starved of CPU) can miss a short window, and an acquisition the
//! test relied on fails with [`Error::ReplicasNotSynced`] for no fault of
//! the library's. The library undoes such an acquisition (other tests check
//! that), so trying again is safe: these helpers do, a bounded number of
//! times, and report each retry on stderr. A replica that never
//! acknowledges still fails the test, with the last error.

use std::time::{Duration, Instant};

use fairlock::{Error, LockGuard, LockHandle};

/// At most this many tries in all.
const ATTEMPTS: u32 = 20;
/// And none started after this long.
const WITHIN: Duration = Duration::from_secs(30);

/// `lock.lock()`, tried again while the replicas did not acknowledge it
/// (`Error::ReplicasNotSynced`), up to 20 tries within 30 s. Any other
/// error, or the last `ReplicasNotSynced`, is returned as it is.
pub async fn lock_acknowledged(lock: &LockHandle) -> fairlock::Result<LockGuard> {
    let started = Instant::now();
    let mut attempt = 1;
    loop {
        match lock.lock().await {
            Err(err @ Error::ReplicasNotSynced { .. }) if more(attempt, started) => {
                eprintln!("lock_acknowledged: try {attempt} not acknowledged, trying again: {err}");
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

/// An acknowledged acquisition of `lock`, `while_held` (checks of what the
/// replicas have, say), then an acknowledged release: the whole pair tried
/// again while either step was not acknowledged
/// (`Error::ReplicasNotSynced`), up to 20 tries within 30 s. `while_held`
/// runs after every acknowledged acquisition, so its checks hold for each.
/// Returns once a pair was acknowledged throughout; any other error, or the
/// last `ReplicasNotSynced`, is returned as it is.
pub async fn hold_acknowledged(
    lock: &LockHandle,
    mut while_held: impl FnMut(),
) -> fairlock::Result<()> {
    let started = Instant::now();
    let mut attempt = 1;
    loop {
        let outcome = match lock.lock().await {
            Ok(guard) => {
                while_held();
                guard.unlock().await
            }
            Err(err) => Err(err),
        };
        match outcome {
            Err(err @ Error::ReplicasNotSynced { .. }) if more(attempt, started) => {
                eprintln!("hold_acknowledged: try {attempt} not acknowledged, trying again: {err}");
                attempt += 1;
            }
            outcome => return outcome,
        }
    }
}

fn more(attempt: u32, started: Instant) -> bool {
    attempt < ATTEMPTS && started.elapsed() < WITHIN
}
