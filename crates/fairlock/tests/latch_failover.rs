//! The count-down latch across a Redis Sentinel failover (`docs/latch.md`):
//! a latch replicated before `SENTINEL FAILOVER` keeps its count on the
//! promoted replica, its waiters keep waiting through the switch, the
//! count-downs after it go to the new master, and no waiter returns before
//! the count reached 0 there. Both protocols, side by side.

use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LockClient, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, Sentinel, eventually};

/// The latch's count as `server` holds it (`None`: no latch there); a
/// Redisson latch's count is the string under its name.
fn count_on(server: &RedisServer, protocol: Protocol, name: &str) -> Option<String> {
    match protocol {
        Protocol::Native => server.cmd(&["HGET", &format!("fairlock:{{{name}}}:latch"), "count"]),
        _ => server.cmd(&["GET", name]),
    }
}

fn is_replica(server: &RedisServer) -> bool {
    let info: String = server.cmd(&["INFO", "replication"]);
    info.contains("role:slave")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_follows_a_sentinel_failover() {
    let deployment = Sentinel::start_with(1, 3);
    let connect = |protocol: Protocol| {
        let url = deployment.url();
        async move {
            support::init_tracing();
            let config = ClientConfig::from_url(&url)
                .unwrap()
                .protocol(protocol)
                .retry_budget(Duration::from_secs(60));
            LockClient::with_config(config).await.unwrap()
        }
    };
    let name = |protocol: Protocol| format!("failover-{protocol}");
    let mut clients = Vec::new();
    let mut waiters = Vec::new();
    for protocol in PROTOCOLS {
        let (counter, waiting) = (connect(protocol).await, connect(protocol).await);
        let latch = counter.count_down_latch(&name(protocol)).unwrap();
        assert!(latch.try_set_count(2).await.unwrap(), "{protocol}");
        assert_eq!(latch.count_down().await.unwrap(), 1, "{protocol}");
        let latch = waiting.count_down_latch(&name(protocol)).unwrap();
        waiters.push(tokio::spawn(async move {
            let opened = latch.wait_for(Duration::from_secs(120)).await;
            (Instant::now(), opened)
        }));
        clients.push((protocol, counter, waiting));
    }
    let (master, replica) = (deployment.master(), &deployment.replicas()[0]);
    eventually(Duration::from_secs(10), "the counts replicated", || {
        PROTOCOLS
            .iter()
            .all(|&p| count_on(replica, p, &name(p)).as_deref() == Some("1"))
    })
    .await;
    let _: String =
        deployment.sentinels()[0].cmd(&["SENTINEL", "FAILOVER", support::sentinel::MASTER_NAME]);
    eventually(Duration::from_secs(60), "the replica promoted", || {
        deployment.master_addr() == replica.addr() && is_replica(master)
    })
    .await;
    for waiter in &waiters {
        assert!(!waiter.is_finished(), "a wait returned at 1");
    }
    let opened_at = Instant::now();
    for (protocol, counter, _) in &clients {
        let latch = counter.count_down_latch(&name(*protocol)).unwrap();
        assert_eq!(
            latch.count_down().await.unwrap(),
            0,
            "{protocol}: counted down on the new master"
        );
        assert_eq!(count_on(replica, *protocol, &name(*protocol)), None);
    }
    for (waiter, protocol) in waiters.into_iter().zip(PROTOCOLS) {
        let (returned_at, opened) = tokio::time::timeout(Duration::from_secs(90), waiter)
            .await
            .expect("the waiter returns once the latch opened")
            .unwrap();
        assert!(opened.unwrap(), "{protocol}: opened, not timed out");
        assert!(
            returned_at >= opened_at,
            "{protocol}: a wait returned before the count reached 0"
        );
    }
    for (_, counter, waiting) in clients {
        counter.shutdown().await;
        waiting.shutdown().await;
    }
}
