//! Force-unlock: the holder's client is told at once (its lost-lock signal,
//! for explicit leases too), and where it meets other features: a
//! force-unlock right after a release that handed the lock over (the grant
//! and the revocation reach the first waiter's client together), and the
//! loss it causes labelled as a force-unlock under a flood of forged
//! revocations (open, ignored). Both protocols.

use std::time::{Duration, Instant};

use fairlock::{LockClient, LockGuard, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{PROTOCOLS, RedisServer, client, eventually, is_held, queue_len};

mod common;
use common::{config, connect};

async fn queued(server: &RedisServer, protocol: Protocol, name: &str, len: usize) {
    eventually(Duration::from_secs(5), "waiters queued", || {
        queue_len(server, protocol, name) == len
    })
    .await;
}

/// Issue 21, finding 2: the release grants W1; a force-unlock at once
/// passes the lock to W2 and revokes W1. W1's client read the grant and the
/// revocation together, checked its holds before W1's hold was registered
/// (found nothing to revoke), then went on with the authentic grant: two
/// holders for about 2 s (until W1's deferred claim). A revocation that
/// arrives with or after a grant now wins over it: W1 either never returns
/// a guard, or its guard loses the lock within a round trip.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_force_unlock_right_after_a_handoff_leaves_one_holder() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let holder = client(&server, protocol).await;
        // W1's wake-ups come 200 ms late, so that the grant and the
        // revocation reach its client together (the finding's setting).
        let proxy = Proxy::start(server.port());
        if protocol == Protocol::Native {
            proxy.delay_pubsub(Duration::from_millis(200));
        }
        let first = LockClient::with_config(
            fairlock::ClientConfig::from_url(&proxy.url())
                .unwrap()
                .protocol(protocol),
        )
        .await
        .unwrap();
        let second = client(&server, protocol).await;
        let operator = client(&server, protocol).await;
        let (mut w1_got_a_guard, trials) = (0, 10);
        for trial in 0..trials {
            let name = format!("handoff-force-{trial}");
            let held = holder.fair_lock(&name).unwrap().lock().await.unwrap();
            let mut w1 = tokio::spawn({
                let lock = first.fair_lock(&name).unwrap();
                async move { lock.lock().await }
            });
            queued(&server, protocol, &name, 1).await;
            let w2 = tokio::spawn({
                let lock = second.fair_lock(&name).unwrap();
                async move { lock.lock().await }
            });
            queued(&server, protocol, &name, 2).await;
            held.unlock().await.unwrap();
            // Native hands the lock over inside the release; under redisson
            // W1 takes it with an attempt of its own: force-unlock as soon
            // as it has.
            let force = operator.fair_lock(&name).unwrap();
            let mut forced = force.force_unlock().await.unwrap();
            for _ in 0..5_000 {
                if forced {
                    break;
                }
                forced = force.force_unlock().await.unwrap();
            }
            assert!(
                forced,
                "{protocol} trial {trial}: the lock was never taken after the release"
            );
            let w2: LockGuard = tokio::time::timeout(Duration::from_secs(10), w2)
                .await
                .expect("W2 is granted the force-unlocked lock")
                .unwrap()
                .unwrap();
            // W1 must not go on believing it holds the lock W2 now holds.
            // W1's messages (grant, then revocation) come 200 ms late: give
            // them time to arrive while W2 holds the lock.
            let w1_guard = match tokio::time::timeout(Duration::from_millis(800), &mut w1).await {
                Ok(w1) => Some(w1.unwrap().unwrap()),
                Err(_) => None,
            };
            if let Some(guard) = &w1_guard {
                w1_got_a_guard += 1;
                // The by-design window of a force-unlock: the revocation's
                // check, one round trip (bounded loosely for a loaded machine).
                tokio::time::timeout(Duration::from_millis(1_000), guard.lost())
                    .await
                    .unwrap_or_else(|_| {
                        panic!(
                            "{protocol} trial {trial}: W1 still holds {name} 1 s after W2 got it"
                        )
                    });
            }
            assert!(w2.is_held(), "{protocol} trial {trial}");
            w2.unlock().await.unwrap();
            match w1_guard {
                Some(guard) => drop(guard),
                None => {
                    // Still waiting in line: it gets the lock after W2.
                    let guard = tokio::time::timeout(Duration::from_secs(10), w1)
                        .await
                        .expect("W1 granted after W2")
                        .unwrap()
                        .unwrap();
                    guard.unlock().await.unwrap();
                }
            }
        }
        eprintln!("{protocol}: W1 returned a guard in {w1_got_a_guard} of {trials} trials");
        for c in [&holder, &first, &second, &operator] {
            c.shutdown().await;
        }
        for trial in 0..trials {
            let name = format!("handoff-force-{trial}");
            assert!(
                !is_held(&server, protocol, &name),
                "{protocol}: {name} left held"
            );
        }
    }
}

