//! A Redis Cluster: masters with a replica each (`--cluster-enabled yes`,
//! joined with `redis-cli --cluster create`), each node on a free loopback
//! port with its cluster bus on another, in temp dirs, without persistence.
//! Ready once every node reports the cluster `ok` with all 16384 slots
//! served, knows every other node, and every replica is linked to its
//! master. Killed on drop; each node's log is printed when the owning test
//! panicked.
//!
//! # Faults
//!
//! - [`Cluster::failover`]: a graceful `CLUSTER FAILOVER` on a master's
//!   replica, returning once the roles swapped and every live node agrees;
//! - [`Cluster::kill_master`]: SIGKILL of a master (its replica takes over
//!   after [`NODE_TIMEOUT`]; [`Cluster::wait_slot_served`] waits for that);
//! - [`Cluster::migrate_slot`], or step by step with
//!   [`Cluster::begin_migration`]: a slot moved to another master the way
//!   `redis-cli --cluster reshard` moves it (`SETSLOT IMPORTING/MIGRATING`,
//!   `MIGRATE` of its keys, `SETSLOT NODE` on every node).
//!
//! Nodes are named by their port: roles change with failovers, ports do not.

use std::process::Command;
use std::time::Duration;

use crate::RedisServer;
use crate::readiness::{fields, info, wait_for};
use crate::standalone::free_port;

/// How long a node may be unreachable before the others deem it failing:
/// short, so that failure tests need not wait Redis's default 15 s.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(2);

/// The nodes of a cluster (see the [module docs](self)).
pub struct Cluster {
    nodes: Vec<RedisServer>,
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    port: u16,
    master: bool,
    failed: bool,
    /// The master's id, for a replica.
    master_id: Option<String>,
    /// Served slot ranges (first, last), migrations left out.
    slots: Vec<(u16, u16)>,
}

