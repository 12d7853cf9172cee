//! Model-based tests: random sequences of single script calls from several
//! owners run against the real scripts on a real Redis and against a pure
//! in-memory model of each protocol's state machine; after every step the
//! raw Redis state must equal the model's.
//!
//! Leases and waiter slots are an hour, so nothing expires during a case:
//! the model is about who holds, how often, and who waits in which order.

use std::time::Duration;

use fairlock_test_support::standalone as server;
use proptest::prelude::*;

use super::{Acquire, AcquireArgs, Dialect, Protocol, ProtocolLock, ProtocolSettings, Release};
use crate::config::ClientConfig;
use crate::transport::Connection;

const OWNERS: [&str; 4] = ["m:1", "m:2", "m:3", "m:4"];
const LONG: Duration = Duration::from_secs(3600);

#[derive(Debug, Clone, Copy)]
enum Op {
    /// A one-shot attempt (`try_lock`).
    Once(usize),
    /// An attempt that queues when busy (one step of `lock()`).
    Queue(usize),
    /// Leave the queue (timeout, cancellation).
    GiveUp(usize),
    /// Release one hold.
    Release(usize),
    /// Release whoever holds it.
    Force,
}

fn op() -> impl Strategy<Value = Op> {
    let owner = 0..OWNERS.len();
    prop_oneof![
        1 => owner.clone().prop_map(Op::Once),
        3 => owner.clone().prop_map(Op::Queue),
        1 => owner.clone().prop_map(Op::GiveUp),
        2 => owner.prop_map(Op::Release),
        1 => Just(Op::Force),
    ]
}

/// The state both protocols share, abstracted from time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    /// (owner, hold count, claimed): a native handoff is unclaimed until
    /// the new holder's next call.
    holder: Option<(usize, u32, bool)>,
    queue: Vec<usize>,
}

impl Model {
    fn leave(&mut self, o: usize) {
        self.queue.retain(|q| *q != o);
    }

    /// Native: hand the free lock to the first waiter.
    fn hand_off(&mut self) {
        if self.queue.is_empty() {
            self.holder = None;
        } else {
            let head = self.queue.remove(0);
            self.holder = Some((head, 1, false));
        }
    }

    fn apply(&mut self, protocol: Protocol, op: Op) {
        let native = protocol == Protocol::Native;
        match op {
            Op::Once(o) | Op::Queue(o) => {
                let queue = matches!(op, Op::Queue(_));
                match self.holder {
                    Some((h, count, claimed)) if h == o => {
                        // Re-entry, or (native) the claim of a handoff.
                        self.holder = Some((h, if claimed { count + 1 } else { count }, true));
                        return;
                    }
                    Some(_) => {}
                    None => {
                        let head = self.queue.first().copied();
                        match head {
                            Some(head) if head != o => {
                                if native {
                                    // Free with a live waiter first: it gets the lock.
                                    self.leave(head);
                                    self.holder = Some((head, 1, false));
                                }
                            }
                            _ => {
                                self.leave(o);
                                self.holder = Some((o, 1, true));
                                return;
                            }
                        }
                    }
                }
                if queue && !self.queue.contains(&o) {
                    self.queue.push(o);
                }
            }
            Op::GiveUp(o) => {
                self.leave(o);
                // Native: a handoff this owner never took passes on.
                if native && matches!(self.holder, Some((h, _, false)) if h == o) {
                    self.hand_off();
                }
            }
            Op::Release(o) => {
                if let Some((h, count, claimed)) = self.holder {
                    if h == o {
                        if count > 1 {
                            self.holder = Some((h, count - 1, claimed));
                        } else if native {
                            self.hand_off();
                        } else {
                            self.holder = None;
                        }
                    }
                }
            }
            Op::Force => {
                if native && self.holder.is_some() {
                    self.hand_off();
                } else {
                    self.holder = None;
                }
            }
        }
    }
}

/// Run one step against Redis.
/// `nonce`: the secret of the owner's current acquisition (a real client
/// draws one per acquisition; a retry or a refresh of it reuses it).
async fn step(lock: &ProtocolLock, conn: &Connection, model: &Model, op: Op, nonce: &str) {
    match op {
        Op::Once(o) | Op::Queue(o) => {
            // The owner's hold count before this acquisition, as a real
            // client passes it (an unclaimed handoff counts as not held yet).
            let base = match model.holder {
                Some((h, count, true)) if h == o => count,
                _ => 0,
            };
            let args = AcquireArgs {
                owner: OWNERS[o],
                lease: LONG,
                wait: None,
                queue: matches!(op, Op::Queue(_)),
                base,
                nonce,
                weight: 1,
            };
            let reply = lock.acquire(conn, &args).await.expect("acquire");
            assert!(!matches!(reply, Acquire::Busy) || !args.queue, "{reply:?}");
        }
        Op::GiveUp(o) => {
            lock.give_up(conn, OWNERS[o], None, nonce)
                .await
                .expect("give up");
        }
        Op::Release(o) => {
            let request = crate::hold::new_request_id();
            let reply = lock
                .release(conn, OWNERS[o], LONG, &request, &super::Scope::default())
                .await
                .expect("release");
            let held_by_o = matches!(model.holder, Some((h, _, _)) if h == o);
            assert_eq!(
                held_by_o,
                matches!(reply, Release::Released | Release::StillHeld),
                "{reply:?}"
            );
        }
        Op::Force => {
            lock.force_release(conn).await.expect("force");
        }
    }
}

