//! `min_replicas` where it meets handoffs and renewals: every extension a
//! client relies on (the claim of a handed-over grant, a watchdog renewal)
//! is acknowledged by the replicas first, so that a failover to one of them
//! never ends a lock this client believes it still holds. And where it
//! meets faults: a master restart, a master that stalls during the `WAIT`
//! (bounded by the response timeout), an acquisition dropped during its
//! `WAIT` (released), a re-entry the replicas did not acknowledge (undone
//! alone).

use std::time::{Duration, Instant};

use fairlock::{LockClient, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, eventually, is_held, queue_len};

/// The `WAIT` timeout of tests that stop or pause the replica: short, so
/// that the refusals they look for come soon. Where such a test needs an
/// acknowledgement while the replica runs, it tries again
/// (`support::lock_acknowledged`, `support::hold_acknowledged`): a loaded
/// machine's replica can miss so short a window.
const WAIT: Duration = Duration::from_millis(500);

/// The `WAIT` timeout of tests whose replica runs throughout: long, so that
/// a replica a loaded machine keeps from running for a while still
/// acknowledges. A healthy replica acknowledges at once: it costs nothing.
const ACKED_WITHIN: Duration = Duration::from_secs(5);

async fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(Duration::from_secs(20), "the replica to link", || {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    })
    .await;
    (master, replica)
}

async fn client(master: &RedisServer, waiter_ttl: Duration) -> LockClient {
    support::client_with(master, Protocol::Native, |c| {
        c.min_replicas(1, WAIT)
            .waiter_ttl(waiter_ttl)
            .response_timeout(Duration::from_millis(500))
    })
    .await
}

/// Issue 21, finding 3: WAIT acknowledged only the handoff's grant (its
/// life: the waiter ttl); the claim that extends it to the lease came later
/// and was not waited for. A replica that missed the claim, promoted, let
/// the lock expire at the grant's end while the holder believed it for its
/// whole lease. The claim is now relied on only once acknowledged: with the
/// replica frozen, the holder believes the grant and no longer.
///
/// The grant lasts 3 s, so its claim is sent 1 s after it: after the
/// grant's own `WAIT` (at most 500 ms) returned and the replica was frozen.
/// A handoff is made again, up to 20 times in all, when a loaded machine
/// spoils it: a grant whose `WAIT` the replica missed is undone (the waiter
/// gets `ReplicasNotSynced`), and a grant the master shows claimed by the
/// time the replica froze may have had its claim acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_claim_is_not_believed_past_the_grant() {
    let (master, replica) = master_and_replica().await;
    let waiter_ttl = Duration::from_secs(3);
    // The holder's acquisitions and releases are all made with the replica
    // running: a long WAIT.
    let holder = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, ACKED_WITHIN)
            .waiter_ttl(waiter_ttl)
            .response_timeout(Duration::from_millis(500))
    })
    .await;
    let waiter = client(&master, waiter_ttl).await;
    let name = "claim-acked";
    let (lock_key, _, _) = support::lock_keys(Protocol::Native, name);
    let mut attempt = 1;
    let (guard, granted, frozen) = loop {
        assert!(attempt <= 20, "no handoff left unclaimed in 20 tries");
        attempt += 1;
        let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
        let waiting = tokio::spawn({
            let lock = waiter.fair_lock(name).unwrap();
            async move { lock.lock().await }
        });
        eventually(Duration::from_secs(5), "the waiter queued", || {
            queue_len(&master, Protocol::Native, name) == 1
        })
        .await;
        held.unlock().await.unwrap();
        // Handed over (the grant lasts the waiter ttl) and acknowledged.
        let guard = match waiting.await.unwrap() {
            Ok(guard) => guard,
            Err(err @ fairlock::Error::ReplicasNotSynced { .. }) => {
                eprintln!("handoff {attempt} not acknowledged, made again: {err}");
                continue;
            }
            Err(err) => panic!("handoff {attempt}: {err:?}"),
        };
        let granted = Instant::now();
        // From now on the replica acknowledges nothing: it will miss the
        // claim, provided none was made yet. A loaded machine can delay
        // this test past the deferred claim (a third of the grant's life),
        // or deliver the wake-up so late that the waiter's own attempt
        // claimed the grant: such a claim may be acknowledged, and then
        // rightly believed. The master says which: the lock's flags (the
        // value's third field) have u until the claim.
        let frozen = replica.pause();
        let value: String = master.cmd(&["GET", &lock_key]);
        if value
            .split(':')
            .nth(2)
            .is_some_and(|flags| flags.contains('u'))
        {
            break (guard, granted, frozen);
        }
        eprintln!("handoff {attempt} claimed before the replica froze, made again");
        drop(frozen);
        guard.unlock().await.unwrap();
    };
    // Past the grant's end: the claim was made on the master but never
    // acknowledged, so the holder must not believe it.
    tokio::time::sleep(waiter_ttl + Duration::from_millis(300)).await;
    let believed = guard.is_held();
    assert!(
        !believed,
        "believed {:?} after the grant, with a claim no replica acknowledged",
        granted.elapsed()
    );
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("lost() resolves once the acknowledged lease ran out");
    drop(frozen);
    // The master still has the claim; the guard releases it.
    assert!(is_held(&master, Protocol::Native, name));
    drop(guard);
    holder.shutdown().await;
    waiter.shutdown().await;
}

