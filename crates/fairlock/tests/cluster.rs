//! Locks on a Redis Cluster (3 masters with a replica each, started by the
//! harness): FIFO order and mutual exclusion under both protocols, holds on
//! every master renewed together (CROSSSLOT), a busy lock's slot migrated
//! while it is held and waited on, a CLUSTER FAILOVER of the master serving
//! a held lock, Redisson's sharded wake-up channels, and `min_replicas`
//! (WAIT on the master of the lock's slot); hostile cluster URLs get typed
//! errors. A frozen master: `cluster_faults.rs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{LockClient, Protocol};
use fairlock_test_support as support;
use support::{Cluster, PROTOCOLS, cluster_client_with, eventually, lock_keys, node_of};

async fn cluster_client(cluster: &Cluster, protocol: Protocol) -> LockClient {
    cluster_client_with(cluster, protocol, |c| c).await
}

fn queue_len(cluster: &Cluster, protocol: Protocol, name: &str) -> usize {
    support::queue_len(node_of(cluster, protocol, name), protocol, name)
}

fn is_held(cluster: &Cluster, protocol: Protocol, name: &str) -> bool {
    support::is_held(node_of(cluster, protocol, name), protocol, name)
}

/// Lock names whose slots lie on `count` different masters.
fn names_on_every_master(cluster: &Cluster, protocol: Protocol, count: usize) -> Vec<String> {
    let mut names = Vec::new();
    let mut ports = std::collections::BTreeSet::new();
    for i in 0.. {
        let name = format!("spread-{i}");
        if ports.insert(node_of(cluster, protocol, &name).port()) {
            names.push(name);
        }
        if names.len() == count {
            return names;
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_and_mutual_exclusion_on_a_cluster() {
    let cluster = Cluster::start();
    for protocol in PROTOCOLS {
        fifo(&cluster, protocol).await;
        mutual_exclusion(&cluster, protocol).await;
    }
}

async fn fifo(cluster: &Cluster, protocol: Protocol) {
    let name = "fifo";
    let clients = [
        cluster_client(cluster, protocol).await,
        cluster_client(cluster, protocol).await,
    ];
    let holder = clients[0].fair_lock(name).unwrap().lock().await.unwrap();
    const WAITERS: usize = 8;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let lock = clients[i % 2].fair_lock(name).unwrap();
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.expect("lock");
            order.lock().unwrap().push(i);
            guard.unlock().await.expect("unlock");
        }));
        eventually(Duration::from_secs(10), "waiter queued", || {
            queue_len(cluster, protocol, name) == i + 1
        })
        .await;
    }
    holder.unlock().await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every waiter gets the lock in turn")
            .unwrap();
    }
    assert_eq!(
        *order.lock().unwrap(),
        (0..WAITERS).collect::<Vec<_>>(),
        "{protocol}"
    );
    support::assert_clean_for(node_of(cluster, protocol, name), protocol, name);
}