/// The same race on a script's reply: W1's attempt takes the free lock, its
/// reply is slow, and a force-unlock (then W2's acquisition) comes first.
/// The revocation reached W1's client before the hold it was about to
/// register, so the check it made found nothing. A grant whose attempt was
/// sent before a revocation arrived is now confirmed with the server first:
/// W1 goes on waiting (or, with a zero wait, reports "not acquired").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_force_unlock_before_an_acquisitions_reply_wins_over_it() {
    for protocol in PROTOCOLS {
        for zero_wait in [false, true] {
            let server = RedisServer::start();
            let proxy = Proxy::start(server.port());
            let first = LockClient::with_config(
                fairlock::ClientConfig::from_url(&proxy.url())
                    .unwrap()
                    .protocol(protocol),
            )
            .await
            .unwrap();
            let second = client(&server, protocol).await;
            let operator = client(&server, protocol).await;
            let name = "reply-force";
            // Scripts loaded before replies slow down.
            first
                .fair_lock(name)
                .unwrap()
                .lock()
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
            proxy.delay_command_replies(Duration::from_millis(500));
            let mut w1 = tokio::spawn({
                let lock = first.fair_lock(name).unwrap();
                async move {
                    if zero_wait {
                        lock.try_lock().await
                    } else {
                        lock.lock().await.map(Some)
                    }
                }
            });
            let force = operator.fair_lock(name).unwrap();
            let started = std::time::Instant::now();
            let mut forced = false;
            while !forced && started.elapsed() < Duration::from_secs(5) {
                forced = force.force_unlock().await.unwrap();
            }
            assert!(forced, "{protocol}: W1's attempt never took the lock");
            let w2 = second.fair_lock(name).unwrap().lock().await.unwrap();
            // W1's reply comes 500 ms late: it must not make W1 a holder.
            // (A try_lock answers after its reply and one check, each 500 ms
            // late; a waiting W1 must still be waiting 1.5 s on.)
            let limit = Duration::from_millis(if zero_wait { 10_000 } else { 1_500 });
            match tokio::time::timeout(limit, &mut w1).await {
                Err(_) => assert!(!zero_wait, "{protocol}: try_lock hung"),
                Ok(w1) => {
                    let w1 = w1.unwrap().unwrap();
                    assert!(
                        w1.as_ref().is_none_or(|guard| !guard.is_held()),
                        "{protocol} zero_wait={zero_wait}: W1 holds the lock W2 holds"
                    );
                }
            }
            proxy.delay_command_replies(Duration::ZERO);
            w2.unlock().await.unwrap();
            if !zero_wait {
                let w1 = tokio::time::timeout(Duration::from_secs(10), w1)
                    .await
                    .expect("W1 granted after W2")
                    .unwrap()
                    .unwrap()
                    .unwrap();
                w1.unlock().await.unwrap();
            }
            for c in [&first, &second, &operator] {
                c.shutdown().await;
            }
        }
    }
}

