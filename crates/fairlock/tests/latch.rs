//! The count-down latch under both protocols: the keys, values and
//! messages each writes (`native`: `fairlock:{NAME}:latch...`; `redisson`:
//! Redisson's `RCountDownLatch`, shared with a stand-in of a Java client),
//! no wait returning before the count reached 0, 1,000 waiters woken by one
//! message, a party counting once (also when its reply was lost), a lost
//! message costing at most the re-check interval, expiry, bad data, the
//! blocking API, cancellation and a Redis Cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fairlock::{Error, LockClient, Protocol};
use fairlock_test_support as support;
use support::listener::Listener;
use support::{Cluster, PROTOCOLS, RedisServer, eventually};

/// A client whose waiters read the count again only every 100 s (a third
/// of a 300 s waiter ttl) when no message wakes them: a waiter that
/// returns within seconds was woken by a message.
async fn woken_by_messages_only(server: &RedisServer, protocol: Protocol) -> LockClient {
    support::client_with(server, protocol, |c| c.waiter_ttl(Duration::from_secs(300))).await
}

/// A client whose waiters read the count again every second (a third of a
/// 3 s waiter ttl) when no message wakes them.
async fn rechecking_every_second(server: &RedisServer, protocol: Protocol) -> LockClient {
    support::client_with(server, protocol, |c| c.waiter_ttl(Duration::from_secs(3))).await
}

fn native_key(name: &str) -> String {
    format!("fairlock:{{{name}}}:latch")
}

fn parties_key(name: &str) -> String {
    format!("fairlock:{{{name}}}:latch:parties")
}

fn native_channel(name: &str) -> String {
    format!("fairlock:{{{name}}}:latch:open")
}

fn redisson_channel(name: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{name}}}")
}

/// Every key on the server but fairlock's labels, sorted.
fn keys(server: &RedisServer) -> Vec<String> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    keys.retain(|k| !k.contains("labels"));
    keys.sort();
    keys
}

/// Redisson's `RCountDownLatch` steps (docs/latch.md, "redisson"), written
/// for this test as a stand-in of a Java client.
mod java {
    use super::*;

    fn run(server: &RedisServer, script: &str, name: &str, args: &[&str]) -> redis::Value {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(script).arg(2).arg(name).arg(redisson_channel(name));
        for arg in args {
            cmd.arg(*arg);
        }
        cmd.query(&mut server.conn()).expect("stand-in script")
    }

    /// trySetCount(n): ARGV the new-count message, n, the publish command.
    const TRY_SET: &str = r"
if redis.call('exists', KEYS[1]) ~= 0 then
  return 0
end
redis.call('set', KEYS[1], ARGV[2])
redis.call(ARGV[3], KEYS[2], ARGV[1])
return 1";

    /// countDown(): ARGV the zero-count message, the publish command.
    const COUNT_DOWN: &str = r"
local left = redis.call('decr', KEYS[1])
if left <= 0 then
  redis.call('del', KEYS[1])
end
if left == 0 then
  redis.call(ARGV[2], KEYS[2], ARGV[1])
end";

    pub fn try_set_count(server: &RedisServer, name: &str, n: u64) -> bool {
        run(server, TRY_SET, name, &["1", &n.to_string(), "publish"]) == redis::Value::Int(1)
    }

    pub fn count_down(server: &RedisServer, name: &str) {
        run(server, COUNT_DOWN, name, &["0", "publish"]);
    }

    /// getCount(): GET, an absent key read as 0.
    pub fn count(server: &RedisServer, name: &str) -> i64 {
        server.cmd::<Option<i64>>(&["GET", name]).unwrap_or(0)
    }
}

/// Wait until the server answered `calls` more script calls than `before`.
async fn until_scripts(server: &RedisServer, before: u64, calls: u64, what: &str) {
    eventually(Duration::from_secs(60), what, || {
        server.evalsha_calls() >= before + calls
    })
    .await;
}