/// The rule for watchdog renewals: with the replica frozen, renewals are
/// made on the master but not acknowledged, and the holder stops believing
/// once the lease it had acknowledged ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unacknowledged_renewal_is_not_believed() {
    let (master, replica) = master_and_replica().await;
    let lease = Duration::from_millis(1_500);
    let client = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, WAIT)
            .lease(lease)
            .response_timeout(Duration::from_millis(500))
    })
    .await;
    // The replica runs: acknowledged (tried again should a loaded
    // machine's replica miss the short window).
    let guard = support::lock_acknowledged(&client.fair_lock("renewal-acked").unwrap())
        .await
        .unwrap();
    let taken = Instant::now();
    let frozen = replica.pause();
    tokio::time::timeout(lease * 4, guard.lost())
        .await
        .expect("lost() resolves once the acknowledged lease ran out");
    assert!(!guard.is_held());
    assert!(
        taken.elapsed() < lease * 3,
        "believed for {:?} with no renewal acknowledged",
        taken.elapsed()
    );
    drop(frozen);
    drop(guard);
    client.shutdown().await;
}

/// How the server loses one hold of a client without telling it (no
/// revocation notice): evicted or deleted, or replaced by data of another
/// type (a hostile client, or application data under a redisson name).
#[derive(Clone, Copy, Debug)]
enum SilentLoss {
    Deleted,
    Retyped,
}

/// Adversary 2: with `min_replicas`, the watchdog proves every hold of a
/// renewal batch on the WAIT's server and counts the whole batch as not
/// synced when one proof fails. One hold the server lost silently (its
/// renewal answers "lost", its proof fails) then fails the renewal of every
/// other hold of the client on that server, round after round, and never
/// gets marked lost itself: the healthy holds run out of their lease and are
/// given up, and their locks expire on the server.
async fn one_silently_lost_hold_starves_the_others(protocol: Protocol, loss: SilentLoss) {
    lost_hold_among_others(protocol, loss, true).await;
}

/// The scenario, with or without `min_replicas`. A run during which the
/// machine kept this process from running for half a second or more
/// proves nothing either way (renewals come late for their own reason): it
/// is run again, up to three times.
async fn lost_hold_among_others(protocol: Protocol, loss: SilentLoss, replicas: bool) {
    for attempt in 1..=3 {
        let starvation = support::StarvationMonitor::start();
        let outcome = lost_hold_once(protocol, loss, replicas).await;
        let stalled = starvation.stop();
        match outcome {
            Ok(()) => return,
            Err(why) if stalled >= Duration::from_millis(500) && attempt < 3 => {
                eprintln!("run {attempt} proved nothing (the machine stalled {stalled:?}): {why}");
            }
            Err(why) => panic!("{why} (the machine stalled at most {stalled:?})"),
        }
    }
}

