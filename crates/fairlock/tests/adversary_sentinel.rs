//! Adversarial tests of the Sentinel support (real processes: a master, a
//! replica and three sentinels from `fairlock_test_support::Sentinel`).
//!
//! Each "Finding N" test failed on the code it was written against and
//! documents one finding of the review (all fixed since).

use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, Sentinel};

fn is_master(server: &RedisServer) -> bool {
    let info: String = server.cmd(&["INFO", "replication"]);
    info.contains("role:master")
}

fn named_master(sentinel: &RedisServer) -> String {
    let (ip, port): (String, u16) = sentinel.cmd(&[
        "SENTINEL",
        "GET-MASTER-ADDR-BY-NAME",
        support::sentinel::MASTER_NAME,
    ]);
    format!("{ip}:{port}")
}

fn url_of(sentinels: &[&RedisServer]) -> String {
    let hosts: Vec<String> = sentinels.iter().map(|s| s.addr()).collect();
    format!(
        "redis+sentinel://{}/{}",
        hosts.join(","),
        support::sentinel::MASTER_NAME
    )
}

async fn client(url: &str, protocol: Protocol) -> LockClient {
    support::init_tracing();
    let config = ClientConfig::from_url(url)
        .expect("sentinel url")
        .protocol(protocol)
        .response_timeout(Duration::from_millis(500))
        .retry_budget(Duration::from_secs(20));
    LockClient::with_config(config)
        .await
        .expect("connect through the sentinels")
}

/// Poll `check` until it holds or `limit` passes (blocking helpers only).
async fn wait_until(limit: Duration, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Finding 1: the `+switch-master` listener waits forever on a sentinel
/// whose connection went silent (process paused, network stalled): nothing
/// pings it and nothing bounds the wait, so it never moves to the next
/// sentinel, and a client that sends no command during the failover never
/// learns of it. After a `SENTINEL FAILOVER`, the old master stays a
/// writable master until the sentinels convert it (seconds later): the
/// idle client acquires there while another client holds the same lock on
/// the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_listener_on_a_silent_sentinel_misses_the_failover() {
    idle_client_follows_a_manual_failover(true).await;
}

/// The control of finding 1: with every sentinel live, the idle client
/// follows the same failover (held up).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_follows_a_manual_failover_with_live_sentinels() {
    idle_client_follows_a_manual_failover(false).await;
}

async fn idle_client_follows_a_manual_failover(silence_first_sentinel: bool) {
    let deployment = Sentinel::start_with(1, 3);
    let sentinels = deployment.sentinels();
    let old_master = deployment.master().addr();
    let replica = &deployment.replicas()[0];
    let protocol = Protocol::Native;

    // A listens on the first sentinel of its URL.
    let a = client(&deployment.url(), protocol).await;
    wait_until(Duration::from_secs(10), "A's switch listener", || {
        let clients: String = sentinels[0].cmd(&["CLIENT", "LIST"]);
        clients.contains("cmd=subscribe") || clients.contains("sub=1")
    })
    .await;
    let a_lock = a.fair_lock("adv-split").unwrap();
    // A is in use before the failover.
    a_lock.lock().await.unwrap().unlock().await.unwrap();

    // The first sentinel goes silent (its TCP connections stay open).
    let _silent = silence_first_sentinel.then(|| sentinels[0].pause());
    let _: String = sentinels[1].cmd(&["SENTINEL", "FAILOVER", support::sentinel::MASTER_NAME]);
    wait_until(Duration::from_secs(60), "the promotion", || {
        named_master(&sentinels[1]) == replica.addr()
            && named_master(&sentinels[2]) == replica.addr()
            && is_master(replica)
    })
    .await;
    let switched = Instant::now();

    // B, through the live sentinels, holds the lock on the new master.
    let b = client(&url_of(&[&sentinels[1], &sentinels[2]]), protocol).await;
    let b_guard = b
        .fair_lock("adv-split")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("B acquires on the new master");
    assert!(support::is_held(replica, protocol, "adv-split"));

    // Give A time to follow (a `+switch-master` reaches a live listener
    // within milliseconds).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a_guard = a_lock.try_lock().await.unwrap();
    let old_still_master = is_master(deployment.master());
    eprintln!(
        "{:?} after the switch: A acquired: {}, old master {old_master} still master: \
         {old_still_master}",
        switched.elapsed(),
        a_guard.is_some()
    );
    assert!(
        a_guard.is_none(),
        "A acquired the lock B holds on the new master {} (A still on the old master \
         {old_master}, {:?} after the sentinels agreed on the switch; B's token {:?}, A's {:?})",
        replica.addr(),
        switched.elapsed(),
        b_guard.token(),
        a_guard.as_ref().and_then(|g| g.token()),
    );
    b_guard.unlock().await.unwrap();
}