/// The native latch's keys, values and message: a hash (count, expiry,
/// round) that lives the expiry, a parties set, the round published once
/// when the count reaches 0, then nothing left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_keys_values_and_message() {
    let server = RedisServer::start();
    let client = support::client(&server, Protocol::Native).await;
    let latch = client.count_down_latch("ready").unwrap();
    let mut listener = Listener::new(&server, &native_channel("ready"));
    assert_eq!(latch.count().await.unwrap(), 0, "absent is open");
    assert!(latch.try_set_count(2).await.unwrap());
    assert!(!latch.try_set_count(5).await.unwrap(), "counting already");
    let count: String = server.cmd(&["HGET", &native_key("ready"), "count"]);
    let expiry: String = server.cmd(&["HGET", &native_key("ready"), "expiry"]);
    let round: String = server.cmd(&["HGET", &native_key("ready"), "round"]);
    assert_eq!((count.as_str(), expiry.as_str()), ("2", "86400000"));
    assert_eq!(round.len(), 32);
    let pttl: i64 = server.cmd(&["PTTL", &native_key("ready")]);
    assert!(pttl > 86_300_000 && pttl <= 86_400_000, "{pttl}");
    assert!(
        listener.drain(&server).is_empty(),
        "setting publishes nothing"
    );

    assert_eq!(latch.count_down_as("a").await.unwrap(), 1);
    let parties: Vec<String> = server.cmd(&["SMEMBERS", &parties_key("ready")]);
    assert_eq!(parties, ["a"]);
    let info = latch.inspect().await.unwrap();
    assert_eq!((info.count, info.parties), (1, Some(1)));
    assert!(info.expires_in.unwrap() > Duration::from_secs(86_000));
    assert!(listener.drain(&server).is_empty());

    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert_eq!(listener.drain(&server), [round], "one message: the round");
    assert!(keys(&server).is_empty(), "{:?}", keys(&server));
    assert_eq!(latch.count_down().await.unwrap(), 0, "open: nothing");
    assert!(keys(&server).is_empty());
    assert!(listener.drain(&server).is_empty());
}

/// Redisson's bytes: the count under the name, '1' published when set or
/// deleted, '0' when a count-down takes it to 0, no expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_keys_values_and_messages() {
    let server = RedisServer::start();
    let client = support::client(&server, Protocol::Redisson).await;
    let latch = client.count_down_latch("gate").unwrap();
    let mut listener = Listener::new(&server, &redisson_channel("gate"));
    assert!(latch.try_set_count(2).await.unwrap());
    assert!(!latch.try_set_count(3).await.unwrap());
    assert_eq!(server.cmd::<String>(&["GET", "gate"]), "2");
    assert_eq!(server.cmd::<i64>(&["PTTL", "gate"]), -1, "no expiry");
    assert_eq!(listener.drain(&server), ["1"]);
    assert_eq!(latch.count_down().await.unwrap(), 1);
    assert_eq!(server.cmd::<String>(&["GET", "gate"]), "1");
    assert!(listener.drain(&server).is_empty());
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert_eq!(listener.drain(&server), ["0"]);
    assert!(keys(&server).is_empty());

    assert!(latch.try_set_count(4).await.unwrap());
    assert!(latch.delete().await.unwrap());
    assert_eq!(listener.drain(&server), ["1", "1"], "set, then delete");
    assert!(!latch.delete().await.unwrap());
    assert!(keys(&server).is_empty());
    let err = latch.count_down_as("a").await.unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    let err = latch
        .try_set_count_with_expiry(1, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
}

/// A Java client and this one on one latch: Java sets it and counts down,
/// our waiter wakes on its message; we set it and count down, the Java
/// client reads our counts and hears our '0'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_java_client_shares_the_latch() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server, Protocol::Redisson).await;
    let latch = client.count_down_latch("shared").unwrap();

    assert!(java::try_set_count(&server, "shared", 2));
    assert!(
        !latch.try_set_count(9).await.unwrap(),
        "Java's count is kept"
    );
    assert_eq!(latch.count().await.unwrap(), 2);
    let before = server.evalsha_calls();
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait().await })
    };
    // Its first read, and the one after subscribing.
    until_scripts(&server, before, 2, "the waiter read the count twice").await;
    java::count_down(&server, "shared");
    assert_eq!(latch.count().await.unwrap(), 1);
    assert!(!waiter.is_finished(), "returned before the count reached 0");
    java::count_down(&server, "shared");
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the Java count-down's message")
        .unwrap()
        .unwrap();

    // The other way: our setting and count-downs, as Java reads them.
    let mut java_awaits = Listener::new(&server, &redisson_channel("shared"));
    assert!(latch.try_set_count(2).await.unwrap());
    assert!(!java::try_set_count(&server, "shared", 7));
    assert_eq!(java::count(&server, "shared"), 2);
    latch.count_down().await.unwrap();
    assert_eq!(java::count(&server, "shared"), 1);
    java::count_down(&server, "shared");
    assert_eq!(java::count(&server, "shared"), 0);
    assert_eq!(java_awaits.drain(&server), ["1", "0"]);
    assert!(keys(&server).is_empty());
}