async fn lost_hold_once(
    protocol: Protocol,
    loss: SilentLoss,
    replicas: bool,
) -> Result<(), String> {
    let (master, _replica) = master_and_replica().await;
    // Long enough that a loaded machine's late renewals lose no healthy
    // hold on their own: the starvation this test looks for fails every
    // renewal, whatever the lease (and whatever the WAIT timeout: the
    // replica runs throughout, the failed proof fails the batch at once).
    let lease = Duration::from_secs(4);
    let client = support::client_with(&master, protocol, |c| {
        let c = c.lease(lease).response_timeout(Duration::from_secs(1));
        if replicas {
            c.min_replicas(1, ACKED_WITHIN)
        } else {
            c
        }
    })
    .await;
    let kept_name = "adv2-kept";
    let lost_name = "adv2-silently-lost";
    let kept = client.fair_lock(kept_name).unwrap().lock().await.unwrap();
    let lost = client.fair_lock(lost_name).unwrap().lock().await.unwrap();
    let lost_key = support::lock_keys(protocol, lost_name).0;
    match loss {
        SilentLoss::Deleted => {
            let _: i64 = master.cmd(&["DEL", &lost_key]);
        }
        SilentLoss::Retyped => {
            let _: () = master.cmd(&["SET", &lost_key, "application data"]);
        }
    }
    // Several leases: the watchdog renews `kept` every 1.3 s.
    tokio::time::sleep(lease * 3).await;
    let on_server = is_held(&master, protocol, kept_name);
    let believed = kept.is_held();
    let lost_noticed = !lost.is_held();
    let outcome = if on_server && believed {
        Ok(())
    } else {
        Err(format!(
            "{protocol} {loss:?}: a healthy hold was given up because another hold \
             of the same client was lost (on the server: {on_server}, believed: \
             {believed}; the lost one noticed: {lost_noticed})"
        ))
    };
    drop(lost);
    if outcome.is_ok() {
        kept.unlock().await.unwrap();
    }
    client.shutdown().await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_hold_does_not_starve_the_renewals_of_others_native() {
    one_silently_lost_hold_starves_the_others(Protocol::Native, SilentLoss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_hold_does_not_starve_the_renewals_of_others_redisson() {
    one_silently_lost_hold_starves_the_others(Protocol::Redisson, SilentLoss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retyped_hold_does_not_starve_the_renewals_of_others_native() {
    one_silently_lost_hold_starves_the_others(Protocol::Native, SilentLoss::Retyped).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retyped_hold_does_not_starve_the_renewals_of_others_redisson() {
    one_silently_lost_hold_starves_the_others(Protocol::Redisson, SilentLoss::Retyped).await;
}

/// The control: without `min_replicas` the same silent loss costs only the
/// lost hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_min_replicas_a_silently_lost_hold_costs_only_itself() {
    for protocol in support::PROTOCOLS {
        lost_hold_among_others(protocol, SilentLoss::Retyped, false).await;
        lost_hold_among_others(protocol, SilentLoss::Deleted, false).await;
    }
}

/// Adversary 2: the same batch rule with no fault at all. Other holds of the
/// client come and go (short critical sections on other locks); one released
/// between the renewal and the proof read before the `WAIT` fails the
/// proof, and with it the renewal of every hold of the batch. Under steady
/// churn most rounds fail, and a long hold runs out of its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_holds_coming_and_going_do_not_starve_a_long_one() {
    churn_beside_a_long_hold(true).await;
}

/// The control: the same churn from another client (whose holds are in
/// its own batches) costs the long hold nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_clients_churn_does_not_starve_a_long_hold() {
    churn_beside_a_long_hold(false).await;
}

/// A long hold, and 16 tasks that take and release other locks as fast as
/// they can, on the same client or on another one.
async fn churn_beside_a_long_hold(same_client: bool) {
    let (master, _replica) = master_and_replica().await;
    let lease = Duration::from_secs(2);
    // The replica runs throughout (a failed proof fails the batch at once,
    // whatever the WAIT timeout).
    let config = |c: fairlock::ClientConfig| {
        c.min_replicas(1, ACKED_WITHIN)
            .lease(lease)
            .response_timeout(Duration::from_millis(500))
    };
    let client = support::client_with(&master, Protocol::Native, config).await;
    let other = support::client_with(&master, Protocol::Native, config).await;
    let churning = if same_client { &client } else { &other };
    let kept = client.fair_lock("adv2-long").unwrap().lock().await.unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn: Vec<_> = (0..16)
        .map(|i| {
            let lock = churning.fair_lock(&format!("adv2-churn-{i}")).unwrap();
            let stop = std::sync::Arc::clone(&stop);
            tokio::spawn(async move {
                let mut rounds = 0u64;
                while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                    if let Ok(guard) = lock.lock().await {
                        let _ = guard.unlock().await;
                        rounds += 1;
                    }
                }
                rounds
            })
        })
        .collect();
    tokio::time::sleep(lease * 3).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut rounds = 0;
    for task in churn {
        rounds += task.await.unwrap();
    }
    let on_server = is_held(&master, Protocol::Native, "adv2-long");
    let believed = kept.is_held();
    assert!(
        believed,
        "a long hold was given up while {rounds} short holds came and went \
         (same client: {same_client}; still on the server: {on_server})"
    );
    kept.unlock().await.unwrap();
    client.shutdown().await;
    other.shutdown().await;
}

/// Finding 2: the connections kept for `WAIT` (`min_replicas`) are reused
/// without a check and never reconnect: after the master restarted (and
/// is back, with its replica linked), the next acquisition is granted,
/// then fails with `Error::Connection` on the dead pooled connection and
/// is undone, although the server answered throughout the call. With the
/// pool filled by concurrent acquisitions, up to 8 acquisitions in a row
/// fail this way. The sync is not retried either.
///
/// Found by the adversarial review of the Sentinel support (finding 2),
/// fixed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_after_a_master_restart() {
    let mut master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let linked = |replica: &RedisServer| {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    };
    eventually(Duration::from_secs(20), "the replica to link", || {
        linked(&replica)
    })
    .await;
    let client = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, ACKED_WITHIN)
            .retry_budget(Duration::from_secs(10))
    })
    .await;
    let lock = client.fair_lock("adv-wait-pool").unwrap();
    lock.lock().await.expect("met").unlock().await.expect("met");

    master.restart();
    eventually(Duration::from_secs(30), "the replica to link again", || {
        linked(&replica)
    })
    .await;
    // The command connection reconnects on its own: prove the server is
    // back for this client.
    let probe = client.fair_lock("adv-wait-pool-probe").unwrap();
    for _ in 0..50 {
        if probe.is_locked().await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let outcome = lock.lock().await;
    assert!(
        outcome.is_ok(),
        "an acquisition with the master up and its replica linked failed: {outcome:?}"
    );
    outcome.unwrap().unlock().await.unwrap();
}

