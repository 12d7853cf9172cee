//! Client labels: who holds a lock and who waits, in words (`HOST:PID` by
//! default). Stored next to the lock in a key of their own (native
//! `fairlock:{NAME}:labels`, redisson `fairlock:labels:{NAME}`), shown by
//! `inspect` under both protocols; Redisson's own keys stay byte for byte
//! what Redisson writes.

use std::time::Duration;

use fairlock::{AcquireOptions, ClientConfig, Error, LockClient, Protocol};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer, eventually};

/// The key of `name`'s labels under `protocol`.
fn labels_key(protocol: Protocol, name: &str) -> String {
    match protocol {
        Protocol::Redisson => format!("fairlock:labels:{{{name}}}"),
        _ => format!("fairlock:{{{name}}}:labels"),
    }
}

fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .expect("read the host name")
        .trim()
        .to_owned()
}

async fn labelled(server: &RedisServer, protocol: Protocol, label: &str) -> LockClient {
    let label = label.to_owned();
    support::client_with(server, protocol, move |c| c.label(label)).await
}

#[tokio::test]
async fn inspect_shows_the_holders_and_the_waiters_labels() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let name = "nightly-report";
        let holder = labelled(&server, protocol, "report-runner@build-7").await;
        let first = labelled(&server, protocol, "billing worker (eu)").await;
        // The default label: HOST:PID (this test's own process).
        let second = support::client(&server, protocol).await;
        let guard = holder.fair_lock(name).unwrap().lock().await.unwrap();

        let wait = |client: &LockClient| {
            let lock = client.fair_lock(name).unwrap();
            tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() })
        };
        let first_waits = wait(&first);
        eventually(Duration::from_secs(10), "the first waiter queued", || {
            support::queue_len(&server, protocol, name) == 1
        })
        .await;
        let second_waits = wait(&second);
        eventually(Duration::from_secs(10), "the second waiter queued", || {
            support::queue_len(&server, protocol, name) == 2
        })
        .await;

        let observer = support::client(&server, protocol).await;
        let info = observer.fair_lock(name).unwrap().inspect().await.unwrap();
        assert_eq!(info.holders.len(), 1, "{protocol}: {info:?}");
        assert_eq!(info.holders[0].owner, guard.owner().as_str());
        assert_eq!(
            info.holders[0].label.as_deref(),
            Some("report-runner@build-7"),
            "{protocol}: {info:?}"
        );
        let labels: Vec<Option<&str>> = info.queue.iter().map(|w| w.label.as_deref()).collect();
        let default = format!("{}:{}", host_name(), std::process::id());
        assert_eq!(
            labels,
            [Some("billing worker (eu)"), Some(default.as_str())],
            "{protocol}: {info:?}"
        );
        assert!(info.queue[0].owner.starts_with(first.id()), "{protocol}");
        assert!(info.queue[1].owner.starts_with(second.id()), "{protocol}");

        guard.unlock().await.unwrap();
        first_waits.await.unwrap();
        second_waits.await.unwrap();
    }
}

#[tokio::test]
async fn non_fair_holders_show_their_labels() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = labelled(&server, protocol, "cron@host-3").await;
        let guard = client.lock("orders").unwrap().lock().await.unwrap();
        let info = client.lock("orders").unwrap().inspect().await.unwrap();
        assert_eq!(
            info.holders[0].label.as_deref(),
            Some("cron@host-3"),
            "{protocol}: {info:?}"
        );
        guard.unlock().await.unwrap();
    }
}

#[test]
fn the_default_label_is_host_and_pid() {
    let config = ClientConfig::from_url("redis://127.0.0.1:1").unwrap();
    assert_eq!(
        config.get_label(),
        format!("{}:{}", host_name(), std::process::id())
    );
}

