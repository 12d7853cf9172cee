//! Redis Sentinel and replica acknowledgement, on real processes: a master
//! with a replica watched by three sentinels (`fairlock_test_support::
//! Sentinel`), clients connected with `redis+sentinel://` URLs.
//!
//! - FIFO order and mutual exclusion (an exact non-atomic counter) through
//!   the sentinels, both protocols;
//! - SIGKILL of the master while one client holds two locks and others
//!   wait: the waiters continue on the promoted replica within their
//!   budget, the holder of the lock that did not reach the replica is told
//!   (`lost()`, `unlock` says `LockLost`), the one that did keeps it, and
//!   native fencing tokens keep increasing;
//! - `min_replicas`: met with a live replica; with the replica killed, a
//!   typed error within the timeout and nothing left held;
//! - sentinel URLs that are bad, name an unknown service or no live
//!   sentinel; hostile ones are typed errors, never a panic;
//! - a failover followed by a client that sends nothing meanwhile, also
//!   when the sentinel it listens to has gone silent; a forged
//!   `+switch-master` is refused or ignored.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, Error, LockClient, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, Sentinel, eventually, lock_keys, queue_len};

async fn sentinel_client(
    deployment: &Sentinel,
    protocol: Protocol,
    adjust: impl FnOnce(ClientConfig) -> ClientConfig,
) -> LockClient {
    support::init_tracing();
    let config = ClientConfig::from_url(&deployment.url())
        .expect("sentinel url")
        .protocol(protocol);
    LockClient::with_config(adjust(config))
        .await
        .expect("connect through the sentinels")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_and_mutual_exclusion_through_sentinel() {
    let deployment = Sentinel::start_with(1, 3);
    for protocol in PROTOCOLS {
        fifo_order(&deployment, protocol).await;
        mutual_exclusion(&deployment, protocol).await;
    }
}

async fn fifo_order(deployment: &Sentinel, protocol: Protocol) {
    let master = deployment.master();
    let clients = [
        sentinel_client(deployment, protocol, |c| c).await,
        sentinel_client(deployment, protocol, |c| c).await,
    ];
    let name = format!("fifo-{protocol}");
    let holder = clients[0].fair_lock(&name).unwrap().lock().await.unwrap();
    const WAITERS: usize = 6;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % 2].fair_lock(&name).unwrap();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("lock");
            order.lock().unwrap().push(i);
            guard.unlock().await.expect("unlock");
        }));
        eventually(Duration::from_secs(10), "waiter queued", || {
            queue_len(master, protocol, &name) == i + 1
        })
        .await;
    }
    holder.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "{protocol}"
    );
    support::assert_clean_for(master, protocol, &name);
    for client in clients {
        client.shutdown().await;
    }
}