/// Finding 3: the `WAIT` of `min_replicas` is bounded by its timeout plus a
/// fixed 3 s (and its connect by a fixed 3 s), not by the client's response
/// and connect timeouts: a master that stalls while a `try_lock` waits for
/// its replicas holds the call for the `WAIT` timeout + 3 s, whatever
/// `response_timeout` says (promise 2: every wait ends within its bound).
///
/// Found by the adversarial review of the Sentinel support (finding 3),
/// fixed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_wait_is_bounded_by_the_response_timeout() {
    const WAIT: Duration = Duration::from_secs(1);
    const RESPONSE: Duration = Duration::from_millis(300);
    let (master, replica) = master_and_replica().await;
    let client = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, WAIT)
            .response_timeout(RESPONSE)
            .retry_budget(Duration::from_millis(500))
    })
    .await;
    let lock = client.fair_lock("adv-wait-bound").unwrap();
    // The replica runs: met (tried again should a loaded machine's replica
    // miss the window).
    support::hold_acknowledged(&lock, || {}).await.expect("met");

    // The replica stops acknowledging: every WAIT now lasts its timeout.
    let _replica_paused = replica.pause();
    let started = Instant::now();
    let attempt = tokio::spawn(async move {
        let outcome = lock.try_lock().await.map(|g| g.is_some());
        (outcome, started.elapsed())
    });
    // Granted, now waiting for the replica: the master stalls.
    eventually(Duration::from_secs(5), "the grant", || {
        support::is_held(&master, Protocol::Native, "adv-wait-bound")
    })
    .await;
    let master_paused = master.pause();
    let (outcome, elapsed) = tokio::time::timeout(Duration::from_secs(30), attempt)
        .await
        .expect("try_lock ends")
        .unwrap();
    drop(master_paused);
    eprintln!(
        "try_lock with a stalled master: {outcome:?} after {elapsed:?}; still held after \
         the master resumed: {}",
        support::is_held(&master, Protocol::Native, "adv-wait-bound")
    );
    // WAIT timeout + a response timeout for the WAIT + the undo's retry
    // budget and one response timeout, with 1 s to spare.
    let bound = WAIT + RESPONSE + Duration::from_millis(500) + RESPONSE + Duration::from_secs(1);
    assert!(
        elapsed < bound,
        "try_lock took {elapsed:?} (bound {bound:?}): {outcome:?}"
    );
}

