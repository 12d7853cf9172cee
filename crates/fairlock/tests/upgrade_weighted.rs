//! A rolling upgrade of the read-write lock and the semaphore: clients of
//! the weighted engine's layout before version 2 (the scripts of the
//! previous version, kept in `fixtures/weighted_v1/`, their common and
//! queue preludes, shared with the lock's, in `fixtures/scripts_v1/`, sent
//! as that version's client sends them) and of this one (whose line is the
//! lock's layout version 2: `line` and `waiters`) on the same name. Both
//! keep the holders set, the hold keys and meta in one format, so they
//! count each other's holds: never more than the capacity is held (a writer
//! alone, readers only beside readers), and tokens keep increasing across
//! them. Each serves its own line, so FIFO holds within a version's
//! waiters only, for the time of the upgrade (`docs/read-write-lock.md`,
//! "Upgrading").

use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use support::RedisServer;

mod common;
use common::scripts::eval;
use common::{config, connect};

/// The read-write lock's acquire script of the older layout.
const V1_RW_ACQUIRE: &str = concat!(
    include_str!("fixtures/scripts_v1/common.lua"),
    include_str!("fixtures/scripts_v1/native_prelude.lua"),
    include_str!("fixtures/weighted_v1/weighted_prelude.lua"),
    include_str!("fixtures/weighted_v1/rw_prelude.lua"),
    include_str!("fixtures/weighted_v1/rw_acquire.lua"),
);
/// The read-write lock's release script of the older layout.
const V1_RW_RELEASE: &str = concat!(
    include_str!("fixtures/scripts_v1/common.lua"),
    include_str!("fixtures/scripts_v1/native_prelude.lua"),
    include_str!("fixtures/weighted_v1/weighted_prelude.lua"),
    include_str!("fixtures/weighted_v1/rw_prelude.lua"),
    include_str!("fixtures/weighted_v1/weighted_release.lua"),
);
/// The semaphore's acquire script of the older layout.
const V1_SEM_ACQUIRE: &str = concat!(
    include_str!("fixtures/scripts_v1/common.lua"),
    include_str!("fixtures/scripts_v1/native_prelude.lua"),
    include_str!("fixtures/weighted_v1/weighted_prelude.lua"),
    include_str!("fixtures/weighted_v1/sem_prelude.lua"),
    include_str!("fixtures/weighted_v1/sem_acquire.lua"),
);
/// The semaphore's release script of the older layout.
const V1_SEM_RELEASE: &str = concat!(
    include_str!("fixtures/scripts_v1/common.lua"),
    include_str!("fixtures/scripts_v1/native_prelude.lua"),
    include_str!("fixtures/weighted_v1/weighted_prelude.lua"),
    include_str!("fixtures/weighted_v1/sem_prelude.lua"),
    include_str!("fixtures/weighted_v1/weighted_release.lua"),
);

/// The five keys of object `name` of `kind` (`rw`, `sem`) in the older
/// layout: holders, queue, liveness, meta, records.
fn v1_keys(name: &str, kind: &str) -> Vec<String> {
    ["holders", "queue", "alive", "meta", "leases"]
        .iter()
        .map(|s| format!("fairlock:{{{name}}}:{kind}:{s}"))
        .collect()
}

/// An older client's attempt as holder `id` (`queue`: wait in line, else
/// once) of a read-write lock (`weight` None) or a semaphore of 3 permits.
/// Its reply: `[1, token]` acquired, `[3, ...]` queued, `[4]` busy.
fn v1_acquire(
    server: &RedisServer,
    name: &str,
    id: &str,
    queue: bool,
    weight: Option<u32>,
) -> Vec<i64> {
    let mode = if queue { "queue" } else { "once" };
    let reply = match weight {
        None => {
            let channel = format!("fairlock:{{{name}}}:rw:wake");
            eval(
                server,
                V1_RW_ACQUIRE,
                &v1_keys(name, "rw"),
                &[
                    id, "30000", "6000", &channel, mode, "0", "v1nonce", "old", "",
                ],
            )
        }
        Some(weight) => {
            let channel = format!("fairlock:{{{name}}}:sem:wake");
            let weight = weight.to_string();
            eval(
                server,
                V1_SEM_ACQUIRE,
                &v1_keys(name, "sem"),
                &[
                    id, "30000", "6000", &channel, mode, "0", "v1nonce", "old", &weight, "3", "",
                ],
            )
        }
    };
    redis::from_redis_value(reply.expect("the older script ran")).unwrap()
}

/// An older client's release of holder `id`'s hold under `token`.
fn v1_release(server: &RedisServer, name: &str, kind: &str, id: &str, token: i64) -> i64 {
    let mut keys = v1_keys(name, kind);
    keys.push(format!("fairlock:{{{name}}}:{kind}:release:{id}-{token}"));
    let channel = format!("fairlock:{{{name}}}:{kind}:wake");
    let script = if kind == "rw" {
        V1_RW_RELEASE
    } else {
        V1_SEM_RELEASE
    };
    let token = token.to_string();
    let reply = eval(
        server,
        script,
        &keys,
        &[id, "6000", &channel, "10000", &token, ""],
    );
    redis::from_redis_value(reply.expect("the older script ran")).unwrap()
}