#[tokio::test]
async fn labels_come_from_the_builder_the_environment_and_the_url() {
    let server = RedisServer::start();
    let url = server.url();
    let from_url = ClientConfig::from_url(&format!("{url}?label=from-url")).unwrap();
    assert_eq!(from_url.get_label(), "from-url");
    let env = |var: &str, url: &str| {
        let url = url.to_owned();
        let var = var.to_owned();
        ClientConfig::from_env_with(move |name| match name {
            "REDIS_URL" => Some(url.clone()),
            name if name == var => Some("from-env".to_owned()),
            _ => None,
        })
        .unwrap()
    };
    // The variable replaces the URL's parameter, as for every setting.
    let from_env = env("FAIRLOCK_LABEL", &format!("{url}?label=from-url"));
    assert_eq!(from_env.get_label(), "from-env");
    assert_eq!(
        env("UNSET", &url).get_label(),
        ClientConfig::from_url(&url).unwrap().get_label()
    );
    // A setter called afterwards wins.
    assert_eq!(from_env.clone().label("from-code").get_label(), "from-code");

    // And the server sees what the client was given.
    for config in [from_url, from_env] {
        let expected = config.get_label().to_owned();
        let client = LockClient::with_config(config).await.unwrap();
        let guard = client.fair_lock("settings").unwrap().lock().await.unwrap();
        let info = client
            .fair_lock("settings")
            .unwrap()
            .inspect()
            .await
            .unwrap();
        assert_eq!(info.holders[0].label.as_deref(), Some(expected.as_str()));
        guard.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn bad_labels_are_refused_with_typed_errors() {
    let server = RedisServer::start();
    let url = server.url();
    let too_long = "x".repeat(fairlock::MAX_LABEL_LEN + 1);
    for bad in [
        "",
        "two\nlines",
        "bell\u{7}",
        "\u{1b}[31mred",
        too_long.as_str(),
    ] {
        let config = ClientConfig::from_url(&url).unwrap().label(bad);
        let err = LockClient::with_config(config).await.unwrap_err();
        assert!(matches!(err, Error::InvalidConfig(_)), "{bad:?}: {err:?}");
        assert!(err.to_string().contains("label"), "{bad:?}: {err}");

        let err = ClientConfig::from_env_with(|var| match var {
            "REDIS_URL" => Some(url.clone()),
            "FAIRLOCK_LABEL" => Some(bad.to_owned()),
            _ => None,
        });
        // An empty variable counts as unset (as for every setting).
        if !bad.is_empty() {
            let err = err.unwrap_err();
            assert!(matches!(err, Error::InvalidConfig(_)), "{bad:?}: {err:?}");
            assert!(err.to_string().contains("FAIRLOCK_LABEL"), "{err}");
        }
    }
    let err = ClientConfig::from_url(&format!("{url}?label={too_long}")).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    assert!(err.to_string().contains("URL parameter label"), "{err}");
    let err = ClientConfig::from_url(&format!("{url}?label=")).unwrap_err();
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    // The longest label is fine.
    let longest = "y".repeat(fairlock::MAX_LABEL_LEN);
    let config = ClientConfig::from_url(&url).unwrap().label(longest);
    LockClient::with_config(config).await.unwrap();
}

/// Under `redisson` the lock hash, the queue list and the deadlines hold
/// exactly what Redisson writes (one field `UUID:THREAD` -> count; owner
/// ids; deadlines as whole epoch milliseconds), and the labels live in
/// fairlock's own key only.
#[tokio::test]
async fn redisson_keys_are_unchanged_byte_for_byte() {
    let server = RedisServer::start();
    let name = "shared-with-java";
    let slot = Duration::from_secs(300);
    let holder = labelled(&server, Protocol::Redisson, "rust-holder").await;
    let waiter = labelled(&server, Protocol::Redisson, "rust-waiter").await;
    let guard = holder.fair_lock(name).unwrap().lock().await.unwrap();
    let lock = waiter.fair_lock(name).unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await.unwrap().unlock().await.unwrap() });
    eventually(Duration::from_secs(10), "the waiter queued", || {
        support::queue_len(&server, Protocol::Redisson, name) == 1
    })
    .await;
    let queue_key = format!("redisson_lock_queue:{{{name}}}");
    let timeout_key = format!("redisson_lock_timeout:{{{name}}}");
    let labels = labels_key(Protocol::Redisson, name);

    let mut keys: Vec<String> = server.cmd(&["KEYS", "*"]);
    keys.sort();
    let mut expected = vec![
        labels.clone(),
        name.to_owned(),
        queue_key.clone(),
        timeout_key.clone(),
    ];
    expected.sort();
    assert_eq!(keys, expected);

    // The lock hash: one field, the owner, with its count as Redisson's
    // HINCRBY writes it.
    let fields: Vec<Vec<u8>> = server.cmd(&["HGETALL", name]);
    assert_eq!(
        fields,
        [guard.owner().as_str().as_bytes().to_vec(), b"1".to_vec()]
    );
    let pttl: i64 = server.cmd(&["PTTL", name]);
    assert!(pttl > 0 && pttl <= 30_000, "{pttl}");
    // The queue: the waiter's owner id, nothing else.
    let queue: Vec<Vec<u8>> = server.cmd(&["LRANGE", &queue_key, "0", "-1"]);
    assert_eq!(queue.len(), 1);
    let waiter_owner = String::from_utf8(queue[0].clone()).unwrap();
    assert!(
        waiter_owner.starts_with(&format!("{}:", waiter.id())),
        "{waiter_owner}"
    );
    assert!(
        waiter_owner
            .rsplit(':')
            .next()
            .unwrap()
            .parse::<u64>()
            .is_ok()
    );
    // The deadlines: the same owner, its deadline a whole number of epoch
    // ms, one slot after the holder's lease ends (Redisson's rule).
    let deadlines: Vec<String> = server.cmd(&["ZRANGE", &timeout_key, "0", "-1", "WITHSCORES"]);
    assert_eq!(deadlines.len(), 2, "{deadlines:?}");
    assert_eq!(deadlines[0], waiter_owner);
    let deadline: i64 = deadlines[1].parse().expect("a whole number of ms");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let slot_ms = slot.as_millis() as i64;
    assert!(
        deadline > now + slot_ms - 1_000 && deadline <= now + slot_ms + 30_000,
        "deadline {deadline}, now {now}"
    );
    // No TTL on Redisson's queue keys: Redisson sets none.
    assert_eq!(server.cmd::<i64>(&["PTTL", &queue_key]), -1);
    assert_eq!(server.cmd::<i64>(&["PTTL", &timeout_key]), -1);

    // The labels: client id -> label, with a TTL, in the lock's slot.
    let mut stored: Vec<String> = server.cmd(&["HGETALL", &labels]);
    let mut pairs: Vec<(String, String)> = stored
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect();
    pairs.sort();
    let mut want = vec![
        (holder.id().to_owned(), "rust-holder".to_owned()),
        (waiter.id().to_owned(), "rust-waiter".to_owned()),
    ];
    want.sort();
    assert_eq!(pairs, want);
    let labels_ttl: i64 = server.cmd(&["PTTL", &labels]);
    assert!(labels_ttl > 0 && labels_ttl <= 30_000, "{labels_ttl}");
    stored.clear();

    guard.unlock().await.unwrap();
    waiting.await.unwrap();
}

