//! Statistics, status and (with the `metrics` feature) the metrics facade
//! after scripted scenarios: each count must be exactly what the scenario
//! did.
//!
//! One test in this binary: the metrics recorder is global to the process
//! and its snapshots drain what they read, so the scenarios run one after
//! another and the test keeps the running totals.

use std::collections::BTreeMap;
use std::time::Duration;

use fairlock::{LockClient, LockLabel, Protocol, Statistics};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, assert_clean_for, client_with, eventually};

/// A series: metric name and sorted labels.
#[cfg(feature = "metrics")]
type Series = (String, Vec<(String, String)>);

/// Running totals of what the metrics recorder saw, per series.
#[derive(Default)]
struct Totals {
    #[cfg(feature = "metrics")]
    values: BTreeMap<Series, f64>,
    #[cfg(feature = "metrics")]
    samples: BTreeMap<Series, usize>,
    #[cfg(not(feature = "metrics"))]
    _none: BTreeMap<(), ()>,
}

#[cfg(feature = "metrics")]
mod recorder {
    use std::collections::BTreeMap;
    use std::sync::OnceLock;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

    use super::Totals;

    fn snapshotter() -> &'static Snapshotter {
        static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
        SNAPSHOTTER.get_or_init(|| {
            let recorder = DebuggingRecorder::new();
            let snapshotter = recorder.snapshotter();
            recorder
                .install()
                .expect("the only recorder of this process");
            snapshotter
        })
    }

    pub(super) fn install() {
        snapshotter();
    }

    impl Totals {
        /// Add what the recorder saw since the last snapshot (it drains).
        pub(super) fn update(&mut self) {
            for (key, _, _, value) in snapshotter().snapshot().into_vec() {
                let key = key.key();
                let mut labels: Vec<(String, String)> = key
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                labels.sort();
                let id = (key.name().to_owned(), labels);
                match value {
                    DebugValue::Counter(n) => *self.values.entry(id).or_default() += n as f64,
                    DebugValue::Gauge(g) => *self.values.entry(id).or_default() += g.into_inner(),
                    DebugValue::Histogram(samples) => {
                        *self.samples.entry(id).or_default() += samples.len()
                    }
                }
            }
        }

        fn matching<'a, T: Copy + Default + std::ops::AddAssign>(
            map: &'a BTreeMap<super::Series, T>,
            name: &'a str,
            want: &'a [(&'a str, &'a str)],
        ) -> T {
            let mut sum = T::default();
            for ((n, labels), value) in map {
                let fits = want
                    .iter()
                    .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v));
                if n == name && fits {
                    sum += *value;
                }
            }
            sum
        }

        /// The sum of a counter or gauge over the series carrying `labels`.
        pub(super) fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
            Self::matching(&self.values, name, labels)
        }

        /// The samples a histogram got over the series carrying `labels`.
        pub(super) fn samples(&self, name: &str, labels: &[(&str, &str)]) -> usize {
            Self::matching(&self.samples, name, labels)
        }
    }
}

#[cfg(not(feature = "metrics"))]
impl Totals {
    fn update(&mut self) {}
}

/// A client with lock names as labels, whose waiters re-check on their
/// own only every 15 s (half the lease): within a scenario, a waiter gets
/// the lock from a release, never from a refresh that happens to follow it.
async fn observed_client(server: &RedisServer, protocol: Protocol) -> LockClient {
    client_with(server, protocol, |c| {
        c.metrics_lock_label(LockLabel::Name)
            .waiter_ttl(Duration::from_secs(60))
    })
    .await
}

/// Poll (with a deadline) until one waiter is in its pause: counted as
/// waiting, subscribed (the revocation channel and its own), and its second
/// attempt (the re-check after subscribing) answered, so `attempts` is
/// `before` + 2.
async fn until_pausing(client: &LockClient, before: u64) {
    eventually(Duration::from_secs(10), "waiter in its pause", || {
        let status = client.status();
        status.waiting == 1
            && status.subscribed_channels == 2
            && client.statistics().attempts == before + 2
    })
    .await;
}

