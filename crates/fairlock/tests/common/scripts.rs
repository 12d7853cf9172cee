//! The native scripts called directly with `EVAL`, as the library sends
//! them, for tests that set up or inspect raw states no client makes (a
//! wrong-typed key, a waiter of a crashed process, a client of another
//! version), and a snapshot of every key of a lock to compare before and
//! after.

use fairlock_test_support::RedisServer;

/// The native release script exactly as the library sends it (fast path
/// first, then the preludes, then the script).
pub const NEW_RELEASE: &str = concat!(
    include_str!("../../src/protocol/native/release_fast.lua"),
    include_str!("../../src/protocol/common.lua"),
    include_str!("../../src/protocol/native/line.lua"),
    include_str!("../../src/protocol/native/lock_prelude.lua"),
    include_str!("../../src/protocol/native/release.lua"),
);
/// The native acquire script exactly as the library sends it.
pub const NEW_ACQUIRE: &str = concat!(
    include_str!("../../src/protocol/native/acquire_fast.lua"),
    include_str!("../../src/protocol/common.lua"),
    include_str!("../../src/protocol/native/line.lua"),
    include_str!("../../src/protocol/native/lock_prelude.lua"),
    include_str!("../../src/protocol/native/acquire.lua"),
);

/// The native give-up script as the library sends it.
pub const NEW_GIVE_UP: &str = concat!(
    include_str!("../../src/protocol/common.lua"),
    include_str!("../../src/protocol/native/line.lua"),
    include_str!("../../src/protocol/native/lock_prelude.lua"),
    include_str!("../../src/protocol/native/give_up.lua"),
);
/// The native force-release script as the library sends it.
pub const NEW_FORCE_RELEASE: &str = concat!(
    include_str!("../../src/protocol/common.lua"),
    include_str!("../../src/protocol/native/line.lua"),
    include_str!("../../src/protocol/native/lock_prelude.lua"),
    include_str!("../../src/protocol/native/force_release.lua"),
);

/// The native semaphore's acquire script as the library sends it.
pub const NEW_SEM_ACQUIRE: &str = concat!(
    include_str!("../../src/protocol/common.lua"),
    include_str!("../../src/protocol/native/line.lua"),
    include_str!("../../src/protocol/native/weighted_prelude.lua"),
    include_str!("../../src/protocol/native/sem_prelude.lua"),
    include_str!("../../src/protocol/native/sem_acquire.lua"),
);
/// The native semaphore's release script as the library sends it.
pub const NEW_SEM_RELEASE: &str = concat!(
    include_str!("../../src/protocol/common.lua"),
    include_str!("../../src/protocol/native/line.lua"),
    include_str!("../../src/protocol/native/weighted_prelude.lua"),
    include_str!("../../src/protocol/native/sem_prelude.lua"),
    include_str!("../../src/protocol/native/weighted_release.lua"),
);

/// The four keys every native semaphore script takes, in its `KEYS` order:
/// holders, line, waiters, meta.
pub fn sem_keys(name: &str) -> Vec<String> {
    ["holders", "line", "waiters", "meta"]
        .iter()
        .map(|s| key(name, &format!("sem:{s}")))
        .collect()
}

/// A key of native lock `name`: `fairlock:{name}:suffix`.
pub fn key(name: &str, suffix: &str) -> String {
    format!("fairlock:{{{name}}}:{suffix}")
}

/// The three keys every native lock script takes, in its `KEYS` order
/// (layout version 2): the lock, the line, the waiters' records.
pub fn three(name: &str) -> Vec<String> {
    ["lock", "line", "waiters"]
        .iter()
        .map(|s| key(name, s))
        .collect()
}

/// The five keys the scripts of the layout before version 2 took: lock,
/// queue, liveness, meta, records.
pub fn five(name: &str) -> Vec<String> {
    ["lock", "queue", "alive", "meta", "leases"]
        .iter()
        .map(|s| key(name, s))
        .collect()
}

pub fn eval(
    server: &RedisServer,
    script: &str,
    keys: &[String],
    args: &[&str],
) -> redis::RedisResult<redis::Value> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len());
    for k in keys {
        cmd.arg(k);
    }
    for a in args {
        cmd.arg(*a);
    }
    cmd.query(&mut server.conn())
}

/// Every key of the lock with its type and DUMP, to compare before/after.
pub fn snapshot(server: &RedisServer, name: &str) -> Vec<(String, String, Vec<u8>)> {
    let mut keys: Vec<String> = server.cmd(&["KEYS", &format!("fairlock:{{{name}}}:*")]);
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let t: String = server.cmd(&["TYPE", &k]);
            let d: Vec<u8> = server.cmd(&["DUMP", &k]);
            (k, t, d)
        })
        .collect()
}