/// A lock a Java Redisson client holds (its hash written as Redisson writes
/// it, no label) shows no label; fairlock waiters behind it show theirs.
#[tokio::test]
async fn java_holders_have_no_label() {
    let server = RedisServer::start();
    let name = "java-held";
    let java_owner = "5f0e8a52-7c1b-4d3e-9a56-0b1c2d3e4f50:77";
    let _: () = server.cmd(&["HSET", name, java_owner, "1"]);
    let _: () = server.cmd(&["PEXPIRE", name, "30000"]);
    let waiter = labelled(&server, Protocol::Redisson, "rust-waiter").await;
    let lock = waiter.fair_lock(name).unwrap();
    let waiting = tokio::spawn(async move {
        lock.acquire(AcquireOptions::new().wait(Duration::from_secs(20)))
            .await
    });
    eventually(Duration::from_secs(10), "the waiter queued", || {
        support::queue_len(&server, Protocol::Redisson, name) == 1
    })
    .await;
    let info = waiter.fair_lock(name).unwrap().inspect().await.unwrap();
    assert_eq!(info.holders[0].owner, java_owner);
    assert_eq!(info.holders[0].label, None);
    assert_eq!(info.queue[0].label.as_deref(), Some("rust-waiter"));
    // The Java hold is untouched: still its one field.
    let fields: Vec<String> = server.cmd(&["HGETALL", name]);
    assert_eq!(fields, [java_owner, "1"]);
    let _: () = server.cmd(&["DEL", name]);
    let _: () = server.cmd(&[
        "PUBLISH",
        &format!("redisson_lock__channel:{{{name}}}:{}", info.queue[0].owner),
        "0",
    ]);
    waiting
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// The labels key always has a TTL, the watchdog keeps it as long as the
/// hold, and it is gone at most one lease after the lock's keys.
#[tokio::test]
async fn labels_live_as_long_as_the_lock() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let name = "renewed";
        let lease = Duration::from_millis(2_000);
        let client = support::client_with(&server, protocol, move |c| {
            c.lease(lease)
                .renew_interval(Duration::from_millis(200))
                .label("renewed-holder")
        })
        .await;
        let key = labels_key(protocol, name);
        let guard = client.fair_lock(name).unwrap().lock().await.unwrap();
        // Held through two leases: the label stays, always with a TTL of
        // at most one lease. (The native lock keeps its holder's label in
        // its own value, with the lock's TTL, and writes no labels key.)
        let (lock_key, _, _) = support::lock_keys(protocol, name);
        for _ in 0..16 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            if protocol == Protocol::Native {
                assert_eq!(server.cmd::<i64>(&["EXISTS", &key]), 0);
                let value: String = server.cmd(&["GET", &lock_key]);
                assert!(value.ends_with("\trenewed-holder"), "{value}");
                continue;
            }
            let ttl: i64 = server.cmd(&["PTTL", &key]);
            assert!(ttl > 0 && ttl <= 2_000, "{protocol}: labels TTL {ttl}");
        }
        assert!(guard.is_held(), "{protocol}");
        let info = client.fair_lock(name).unwrap().inspect().await.unwrap();
        assert_eq!(
            info.holders[0].label.as_deref(),
            Some("renewed-holder"),
            "{protocol}"
        );
        // Released: the labels go within one lease.
        guard.unlock().await.unwrap();
        eventually(Duration::from_millis(3_000), "the labels expired", || {
            server.cmd::<i64>(&["EXISTS", &key]) == 0
        })
        .await;

        // A hold with an explicit lease, never renewed: the labels expire
        // with it.
        let lock = client.fair_lock(name).unwrap();
        let guard = lock
            .acquire(AcquireOptions::new().lease(Duration::from_millis(400)))
            .await
            .unwrap()
            .unwrap();
        assert!(server.cmd::<i64>(&["PTTL", &key]) <= 400, "{protocol}");
        if protocol == Protocol::Native {
            assert!(server.cmd::<i64>(&["PTTL", &lock_key]) <= 400, "{protocol}");
        }
        guard.forget();
        eventually(
            Duration::from_millis(1_500),
            "lock and labels expired",
            || {
                server.cmd::<i64>(&["EXISTS", &key]) == 0
                    && !support::is_held(&server, protocol, name)
            },
        )
        .await;
    }
}