/// The abstract state read back from Redis: (holder, count), queue order.
fn observed(
    server: &server::RedisServer,
    protocol: Protocol,
) -> (Option<(usize, u32)>, Vec<usize>) {
    let index = |o: &str| OWNERS.iter().position(|x| *x == o).expect("known owner");
    match protocol {
        Protocol::Redisson => {
            let fields: Vec<String> = server.cmd(&["HGETALL", "m"]);
            assert!(fields.len() <= 2, "one holder at most: {fields:?}");
            let holder = fields
                .chunks(2)
                .next()
                .map(|p| (index(&p[0]), p[1].parse().expect("count")));
            let queue: Vec<String> = server.cmd(&["LRANGE", "redisson_lock_queue:{m}", "0", "-1"]);
            // Deadlines rise along the queue and cover exactly its members.
            let by_deadline: Vec<String> =
                server.cmd(&["ZRANGE", "redisson_lock_timeout:{m}", "0", "-1"]);
            assert_eq!(by_deadline, queue, "deadline order is queue order");
            (holder, queue.iter().map(|o| index(o)).collect())
        }
        _ => {
            let value: Option<String> = server.cmd(&["GET", "fairlock:{m}:lock"]);
            let parsed = value
                .as_deref()
                .map(|v| super::native::LockValue::parse(v).expect("a lock's value"));
            let holder = parsed.and_then(|v| Some((index(v.owner?), v.count)));
            let queue: Vec<String> = server.cmd(&["ZRANGE", "fairlock:{m}:line", "0", "-1"]);
            let mut records: Vec<String> = server.cmd(&["HKEYS", "fairlock:{m}:waiters"]);
            let mut members = queue.clone();
            members.sort();
            records.sort();
            assert_eq!(records, members, "records = line");
            // Invariant W: while anybody is in line, the lock's value (if
            // any) says so.
            if let Some(value) = &value {
                let flags = value.split(':').nth(2).unwrap_or_default();
                assert!(
                    queue.is_empty() || flags.contains('w'),
                    "{value} with {queue:?}"
                );
            }
            (holder, queue.iter().map(|o| index(o)).collect())
        }
    }
}

fn run_case(
    server: &server::RedisServer,
    runtime: &tokio::runtime::Runtime,
    protocol: Protocol,
    ops: &[Op],
) {
    let _: () = server.cmd(&["FLUSHALL"]);
    runtime.block_on(async {
        let config = ClientConfig::from_url(&server.url()).expect("url");
        let events =
            crate::events::Recorder::new("model", crate::LockLabel::default(), true, "model:1");
        let (conn, _) = Connection::connect(&config.endpoint, config.timeouts(), events)
            .await
            .expect("connect");
        let lock = Dialect::new(ProtocolSettings {
            protocol,
            waiter_ttl: LONG,
            waiter_slot: LONG,
            clock_offset_ms: 0,
            release_cache: LONG,
            label: "model:1".into(),
            labels: Default::default(),
        })
        .lock("m", crate::LockKind::Fair);
        let mut model = Model::default();
        let mut last_token = 0u64;
        // Each owner's current waiting acquisition; a new one starts once
        // the last one is over (granted or given up).
        let mut epochs = [0u32; OWNERS.len()];
        for (i, op) in ops.iter().enumerate() {
            let owner = match *op {
                Op::Once(o) | Op::Queue(o) | Op::GiveUp(o) | Op::Release(o) => Some(o),
                Op::Force => None,
            };
            let nonce = match *op {
                // A one-shot attempt is an acquisition of its own.
                Op::Once(o) => format!("{o}-once-{i}"),
                _ => owner
                    .map(|o| format!("{o}-{}", epochs[o]))
                    .unwrap_or_default(),
            };
            step(&lock, &conn, &model, *op, &nonce).await;
            model.apply(protocol, *op);
            let over = match *op {
                Op::GiveUp(_) => true,
                // Granted (to this wait, or taken by a one-shot attempt of
                // the same owner, which ends the wait too).
                Op::Queue(o) | Op::Once(o) => {
                    matches!(model.holder, Some((h, _, true)) if h == o)
                }
                _ => false,
            };
            if let (Some(o), true) = (owner, over) {
                epochs[o] += 1;
            }
            let (holder, queue) = observed(server, protocol);
            let expected = model.holder.map(|(h, c, _)| (h, c));
            assert_eq!(
                (holder, &queue),
                (expected, &model.queue),
                "{protocol} after step {i} {op:?} of {ops:?}"
            );
            if protocol == Protocol::Native && holder.is_some() {
                let value: String = server.cmd(&["GET", "fairlock:{m}:lock"]);
                let token = super::native::LockValue::parse(&value).unwrap().token;
                assert!(token >= last_token, "tokens never go back");
                last_token = token;
            }
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn scripts_match_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        thread_local! {
            static SERVER: server::RedisServer = server::RedisServer::start();
            static RUNTIME: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
        }
        SERVER.with(|server| RUNTIME.with(|runtime| {
            for protocol in [Protocol::Native, Protocol::Redisson] {
                run_case(server, runtime, protocol, &ops);
            }
        }));
    }
}
