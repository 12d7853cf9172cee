//! A master with replicas, watched by Sentinel processes (`redis-server
//! CONF --sentinel`), all on free loopback ports in temp dirs, without
//! persistence. Ready once every replica is linked to the master and every
//! sentinel knows the master, each replica and every other sentinel.
//! Killed on drop (sentinels first); each process's log is printed when the
//! owning test panicked.

use std::collections::HashMap;
use std::time::Duration;

use crate::RedisServer;
use crate::readiness::{info, wait_for};

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "fairlock";

/// How long a master may be unreachable before a sentinel deems it down:
/// short, so that failover tests need not wait Redis's default 30 s.
pub const DOWN_AFTER: Duration = Duration::from_secs(1);

/// A master, its replicas and the sentinels that watch them (see the
/// [module docs](self)).
pub struct Sentinel {
    // Dropped in field order: the sentinels go before the servers they
    // watch, so that none starts a failover on the way out.
    sentinels: Vec<RedisServer>,
    replicas: Vec<RedisServer>,
    master: RedisServer,
}

impl Sentinel {
    /// A master with two replicas and three sentinels (quorum 2).
    pub fn start() -> Self {
        Self::start_with(2, 3)
    }

    /// A master with `replicas` replicas and `sentinels` sentinels; the
    /// quorum is a majority of the sentinels.
    pub fn start_with(replicas: usize, sentinels: usize) -> Self {
        assert!(sentinels > 0, "a Sentinel deployment needs a sentinel");
        let master = RedisServer::start();
        let master_port = master.port().to_string();
        let replicas: Vec<RedisServer> = (0..replicas)
            .map(|_| RedisServer::start_with(&["--replicaof", "127.0.0.1", &master_port]))
            .collect();
        wait_for("the replicas to link to the master", || {
            let linked = replicas.iter().all(|r| {
                info(r, "replication")
                    .get("master_link_status")
                    .map(String::as_str)
                    == Some("up")
            });
            let connected = info(&master, "replication")
                .get("connected_slaves")
                .and_then(|n| n.parse::<usize>().ok());
            (linked && connected == Some(replicas.len()))
                .then_some(())
                .ok_or_else(|| format!("master sees {connected:?} replicas"))
        });
        let quorum = sentinels / 2 + 1;
        // failover-timeout: a sentinel whose failover attempt failed (an
        // election lost or split, frequent on a loaded machine) tries again
        // only after twice this; 5 s keeps a retried failover within about
        // 10 s (with Redis's 10 s, two failed attempts took over 40 s at
        // load 10 and exhausted the tests' retry budgets).
        let config = format!(
            "sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} {quorum}\n\
             sentinel down-after-milliseconds {MASTER_NAME} {}\n\
             sentinel failover-timeout {MASTER_NAME} 5000\n",
            DOWN_AFTER.as_millis()
        );
        let sentinels = (0..sentinels)
            .map(|_| RedisServer::start_with_config("sentinel.conf", &config, &["--sentinel"]))
            .collect();
        let deployment = Self {
            sentinels,
            replicas,
            master,
        };
        deployment.wait_ready();
        deployment
    }

    fn wait_ready(&self) {
        let (replicas, others) = (self.replicas.len(), self.sentinels.len() - 1);
        wait_for("the sentinels to know the deployment", || {
            for sentinel in &self.sentinels {
                let view = master_view(sentinel);
                let ready = view.get("ip").map(String::as_str) == Some("127.0.0.1")
                    && view.get("port") == Some(&self.master.port().to_string())
                    && view.get("flags").map(String::as_str) == Some("master")
                    && view.get("num-slaves") == Some(&replicas.to_string())
                    && view.get("num-other-sentinels") == Some(&others.to_string());
                if !ready {
                    return Err(format!("sentinel {}: {view:?}", sentinel.addr()));
                }
            }
            Ok(())
        });
    }

    /// `SENTINEL FAILOVER` (a live master demoted, a replica promoted), and
    /// wait (at most 60 s) until the sentinels name another master.
    pub async fn fail_over(&self) {
        let old = self.master_addr();
        let _: String = self.sentinels[0].cmd(&["SENTINEL", "FAILOVER", MASTER_NAME]);
        crate::eventually(Duration::from_secs(60), "a replica promoted", || {
            self.master_addr() != old
        })
        .await;
    }

    /// The master the deployment was started with (after a failover it may
    /// be a replica: [`master_addr`](Self::master_addr) asks the sentinels).
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// As [`master`](Self::master), to stop or restart it.
    pub fn master_mut(&mut self) -> &mut RedisServer {
        &mut self.master
    }

    /// The replicas the deployment was started with.
    pub fn replicas(&self) -> &[RedisServer] {
        &self.replicas
    }

    /// The sentinel processes.
    pub fn sentinels(&self) -> &[RedisServer] {
        &self.sentinels
    }

    /// `127.0.0.1:PORT` of each sentinel: what a client is given.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::addr).collect()
    }

    /// `redis+sentinel://127.0.0.1:P1,127.0.0.1:P2,.../fairlock`: what a
    /// fairlock client is given.
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://{}/{MASTER_NAME}",
            self.sentinel_addrs().join(",")
        )
    }

    /// `127.0.0.1:PORT` of the master, as the first sentinel names it now.
    pub fn master_addr(&self) -> String {
        let (ip, port): (String, u16) =
            self.sentinels[0].cmd(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME]);
        format!("{ip}:{port}")
    }
}

/// `SENTINEL MASTER` of `sentinel`, as field -> value.
fn master_view(sentinel: &RedisServer) -> HashMap<String, String> {
    let flat: Vec<String> = sentinel.cmd(&["SENTINEL", "MASTER", MASTER_NAME]);
    pairs(flat)
}

fn pairs(flat: Vec<String>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let mut items = flat.into_iter();
    while let (Some(k), Some(v)) = (items.next(), items.next()) {
        map.insert(k, v);
    }
    map
}
