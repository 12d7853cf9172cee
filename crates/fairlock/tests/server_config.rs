//! What fairlock needs from the server (`docs/deployment.md`): the
//! eviction-policy check at connect, and the minimal ACL rules of each
//! protocol, tried with users that have exactly those rules; and what
//! connecting tells apart (a server that is not Redis, a missing database).

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fairlock::{
    AclRefusal, AcquireOptions, ClientConfig, Error, LockClient, PermitLease, Protocol,
};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer};

// ---------------------------------------------------------------------------
// Log capture

/// What was logged on this test's thread, as plain text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// Capture every event (DEBUG and up) emitted on this thread until the
    /// guard is dropped. `#[tokio::test]` runs its tasks on this thread too.
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// The lines logged at WARN.
    fn warnings(&self) -> Vec<String> {
        self.text()
            .lines()
            .filter(|line| line.contains(" WARN "))
            .map(str::to_owned)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// maxmemory-policy

#[tokio::test]
async fn evicting_policies_are_reported_and_warned_about() {
    let server =
        RedisServer::start_with(&["--maxmemory", "100mb", "--maxmemory-policy", "allkeys-lru"]);
    for policy in [
        "allkeys-lru",
        "allkeys-lfu",
        "volatile-ttl",
        "allkeys-random",
    ] {
        let _: () = server.cmd(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let logs = Logs::default();
        let client = {
            let _capture = logs.capture();
            LockClient::connect(&server.url()).await.expect("connect")
        };
        assert_eq!(client.maxmemory_policy(), Some(policy));
        let warnings = logs.warnings();
        assert_eq!(warnings.len(), 1, "one warning per connect: {warnings:#?}");
        let warning = &warnings[0];
        for needle in [
            server.addr().as_str(),
            policy,
            "set maxmemory-policy noeviction on servers that hold locks",
        ] {
            assert!(warning.contains(needle), "{needle:?} missing in {warning}");
        }
    }
}

#[tokio::test]
async fn noeviction_is_reported_without_a_warning() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let logs = Logs::default();
    let client = {
        let _capture = logs.capture();
        LockClient::connect(&server.url()).await.expect("connect")
    };
    assert_eq!(client.maxmemory_policy(), Some("noeviction"));
    assert!(logs.warnings().is_empty(), "{}", logs.text());
}

#[tokio::test]
async fn a_disabled_config_command_is_skipped() {
    // Managed services rename or disable CONFIG; the server then answers
    // "unknown command".
    let server = RedisServer::start_with(&[
        "--maxmemory-policy",
        "allkeys-lru",
        "--rename-command",
        "CONFIG",
        "",
    ]);
    let logs = Logs::default();
    let client = {
        let _capture = logs.capture();
        LockClient::connect(&server.url()).await.expect("connect")
    };
    assert_eq!(client.maxmemory_policy(), None);
    assert!(logs.warnings().is_empty(), "{}", logs.text());
    assert!(
        logs.text().contains("cannot read maxmemory-policy"),
        "{}",
        logs.text()
    );
    // The client works as usual.
    let guard = client
        .fair_lock("after-config")
        .unwrap()
        .lock()
        .await
        .unwrap();
    guard.unlock().await.unwrap();
}

/// A server without RESP3 (`HELLO` refused, as before Redis 6): the
/// wake-up connection falls back to RESP2 pub/sub, so waiters are still
/// woken by releases (subscribed, and granted well within their 2 s poll).
#[tokio::test]
async fn a_server_without_hello_still_wakes_waiters() {
    let server = RedisServer::start_with(&["--rename-command", "HELLO", ""]);
    for protocol in PROTOCOLS {
        let url = server.url();
        let holder =
            LockClient::with_config(ClientConfig::from_url(&url).unwrap().protocol(protocol))
                .await
                .unwrap();
        let waiter =
            LockClient::with_config(ClientConfig::from_url(&url).unwrap().protocol(protocol))
                .await
                .unwrap();
        let name = format!("no-hello-{protocol}");
        let held = holder.fair_lock(&name).unwrap().lock().await.unwrap();
        let waiting = {
            let lock = waiter.fair_lock(&name).unwrap();
            tokio::spawn(async move { lock.lock().await })
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let channels: Vec<String> = server.cmd(&["PUBSUB", "CHANNELS", "*"]);
            if channels.iter().any(|c| !c.starts_with("fairlock:revoked:")) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{protocol}: never subscribed: {channels:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let released = Instant::now();
        held.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        assert!(
            released.elapsed() < Duration::from_millis(1500),
            "{protocol}: granted {:?} after the release",
            released.elapsed()
        );
        guard.unlock().await.unwrap();
        holder.shutdown().await;
        waiter.shutdown().await;
    }
}

// ---------------------------------------------------------------------------
// ACL rules

/// The password of the example users in `docs/deployment.md`.
const PASSWORD: &str = "change-this-password";

/// The rules of `docs/deployment.md` for a `native` user, word for word.
const NATIVE_RULES: &str = "-@all +ping +time +evalsha +script|load \
    +subscribe +unsubscribe +publish +wait \
    +exists +pttl +hmget +type +get +set +del +pexpire \
    +hget +hset +hdel +hincrby +hgetall +hlen \
    +zadd +zrem +zrange +zrank +zscore +zcard \
    +lindex +lpush +ltrim +lrange +sismember +sadd +scard \
    ~fairlock:* &fairlock:*";

/// The rules of `docs/deployment.md` for a `redisson` user whose lock names
/// all start with `locks:`, word for word.
const REDISSON_RULES: &str = "-@all +ping +time +evalsha +script|load \
    +subscribe +unsubscribe +publish +wait \
    +exists +pttl +hget +type +get +set +del +pexpire \
    +hset +hexists +hincrby +hgetall +hkeys +hlen +hdel \
    +lindex +lpop +rpush +lrange +lrem +lpos +llen \
    +zadd +zrem +zrange +zscore +zincrby +zrangebyscore +zcard +incrby +decrby +decr \
    ~locks:* ~redisson_lock_queue:* ~redisson_lock_timeout:* \
    ~redisson_unlock_latch:* ~redisson_lock__channel:* ~fairlock:replica-sync:* ~fairlock:labels:* \
    ~{locks:* ~redisson_rwlock:* ~redisson_sc:* ~redisson_countdownlatch__channel__* \
    &redisson_lock__channel:* &fairlock:revoked:* &fairlock:replica-sync &redisson_rwlock:* \
    &redisson_sc:* &redisson_countdownlatch__channel__*";

/// The documented user name and rules of `protocol`.
fn documented(protocol: Protocol) -> (&'static str, &'static str) {
    match protocol {
        Protocol::Redisson => ("fairlock-redisson", REDISSON_RULES),
        _ => ("fairlock-native", NATIVE_RULES),
    }
}

/// The rules as words, as `ACL SETUSER` takes them.
fn words(rules: &str) -> Vec<&str> {
    rules.split_whitespace().collect()
}

/// The `ACL SETUSER` line of the deployment guide for `user` with `rules`.
fn setuser_line(user: &str, rules: &str) -> String {
    format!(
        "ACL SETUSER {user} reset on >{PASSWORD} {}",
        words(rules).join(" ")
    )
}

#[test]
fn the_guide_shows_exactly_these_rules() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/deployment.md");
    let guide = std::fs::read_to_string(path).expect("read docs/deployment.md");
    for protocol in PROTOCOLS {
        let (user, rules) = documented(protocol);
        let line = setuser_line(user, rules);
        assert!(
            guide.lines().any(|l| l.trim() == line),
            "docs/deployment.md lacks the {protocol} line:\n{line}"
        );
    }
}

/// The commands a Lua source calls: the literal first argument of every
/// `redis.call(` and `redis.pcall(`, lowercased. A call whose command is not
/// a literal cannot be checked and fails the test.
fn script_commands(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (at, _) in source.match_indices("redis.") {
        let rest = &source[at + "redis.".len()..];
        let Some(args) = rest
            .strip_prefix("call(")
            .or_else(|| rest.strip_prefix("pcall("))
        else {
            continue;
        };
        let args = args.trim_start();
        let quote = match args.chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => panic!(
                "a command that is not a literal: redis.{}",
                &rest[..rest.len().min(40)]
            ),
        };
        let name = &args[1..];
        let end = name.find(quote).expect("a closing quote");
        found.push(name[..end].to_ascii_lowercase());
    }
    found
}

/// Every command the scripts call, read from their sources, is granted:
/// a script that starts calling another command fails here, even on a path
/// no other test runs.
#[test]
fn the_rules_grant_every_command_the_scripts_call() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/protocol");
    for protocol in PROTOCOLS {
        let (_, rules) = documented(protocol);
        let granted: Vec<&str> = words(rules)
            .into_iter()
            .filter_map(|w| w.strip_prefix('+'))
            .collect();
        let mut files = vec![dir.join("common.lua")];
        for entry in std::fs::read_dir(dir.join(protocol.as_str())).expect("script dir") {
            let path = entry.expect("dir entry").path();
            if path.extension().is_some_and(|e| e == "lua") {
                files.push(path);
            }
        }
        let mut seen = 0;
        for file in &files {
            let source = std::fs::read_to_string(file).expect("read script");
            for command in script_commands(&source) {
                assert!(
                    granted.contains(&command.as_str()),
                    "{protocol}: {} calls {command}, which the documented rules do not grant",
                    file.display()
                );
                seen += 1;
            }
        }
        assert!(
            seen > 20,
            "{protocol}: only {seen} calls found in {files:?}"
        );
    }
}