async fn master_with_paused_replica_client(
    wait: Duration,
) -> (RedisServer, RedisServer, LockClient) {
    let (master, replica) = master_and_replica().await;
    let client = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, wait)
            .response_timeout(Duration::from_millis(500))
            .retry_budget(Duration::from_secs(5))
    })
    .await;
    (master, replica, client)
}

/// Held up: an acquisition dropped while it waits for the replicas is
/// released in the background (not left held until its lease ends).
///
/// From the adversarial review of the Sentinel support: a check that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_acquisition_dropped_during_wait_is_released() {
    let (master, replica, client) =
        master_with_paused_replica_client(Duration::from_secs(20)).await;
    let _paused = replica.pause();
    let lock = client.fair_lock("adv-wait-drop").unwrap();
    let attempt = tokio::spawn(async move { lock.lock().await.map(drop) });
    eventually(Duration::from_secs(5), "the grant", || {
        support::is_held(&master, Protocol::Native, "adv-wait-drop")
    })
    .await;
    attempt.abort();
    let started = Instant::now();
    eventually(Duration::from_secs(5), "the background release", || {
        !support::is_held(&master, Protocol::Native, "adv-wait-drop")
    })
    .await;
    eprintln!("released {:?} after the drop", started.elapsed());
}

/// Held up: a re-entry that the replicas did not acknowledge is undone
/// alone; the outer hold stays and its count is right.
///
/// From the adversarial review of the Sentinel support: a check that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_reentry_undo_keeps_the_outer_hold() {
    let (master, replica, client) =
        master_with_paused_replica_client(Duration::from_millis(500)).await;
    let lock = client.fair_lock("adv-wait-reenter").unwrap();
    // The replica runs: met (tried again should a loaded machine's replica
    // miss the short window).
    let outer = support::lock_acknowledged(&lock).await.expect("met");
    let paused = replica.pause();
    let inner = tokio::time::timeout(Duration::from_secs(10), outer.reenter())
        .await
        .expect("the re-entry ends");
    assert!(
        matches!(inner, Err(fairlock::Error::ReplicasNotSynced { .. })),
        "{inner:?}"
    );
    assert!(outer.is_held());
    assert!(support::is_held(
        &master,
        Protocol::Native,
        "adv-wait-reenter"
    ));
    drop(paused);
    // Released as ours. The replica, just resumed, may not acknowledge the
    // release within the short WAIT on a loaded machine: a release it did
    // not acknowledge is done all the same (and reported so). Whether it is
    // done on the master is checked below.
    match outer.unlock().await {
        Ok(())
        | Err(fairlock::Error::ReplicasNotSynced {
            what: "release", ..
        }) => {}
        other => panic!("the outer hold is still ours: {other:?}"),
    }
    assert!(!support::is_held(
        &master,
        Protocol::Native,
        "adv-wait-reenter"
    ));
}
