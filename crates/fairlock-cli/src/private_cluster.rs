//! A private Redis Cluster for `fairlock torture --topology cluster`: three
//! masters with a replica each (`--cluster-enabled yes`, joined with
//! `redis-cli --cluster create`, node timeout [`NODE_TIMEOUT`]), and a
//! standalone server that is only the run's clock (`TIME`: the nodes come
//! and go, and all of them run on this machine's clock). Every process on
//! a free loopback port in a temp dir, killed when dropped.
//!
//! The test-support crate has a cluster harness of the same shape, but it
//! panics on failure (it serves tests) and is not published; this one
//! returns errors, and every call on the nodes is bounded (a SIGSTOPped
//! node answers nothing). Nodes are named by their port: roles change with
//! failovers, ports do not. Every method blocks: call them off the runtime.

use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::private_redis::PrivateRedis;

/// How long a node may be unreachable before the others deem it failing
/// and its replica takes over.
pub(crate) const NODE_TIMEOUT: Duration = Duration::from_secs(2);

const MASTERS: usize = 3;

pub(crate) struct PrivateCluster {
    nodes: Vec<Node>,
    clock: PrivateRedis,
}

struct Node {
    server: PrivateRedis,
    /// Its `redis-server` options (the cluster bus port among them), to
    /// start it again with.
    args: Vec<String>,
}

/// One line of `CLUSTER NODES`, as far as the torture needs it.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    id: String,
    pub(crate) port: u16,
    pub(crate) master: bool,
    failed: bool,
    /// The master's id, for a replica.
    master_id: Option<String>,
    /// Served slot ranges (first, last); entries of migrations left out.
    slots: Vec<(u16, u16)>,
}

impl Row {
    /// `ID IP:PORT@BUS FLAGS MASTER PING PONG EPOCH STATE SLOTS...`.
    fn parse(line: &str) -> Option<Self> {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let address = fields.get(1)?.split('@').next()?;
        let flags: Vec<&str> = fields.get(2)?.split(',').collect();
        let master = *fields.get(3)?;
        let slots = fields
            .iter()
            .skip(8)
            .filter_map(|entry| {
                let (first, last) = entry.split_once('-').unwrap_or((entry, entry));
                Some((first.parse().ok()?, last.parse().ok()?))
            })
            .collect();
        Some(Self {
            id: (*fields.first()?).to_owned(),
            port: address.rsplit_once(':')?.1.parse().ok()?,
            master: flags.contains(&"master"),
            failed: flags.iter().any(|f| f.starts_with("fail")),
            master_id: (master != "-").then(|| master.to_owned()),
            slots,
        })
    }

    pub(crate) fn serves(&self, slot: u16) -> bool {
        self.master
            && !self.failed
            && self
                .slots
                .iter()
                .any(|&(first, last)| (first..=last).contains(&slot))
    }
}