/// 4 tasks over 2 clients, 100 non-atomic GET/SET increments each.
async fn mutual_exclusion(deployment: &Sentinel, protocol: Protocol) {
    let master = deployment.master();
    let clients = [
        sentinel_client(deployment, protocol, |c| c).await,
        sentinel_client(deployment, protocol, |c| c).await,
    ];
    let name = format!("counter-lock-{protocol}");
    let counter = format!("counter-{protocol}");
    const TASKS: usize = 4;
    const ROUNDS: usize = 100;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = clients[t % 2].clone();
        let (name, counter, url) = (name.clone(), counter.clone(), master.url());
        tasks.push(tokio::spawn(async move {
            let mut conn = support::patient_connection(&url).await;
            for _ in 0..ROUNDS {
                let guard = client.fair_lock(&name).unwrap().lock().await.unwrap();
                let value: Option<u64> = redis::cmd("GET")
                    .arg(&counter)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                redis::cmd("SET")
                    .arg(&counter)
                    .arg(value.unwrap_or(0) + 1)
                    .query_async::<()>(&mut conn)
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(
        master.cmd::<usize>(&["GET", &counter]),
        TASKS * ROUNDS,
        "{protocol}"
    );
    support::assert_clean_for(master, protocol, &name);
    for client in clients {
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_while_held_and_waited_on_native() {
    failover_while_held_and_waited_on(Protocol::Native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_while_held_and_waited_on_redisson() {
    failover_while_held_and_waited_on(Protocol::Redisson).await;
}

/// One client holds `kept` and `lost`; three waiters queue for `lost`. The
/// replica is made to miss `lost`'s grant (its lock key deleted there, as an
/// unreplicated write would be), then the master is SIGKILLed. The
/// sentinels promote the replica: `kept` stays held, `lost` is reported
/// lost to its holder and granted to the waiters in turn, each exclusive,
/// each with a token above every token issued before the failover.
async fn failover_while_held_and_waited_on(protocol: Protocol) {
    let mut deployment = Sentinel::start_with(1, 3);
    // A failover takes the sentinels' down-after (1 s) plus an election:
    // generous budgets, so that a slow machine only makes it slower. The
    // lease outlasts a failover beside a busy suite (`kept`'s renewals fail
    // until it completes; 3 s was too short there, on Valkey).
    let settings = |c: ClientConfig| {
        c.lease(Duration::from_secs(10))
            .retry_budget(Duration::from_secs(60))
    };
    let holder_client = sentinel_client(&deployment, protocol, settings).await;
    let waiter_client = sentinel_client(&deployment, protocol, settings).await;
    let kept = holder_client
        .fair_lock("kept")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lost = holder_client
        .fair_lock("lost")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let tokens_before = [kept.token(), lost.token()];

    const WAITERS: usize = 3;
    let inside = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicUsize::new(0));
    let tokens_after = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for _ in 0..WAITERS {
        let lock = waiter_client.fair_lock("lost").unwrap();
        let (inside, granted, tokens_after) = (
            Arc::clone(&inside),
            Arc::clone(&granted),
            Arc::clone(&tokens_after),
        );
        waiters.push(tokio::spawn(async move {
            let guard = lock
                .try_lock_for(Duration::from_secs(90))
                .await
                .expect("the wait survives the failover")
                .expect("granted within the wait");
            assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
            tokens_after.lock().unwrap().push(guard.token());
            tokio::time::sleep(Duration::from_millis(50)).await;
            inside.store(false, Ordering::SeqCst);
            granted.fetch_add(1, Ordering::SeqCst);
            guard.unlock().await.expect("unlock after the failover");
        }));
    }
    let master = deployment.master();
    let replica = &deployment.replicas()[0];
    eventually(
        Duration::from_secs(10),
        "waiters queued and replicated",
        || {
            queue_len(master, protocol, "lost") == WAITERS
                && queue_len(replica, protocol, "lost") == WAITERS
                && support::is_held(replica, protocol, "kept")
                && support::is_held(replica, protocol, "lost")
        },
    )
    .await;
    // The replica misses the grant of `lost` (as if the master died before
    // replicating it).
    let _: () = replica.cmd(&["CONFIG", "SET", "replica-read-only", "no"]);
    let _: i64 = replica.cmd(&["DEL", &lock_keys(protocol, "lost").0]);
    let killed_at = Instant::now();
    deployment.master_mut().stop();
    let replica = &deployment.replicas()[0];

    tokio::time::timeout(Duration::from_secs(60), lost.lost())
        .await
        .expect("the holder of the lock that did not survive is told");
    let told_after = killed_at.elapsed();
    // Put down to the failover: either the renewals failed until the lease
    // ran out, or a renewal reached the new master and found it gone there.
    // `lost()` resolves on its own once the confirmed lease has passed
    // (the client cannot know more while the master is gone); the loss is
    // counted when the watchdog's next renewal fails, a third of the lease
    // later at most.
    eventually(Duration::from_secs(10), "the loss counted", || {
        holder_client.statistics().locks_lost() > 0
    })
    .await;
    let stats = holder_client.statistics();
    assert_eq!(
        stats.lost_failover + stats.lost_renewals_failed,
        1,
        "{protocol}: {stats:?}"
    );
    assert_eq!(stats.locks_lost(), 1, "{protocol}: {stats:?}");
    let unlocked = lost.unlock().await;
    assert!(
        matches!(unlocked, Err(Error::LockLost { .. })),
        "{protocol}: {unlocked:?}"
    );
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(90), waiter)
            .await
            .expect("no waiter hangs")
            .expect("waiter task");
    }
    let recovered_after = killed_at.elapsed();
    assert_eq!(granted.load(Ordering::SeqCst), WAITERS);
    let new_master = deployment.master_addr();
    assert_eq!(new_master, replica.addr(), "the replica was promoted");

    assert!(kept.is_held(), "{protocol}: the replicated lock survives");
    kept.unlock().await.expect("the surviving lock unlocks");
    if protocol == Protocol::Native {
        let before = tokens_before.iter().map(|t| t.unwrap()).max().unwrap();
        let after = tokens_after.lock().unwrap().clone();
        assert_eq!(after.len(), WAITERS);
        let mut previous = before;
        for token in after {
            let token = token.expect("native tokens");
            assert!(
                token > previous,
                "tokens {before} .. {token} not increasing"
            );
            previous = token;
        }
    }
    eprintln!(
        "{protocol}: holder told after {told_after:?}, all {WAITERS} waiters served after \
         {recovered_after:?} from the SIGKILL"
    );
    support::assert_clean_for(replica, protocol, "lost");
    support::assert_clean_for(replica, protocol, "kept");
    holder_client.shutdown().await;
    waiter_client.shutdown().await;
}

/// `true` once `server` says it is a replica (a server being reconfigured
/// may drop the connection: then not yet).
fn role_is_replica(server: &RedisServer) -> bool {
    let Ok(client) = redis::Client::open(server.url()) else {
        return false;
    };
    let Ok(mut conn) = client.get_connection() else {
        return false;
    };
    redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut conn)
        .is_ok_and(|info| info.contains("role:slave"))
}

fn replication_up(server: &RedisServer) -> bool {
    let info: String = server.cmd(&["INFO", "replication"]);
    info.contains("master_link_status:up")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_met_then_refused_with_nothing_held() {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let mut replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    eventually(Duration::from_secs(10), "replica linked", || {
        replication_up(&replica)
    })
    .await;
    const TIMEOUT: Duration = Duration::from_millis(500);
    let mut clients = Vec::new();
    for protocol in PROTOCOLS {
        let client = support::client_with(&master, protocol, |c| c.min_replicas(1, TIMEOUT)).await;
        let lock = client.fair_lock("acked").unwrap();
        // Acknowledged: the replica had the lock while it was held, and its
        // release once the unlock returned. (A loaded machine's replica may
        // miss the short window: tried again, see `hold_acknowledged`.)
        support::hold_acknowledged(&lock, || {
            assert!(support::is_held(&replica, protocol, "acked"), "{protocol}");
        })
        .await
        .expect("acquisition and release acknowledged by the replica");
        assert!(!support::is_held(&replica, protocol, "acked"), "{protocol}");
        clients.push((protocol, client));
    }

    replica.stop();
    for (protocol, client) in clients {
        let lock = client.fair_lock("acked").unwrap();
        let started = Instant::now();
        let refused = lock.lock().await;
        let took = started.elapsed();
        match refused {
            Err(Error::ReplicasNotSynced {
                wanted: 1,
                acked: 0,
                what: "acquisition",
                ..
            }) => {}
            other => panic!("{protocol}: {other:?}"),
        }
        // The WAIT timeout plus round trips; generous for a loaded machine.
        assert!(
            took < TIMEOUT + Duration::from_secs(5),
            "{protocol}: {took:?}"
        );
        assert!(!lock.is_locked().await.unwrap(), "{protocol}: left held");
        support::assert_clean_for(&master, protocol, "acked");
        client.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_urls_and_services() {
    for (url, expected) in [
        ("redis+sentinel://127.0.0.1:1", "service name is missing"),
        ("redis+sentinel://a:1,,b:2/svc", "empty entry"),
        ("redis+sentinel://a:70000/svc", "1 to 65535"),
        ("redis+sentinel://a:1/svc/db", "invalid database number"),
        (
            "rediss+sentinel://u:hunter2@a:1/svc/1/2",
            "too many path segments",
        ),
    ] {
        let shown = ClientConfig::from_url(url).unwrap_err().to_string();
        assert!(shown.contains(expected), "{url}: {shown}");
        assert!(shown.contains(ClientConfig::URL_FORMS), "{url}: {shown}");
        assert!(!shown.contains("hunter2"), "{url}: {shown}");
    }
    let config = ClientConfig::from_url("redis+sentinel://u:hunter2@h1:1,h2/svc/2")
        .unwrap()
        .sentinel_auth("admin", "s3cret");
    let shown = format!("{config:?}");
    assert!(
        !shown.contains("hunter2") && !shown.contains("s3cret"),
        "{shown}"
    );
    assert!(shown.contains("svc via h1:1,h2:26379"), "{shown}");

    let deployment = Sentinel::start_with(0, 1);
    let wrong_service = deployment.url().replace("/fairlock", "/nope");
    let err = LockClient::connect(&wrong_service).await.unwrap_err();
    assert!(
        matches!(&err, Error::InvalidConfig(m) if m.contains("\"nope\"")),
        "{err:?}"
    );
    // No sentinel listening: a connection error naming the sentinels.
    let nobody = RedisServer::start();
    let port = nobody.port();
    drop(nobody);
    let url = format!("redis+sentinel://127.0.0.1:{port}/fairlock");
    let config = ClientConfig::from_url(&url)
        .unwrap()
        .connect_timeout(Duration::from_secs(1));
    let err = LockClient::with_config(config).await.unwrap_err();
    assert!(err.is_connection(), "{err:?}");
}

/// `SENTINEL FAILOVER` demotes a live master: nothing breaks the client's
/// connections, the old master answers writes with READONLY and the
/// sentinels announce `+switch-master`. The holder keeps its (replicated)
/// lock and releases it on the new master; a waiter queued before the
/// failover is granted next, with a greater token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_command_is_followed() {
    let deployment = Sentinel::start_with(1, 3);
    let settings = |c: ClientConfig| {
        c.lease(Duration::from_secs(3))
            .retry_budget(Duration::from_secs(60))
    };
    let holder_client = sentinel_client(&deployment, Protocol::Native, settings).await;
    let waiter_client = sentinel_client(&deployment, Protocol::Native, settings).await;
    let guard = holder_client
        .fair_lock("demoted")
        .unwrap()
        .lock()
        .await
        .unwrap();
    let lock = waiter_client.fair_lock("demoted").unwrap();
    let waiter = tokio::spawn(async move {
        let guard = lock
            .try_lock_for(Duration::from_secs(90))
            .await
            .expect("the wait survives the failover")
            .expect("granted");
        let token = guard.token();
        guard.unlock().await.expect("unlock on the new master");
        token
    });
    let (master, replica) = (deployment.master(), &deployment.replicas()[0]);
    eventually(
        Duration::from_secs(10),
        "waiter queued and replicated",
        || {
            queue_len(master, Protocol::Native, "demoted") == 1
                && queue_len(replica, Protocol::Native, "demoted") == 1
                && support::is_held(replica, Protocol::Native, "demoted")
        },
    )
    .await;
    let _: String =
        deployment.sentinels()[0].cmd(&["SENTINEL", "FAILOVER", support::sentinel::MASTER_NAME]);
    eventually(Duration::from_secs(60), "the replica promoted", || {
        deployment.master_addr() == replica.addr() && role_is_replica(master)
    })
    .await;
    // The holder keeps the lock across the failover and releases it on the
    // new master (the old one would answer READONLY).
    assert!(guard.is_held());
    let token_before = guard.token().unwrap();
    guard.unlock().await.expect("release after the failover");
    let token_after = tokio::time::timeout(Duration::from_secs(90), waiter)
        .await
        .expect("the waiter is served")
        .unwrap()
        .unwrap();
    assert!(
        token_after > token_before,
        "{token_before} then {token_after}"
    );
    support::assert_clean_for(replica, Protocol::Native, "demoted");
    holder_client.shutdown().await;
    waiter_client.shutdown().await;
}

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

/// Finding 1: the `+switch-master` listener waits forever on a sentinel
/// whose connection went silent (process paused, network stalled): nothing
/// pings it and nothing bounds the wait, so it never moves to the next
/// sentinel, and a client that sends no command during the failover never
/// learns of it. After a `SENTINEL FAILOVER`, the old master stays a
/// writable master until the sentinels convert it (seconds later): the
/// idle client acquires there while another client holds the same lock on
/// the new master.
///
/// Found by the adversarial review of the Sentinel support (finding 1),
/// fixed since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_listener_on_a_silent_sentinel_misses_the_failover() {
    idle_client_follows_a_manual_failover(true).await;
}

/// The control of finding 1: with every sentinel live, the idle client
/// follows the same failover (held up).
///
/// From the adversarial review of the Sentinel support: a check that held.
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
    eventually(Duration::from_secs(10), "A's switch listener", || {
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
    eventually(Duration::from_secs(60), "the promotion", || {
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

/// Held up: hostile and malformed sentinel URLs get a typed error, never a
/// panic (parsed without any server).
///
/// From the adversarial review of the Sentinel support: a check that held.
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
///
/// From the adversarial review of the Sentinel support: a check that held.
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