/// Labels written by anyone else that this library would not write (a
/// control character: a terminal escape) are not shown, and a labels key of
/// another type costs the lock nothing.
#[tokio::test]
async fn foreign_labels_are_not_shown_and_never_break_the_lock() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = labelled(&server, protocol, "mine").await;
        let key = labels_key(protocol, "odd");
        let _: () = server.cmd(&["HSET", &key, client.id(), "\u{1b}]0;pwned\u{7}"]);
        let _: () = server.cmd(&["PEXPIRE", &key, "60000"]);
        let info_before = client.fair_lock("odd").unwrap().inspect().await.unwrap();
        assert!(info_before.holders.is_empty());
        let _: () = server.cmd(&["DEL", &key]);
        let _: () = server.cmd(&["SET", &key, "not a hash", "PX", "60000"]);
        // The native lock reads no labels key: its holder's label is in the
        // lock's own value, whatever the labels key holds.
        let shown = match protocol {
            Protocol::Native => Some("mine"),
            _ => None,
        };
        let guard = client.fair_lock("odd").unwrap().lock().await.unwrap();
        let info = client.fair_lock("odd").unwrap().inspect().await.unwrap();
        assert_eq!(info.holders[0].label.as_deref(), shown, "{protocol}");
        assert_eq!(server.cmd::<String>(&["GET", &key]), "not a hash");
        guard.unlock().await.unwrap();
        let _: () = server.cmd(&["DEL", &key]);
        let guard = client.fair_lock("odd").unwrap().lock().await.unwrap();
        let _: () = server.cmd(&["HSET", &key, client.id(), "\u{1b}]0;pwned\u{7}"]);
        let info = client.fair_lock("odd").unwrap().inspect().await.unwrap();
        assert_eq!(info.holders[0].label.as_deref(), shown, "{protocol}");
        guard.unlock().await.unwrap();
    }
}