/// Adversary 2: the grant re-check (`confirm_unrevoked`) after a real
/// force-unlock, when the check gets no answer. The hold is kept and the
/// watchdog is told to check it; when that check gets no answer either, it
/// is never tried again for a hold the watchdog does not renew (an explicit
/// lease), and only at the next renewal for one it does. W1's attempt took
/// the free lock, a force-unlock removed it and W2 took it, and W1 returns
/// a guard that believes it holds the lock W2 holds, for its whole lease.
async fn an_unanswered_recheck_after_a_force_unlock(protocol: Protocol, explicit: bool) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let first = LockClient::with_config(
        fairlock::ClientConfig::from_url(&proxy.url())
            .unwrap()
            .protocol(protocol)
            .response_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap();
    let second = client(&server, protocol).await;
    let operator = client(&server, protocol).await;
    let name = "recheck-unanswered";
    first
        .fair_lock(name)
        .unwrap()
        .lock()
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
    proxy.delay_command_replies(Duration::from_millis(1_000));
    let started = std::time::Instant::now();
    let w1 = tokio::spawn({
        let lock = first.fair_lock(name).unwrap();
        async move {
            if explicit {
                lock.lock_with_lease(Duration::from_secs(30)).await
            } else {
                lock.lock().await
            }
        }
    });
    let force = operator.fair_lock(name).unwrap();
    let mut forced = false;
    while !forced && started.elapsed() < Duration::from_secs(1) {
        forced = force.force_unlock().await.unwrap();
    }
    assert!(forced, "{protocol}: W1's attempt never took the lock");
    let w2 = second.fair_lock(name).unwrap().lock().await.unwrap();
    // W1's check goes out when its attempt's reply comes (~1 s); its reply,
    // and that of the watchdog's check after it, come after the response
    // timeout.
    tokio::time::sleep(Duration::from_millis(500).saturating_sub(started.elapsed())).await;
    proxy.delay_command_replies(Duration::from_millis(3_000));
    let w1 = tokio::time::timeout(Duration::from_secs(10), w1)
        .await
        .expect("W1 answers")
        .unwrap();
    let returned = started.elapsed();
    eprintln!(
        "{protocol} explicit={explicit}: W1 after {returned:?}: {:?}",
        w1.as_ref().map(|g| g.is_held())
    );
    // The watchdog's check is in flight, 3 s late: it times out (2 s).
    tokio::time::sleep(Duration::from_millis(2_600)).await;
    proxy.delay_command_replies(Duration::ZERO);
    // Both checks have failed by now; the network is healthy again.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    eprintln!(
        "{protocol} explicit={explicit}: at {:?} W1 {:?}",
        started.elapsed(),
        w1.as_ref().map(|g| g.is_held())
    );
    if let Ok(w1) = &w1 {
        let both = w1.is_held() && w2.is_held();
        let at = started.elapsed();
        // How long it lasts: past a renew interval (10 s by default).
        if both {
            tokio::time::sleep(Duration::from_secs(11)).await;
        }
        assert!(
            !both,
            "{protocol} explicit={explicit}: W1 (returned after {returned:?}) still believes \
             the lock W2 holds, {at:?} after a force-unlock (and {:?} after it: {})",
            started.elapsed(),
            w1.is_held() && w2.is_held()
        );
    }
    drop(w1);
    w2.unlock().await.unwrap();
    for c in [&first, &second, &operator] {
        c.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_recheck_of_an_explicit_lease_is_retried_native() {
    an_unanswered_recheck_after_a_force_unlock(Protocol::Native, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_recheck_of_an_explicit_lease_is_retried_redisson() {
    an_unanswered_recheck_after_a_force_unlock(Protocol::Redisson, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_recheck_of_a_watchdog_hold_is_retried_native() {
    an_unanswered_recheck_after_a_force_unlock(Protocol::Native, false).await;
}

/// A force-unlock tells the holder at once. Before: the holder learned
/// at its next renewal (lease / 3: 10 s by default).
///
/// Found by the safety review (finding 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_reaches_the_holder_at_once() {
    for protocol in PROTOCOLS {
        for fair in [true, false] {
            let server = RedisServer::start();
            let client = connect(config(&server.url(), protocol)).await;
            let operator = connect(config(&server.url(), protocol)).await;
            let guard = if fair {
                client.fair_lock("forced").unwrap().lock().await.unwrap()
            } else {
                client.lock("forced").unwrap().lock().await.unwrap()
            };
            let lost = guard.lost();
            let forced = Instant::now();
            let released = if fair {
                operator.fair_lock("forced").unwrap().force_unlock().await
            } else {
                operator.lock("forced").unwrap().force_unlock().await
            };
            assert!(released.unwrap());
            tokio::time::timeout(Duration::from_secs(2), lost)
                .await
                .unwrap_or_else(|_| panic!("{protocol} fair={fair}: holder not told"));
            assert!(forced.elapsed() < Duration::from_secs(1));
            assert!(!guard.is_held());
            assert!(guard.unlock().await.unwrap_err().is_lock_lost());
        }
    }
}

/// A force-unlock tells the holder of an explicit lease too (the watchdog
/// never renews it, so no renewal would tell it).
///
/// Found by the safety review (finding 10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_unlock_reaches_an_explicit_lease_holder() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(config(&server.url(), protocol)).await;
        let operator = connect(config(&server.url(), protocol)).await;
        let guard = client
            .fair_lock("explicit")
            .unwrap()
            .lock_with_lease(Duration::from_secs(60))
            .await
            .unwrap();
        let lost = guard.lost();
        operator
            .fair_lock("explicit")
            .unwrap()
            .force_unlock()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(2), lost)
            .await
            .unwrap_or_else(|_| panic!("{protocol}: holder not told"));
        // The explicit lease was not extended by the check.
        assert!(!support::is_held(&server, protocol, "explicit"));
    }
}

/// Adversary 2 (label only): the revocation listener keeps only the latest
/// payload (a `watch`), so a real force-unlock message followed by a forged
/// one naming another key before the listener reads it loses its key: the
/// loss is then counted as `expired`/`taken_over`, not `force_unlocked`.
///
/// Found by adversarial review 2 (label only), still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open: the revocation listener keeps only the latest payload (label only); see the session note"]
async fn adv2_force_unlock_during_forged_revocations_is_labelled_force_unlocked() {
    let server = RedisServer::start();
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let lock = client.fair_lock("adv2-label").unwrap();
    let guard = lock.lock().await.unwrap();
    let channel = format!("fairlock:revoked:{}", client.id());
    let flooder = {
        let conn_server = server.url();
        let channel = channel.clone();
        std::thread::spawn(move || {
            let mut conn = redis::Client::open(conn_server)
                .unwrap()
                .get_connection()
                .unwrap();
            let until = std::time::Instant::now() + Duration::from_millis(1500);
            while std::time::Instant::now() < until {
                let mut pipe = redis::pipe();
                for _ in 0..50 {
                    pipe.cmd("PUBLISH")
                        .arg(&channel)
                        .arg("fairlock:{x}:lock")
                        .ignore();
                }
                pipe.query::<()>(&mut conn).unwrap();
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = connect(config(&server.url(), Protocol::Native)).await;
    assert!(
        other
            .fair_lock("adv2-label")
            .unwrap()
            .force_unlock()
            .await
            .unwrap()
    );
    tokio::time::timeout(Duration::from_secs(15), guard.lost())
        .await
        .expect("lost");
    tokio::task::block_in_place(|| flooder.join().unwrap());
    let stats = client.statistics();
    assert_eq!(
        (
            stats.lost_force_unlocked,
            stats.lost_expired,
            stats.lost_taken_over
        ),
        (1, 0, 0),
        "{stats:?}"
    );
    client.shutdown().await;
}

/// The torture's `shared_owner` finding (20 minutes, commit beb9f95):
/// after every guard of a shared owner was released, the owner still held
/// the lock once. W waited first in line; its refresh attempt was on its
/// way when the release handed W the lock and a force-unlock (right after,
/// the combination `force_unlock_at_handoff`) passed it on to X. The
/// attempt then ran, found X holding and queued W again, under the same
/// secret. W read the grant message only after that reply, found it
/// authentic and half its life left, and went on with the revoked grant
/// (the revocation, coming after, only ended its guard) while still in
/// line. Its place was nobody's: X's release handed the lock to it, and
/// the next acquisition of W's owner read a hold count of 1 and counted a
/// re-entry on top of that grant: one hold more than the owner's guards,
/// until its lease ran out. A grant message older than the waiter's latest
/// queued reply is now only a wake-up: the next attempt claims the grant if
/// it is still the waiter's, and else W waits on in its place.
///
/// The proxy makes the order deterministic: W's attempt is held until the
/// handoff and the force-unlock ran; the grant message reaches W's client
/// and the revocation waits, so that nothing but the message's age can
/// tell W the grant is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_taken_before_the_waiters_attempt_ran_leaves_no_ghost_waiter() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let waiter = connect(config(&proxy.url(), Protocol::Native)).await;
    let holder = client(&server, Protocol::Native).await;
    let next = client(&server, Protocol::Native).await;
    let operator = client(&server, Protocol::Native).await;
    let name = "stale-grant";
    let lock = waiter.fair_lock(name).unwrap();
    // Scripts loaded, so that every later call of W is one EVALSHA.
    lock.lock().await.unwrap().unlock().await.unwrap();
    let owner = waiter.new_owner();
    let acquire = |lock: &fairlock::LockHandle| {
        let (lock, owner) = (lock.clone(), owner.clone());
        async move {
            let options = fairlock::AcquireOptions::new()
                .owner(owner)
                .wait(Duration::from_secs(30));
            lock.acquire(options).await
        }
    };

    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let mut w = tokio::spawn(acquire(&lock));
    common::until_queued(&server, name, 1).await;
    common::until_subscribed_n(&server, name, 1).await;
    let x = tokio::spawn({
        let lock = next.fair_lock(name).unwrap();
        async move { lock.lock().await }
    });
    common::until_queued(&server, name, 2).await;

    // W's next attempt (a plain wake-up makes it at once) is held.
    proxy.hold_requests();
    let sent = proxy.script_calls();
    let wake_channel = format!("fairlock:{{{name}}}:wake:{owner}");
    let _: i64 = server.cmd(&["PUBLISH", &wake_channel, "free"]);
    eventually(Duration::from_secs(10), "W's attempt sent", || {
        proxy.script_calls() > sent
    })
    .await;
    // The release hands the lock to W; its grant message reaches W's client.
    proxy.watch_pubsub(b"grant:");
    held.unlock().await.unwrap();
    eventually(Duration::from_secs(10), "the grant delivered to W", || {
        proxy.pubsub_delivered() > 0
    })
    .await;
    let granted: String = common::lock_field(&server, name, "token").unwrap();
    // The revocation waits; the force-unlock passes the lock on to X.
    proxy.hold_pubsub();
    assert!(
        operator
            .fair_lock(name)
            .unwrap()
            .force_unlock()
            .await
            .unwrap()
    );
    let x = tokio::time::timeout(Duration::from_secs(10), x)
        .await
        .expect("X is granted the force-unlocked lock")
        .unwrap()
        .unwrap();
    // W's attempt runs now: X holds the lock, W is queued again.
    let sent = proxy.script_calls();
    proxy.release_requests();
    // W either goes on with the grant it read (a guard), or takes it for a
    // wake-up and attempts again (and waits on).
    let early = tokio::select! {
        w = &mut w => Some(w.unwrap().unwrap().expect("granted")),
        () = eventually(Duration::from_secs(10), "W's next attempt", || {
            proxy.script_calls() > sent
        }) => None,
    };
    let ghost =
        early.is_some() && common::queued_owners(&server, name).contains(&owner.to_string());
    if let Some(guard) = &early {
        eprintln!(
            "W went on with token {:?} (the force-unlocked grant's: {granted}); still queued: {ghost}",
            guard.token()
        );
    }

    proxy.pass();
    x.unlock().await.unwrap();
    let first = match early {
        Some(guard) => guard,
        None => tokio::time::timeout(Duration::from_secs(10), w)
            .await
            .expect("W is granted after X")
            .unwrap()
            .unwrap()
            .expect("granted"),
    };
    let stale = first.token().is_some_and(|t| t.to_string() == granted);
    let _ = first.unlock().await;
    // The next acquisition of W's owner, as the torture's next round.
    let again = tokio::time::timeout(Duration::from_secs(10), acquire(&lock))
        .await
        .expect("W's owner acquires again")
        .unwrap()
        .expect("granted");
    again.unlock().await.unwrap();
    waiter.flush().await;
    let count = lock.hold_count(&owner).await.unwrap();
    assert!(
        count == 0 && !ghost && !stale,
        "after every guard was released, W's owner holds {name} {count} time(s) \
         (W went on with the force-unlocked grant {granted}: {stale}, while still queued: {ghost})"
    );
    for c in [&waiter, &holder, &next, &operator] {
        c.shutdown().await;
    }
}

/// A force-unlock reaches a holder whose pub/sub connection is slow while
/// that connection's task waits for the reply of a command of its own (an
/// UNSUBSCRIBE here: a waiter of the same client leaving another lock; a
/// SUBSCRIBE or the health PING alike). Before, the task read no message
/// until that reply came: the revocation, already received, waited behind
/// it, and the holder kept believing in the lock another holder had been
/// given for as long as the reply took. That was the late W1 of
/// `a_force_unlock_right_after_a_handoff_leaves_one_holder` (200-400 ms in
/// about one trial in five on a loaded machine): when the revocation
/// arrived just after the grant rather than with it, the grant made W1 the
/// holder, its wake-up channel was unsubscribed, and the revocation waited
/// for that UNSUBSCRIBE's reply, one pub/sub delay (or the health PING's,
/// sent just before). Now messages are routed while a command waits: the
/// holder's `lost()` resolves one round trip after the revocation arrives.
///
/// Deterministic: messages reach the holder's client 2 s late; the server
/// is paused (2 s) right after the force-unlock, so that the UNSUBSCRIBE
/// sent then is answered only 4 s after the force-unlock, while the
/// revocation arrives after 2 s. The holder's check of the revocation
/// itself waits for the server (2 s). So the holder hears of it after 2 s
/// and one round trip, and would after 4 s with the bug: the bound allows
/// 1.2 s for the round trip on a loaded machine (and any stall of the
/// whole machine on top), and stays below the bug's 4 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revocation_is_read_while_a_pubsub_command_waits_for_its_reply() {
    let delay = Duration::from_secs(2);
    let paused_for = Duration::from_secs(2);
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        proxy.delay_pubsub(delay);
        // A response timeout past the UNSUBSCRIBE's 4 s: the command
        // waits for its reply, as it would with the bug.
        let holder =
            connect(config(&proxy.url(), protocol).response_timeout(Duration::from_secs(10))).await;
        let operator = client(&server, protocol).await;
        let other = client(&server, protocol).await;
        let guard = holder.fair_lock("revoked").unwrap().lock().await.unwrap();
        // A waiter of the holder's client on another lock: subscribed.
        let blocker = other.fair_lock("busy").unwrap().lock().await.unwrap();
        let waiting = tokio::spawn({
            let lock = holder.fair_lock("busy").unwrap();
            async move { lock.lock().await }
        });
        queued(&server, protocol, "busy", 1).await;
        eventually(Duration::from_secs(10), "the waiter subscribed", || {
            !server.wait_channels().is_empty()
        })
        .await;
        let starvation = support::StarvationMonitor::start();
        let forced_at = Instant::now();
        assert!(
            operator
                .fair_lock("revoked")
                .unwrap()
                .force_unlock()
                .await
                .unwrap()
        );
        let pause = server.pause();
        // The waiter leaves: its channel is unsubscribed, the reply comes
        // once the server runs again, one pub/sub delay later.
        waiting.abort();
        tokio::time::sleep(paused_for).await;
        drop(pause);
        // On a loaded machine the pause may outlast `paused_for`: the
        // revocation's check then waits for it too.
        let unpaused = forced_at.elapsed();
        let acted = tokio::time::timeout(Duration::from_secs(10), guard.lost()).await;
        assert!(
            acted.is_ok(),
            "{protocol}: lost() not resolved {:?} after the force-unlock (the server ran again \
             after {unpaused:?})",
            forced_at.elapsed()
        );
        let took = forced_at.elapsed();
        let stalled = starvation.stop();
        eprintln!(
            "{protocol}: lost() {took:?} after the force-unlock (the revocation arrived after {delay:?})"
        );
        // The revocation arrives `delay` after the force-unlock; its check
        // is one round trip once the server runs again. The UNSUBSCRIBE's
        // reply comes `unpaused + delay` after it (2 s later at least).
        let bound = delay.max(unpaused) + Duration::from_millis(1200) + stalled;
        assert!(
            took <= bound,
            "{protocol}: lost() {took:?} after the force-unlock; the revocation arrived after \
             {delay:?}, the server ran again after {unpaused:?} (bound {bound:?}, of which the \
             machine's stall {stalled:?})"
        );
        assert!(!guard.is_held());
        drop(guard);
        blocker.unlock().await.unwrap();
        for c in [&holder, &operator, &other] {
            c.shutdown().await;
        }
    }
}
