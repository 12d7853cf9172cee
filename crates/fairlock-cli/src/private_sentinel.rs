//! A private Sentinel deployment for `fairlock torture --topology sentinel`:
//! two data nodes (a master and its replica), three sentinels (quorum 2,
//! down-after 1 s) and a standalone server that is only the run's clock
//! (`TIME`: the data nodes come and go, and all of them run on this
//! machine's clock). Every process on a free loopback port in a temp dir,
//! killed when dropped. Failover faults: SIGKILL or SIGSTOP of the master,
//! `SENTINEL FAILOVER`.

use std::time::{Duration, Instant};

use crate::private_redis::PrivateRedis;

/// The name the sentinels monitor the master under.
pub(crate) const SERVICE: &str = "fairlock";

/// How long the master may be unreachable before the sentinels fail over.
pub(crate) const DOWN_AFTER: Duration = Duration::from_secs(1);

/// How many sentinels watch the master (quorum 2).
pub(crate) const SENTINELS: usize = 3;

pub(crate) struct PrivateSentinel {
    // Dropped in field order: sentinels first, so none starts a failover
    // on the way out.
    sentinels: Vec<PrivateRedis>,
    nodes: Vec<PrivateRedis>,
    clock: PrivateRedis,
}

impl PrivateSentinel {
    /// Start everything and wait until the sentinels know the master, its
    /// replica and each other. Blocking.
    pub(crate) fn start() -> Result<Self, String> {
        let clock = PrivateRedis::start()?;
        let master = PrivateRedis::start()?;
        let port = master.port().to_string();
        let replica = PrivateRedis::start_with(None, &["--replicaof", "127.0.0.1", &port])?;
        let config = format!(
            "sentinel monitor {SERVICE} 127.0.0.1 {port} 2\n\
             sentinel down-after-milliseconds {SERVICE} {}\n\
             sentinel failover-timeout {SERVICE} 10000\n",
            DOWN_AFTER.as_millis()
        );
        let sentinels = (0..SENTINELS)
            .map(|_| PrivateRedis::start_with(Some(&config), &["--sentinel"]))
            .collect::<Result<Vec<_>, _>>()?;
        let deployment = Self {
            sentinels,
            nodes: vec![master, replica],
            clock,
        };
        deployment.wait_ready(Duration::from_secs(30))?;
        Ok(deployment)
    }

    /// Wait until every sentinel sees a master with one replica and two
    /// other sentinels.
    fn wait_ready(&self, limit: Duration) -> Result<(), String> {
        let deadline = Instant::now() + limit;
        loop {
            let ready = self.sentinels.iter().all(|sentinel| {
                let view: redis::RedisResult<Vec<String>> = sync_query(
                    &sentinel.url(),
                    redis::cmd("SENTINEL").arg("MASTER").arg(SERVICE),
                );
                let Ok(flat) = view else { return false };
                let field = |name: &str| {
                    flat.chunks(2)
                        .find(|pair| pair[0] == name)
                        .and_then(|pair| pair.get(1).cloned())
                };
                field("flags").as_deref() == Some("master")
                    && field("num-slaves").as_deref() == Some("1")
                    && field("num-other-sentinels").as_deref() == Some("2")
            });
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("the private Sentinel deployment did not get ready in time".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `redis+sentinel://...` for the clients.
    pub(crate) fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
    }

    /// The clock server's URL.
    pub(crate) fn clock_url(&self) -> String {
        self.clock.url()
    }

    /// The URL of the first sentinel but `frozen` (for `SENTINEL`
    /// commands).
    pub(crate) fn sentinel_url_except(&self, frozen: Option<usize>) -> String {
        let index = usize::from(frozen == Some(0));
        self.sentinels[index].url()
    }

    /// Every sentinel's URL, and every data node's (for diagnostics).
    pub(crate) fn all_urls(&self) -> (Vec<String>, Vec<String>) {
        (
            self.sentinels.iter().map(PrivateRedis::url).collect(),
            self.nodes.iter().map(PrivateRedis::url).collect(),
        )
    }

    /// The pid of sentinel `index`, while it runs.
    pub(crate) fn sentinel_pid(&self, index: usize) -> Option<u32> {
        self.sentinels.get(index).and_then(PrivateRedis::pid)
    }

    /// The URL of the data node on `port`, if it is one of ours.
    pub(crate) fn node_url(&self, port: u16) -> Option<String> {
        self.node(port).map(PrivateRedis::url)
    }

    fn node(&self, port: u16) -> Option<&PrivateRedis> {
        self.nodes.iter().find(|n| n.port() == port)
    }

    fn node_mut(&mut self, port: u16) -> Option<&mut PrivateRedis> {
        self.nodes.iter_mut().find(|n| n.port() == port)
    }

    /// The pid of the data node on `port`, while it runs.
    pub(crate) fn node_pid(&self, port: u16) -> Option<u32> {
        self.node(port).and_then(PrivateRedis::pid)
    }

    /// SIGKILL the data node on `port`.
    pub(crate) fn kill_node(&mut self, port: u16) {
        if let Some(node) = self.node_mut(port) {
            node.kill();
        }
    }

    /// Start the data node on `port` again, empty, as a replica of
    /// `master_port`. Blocking (waits for its port).
    pub(crate) fn rejoin(&mut self, port: u16, master_port: u16) -> Result<(), String> {
        let master = master_port.to_string();
        match self.node_mut(port) {
            Some(node) => node.spawn(&["--replicaof", "127.0.0.1", &master]),
            None => Err(format!("no data node on port {port}")),
        }
    }
}

/// One command on a fresh synchronous connection, bounded to 2 s.
fn sync_query<T: redis::FromRedisValue>(url: &str, cmd: &redis::Cmd) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_connection_with_timeout(Duration::from_secs(2))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    cmd.query(&mut conn)
}