/// 4 tasks over 2 clients, 50 non-atomic GET/SET increments each under the
/// lock: the counter is exact only if no two ever overlap.
async fn mutual_exclusion(cluster: &Cluster, protocol: Protocol) {
    let name = "counter-lock";
    let counter = format!("counter-{protocol}");
    let counter_url = cluster.node_for_key(&counter).url();
    let clients = [
        cluster_client(cluster, protocol).await,
        cluster_client(cluster, protocol).await,
    ];
    const TASKS: usize = 4;
    const ROUNDS: usize = 50;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let client = clients[t % 2].clone();
        let (url, counter) = (counter_url.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let mut conn = support::patient_connection(&url).await;
            for _ in 0..ROUNDS {
                let guard = client.fair_lock(name).unwrap().lock().await.unwrap();
                let value: Option<u64> = redis::cmd("GET")
                    .arg(&counter)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                let _: () = redis::cmd("SET")
                    .arg(&counter)
                    .arg(value.unwrap_or(0) + 1)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let total: u64 = cluster.node_for_key(&counter).cmd(&["GET", &counter]);
    assert_eq!(
        total,
        (TASKS * ROUNDS) as u64,
        "{protocol}: overlapping holds"
    );
    support::assert_clean_for(node_of(cluster, protocol, name), protocol, name);
}

/// One client holds locks on all three masters with a 2 s lease: the
/// watchdog renews them in one batch per slot (one batch for all would be
/// refused with CROSSSLOT and every hold lost after one lease). (With a 1 s
/// lease, a loaded machine's late renewal lost a hold once in a full run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_on_every_master_are_renewed_for_three_leases() {
    let cluster = Cluster::start();
    let lease = Duration::from_secs(2);
    for protocol in PROTOCOLS {
        let client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
        let names = names_on_every_master(&cluster, protocol, 3);
        let mut guards = Vec::new();
        for name in &names {
            guards.push(client.fair_lock(name).unwrap().lock().await.unwrap());
        }
        let lost = futures_util::future::select_all(guards.iter().map(|g| Box::pin(g.lost())));
        let held_for = lease * 3 + lease / 2;
        assert!(
            tokio::time::timeout(held_for, lost).await.is_err(),
            "{protocol}: a hold was lost"
        );
        for (name, guard) in names.iter().zip(&guards) {
            assert!(guard.is_held(), "{protocol} {name}");
            assert!(
                is_held(&cluster, protocol, name),
                "{protocol} {name}: key gone"
            );
            let pttl: i64 =
                node_of(&cluster, protocol, name).cmd(&["PTTL", &lock_keys(protocol, name).0]);
            assert!(pttl > 0, "{protocol} {name}: pttl {pttl}");
        }
        for guard in guards {
            guard.unlock().await.unwrap();
        }
        for name in &names {
            support::assert_clean_for(node_of(&cluster, protocol, name), protocol, name);
        }
    }
}

/// The slot of a held lock with a waiter moves to another master: the
/// holder keeps it (renewals follow the slot), the waiter stays queued and
/// gets it on release, and the lock is clean on its new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_lock_slot_migrated_while_held_and_waited_on() {
    let cluster = Cluster::start();
    let lease = Duration::from_secs(2);
    for protocol in PROTOCOLS {
        let name = format!("migrating-{protocol}");
        let holder_client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
        let waiter_client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
        let held = holder_client
            .fair_lock(&name)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let lock = waiter_client.fair_lock(&name).unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await });
        eventually(Duration::from_secs(10), "waiter queued", || {
            queue_len(&cluster, protocol, &name) == 1
        })
        .await;

        let slot = cluster.slot_of(&lock_keys(protocol, &name).1);
        let to = cluster.other_master(slot);
        let migration = cluster.begin_migration(slot, to);
        // A lease runs out while the slot is half-way: renewals still work.
        tokio::time::sleep(lease).await;
        migration.move_keys();
        migration.finish();
        assert_eq!(node_of(&cluster, protocol, &name).port(), to);
        // Past another lease on the new master: renewals follow the slot.
        tokio::time::sleep(lease + lease / 2).await;
        assert!(held.is_held(), "{protocol}: hold lost across the migration");
        assert!(is_held(&cluster, protocol, &name));
        assert_eq!(
            queue_len(&cluster, protocol, &name),
            1,
            "{protocol}: waiter lost its place"
        );

        let released = Instant::now();
        held.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter gets the lock after the migration")
            .unwrap()
            .unwrap();
        eprintln!(
            "{protocol}: handoff after the slot migration took {:?}",
            released.elapsed()
        );
        guard.unlock().await.unwrap();
        support::assert_clean_for(cluster.node(to), protocol, &name);
    }
}

