//! Data that is not a lock's: names whose keys are other locks' keys,
//! malformed counters and scores, keys of the wrong type (every key of
//! either protocol, the release cache too), application data under a
//! lock's name. Nothing is written or deleted, the error is typed, and
//! nothing panics.

use std::time::Duration;

use fairlock::{Error, LockClient, LockKind, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, client};

mod common;
use common::scripts::{NEW_ACQUIRE, NEW_RELEASE, eval, key, snapshot, three};
use common::{config, connect};

const BOTH: [Protocol; 2] = [Protocol::Native, Protocol::Redisson];

/// The lock key of `name` under `protocol`.
fn lock_key(protocol: Protocol, name: &str) -> String {
    match protocol {
        Protocol::Native => format!("fairlock:{{{name}}}:lock"),
        _ => name.to_owned(),
    }
}

/// A key's whole state: type, contents (a hash's fields sorted) and TTL.
fn key_state(server: &RedisServer, key: &str) -> (String, Vec<String>, i64) {
    let kind: String = server.cmd(&["TYPE", key]);
    let mut fields: Vec<String> = match kind.as_str() {
        "hash" => server.cmd(&["HGETALL", key]),
        "string" => vec![server.cmd(&["GET", key]), String::new()],
        _ => Vec::new(),
    };
    let mut pairs: Vec<String> = fields
        .chunks(2)
        .map(|pair| pair.join("="))
        .collect::<Vec<_>>();
    pairs.sort();
    fields.clear();
    (kind, pairs, server.cmd(&["TTL", key]))
}

/// The key as it was: the same type and fields, and a TTL (seconds, which
/// Redis rounds) that only ran down, by at most a few seconds of a slow
/// machine, never set again.
fn assert_unchanged(
    before: &(String, Vec<String>, i64),
    after: &(String, Vec<String>, i64),
    what: &str,
) {
    assert_eq!((&before.0, &before.1), (&after.0, &after.1), "{what}");
    assert!(
        after.2 <= before.2 && after.2 >= before.2 - 5,
        "{what}: TTL {} -> {}",
        before.2,
        after.2
    );
}

/// `err` is NotALock naming `key`.
fn assert_not_a_lock(err: &Error, key: &str) {
    match err {
        Error::NotALock { key: found, .. } => assert_eq!(found, key, "{err}"),
        other => panic!("expected NotALock on {key:?}, got {other:?}"),
    }
    assert!(
        err.to_string()
            .contains("holds data that is not a fairlock/Redisson lock"),
        "{err}"
    );
}

/// `err` is the typed refusal `name`'s data gets under `protocol`: a key
/// of another Redis type than the native lock's string (layout version 2)
/// is WrongType, anything else NotALock.
fn assert_refused(err: &Error, server: &RedisServer, protocol: Protocol, key: &str) {
    let kind: String = server.cmd(&["TYPE", key]);
    if protocol == Protocol::Native && kind != "string" {
        assert!(matches!(err, Error::WrongType { .. }), "{key}: {err:?}");
    } else {
        assert_not_a_lock(err, key);
    }
}

/// Every way a client touches `name`'s lock key is refused with a typed
/// error (NotALock, or WrongType for a native lock key of another type),
/// and the key is left exactly as it was.
async fn assert_refused_everywhere(
    server: &RedisServer,
    client: &LockClient,
    protocol: Protocol,
    name: &str,
) {
    let key = lock_key(protocol, name);
    let before = key_state(server, &key);
    for kind in [LockKind::Fair, LockKind::NonFair] {
        let handle = client.handle(name, kind).unwrap();
        let err = handle.try_lock().await.map(|_| ()).unwrap_err();
        assert_refused(&err, server, protocol, &key);
        let err = handle
            .try_lock_for(Duration::from_millis(300))
            .await
            .map(|_| ())
            .unwrap_err();
        assert_refused(&err, server, protocol, &key);
        assert_refused(
            &handle.force_unlock().await.unwrap_err(),
            server,
            protocol,
            &key,
        );
        assert_refused(&handle.inspect().await.unwrap_err(), server, protocol, &key);
        assert_unchanged(
            &before,
            &key_state(server, &key),
            &format!("{name:?} {kind:?}"),
        );
    }
}