/// Create `user` with `rules` (plus the password) on `server`.
fn create_user(server: &RedisServer, user: &str, rules: &str) {
    let mut args = vec!["ACL", "SETUSER", user, "reset", "on"];
    let password = format!(">{PASSWORD}");
    args.push(&password);
    args.extend(words(rules));
    let _: () = server.cmd(&args);
}

/// A config that logs in as `user`.
fn config_for(server: &RedisServer, user: &str, protocol: Protocol) -> ClientConfig {
    let url = format!("redis://{user}:{PASSWORD}@127.0.0.1:{}", server.port());
    ClientConfig::from_url(&url)
        .expect("url")
        .protocol(protocol)
}

/// Every refusal the server logged (`ACL LOG`), as "reason object (context)",
/// except that of the eviction check's `CONFIG GET`, which the documented
/// users are not granted.
fn acl_denials(server: &RedisServer) -> Vec<String> {
    let entries: Vec<HashMap<String, redis::Value>> = server.cmd(&["ACL", "LOG"]);
    let field = |entry: &HashMap<String, redis::Value>, name: &str| -> String {
        entry
            .get(name)
            .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
            .unwrap_or_default()
    };
    entries
        .iter()
        .filter(|e| field(e, "object") != "config|get")
        .map(|e| {
            format!(
                "{} {} ({})",
                field(e, "reason"),
                field(e, "object"),
                field(e, "context")
            )
        })
        .collect()
}