/// A graceful CLUSTER FAILOVER of the master serving a held lock (with a
/// waiter): the lock survives on the promoted replica, renewals go on there
/// (scripts loaded again after NOSCRIPT), and the waiter gets it on release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_failover_of_the_master_serving_a_lock() {
    let cluster = Cluster::start();
    let lease = Duration::from_secs(2);
    for protocol in PROTOCOLS {
        let name = format!("failover-{protocol}");
        let holder_client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
        let waiter_client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
        let held = holder_client
            .fair_lock(&name)
            .unwrap()
            .lock()
            .await
            .unwrap();
        let lock = waiter_client.fair_lock(&name).unwrap();
        let waiter = tokio::spawn(async move { lock.lock().await });
        eventually(Duration::from_secs(10), "waiter queued", || {
            queue_len(&cluster, protocol, &name) == 1
        })
        .await;
        let master = node_of(&cluster, protocol, &name).port();
        // The replica must have the lock before it takes over.
        replicated(&cluster, master, &name);

        let started = Instant::now();
        let promoted = cluster.failover(master);
        eprintln!(
            "{protocol}: CLUSTER FAILOVER done (every node agrees) in {:?}",
            started.elapsed()
        );
        assert_eq!(node_of(&cluster, protocol, &name).port(), promoted);
        // Two leases on the new master: renewals reach it.
        tokio::time::sleep(lease * 2).await;
        assert!(held.is_held(), "{protocol}: hold lost across the failover");
        assert!(is_held(&cluster, protocol, &name));

        let released = Instant::now();
        held.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("the waiter gets the lock after the failover")
            .unwrap()
            .unwrap();
        eprintln!(
            "{protocol}: handoff after the failover took {:?}",
            released.elapsed()
        );
        guard.unlock().await.unwrap();
        support::assert_clean_for(cluster.node(promoted), protocol, &name);
    }
}

/// Redisson 3.22+ in cluster mode waits on its fair-lock channels with
/// SSUBSCRIBE and releases with SPUBLISH: our redisson waiter must be
/// subscribed the same way on the node of the lock's slot, and a raw
/// SPUBLISH of Redisson's release message ("0") must wake it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redisson_wakeups_use_sharded_channels() {
    let cluster = Cluster::start();
    let protocol = Protocol::Redisson;
    let name = "sharded";
    let holder_client = cluster_client(&cluster, protocol).await;
    let waiter_client = cluster_client(&cluster, protocol).await;
    // The default 30 s lease: without the wake-up the waiter would sleep
    // for most of it before trying again.
    let held = holder_client.fair_lock(name).unwrap().lock().await.unwrap();
    let lock = waiter_client.fair_lock(name).unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await });
    eventually(Duration::from_secs(10), "waiter queued", || {
        queue_len(&cluster, protocol, name) == 1
    })
    .await;
    let node = node_of(&cluster, protocol, name);
    let (_, queue, _) = lock_keys(protocol, name);
    let waiter_owner: String = node.cmd(&["LINDEX", &queue, "0"]);
    let channel = format!("redisson_lock__channel:{{{name}}}:{waiter_owner}");
    eventually(Duration::from_secs(10), "sharded subscription", || {
        let shard: Vec<String> = node.cmd(&["PUBSUB", "SHARDCHANNELS", "redisson_lock__channel:*"]);
        shard.contains(&channel)
    })
    .await;
    let plain: Vec<String> = node.cmd(&["PUBSUB", "CHANNELS", "redisson_lock__channel:*"]);
    assert!(plain.is_empty(), "plain subscriptions: {plain:?}");

    // What a Java holder's release leaves: the lock key gone, then
    // SPUBLISH "0" to the head's channel.
    held.forget();
    let _: i64 = node.cmd(&["DEL", name]);
    let published = Instant::now();
    let receivers: i64 = node.cmd(&["SPUBLISH", &channel, "0"]);
    assert_eq!(receivers, 1);
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the SPUBLISH woke the waiter")
        .unwrap()
        .unwrap();
    assert!(published.elapsed() < Duration::from_secs(5));
    guard.unlock().await.unwrap();
    support::assert_clean_for(node, protocol, name);
}

