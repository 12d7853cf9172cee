//! Redis Sentinel: the command connection that follows the master (the
//! `redis+sentinel://` URL is parsed in `url.rs`).
//!
//! ## Behavior
//! - **Discovery.** At connect, each sentinel is asked in turn (in the URL's
//!   order) for `SENTINEL GET-MASTER-ADDR-BY-NAME SERVICE`; the address it
//!   names is used only once `ROLE` there answers `master` (a sentinel that
//!   has not noticed a failover yet names a demoted master).
//! - **Following.** The connection re-resolves the master (in the
//!   background, one resolution at a time) when a command fails on the
//!   connection or is refused as `READONLY`, `MASTERDOWN` or `LOADING`, and
//!   when a sentinel announces `+switch-master` for the service (one
//!   sentinel's pub/sub is listened to at a time; the next one is tried
//!   when it breaks). The failed command itself is not resent here: it
//!   fails with a retryable error, and the caller's retry policy sends it
//!   again, to the new master once it is known.
//! - **Silent sentinels.** The listening connection is PINGed every
//!   second; a PING unanswered within the response timeout counts as a
//!   broken connection (the next sentinel is listened to, and the master
//!   re-resolved). Independently, every 5 s the sentinels are asked (in
//!   turn, one `SENTINEL GET-MASTER-ADDR-BY-NAME` until one answers) which
//!   master they name; when it is not the one in use, the master is
//!   re-resolved. Resolutions start with the sentinel that answered last,
//!   so a silent sentinel costs one timeout, not one per resolution.
//! - A re-resolution asked for while one runs is not lost: the running
//!   one resolves once more when it ends.
//! - **Pub/sub follows too**: every switch to a new master closes the
//!   wake-up connection's stream, and the router reconnects to the master
//!   now known (see `pubsub.rs`).
//! - A resolution keeps trying (50 ms doubling to 1 s) until a sentinel
//!   names an address whose `ROLE` is `master`; while it tries, commands go
//!   to the last master known and fail or succeed there.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use super::direct::Direct;
use super::endpoint::Endpoint;
use super::errors::{from_first_reply, from_redis_conn, timed_out};
use super::messages::Incoming;
use super::server_pubsub;
use super::timeouts::Timeouts;
use super::url::{SentinelSpec, format_host_port};
use crate::error::{Error, Result};
use crate::events::{self, Event};
use crate::retry::Backoff;

/// How often the `+switch-master` listener PINGs its sentinel.
const SENTINEL_PING_INTERVAL: Duration = Duration::from_secs(1);

/// How often the sentinels are asked which master they name, whatever the
/// listener hears.
const MASTER_CHECK_INTERVAL: Duration = Duration::from_secs(5);

/// The command connection to the master a sentinel deployment names now
/// (see the [module docs](self)).
pub(crate) struct Follower {
    endpoint: Endpoint,
    spec: Arc<SentinelSpec>,
    timeouts: Timeouts,
    runtime: tokio::runtime::Handle,
    current: RwLock<Direct>,
    /// Bumped at each switch to another master; pub/sub streams end on it.
    generation: tokio::sync::watch::Sender<u64>,
    resolving: Mutex<Resolving>,
    /// The index (in the URL's list) of the sentinel that answered last:
    /// resolutions ask it first.
    preferred: AtomicUsize,
    /// The `+switch-master` listener and the periodic check, stopped when
    /// the follower goes.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    first_maxmemory_policy: Option<Arc<str>>,
}

/// Whether a resolution runs, and whether another was asked for since its
/// current attempt began.
#[derive(Default)]
struct Resolving {
    running: bool,
    dirty: bool,
}

impl Drop for Follower {
    fn drop(&mut self) {
        let tasks = match self.tasks.get_mut() {
            Ok(tasks) => std::mem::take(tasks),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        };
        for task in tasks {
            task.abort();
        }
    }
}