/// 1,000 waiters in one client: none returns before the count reached 0,
/// and one message wakes them all (the client re-checks only every 100 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_waiters_wake_on_one_message() {
    const WAITERS: u64 = 1_000;
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = woken_by_messages_only(&server, protocol).await;
        let latch = client.count_down_latch("crowd").unwrap();
        assert!(latch.try_set_count(3).await.unwrap());
        let opened = Arc::new(AtomicBool::new(false));
        let before = server.evalsha_calls();
        let waiters: Vec<_> = (0..WAITERS)
            .map(|_| {
                let (latch, opened) = (latch.clone(), Arc::clone(&opened));
                tokio::spawn(async move {
                    latch.wait().await.unwrap();
                    assert!(opened.load(Ordering::SeqCst), "returned before 0");
                })
            })
            .collect();
        until_scripts(&server, before, 2 * WAITERS, "every waiter read twice").await;
        latch.count_down().await.unwrap();
        latch.count_down().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(waiters.iter().all(|w| !w.is_finished()), "{protocol}");
        opened.store(true, Ordering::SeqCst);
        let started = Instant::now();
        latch.count_down().await.unwrap();
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(30), waiter)
                .await
                .unwrap_or_else(|_| panic!("{protocol}: a waiter stayed blocked"))
                .unwrap();
        }
        eprintln!(
            "{protocol}: {WAITERS} waiters woken {:?} after the last count-down",
            started.elapsed()
        );
        // The last waiter's leaving unsubscribes, from the router's task.
        eventually(Duration::from_secs(10), "the channel unsubscribed", || {
            server.wait_channels().is_empty()
        })
        .await;
    }
}

/// A party counts once: a repeated call, and a call sent again after its
/// reply was lost, leave the count as the first one did.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_counts_once() {
    let server = RedisServer::start();
    let client = support::client(&server, Protocol::Native).await;
    let latch = client.count_down_latch("parties").unwrap();
    assert!(latch.try_set_count(3).await.unwrap());
    assert_eq!(latch.count_down_as("a").await.unwrap(), 2);
    assert_eq!(latch.count_down_as("a").await.unwrap(), 2, "repeated");

    // The reply of b's count-down is lost: the call is sent again.
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .response_timeout(Duration::from_millis(300));
    let lossy = support::connect(config).await;
    let through = lossy.count_down_latch("parties").unwrap();
    proxy.hold_script_replies();
    let retried = tokio::spawn(async move { through.count_down_as("b").await });
    eventually(Duration::from_secs(10), "b's first call ran", || {
        server.cmd::<String>(&["HGET", &native_key("parties"), "count"]) == "1"
    })
    .await;
    proxy.cut_all();
    proxy.pass();
    let left = tokio::time::timeout(Duration::from_secs(30), retried)
        .await
        .expect("the retried call answered")
        .unwrap()
        .unwrap();
    assert_eq!(left, 1, "b counted once");
    assert_eq!(latch.count().await.unwrap(), 1);
    assert_eq!(latch.count_down_as("c").await.unwrap(), 0);
    assert!(keys(&server).is_empty(), "the parties go with the latch");

    for bad in ["", "a\nb", &"x".repeat(257)] {
        let err = latch.count_down_as(bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{bad:?}: {err:?}");
    }
}

/// A message lost (the latch opened without one) costs a waiter at most
/// the re-check interval: a third of the waiter ttl, 1 s here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_message_costs_at_most_the_recheck_interval() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = rechecking_every_second(&server, protocol).await;
        let latch = client.count_down_latch("quiet").unwrap();
        assert!(latch.try_set_count(1).await.unwrap());
        let before = server.evalsha_calls();
        let waiter = {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await })
        };
        until_scripts(&server, before, 2, "the waiter read twice").await;
        // Opened behind its back: no message.
        let key = match protocol {
            Protocol::Native => native_key("quiet"),
            _ => "quiet".to_owned(),
        };
        let started = Instant::now();
        let _: i64 = server.cmd(&["DEL", &key]);
        tokio::time::timeout(Duration::from_secs(4), waiter)
            .await
            .unwrap_or_else(|_| panic!("{protocol}: the re-check did not come"))
            .unwrap()
            .unwrap();
        eprintln!("{protocol}: lost message cost {:?}", started.elapsed());
    }
}

