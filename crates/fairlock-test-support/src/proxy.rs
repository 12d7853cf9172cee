//! A small loopback TCP proxy for fault injection: forwards to a target
//! port, and on command stalls all traffic, cuts every connection, refuses
//! new ones, delays replies, or (on pub/sub connections only: those that
//! sent a SUBSCRIBE) delays messages or silently drops every byte. It can
//! also hold the requests of command connections, or the messages of pub/sub
//! connections, apart from each other (so that a script runs only after
//! other clients' calls while the client's messages still flow, say), and
//! counts the script calls sent and the messages delivered that contain a
//! pattern, for tests to wait on.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

const PASS: u8 = 0;
const STALL: u8 = 1;
const REFUSE: u8 = 2;
/// Requests go through; once a script call (EVALSHA) went through, replies
/// are held.
const HOLD_SCRIPT_REPLIES: u8 = 3;

struct State {
    mode: AtomicU8,
    /// Every server-to-client byte is delivered this many ms late.
    reply_delay_ms: AtomicU64,
    /// The same, for pub/sub connections only.
    pubsub_delay_ms: AtomicU64,
    /// Extra delay of replies on connections that are not pub/sub ones.
    command_delay_ms: AtomicU64,
    /// Per connection: (is pub/sub, swallows every byte).
    flags: Mutex<Vec<Arc<ConnFlags>>>,
    stopped: AtomicBool,
    /// A script call went through while replies to scripts are held.
    script_sent: AtomicBool,
    /// Both ends of every live connection, to cut them.
    connections: Mutex<Vec<(TcpStream, TcpStream)>>,
    /// Requests of command connections (not pub/sub ones) are held.
    hold_requests: AtomicBool,
    /// Server-to-client bytes of pub/sub connections are held.
    hold_pubsub: AtomicBool,
    /// Script calls (`EVALSHA`) read from command connections so far,
    /// held or not.
    script_calls: AtomicU64,
    /// The pattern [`Proxy::watch_pubsub`] set, and how many chunks
    /// containing it were delivered to pub/sub connections since.
    watch: Mutex<Option<Vec<u8>>>,
    watched: AtomicU64,
}

#[derive(Default)]
struct ConnFlags {
    pubsub: AtomicBool,
    dead: AtomicBool,
}

/// A running proxy (see the [module docs](self)); stops on drop.
pub struct Proxy {
    port: u16,
    state: Arc<State>,
}

