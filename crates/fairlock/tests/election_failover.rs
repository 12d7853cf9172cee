//! Leader election across failovers (`docs/election.md`): a Redis Cluster
//! (succession, observers, a CLUSTER FAILOVER of the election's master) and
//! Redis Sentinel (the master killed before it replicated the leader's
//! grant: the documented failover window).

use std::time::{Duration, Instant};

use fairlock::{ClientConfig, LeaderChanges, LockClient, Protocol};
use fairlock_test_support as support;
use support::{Cluster, Sentinel, cluster_client_with, eventually, node_of};

/// The terms of the next `n` leaders `changes` shows (skipping "nobody"
/// and new values of a term already seen), each within `limit`.
async fn next_terms(changes: &mut LeaderChanges, n: usize, limit: Duration) -> Vec<u64> {
    let mut terms: Vec<u64> = Vec::new();
    while terms.len() < n {
        let change = tokio::time::timeout(limit, changes.next())
            .await
            .expect("a change in time")
            .expect("read the election");
        if let Some(leader) = change {
            if terms.last() != Some(&leader.term) {
                terms.push(leader.term);
            }
        }
    }
    terms
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_on_a_cluster_survives_a_failover_of_its_master() {
    let cluster = Cluster::start();
    let settings = |c: ClientConfig| {
        c.lease(Duration::from_secs(10))
            .retry_budget(Duration::from_secs(30))
    };
    let a = cluster_client_with(&cluster, Protocol::Native, settings).await;
    let b = cluster_client_with(&cluster, Protocol::Native, settings).await;
    let watcher = cluster_client_with(&cluster, Protocol::Native, settings).await;
    let election = watcher.election("cl").unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(changes.next().await.unwrap(), None);

    let first = a.election("cl").unwrap().campaign("a").await.unwrap();
    let e = b.election("cl").unwrap();
    let second = tokio::spawn(async move { e.campaign("b").await });
    let master = node_of(&cluster, Protocol::Native, "cl");
    eventually(Duration::from_secs(10), "b queued", || {
        support::queue_len(master, Protocol::Native, "cl") == 1
    })
    .await;
    // The replica takes over the slot gracefully: the leadership stays.
    let promoted = cluster.failover(master.port());
    cluster.wait_promoted(promoted, Some(master.port()));
    first.proclaim("a after failover").await.unwrap();
    assert!(first.is_leader());
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("a after failover", first.term())
    );
    let first_term = first.term();
    first.resign().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(30), second)
        .await
        .expect("succeeded")
        .unwrap()
        .unwrap();
    assert!(second.term() > first_term);
    let terms = next_terms(&mut changes, 2, Duration::from_secs(15)).await;
    assert_eq!(terms, vec![first_term, second.term()]);
    second.resign().await.unwrap();
    for client in [a, b, watcher] {
        client.shutdown().await;
    }
}

/// The master dies before its replica got the leader's grant: the promoted
/// replica knows no leader, and the next candidate leads at once. The old
/// leader keeps believing until its lease ends (its renewals fail, or find
/// the lock gone): two leaders believe for at most one lease, the
/// documented failover window. Terms still increase, and observers see
/// each term once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_that_loses_the_grant_overlaps_for_at_most_a_lease() {
    let mut deployment = Sentinel::start_with(1, 3);
    let lease = Duration::from_secs(10);
    let settings = move |c: ClientConfig| c.lease(lease).retry_budget(Duration::from_secs(60));
    let connect = || async {
        support::init_tracing();
        let config = ClientConfig::from_url(&deployment.url())
            .unwrap()
            .protocol(Protocol::Native);
        LockClient::with_config(settings(config)).await.unwrap()
    };
    let (a, b, watcher) = (connect().await, connect().await, connect().await);
    let election = watcher.election("so").unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(changes.next().await.unwrap(), None);

    let old = a.election("so").unwrap().campaign("old").await.unwrap();
    let e = b.election("so").unwrap();
    let successor = tokio::spawn(async move {
        let leadership = e.campaign("new").await.unwrap();
        (Instant::now(), leadership)
    });
    let replica = &deployment.replicas()[0];
    eventually(Duration::from_secs(10), "queued and replicated", || {
        support::queue_len(replica, Protocol::Native, "so") == 1
            && support::is_held(replica, Protocol::Native, "so")
    })
    .await;
    // The replica loses the grant, as if the master died before sending it.
    let _: () = replica.cmd(&["CONFIG", "SET", "replica-read-only", "no"]);
    let _: i64 = replica.cmd(&["DEL", "fairlock:{so}:lock"]);
    let killed_at = Instant::now();
    deployment.master_mut().stop();

    let old_lost = old.lost();
    tokio::time::timeout(lease * 3, old_lost)
        .await
        .expect("the old leader stops believing");
    let stopped_at = Instant::now();
    let (started_at, successor) = tokio::time::timeout(Duration::from_secs(90), successor)
        .await
        .expect("a successor on the promoted replica")
        .unwrap();
    if started_at < stopped_at {
        let overlap = stopped_at - started_at;
        assert!(overlap <= lease, "two leaders for {overlap:?}");
        eprintln!("two leaders believed for {overlap:?} (the window: the lease, {lease:?})");
    }
    assert!(stopped_at - killed_at <= lease + Duration::from_secs(2));
    assert!(successor.term() > old.term());
    let terms = next_terms(&mut changes, 2, Duration::from_secs(60)).await;
    assert_eq!(terms, vec![old.term(), successor.term()]);
    // The deposed leader's writes are refused on the new master.
    assert!(old.proclaim("stale").await.unwrap_err().is_lock_lost());
    assert_eq!(
        election.leader().await.unwrap().map(|l| l.value),
        Some("new".to_owned())
    );
    successor.resign().await.unwrap();
    drop(old);
    for client in [a, b, watcher] {
        client.shutdown().await;
    }
}