/// Poll `probe` every 10 ms until it answers `true` (for at most 5 s) while
/// `waiter` waits; when the waiter ends first (with an error such as a
/// refused command), fail with what it returned.
async fn while_waiting<T, F, Fut>(waiter: &mut tokio::task::JoinHandle<T>, what: &str, probe: F)
where
    T: std::fmt::Debug,
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut probe = probe;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !probe().await {
        if waiter.is_finished() {
            panic!("the waiter ended before {what}: {:?}", waiter.await);
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Everything the library does, as a user with exactly the documented rules.
async fn documented_rules_suffice(protocol: Protocol) {
    support::init_tracing();
    let server = RedisServer::start();
    let (user, rules) = documented(protocol);
    create_user(&server, user, rules);
    // A lease of 1 s, renewed every 333 ms: a renewal may come 660 ms late
    // on a loaded machine (with 300 ms, 200 ms late lost the hold once).
    let lease = Duration::from_secs(1);
    let config = config_for(&server, user, protocol).lease(lease);
    let a = LockClient::with_config(config.clone())
        .await
        .expect("connect");
    let b = LockClient::with_config(config).await.expect("connect");
    // CONFIG GET is refused (no +config|get), which is no reason to fail.
    assert_eq!(a.maxmemory_policy(), None);

    let name = "locks:acl";
    let lock_a = a.fair_lock(name).unwrap();
    let lock_b = b.fair_lock(name).unwrap();

    // Lock, and keep it through the watchdog for more than three leases.
    let held = lock_a.lock().await.expect("lock");
    tokio::time::sleep(lease * 3 + lease / 5).await;
    assert!(held.is_held(), "{protocol}: the watchdog kept the lease");
    assert!(lock_b.is_locked().await.unwrap());
    assert!(lock_b.remaining_lease().await.unwrap().is_some());
    assert_eq!(lock_b.hold_count(held.owner()).await.unwrap(), 1);

    // Force-unlock: the holder learns it lost the lock at its next renewal.
    assert!(lock_b.force_unlock().await.expect("force unlock"));
    tokio::time::timeout(Duration::from_secs(2), held.lost())
        .await
        .expect("the holder learned of the force-unlock");
    assert!(!held.is_held());
    drop(held);

    // Two waiters line up behind a long lease (so that neither is granted
    // by polling within the time allowed below): one with try_lock_for, one
    // with its own owner.
    let mut held = lock_a
        .lock_with_lease(Duration::from_secs(20))
        .await
        .expect("lock");
    let mut first = tokio::spawn({
        let lock_b = lock_b.clone();
        async move { lock_b.try_lock_for(Duration::from_secs(10)).await }
    });
    while_waiting(&mut first, "the first waiter queued", || async {
        lock_a.inspect().await.unwrap().queue.len() == 1
    })
    .await;
    let second_owner = b.new_owner();
    let mut second = tokio::spawn({
        let lock_b = lock_b.clone();
        let options = AcquireOptions::new()
            .wait(Duration::from_secs(10))
            .owner(second_owner.clone());
        async move { lock_b.acquire(options).await }
    });
    while_waiting(&mut second, "the second waiter queued", || async {
        lock_a.queue_position(&second_owner).await.unwrap() == Some((2, 2))
    })
    .await;
    let info = lock_b.inspect().await.unwrap();
    assert_eq!(info.holders[0].owner, held.owner().as_str());
    assert_eq!(info.queue.len(), 2);
    assert_eq!(info.queue[1].owner, second_owner.as_str());

    // Each unlock wakes the next waiter through pub/sub: a waiter that had
    // to poll would wait 2 s (native) or the 20 s lease (redisson).
    for (waiter, who) in [(first, "first"), (second, "second")] {
        let unlocked = Instant::now();
        held.unlock().await.expect("unlock");
        held = waiter.await.unwrap().expect(who).expect("granted");
        assert!(
            unlocked.elapsed() < Duration::from_secs(1),
            "{protocol}: {who} waiter woken after {:?}",
            unlocked.elapsed()
        );
    }
    assert_eq!(held.owner(), &second_owner);
    // A waiter that runs out of time leaves the queue.
    let gave_up = lock_a.try_lock_for(Duration::from_millis(200)).await;
    assert!(gave_up.expect("give up").is_none());
    assert!(lock_a.inspect().await.unwrap().queue.is_empty());
    held.unlock().await.expect("unlock");

    // The non-fair lock: lock, a waiter woken by the release, force-unlock.
    let plain_a = a.lock("locks:acl-plain").unwrap();
    let plain_b = b.lock("locks:acl-plain").unwrap();
    let held = plain_a.lock().await.expect("lock");
    let waiter = tokio::spawn({
        let plain_b = plain_b.clone();
        async move { plain_b.try_lock_for(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    held.unlock().await.expect("unlock");
    let got = waiter.await.unwrap().expect("waiter").expect("granted");
    assert!(plain_a.force_unlock().await.expect("force unlock"));
    drop(got);

    if protocol == Protocol::Native {
        // A leader election: observed, campaigned, proclaimed, resigned.
        let election = b.election("locks:acl-elect").unwrap();
        let mut changes = election.observe().await.unwrap();
        let leading = a.election("locks:acl-elect").unwrap();
        let leading = leading.campaign("a").await.expect("campaign");
        leading.proclaim("a2").await.expect("proclaim");
        let leader = election.leader().await.unwrap().expect("a leader");
        assert_eq!(leader.value, "a2");
        leading.resign().await.expect("resign");
        let mut seen = Vec::new();
        while seen.len() < 4 {
            let change = tokio::time::timeout(Duration::from_secs(5), changes.next());
            let change = change.await.expect("a change").expect("observed");
            seen.push(change.map(|l| l.value));
        }
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(seen, vec![None, s("a"), s("a2"), None]);
    }

    {
        // The read-write lock: two readers kept by the watchdog (their
        // timeout keys renewed under redisson, their hold keys and the
        // holders set under native), a writer woken (native: admitted) by
        // the last release, a force-unlock of the write side.
        let rw_a = a.read_write_lock("locks:acl-rw").unwrap();
        let rw_b = b.read_write_lock("locks:acl-rw").unwrap();
        let read = rw_a.read().lock().await.expect("read");
        let again = read.reenter().await.expect("re-enter").expect("held");
        let other = rw_b.read().lock().await.expect("read beside");
        let writer = tokio::spawn({
            let rw_b = rw_b.clone();
            async move { rw_b.write().try_lock_for(Duration::from_secs(10)).await }
        });
        tokio::time::sleep(lease * 3 + lease / 5).await;
        assert!(
            read.is_held() && again.is_held() && other.is_held(),
            "renewed"
        );
        assert!(rw_b.inspect().await.unwrap().holders.len() == 2);
        again.unlock().await.expect("unlock");
        read.unlock().await.expect("unlock");
        other.unlock().await.expect("unlock");
        let write = writer.await.unwrap().expect("writer").expect("granted");
        assert!(rw_a.write().force_unlock().await.expect("force unlock"));
        tokio::time::timeout(Duration::from_secs(2), write.lost())
            .await
            .expect("the writer learned of the force-unlock");
    }
    {
        // The semaphore: permits kept by their watchdog, a waiter woken
        // (native: admitted) by a release, inspect, a new total, a
        // force-release; under redisson the plain kind's permits.
        let sem_a = a.semaphore("locks:acl-sem", 2).unwrap();
        let sem_b = b.semaphore("locks:acl-sem", 2).unwrap();
        let both = sem_a.acquire(2).await.expect("acquire");
        let waiter = tokio::spawn({
            let sem_b = sem_b.clone();
            async move { sem_b.try_acquire_for(1, Duration::from_secs(10)).await }
        });
        tokio::time::sleep(lease * 3 + lease / 5).await;
        assert!(both.is_held(), "renewed");
        let info = sem_b.inspect().await.unwrap();
        assert_eq!(info.taken.iter().map(|t| t.permits).sum::<u32>(), 2);
        both.release().await.expect("release");
        let one = waiter.await.unwrap().expect("waiter").expect("granted");
        sem_b.set_permits(3).await.expect("set permits");
        assert_eq!(sem_a.available().await.unwrap(), 2);
        one.release().await.expect("release");
        // A lease of its own, not the 300 ms one: on a busy machine the
        // permits must not run out before the force-release counts them.
        let forced = sem_a
            .acquire_with(2, None, PermitLease::Fixed(Duration::from_secs(30)))
            .await
            .expect("acquire")
            .expect("granted");
        assert_eq!(sem_b.force_release().await.expect("force release"), 2);
        if protocol == Protocol::Native {
            tokio::time::timeout(Duration::from_secs(2), forced.lost())
                .await
                .expect("the holder learned of the force-release");
        }
        drop(forced);
    }
    if protocol == Protocol::Redisson {
        let plain = a.counting_semaphore("locks:acl-plain-sem", 1).unwrap();
        let taken = plain.acquire(1).await.expect("acquire");
        assert!(plain.try_acquire(1).await.unwrap().is_none());
        taken.release().await.expect("release");
        assert_eq!(plain.available().await.unwrap(), 1);
    }
    {
        // The count-down latch: set, a waiter woken by the count-down that
        // opens it, inspect, delete (native: a party's count-down too).
        let latch_a = a.count_down_latch("locks:acl-latch").unwrap();
        let latch_b = b.count_down_latch("locks:acl-latch").unwrap();
        assert!(latch_a.try_set_count(2).await.expect("set"));
        let waiter = tokio::spawn({
            let latch_b = latch_b.clone();
            async move { latch_b.wait_for(Duration::from_secs(10)).await }
        });
        match protocol {
            Protocol::Native => latch_a.count_down_as("p").await.expect("count down"),
            _ => latch_a.count_down().await.expect("count down"),
        };
        assert_eq!(latch_b.inspect().await.expect("inspect").count, 1);
        latch_a.count_down().await.expect("count down");
        assert!(waiter.await.unwrap().expect("waiter"), "opened");
        assert!(latch_a.try_set_count(1).await.expect("set"));
        assert!(latch_b.delete().await.expect("delete"));
    }
    a.flush().await;
    b.flush().await;

    assert_eq!(
        acl_denials(&server),
        Vec::<String>::new(),
        "{protocol}: the server refused something the documented rules should allow"
    );
}

#[tokio::test]
async fn documented_rules_suffice_for_native() {
    documented_rules_suffice(Protocol::Native).await;
}

#[tokio::test]
async fn documented_rules_suffice_for_redisson() {
    documented_rules_suffice(Protocol::Redisson).await;
}

/// With the optional `+config|get`, the policy is read as for any user.
#[tokio::test]
async fn config_get_lets_a_restricted_user_read_the_policy() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "volatile-lru"]);
    let (user, rules) = documented(Protocol::Native);
    create_user(&server, user, &format!("{rules} +config|get"));
    let client = LockClient::with_config(config_for(&server, user, Protocol::Native))
        .await
        .expect("connect");
    assert_eq!(client.maxmemory_policy(), Some("volatile-lru"));
}

/// fairlock's connections skip redis-rs's `CLIENT SETINFO` (Redis 7.2 and
/// Valkey have the command, Redis 7.0 does not): a user with the minimal
/// rules, which cannot name `client|setinfo` on Redis 7.0, leaves no refusal
/// of it in `ACL LOG` on any server, and the connections carry no library
/// name where the server shows one.
#[tokio::test]
async fn connections_send_no_client_setinfo() {
    let server = RedisServer::start();
    let kind = server.kind();
    let (user, rules) = documented(Protocol::Native);
    create_user(&server, user, rules);
    let client = LockClient::with_config(config_for(&server, user, Protocol::Native))
        .await
        .expect("connect");
    let lock = client.fair_lock("setinfo").unwrap();
    lock.lock()
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    client.flush().await;

    let refused: Vec<String> = acl_denials(&server);
    assert!(
        !refused.iter().any(|d| d.contains("setinfo")),
        "{kind:?}: {refused:?}"
    );
    let list: String = server.cmd(&["CLIENT", "LIST"]);
    let ours: Vec<&str> = list
        .lines()
        .filter(|line| line.contains(&format!(" user={user} ")))
        .collect();
    assert!(
        !ours.is_empty(),
        "{kind:?}: no connection of {user}: {list}"
    );
    for line in ours {
        assert!(
            !line.contains("lib-name=redis-rs"),
            "{kind:?}: a connection named its library: {line}"
        );
    }
}

// ---------------------------------------------------------------------------
// A rule missing

/// Poll `probe` every 10 ms until it answers `true`, for at most `limit`.
async fn until<F, Fut>(limit: Duration, what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while !probe().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Without `&fairlock:*` a native user may not publish wake-ups: the release
/// script fails at its PUBLISH with an error naming the channel, *after* it
/// freed the lock and handed it to the next waiter (Redis keeps the writes a
/// script made before an error). The waiter, whose SUBSCRIBE is refused as
/// well, is not woken but claims the grant at its next refresh. No hang.
#[tokio::test]
async fn native_user_without_the_channel_rule() {
    support::init_tracing();
    let server = RedisServer::start();
    let (user, rules) = documented(Protocol::Native);
    let rules = rules.replace(" &fairlock:*", "");
    create_user(&server, user, &rules);
    let config = config_for(&server, user, Protocol::Native);
    let a = LockClient::with_config(config.clone())
        .await
        .expect("connect");
    let b = LockClient::with_config(config).await.expect("connect");
    let lock_a = a.fair_lock("no-channel").unwrap();
    let lock_b = b.fair_lock("no-channel").unwrap();

    let held = lock_a
        .lock()
        .await
        .expect("an uncontended lock publishes nothing");
    let mut waiter =
        tokio::spawn(async move { lock_b.try_lock_for(Duration::from_secs(10)).await });
    while_waiting(&mut waiter, "the waiter queued", || async {
        lock_a.inspect().await.unwrap().queue.len() == 1
    })
    .await;

    let unlocked = Instant::now();
    let err = held.unlock().await.expect_err("the release cannot publish");
    assert!(
        matches!(&err, Error::Redis(_)) && !err.is_connection() && !err.is_auth(),
        "{err:?}"
    );
    // Redis says "can't publish to the channel", Valkey "ACL failure in
    // script: No permissions to access a channel": the library names the
    // cause alike for both.
    assert_eq!(err.acl_refusal(), Some(AclRefusal::Channel), "{err:?}");
    assert!(
        err.to_string().contains("the ACL refused a channel"),
        "the error names the cause: {err}"
    );
    // Yet the lock was passed on: the waiter claims it by polling (it
    // refreshes every waiter_ttl / 3 = 2 s).
    let got = waiter.await.unwrap().expect("waiter").expect("granted");
    assert!(
        unlocked.elapsed() < Duration::from_secs(4),
        "{:?}",
        unlocked.elapsed()
    );
    got.forget();

    let denials = acl_denials(&server);
    assert!(
        denials
            .iter()
            .any(|d| d.starts_with("channel ") && d.ends_with("(toplevel)")),
        "SUBSCRIBE refused: {denials:?}"
    );
    assert!(
        denials
            .iter()
            .any(|d| d.starts_with("channel ") && d.ends_with("(lua)")),
        "PUBLISH in the script refused: {denials:?}"
    );
}

/// Redisson passes its wake-up channel to the release scripts as a *key*,
/// so a redisson user also needs `~redisson_lock__channel:*`. Without it the
/// server refuses the release before running it: a NOPERM error, nothing
/// changed, and the lock stays held until its lease runs out.
#[tokio::test]
async fn redisson_user_without_the_channel_key_rule() {
    support::init_tracing();
    let server = RedisServer::start();
    let (user, rules) = documented(Protocol::Redisson);
    let rules = rules.replace(" ~redisson_lock__channel:*", "");
    create_user(&server, user, &rules);
    let config = config_for(&server, user, Protocol::Redisson).lease(Duration::from_millis(300));
    let client = LockClient::with_config(config).await.expect("connect");
    let lock = client.fair_lock("locks:no-channel-key").unwrap();

    let held = lock.lock().await.expect("acquiring passes no channel");
    let owner = held.owner().clone();
    let err = held
        .unlock()
        .await
        .expect_err("the release names the channel");
    match &err {
        Error::Redis(source) => assert_eq!(source.code(), Some("NOPERM"), "{err:?}"),
        other => panic!("expected Error::Redis(NOPERM), got {other:?}"),
    }
    assert_eq!(err.acl_refusal(), Some(AclRefusal::Key), "{err:?}");
    assert_eq!(lock.hold_count(&owner).await.unwrap(), 1, "nothing changed");
    // The watchdog stopped renewing it at the unlock: it expires.
    until(Duration::from_secs(3), "the lease ran out", || async {
        !lock.is_locked().await.unwrap()
    })
    .await;
    assert_eq!(
        acl_denials(&server),
        vec!["key redisson_lock__channel:{locks:no-channel-key} (toplevel)".to_owned()]
    );
}

// ---------------------------------------------------------------------------
// What connecting tells apart

/// A loopback listener that answers its first `connections` connections as
/// an HTTP server answers a request it cannot read, closing each.
fn http_server(connections: usize) -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(connections) {
            let Ok(mut stream) = stream else { continue };
            let _ = stream.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[tokio::test]
async fn a_server_that_is_not_redis_is_named_as_such() {
    let port = http_server(1);
    let err = LockClient::connect(&format!("redis://127.0.0.1:{port}"))
        .await
        .unwrap_err();
    let addr = format!("127.0.0.1:{port}");
    assert!(
        matches!(&err, Error::NotRedis { addr: a, .. } if *a == addr),
        "{err:?}"
    );
    assert!(!err.is_connection() && !err.is_invalid_input(), "{err:?}");
    assert!(
        err.to_string()
            .starts_with(&format!("{addr} did not answer as a Redis server"))
    );
}

#[tokio::test]
async fn a_missing_database_is_bad_input_and_an_existing_one_is_used() {
    let server = RedisServer::start();
    let err = LockClient::connect(&format!("{}/99", server.url()))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    let shown = err.to_string();
    assert!(shown.contains("has no database 99"), "{shown}");
    assert!(shown.contains("DB index is out of range"), "{shown}");

    let client = LockClient::connect(&format!("{}/3", server.url()))
        .await
        .unwrap();
    let guard = client.fair_lock("in-three").unwrap().lock().await.unwrap();
    let mut conn = server.conn();
    let in_zero: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert!(in_zero.is_empty(), "{in_zero:?}");
    let () = redis::cmd("SELECT").arg(3).query(&mut conn).unwrap();
    let in_three: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).unwrap();
    assert!(
        in_three.contains(&"fairlock:{in-three}:lock".to_owned()),
        "{in_three:?}"
    );
    guard.unlock().await.unwrap();
    client.shutdown().await;
}

/// The `WAIT` timeout of the `min_replicas` tests below, whose replica runs
/// throughout: long, so that a replica a loaded machine keeps from running
/// for a while still acknowledges; a healthy replica acknowledges at once,
/// so it costs nothing. (What these tests look for, a command the ACL
/// refuses, fails at once whatever the timeout.)
const ACKED_WITHIN: Duration = Duration::from_secs(5);

/// Adversary 2: `min_replicas` as a user with exactly the documented rules.
/// A master with one replica in sync: the acquisition and the release must
/// be acknowledged, with nothing refused in `ACL LOG`. The replica runs
/// throughout, so the `WAIT` timeout is long ([`ACKED_WITHIN`]).
async fn documented_rules_suffice_for_min_replicas(protocol: Protocol) {
    support::init_tracing();
    let server = RedisServer::start();
    let port = server.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    until(Duration::from_secs(10), "replica in sync", || async {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    })
    .await;
    let (user, rules) = documented(protocol);
    create_user(&server, user, rules);
    let config = config_for(&server, user, protocol).min_replicas(1, ACKED_WITHIN);
    let client = LockClient::with_config(config).await.expect("connect");
    let name = match protocol {
        Protocol::Redisson => "locks:adv2-sync",
        _ => "adv2-sync",
    };
    let lock = client.fair_lock(name).unwrap();
    let acquired = lock.lock().await;
    let denials = acl_denials(&server);
    let guard = acquired.unwrap_or_else(|e| panic!("{protocol}: {e:?}; ACL LOG: {denials:?}"));
    guard.unlock().await.expect("release acknowledged");
    assert_eq!(acl_denials(&server), Vec::<String>::new(), "{protocol}");
    client.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_rules_suffice_for_min_replicas_native() {
    documented_rules_suffice_for_min_replicas(Protocol::Native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_rules_suffice_for_min_replicas_redisson() {
    documented_rules_suffice_for_min_replicas(Protocol::Redisson).await;
}

/// Adversary 2 (second pass): the documented users with `min_replicas`
/// through every path that sends a hold proof on the sync connection
/// (`HGET`/`HEXISTS` and `PTTL` before the `WAIT`): watchdog renewals, a
/// handoff's claim, a re-entry. Nothing refused, every hold still believed.
/// The replica runs throughout, so the `WAIT` timeout is long
/// ([`ACKED_WITHIN`]).
async fn documented_rules_suffice_for_proofs(protocol: Protocol) {
    support::init_tracing();
    let server = RedisServer::start();
    let port = server.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    until(Duration::from_secs(10), "replica in sync", || async {
        let info: String = replica.cmd(&["INFO", "replication"]);
        info.contains("master_link_status:up")
    })
    .await;
    let (user, rules) = documented(protocol);
    create_user(&server, user, rules);
    let config = || {
        config_for(&server, user, protocol)
            .min_replicas(1, ACKED_WITHIN)
            .lease(Duration::from_millis(1_500))
            .waiter_ttl(Duration::from_millis(1_500))
    };
    let holder = LockClient::with_config(config()).await.expect("connect");
    let waiter = LockClient::with_config(config()).await.expect("connect");
    let name = match protocol {
        Protocol::Redisson => "locks:adv2-proofs",
        _ => "adv2-proofs",
    };
    let lock = holder.fair_lock(name).unwrap();
    let held = lock.lock().await.expect("acquired");
    // A re-entry of the same owner.
    let again = lock
        .acquire(AcquireOptions::new().owner(held.owner().clone()))
        .await
        .expect("re-entered")
        .expect("re-entry granted");
    let mut waiting = tokio::spawn({
        let lock = waiter.fair_lock(name).unwrap();
        async move { lock.lock().await }
    });
    // Several renewals, each proven on the sync connection.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let denials = acl_denials(&server);
    assert!(
        held.is_held() && again.is_held(),
        "{protocol}: renewals not believed; ACL LOG: {denials:?}"
    );
    again.unlock().await.expect("re-entry released");
    held.unlock().await.expect("released");
    // Handed over; the claim (a third of the grant on) is proven too.
    let guard = tokio::time::timeout(Duration::from_secs(5), &mut waiting)
        .await
        .expect("handed over")
        .unwrap()
        .expect("granted");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let denials = acl_denials(&server);
    assert!(
        guard.is_held(),
        "{protocol}: the claim or renewals not believed; ACL LOG: {denials:?}"
    );
    guard.unlock().await.expect("released");
    assert_eq!(acl_denials(&server), Vec::<String>::new(), "{protocol}");
    holder.shutdown().await;
    waiter.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_rules_suffice_for_proofs_native() {
    documented_rules_suffice_for_proofs(Protocol::Native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documented_rules_suffice_for_proofs_redisson() {
    documented_rules_suffice_for_proofs(Protocol::Redisson).await;
}

/// A `redisson` ACL user set up with the rules of the version before client
/// labels (no `~fairlock:labels:*`, no `+hlen`): its first script call that
/// names a labels key is refused with `NOPERM` (before it ran), sent again
/// without it, and the client goes on without labels: it locks, renews,
/// waits and inspects as before. A `native` user without `+hlen` keeps its
/// labels (`HLEN` is only the cap's check, skipped when refused).
#[tokio::test]
async fn users_set_up_before_labels_still_lock() {
    support::init_tracing();
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let (user, rules) = documented(protocol);
        let old_rules: String = words(rules)
            .into_iter()
            .filter(|w| *w != "~fairlock:labels:*" && *w != "+hlen")
            .collect::<Vec<_>>()
            .join(" ");
        assert!(!old_rules.contains("hlen"));
        create_user(&server, user, &old_rules);
        // A lease of 1 s: a renewal may come 660 ms late on a loaded machine.
        let lease = Duration::from_secs(1);
        let config = config_for(&server, user, protocol)
            .lease(lease)
            .label("old-acl");
        let a = LockClient::with_config(config.clone())
            .await
            .expect("connect");
        let b = LockClient::with_config(config).await.expect("connect");
        let name = "locks:old-acl";
        let guard = a.fair_lock(name).unwrap().lock().await.expect("lock");
        let lock_b = b.fair_lock(name).unwrap();
        let waiting = tokio::spawn(async move { lock_b.lock().await.map(|g| g.owner().clone()) });
        // Held through more than three leases: renewals work.
        tokio::time::sleep(lease * 3 + lease / 5).await;
        assert!(guard.is_held(), "{protocol}");
        let info = a.fair_lock(name).unwrap().inspect().await.expect("inspect");
        assert_eq!(info.holders.len(), 1, "{protocol}");
        assert_eq!(info.queue.len(), 1, "{protocol}: {info:?}");
        let expected = match protocol {
            Protocol::Redisson => None,
            _ => Some("old-acl"),
        };
        assert_eq!(info.holders[0].label.as_deref(), expected, "{protocol}");
        assert_eq!(info.queue[0].label.as_deref(), expected, "{protocol}");
        guard.unlock().await.expect("unlock");
        let owner = waiting.await.unwrap().expect("the waiter's turn");
        assert!(owner.as_str().starts_with(b.id()), "{protocol}");
    }
}