/// The pub/sub connection dies silently (the proxy drops its bytes) just
/// before the count reaches 0: the waiter still returns, within the
/// health check's detection (1 s + the response timeout) or the re-check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_subscription_does_not_strand_a_waiter() {
    let server = RedisServer::start();
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .waiter_ttl(Duration::from_secs(300))
        .response_timeout(Duration::from_millis(500));
    let client = support::connect(config).await;
    let direct = support::client(&server, Protocol::Native).await;
    let latch = client.count_down_latch("cut").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let before = server.evalsha_calls();
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait().await })
    };
    until_scripts(&server, before, 2, "the waiter read twice").await;
    proxy.blackhole_pubsub();
    let counter = direct.count_down_latch("cut").unwrap();
    assert_eq!(counter.count_down().await.unwrap(), 0);
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter returned after its subscription died")
        .unwrap()
        .unwrap();
}

/// A bounded wait ends within its bound and one response timeout however
/// the network behaves: here every byte to and from Redis is held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_ends_within_its_bound_when_redis_stalls() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = support::proxy::Proxy::start(server.port());
        let config = fairlock::ClientConfig::from_url(&proxy.url())
            .unwrap()
            .protocol(protocol)
            .response_timeout(Duration::from_millis(300));
        let client = support::connect(config).await;
        let latch = client.count_down_latch("stalled").unwrap();
        assert!(latch.try_set_count(1).await.unwrap());
        for stall_after_subscribing in [false, true] {
            if stall_after_subscribing {
                proxy.pass();
                let waiter = {
                    let latch = latch.clone();
                    tokio::spawn(async move { latch.wait_for(Duration::from_millis(700)).await })
                };
                eventually(Duration::from_secs(10), "subscribed", || {
                    !server.wait_channels().is_empty()
                })
                .await;
                proxy.stall();
                let started = Instant::now();
                let _ = waiter.await.unwrap();
                assert!(
                    started.elapsed() < Duration::from_millis(700 + 300 + 700),
                    "{protocol}"
                );
            } else {
                proxy.stall();
                let started = Instant::now();
                let _ = latch.wait_for(Duration::from_millis(500)).await;
                let took = started.elapsed();
                assert!(
                    took < Duration::from_millis(500 + 300 + 500),
                    "{protocol}: {took:?}"
                );
            }
        }
    }
}

/// A hostile client that reads the latch's hash and publishes its round
/// on the channel (the opening message) opens no waiter: a waiter returns
/// only on what it reads from the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_opening_message_opens_nobody() {
    let server = RedisServer::start();
    let client = woken_by_messages_only(&server, Protocol::Native).await;
    let latch = client.count_down_latch("forged").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let before = server.evalsha_calls();
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait().await })
    };
    until_scripts(&server, before, 2, "the waiter read twice").await;
    let round: String = server.cmd(&["HGET", &native_key("forged"), "round"]);
    let before = server.evalsha_calls();
    let heard: i64 = server.cmd(&["PUBLISH", &native_channel("forged"), &round]);
    assert_eq!(heard, 1, "the client's subscription heard it");
    until_scripts(&server, before, 1, "the waiter read again").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "a forged message opened a waiter");
    latch.count_down().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("opened by the count-down")
        .unwrap()
        .unwrap();
}

/// A flood of messages on the latch's channel (anyone can PUBLISH) makes
/// a waiter read the count at most once per 25 ms (or once per wake-up of
/// every waiter, when the connection fell behind, as often), not once per
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_messages_is_read_at_most_every_25_ms() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = woken_by_messages_only(&server, protocol).await;
        let latch = client.count_down_latch("flooded").unwrap();
        assert!(latch.try_set_count(1).await.unwrap());
        let before = server.evalsha_calls();
        let waiter = {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await })
        };
        until_scripts(&server, before, 2, "the waiter read twice").await;
        let channel = match protocol {
            Protocol::Native => native_channel("flooded"),
            _ => redisson_channel("flooded"),
        };
        let before = server.evalsha_calls();
        let started = Instant::now();
        // One message after another for 500 ms: a sustained flood.
        let mut conn = server.conn();
        tokio::task::spawn_blocking(move || {
            let until = Instant::now() + Duration::from_millis(500);
            while Instant::now() < until {
                let _: i64 = redis::cmd("PUBLISH")
                    .arg(&channel)
                    .arg("flood")
                    .query(&mut conn)
                    .unwrap();
            }
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let reads = server.evalsha_calls() - before;
        let gaps = (started.elapsed().as_millis() / 25) as u64;
        assert!(
            reads <= 2 * gaps + 4,
            "{protocol}: {reads} reads in {gaps} gaps of 25 ms"
        );
        assert!(
            !waiter.is_finished(),
            "{protocol}: a flood is not an opening"
        );
        latch.count_down().await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("opened")
            .unwrap()
            .unwrap();
        eprintln!("{protocol}: {reads} reads during the flood");
    }
}