/// An older writer excludes this version's writers and readers, and this
/// version's writer excludes the older client's writers and readers; a
/// holder of either version admits nobody of the other beside it, and the
/// tokens keep increasing across the versions. An older reader queued in
/// its own line gets in on its own attempt once this version's writer left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_write_holds_of_both_layouts_exclude_each_other() {
    let server = RedisServer::start();
    let name = "upgrade-rw";
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let rw = client.read_write_lock(name).unwrap();

    let older = v1_acquire(&server, name, "old:1:write", false, None);
    let [1, older_token] = older[..] else {
        panic!("the older writer took it: {older:?}");
    };
    assert!(rw.write().try_lock().await.unwrap().is_none());
    assert!(rw.read().try_lock().await.unwrap().is_none());
    assert_eq!(
        v1_release(&server, name, "rw", "old:1:write", older_token),
        1
    );

    let write = rw.write().try_lock().await.unwrap().expect("free again");
    assert!(write.token().unwrap() > older_token as u64);
    assert_eq!(v1_acquire(&server, name, "old:2:write", false, None), [4]);
    assert_eq!(v1_acquire(&server, name, "old:2", false, None), [4]);
    // An older reader waits in its own line.
    assert_eq!(v1_acquire(&server, name, "old:3", true, None)[0], 3);
    let write_token = write.token().unwrap();
    write.unlock().await.unwrap();
    let reader = v1_acquire(&server, name, "old:3", true, None);
    let [1, reader_token] = reader[..] else {
        panic!("the older reader got in on its attempt: {reader:?}");
    };
    assert!(reader_token as u64 > write_token);
    // Readers of both versions share; a writer of neither gets in.
    let read = rw.read().try_lock().await.unwrap().expect("readers share");
    assert!(rw.write().try_lock().await.unwrap().is_none());
    assert_eq!(v1_acquire(&server, name, "old:4:write", false, None), [4]);
    assert_eq!(v1_release(&server, name, "rw", "old:3", reader_token), 1);
    read.unlock().await.unwrap();
    let write = rw.write().try_lock().await.unwrap().expect("free again");
    write.unlock().await.unwrap();
}

/// A semaphore of 3 permits used by clients of both layouts: each counts
/// the other's permits (meta's `used`, the holders set and the hold keys
/// are shared), so no more than 3 are ever out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_of_both_layouts_add_up() {
    let server = RedisServer::start();
    let name = "upgrade-sem";
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let sem = client.semaphore(name, 3).unwrap();

    let older = v1_acquire(&server, name, "old:1", false, Some(2));
    let [1, older_token] = older[..] else {
        panic!("the older client took 2: {older:?}");
    };
    assert!(sem.try_acquire(2).await.unwrap().is_none(), "2 + 2 > 3");
    let one = sem.try_acquire(1).await.unwrap().expect("2 + 1 = 3");
    assert!(one.token().unwrap() > older_token as u64);
    assert_eq!(v1_acquire(&server, name, "old:2", false, Some(1)), [4]);
    assert_eq!(sem.available().await.unwrap(), 0);
    assert_eq!(v1_release(&server, name, "sem", "old:1", older_token), 1);
    let two = sem.try_acquire(2).await.unwrap().expect("1 + 2 = 3");
    assert_eq!(v1_acquire(&server, name, "old:3", false, Some(1)), [4]);
    let two_token = two.token().unwrap();
    two.release().await.unwrap();
    let again = v1_acquire(&server, name, "old:4", false, Some(2));
    let [1, again_token] = again[..] else {
        panic!("the older client took 2 beside 1: {again:?}");
    };
    assert!(again_token as u64 > two_token);
    assert!(sem.try_acquire(1).await.unwrap().is_none(), "1 + 2 = 3");
    assert_eq!(v1_release(&server, name, "sem", "old:4", again_token), 1);
    one.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 3);
}

/// Clients of both layouts race for a semaphore of 3 over and over, with
/// requests of 1 and 2: whatever each answers, the permits held by both
/// never add up past 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_layouts_never_hold_past_the_capacity() {
    let server = RedisServer::start();
    let name = "upgrade-mixed-sem";
    let client = connect(config(&server.url(), Protocol::Native)).await;
    let sem = client.semaphore(name, 3).unwrap();
    let mut newer = Vec::new();
    let mut older: Vec<(String, i64, u32)> = Vec::new();
    let mut last = 0;
    let mut taken = (0, 0);
    for round in 0..60u32 {
        let weight = 1 + round % 2;
        if round % 3 == 0 {
            let id = format!("old:{round}");
            match v1_acquire(&server, name, &id, false, Some(weight))[..] {
                [1, token] => {
                    assert!(token as u64 > last, "{token} after {last}");
                    last = token as u64;
                    older.push((id, token, weight));
                    taken.0 += 1;
                }
                [4] => {}
                ref other => panic!("round {round}: {other:?}"),
            }
        } else if let Some(permits) = sem.try_acquire(weight).await.unwrap() {
            let token = permits.token().unwrap();
            assert!(token > last, "{token} after {last}");
            last = token;
            newer.push((permits, weight));
            taken.1 += 1;
        }
        let held: u32 = newer.iter().map(|(_, w)| w).sum::<u32>()
            + older.iter().map(|(_, _, w)| w).sum::<u32>();
        assert!(held <= 3, "round {round}: {held} permits out");
        // Each side lets one go now and then.
        if round % 4 == 3 {
            if let Some((permits, _)) = newer.pop() {
                permits.release().await.unwrap();
            }
        }
        if round % 5 == 4 {
            if let Some((id, token, _)) = older.pop() {
                assert_eq!(v1_release(&server, name, "sem", &id, token), 1);
            }
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(taken.0 > 0 && taken.1 > 0, "both took permits: {taken:?}");
}