impl Row {
    /// `ID IP:PORT@BUS FLAGS MASTER PING PONG EPOCH STATE SLOTS...`, each
    /// slot entry `N` or `FIRST-LAST` (`[...]` entries are migrations).
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (id, address, flags, master) = (
            fields.first()?,
            fields.get(1)?,
            fields.get(2)?,
            fields.get(3)?,
        );
        let port = address
            .split('@')
            .next()?
            .rsplit_once(':')?
            .1
            .parse()
            .ok()?;
        let flags: Vec<&str> = flags.split(',').collect();
        let slots = fields
            .iter()
            .skip(8)
            .filter_map(|entry| {
                let (first, last) = entry.split_once('-').unwrap_or((entry, entry));
                Some((first.parse().ok()?, last.parse().ok()?))
            })
            .collect();
        Some(Self {
            id: (*id).to_owned(),
            port,
            master: flags.contains(&"master"),
            failed: flags.iter().any(|f| f.starts_with("fail")),
            master_id: (*master != "-").then(|| (*master).to_owned()),
            slots,
        })
    }

    fn serves(&self, slot: u16) -> bool {
        self.master
            && self
                .slots
                .iter()
                .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

impl Cluster {
    /// Three masters, each serving a third of the slots, with one replica
    /// each.
    pub fn start() -> Self {
        Self::start_with(3, 1)
    }

    /// `masters` masters (at least three, as `redis-cli --cluster create`
    /// asks), the slots split evenly, each with `replicas` replicas.
    pub fn start_with(masters: usize, replicas: usize) -> Self {
        assert!(masters >= 3, "a cluster needs at least three masters");
        let total = masters * (1 + replicas);
        let nodes: Vec<RedisServer> = (0..total).map(|_| start_node()).collect();
        let addrs: Vec<String> = nodes.iter().map(RedisServer::addr).collect();
        let cli = crate::cli_binary();
        let out = Command::new(&cli)
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .unwrap_or_else(|e| panic!("cannot run {cli} (is it installed?): {e}"));
        assert!(
            out.status.success(),
            "{cli} --cluster create {addrs:?}:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let cluster = Self { nodes };
        cluster.wait_ready(masters, replicas);
        cluster
    }

    fn wait_ready(&self, masters: usize, replicas: usize) {
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
            let rows = self.rows();
            let master_rows = rows.iter().filter(|r| r.master).count();
            if master_rows != masters {
                return Err(format!("{master_rows} masters, not {masters}: {rows:?}"));
            }
            for master in rows.iter().filter(|r| r.master) {
                let linked = self
                    .replica_rows(&rows, &master.id)
                    .filter(|r| {
                        info(self.node(r.port), "replication")
                            .get("master_link_status")
                            .map(String::as_str)
                            == Some("up")
                    })
                    .count();
                if linked != replicas {
                    return Err(format!(
                        "master :{} has {linked} linked replicas",
                        master.port
                    ));
                }
            }
            Ok(())
        });
    }

    /// The nodes, in the order they were started (masters and replicas).
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

    /// `redis://127.0.0.1:PORT` of each node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`: every node as a
    /// seed, what a fairlock client or the CLI is given.
    pub fn url(&self) -> String {
        format!("redis+cluster://{}", self.addrs().join(","))
    }

    /// The node on `port`.
    ///
    /// # Panics
    /// When no node of this cluster listens there.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!(":{port} is not a node of this cluster"))
    }

    /// A node that runs, to ask about the cluster.
    fn live(&self) -> &RedisServer {
        self.nodes
            .iter()
            .find(|node| node.is_running())
            .expect("every node of the cluster is stopped")
    }

    /// `CLUSTER NODES` as a live node sees it.
    fn rows(&self) -> Vec<Row> {
        self.rows_of(self.live())
    }

    fn rows_of(&self, node: &RedisServer) -> Vec<Row> {
        node.cmd::<String>(&["CLUSTER", "NODES"])
            .lines()
            .filter_map(Row::parse)
            .collect()
    }

    fn replica_rows<'a>(
        &self,
        rows: &'a [Row],
        master_id: &'a str,
    ) -> impl Iterator<Item = &'a Row> {
        rows.iter()
            .filter(move |r| !r.master && r.master_id.as_deref() == Some(master_id))
    }

    /// The masters serving slots now (as a live node sees them), by port.
    pub fn masters(&self) -> Vec<&RedisServer> {
        let rows = self.rows();
        rows.iter()
            .filter(|r| r.master && !r.failed && !r.slots.is_empty())
            .map(|r| self.node(r.port))
            .collect()
    }

    /// The replicas of the master on `master_port` (as a live node sees
    /// them).
    pub fn replicas_of(&self, master_port: u16) -> Vec<&RedisServer> {
        let rows = self.rows();
        let Some(master) = rows.iter().find(|r| r.port == master_port) else {
            return Vec::new();
        };
        self.replica_rows(&rows, &master.id)
            .map(|r| self.node(r.port))
            .collect()
    }

    /// The hash slot of `key` (hash tags included).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.live().cmd(&["CLUSTER", "KEYSLOT", key])
    }

    /// The master serving `slot` now.
    ///
    /// # Panics
    /// When no live master serves it.
    pub fn node_for_slot(&self, slot: u16) -> &RedisServer {
        let rows = self.rows();
        let row = rows
            .iter()
            .find(|r| r.serves(slot) && !r.failed)
            .unwrap_or_else(|| panic!("no node serves slot {slot}: {rows:?}"));
        self.node(row.port)
    }

    /// The node that serves `key` now (its slot as `CLUSTER KEYSLOT` has it,
    /// hash tags included), to read or write raw state without a
    /// redirection.
    pub fn node_for_key(&self, key: &str) -> &RedisServer {
        self.node_for_slot(self.slot_of(key))
    }

    fn id_of(&self, port: u16) -> String {
        self.node(port).cmd(&["CLUSTER", "MYID"])
    }

    /// Graceful failover of the master on `master_port`: `CLUSTER FAILOVER`
    /// on its first replica; returns the port of the new master once the
    /// roles swapped and every live node agrees.
    pub fn failover(&self, master_port: u16) -> u16 {
        let replica = self
            .replicas_of(master_port)
            .first()
            .map(|r| r.port())
            .unwrap_or_else(|| panic!("master :{master_port} has no replica"));
        let _: () = self.node(replica).cmd(&["CLUSTER", "FAILOVER"]);
        self.wait_promoted(replica, Some(master_port));
        replica
    }

    /// SIGKILL the master on `master_port`. Its replica takes over once the
    /// others deem it failed ([`NODE_TIMEOUT`] and an election); see
    /// [`wait_slot_served`](Self::wait_slot_served). Returns the port of the
    /// replica that will take over.
    pub fn kill_master(&mut self, master_port: u16) -> u16 {
        let replica = self
            .replicas_of(master_port)
            .first()
            .map(|r| r.port())
            .unwrap_or_else(|| panic!("master :{master_port} has no replica"));
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.port() == master_port)
            .expect("a node of this cluster");
        node.stop();
        replica
    }

    /// Wait (30 s at most) until `new_master` is a master on every live
    /// node's view, `old_master` (if given and alive) a replica, and the
    /// cluster `ok` everywhere.
    pub fn wait_promoted(&self, new_master: u16, old_master: Option<u16>) {
        wait_for("the failover to be seen by every node", || {
            for node in self.nodes.iter().filter(|n| n.is_running()) {
                let rows = self.rows_of(node);
                let promoted = rows.iter().any(|r| r.port == new_master && r.master);
                let demoted = old_master.is_none_or(|old| {
                    rows.iter()
                        .any(|r| r.port == old && (!r.master || r.failed || r.slots.is_empty()))
                });
                let state = fields(&node.cmd::<String>(&["CLUSTER", "INFO"]));
                let ok = state.get("cluster_state").map(String::as_str) == Some("ok");
                if !(promoted && demoted && ok) {
                    return Err(format!("node :{} sees {rows:?}", node.port()));
                }
            }
            Ok(())
        });
    }

    /// Wait (30 s at most) until `slot` is served by a live master that
    /// every live node agrees on; returns its port.
    pub fn wait_slot_served(&self, slot: u16) -> u16 {
        let mut port = 0;
        wait_for("the slot to be served again", || {
            let mut owner = None;
            for node in self.nodes.iter().filter(|n| n.is_running()) {
                let rows = self.rows_of(node);
                let serving = rows
                    .iter()
                    .find(|r| r.serves(slot) && !r.failed)
                    .map(|r| r.port)
                    .filter(|p| self.node(*p).is_running());
                match (serving, owner) {
                    (None, _) => return Err(format!(":{} sees no live owner", node.port())),
                    (Some(p), None) => owner = Some(p),
                    (Some(p), Some(o)) if p != o => return Err(format!("owners {p} and {o}")),
                    _ => {}
                }
            }
            port = owner.ok_or("no live node")?;
            Ok(())
        });
        port
    }

    /// The port of a master other than the one serving `slot`: where a
    /// migration of it can go.
    pub fn other_master(&self, slot: u16) -> u16 {
        let from = self.node_for_slot(slot).port();
        self.masters()
            .iter()
            .map(|m| m.port())
            .find(|&p| p != from)
            .expect("a cluster of one master has nowhere to move a slot")
    }

    /// Start moving `slot` to the master on `to`: `SETSLOT IMPORTING` on
    /// it, `SETSLOT MIGRATING` on the current owner. Commands on the slot's
    /// existing keys still run on the old owner; new keys are redirected
    /// with ASK.
    pub fn begin_migration(&self, slot: u16, to: u16) -> Migration<'_> {
        let from = self.node_for_slot(slot).port();
        assert_ne!(from, to, "slot {slot} is already served by :{to}");
        let (from_id, to_id) = (self.id_of(from), self.id_of(to));
        let slot_arg = slot.to_string();
        let _: () = self
            .node(to)
            .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "IMPORTING", &from_id]);
        let _: () = self
            .node(from)
            .cmd(&["CLUSTER", "SETSLOT", &slot_arg, "MIGRATING", &to_id]);
        Migration {
            cluster: self,
            slot,
            from,
            to,
            to_id,
        }
    }

    /// Move `slot` to the master on `to`, keys and all.
    pub fn migrate_slot(&self, slot: u16, to: u16) {
        let migration = self.begin_migration(slot, to);
        migration.move_keys();
        migration.finish();
    }
}