/// SIGKILL of the master serving a held lock with a waiter: its replica
/// takes over after the node timeout; the holder's renewals and release,
/// retried within the retry budget, reach the new master (the lock was
/// replicated, so it is kept), and the waiter gets the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn master_killed_while_a_lock_is_held_and_waited_on() {
    let mut cluster = Cluster::start();
    let protocol = Protocol::Native;
    let name = "killed";
    let lease = Duration::from_secs(10);
    let holder_client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
    let waiter_client = cluster_client_with(&cluster, protocol, |c| c.lease(lease)).await;
    let held = holder_client.fair_lock(name).unwrap().lock().await.unwrap();
    let lock = waiter_client.fair_lock(name).unwrap();
    let waiter = tokio::spawn(async move { lock.lock().await });
    eventually(Duration::from_secs(10), "waiter queued", || {
        queue_len(&cluster, protocol, name) == 1
    })
    .await;
    let master = node_of(&cluster, protocol, name).port();
    replicated(&cluster, master, name);
    let slot = cluster.slot_of(&lock_keys(protocol, name).1);

    let killed = Instant::now();
    let replica = cluster.kill_master(master);
    let served_by = cluster.wait_slot_served(slot);
    eprintln!(
        "SIGKILL of the master: slot served again by :{served_by} after {:?}",
        killed.elapsed()
    );
    assert_eq!(served_by, replica);
    // The lock survived on the promoted replica; the holder still has it.
    assert!(held.is_held(), "the hold was kept by the replica");
    assert!(is_held(&cluster, protocol, name));
    held.unlock()
        .await
        .expect("the release reaches the new master");
    let guard = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter gets the lock after the master died")
        .unwrap()
        .unwrap();
    eprintln!("waiter got the lock {:?} after the kill", killed.elapsed());
    guard.unlock().await.unwrap();
    support::assert_clean_for(cluster.node(replica), protocol, name);
}

/// Not a check: handoffs per second of one contended fair lock (4 tasks
/// over 2 clients, each locking and unlocking in a loop for 5 s), on a
/// standalone server, through Sentinel (a master with a replica) and on the
/// cluster, in one run, the topologies interleaved over 2 rounds:
/// `cargo nextest run -p fairlock --test cluster handoff_rates --run-ignored only --no-capture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a check"]
async fn handoff_rates_per_topology() {
    let server = support::RedisServer::start();
    let sentinel = support::Sentinel::start_with(1, 3);
    let cluster = Cluster::start();
    for protocol in PROTOCOLS {
        let connect = |url: String| async move {
            let config = fairlock::ClientConfig::from_url(&url)
                .expect("url")
                .protocol(protocol);
            LockClient::with_config(config).await.expect("connect")
        };
        let mut topologies = Vec::new();
        for (topology, url) in [
            ("standalone", server.url()),
            ("sentinel", sentinel.url()),
            ("cluster", cluster.url()),
        ] {
            let clients = [connect(url.clone()).await, connect(url).await];
            topologies.push((topology, clients));
        }
        for round in 1..=2 {
            for (topology, clients) in &topologies {
                let rate = handoff_rate(clients, Duration::from_secs(5)).await;
                eprintln!("{protocol} round {round} {topology}: {rate:.0} handoffs/s");
            }
        }
    }
}

async fn handoff_rate(clients: &[LockClient; 2], run_for: Duration) -> f64 {
    let deadline = Instant::now() + run_for;
    let mut tasks = Vec::new();
    for t in 0..4 {
        let lock = clients[t % 2].fair_lock("rate").unwrap();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                lock.lock().await.unwrap().unlock().await.unwrap();
                n += 1;
            }
            n
        }));
    }
    let started = Instant::now();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total as f64 / started.elapsed().as_secs_f64()
}

/// Wait until the replica of `master` has every write made there so far,
/// the lock `name`'s included. `WAIT` counts only the writes of the
/// connection it is sent on (with none, it returns at once whatever the
/// replica has), so the same connection first writes a key in the lock's
/// slot, then waits for it, then removes it.
fn replicated(cluster: &Cluster, master: u16, name: &str) {
    let mut conn = cluster.node(master).conn();
    let marker = format!("{{{name}}}:replication-marker");
    let _: () = redis::cmd("SET")
        .arg(&marker)
        .arg("1")
        .query(&mut conn)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(acked, 1, "the replica did not acknowledge the lock");
    let _: i64 = redis::cmd("DEL").arg(&marker).query(&mut conn).unwrap();
}

/// The lock's keys as the replica on `port` has them (READONLY: a replica
/// answers MOVED otherwise).
fn held_on_replica(cluster: &Cluster, port: u16, protocol: Protocol, name: &str) -> bool {
    let mut conn = cluster.node(port).conn();
    let _: () = redis::cmd("READONLY").query(&mut conn).unwrap();
    held_on(&mut conn, protocol, name)
}