/// What was logged on this test's thread (a `#[tokio::test]` runs its
/// tasks, the watchdog's included, on it).
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn capture(&self) -> tracing::subscriber::DefaultGuard {
        let sink = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    fn lines(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The WARN line of a lost lock names the client by its label too, so that
/// a loss found in logs gathered from many hosts says where it happened.
#[tokio::test]
async fn the_lost_lock_warning_names_the_label() {
    for protocol in PROTOCOLS {
        let logs = Logs::default();
        let _capture = logs.capture();
        let server = RedisServer::start();
        let client = labelled(&server, protocol, "loser@host-1").await;
        let other = support::client(&server, protocol).await;
        let guard = client.fair_lock("lost").unwrap().lock().await.unwrap();
        assert!(
            other
                .fair_lock("lost")
                .unwrap()
                .force_unlock()
                .await
                .unwrap()
        );
        tokio::time::timeout(Duration::from_secs(10), guard.lost())
            .await
            .expect("the loss is noticed");
        eventually(Duration::from_secs(5), "the warning", || {
            logs.lines()
                .iter()
                .any(|l| l.contains("lock lost") && l.contains("label=\"loser@host-1\""))
        })
        .await;
        let warning = logs
            .lines()
            .into_iter()
            .find(|l| l.contains("lock lost"))
            .unwrap();
        assert!(warning.contains(" WARN "), "{warning}");
        assert!(warning.contains(guard.owner().as_str()), "{warning}");
    }
}

/// On a Redis Cluster the labels key shares the lock's slot (one script
/// call touches both; another slot would be refused with CROSSSLOT), with
/// and without a hash tag of the name's own, and the holder's and the
/// waiter's labels are read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_share_the_locks_slot_on_a_cluster() {
    let cluster = support::Cluster::start();
    for protocol in PROTOCOLS {
        let holder =
            support::cluster_client_with(&cluster, protocol, |c| c.label("holder@node")).await;
        let waiter =
            support::cluster_client_with(&cluster, protocol, |c| c.label("waiter@node")).await;
        for name in ["orders", "job{7}"] {
            let (lock_key, _, _) = support::lock_keys(protocol, name);
            let key = match protocol {
                Protocol::Redisson if name.contains('{') => format!("fairlock:labels:{name}"),
                _ => labels_key(protocol, name),
            };
            assert_eq!(cluster.slot_of(&key), cluster.slot_of(&lock_key), "{key}");
            let guard = holder.fair_lock(name).unwrap().lock().await.unwrap();
            let lock = waiter.fair_lock(name).unwrap();
            let waiting = tokio::spawn(async move { lock.lock().await.unwrap().unlock().await });
            let observer = holder.fair_lock(name).unwrap();
            let mut info = observer.inspect().await.unwrap();
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while info.queue.is_empty() {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{protocol} {name}: queued"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
                info = observer.inspect().await.unwrap();
            }
            assert_eq!(
                info.holders[0].label.as_deref(),
                Some("holder@node"),
                "{protocol} {name}"
            );
            assert_eq!(
                info.queue[0].label.as_deref(),
                Some("waiter@node"),
                "{protocol} {name}"
            );
            // Stored in the lock's slot: the native lock's holder label in
            // its own value, Redisson's in the labels key beside it.
            if protocol == Protocol::Native {
                let value: String = cluster.node_for_key(&lock_key).cmd(&["GET", &lock_key]);
                assert!(
                    value.ends_with("\tholder@node"),
                    "{protocol} {name}: {value}"
                );
            } else {
                let stored: Vec<String> = cluster.node_for_key(&key).cmd(&["HGETALL", &key]);
                assert!(
                    stored.contains(&"holder@node".to_owned()),
                    "{protocol} {name}: {stored:?}"
                );
            }
            guard.unlock().await.unwrap();
            waiting.await.unwrap().unwrap();
        }
    }
}