impl Follower {
    /// Resolve the master through the sentinels, connect to it and start
    /// listening for `+switch-master`.
    pub(super) async fn connect(
        endpoint: &Endpoint,
        spec: Arc<SentinelSpec>,
        timeouts: Timeouts,
    ) -> Result<Arc<Self>> {
        let ((host, port), answered) = resolve(endpoint, &spec, timeouts, 0).await?;
        let direct = Direct::connect(&endpoint.for_data_node(&host, port), timeouts).await?;
        let follower = Arc::new(Self {
            first_maxmemory_policy: direct.maxmemory_policy().map(Arc::from),
            endpoint: endpoint.clone(),
            spec,
            timeouts,
            runtime: tokio::runtime::Handle::current(),
            current: RwLock::new(direct),
            generation: tokio::sync::watch::Sender::new(0),
            resolving: Mutex::new(Resolving::default()),
            preferred: AtomicUsize::new(answered),
            tasks: Mutex::new(Vec::new()),
        });
        let listener = follower
            .runtime
            .spawn(listen_for_switches(Arc::downgrade(&follower)));
        let checker = follower
            .runtime
            .spawn(check_master_periodically(Arc::downgrade(&follower)));
        if let Ok(mut tasks) = follower.tasks.lock() {
            tasks.push(listener.abort_handle());
            tasks.push(checker.abort_handle());
        }
        Ok(follower)
    }

    /// The master's connection now, and the generation it belongs to.
    pub(super) fn current(&self) -> (Direct, u64) {
        let generation = self.generation();
        let direct = match self.current.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        (direct, generation)
    }

    /// Master switches so far (the generation of the current master).
    pub(super) fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// A receiver that sees every switch to another master.
    pub(super) fn switches(&self) -> tokio::sync::watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// The `maxmemory-policy` of the first master found.
    pub(super) fn first_maxmemory_policy(&self) -> Option<&str> {
        self.first_maxmemory_policy.as_deref()
    }

    /// Run `call` on the current master; when it fails in a way that says
    /// the master may have moved, re-resolve it (see [`after_error`](Self::after_error)).
    pub(super) async fn on_master<T, Fut>(
        self: &Arc<Self>,
        call: impl FnOnce(Direct) -> Fut,
    ) -> Result<T>
    where
        Fut: std::future::Future<Output = Result<T>>,
    {
        let (direct, seen) = self.current();
        let result = call(direct).await;
        if let Err(err) = &result {
            self.after_error(err, seen);
        }
        result
    }

    /// A call on the master of generation `seen` failed with `err`: when
    /// the error says the master may have moved, re-resolve it.
    pub(super) fn after_error(self: &Arc<Self>, err: &Error, seen: u64) {
        if err.is_connection() && *self.generation.borrow() == seen {
            self.re_resolve();
        }
    }

    /// Re-resolve the master in the background; when a resolution runs,
    /// it resolves once more when its current attempt ends.
    pub(super) fn re_resolve(self: &Arc<Self>) {
        {
            let mut resolving = match self.resolving.lock() {
                Ok(resolving) => resolving,
                Err(poisoned) => poisoned.into_inner(),
            };
            if resolving.running {
                resolving.dirty = true;
                return;
            }
            resolving.running = true;
            resolving.dirty = false;
        }
        let follower = Arc::downgrade(self);
        self.runtime.spawn(follow(follower));
    }

    /// An attempt of the running resolution begins: requests made before
    /// now are covered by it.
    fn attempt_begins(&self) {
        match self.resolving.lock() {
            Ok(mut resolving) => resolving.dirty = false,
            Err(poisoned) => poisoned.into_inner().dirty = false,
        }
    }

    /// The running resolution found the master: `true` when it is done,
    /// `false` when a re-resolution was asked for during its attempt (then
    /// it resolves once more).
    fn finish_resolving(&self) -> bool {
        let mut resolving = match self.resolving.lock() {
            Ok(resolving) => resolving,
            Err(poisoned) => poisoned.into_inner(),
        };
        if resolving.dirty {
            resolving.dirty = false;
            return false;
        }
        resolving.running = false;
        true
    }