/// A latch opened and set again before a waiter read it (its message
/// lost): the waiter sees another round and returns; one that arrives
/// after the new setting waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_set_again_releases_the_waiters_of_the_last_round() {
    let server = RedisServer::start();
    let client = rechecking_every_second(&server, Protocol::Native).await;
    let latch = client.count_down_latch("rounds").unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let before = server.evalsha_calls();
    let waiter = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.wait().await })
    };
    until_scripts(&server, before, 2, "the waiter read twice").await;
    // Opened and set again with no message in between.
    let _: i64 = server.cmd(&["DEL", &native_key("rounds")]);
    assert!(latch.try_set_count(1).await.unwrap());
    tokio::time::timeout(Duration::from_secs(4), waiter)
        .await
        .expect("the waiter of the last round returned")
        .unwrap()
        .unwrap();
    assert!(
        !latch.wait_for(Duration::from_millis(1500)).await.unwrap(),
        "a waiter of the new round waits"
    );
}

/// An abandoned native latch expires its expiry after its last set or
/// count-down, which opens it; a count-down pushes the expiry back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_latch_expires() {
    let server = RedisServer::start();
    let client = rechecking_every_second(&server, Protocol::Native).await;
    let latch = client.count_down_latch("abandoned").unwrap();
    let expiry = Duration::from_millis(1500);
    assert!(latch.try_set_count_with_expiry(3, expiry).await.unwrap());
    assert!(latch.count_down_as("p").await.unwrap() == 2);
    for key in [native_key("abandoned"), parties_key("abandoned")] {
        let pttl: i64 = server.cmd(&["PTTL", &key]);
        assert!(pttl > 0 && pttl <= 1500, "{key}: {pttl}");
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    latch.count_down().await.unwrap();
    let pttl: i64 = server.cmd(&["PTTL", &native_key("abandoned")]);
    assert!(pttl > 1000, "a count-down pushes the expiry back: {pttl}");
    let started = Instant::now();
    assert!(latch.wait_for(Duration::from_secs(10)).await.unwrap());
    assert!(started.elapsed() > Duration::from_millis(900));
    assert!(keys(&server).is_empty());
}

/// Other data under the latch's keys is refused with a typed error, and
/// nothing is written or deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_data_is_refused_and_left_alone() {
    let server = RedisServer::start();
    let native = support::client(&server, Protocol::Native).await;
    let redisson = support::client(&server, Protocol::Redisson).await;
    let cases: [(&LockClient, &str, &[&[&str]]); 6] = [
        (&native, "n1", &[&["SET", "fairlock:{n1}:latch", "app"]]),
        (
            &native,
            "n2",
            &[&[
                "HSET",
                "fairlock:{n2}:latch",
                "count",
                "x",
                "expiry",
                "1",
                "round",
                "ab",
            ]],
        ),
        (
            &native,
            "n3",
            &[&[
                "HSET",
                "fairlock:{n3}:latch",
                "count",
                "2",
                "expiry",
                "1000",
                "round",
                "ab",
                "more",
                "1",
            ]],
        ),
        (
            &native,
            "n4",
            &[
                &[
                    "HSET",
                    "fairlock:{n4}:latch",
                    "count",
                    "2",
                    "expiry",
                    "100000",
                    "round",
                    "ab",
                ],
                &["SET", "fairlock:{n4}:latch:parties", "app"],
            ],
        ),
        (&redisson, "r1", &[&["HSET", "r1", "a", "b"]]),
        (&redisson, "r2", &[&["SET", "r2", "12abc"]]),
    ];
    for (client, name, writes) in cases {
        for write in writes {
            let _: redis::Value = server.cmd(write);
        }
        let dump = || -> Vec<(String, Option<Vec<u8>>)> {
            keys(&server)
                .into_iter()
                .map(|k| {
                    let d = server.cmd(&["DUMP", &k]);
                    (k, d)
                })
                .collect()
        };
        let before = dump();
        let latch = client.count_down_latch(name).unwrap();
        let typed = |err: Error| {
            assert!(
                matches!(err, Error::NotALock { .. } | Error::WrongType { .. }),
                "{name}: {err:?}"
            );
        };
        typed(latch.try_set_count(1).await.unwrap_err());
        typed(latch.count_down().await.unwrap_err());
        typed(latch.count().await.unwrap_err());
        typed(latch.inspect().await.unwrap_err());
        typed(latch.wait_for(Duration::from_millis(10)).await.unwrap_err());
        typed(latch.delete().await.unwrap_err());
        if client.config().get_protocol() == Protocol::Native {
            typed(latch.count_down_as("p").await.unwrap_err());
        }
        assert_eq!(dump(), before, "{name}: nothing written");
    }
    let latch = native.count_down_latch("zero").unwrap();
    for bad in [0, fairlock::MAX_LATCH_COUNT + 1] {
        let err = latch.try_set_count(bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    }
    assert!(matches!(
        native.count_down_latch("").unwrap_err(),
        Error::InvalidName { .. }
    ));
}