impl Proxy {
    /// Listen on a free loopback port and forward to `127.0.0.1:target`.
    pub fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        let state = Arc::new(State {
            mode: AtomicU8::new(PASS),
            reply_delay_ms: AtomicU64::new(0),
            pubsub_delay_ms: AtomicU64::new(0),
            command_delay_ms: AtomicU64::new(0),
            flags: Mutex::new(Vec::new()),
            stopped: AtomicBool::new(false),
            script_sent: AtomicBool::new(false),
            connections: Mutex::new(Vec::new()),
            hold_requests: AtomicBool::new(false),
            hold_pubsub: AtomicBool::new(false),
            script_calls: AtomicU64::new(0),
            watch: Mutex::new(None),
            watched: AtomicU64::new(0),
        });
        let accept_state = Arc::clone(&state);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                if accept_state.stopped.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(client) = client else { continue };
                if accept_state.mode.load(Ordering::SeqCst) == REFUSE {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                if let (Ok(c), Ok(s)) = (client.try_clone(), server.try_clone()) {
                    accept_state.connections.lock().unwrap().push((c, s));
                }
                let flags = Arc::new(ConnFlags::default());
                accept_state.flags.lock().unwrap().push(Arc::clone(&flags));
                pump(&accept_state, &client, &server, false, &flags);
                pump(&accept_state, &server, &client, true, &flags);
            }
        });
        Self { port, state }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Forward normally (held requests and messages included).
    pub fn pass(&self) {
        self.state.hold_requests.store(false, Ordering::SeqCst);
        self.state.hold_pubsub.store(false, Ordering::SeqCst);
        self.state.mode.store(PASS, Ordering::SeqCst);
    }

    /// Hold every request of the command connections (those that never
    /// sent a SUBSCRIBE) until [`release_requests`](Self::release_requests)
    /// or [`pass`](Self::pass): a call sent meanwhile runs on the server
    /// only then, after whatever other clients did in between. Pub/sub
    /// connections are not held.
    pub fn hold_requests(&self) {
        self.state.hold_requests.store(true, Ordering::SeqCst);
    }

    /// Let the held requests (and later ones) through, in order.
    pub fn release_requests(&self) {
        self.state.hold_requests.store(false, Ordering::SeqCst);
    }

    /// Hold every byte the server sends to pub/sub connections (messages,
    /// PING replies) until [`release_pubsub`](Self::release_pubsub) or
    /// [`pass`](Self::pass).
    pub fn hold_pubsub(&self) {
        self.state.hold_pubsub.store(true, Ordering::SeqCst);
    }

    /// Deliver the held pub/sub bytes (and later ones), in order.
    pub fn release_pubsub(&self) {
        self.state.hold_pubsub.store(false, Ordering::SeqCst);
    }

    /// Script calls (`EVALSHA`) the clients sent on command connections so
    /// far, counted as they reach the proxy (held ones included).
    pub fn script_calls(&self) -> u64 {
        self.state.script_calls.load(Ordering::SeqCst)
    }

    /// Count, from now on, the chunks delivered to pub/sub connections that
    /// contain `pattern` (see [`pubsub_delivered`](Self::pubsub_delivered)).
    pub fn watch_pubsub(&self, pattern: &[u8]) {
        assert!(!pattern.is_empty(), "watch a pattern of at least one byte");
        *self.state.watch.lock().unwrap() = Some(pattern.to_vec());
        self.state.watched.store(0, Ordering::SeqCst);
    }

    /// Chunks containing the pattern of the last
    /// [`watch_pubsub`](Self::watch_pubsub) delivered to a pub/sub
    /// connection (written to the client's socket) since that call.
    pub fn pubsub_delivered(&self) -> u64 {
        self.state.watched.load(Ordering::SeqCst)
    }

    /// Hold all bytes in both directions (connections stay open).
    pub fn stall(&self) {
        self.state.mode.store(STALL, Ordering::SeqCst);
    }

    /// Forward requests, but from the next script call (EVALSHA) on hold
    /// every reply: the script runs, its reply is "lost" in flight once the
    /// connections are cut.
    pub fn hold_script_replies(&self) {
        self.state.script_sent.store(false, Ordering::SeqCst);
        self.state.mode.store(HOLD_SCRIPT_REPLIES, Ordering::SeqCst);
    }

    /// Deliver every reply (all server-to-client bytes) `delay` late.
    pub fn delay_replies(&self, delay: Duration) {
        self.state
            .reply_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Deliver pub/sub messages `delay` late (other connections untouched).
    pub fn delay_pubsub(&self, delay: Duration) {
        self.state
            .pubsub_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Deliver the replies of command connections (not pub/sub ones)
    /// `delay` late: a script's reply then arrives after messages the
    /// server published later.
    pub fn delay_command_replies(&self, delay: Duration) {
        self.state
            .command_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Kill the open pub/sub connections silently: from now on every byte
    /// either way is dropped, no FIN, no RST (a vanished peer or NAT entry).
    /// Connections made later are not affected.
    pub fn blackhole_pubsub(&self) {
        for flags in self.state.flags.lock().unwrap().iter() {
            if flags.pubsub.load(Ordering::SeqCst) {
                flags.dead.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Close new connections at once.
    pub fn refuse(&self) {
        self.state.mode.store(REFUSE, Ordering::SeqCst);
    }

    /// Cut every open connection.
    pub fn cut_all(&self) {
        for (a, b) in self.state.connections.lock().unwrap().drain(..) {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::SeqCst);
        self.cut_all();
        // Wake the accept loop so it sees `stopped`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copy `from` -> `to`: a reader thread timestamps each chunk, a writer
/// thread delivers it (holding bytes while stalled, and, for the reply
/// direction, while replies are held or until their delay passed).
fn pump(
    state: &Arc<State>,
    from: &TcpStream,
    to: &TcpStream,
    replies: bool,
    flags: &Arc<ConnFlags>,
) {
    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
        return;
    };
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<u8>)>();
    let (reader_state, reader_flags) = (Arc::clone(state), Arc::clone(flags));
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if !replies {
                let chunk = &buf[..n];
                if reader_state.mode.load(Ordering::SeqCst) == HOLD_SCRIPT_REPLIES
                    && chunk.windows(7).any(|w| w == b"EVALSHA")
                {
                    reader_state.script_sent.store(true, Ordering::SeqCst);
                }
                if chunk
                    .windows(9)
                    .any(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
                {
                    reader_flags.pubsub.store(true, Ordering::SeqCst);
                }
                if !reader_flags.pubsub.load(Ordering::SeqCst) {
                    let calls = chunk.windows(7).filter(|w| w == b"EVALSHA").count();
                    reader_state
                        .script_calls
                        .fetch_add(calls as u64, Ordering::SeqCst);
                }
            }
            if reader_flags.dead.load(Ordering::SeqCst) {
                continue;
            }
            if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                break;
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    let state = Arc::clone(state);
    let flags = Arc::clone(flags);
    std::thread::spawn(move || {
        for (read_at, chunk) in rx {
            loop {
                let mode = state.mode.load(Ordering::SeqCst);
                let pubsub = flags.pubsub.load(Ordering::SeqCst);
                let held = mode == STALL
                    || (replies
                        && mode == HOLD_SCRIPT_REPLIES
                        && state.script_sent.load(Ordering::SeqCst))
                    || (!replies && !pubsub && state.hold_requests.load(Ordering::SeqCst))
                    || (replies && pubsub && state.hold_pubsub.load(Ordering::SeqCst));
                if !held || state.stopped.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            if replies {
                let mut delay = state.reply_delay_ms.load(Ordering::SeqCst);
                if flags.pubsub.load(Ordering::SeqCst) {
                    delay = delay.max(state.pubsub_delay_ms.load(Ordering::SeqCst));
                } else {
                    delay = delay.max(state.command_delay_ms.load(Ordering::SeqCst));
                }
                let due = read_at + Duration::from_millis(delay);
                let now = Instant::now();
                if due > now {
                    std::thread::sleep(due - now);
                }
            }
            if flags.dead.load(Ordering::SeqCst) {
                continue;
            }
            if to.write_all(&chunk).is_err() {
                break;
            }
            if replies && flags.pubsub.load(Ordering::SeqCst) {
                let watch = state.watch.lock().unwrap();
                if let Some(pattern) = watch.as_deref() {
                    if chunk.windows(pattern.len()).any(|w| w == pattern) {
                        state.watched.fetch_add(1, Ordering::SeqCst);
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
}