// Finding 5 (issue 21): a redisson name that is another lock's key.
#[tokio::test]
async fn redisson_names_that_are_other_locks_keys_are_refused() {
    let server = RedisServer::start();
    let redisson = client(&server, Protocol::Redisson).await;
    let native = client(&server, Protocol::Native).await;
    let names = [
        "fairlock:{x}:lock",
        "fairlock:{x}:meta",
        "fairlock:anything",
        "redisson_lock_queue:{x}",
        "redisson_lock_timeout:{x}",
        "redisson_lock__channel:{x}:u:1",
        "redisson_unlock_latch:{x}:ab",
        "redisson_rwlock:{x}",
        "redisson_sc:{x}",
        "{x}:c:1:rwlock_timeout:1",
        "{x}:timeout",
    ];
    for name in names {
        for err in [
            redisson.fair_lock(name).map(|_| ()).unwrap_err(),
            redisson.lock(name).map(|_| ()).unwrap_err(),
        ] {
            assert!(matches!(err, Error::InvalidName { .. }), "{name:?}: {err}");
            assert!(err.is_invalid_input());
        }
        // Native keys are `fairlock:{NAME}:...`: no name is another's key.
        native.fair_lock(name).unwrap();
    }
    // The collision itself: a native take and release of `x` never meets a
    // redisson lock on `x`'s native lock key, since that name is refused.
    let guard = native.fair_lock("x").unwrap().lock().await.unwrap();
    guard.unlock().await.unwrap();
    assert!(!support::is_held(&server, Protocol::Native, "x"));
}

// Finding 6 (issue 21): a malformed counter left a hold with no holder.
// Under the layout version 2 the counters are the lock's own: the token
// and the count in its value, held or free (the marker).
#[tokio::test]
async fn malformed_native_counters_are_refused_before_any_write() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Native).await;
    let key = "fairlock:{d}:lock";
    for value in [
        // Held, with a token or a count that is not a counter.
        "1e19:1::n::x:1\tl",
        "inf:1::n::x:1\tl",
        "nan:1::n::x:1\tl",
        "18446744073709551615:1::n::x:1\tl",
        "9007199254740993:1::n::x:1\tl",
        "5:1e19::n::x:1\tl",
        "5:-1::n::x:1\tl",
        // A count of 0 with a holder, a count above 0 without one.
        "5:0::n::x:1\tl",
        "5:1::n::",
        // Free markers with bad tokens.
        "1e19:0:::r:",
        "18446744073709551615:0:::r:",
        "9007199254740993:0:::r:",
        // A token of more than 16 digits, however small its value: the
        // uncontended take's pattern matched it and took the lock (found
        // by the adversarial review of the key layout version 2).
        "00000000000000000000005:0:::r:",
        // Not of the layout at all.
        "",
        "12x",
        "5:1:XY:n::x:1",
    ] {
        server.cmd::<()>(&["SET", key, value, "PX", "60000"]);
        assert_refused_everywhere(&server, &client, Protocol::Native, "d").await;
        server.cmd::<i64>(&["DEL", key]);
    }
}

// Finding 6 (issue 21): a malformed Redisson hold count or deadline.
#[tokio::test]
async fn malformed_redisson_numbers_are_refused() {
    let server = RedisServer::start();
    let client = client(&server, Protocol::Redisson).await;
    for count in ["1e19", "inf", "0", "-1", "x"] {
        server.cmd::<i64>(&["HSET", "r", "a:1", count]);
        server.cmd::<i64>(&["PEXPIRE", "r", "60000"]);
        assert_refused_everywhere(&server, &client, Protocol::Redisson, "r").await;
        server.cmd::<i64>(&["DEL", "r"]);
    }
    // A waiter's deadline that is not a number of epoch ms.
    server.cmd::<i64>(&["RPUSH", "redisson_lock_queue:{q}", "w:1"]);
    server.cmd::<i64>(&["ZADD", "redisson_lock_timeout:{q}", "inf", "w:1"]);
    let err = client
        .fair_lock("q")
        .unwrap()
        .try_lock()
        .await
        .map(|_| ())
        .unwrap_err();
    assert_not_a_lock(&err, "redisson_lock_timeout:{q}");
    assert_eq!(server.cmd::<i64>(&["EXISTS", "q"]), 0);
}