/// Waits: a zero wait reads once, a bounded wait runs out, delete opens,
/// and a cancelled wait leaves nothing behind (no subscription, no key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_time_out_delete_opens_and_cancel_leaves_nothing() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = woken_by_messages_only(&server, protocol).await;
        let latch = client.count_down_latch("w").unwrap();
        assert!(latch.wait_for(Duration::ZERO).await.unwrap(), "open");
        assert!(latch.try_set_count(1).await.unwrap());
        assert!(!latch.wait_for(Duration::ZERO).await.unwrap());
        // Between zero and 1 ms, or past the longest duration: refused.
        for bad in [
            Duration::from_micros(500),
            fairlock::MAX_DURATION + Duration::from_secs(1),
        ] {
            assert!(
                matches!(
                    latch.wait_for(bad).await,
                    Err(Error::InvalidDuration { .. })
                ),
                "{protocol}: {bad:?}"
            );
        }
        let started = Instant::now();
        assert!(!latch.wait_for(Duration::from_millis(300)).await.unwrap());
        assert!(started.elapsed() >= Duration::from_millis(300));
        let before = keys(&server);

        let cancelled = {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await })
        };
        eventually(Duration::from_secs(10), "subscribed", || {
            !server.wait_channels().is_empty()
        })
        .await;
        cancelled.abort();
        eventually(Duration::from_secs(10), "unsubscribed", || {
            server.wait_channels().is_empty()
        })
        .await;
        assert_eq!(keys(&server), before, "{protocol}");

        let waiter = {
            let latch = latch.clone();
            tokio::spawn(async move { latch.wait().await })
        };
        eventually(Duration::from_secs(10), "subscribed", || {
            !server.wait_channels().is_empty()
        })
        .await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(latch.delete().await.unwrap());
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("delete opened the latch")
            .unwrap()
            .unwrap();
        assert!(keys(&server).is_empty());
    }
}

/// The blocking API: a thread waits, others count down.
#[test]
fn the_blocking_latch() {
    let server = RedisServer::start();
    for protocol in PROTOCOLS {
        support::init_tracing();
        let config = fairlock::ClientConfig::from_url(&server.url())
            .unwrap()
            .protocol(protocol);
        let client = fairlock::blocking::LockClient::with_config(config).unwrap();
        let name = format!("blocking-{protocol}");
        let latch = client.count_down_latch(&name).unwrap();
        assert!(latch.try_set_count(2).unwrap());
        assert!(!latch.wait_for(Duration::from_millis(50)).unwrap());
        let waiter = {
            let latch = latch.clone();
            std::thread::spawn(move || latch.wait())
        };
        assert_eq!(latch.count_down().unwrap(), 1);
        assert_eq!(latch.count().unwrap(), 1);
        assert_eq!(latch.inspect().unwrap().count, 1);
        std::thread::sleep(Duration::from_millis(100));
        assert!(!waiter.is_finished());
        assert_eq!(latch.count_down().unwrap(), 0);
        waiter.join().unwrap().unwrap();
        assert!(!latch.delete().unwrap());
        if protocol == Protocol::Native {
            assert!(
                latch
                    .try_set_count_with_expiry(1, Duration::from_secs(5))
                    .unwrap()
            );
            assert_eq!(latch.count_down_as("p").unwrap(), 0);
        }
        client.shutdown().unwrap();
    }
}

/// On a Redis Cluster, both protocols: a waiter is woken by the message
/// (sharded pub/sub where the cluster has it) and Redisson's channel is
/// refused for a name with braces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_on_a_cluster() {
    let cluster = Cluster::start();
    for protocol in PROTOCOLS {
        let client = support::cluster_client_with(&cluster, protocol, |c| {
            c.waiter_ttl(Duration::from_secs(300))
        })
        .await;
        let other = support::cluster_client_with(&cluster, protocol, |c| c).await;
        for name in ["alpha", "beta", "gamma"] {
            let latch = client.count_down_latch(name).unwrap();
            assert!(latch.try_set_count(2).await.unwrap());
            let waiter = {
                let latch = latch.clone();
                tokio::spawn(async move { latch.wait().await })
            };
            let counter = other.count_down_latch(name).unwrap();
            assert_eq!(counter.count_down().await.unwrap(), 1);
            // No event tells when the waiter listens; its re-read after
            // subscribing catches an opening before it.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(!waiter.is_finished(), "{protocol} {name}: before 0");
            assert_eq!(counter.count_down().await.unwrap(), 0);
            tokio::time::timeout(Duration::from_secs(20), waiter)
                .await
                .unwrap_or_else(|_| panic!("{protocol} {name}: not woken"))
                .unwrap()
                .unwrap();
        }
        let braces = client.count_down_latch("{tag}x");
        match protocol {
            Protocol::Redisson => assert!(
                matches!(&braces, Err(Error::InvalidName { reason, .. }) if !reason.contains("  ")),
                "{braces:?}"
            ),
            _ => assert!(braces.is_ok()),
        }
        client.shutdown().await;
        other.shutdown().await;
    }
}