/// Whether the lock key on `conn`'s node says `name` is held (the native
/// lock's key, a string, may also be the free marker of a release).
fn held_on(conn: &mut redis::Connection, protocol: Protocol, name: &str) -> bool {
    let key = lock_keys(protocol, name).0;
    if protocol == Protocol::Native {
        let value: Option<String> = redis::cmd("GET").arg(&key).query(conn).unwrap();
        return value.is_some_and(|v| !support::native_is_free(&v));
    }
    let exists: i64 = redis::cmd("EXISTS").arg(&key).query(conn).unwrap();
    exists == 1
}

/// `min_replicas` on a cluster: `WAIT` runs on the master of the lock's
/// slot (after a write of the connection it is sent on, in that slot).
/// Met while that master's replica runs: the lock reached the replica
/// before the acquisition returned, its release before the unlock did.
/// With the replica stopped: the typed error within the timeout (plus
/// round trips) and nothing left held. Locks on another master are not
/// affected by that replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_on_the_master_of_the_lock_slot() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let mut cluster = Cluster::start();
    for protocol in PROTOCOLS {
        let [name, other] = <[String; 2]>::try_from(names_on_every_master(&cluster, protocol, 2))
            .expect("two names");
        let master = node_of(&cluster, protocol, &name).port();
        let replica = cluster.replicas_of(master)[0].port();
        let client = cluster_client_with(&cluster, protocol, |c| c.min_replicas(1, TIMEOUT)).await;
        let lock = client.fair_lock(&name).unwrap();
        // Acknowledged: the replica had the lock while it was held, and its
        // release once the unlock returned. (A loaded machine's replica may
        // miss the short window: tried again, see `hold_acknowledged`.)
        support::hold_acknowledged(&lock, || {
            assert!(
                held_on_replica(&cluster, replica, protocol, &name),
                "{protocol}"
            );
        })
        .await
        .expect("acquisition and release acknowledged by the replica");
        assert!(
            !held_on_replica(&cluster, replica, protocol, &name),
            "{protocol}"
        );

        let node = cluster
            .nodes_mut()
            .iter_mut()
            .find(|n| n.port() == replica)
            .unwrap();
        node.stop();
        let started = Instant::now();
        let refused = lock.lock().await;
        let took = started.elapsed();
        match refused {
            Err(fairlock::Error::ReplicasNotSynced {
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
        support::assert_clean_for(node_of(&cluster, protocol, &name), protocol, &name);
        // Another master's replica still acknowledges.
        support::hold_acknowledged(&client.fair_lock(&other).unwrap(), || {})
            .await
            .expect("acknowledged on another master");

        // The replica back, in sync again: met again.
        let node = cluster
            .nodes_mut()
            .iter_mut()
            .find(|n| n.port() == replica)
            .unwrap();
        node.restart();
        eventually(Duration::from_secs(30), "replica back in sync", || {
            let info: String = cluster.node(replica).cmd(&["INFO", "replication"]);
            info.contains("master_link_status:up")
        })
        .await;
        support::hold_acknowledged(&lock, || {})
            .await
            .expect("acknowledged again");
        client.shutdown().await;
    }
}

/// Adversary 2: an acquisition with `min_replicas` cancelled while its
/// `WAIT` runs (the slot's replica stopped, so the WAIT would only time
/// out) must not leave the lock held: the granted hold is released in the
/// background, long before its 30 s lease would run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv2_min_replicas_cancelled_during_wait_leaves_nothing_held() {
    const TIMEOUT: Duration = Duration::from_secs(3);
    let mut cluster = Cluster::start();
    for protocol in PROTOCOLS {
        let name = format!("adv2-cancel-{protocol:?}");
        let master = node_of(&cluster, protocol, &name).port();
        let replica = cluster.replicas_of(master)[0].port();
        cluster
            .nodes_mut()
            .iter_mut()
            .find(|n| n.port() == replica)
            .unwrap()
            .stop();
        let client = cluster_client_with(&cluster, protocol, |c| c.min_replicas(1, TIMEOUT)).await;
        let lock = client.fair_lock(&name).unwrap();
        let cancelled = tokio::time::timeout(Duration::from_millis(700), lock.lock()).await;
        assert!(
            cancelled.is_err(),
            "{protocol}: WAIT did not block: {cancelled:?}"
        );
        // The acquisition was granted (WAIT was running): it must be undone.
        eventually(
            Duration::from_secs(5),
            "cancelled acquisition released",
            || {
                let mut conn = cluster.node(master).conn();
                !held_on(&mut conn, protocol, &name)
            },
        )
        .await;
        client.shutdown().await;
        cluster
            .nodes_mut()
            .iter_mut()
            .find(|n| n.port() == replica)
            .unwrap()
            .restart();
        eventually(Duration::from_secs(30), "replica back in sync", || {
            let info: String = cluster.node(replica).cmd(&["INFO", "replication"]);
            info.contains("master_link_status:up")
        })
        .await;
    }
}

/// Adversary 2: a re-entry whose `WAIT` is not met undoes that one hold
/// only: the outer guard still holds the lock (on the server too), and its
/// unlock (reported not acknowledged) frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv2_min_replicas_failed_reentry_keeps_the_outer_hold() {
    const TIMEOUT: Duration = Duration::from_millis(500);
    let mut cluster = Cluster::start();
    for protocol in PROTOCOLS {
        let name = format!("adv2-reenter-{protocol:?}");
        let master = node_of(&cluster, protocol, &name).port();
        let replica = cluster.replicas_of(master)[0].port();
        let client = cluster_client_with(&cluster, protocol, |c| c.min_replicas(1, TIMEOUT)).await;
        let lock = client.fair_lock(&name).unwrap();
        // The replica runs: acknowledged (tried again should a loaded
        // machine's replica miss the short window).
        let outer = support::lock_acknowledged(&lock)
            .await
            .expect("acknowledged");
        cluster
            .nodes_mut()
            .iter_mut()
            .find(|n| n.port() == replica)
            .unwrap()
            .stop();
        match outer.reenter().await {
            Err(fairlock::Error::ReplicasNotSynced {
                what: "acquisition",
                ..
            }) => {}
            other => panic!("{protocol}: {other:?}"),
        }
        assert!(outer.is_held(), "{protocol}: outer hold lost by the undo");
        assert!(
            lock.is_locked().await.unwrap(),
            "{protocol}: undo freed the outer hold"
        );
        // Past a renewal or two: still held.
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(outer.is_held(), "{protocol}");
        assert!(lock.is_locked().await.unwrap(), "{protocol}");
        match outer.unlock().await {
            Err(fairlock::Error::ReplicasNotSynced {
                what: "release", ..
            }) => {}
            other => panic!("{protocol}: {other:?}"),
        }
        assert!(!lock.is_locked().await.unwrap(), "{protocol}: left held");
        support::assert_clean_for(node_of(&cluster, protocol, &name), protocol, &name);
        client.shutdown().await;
        cluster
            .nodes_mut()
            .iter_mut()
            .find(|n| n.port() == replica)
            .unwrap()
            .restart();
        eventually(Duration::from_secs(30), "replica back in sync", || {
            let info: String = cluster.node(replica).cmd(&["INFO", "replication"]);
            info.contains("master_link_status:up")
        })
        .await;
    }
}

