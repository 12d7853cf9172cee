//! The harness's own tests: each topology starts on free ports (never
//! 6379), serves, and is gone once dropped.

use std::path::Path;
use std::time::{Duration, Instant};

use fairlock_test_support::{Cluster, RedisServer, Sentinel, sentinel};

/// Whether process `pid` exists (a dropped server was killed and reaped).
fn running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

fn assert_gone(pids: &[u32]) {
    for pid in pids {
        assert!(!running(*pid), "process {pid} outlived its drop");
    }
}

#[test]
fn standalone_serves_and_is_killed_on_drop() {
    let server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert_eq!(server.cmd::<String>(&["PING"]), "PONG");
    let pid = server.pid();
    assert!(running(pid));
    drop(server);
    assert_gone(&[pid]);
}

#[test]
fn sentinel_watches_a_replicated_master_and_is_killed_on_drop() {
    let deployment = Sentinel::start();
    assert_eq!(deployment.replicas().len(), 2);
    assert_eq!(deployment.sentinels().len(), 3);
    let mut pids = vec![deployment.master().pid()];
    for server in deployment.replicas().iter().chain(deployment.sentinels()) {
        assert_ne!(server.port(), 6379);
        pids.push(server.pid());
    }
    // Every sentinel names the master, and knows both replicas.
    for sentinel in deployment.sentinels() {
        let (ip, port): (String, u16) =
            sentinel.cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinel::MASTER_NAME]);
        assert_eq!(format!("{ip}:{port}"), deployment.master().addr());
        let replicas: Vec<redis::Value> =
            sentinel.cmd(&["SENTINEL", "REPLICAS", sentinel::MASTER_NAME]);
        assert_eq!(replicas.len(), 2);
    }
    assert_eq!(deployment.master_addr(), deployment.master().addr());
    assert_eq!(deployment.sentinel_addrs().len(), 3);
    // A write to the master reaches the replicas.
    let _: () = deployment.master().cmd(&["SET", "k", "v"]);
    for replica in deployment.replicas() {
        let deadline = Instant::now() + Duration::from_secs(5);
        while replica.cmd::<Option<String>>(&["GET", "k"]).is_none() {
            assert!(Instant::now() < deadline, "not replicated");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    drop(deployment);
    assert_gone(&pids);
}

#[test]
fn cluster_serves_every_slot_and_is_killed_on_drop() {
    let cluster = Cluster::start();
    assert_eq!(cluster.nodes().len(), 6);
    assert_eq!(cluster.masters().len(), 3);
    for master in cluster.masters() {
        assert_eq!(cluster.replicas_of(master.port()).len(), 1);
    }
    let pids: Vec<u32> = cluster.nodes().iter().map(RedisServer::pid).collect();
    for node in cluster.nodes() {
        assert_ne!(node.port(), 6379);
        let info: String = node.cmd(&["CLUSTER", "INFO"]);
        assert!(info.contains("cluster_state:ok"), "{info}");
    }
    assert_eq!(cluster.urls().len(), 6);
    // Keys land on the node that serves them (no MOVED), on every node for
    // enough keys; a hash tag keeps keys together.
    let mut ports = std::collections::BTreeSet::new();
    for i in 0..30 {
        let key = format!("key-{i}");
        let node = cluster.node_for_key(&key);
        let _: () = node.cmd(&["SET", &key, "v"]);
        ports.insert(node.port());
    }
    assert_eq!(ports.len(), 3, "30 keys all on {ports:?}");
    let node = cluster.node_for_key("{lock}:a");
    assert_eq!(cluster.node_for_key("{lock}:b").port(), node.port());
    let _: () = node.cmd(&["MSET", "{lock}:a", "1", "{lock}:b", "2"]);
    drop(cluster);
    assert_gone(&pids);
}

#[test]
fn cluster_failover_and_slot_migration_are_seen_by_every_node() {
    let cluster = Cluster::start();
    let master = cluster.node_for_key("{moved}").port();
    let _: () = cluster.node(master).cmd(&["SET", "{moved}:a", "1"]);
    let replica = cluster.failover(master);
    assert_eq!(cluster.node_for_key("{moved}").port(), replica);
    assert_eq!(
        cluster.replicas_of(replica).first().map(|r| r.port()),
        Some(master)
    );
    let slot = cluster.slot_of("{moved}");
    let to = cluster
        .masters()
        .into_iter()
        .map(RedisServer::port)
        .find(|&p| p != replica)
        .expect("another master");
    cluster.migrate_slot(slot, to);
    assert_eq!(cluster.node_for_key("{moved}").port(), to);
    let value: String = cluster.node(to).cmd(&["GET", "{moved}:a"]);
    assert_eq!(value, "1");
}