impl PrivateCluster {
    /// Start the clock and six nodes, join them into a cluster and wait
    /// until it is ready (30 s at most).
    pub(crate) fn start() -> Result<Self, String> {
        let clock = PrivateRedis::start()?;
        let nodes = (0..MASTERS * 2)
            .map(|_| start_node())
            .collect::<Result<Vec<_>, _>>()?;
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.server.port()))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| format!("cannot run redis-cli from PATH ({e}); install it"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let cluster = Self { nodes, clock };
        cluster.wait("the cluster to get ready", Duration::from_secs(30), |c| {
            c.ready()
        })?;
        Ok(cluster)
    }

    /// Every node says `ok` with all slots served and every node known,
    /// and each master has a replica in sync.
    fn ready(&self) -> Result<(), String> {
        let total = self.nodes.len().to_string();
        for node in &self.nodes {
            let info = fields(&query::<String>(
                node.server.port(),
                redis::cmd("CLUSTER").arg("INFO"),
            )?);
            let ok = info.get("cluster_state").map(String::as_str) == Some("ok")
                && info.get("cluster_slots_ok").map(String::as_str) == Some("16384")
                && info.get("cluster_known_nodes") == Some(&total);
            if !ok {
                return Err(format!(":{} {info:?}", node.server.port()));
            }
        }
        let masters: Vec<Row> = self.rows()?.into_iter().filter(|r| r.master).collect();
        if masters.len() != MASTERS {
            return Err(format!("{} masters", masters.len()));
        }
        for master in &masters {
            if self.synced_replica(master.port)?.is_none() {
                return Err(format!(":{} has no replica in sync", master.port));
            }
        }
        Ok(())
    }

    /// Poll `ready` every 50 ms (another process's state: no event to
    /// wait on) for at most `limit`.
    fn wait(
        &self,
        what: &str,
        limit: Duration,
        ready: impl Fn(&Self) -> Result<(), String>,
    ) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            match ready(self) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("timed out waiting for {what}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// `redis+cluster://...` with every node as a seed.
    pub(crate) fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.server.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The clock server's URL.
    pub(crate) fn clock_url(&self) -> String {
        self.clock.url()
    }

    /// The hash slot of `key`, as the cluster computes it.
    pub(crate) fn slot_of(&self, key: &str) -> Result<u16, String> {
        self.ask(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// `CLUSTER NODES` as a node that runs and answers sees it.
    pub(crate) fn rows(&self) -> Result<Vec<Row>, String> {
        let nodes: String = self.ask(redis::cmd("CLUSTER").arg("NODES"))?;
        Ok(nodes.lines().filter_map(Row::parse).collect())
    }

    /// `cmd` on the first node that runs and answers within its bound.
    fn ask<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T, String> {
        let mut last = "no node runs".to_owned();
        for node in self.nodes.iter().filter(|n| n.server.pid().is_some()) {
            match query(node.server.port(), cmd) {
                Ok(reply) => return Ok(reply),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The port of the master serving `slot`, as the nodes see it.
    pub(crate) fn master_of(&self, slot: u16) -> Result<u16, String> {
        self.rows()?
            .into_iter()
            .find(|r| r.serves(slot))
            .map(|r| r.port)
            .ok_or_else(|| format!("no master serves slot {slot}"))
    }

    /// The masters serving slots now.
    pub(crate) fn masters(&self) -> Result<Vec<u16>, String> {
        Ok(self
            .rows()?
            .into_iter()
            .filter(|r| r.master && !r.failed && !r.slots.is_empty())
            .map(|r| r.port)
            .collect())
    }

    /// The replica of the master on `master` whose link is up and which the
    /// master counts as online, if there is one: a failover then loses
    /// little.
    pub(crate) fn synced_replica(&self, master: u16) -> Result<Option<u16>, String> {
        let rows = self.rows()?;
        let Some(id) = rows.iter().find(|r| r.port == master).map(|r| r.id.clone()) else {
            return Ok(None);
        };
        let master_info: String = query(master, redis::cmd("INFO").arg("replication"))?;
        for replica in rows
            .iter()
            .filter(|r| !r.master && !r.failed && r.master_id.as_deref() == Some(id.as_str()))
        {
            let info: String = query(replica.port, redis::cmd("INFO").arg("replication"))?;
            let linked = info.lines().any(|l| l.trim() == "master_link_status:up");
            let online = master_info.lines().any(|l| {
                l.starts_with("slave")
                    && l.contains(&format!("port={},", replica.port))
                    && l.contains("state=online")
            });
            if linked && online {
                return Ok(Some(replica.port));
            }
        }
        Ok(None)
    }

    /// Every node that runs says the cluster is `ok`.
    pub(crate) fn healthy(&self) -> Result<(), String> {
        for node in self.nodes.iter().filter(|n| n.server.pid().is_some()) {
            let port = node.server.port();
            let info = fields(&query::<String>(port, redis::cmd("CLUSTER").arg("INFO"))?);
            if info.get("cluster_state").map(String::as_str) != Some("ok") {
                return Err(format!(":{port} says the cluster is not ok"));
            }
        }
        Ok(())
    }

    /// A graceful `CLUSTER FAILOVER` on `replica`; returns at once (the
    /// roles swap within a second or so).
    pub(crate) fn failover(&self, replica: u16) -> Result<(), String> {
        query::<()>(replica, redis::cmd("CLUSTER").arg("FAILOVER"))
    }

    /// The pid of the node on `port`, while it runs.
    pub(crate) fn pid(&self, port: u16) -> Option<u32> {
        self.node(port).and_then(|n| n.server.pid())
    }

    fn node(&self, port: u16) -> Option<&Node> {
        self.nodes.iter().find(|n| n.server.port() == port)
    }

    fn node_mut(&mut self, port: u16) -> Option<&mut Node> {
        self.nodes.iter_mut().find(|n| n.server.port() == port)
    }

    /// SIGKILL the node on `port` (and reap it).
    pub(crate) fn kill(&mut self, port: u16) {
        if let Some(node) = self.node_mut(port) {
            node.server.kill();
        }
    }

    /// Start the node on `port` again with its cluster config (it comes
    /// back as a replica of whoever took its slots). Waits for its port.
    pub(crate) fn restart(&mut self, port: u16) -> Result<(), String> {
        let node = self
            .node_mut(port)
            .ok_or_else(|| format!("no node on port {port}"))?;
        let args: Vec<&str> = node.args.iter().map(String::as_str).collect();
        node.server.spawn(&args)
    }

    /// First step of moving `slot` to the master on `to`, as `redis-cli
    /// --cluster reshard` does: `SETSLOT IMPORTING` on it, `SETSLOT
    /// MIGRATING` on the slot's master, whose port is returned.
    pub(crate) fn begin_migration(&self, slot: u16, to: u16) -> Result<u16, String> {
        let from = self.master_of(slot)?;
        if from == to {
            return Err(format!("slot {slot} is on :{to} already"));
        }
        let (from_id, to_id) = (self.id_of(from)?, self.id_of(to)?);
        query::<()>(
            to,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(from_id),
        )?;
        query::<()>(
            from,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(to_id),
        )?;
        Ok(from)
    }

    /// Second step: `MIGRATE` every key of `slot` from `from` to `to`.
    pub(crate) fn move_keys(&self, slot: u16, from: u16, to: u16) -> Result<(), String> {
        for _ in 0..1000 {
            let keys: Vec<String> = query(
                from,
                redis::cmd("CLUSTER")
                    .arg("GETKEYSINSLOT")
                    .arg(slot)
                    .arg(100),
            )?;
            if keys.is_empty() {
                return Ok(());
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(to)
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            query::<String>(from, &migrate)?;
        }
        Err(format!("slot {slot} kept getting new keys"))
    }

    /// Last step: `SETSLOT NODE` on the new owner, the old one, then every
    /// other master (their replicas learn it from them).
    pub(crate) fn finish_migration(&self, slot: u16, from: u16, to: u16) -> Result<(), String> {
        let to_id = self.id_of(to)?;
        let mut order = vec![to, from];
        order.extend(
            self.masters()?
                .into_iter()
                .filter(|p| *p != to && *p != from),
        );
        for port in order {
            if self.pid(port).is_some() {
                query::<()>(
                    port,
                    redis::cmd("CLUSTER")
                        .arg("SETSLOT")
                        .arg(slot)
                        .arg("NODE")
                        .arg(&to_id),
                )?;
            }
        }
        Ok(())
    }

    fn id_of(&self, port: u16) -> Result<String, String> {
        query(port, redis::cmd("CLUSTER").arg("MYID"))
    }
}

/// A cluster node on a free port, its bus on another. A bus port taken
/// meanwhile costs a new pair.
fn start_node() -> Result<Node, String> {
    let mut last = String::new();
    for _ in 0..5 {
        let bus = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("cannot find a free port: {e}"))?
            .port();
        let args: Vec<String> = [
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            &bus.to_string(),
            "--cluster-node-timeout",
            &NODE_TIMEOUT.as_millis().to_string(),
            // A replica may always take over, and stays with its master.
            "--cluster-replica-validity-factor",
            "0",
            "--cluster-allow-replica-migration",
            "no",
        ]
        .map(str::to_owned)
        .to_vec();
        let extra: Vec<&str> = args.iter().map(String::as_str).collect();
        match PrivateRedis::start_with(None, &extra) {
            Ok(server) => return Ok(Node { server, args }),
            Err(e) => last = e,
        }
    }
    Err(format!("could not start a cluster node: {last}"))
}

/// One command on the node on `port`, on a fresh connection, within 2 s.
fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> Result<T, String> {
    let run = || -> redis::RedisResult<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
        let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
        conn.set_read_timeout(Some(Duration::from_secs(2)))?;
        conn.set_write_timeout(Some(Duration::from_secs(2)))?;
        cmd.query(&mut conn)
    };
    run().map_err(|e| format!(":{port}: {e}"))
}

/// `key:value` lines (INFO, CLUSTER INFO).
fn fields(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}
