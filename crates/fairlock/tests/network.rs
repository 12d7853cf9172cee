//! Network faults through a loopback proxy (`fairlock_test_support::proxy`):
//! stalled, slow and cut connections. No waiter hangs beyond its wait budget plus
//! the documented bound, and no two holders overlap.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{PROTOCOLS, RedisServer, client, eventually};

mod common;
use common::{config, connect};

async fn through(proxy: &Proxy, protocol: Protocol, response_timeout: Duration) -> LockClient {
    support::init_tracing();
    let config = ClientConfig::from_url(&proxy.url())
        .unwrap()
        .protocol(protocol)
        .response_timeout(response_timeout)
        .connect_timeout(response_timeout)
        .retry_budget(Duration::from_secs(2));
    LockClient::with_config(config).await.unwrap()
}

/// Every connection of a waiter stalls (bytes held, sockets open) while it
/// waits with `try_lock_for(1.5 s)`: it returns within the budget plus the
/// documented bound (one response timeout for the call in flight, plus one
/// retry backoff), with no grant or with a connection error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_connections_do_not_hang_a_waiter() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let holder = client(&server, protocol).await;
        let guard = holder.fair_lock("stall").unwrap().lock().await.unwrap();
        let response_timeout = Duration::from_millis(500);
        let waiter = through(&proxy, protocol, response_timeout).await;
        let lock = waiter.fair_lock("stall").unwrap();
        let budget = Duration::from_millis(1500);
        // The bound is the client's; a machine that keeps this process from
        // running adds its own delay (measured, added to the bound).
        let starvation = support::StarvationMonitor::start();
        let started = Instant::now();
        let attempt = tokio::spawn(async move { lock.try_lock_for(budget).await });
        support::eventually(Duration::from_secs(5), "queued", || {
            support::queue_len(&server, protocol, "stall") == 1
        })
        .await;
        proxy.stall();
        let result = tokio::time::timeout(Duration::from_secs(10), attempt)
            .await
            .expect("no hang")
            .unwrap();
        let took = started.elapsed();
        let stalled = starvation.stop();
        let bound = budget
            + response_timeout
            + Duration::from_millis(500)
            + Duration::from_millis(500)
            + stalled;
        assert!(
            took <= bound,
            "{protocol}: returned after {took:?}, bound {bound:?} (of which the machine's stall {stalled:?})"
        );
        match result {
            Ok(None) => {}
            Err(err) => assert!(err.is_connection(), "{err}"),
            Ok(Some(_)) => panic!("granted while the holder holds"),
        }
        proxy.pass();
        guard.unlock().await.unwrap();
    }
}

/// Four tasks over two clients take the lock through a proxy that cuts every
/// connection every 50-250 ms. Holds are recorded with Redis server time
/// (read through a direct connection right after acquiring and right before
/// releasing); no two recorded holds overlap, and a non-atomic counter
/// incremented under the lock is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cut_connections_keep_mutual_exclusion() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Arc::new(Proxy::start(server.port()));
        let clients = [
            through(&proxy, protocol, Duration::from_secs(1)).await,
            through(&proxy, protocol, Duration::from_secs(1)).await,
        ];
        let holds = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
        let stop = Instant::now() + Duration::from_secs(4);
        let mut tasks = Vec::new();
        for t in 0..4 {
            let lock = clients[t % 2].fair_lock("cuts").unwrap();
            let holds = Arc::clone(&holds);
            let url = server.url();
            tasks.push(tokio::spawn(async move {
                // The record's own connection (not the proxy's): generous
                // timeouts, so that a loaded machine fails no record.
                let direct = redis::Client::open(url).unwrap();
                let patient = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_secs(30)))
                    .set_response_timeout(Some(Duration::from_secs(30)));
                let mut conn = direct
                    .get_multiplexed_async_connection_with_config(&patient)
                    .await
                    .unwrap();
                let mut increments = 0u64;
                while Instant::now() < stop {
                    let guard = match lock.try_lock_for(Duration::from_secs(3)).await {
                        Ok(Some(guard)) => guard,
                        Ok(None) | Err(_) => continue,
                    };
                    let start = server_time_us(&mut conn).await;
                    let value: Option<u64> = redis::cmd("GET")
                        .arg("counter")
                        .query_async(&mut conn)
                        .await
                        .unwrap();
                    redis::cmd("SET")
                        .arg("counter")
                        .arg(value.unwrap_or(0) + 1)
                        .query_async::<()>(&mut conn)
                        .await
                        .unwrap();
                    increments += 1;
                    let end = server_time_us(&mut conn).await;
                    assert!(guard.is_held(), "lease cannot run out here");
                    holds.lock().unwrap().push((start, end));
                    // A cut during the release is retried under its request id.
                    let _ = guard.unlock().await;
                }
                increments
            }));
        }
        let chaos = {
            let proxy = Arc::clone(&proxy);
            tokio::spawn(async move {
                let mut cuts = 0;
                while Instant::now() < stop {
                    tokio::time::sleep(Duration::from_millis(50 + (cuts * 37) % 200)).await;
                    proxy.cut_all();
                    cuts += 1;
                }
                cuts
            })
        };
        let mut total = 0;
        for task in tasks {
            total += task.await.unwrap();
        }
        let cuts = chaos.await.unwrap();
        let mut holds = holds.lock().unwrap().clone();
        holds.sort();
        let overlaps = holds.windows(2).filter(|w| w[1].0 < w[0].1).count();
        assert_eq!(overlaps, 0, "{protocol}: overlapping holds");
        assert_eq!(server.cmd::<u64>(&["GET", "counter"]), total, "{protocol}");
        assert!(
            total > 10 && cuts > 5,
            "{protocol}: {total} holds, {cuts} cuts"
        );
        eprintln!("{protocol}: {total} holds, {cuts} connection cuts, 0 overlaps");
    }
}

async fn server_time_us(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let (sec, usec): (u64, u64) = redis::cmd("TIME").query_async(conn).await.unwrap();
    sec * 1_000_000 + usec
}

/// `try_lock_for(w)` returns within w + one response timeout, whatever
/// the replies do. Before: with every reply 2 s late, a 500 ms wait
/// returned after 12-15 s.
///
/// Found by the safety review (finding 7).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_budget_holds_with_slow_replies() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let holder_client = connect(config(&server.url(), protocol)).await;
        let waiter_client = connect(config(&proxy.url(), protocol)).await;
        let held = holder_client
            .fair_lock("slow")
            .unwrap()
            .lock()
            .await
            .unwrap();
        proxy.delay_replies(Duration::from_millis(2000));
        let lock = waiter_client.fair_lock("slow").unwrap();
        let started = Instant::now();
        let got = lock.try_lock_for(Duration::from_millis(500)).await;
        let took = started.elapsed();
        assert!(matches!(got, Ok(None)), "{protocol}: {got:?}");
        // 500 ms + the 3 s response timeout, plus scheduling slack.
        assert!(took < Duration::from_millis(4000), "{protocol}: {took:?}");
        proxy.delay_replies(Duration::ZERO);
        // The waiter left the queue in the background.
        waiter_client.flush().await;
        eventually(Duration::from_secs(10), "queue empty", || {
            support::queue_len(&server, protocol, "slow") == 0
        })
        .await;
        held.unlock().await.unwrap();
    }
}