/// Adversary 2 (second pass): a slot migration that stays open (keys moved,
/// the slot still MIGRATING/IMPORTING: a resharding in progress). The
/// renewals reach the lock on its new node through ASK; with
/// `min_replicas`, the write, the proof and the `WAIT` went to the master
/// `CLUSTER SLOTS` names, the old one, which answers ASK: every renewal
/// counted as failed and a hold the server kept renewing was given up. They
/// now follow the ASK to the importing node. Without `min_replicas` (the
/// control) it was always kept. The lease (4 s, renewed every 1.3 s, held
/// for two leases) leaves room for a loaded machine's late renewals. The
/// replicas run throughout, so the `WAIT` timeout is long (3 s, less than
/// the lease): a replica a loaded machine keeps from running for more than
/// a short window still acknowledges, and the bug (an `ASK` answer) fails a
/// renewal at once, whatever the timeout.
async fn a_hold_through_an_open_migration(replicas: bool) -> (bool, bool) {
    const TIMEOUT: Duration = Duration::from_secs(3);
    let cluster = Cluster::start();
    let protocol = Protocol::Native;
    let name = "adv2-open-migration";
    let lease = Duration::from_secs(4);
    let client = cluster_client_with(&cluster, protocol, |c| {
        let c = c.lease(lease);
        if replicas {
            c.min_replicas(1, TIMEOUT)
        } else {
            c
        }
    })
    .await;
    let guard = client.fair_lock(name).unwrap().lock().await.unwrap();
    let slot = cluster.slot_of(&lock_keys(protocol, name).0);
    let from = node_of(&cluster, protocol, name).port();
    let to = cluster
        .masters()
        .iter()
        .map(|m| m.port())
        .find(|p| *p != from)
        .unwrap();
    let migration = cluster.begin_migration(slot, to);
    migration.move_keys();
    tokio::time::sleep(lease * 2).await;
    // The importing node answers for the slot after ASKING.
    let (value,): (Option<String>,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("GET")
        .arg(lock_keys(protocol, name).0)
        .query(&mut cluster.node(to).conn())
        .unwrap();
    let on_server = value.is_some_and(|v| !support::native_is_free(&v));
    let believed = guard.is_held();
    migration.finish();
    drop(guard);
    client.shutdown().await;
    (believed, on_server)
}

/// With `min_replicas`, a hold whose key has moved during an open
/// migration is proven and acknowledged on the importing node (the one the
/// renewals reached by `ASK`), not given up because the slot's old master no
/// longer has the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv2_min_replicas_hold_survives_an_open_migration() {
    let (believed, on_server) = a_hold_through_an_open_migration(true).await;
    assert!(
        believed,
        "given up during an open migration (still on the new node: {on_server})"
    );
    assert!(on_server, "believed, but not on the importing node");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv2_hold_survives_an_open_migration_without_min_replicas() {
    let (believed, on_server) = a_hold_through_an_open_migration(false).await;
    assert!(believed && on_server, "{believed} {on_server}");
}

/// Held up: hostile cluster URLs get a typed error from `from_url` or from
/// connecting (within the connect timeouts), never a panic.
///
/// From the adversarial review of the Cluster support: a check that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_cluster_urls_give_typed_errors() {
    let urls = [
        "redis+cluster://",
        "redis+cluster://:",
        "redis+cluster://@",
        "redis+cluster://@:1",
        "redis+cluster://u:p@",
        "redis+cluster://,",
        "redis+cluster://127.0.0.1:0",
        "redis+cluster://127.0.0.1:-1",
        "redis+cluster://127.0.0.1:1:2",
        "redis+cluster://[::1:7000",
        "redis+cluster://[::1]:1",
        "redis+cluster://127.0.0.1:1?",
        "redis+cluster://127.0.0.1:1#",
        "redis+cluster://127.0.0.1:1//",
        "redis+cluster://u:p@127.0.0.1:1,u2:p2@127.0.0.1:2",
        "redis+cluster://u:%ZZ@127.0.0.1:1",
        "redis+cluster://127.0.0.1:1,{a}:2",
        "rediss+cluster://127.0.0.1:1",
        "REDIS+CLUSTER://127.0.0.1:1",
        "redis+cluster+sentinel://127.0.0.1:1",
    ];
    for url in urls {
        let config = match fairlock::ClientConfig::from_url(url) {
            Ok(config) => config,
            Err(_) => continue,
        };
        let config = config
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(300))
            .retry_budget(Duration::from_millis(300));
        let started = Instant::now();
        let connected = fairlock::LockClient::with_config(config).await;
        assert!(connected.is_err(), "{url}: connected to nothing");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{url}: connecting took {:?}",
            started.elapsed()
        );
    }
}

/// Finding 2. Promise 6 (misconfigured URLs get a typed error): the cluster
/// URL's documented rule "the port is required" is checked with
/// `host.contains(':')`, so a seed with an empty port (`HOST:`) passes and
/// the URL parser fills in 6379: the client silently talks to whatever runs
/// on the default port instead of refusing the URL.
///
/// Found by the adversarial review of the Cluster support (finding 2),
/// fixed since.
#[test]
fn cluster_seed_with_an_empty_port_is_refused() {
    for url in [
        "redis+cluster://127.0.0.1:",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:",
        "redis+cluster://[::1]:",
    ] {
        let parsed = fairlock::ClientConfig::from_url(url);
        assert!(
            parsed.is_err(),
            "{url}: accepted, address {:?}",
            parsed.map(|c| c.address()).ok()
        );
    }
}