/// Finding 2: the connections kept for `WAIT` (`min_replicas`) are reused
/// without a check and never reconnect: after the master restarted (and
/// is back, with its replica linked), the next acquisition is granted,
/// then fails with `Error::Connection` on the dead pooled connection and
/// is undone, although the server answered throughout the call. With the
/// pool filled by concurrent acquisitions, up to 8 acquisitions in a row
/// fail this way. The sync is not retried either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_after_a_master_restart() {
    let mut master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let linked = |replica: &RedisServer| {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    };
    wait_until(Duration::from_secs(20), "the replica to link", || {
        linked(&replica)
    })
    .await;
    let client = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, Duration::from_secs(2))
            .retry_budget(Duration::from_secs(10))
    })
    .await;
    let lock = client.fair_lock("adv-wait-pool").unwrap();
    lock.lock().await.expect("met").unlock().await.expect("met");

    master.restart();
    wait_until(Duration::from_secs(30), "the replica to link again", || {
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

/// Held up: hostile and malformed sentinel URLs get a typed error, never a
/// panic (parsed without any server).
#[test]
fn bad_sentinel_urls_are_typed_errors() {
    let nasty = [
        "redis+sentinel://",
        "redis+sentinel:///",
        "redis+sentinel://@/",
        "redis+sentinel://%/s",
        "redis+sentinel://u:%@h/s",
        "redis+sentinel://u:%4@h/s",
        "redis+sentinel://u:%é1@h/s",
        "redis+sentinel://u:%+1@h/s",
        "redis+sentinel://h/%",
        "redis+sentinel://h/%ff",
        "redis+sentinel://h/s/99999999999999999999999",
        "redis+sentinel://h:65536/s",
        "redis+sentinel://[/s",
        "redis+sentinel://[]/s",
        "redis+sentinel://[::1]x/s",
        "redis+sentinel://[::1]:/s",
        "redis+sentinel://h:/s",
        "redis+sentinel://,/s",
        "redis+sentinel://h h/s",
        "REDIS+SENTINEL://h/s/1/",
        "rediss+sentinel://ü:ö@ä/ß",
        "redis+sentinel://a@b@c/s",
        "redis+sentinel://h/s\0",
        "redis+sentinel://\u{feff}h/s",
    ];
    for url in nasty {
        let outcome = std::panic::catch_unwind(|| ClientConfig::from_url(url).map(|_| ()));
        match outcome {
            Err(_) => panic!("{url:?} panicked"),
            Ok(Err(err)) => assert!(err.is_invalid_input(), "{url:?}: {err:?}"),
            Ok(Ok(())) => {}
        }
    }
}

/// Held up: a hostile client cannot forge `+switch-master` on a sentinel
/// (Sentinel accepts PUBLISH only on its hello channel), and a
/// `+switch-master` published on the data master reaches no fairlock
/// listener (they listen on the sentinels): the client stays on the true
/// master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_switch_master_is_refused_or_ignored() {
    let deployment = Sentinel::start_with(1, 3);
    let replica = &deployment.replicas()[0];
    let a = client(&deployment.url(), Protocol::Native).await;
    let forged = format!(
        "{} {} {} {}",
        support::sentinel::MASTER_NAME,
        deployment.master().addr().replace(':', " "),
        replica.addr().replace(':', " "),
        ""
    );
    let mut conn = deployment.sentinels()[0].conn();
    let refused: Result<i64, _> = fairlock_redis_publish(&mut conn, &forged);
    assert!(
        refused.is_err(),
        "a sentinel accepted a forged +switch-master"
    );
    let _: i64 = deployment
        .master()
        .cmd(&["PUBLISH", "+switch-master", forged.trim_end()]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let guard = a
        .fair_lock("adv-forged")
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    assert!(support::is_held(
        deployment.master(),
        Protocol::Native,
        "adv-forged"
    ));
    guard.unlock().await.unwrap();
}

fn fairlock_redis_publish(conn: &mut redis::Connection, payload: &str) -> redis::RedisResult<i64> {
    redis::cmd("PUBLISH")
        .arg("+switch-master")
        .arg(payload)
        .query(conn)
}

/// Finding 3: the `WAIT` of `min_replicas` is bounded by its timeout plus a
/// fixed 3 s (and its connect by a fixed 3 s), not by the client's response
/// and connect timeouts: a master that stalls while a `try_lock` waits for
/// its replicas holds the call for the `WAIT` timeout + 3 s, whatever
/// `response_timeout` says (promise 2: every wait ends within its bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_wait_is_bounded_by_the_response_timeout() {
    const WAIT: Duration = Duration::from_secs(1);
    const RESPONSE: Duration = Duration::from_millis(300);
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_until(Duration::from_secs(20), "the replica to link", || {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    })
    .await;
    let client = support::client_with(&master, Protocol::Native, |c| {
        c.min_replicas(1, WAIT)
            .response_timeout(RESPONSE)
            .retry_budget(Duration::from_millis(500))
    })
    .await;
    let lock = client.fair_lock("adv-wait-bound").unwrap();
    lock.lock().await.expect("met").unlock().await.expect("met");

    // The replica stops acknowledging: every WAIT now lasts its timeout.
    let _replica_paused = replica.pause();
    let started = Instant::now();
    let attempt = tokio::spawn(async move {
        let outcome = lock.try_lock().await.map(|g| g.is_some());
        (outcome, started.elapsed())
    });
    // Granted, now waiting for the replica: the master stalls.
    wait_until(Duration::from_secs(5), "the grant", || {
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
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    wait_until(Duration::from_secs(20), "the replica to link", || {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    })
    .await;
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_acquisition_dropped_during_wait_is_released() {
    let (master, replica, client) =
        master_with_paused_replica_client(Duration::from_secs(20)).await;
    let _paused = replica.pause();
    let lock = client.fair_lock("adv-wait-drop").unwrap();
    let attempt = tokio::spawn(async move { lock.lock().await.map(drop) });
    wait_until(Duration::from_secs(5), "the grant", || {
        support::is_held(&master, Protocol::Native, "adv-wait-drop")
    })
    .await;
    attempt.abort();
    let started = Instant::now();
    wait_until(Duration::from_secs(5), "the background release", || {
        !support::is_held(&master, Protocol::Native, "adv-wait-drop")
    })
    .await;
    eprintln!("released {:?} after the drop", started.elapsed());
}

/// Held up: a re-entry that the replicas did not acknowledge is undone
/// alone; the outer hold stays and its count is right.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_reentry_undo_keeps_the_outer_hold() {
    let (master, replica, client) =
        master_with_paused_replica_client(Duration::from_millis(500)).await;
    let lock = client.fair_lock("adv-wait-reenter").unwrap();
    let outer = lock.lock().await.expect("met");
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
    outer.unlock().await.expect("the outer hold is still ours");
    assert!(!support::is_held(
        &master,
        Protocol::Native,
        "adv-wait-reenter"
    ));
}