/// Until the server's clock has left the millisecond it is in now (polled
/// with TIME): a release sent after this is dated later than every call
/// answered before it. A waiter acts on a grant message at once only when
/// the grant is dated after its last attempt; one of the same millisecond
/// is only a wake-up (the next attempt claims it), which is not counted as a
/// direct handoff.
fn until_the_server_clock_moves(server: &RedisServer) {
    let now_ms = || {
        let time: Vec<u64> = server.cmd(&["TIME"]);
        time[0] * 1000 + time[1] / 1000
    };
    let start = now_ms();
    while now_ms() <= start {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_after_scripted_scenarios() {
    #[cfg(feature = "metrics")]
    recorder::install();
    let mut totals = Totals::default();
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let a = observed_client(&server, protocol).await;
        let mut expected = Statistics::default();
        assert_eq!(
            a.statistics(),
            expected,
            "{protocol}: a new client counts nothing"
        );
        let status = a.status();
        assert!(status.held.is_empty() && status.waiting == 0 && !status.closed);
        // The revocation channel.
        assert_eq!(status.subscribed_channels, 1, "{protocol}");

        // 1. Immediate grant, then unlock.
        let guard = a.fair_lock("immediate").unwrap().lock().await.unwrap();
        let status = a.status();
        assert_eq!(status.held.len(), 1, "{protocol}: {status:?}");
        assert_eq!(status.held[0].name, "immediate");
        assert_eq!(status.held[0].owner, guard.owner().as_str());
        assert_eq!(status.held[0].holds, 1);
        assert_eq!(status.held[0].token, guard.token());
        guard.unlock().await.unwrap();
        expected.acquired_immediately += 1;
        expected.releases += 1;
        expected.holds_ended += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: immediate"
        );
        assert!(a.status().held.is_empty());
        assert_eq!(a.statistics().attempts, 1, "{protocol}: one script call");

        // 2. Wait, then get the lock from the release (a handoff).
        let lock = a.fair_lock("waited").unwrap();
        let first = lock.lock().await.unwrap();
        let before = a.statistics().attempts;
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await }
        });
        until_pausing(&a, before).await;
        until_the_server_clock_moves(&server);
        first.unlock().await.unwrap();
        let second = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter is granted")
            .unwrap()
            .unwrap();
        second.unlock().await.unwrap();
        expected.acquired_immediately += 1;
        expected.acquired_after_wait += 1;
        expected.handoffs += 1;
        expected.releases += 2;
        expected.holds_ended += 2;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: wait"
        );

        // 3. Timeouts: a bounded wait that runs out, and a try_lock on a busy lock.
        let lock = a.fair_lock("timeout").unwrap();
        let held = lock.lock().await.unwrap();
        assert!(
            lock.try_lock_for(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert!(lock.try_lock().await.unwrap().is_none());
        held.unlock().await.unwrap();
        expected.acquired_immediately += 1;
        expected.timed_out += 2;
        expected.releases += 1;
        expected.holds_ended += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: timeout"
        );

        // An acquisition refused for bad input is an error outcome.
        let err = lock.lock_with_lease(Duration::ZERO).await.unwrap_err();
        assert!(err.is_invalid_input());
        expected.failed += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: error"
        );

        // 4. Cancellation: a waiting task aborted.
        let lock = a.fair_lock("cancel").unwrap();
        let held = lock.lock().await.unwrap();
        let before = a.statistics().attempts;
        let waiter = tokio::spawn({
            let lock = lock.clone();
            async move { lock.lock().await }
        });
        until_pausing(&a, before).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        held.unlock().await.unwrap();
        a.flush().await;
        assert_clean_for(&server, protocol, "cancel");
        expected.acquired_immediately += 1;
        expected.cancelled += 1;
        expected.releases += 1;
        expected.holds_ended += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: cancel"
        );
        assert_eq!(a.status().waiting, 0);

        // 5. Force-unlock: the holder learns at once that its hold is gone.
        let lock = a.fair_lock("forced").unwrap();
        let held = lock.lock().await.unwrap();
        assert!(lock.force_unlock().await.unwrap());
        tokio::time::timeout(Duration::from_secs(10), held.lost())
            .await
            .expect("lost() after a force-unlock");
        assert!(held.unlock().await.unwrap_err().is_lock_lost());
        expected.acquired_immediately += 1;
        expected.force_unlocks += 1;
        // The revocation message named the lock before the check found it
        // gone.
        expected.lost_force_unlocked += 1;
        expected.holds_ended += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: force"
        );

        // 6. Lease expiry: an explicit lease runs out before the unlock.
        let lock = a.fair_lock("expiring").unwrap();
        let held = lock
            .lock_with_lease(Duration::from_millis(300))
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), held.lost())
            .await
            .expect("lost() when the lease runs out");
        // The local estimate ends first; wait for the server's key to go.
        eventually(Duration::from_secs(10), "the key expired", || {
            !support::is_held(&server, protocol, "expiring")
        })
        .await;
        assert!(held.unlock().await.unwrap_err().is_lock_lost());
        expected.acquired_immediately += 1;
        // The release was sent (the lease is only known to have run out
        // locally) and found nothing.
        expected.releases += 1;
        expected.lost_expired += 1;
        expected.holds_ended += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: expiry"
        );

        // 7. Reconnect: the pub/sub connection is killed and comes back.
        let killed: i64 = server.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]);
        assert_eq!(killed, 1, "{protocol}: one pub/sub connection");
        eventually(Duration::from_secs(10), "pub/sub reconnected", || {
            a.statistics().pubsub_reconnects == 1
        })
        .await;
        expected.pubsub_reconnects += 1;
        assert_eq!(
            a.statistics(),
            with_times(&a, &expected),
            "{protocol}: reconnect"
        );

        // 8. Renewals, on a client with a short lease.
        let r = client_with(&server, protocol, |c| {
            c.lease(Duration::from_millis(600))
                .metrics_lock_label(LockLabel::Name)
        })
        .await;
        let held = r.fair_lock("renewed").unwrap().lock().await.unwrap();
        eventually(Duration::from_secs(10), "two renewals", || {
            r.statistics().renewals >= 2
        })
        .await;
        held.unlock().await.unwrap();
        let renewals = r.statistics().renewals;
        assert!(renewals >= 2, "{protocol}: {renewals}");
        let stats = r.statistics();
        assert_eq!(stats.acquired_immediately, 1);
        assert_eq!(stats.renewal_failures, 0);
        assert_eq!(stats.locks_lost(), 0);
        // Client a loaded the scripts on this server before r used them.
        assert_eq!(stats.script_reloads, 0, "{protocol}: {stats:?}");

        // 9. Taken over: another owner's hold replaces ours between two
        // renewals (what an expiry followed by another client's acquire
        // leaves).
        let held = r.fair_lock("taken").unwrap().lock().await.unwrap();
        let key = support::lock_keys(protocol, "taken").0;
        let _: () = redis::pipe()
            .atomic()
            .del(&key)
            .hset(&key, "owner", "intruder:1")
            .pexpire(&key, 60_000)
            .query(&mut server.conn())
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), held.lost())
            .await
            .expect("lost() after the lock was taken over");
        assert_eq!(
            r.statistics().lost_taken_over,
            1,
            "{protocol}: {:?}",
            r.statistics()
        );
        drop(held);
        let _: i64 = server.cmd(&["DEL", &key]);

        // 10. Server change: the lock and the script cache both gone at
        // once (a restart without persistence, or a failover to a replica
        // the lock never reached). The renewal that finds it gone had to
        // send its script in full: the loss is put down to the change.
        let held = r.fair_lock("flushed").unwrap().lock().await.unwrap();
        let reloads = r.statistics().script_reloads;
        let key = support::lock_keys(protocol, "flushed").0;
        let _: () = redis::pipe()
            .atomic()
            .del(&key)
            .cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut server.conn())
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), held.lost())
            .await
            .expect("lost() after the server lost the lock");
        let stats = r.statistics();
        assert_eq!(stats.lost_failover, 1, "{protocol}: {stats:?}");
        assert_eq!(stats.script_reloads, reloads + 1, "{protocol}: the renewal");
        assert_eq!(stats.locks_lost(), 2, "{protocol}: {stats:?}");
        drop(held);
        r.shutdown().await;
        a.shutdown().await;
        assert!(a.status().closed);

        let stats = a.statistics();
        assert_eq!(stats.acquisitions(), 11, "{protocol}");
        assert!(stats.wait_time >= Duration::from_millis(300), "{stats:?}");
        assert!(stats.hold_time > Duration::ZERO, "{stats:?}");

        totals.update();
        #[cfg(feature = "metrics")]
        {
            let t = &totals;
            let p = ("protocol", protocol.as_str());
            let count = |name: &str, labels: &[(&str, &str)]| -> u64 {
                let mut all = vec![p];
                all.extend_from_slice(labels);
                t.value(name, &all) as u64
            };
            let samples = |name: &str, labels: &[(&str, &str)]| -> u64 {
                let mut all = vec![p];
                all.extend_from_slice(labels);
                t.samples(name, &all) as u64
            };
            let acq = "fairlock_acquisitions_total";
            // Client a's locks (every name but "renewed").
            let a_locks = [
                "immediate",
                "waited",
                "timeout",
                "cancel",
                "forced",
                "expiring",
            ];
            let per_outcome = |outcome: &str| -> u64 {
                a_locks
                    .iter()
                    .map(|lock| count(acq, &[("outcome", outcome), ("lock", lock)]))
                    .sum()
            };
            assert_eq!(per_outcome("immediate"), stats.acquired_immediately);
            assert_eq!(per_outcome("after_wait"), stats.acquired_after_wait);
            assert_eq!(per_outcome("timed_out"), stats.timed_out);
            assert_eq!(per_outcome("cancelled"), stats.cancelled);
            assert_eq!(per_outcome("error"), 1);
            assert_eq!(
                count(acq, &[("kind", "fair")]),
                14,
                "{protocol}: a's 11 and r's 3"
            );
            assert_eq!(count(acq, &[("kind", "nonfair")]), 0);
            assert_eq!(
                count(acq, &[("lock", "timeout"), ("outcome", "timed_out")]),
                2
            );
            let attempts: u64 = a_locks
                .iter()
                .map(|lock| count("fairlock_attempts_total", &[("lock", lock)]))
                .sum();
            assert_eq!(attempts, stats.attempts);
            // One wait sample per acquisition.
            assert_eq!(samples("fairlock_wait_seconds", &[]), 14);
            assert_eq!(
                samples(
                    "fairlock_wait_seconds",
                    &[("lock", "waited"), ("outcome", "after_wait")]
                ),
                1
            );
            // Handoffs: the one in scenario 2, with one latency sample.
            let how = if protocol == Protocol::Native {
                "direct"
            } else {
                "woken"
            };
            assert_eq!(
                count(
                    "fairlock_handoffs_total",
                    &[("lock", "waited"), ("handoff", how)]
                ),
                1
            );
            assert_eq!(count("fairlock_handoffs_total", &[]), 1);
            assert_eq!(samples("fairlock_handoff_latency_seconds", &[]), 1);
            // Holds: one sample per ended hold, the gauge back at zero.
            assert_eq!(samples("fairlock_hold_seconds", &[]), stats.holds_ended + 3);
            assert_eq!(samples("fairlock_hold_seconds", &[("lock", "waited")]), 2);
            assert_eq!(count("fairlock_held_locks", &[]), 0);
            assert_eq!(count("fairlock_waiting_tasks", &[]), 0);
            assert_eq!(
                count("fairlock_releases_total", &[("how", "unlock")]),
                stats.releases + 1
            );
            assert_eq!(
                count(
                    "fairlock_locks_lost_total",
                    &[("cause", "force_unlocked"), ("lock", "forced")]
                ),
                1
            );
            assert_eq!(
                count(
                    "fairlock_locks_lost_total",
                    &[("cause", "taken_over"), ("lock", "taken")]
                ),
                1
            );
            assert_eq!(
                count(
                    "fairlock_locks_lost_total",
                    &[("cause", "failover"), ("lock", "flushed")]
                ),
                1
            );
            assert_eq!(
                count(
                    "fairlock_locks_lost_total",
                    &[("cause", "expired"), ("lock", "expiring")]
                ),
                1
            );
            assert_eq!(count("fairlock_locks_lost_total", &[]), 4);
            assert!(count("fairlock_script_reloads_total", &[]) >= 4);
            assert_eq!(
                count(
                    "fairlock_force_unlocks_total",
                    &[("lock", "forced"), ("released", "true")]
                ),
                1
            );
            assert_eq!(count("fairlock_pubsub_reconnects_total", &[]), 1);
            assert_eq!(
                count(
                    "fairlock_renewals_total",
                    &[("lock", "renewed"), ("result", "ok")]
                ),
                renewals
            );
            assert_eq!(count("fairlock_renewals_total", &[("result", "failed")]), 0);
        }
    }
    a_latch_counts_its_count_downs_and_waits().await;
    a_client_without_metrics_writes_none_and_still_counts().await;
}