// Finding 7 (issue 21): application data under a lock's name, both protocols.
#[tokio::test]
async fn application_data_under_a_lock_name_is_never_touched() {
    let server = RedisServer::start();
    for protocol in BOTH {
        let client = client(&server, protocol).await;
        let key = lock_key(protocol, "user:1");
        // An application hash, without a TTL and with one.
        server.cmd::<i64>(&["HSET", &key, "name", "bob"]);
        assert_refused_everywhere(&server, &client, protocol, "user:1").await;
        server.cmd::<i64>(&["PEXPIRE", &key, "600000"]);
        assert_refused_everywhere(&server, &client, protocol, "user:1").await;
        server.cmd::<i64>(&["DEL", &key]);
        // Shaped like the other protocol's lock, or a lock's fields plus one.
        server.cmd::<i64>(&["HSET", &key, "a:1", "1", "owner", "a:1"]);
        server.cmd::<i64>(&["PEXPIRE", &key, "600000"]);
        assert_refused_everywhere(&server, &client, protocol, "user:1").await;
        server.cmd::<i64>(&["DEL", &key]);
    }
    // Redisson: one field OWNER:THREAD with a count, but no TTL: a lock
    // always has one, so this is somebody's data.
    let client = client(&server, Protocol::Redisson).await;
    server.cmd::<i64>(&["HSET", "user:2", "a:1", "2"]);
    assert_refused_everywhere(&server, &client, Protocol::Redisson, "user:2").await;
    // Native: a hash with an owner field and nothing else (not a lock of
    // the older layout either: that has a count and a token).
    let client = support::client(&server, Protocol::Native).await;
    server.cmd::<i64>(&["HSET", "fairlock:{user:3}:lock", "owner", "bob"]);
    assert_refused_everywhere(&server, &client, Protocol::Native, "user:3").await;
    // Native: a string that is not a lock of this layout.
    server.cmd::<()>(&["SET", "fairlock:{user:4}:lock", "hello"]);
    assert_refused_everywhere(&server, &client, Protocol::Native, "user:4").await;
}

/// Infinite scores in the line and malformed records (written by anyone) do
/// not panic `inspect()`. Before: an overflow panic (then on a `-inf`
/// liveness score).
///
/// Found by the safety review (finding 14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_survives_malformed_scores() {
    let server = RedisServer::start();
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let name = "scores";
    let line = format!("fairlock:{{{name}}}:line");
    let records = format!("fairlock:{{{name}}}:waiters");
    let _: i64 = server.cmd(&["ZADD", &line, "-inf", "a:1", "+inf", "b:1"]);
    let _: i64 = server.cmd(&["HSET", &records, "a:1", "junk", "b:1", "-5:1:1:n:"]);
    let info = client.fair_lock(name).unwrap().inspect().await.unwrap();
    assert_eq!(info.queue.len(), 2);
    assert_eq!(info.queue[0].expires_in, Some(Duration::ZERO));
}