/// A party counts once for as long as the latch lives: an anonymous
/// count-down that pushes the count's expiry back pushes the parties'
/// back too (else they expire first, and the party counts again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_party_counts_once_after_an_anonymous_count_down() {
    let server = RedisServer::start();
    let client = support::client(&server, Protocol::Native).await;
    let latch = client.count_down_latch("outlived").unwrap();
    let expiry = Duration::from_secs(3);
    assert!(latch.try_set_count_with_expiry(5, expiry).await.unwrap());
    let started = Instant::now();
    assert_eq!(latch.count_down_as("a").await.unwrap(), 4);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // The latch now lives until about 4.5 s; a's record must too.
    assert_eq!(latch.count_down().await.unwrap(), 3);
    tokio::time::sleep_until((started + Duration::from_millis(3300)).into()).await;
    assert_eq!(
        latch.count().await.unwrap(),
        3,
        "the latch lives 3 s after its last count-down (machine too slow?)"
    );
    assert_eq!(
        latch.count_down_as("a").await.unwrap(),
        3,
        "a counted down already"
    );
    let parties: i64 = server.cmd(&["PTTL", &parties_key("outlived")]);
    let count: i64 = server.cmd(&["PTTL", &native_key("outlived")]);
    assert!(
        parties >= count - 100,
        "parties {parties} ms, count {count} ms"
    );
}

/// Malformed counts under each protocol's keys (as another program could
/// write them) are typed errors, and nothing is written: Redisson's DECR
/// refuses a count with leading zeros, so the scripts refuse it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_counts_are_refused_and_left_alone() {
    let server = RedisServer::start();
    let native = support::client(&server, Protocol::Native).await;
    let redisson = support::client(&server, Protocol::Redisson).await;
    let bad = [
        "1e19",
        "-1",
        "nan",
        "inf",
        "9223372036854775808",
        "9007199254740992",
        "",
        " 3",
        "0x10",
    ];
    let redisson_bad = [
        "1e19",
        "nan",
        "9223372036854775808",
        "007",
        "-0",
        "00",
        "+3",
        "",
    ];
    let mut cases: Vec<(&LockClient, String)> = Vec::new();
    for (i, count) in bad.iter().enumerate() {
        let name = format!("n{i}");
        let _: i64 = server.cmd(&[
            "HSET",
            &native_key(&name),
            "count",
            count,
            "expiry",
            "100000",
            "round",
            "ab",
        ]);
        cases.push((&native, name));
    }
    for (i, count) in redisson_bad.iter().enumerate() {
        let name = format!("r{i}");
        let _: String = server.cmd(&["SET", &name, count]);
        cases.push((&redisson, name));
    }
    let dump = || -> Vec<(String, Option<Vec<u8>>)> {
        keys(&server)
            .into_iter()
            .map(|k| {
                let d = server.cmd(&["DUMP", &k]);
                (k, d)
            })
            .collect()
    };
    let before = dump();
    for (client, name) in &cases {
        let latch = client.count_down_latch(name).unwrap();
        fn typed<T: std::fmt::Debug>(name: &str, what: &str, result: fairlock::Result<T>) {
            assert!(
                matches!(result, Err(Error::NotALock { .. })),
                "{name} {what}: {result:?}"
            );
        }
        typed(name, "set", latch.try_set_count(1).await);
        typed(name, "down", latch.count_down().await);
        typed(name, "count", latch.count().await);
        typed(
            name,
            "wait",
            latch.wait_for(Duration::from_millis(10)).await,
        );
        typed(name, "delete", latch.delete().await);
    }
    assert_eq!(dump(), before, "nothing written");
}

