//! A loopback TCP proxy between the torture workers and Redis, for faults
//! of the network: replies delayed (slow, not timed out), pub/sub
//! connections killed silently (every byte dropped, no FIN), and every
//! connection cut. Traffic goes to the private (or given) server only.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Default)]
struct Connection {
    pubsub: AtomicBool,
    dead: AtomicBool,
    closed: AtomicBool,
    cut: tokio::sync::Notify,
}

#[derive(Default)]
struct State {
    reply_delay_ms: AtomicU64,
    connections: Mutex<Vec<Arc<Connection>>>,
}

pub(crate) struct FaultProxy {
    port: u16,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    /// Listen on a free loopback port, forwarding to `target` (`host:port`).
    pub(crate) async fn start(target: String) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let state = Arc::new(State::default());
        let accept_state = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&target).await else {
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                let conn = Arc::new(Connection::default());
                {
                    let mut all = accept_state
                        .connections
                        .lock()
                        .unwrap_or_else(|e| e.into_inner());
                    all.retain(|c| !c.closed.load(Ordering::SeqCst) && Arc::strong_count(c) > 1);
                    all.push(Arc::clone(&conn));
                }
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pump(
                    Arc::clone(&accept_state),
                    Arc::clone(&conn),
                    client_read,
                    server_write,
                    false,
                ));
                tokio::spawn(pump(
                    Arc::clone(&accept_state),
                    conn,
                    server_read,
                    client_write,
                    true,
                ));
            }
        });
        Ok(Self {
            port,
            state,
            accept,
        })
    }

    pub(crate) fn url(&self, base: &str) -> String {
        // Same scheme, credentials and database; our port on loopback.
        match base.split_once("://") {
            Some((scheme, rest)) => {
                let (auth, hostpart) = match rest.rsplit_once('@') {
                    Some((auth, host)) => (format!("{auth}@"), host),
                    None => (String::new(), rest),
                };
                let path = hostpart
                    .split_once('/')
                    .map(|(_, p)| format!("/{p}"))
                    .unwrap_or_default();
                format!("{scheme}://{auth}127.0.0.1:{}{path}", self.port)
            }
            None => format!("redis://127.0.0.1:{}", self.port),
        }
    }

    /// Deliver every reply `delay` late (zero: on time).
    pub(crate) fn delay_replies(&self, delay: Duration) {
        self.state
            .reply_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Kill the open pub/sub connections silently.
    pub(crate) fn blackhole_pubsub(&self) -> usize {
        let all = self
            .state
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut n = 0;
        for conn in all.iter().filter(|c| c.pubsub.load(Ordering::SeqCst)) {
            conn.dead.store(true, Ordering::SeqCst);
            n += 1;
        }
        n
    }

    /// Cut every open connection.
    pub(crate) fn cut_all(&self) {
        let mut all = self
            .state
            .connections
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for conn in all.drain(..) {
            conn.closed.store(true, Ordering::SeqCst);
            conn.cut.notify_waiters();
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut_all();
    }
}

async fn pump(
    state: Arc<State>,
    conn: Arc<Connection>,
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    replies: bool,
) {
    // Reader -> delayed writer, so that a delay never reorders bytes.
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader_conn = Arc::clone(&conn);
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = tokio::select! {
                read = from.read(&mut buf) => match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                },
                () = reader_conn.cut.notified() => break,
            };
            if reader_conn.closed.load(Ordering::SeqCst) {
                break;
            }
            if !replies
                && buf[..n]
                    .windows(9)
                    .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
            {
                reader_conn.pubsub.store(true, Ordering::SeqCst);
            }
            if reader_conn.dead.load(Ordering::SeqCst) && reader_conn.pubsub.load(Ordering::SeqCst)
            {
                continue;
            }
            if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
    });
    loop {
        let next = tokio::select! {
            next = rx.recv() => next,
            () = conn.cut.notified() => None,
        };
        let Some((read_at, chunk)) = next else { break };
        if conn.closed.load(Ordering::SeqCst) {
            break;
        }
        if replies {
            let delay = state.reply_delay_ms.load(Ordering::SeqCst);
            tokio::time::sleep_until(read_at + Duration::from_millis(delay)).await;
        }
        if conn.dead.load(Ordering::SeqCst) && conn.pubsub.load(Ordering::SeqCst) {
            continue;
        }
        if to.write_all(&chunk).await.is_err() {
            break;
        }
    }
    reader.abort();
    let _ = to.shutdown().await;
}