    /// The sentinel at `index` did not answer: resolutions start with the
    /// next one (unless another answered since).
    fn sentinel_failed(&self, index: usize) {
        let next = (index + 1) % self.spec.sentinels.len().max(1);
        let _ = self
            .preferred
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Resolve until a verified master is found; switch to it when it moved.
async fn follow(follower: Weak<Follower>) {
    let mut backoff = Backoff::reconnect();
    loop {
        let Some(this) = follower.upgrade() else {
            return;
        };
        this.attempt_begins();
        let start = this.preferred.load(Ordering::Relaxed);
        match resolve(&this.endpoint, &this.spec, this.timeouts, start).await {
            Ok(((host, port), answered)) => {
                this.preferred.store(answered, Ordering::Relaxed);
                let (direct, _) = this.current();
                let target = this.endpoint.for_data_node(&host, port);
                if direct.address() == target.address() {
                    if this.finish_resolving() {
                        return;
                    }
                    backoff.reset();
                    continue;
                }
                match Direct::connect(&target, this.timeouts).await {
                    Ok(next) => {
                        let from = direct.address().to_owned();
                        match this.current.write() {
                            Ok(mut current) => *current = next,
                            Err(poisoned) => *poisoned.into_inner() = next,
                        }
                        this.generation.send_modify(|g| *g += 1);
                        events::record(Event::MasterSwitched {
                            service: &this.spec.service,
                            from: &from,
                            to: &target.address(),
                        });
                        if this.finish_resolving() {
                            return;
                        }
                        backoff.reset();
                        continue;
                    }
                    Err(err) => events::record(Event::SentinelRetry {
                        service: &this.spec.service,
                        error: &err,
                    }),
                }
            }
            Err(err) => events::record(Event::SentinelRetry {
                service: &this.spec.service,
                error: &err,
            }),
        }
        drop(this);
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Ask each sentinel in turn (from the one at index `start`) for the
/// master; return the first address that answers `ROLE` as a master, and
/// the index of the sentinel that named it.
async fn resolve(
    endpoint: &Endpoint,
    spec: &SentinelSpec,
    timeouts: Timeouts,
    start: usize,
) -> Result<((String, u16), usize)> {
    let mut last_error = None;
    let mut unknown = 0;
    let count = spec.sentinels.len();
    for index in (0..count).map(|i| (start + i) % count) {
        let (host, port) = &spec.sentinels[index];
        let sentinel = format_host_port(host, *port);
        let asked = ask_sentinel(endpoint, spec, host, *port, timeouts).await;
        let (master_host, master_port) = match asked {
            Ok(Some(addr)) => addr,
            Ok(None) => {
                unknown += 1;
                continue;
            }
            Err(err) => {
                last_error = Some(err);
                continue;
            }
        };
        match check_master(endpoint, &master_host, master_port, timeouts).await {
            Ok(true) => return Ok(((master_host, master_port), index)),
            Ok(false) => {
                last_error = Some(Error::Unavailable {
                    addr: format_host_port(&master_host, master_port),
                    source: crate::error::RedisError::new(redis::RedisError::from((
                        redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
                        "sentinel named a server that is not a master (yet)",
                        format!("named by sentinel {sentinel}"),
                    ))),
                });
            }
            Err(err) => last_error = Some(err),
        }
    }
    if unknown == spec.sentinels.len() {
        return Err(Error::InvalidConfig(format!(
            "no sentinel knows a master named {:?} ({}): check the service name in the URL \
             against `sentinel monitor NAME ...` in the sentinels' configuration",
            spec.service,
            spec.describe(),
        )));
    }
    Err(last_error.unwrap_or_else(|| Error::Connection {
        addr: spec.describe(),
        source: crate::error::RedisError::new(timed_out("no sentinel named a master")),
    }))
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` on one sentinel; `Ok(None)` when it
/// does not know the service.
async fn ask_sentinel(
    endpoint: &Endpoint,
    spec: &SentinelSpec,
    host: &str,
    port: u16,
    timeouts: Timeouts,
) -> Result<Option<(String, u16)>> {
    let addr = format_host_port(host, port);
    let client = endpoint.sentinel_client(spec, host, port)?;
    let mut conn = open(&client, timeouts)
        .await
        .map_err(|e| from_first_reply(e, &addr))?;
    let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(&spec.service)
        .query_async(&mut conn)
        .await
        .map_err(|e| from_redis_conn(e, &addr))?;
    Ok(reply)
}

/// `true` when the server at `host:port` says `ROLE` is `master`.
async fn check_master(
    endpoint: &Endpoint,
    host: &str,
    port: u16,
    timeouts: Timeouts,
) -> Result<bool> {
    let target = endpoint.for_data_node(host, port);
    let addr = target.address();
    let client = target.probe_client()?;
    let mut conn = open(&client, timeouts)
        .await
        .map_err(|e| from_first_reply(e, &addr))?;
    let role: redis::Value = match redis::cmd("ROLE").query_async(&mut conn).await {
        Ok(role) => role,
        // An ACL user without +role: trust the sentinel (a demoted master
        // still answers writes with READONLY, which re-resolves).
        Err(err) if err.code() == Some("NOPERM") => return Ok(true),
        Err(err) => return Err(from_redis_conn(err, &addr)),
    };
    let first = match role {
        redis::Value::Array(items) => items.into_iter().next(),
        _ => None,
    };
    Ok(match first {
        Some(redis::Value::BulkString(bytes)) => bytes == b"master",
        Some(redis::Value::SimpleString(text)) => text == "master",
        _ => false,
    })
}

async fn open(
    client: &redis::Client,
    timeouts: Timeouts,
) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(timeouts.connect))
        .set_response_timeout(Some(timeouts.response));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// Listen for `+switch-master` on one sentinel at a time and re-resolve
/// when the service's master switched (or the listening connection broke:
/// a switch may have been missed). The connection is PINGed every
/// [`SENTINEL_PING_INTERVAL`]; a PING unanswered within the response
/// timeout breaks it (a paused sentinel keeps its TCP connections open and
/// says nothing).
async fn listen_for_switches(follower: Weak<Follower>) {
    let mut backoff = Backoff::reconnect();
    let mut index = 0usize;
    loop {
        let Some(this) = follower.upgrade() else {
            return;
        };
        let listened = index % this.spec.sentinels.len().max(1);
        let Some((host, port)) = this.spec.sentinels.get(listened).cloned() else {
            return;
        };
        index = listened + 1;
        let client = this.endpoint.sentinel_client(&this.spec, &host, port);
        let service = this.spec.service.clone();
        let timeouts = this.timeouts;
        drop(this);
        // The same pub/sub connection as the wake-ups' (RESP3, a bounded
        // queue: anyone may PUBLISH on a sentinel too), each command bounded.
        let subscribed = async {
            let client = client.map_err(|e| e.to_string())?;
            let (mut sink, stream) = server_pubsub::connect(&client, timeouts)
                .await
                .map_err(|e| e.to_string())?;
            sink.subscribe(&["+switch-master".to_owned()])
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((sink, stream))
        };
        let (mut sink, mut messages) = match subscribed.await {
            Ok(pubsub) => pubsub,
            Err(_) => {
                match follower.upgrade() {
                    Some(this) => this.sentinel_failed(listened),
                    None => return,
                }
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
        };
        backoff.reset();
        // A switch may have happened while nobody listened.
        match follower.upgrade() {
            Some(this) => this.re_resolve(),
            None => return,
        }
        let mut ping = tokio::time::interval(SENTINEL_PING_INTERVAL);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.reset();
        loop {
            tokio::select! {
                message = messages.next() => {
                    let switched = match message {
                        None => break,
                        // "NAME OLD_IP OLD_PORT NEW_IP NEW_PORT"
                        Some(Incoming::Message(message)) => {
                            message.payload.split(' ').next() == Some(service.as_str())
                        }
                        // Dropped messages may have held a switch (a
                        // re-resolve in progress absorbs the rest).
                        Some(Incoming::Overflowed) => true,
                    };
                    if switched {
                        match follower.upgrade() {
                            Some(this) => this.re_resolve(),
                            None => return,
                        }
                    }
                }
                _ = ping.tick() => {
                    if follower.strong_count() == 0 {
                        return;
                    }
                    if sink.ping().await.is_err() {
                        break;
                    }
                }
            }
        }
        // Broken or silent: listen to the next sentinel, and resolve from
        // there on.
        match follower.upgrade() {
            Some(this) => {
                this.sentinel_failed(listened);
                this.re_resolve();
            }
            None => return,
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Every [`MASTER_CHECK_INTERVAL`], ask the sentinels in turn (from the
/// preferred one) which master they name, until one answers; when it is
/// not the master in use, re-resolve (which checks `ROLE` before
/// switching). Catches a switch the listener missed, whatever happened to
/// its connection.
async fn check_master_periodically(follower: Weak<Follower>) {
    let mut tick = tokio::time::interval(MASTER_CHECK_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.reset();
    loop {
        tick.tick().await;
        let Some(this) = follower.upgrade() else {
            return;
        };
        let endpoint = this.endpoint.clone();
        let spec = Arc::clone(&this.spec);
        let timeouts = this.timeouts;
        let start = this.preferred.load(Ordering::Relaxed);
        let in_use = this.current().0.address().to_owned();
        drop(this);
        let count = spec.sentinels.len();
        let mut named = None;
        for index in (0..count).map(|i| (start + i) % count) {
            let (host, port) = &spec.sentinels[index];
            if let Ok(Some(addr)) = ask_sentinel(&endpoint, &spec, host, *port, timeouts).await {
                named = Some((addr, index));
                break;
            }
            match follower.upgrade() {
                Some(this) => this.sentinel_failed(index),
                None => return,
            }
        }
        let Some(this) = follower.upgrade() else {
            return;
        };
        if let Some(((host, port), index)) = named {
            this.preferred.store(index, Ordering::Relaxed);
            if endpoint.for_data_node(&host, port).address() != in_use {
                this.re_resolve();
            }
        }
    }
}
