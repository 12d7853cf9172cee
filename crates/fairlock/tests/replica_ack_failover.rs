//! `min_replicas` where it meets a failover between a grant and its `WAIT`:
//! the grant came from the old master (a handoff message, read late), the
//! `WAIT` goes to the new master, whose replicas acknowledge its own
//! writes, not the grant, which it never had.
//!
//! The failover happens behind one address (a virtual IP, a DNS name, a
//! cloud endpoint: a standalone URL whose server is replaced by a promoted
//! replica), made here with a small switchable forwarder: connections made
//! after the switch reach the new master; the old pub/sub connection keeps
//! delivering what the old master published (late, as a slow network does).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{LockClient, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{RedisServer, eventually, queue_len};

/// A forwarder to a port that can be switched: new connections go to the
/// current target; `fail_over_to` also closes every open connection that is
/// not a pub/sub one (those that sent SUBSCRIBE), which stay on the old
/// server and deliver what it published.
struct Switch {
    port: u16,
    target: Arc<AtomicU16>,
    commands: Arc<Mutex<Vec<Forwarded>>>,
}

/// One forwarded connection: client side, server side, and whether it
/// subscribed (a pub/sub connection).
type Forwarded = (TcpStream, TcpStream, Arc<AtomicBool>);

impl Switch {
    fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let commands = Arc::new(Mutex::new(Vec::new()));
        let (to, conns) = (Arc::clone(&target), Arc::clone(&commands));
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to.load(Ordering::SeqCst)))
                else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let pubsub = Arc::new(AtomicBool::new(false));
                conns.lock().unwrap().push((
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    Arc::clone(&pubsub),
                ));
                // Client to server: note SUBSCRIBE, forward at once.
                let (mut from, mut into, flag) = (
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    Arc::clone(&pubsub),
                );
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        if buf[..n]
                            .windows(9)
                            .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
                        {
                            flag.store(true, Ordering::SeqCst);
                        }
                        if into.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = into.shutdown(Shutdown::Write);
                });
                // Server to client.
                let (mut from, mut into) = (server, client);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 || into.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = into.shutdown(Shutdown::Write);
                });
            }
        });
        Self {
            port,
            target,
            commands,
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// New connections go to `port`; open command connections are cut.
    fn fail_over_to(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
        for (client, server, pubsub) in self.commands.lock().unwrap().iter() {
            if !pubsub.load(Ordering::SeqCst) {
                let _ = client.shutdown(Shutdown::Both);
                let _ = server.shutdown(Shutdown::Both);
            }
        }
    }
}

fn linked(replica: &RedisServer) -> bool {
    let info: String = replica.cmd(&["INFO", "replication"]);
    info.contains("master_link_status:up")
}

/// M is the master; R replicates it through a proxy (so that its stream
/// can be held and then cut: R misses the waiter's queue entry, the
/// release and its grant); R2
/// replicates R. The waiter (min_replicas 1) reaches the servers through
/// one address. M "fails": R is promoted (it has the holder's hold, which
/// runs out there in 2 s) and the address leads to R; the holder's release
/// on M hands the lock to the waiter, whose grant message comes on its
/// pub/sub connection to M. The waiter's WAIT goes to R, and R2
/// acknowledges R's own writes: the waiter returns a guard for a grant no
/// replica ever had, and the new master gives the lock to someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_ack_after_a_failover_does_not_confirm_a_lost_grant() {
    let master = RedisServer::start();
    let stream = Proxy::start(master.port());
    let port = stream.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    let replica_port = replica.port().to_string();
    let second = RedisServer::start_with(&["--replicaof", "127.0.0.1", &replica_port]);
    eventually(Duration::from_secs(20), "the replicas to link", || {
        linked(&replica) && linked(&second)
    })
    .await;

    let switch = Switch::start(master.port());
    let waiter = LockClient::with_config(
        fairlock::ClientConfig::from_url(&switch.url())
            .unwrap()
            .protocol(Protocol::Native)
            .min_replicas(1, Duration::from_millis(500))
            .waiter_ttl(Duration::from_secs(10))
            .response_timeout(Duration::from_millis(800)),
    )
    .await
    .unwrap();
    // The holder: lease 2 s, so that on the promoted replica its hold ends
    // soon and another client takes the lock.
    let holder = support::client_with(&master, Protocol::Native, |c| {
        c.lease(Duration::from_secs(2))
    })
    .await;
    let name = "acked-failover";
    let held = holder.fair_lock(name).unwrap().lock().await.unwrap();
    // The hold reached R; from now on R gets nothing (not the waiter's
    // queue entry, not the release, not the grant).
    eventually(Duration::from_secs(5), "R has the hold", || {
        support::is_held(&replica, Protocol::Native, name)
    })
    .await;
    stream.stall();
    let waiting = tokio::spawn({
        let lock = waiter.fair_lock(name).unwrap();
        async move { lock.lock().await }
    });
    eventually(
        Duration::from_secs(5),
        "the waiter queued and subscribed",
        || {
            queue_len(&master, Protocol::Native, name) == 1
                && master.wait_channels().iter().any(|c| c.contains(name))
        },
    )
    .await;
    held.unlock().await.unwrap();
    // M published the grant (on its way to the waiter, 1.5 s late). M
    // fails: R, which never had the release, is promoted.
    stream.cut_all();
    let _: String = replica.cmd(&["REPLICAOF", "NO", "ONE"]);
    switch.fail_over_to(replica.port());
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter returns")
        .unwrap();
    let Ok(guard) = guard else {
        eprintln!("refused: {guard:?}");
        return;
    };
    eprintln!(
        "guard after {:?}, believed held: {}",
        started.elapsed(),
        guard.is_held()
    );
    // On the new master the holder's hold (2 s lease) runs out, and the
    // lock goes to another client while the waiter still believes it.
    let other = support::client(&replica, Protocol::Native).await;
    let taken = other
        .fair_lock(name)
        .unwrap()
        .try_lock_for(Duration::from_secs(3))
        .await
        .unwrap();
    let (lock_key, queue_key, _) = support::lock_keys(Protocol::Native, name);
    let fields: Option<String> = replica.cmd(&["GET", &lock_key]);
    let queue: Vec<String> = replica.cmd(&["ZRANGE", &queue_key, "0", "-1"]);
    let pttl: i64 = replica.cmd(&["PTTL", &lock_key]);
    eprintln!("new master: lock {fields:?} pttl {pttl}, queue {queue:?}");
    eprintln!(
        "other client took it: {}, waiter believes held: {}",
        taken.is_some(),
        guard.is_held()
    );
    assert!(
        !(taken.is_some() && guard.is_held()),
        "two holders: the waiter's grant was lost in the failover, yet WAIT on the new master confirmed it"
    );
    drop(taken);
    drop(guard);
    other.shutdown().await;
    waiter.shutdown().await;
    holder.shutdown().await;
}