/// A cluster of three masters whose node serving `key` announces a proxy's
/// port: the clients' connections to it go through the proxy. The proxy
/// and the node's own port.
async fn cluster_behind_a_proxy(key: &str) -> (Cluster, support::proxy::Proxy, u16) {
    let cluster = Cluster::start_with(3, 0);
    let node = cluster.node_for_key(key);
    let proxy = support::proxy::Proxy::start(node.port());
    let port = proxy.port().to_string();
    let _: () = node.cmd(&["CONFIG", "SET", "cluster-announce-port", &port]);
    let announced = format!(":{port}@");
    eventually(
        Duration::from_secs(30),
        "every node knows the proxy",
        || {
            cluster
                .nodes()
                .iter()
                .all(|n| n.cmd::<String>(&["CLUSTER", "NODES"]).contains(&announced))
        },
    )
    .await;
    let node_port = node.port();
    (cluster, proxy, node_port)
}

/// A native `try_set_count` whose reply is lost on a Redis Cluster (where
/// the client library sends it again after the dropped connection)
/// answers `true`: the second sending finds its own round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_try_set_count_with_its_reply_lost_answers_true_on_a_cluster() {
    let key = native_key("set-once");
    let (cluster, proxy, port) = cluster_behind_a_proxy(&key).await;
    let node = cluster.node(port);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let latch = client.count_down_latch("set-once").unwrap();
    // The script in the node's cache: its EVALSHA runs.
    assert!(latch.try_set_count(1).await.unwrap());
    assert!(latch.delete().await.unwrap());
    proxy.hold_script_replies();
    let setting = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.try_set_count(5).await })
    };
    eventually(Duration::from_secs(10), "the setting ran", || {
        node.cmd::<Option<String>>(&["HGET", &key, "count"])
            .as_deref()
            == Some("5")
    })
    .await;
    proxy.cut_all();
    proxy.pass();
    let answer = tokio::time::timeout(Duration::from_secs(30), setting)
        .await
        .expect("the setting answered")
        .unwrap();
    assert!(
        matches!(answer, Ok(true) | Err(Error::Connection { .. })),
        "this call set the count: {answer:?}"
    );
}

/// `count_down()` counts once, also on a Redis Cluster, whose connection
/// sends a call again by itself after a dropped connection: a count-down
/// whose reply is lost (the connection cut after the script ran) counts
/// once, as the party of its own it records. The node of the latch's slot
/// announces a proxy's port, so the client's connection to it goes through
/// the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_down_with_its_reply_lost_counts_once_on_a_cluster() {
    let key = native_key("once");
    let (cluster, proxy, port) = cluster_behind_a_proxy(&key).await;
    let node = cluster.node(port);
    let client = support::cluster_client_with(&cluster, Protocol::Native, |c| c).await;
    let latch = client.count_down_latch("once").unwrap();
    assert!(latch.try_set_count(10).await.unwrap());
    // The count-down script in the node's cache: its EVALSHA runs.
    assert_eq!(latch.count_down().await.unwrap(), 9);
    assert!(
        proxy.script_calls() >= 2,
        "the client goes through the proxy"
    );
    proxy.hold_script_replies();
    let counting = {
        let latch = latch.clone();
        tokio::spawn(async move { latch.count_down().await })
    };
    eventually(Duration::from_secs(10), "the count-down ran", || {
        node.cmd::<String>(&["HGET", &key, "count"]) == "8"
    })
    .await;
    proxy.cut_all();
    proxy.pass();
    let answer = tokio::time::timeout(Duration::from_secs(30), counting)
        .await
        .expect("the count-down answered")
        .unwrap();
    let count = node.cmd::<String>(&["HGET", &key, "count"]);
    assert_eq!(
        count, "8",
        "one count_down() counted twice (answer {answer:?})"
    );
}

/// The largest count, `MAX_LATCH_COUNT` (2^53 - 1), counts down exactly
/// under both protocols: the scripts write it back as a decimal integer
/// (Lua's own `tostring` would write `9.007199254741e+15`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_count_counts_down_exactly() {
    let server = RedisServer::start();
    for protocol in PROTOCOLS {
        let client = support::client(&server, protocol).await;
        let latch = client.count_down_latch("largest").unwrap();
        let max = fairlock::MAX_LATCH_COUNT;
        assert!(latch.try_set_count(max).await.unwrap());
        assert_eq!(latch.count_down().await.unwrap(), max - 1, "{protocol}");
        assert_eq!(latch.count_down().await.unwrap(), max - 2, "{protocol}");
        assert_eq!(latch.count().await.unwrap(), max - 2, "{protocol}");
        if protocol == Protocol::Native {
            assert_eq!(latch.count_down_as("p").await.unwrap(), max - 3);
        }
        assert!(latch.delete().await.unwrap());
    }
}