/// FINDING 1 (promise 6: a wrong-typed key is a typed error and nothing is
/// written). The release cache key (KEYS[4]) of another type: a release
/// that would write it (a partial one, under the layout version 2 the only
/// one that caches its answer) answers WRONGTYPE before any write; a full
/// release (uncontended, or handing the lock on) never touches it, and
/// leaves it as it was. (Found by the adversarial review of the `scripts`
/// change, when the full release cached its answer too and skipped the
/// cache's read.)
#[test]
fn release_with_wrong_typed_cache_key_writes_nothing() {
    let server = RedisServer::start();
    let mut failures = Vec::new();
    for (case, count, queued) in [
        ("fast", "1", false),
        ("contended", "1", true),
        ("partial", "2", false),
    ] {
        let name = format!("wt-cache-{case}");
        let keys = three(&name);
        let cache = key(&name, "release:0123456789abcdef0123456789abcdef");
        let flags = if queued { "w" } else { "" };
        let value = format!("5:{count}:{flags}:n1::c:1\tl");
        let _: () = server.cmd(&["SET", &keys[0], &value, "PX", "60000"]);
        if queued {
            let _: () = server.cmd(&["ZADD", &keys[1], "1", "c:2"]);
            let _: () = server.cmd(&["HSET", &keys[2], "c:2", "99999999999999:30000:6000:n2:"]);
        }
        // A hostile (or stray) value of another type under the cache key.
        let _: () = server.cmd(&["HSET", &cache, "f", "v"]);
        let before = snapshot(&server, &name);
        let mut all = keys.clone();
        all.push(cache.clone());
        let reply = eval(&server, NEW_RELEASE, &all, &["c:1", "10000", "5", "", "f"]);
        let after = snapshot(&server, &name);
        let cache_after: Vec<String> = server.cmd(&["HGETALL", &cache]);
        println!(
            "{case}: reply {reply:?}; cache key now {cache_after:?}; state changed: {}",
            before != after
        );
        let typed = matches!(&reply, Err(e) if e.to_string().contains("WRONGTYPE"));
        let ok = if count == "1" {
            // Released (and handed on), the cache key untouched.
            matches!(&reply, Ok(redis::Value::Int(1))) && cache_after == ["f", "v"]
        } else {
            typed && before == after
        };
        if !ok {
            failures.push(case);
        }
    }
    assert!(
        failures.is_empty(),
        "release over a wrong-typed cache key wrote state / gave no WRONGTYPE: {failures:?}"
    );
}