/// A latch's count-downs (counted or not) and waits (opened or timed out)
/// are counted under its name. Run after the scenarios (the recorder is
/// global).
async fn a_latch_counts_its_count_downs_and_waits() {
    // What earlier scenarios left in the recorder is not this one's.
    Totals::default().update();
    let mut totals = Totals::default();
    let server = RedisServer::start();
    let client = observed_client(&server, Protocol::Native).await;
    let latch = client.count_down_latch("ready").unwrap();
    assert!(latch.try_set_count(2).await.unwrap());
    assert_eq!(latch.count_down_as("p").await.unwrap(), 1);
    // The party's repeats count nothing.
    assert_eq!(latch.count_down_as("p").await.unwrap(), 1);
    assert_eq!(latch.count_down_as("p").await.unwrap(), 1);
    assert!(!latch.wait_for(Duration::from_millis(50)).await.unwrap());
    assert_eq!(latch.count_down().await.unwrap(), 0);
    // The latch is open: counts nothing.
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(latch.wait_for(Duration::from_secs(10)).await.unwrap());
    totals.update();
    #[cfg(feature = "metrics")]
    {
        let count = |name: &str, labels: &[(&str, &str)]| totals.value(name, labels) as u64;
        let downs = "fairlock_latch_count_downs_total";
        let native = ("protocol", "native");
        let ready = ("lock", "ready");
        assert_eq!(count(downs, &[native, ready, ("counted", "yes")]), 2);
        assert_eq!(count(downs, &[native, ready, ("counted", "no")]), 3);
        assert_eq!(count(downs, &[]), 5);
        let waits = "fairlock_latch_waits_total";
        assert_eq!(count(waits, &[native, ready, ("outcome", "opened")]), 1);
        assert_eq!(count(waits, &[native, ready, ("outcome", "timeout")]), 1);
        assert_eq!(count(waits, &[]), 2);
        let wait = "fairlock_latch_wait_seconds";
        assert_eq!(totals.samples(wait, &[ready, ("outcome", "timeout")]), 1);
        assert_eq!(totals.samples(wait, &[]), 2);
    }
    client.shutdown().await;
}