/// A slot on its way from one master to another (see
/// [`Cluster::begin_migration`]).
pub struct Migration<'a> {
    cluster: &'a Cluster,
    slot: u16,
    from: u16,
    to: u16,
    to_id: String,
}

impl Migration<'_> {
    /// `MIGRATE` every key of the slot to the new owner (atomically per
    /// batch; a key moved is served there, with ASK, from then on).
    pub fn move_keys(&self) {
        self.move_keys_where(|_| true);
    }

    /// `MIGRATE` the slot's keys that `which` picks (a hundred per
    /// batch), leaving the others on the old owner: a reshard half-way,
    /// which moves keys in batches, in no order.
    pub fn move_keys_where(&self, which: impl Fn(&str) -> bool) {
        let from = self.cluster.node(self.from);
        let slot = self.slot.to_string();
        let to_port = self.to.to_string();
        let keys: Vec<String> = from.cmd(&["CLUSTER", "GETKEYSINSLOT", &slot, "1000000"]);
        let keys: Vec<&str> = keys
            .iter()
            .map(String::as_str)
            .filter(|k| which(k))
            .collect();
        for batch in keys.chunks(100) {
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(batch);
            let _: String = from.cmd(&args);
        }
    }

    /// `SETSLOT NODE` on every live master (replicas learn it from their
    /// masters): the new owner serves the slot and the old one answers
    /// MOVED. Waits until every live node agrees.
    pub fn finish(self) {
        let slot = self.slot.to_string();
        let order = [self.to, self.from];
        let masters: Vec<u16> = self.cluster.masters().iter().map(|m| m.port()).collect();
        let others = masters.into_iter().filter(|p| !order.contains(p));
        for port in order.into_iter().chain(others) {
            let node = self.cluster.node(port);
            if node.is_running() {
                let _: () = node.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &self.to_id]);
            }
        }
        let (to, slot) = (self.to, self.slot);
        wait_for("every node to see the slot moved", || {
            for node in self.cluster.nodes.iter().filter(|n| n.is_running()) {
                let rows = self.cluster.rows_of(node);
                if !rows.iter().any(|r| r.port == to && r.serves(slot)) {
                    return Err(format!(
                        ":{} does not see slot {slot} on :{to}",
                        node.port()
                    ));
                }
            }
            Ok(())
        });
    }

    /// The port of the master the slot leaves.
    pub fn from(&self) -> u16 {
        self.from
    }
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
            // A replica may always take over (no data-age limit), and
            // replicas stay with the master they were given.
            "--cluster-replica-validity-factor",
            "0",
            "--cluster-allow-replica-migration",
            "no",
        ];
        let mut node = RedisServer::unstarted(extra.map(str::to_owned).to_vec(), None);
        if node.try_boot() {
            return node;
        }
        log = node.log();
    }
    panic!("could not start a cluster node:\n{log}")
}