/// Promise 6 through the library: every native key of the wrong type, on
/// the fast and the contended acquire and release: a WRONGTYPE error and
/// no key changed (or, for a path that never touches that key, success with
/// the key left alone).
///
/// From the adversarial review of the `scripts` change (fast paths, a
/// skipped release cache GET, queued non-fair waiters): a check that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_typed_native_keys_write_nothing() {
    let server = RedisServer::start();
    let a = connect(config(&server.url(), Protocol::Native)).await;
    let mut failures = Vec::new();
    for (i, suffix) in ["lock", "line", "waiters"].iter().enumerate() {
        for fair in [true, false] {
            for contended in [false, true] {
                let name = format!("wt-{suffix}-{fair}-{contended}");
                let keys = three(&name);
                let mode = if fair { "fq" } else { "nq" };
                if contended {
                    // Another owner holds it and one waiter is queued.
                    for (owner, nonce) in [("x:1", "xn"), ("y:1", "yn")] {
                        eval(
                            &server,
                            NEW_ACQUIRE,
                            &keys,
                            &[owner, "30000", "6000", mode, "0", nonce, ""],
                        )
                        .unwrap();
                    }
                }
                let bad = &keys[i];
                let _: () = server.cmd(&["DEL", bad]);
                let _: () = server.cmd(&["RPUSH", bad, "junk"]);
                let before = snapshot(&server, &name);
                let result = if fair {
                    a.fair_lock(&name)
                        .unwrap()
                        .try_lock()
                        .await
                        .map(|g| g.is_some())
                } else {
                    a.lock(&name).unwrap().try_lock().await.map(|g| g.is_some())
                };
                let after = snapshot(&server, &name);
                let ok = matches!(&result, Err(e) if format!("{e:?}").to_lowercase().contains("wrongtype"));
                // An error must leave everything as it was; a success (a
                // path that never touches the key) must at least leave the
                // wrong-typed key alone.
                let bad_after: Vec<String> = server.cmd(&["LRANGE", bad, "0", "-1"]);
                if (ok && before != after) || (!ok && bad_after != ["junk"]) {
                    println!(
                        "acquire {suffix} fair={fair} contended={contended}: {result:?}, changed {}",
                        before != after
                    );
                    failures.push(format!("acquire {suffix} {mode} contended={contended}"));
                }
            }
        }
    }
    // Release: hold it, then corrupt one of the other keys.
    for (i, suffix) in ["line", "waiters"].iter().enumerate() {
        for contended in [false, true] {
            let name = format!("wtr-{suffix}-{contended}");
            let keys = three(&name);
            let guard = a.fair_lock(&name).unwrap().lock().await.unwrap();
            if contended {
                eval(
                    &server,
                    NEW_ACQUIRE,
                    &keys,
                    &["y:1", "30000", "6000", "fq", "0", "yn", ""],
                )
                .unwrap();
            }
            let bad = &keys[i + 1];
            let _: () = server.cmd(&["DEL", bad]);
            let _: () = server.cmd(&["RPUSH", bad, "junk"]);
            let before = snapshot(&server, &name);
            let result = guard.unlock().await;
            let after = snapshot(&server, &name);
            // Writing nothing is right; so is an error. Releasing while the
            // line or the records are broken is not when somebody waits.
            if before != after && result.is_err() {
                println!("release {suffix} contended={contended}: {result:?} but state changed");
                failures.push(format!("release {suffix} contended={contended}"));
            }
            println!(
                "release {suffix} contended={contended}: {result:?}, changed {}",
                before != after
            );
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Promise 6 under `redisson` (its scripts lost their TYPE checks): each of
/// the lock, queue and timeout keys of the wrong type, on the uncontended
/// and the contended acquire and release, fair and non-fair: a WRONGTYPE
/// error and nothing changed, or success with the wrong-typed key untouched.
///
/// From the adversarial review of the `scripts` change (fast paths, a
/// skipped release cache GET, queued non-fair waiters): a check that held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_typed_redisson_keys_write_nothing() {
    let server = RedisServer::start();
    let a = connect(config(&server.url(), Protocol::Redisson)).await;
    let b = connect(config(&server.url(), Protocol::Redisson)).await;
    let snap = |name: &str| {
        let (l, q, o) = support::lock_keys(Protocol::Redisson, name);
        let mut all = vec![l, q];
        all.extend(o);
        all.into_iter()
            .map(|k| {
                let t: String = server.cmd(&["TYPE", &k]);
                let d: Option<Vec<u8>> = server.cmd(&["DUMP", &k]);
                (k, t, d)
            })
            .collect::<Vec<_>>()
    };
    let mut failures = Vec::new();
    for which in 0..3 {
        for fair in [true, false] {
            for contended in [false, true] {
                for op in ["acquire", "release"] {
                    if !fair && which > 0 {
                        continue; // the non-fair lock has only its hash
                    }
                    let name = format!("rwt-{which}-{fair}-{contended}-{op}");
                    let (l, q, o) = support::lock_keys(Protocol::Redisson, &name);
                    let keys = [l, q, o[0].clone()];
                    let mut guard = None;
                    let mut holder_b = None;
                    if op == "release" {
                        guard = Some(if fair {
                            a.fair_lock(&name).unwrap().lock().await.unwrap()
                        } else {
                            a.lock(&name).unwrap().lock().await.unwrap()
                        });
                    } else if contended {
                        holder_b = Some(b.fair_lock(&name).unwrap().lock().await.unwrap());
                    }
                    if contended && fair {
                        // One queued waiter (a third party, via try_lock_for in the background).
                        let c = connect(config(&server.url(), Protocol::Redisson)).await;
                        let n = name.clone();
                        tokio::spawn(async move {
                            let _ = c
                                .fair_lock(&n)
                                .unwrap()
                                .try_lock_for(Duration::from_secs(3))
                                .await;
                            tokio::time::sleep(Duration::from_secs(5)).await;
                        });
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    if which == 0 && op == "release" {
                        // The holder's hash replaced by a string.
                    }
                    let bad = &keys[which];
                    let _: () = server.cmd(&["DEL", bad]);
                    let _: () = server.cmd(&["SET", bad, "junk"]);
                    let before = snap(&name);
                    let result: Result<String, String> = match (op, guard) {
                        ("release", Some(g)) => g
                            .unlock()
                            .await
                            .map(|_| "released".into())
                            .map_err(|e| format!("{e:?}")),
                        _ => {
                            if fair {
                                a.fair_lock(&name)
                                    .unwrap()
                                    .try_lock()
                                    .await
                                    .map(|g| format!("{:?}", g.is_some()))
                                    .map_err(|e| format!("{e:?}"))
                            } else {
                                a.lock(&name)
                                    .unwrap()
                                    .try_lock()
                                    .await
                                    .map(|g| format!("{:?}", g.is_some()))
                                    .map_err(|e| format!("{e:?}"))
                            }
                        }
                    };
                    let after = snap(&name);
                    let typed = matches!(&result, Err(e) if e.contains("WrongType"));
                    let bad_now: String = server.cmd(&["TYPE", bad]);
                    let wrong = (typed && before != after) || (!typed && bad_now != "string");
                    println!(
                        "{op} key#{which} fair={fair} contended={contended}: {result:?} changed={} bad key type {bad_now}",
                        before != after
                    );
                    if wrong {
                        failures.push(format!(
                            "{op} key#{which} fair={fair} contended={contended}"
                        ));
                    }
                    drop(holder_b);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:?}");
}

/// Promises 4 and 6: tokens are counters below 2^53 (`TOKEN` in
/// docs/native-protocol.md). A lock whose token leaves no next one below
/// 2^53 (2^53 - 1, written by another program) is refused by the take
/// (`NotALock`, nothing written), as the uncontended take already left it
/// to the full script; and a release of such a hold with a waiter in line
/// frees it instead of handing over a token of 2^53. Before: the full take
/// drew 2^53, a value every script then refused as not a lock (the
/// holder's contended release and every waiter failed), and once its key
/// ran out the tokens went back to the clock's, 4 x 10^9 times lower.
///
/// Found by the adversarial review of the key layout version 2.
#[test]
fn a_token_with_no_next_one_below_2_pow_53_is_never_drawn_from() {
    let server = RedisServer::start();
    let name = "exhausted";
    let keys = three(name);
    let acquire = |owner: &str| {
        eval(
            &server,
            NEW_ACQUIRE,
            &keys,
            &[owner, "30000", "6000", "fq", "0", "n", ""],
        )
    };
    // The free marker: refused, nothing written.
    let marker = "9007199254740991:0:::r:";
    let _: () = server.cmd(&["SET", &keys[0], marker, "PX", "60000"]);
    let before = snapshot(&server, name);
    let reply = acquire("a:1");
    assert!(
        matches!(&reply, Err(e) if e.to_string().contains("NOTALOCK")),
        "{reply:?}"
    );
    assert_eq!(snapshot(&server, name), before, "nothing written");
    // A hold of that token with a waiter in line: its release frees it
    // (the waiter's next attempt is refused as above), no token of 2^53.
    let held = "9007199254740991:1:w:n::a:1\tl";
    let _: () = server.cmd(&["SET", &keys[0], held, "PX", "60000"]);
    assert!(
        matches!(acquire("b:1"), Ok(redis::Value::Array(_))),
        "B waits"
    );
    let mut all = keys.clone();
    all.push(key(name, "release:r1"));
    let released = eval(
        &server,
        NEW_RELEASE,
        &all,
        &["a:1", "10000", "9007199254740991", "", "f"],
    )
    .unwrap();
    assert_eq!(released, redis::Value::Int(1));
    let value: String = server.cmd(&["GET", &keys[0]]);
    assert!(value.starts_with("9007199254740991:0:w:"), "{value}");
    assert!(acquire("b:1").is_err(), "B's next attempt is refused");
    // A non-fair waiter behind B gives up while B waited too long to be
    // overtaken: B is woken, not handed a token of 2^53.
    let _: () = server.cmd(&["ZADD", &keys[1], "XX", "1", "b:1"]);
    let _: () = server.cmd(&["ZADD", &keys[1], "2", "c:1"]);
    let _: () = server.cmd(&["HSET", &keys[2], "c:1", "99999999999999:30000:6000:nc:"]);
    let give_up = concat!(
        include_str!("../src/protocol/common.lua"),
        include_str!("../src/protocol/native/lock_prelude.lua"),
        include_str!("../src/protocol/native/give_up.lua"),
    );
    let left = eval(&server, give_up, &keys, &["c:1", "nc", "n"]).unwrap();
    assert_eq!(left, redis::Value::Int(1));
    let value: String = server.cmd(&["GET", &keys[0]]);
    assert!(value.starts_with("9007199254740991:0:w:"), "{value}");
}