/// `expected` with the times the client measured (they cannot be known in
/// advance; the counts can).
fn with_times(client: &LockClient, expected: &Statistics) -> Statistics {
    let mut expected = expected.clone();
    let actual = client.statistics();
    // Attempts are checked where they are known (the first scenario, the
    // waiters' pauses) and against the metric at the end.
    expected.attempts = actual.attempts;
    // Script reloads depend on which scripts ran first; scenario 10 counts
    // them.
    expected.script_reloads = actual.script_reloads;
    expected.wait_time = actual.wait_time;
    expected.hold_time = actual.hold_time;
    expected
}

/// A client built with `metrics(false)` writes no metric (and one beside
/// it still does), while its statistics count as usual. Run at the end of
/// the binary's one test (the recorder is global).
async fn a_client_without_metrics_writes_none_and_still_counts() {
    // What earlier scenarios left in the recorder is not this one's.
    Totals::default().update();
    let mut totals = Totals::default();
    let server = RedisServer::start();
    let quiet = client_with(&server, Protocol::Native, |c| {
        c.metrics_lock_label(LockLabel::Name).metrics(false)
    })
    .await;
    let counted = observed_client(&server, Protocol::Native).await;
    for _ in 0..3 {
        quiet
            .fair_lock("quiet")
            .unwrap()
            .lock()
            .await
            .unwrap()
            .unlock()
            .await
            .unwrap();
    }
    counted
        .fair_lock("counted")
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    let stats = quiet.statistics();
    assert_eq!(stats.acquired_immediately, 3, "{stats:?}");
    assert_eq!(stats.releases, 3, "{stats:?}");
    totals.update();
    #[cfg(feature = "metrics")]
    {
        let count = |name: &str, labels: &[(&str, &str)]| totals.value(name, labels) as u64;
        assert_eq!(
            count("fairlock_acquisitions_total", &[("lock", "quiet")]),
            0
        );
        assert_eq!(count("fairlock_releases_total", &[("lock", "quiet")]), 0);
        assert_eq!(
            totals.samples("fairlock_hold_seconds", &[("lock", "quiet")]),
            0
        );
        assert_eq!(
            count("fairlock_acquisitions_total", &[("lock", "counted")]),
            1
        );
        assert_eq!(count("fairlock_acquisitions_total", &[]), 1);
        assert_eq!(totals.samples("fairlock_wait_seconds", &[]), 1);
    }
    quiet.shutdown().await;
    counted.shutdown().await;
}
