//! The watchdog: one task per client renews every watchdog-leased lock the
//! client holds, in batches, every `renew_interval`.
//!
//! A renewal that finds the lock gone or owned by someone else, or renewals
//! that keep failing until the lease the server last confirmed has run out,
//! mark the lock lost: every guard of that hold sees `is_held() == false` and
//! its `lost()` future resolves.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::connection::Connection;
use crate::protocol::{self, Protocol, RENEW_BATCH};

/// What is known about one hold: lost for sure, and until when the lease
/// the server last confirmed lasts (a local estimate, measured from when the
/// confirming call was sent, so never later than the server's).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldStatus {
    pub(crate) lost: bool,
    pub(crate) expires: Instant,
}

impl HoldStatus {
    /// Held as far as this process can know: not lost and within the lease.
    pub(crate) fn is_held(&self) -> bool {
        !self.lost && Instant::now() < self.expires
    }
}

/// The lost-lock signal shared by the guards of one hold.
#[derive(Debug)]
pub(crate) struct HeldState {
    status: watch::Sender<HoldStatus>,
}

impl HeldState {
    pub(crate) fn new(expires: Instant) -> Arc<Self> {
        Arc::new(Self {
            status: watch::Sender::new(HoldStatus {
                lost: false,
                expires,
            }),
        })
    }

    pub(crate) fn mark_lost(&self) {
        self.status.send_modify(|status| status.lost = true);
    }

    /// A renewal confirmed the lease until `expires`.
    pub(crate) fn extend(&self, expires: Instant) {
        self.status.send_if_modified(|status| {
            let later = expires > status.expires;
            if later {
                status.expires = expires;
            }
            later
        });
    }

    pub(crate) fn status(&self) -> HoldStatus {
        *self.status.borrow()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<HoldStatus> {
        self.status.subscribe()
    }
}

type Key = (String, String);

struct Entry {
    name: String,
    holds: usize,
    state: Arc<HeldState>,
}

pub(crate) struct Watchdog {
    entries: Arc<Mutex<HashMap<Key, Entry>>>,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Updates are single inserts/removes; a poisoned map is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Watchdog {
    /// Start the renewal task on `runtime`; it ends when the watchdog is dropped.
    pub(crate) fn start(
        protocol: Protocol,
        conn: Connection,
        lease: Duration,
        interval: Duration,
        runtime: &tokio::runtime::Handle,
    ) -> Self {
        let entries = Arc::new(Mutex::new(HashMap::new()));
        runtime.spawn(run(
            Arc::downgrade(&entries),
            protocol,
            conn,
            lease,
            interval,
        ));
        Self { entries }
    }

    /// Start renewing `lock_key` for `owner` (or count one more hold of it).
    /// `expires`: when the lease the server granted runs out.
    pub(crate) fn register(
        &self,
        lock_key: &str,
        owner: &str,
        name: &str,
        expires: Instant,
    ) -> Arc<HeldState> {
        let mut entries = locked(&self.entries);
        let key = (lock_key.to_owned(), owner.to_owned());
        // A hold already known lost is not shared with a new acquisition.
        if entries.get(&key).is_some_and(|e| e.state.status().lost) {
            entries.remove(&key);
        }
        let entry = entries.entry(key).or_insert_with(|| Entry {
            name: name.to_owned(),
            holds: 0,
            state: HeldState::new(expires),
        });
        entry.holds += 1;
        Arc::clone(&entry.state)
    }

    /// One hold of `state` ends; renewal stops when none is left. A hold
    /// that was lost and replaced by a new acquisition of the same owner
    /// leaves the new one alone.
    pub(crate) fn unregister(&self, lock_key: &str, owner: &str, state: &Arc<HeldState>) {
        let mut entries = locked(&self.entries);
        let key = (lock_key.to_owned(), owner.to_owned());
        if let Some(entry) = entries
            .get_mut(&key)
            .filter(|e| Arc::ptr_eq(&e.state, state))
        {
            entry.holds -= 1;
            if entry.holds == 0 {
                entries.remove(&key);
            }
        }
    }
}

async fn run(
    entries: Weak<Mutex<HashMap<Key, Entry>>>,
    protocol: Protocol,
    conn: Connection,
    lease: Duration,
    interval: Duration,
) {
    // After a failed renewal, retry sooner: the lease keeps running out.
    let retry = (interval / 4).max(Duration::from_millis(20));
    let mut delay = interval;
    loop {
        tokio::time::sleep(delay).await;
        delay = interval;
        let Some(entries) = entries.upgrade() else {
            return;
        };
        let batch: Vec<(Key, Arc<HeldState>)> = locked(&entries)
            .iter()
            .map(|(key, entry)| (key.clone(), Arc::clone(&entry.state)))
            .collect();
        for chunk in batch.chunks(RENEW_BATCH) {
            let pairs: Vec<(&str, &str)> = chunk
                .iter()
                .map(|((k, o), _)| (k.as_str(), o.as_str()))
                .collect();
            let sent_at = Instant::now();
            let result = protocol::renew(protocol, &conn, &pairs, lease).await;
            let mut map = locked(&entries);
            match result {
                Ok(renewed) => {
                    for ((key, state), still_held) in chunk.iter().zip(renewed) {
                        // Released (or replaced) meanwhile: the answer no longer matters.
                        let Some(entry) = map.get_mut(key).filter(|e| Arc::ptr_eq(&e.state, state))
                        else {
                            continue;
                        };
                        if still_held {
                            entry.state.extend(sent_at + lease);
                        } else {
                            warn!(lock = %entry.name, owner = %key.1, "lock lost: renewal found it gone or held by another owner");
                            entry.state.mark_lost();
                            map.remove(key);
                        }
                    }
                }
                Err(err) => {
                    delay = retry;
                    let now = Instant::now();
                    for (key, state) in chunk {
                        let Some(entry) = map.get(key).filter(|e| Arc::ptr_eq(&e.state, state))
                        else {
                            continue;
                        };
                        if now >= entry.state.status().expires {
                            warn!(lock = %entry.name, owner = %key.1, error = %err, "lock lost: lease ran out while renewals failed");
                            entry.state.mark_lost();
                            map.remove(key);
                        } else {
                            debug!(lock = %entry.name, owner = %key.1, error = %err, "renewal failed; will retry");
                        }
                    }
                }
            }
        }
    }
}
