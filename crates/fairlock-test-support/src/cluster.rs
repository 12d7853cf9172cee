//! A Redis Cluster of masters (`--cluster-enabled yes`, joined with
//! `redis-cli --cluster create`), each on a free loopback port with its
//! cluster bus on another, in temp dirs, without persistence. Ready once
//! every node reports the cluster `ok` with all 16384 slots served and
//! knows every other node. Killed on drop; each node's log is printed when
//! the owning test panicked.

use std::process::Command;
use std::time::Duration;

use crate::RedisServer;
use crate::readiness::{fields, wait_for};
use crate::standalone::free_port;

/// How long a node may be unreachable before the others deem it failing:
/// short, so that failure tests need not wait Redis's default 15 s.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// The masters of a cluster, no replicas (see the [module docs](self)).
pub struct Cluster {
    nodes: Vec<RedisServer>,
}

impl Cluster {
    /// Three masters, each serving a third of the slots.
    pub fn start() -> Self {
        Self::start_with(3)
    }

    /// `masters` masters (at least three, as `redis-cli --cluster create`
    /// asks), the slots split evenly.
    pub fn start_with(masters: usize) -> Self {
        assert!(masters >= 3, "a cluster needs at least three masters");
        let nodes: Vec<RedisServer> = (0..masters).map(|_| start_node()).collect();
        let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli (is it installed?): {e}"));
        assert!(
            out.status.success(),
            "redis-cli --cluster create {addrs:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        cluster.wait_ready();
        cluster
    }

    fn wait_ready(&self) {
        let known = self.nodes.len().to_string();
        wait_for("the cluster to be ok on every node", || {
            for node in &self.nodes {
                let info = fields(&node.cmd::<String>(&["CLUSTER", "INFO"]));
                let ok = info.get("cluster_state").map(String::as_str) == Some("ok")
                    && info.get("cluster_slots_ok").map(String::as_str) == Some("16384")
                    && info.get("cluster_known_nodes") == Some(&known);
                if !ok {
                    return Err(format!("node {}: {info:?}", node.addr()));
                }
            }
            Ok(())
        });
    }

    /// The nodes, in the order they were started.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// As [`nodes`](Self::nodes), to stop or restart one.
    pub fn nodes_mut(&mut self) -> &mut [RedisServer] {
        &mut self.nodes
    }

    /// `127.0.0.1:PORT` of each node.
    pub fn addrs(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::addr).collect()
    }

    /// `redis://127.0.0.1:PORT` of each node: what a cluster client is
    /// given.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// The node that serves `key` now (its slot as `CLUSTER KEYSLOT` has it,
    /// hash tags included), to read or write raw state without a
    /// redirection.
    pub fn node_for_key(&self, key: &str) -> &RedisServer {
        let asked = &self.nodes[0];
        let slot: u16 = asked.cmd(&["CLUSTER", "KEYSLOT", key]);
        let table: String = asked.cmd(&["CLUSTER", "NODES"]);
        let port = table
            .lines()
            .find_map(|line| serves(line, slot))
            .unwrap_or_else(|| panic!("no node serves slot {slot}:\n{table}"));
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("slot {slot} is served by :{port}, not a node of ours"))
    }
}

/// The port of the `CLUSTER NODES` line's master if it serves `slot`:
/// `ID IP:PORT@BUS FLAGS MASTER PING PONG EPOCH STATE SLOTS...`, each slot
/// entry `N` or `FIRST-LAST` (`[...]` entries are slots in migration).
fn serves(line: &str, slot: u16) -> Option<u16> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (address, flags) = (fields.get(1)?, fields.get(2)?);
    if !flags.split(',').any(|f| f == "master") {
        return None;
    }
    let served = fields.iter().skip(8).any(|entry| {
        let (first, last) = entry.split_once('-').unwrap_or((entry, entry));
        match (first.parse::<u16>(), last.parse::<u16>()) {
            (Ok(first), Ok(last)) => (first..=last).contains(&slot),
            _ => false,
        }
    });
    let port = address.split('@').next()?.rsplit_once(':')?.1;
    served.then(|| port.parse().ok()).flatten()
}

/// One cluster-enabled server. Its bus port is fixed by its arguments, so a
/// bus port taken meanwhile costs a new pair of ports.
fn start_node() -> RedisServer {
    let timeout = NODE_TIMEOUT.as_millis().to_string();
    let mut log = String::new();
    for _ in 0..5 {
        let bus = free_port().to_string();
        let extra = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus,
            "--cluster-node-timeout",
            &timeout,
        ];
        let mut node = RedisServer::unstarted(extra.map(str::to_owned).to_vec(), None);
        if node.try_boot() {
            return node;
        }
        log = node.log();
    }
    panic!("could not start a cluster node:\n{log}")
}
