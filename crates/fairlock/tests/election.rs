//! Leader election on the fair lock (`docs/election.md`), against real
//! servers: succession in arrival order, terms, fencing, dead and cut-off
//! leaders, observers.

use std::time::{Duration, Instant};

use fairlock::{Error, Leader, LeaderChanges, LockClient, Protocol};
use fairlock_test_support as support;
use support::proxy::Proxy;
use support::{RedisServer, client, client_with};

mod common;
use common::{config, connect, until_queued};

fn log_key(name: &str) -> String {
    format!("fairlock:{{{name}}}:elect:log")
}

/// The next change within `limit`.
async fn next_within(changes: &mut LeaderChanges, limit: Duration) -> Option<Leader> {
    tokio::time::timeout(limit, changes.next())
        .await
        .expect("a change within the limit")
        .expect("read the election")
}

/// The value and term of a change (`None`: nobody leads).
fn seen(change: &Option<Leader>) -> Option<(String, u64)> {
    change.as_ref().map(|l| (l.value.clone(), l.term))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn candidates_lead_in_arrival_order_and_terms_increase() {
    let server = RedisServer::start();
    let clients = [
        client(&server, Protocol::Native).await,
        client(&server, Protocol::Native).await,
        client(&server, Protocol::Native).await,
    ];
    let watcher = client(&server, Protocol::Native).await;
    let election = watcher.election("order").unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(
        next_within(&mut changes, Duration::from_secs(5)).await,
        None
    );

    let first = clients[0]
        .election("order")
        .unwrap()
        .campaign("a")
        .await
        .unwrap();
    // The others queue in this order.
    let mut waiting = Vec::new();
    for (i, (c, value)) in clients[1..].iter().zip(["b", "c"]).enumerate() {
        let e = c.election("order").unwrap();
        waiting.push(tokio::spawn(async move { e.campaign(value).await }));
        until_queued(&server, "order", i + 1).await;
    }
    let leader = election.leader().await.unwrap().expect("a leads");
    assert_eq!((leader.value.as_str(), leader.term), ("a", first.term()));
    assert!(!leader.label.is_empty());

    let mut terms = vec![first.term()];
    first.resign().await.unwrap();
    let mut queue = waiting.into_iter();
    let second = queue.next().unwrap().await.unwrap().unwrap();
    terms.push(second.term());
    second.proclaim("b2").await.unwrap();
    drop(second); // resigns in the background
    let third = queue.next().unwrap().await.unwrap().unwrap();
    terms.push(third.term());
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
    third.resign().await.unwrap();

    let mut got = Vec::new();
    while got.len() < 7 {
        got.push(seen(
            &next_within(&mut changes, Duration::from_secs(5)).await,
        ));
    }
    let s = |v: &str, t: u64| Some((v.to_owned(), t));
    assert_eq!(
        got,
        vec![
            s("a", terms[0]),
            None,
            s("b", terms[1]),
            s("b2", terms[1]),
            None,
            s("c", terms[2]),
            None
        ]
    );
    assert_eq!(election.leader().await.unwrap(), None);
}

/// A leader cut off from Redis stops believing (lost() fires) at its
/// lease's end, no later than its successor starts; its value is stale
/// from then on, and a proclaim of the deposed leader writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_before_its_successor_and_is_fenced() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(1500);
    let proxy = Proxy::start(server.port());
    let old = connect(
        config(&proxy.url(), Protocol::Native)
            .lease(lease)
            .response_timeout(Duration::from_millis(300)),
    )
    .await;
    let next = client_with(&server, Protocol::Native, |c| c.lease(lease)).await;
    let observer = client(&server, Protocol::Native).await;
    let election = observer.election("cut").unwrap();

    let deposed = old.election("cut").unwrap().campaign("old").await.unwrap();
    let deposed_lost = deposed.lost();
    let successor = {
        let e = next.election("cut").unwrap();
        tokio::spawn(async move {
            let leadership = e.campaign("new").await.unwrap();
            (Instant::now(), leadership)
        })
    };
    until_queued(&server, "cut", 1).await;
    let cut_at = Instant::now();
    proxy.refuse();
    proxy.cut_all();

    tokio::time::timeout(lease * 2, deposed_lost)
        .await
        .expect("the cut-off leader stops believing within its lease");
    let stopped_at = Instant::now();
    assert!(!deposed.is_leader());
    let (started_at, successor) = tokio::time::timeout(lease * 4, successor)
        .await
        .expect("succeeded within the lease and a refresh")
        .unwrap();
    assert!(
        stopped_at <= started_at,
        "two leaders believed at once: the old one stopped {:?} after the cut, the new one began {:?} after it",
        stopped_at - cut_at,
        started_at - cut_at
    );
    assert!(successor.term() > deposed.term());
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("new", successor.term())
    );

    // The deposed leader reaches Redis again: its proclaim is refused.
    proxy.pass();
    let err = deposed.proclaim("old again").await.unwrap_err();
    assert!(matches!(err, Error::LockLost { .. }), "{err:?}");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("new", successor.term())
    );
    assert!(matches!(
        deposed.resign().await,
        Err(Error::LockLost { .. })
    ));
    assert_eq!(
        election.leader().await.unwrap().map(|l| l.term),
        Some(successor.term())
    );
    successor.resign().await.unwrap();
}

/// A value whose leader's lease ran out is stale: nobody leads, though the
/// log still names it; observers see that within their re-read bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_leaders_value_is_stale() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let lease = Duration::from_millis(1000);
    let dying = connect(
        config(&proxy.url(), Protocol::Native)
            .lease(lease)
            .response_timeout(Duration::from_millis(300)),
    )
    .await;
    let observer = client(&server, Protocol::Native).await;
    let election = observer.election("stale").unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(
        next_within(&mut changes, Duration::from_secs(5)).await,
        None
    );

    let leadership = dying
        .election("stale")
        .unwrap()
        .campaign("v")
        .await
        .unwrap();
    let term = leadership.term();
    assert_eq!(
        seen(&next_within(&mut changes, Duration::from_secs(5)).await),
        Some(("v".to_owned(), term))
    );
    proxy.refuse();
    proxy.cut_all();
    // Nobody publishes the end: the observer reads it at the lease's end
    // (or within a second).
    let started = Instant::now();
    assert_eq!(next_within(&mut changes, lease * 3).await, None);
    assert!(started.elapsed() < lease + Duration::from_millis(1500));
    assert_eq!(election.leader().await.unwrap(), None);
    // The log still names the dead leader's value: only its term tells.
    let head: Vec<String> = server.cmd(&["LRANGE", &log_key("stale"), "0", "0"]);
    assert!(head[0].starts_with(&format!("{term}:")), "{head:?}");
    drop(leadership);
}

/// An observer whose pub/sub connection went silent (messages lost) still
/// sees every change, in order, from its re-reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_recovers_missed_messages_in_order() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let observer = connect(config(&proxy.url(), Protocol::Native)).await;
    let leaders = client(&server, Protocol::Native).await;
    let mut changes = observer
        .election("missed")
        .unwrap()
        .observe()
        .await
        .unwrap();
    assert_eq!(
        next_within(&mut changes, Duration::from_secs(5)).await,
        None
    );

    proxy.blackhole_pubsub();
    let election = leaders.election("missed").unwrap();
    let mut expected = Vec::new();
    for value in ["x", "y", "z"] {
        let leadership = election.campaign(value).await.unwrap();
        leadership.proclaim(&format!("{value}2")).await.unwrap();
        expected.push(Some((value.to_owned(), leadership.term())));
        expected.push(Some((format!("{value}2"), leadership.term())));
        expected.push(None);
        leadership.resign().await.unwrap();
    }
    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.push(seen(
            &next_within(&mut changes, Duration::from_secs(10)).await,
        ));
    }
    assert_eq!(got, expected);
}

/// The election is the fair lock of the same name: a plain holder keeps
/// candidates waiting, and leads with no value (nobody is reported).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_election_is_the_fair_lock_of_its_name() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("shared").unwrap();
    let guard = c.fair_lock("shared").unwrap().lock().await.unwrap();
    assert!(
        election
            .try_campaign_for("v", Duration::from_millis(200))
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(election.leader().await.unwrap(), None);
    guard.unlock().await.unwrap();
    let leadership = election
        .try_campaign_for("v", Duration::ZERO)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        leadership.term().to_string(),
        common::lock_field(&server, "shared", "token").unwrap()
    );
    // While it leads, a plain lock of the name waits too.
    assert!(
        c.fair_lock("shared")
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
    leadership.resign().await.unwrap();

    // Elections are native only.
    let redisson = client(&server, Protocol::Redisson).await;
    assert!(matches!(
        redisson.election("shared"),
        Err(Error::InvalidConfig(_))
    ));
    // Names follow the lock's rules.
    assert!(matches!(c.election(""), Err(Error::InvalidName { .. })));
    // Values are bounded.
    let big = "x".repeat(fairlock::MAX_LEADER_VALUE_LEN + 1);
    assert!(matches!(
        election.campaign(&big).await,
        Err(Error::InvalidConfig(_))
    ));
}

/// Another program's data under the log: a typed error, nothing written,
/// and no leadership left (the lock is released).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_data_under_the_log_is_refused() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("bad").unwrap();
    let _: () = server.cmd(&["SET", &log_key("bad"), "app"]);
    assert!(matches!(
        election.leader().await,
        Err(Error::WrongType { .. })
    ));
    assert!(matches!(
        election.campaign("v").await,
        Err(Error::WrongType { .. })
    ));
    // The failed campaign resigns in the background: let it end before the
    // log changes under it (its resignation would otherwise find an empty
    // log and write there, ahead of the entry pushed below).
    c.flush().await;
    let app: String = server.cmd(&["GET", &log_key("bad")]);
    assert_eq!(app, "app");
    let _: () = server.cmd(&["DEL", &log_key("bad")]);
    let _: i64 = server.cmd(&["RPUSH", &log_key("bad"), "not an entry"]);
    assert!(matches!(
        election.leader().await,
        Err(Error::NotALock { .. })
    ));
    assert!(matches!(
        election.campaign("v").await,
        Err(Error::NotALock { .. })
    ));
    let log: Vec<String> = server.cmd(&["LRANGE", &log_key("bad"), "0", "-1"]);
    assert_eq!(log, vec!["not an entry".to_owned()]);
    c.flush().await;
    assert!(!support::is_held(&server, Protocol::Native, "bad"));
}

/// Cancelling a campaign leaves no candidate in line, and a dropped
/// leadership resigns (the log says so, the lock is free).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_campaigns_and_dropped_leaderships_leave_nothing() {
    let server = RedisServer::start();
    let a = client(&server, Protocol::Native).await;
    let b = client(&server, Protocol::Native).await;
    let leadership = a.election("cancel").unwrap().campaign("a").await.unwrap();
    let e = b.election("cancel").unwrap();
    let waiting = tokio::spawn(async move { e.campaign("b").await });
    until_queued(&server, "cancel", 1).await;
    waiting.abort();
    let _ = waiting.await;
    b.flush().await;
    assert_eq!(support::queue_len(&server, Protocol::Native, "cancel"), 0);

    let term = leadership.term();
    drop(leadership);
    a.flush().await;
    assert!(!support::is_held(&server, Protocol::Native, "cancel"));
    let head: Vec<String> = server.cmd(&["LRANGE", &log_key("cancel"), "0", "0"]);
    assert!(head[0].starts_with(&format!("{term}:2:r:")), "{head:?}");
    // The log expires on its own: at least a minute.
    let ttl: i64 = server.cmd(&["PTTL", &log_key("cancel")]);
    assert!(ttl > 55_000 && ttl <= 90_000, "{ttl}");
}

/// Shut down with a leadership alive: it resigns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_resigns() {
    let server = RedisServer::start();
    let a: LockClient = client(&server, Protocol::Native).await;
    let leadership = a.election("down").unwrap().campaign("a").await.unwrap();
    a.shutdown().await;
    assert!(!support::is_held(&server, Protocol::Native, "down"));
    drop(leadership);
}

/// The blocking API: the same succession, terms and changes; a dropped
/// leadership resigns before the drop returns.
#[test]
fn blocking_election() {
    let server = RedisServer::start();
    let connect = || {
        fairlock::blocking::LockClient::with_config(config(&server.url(), Protocol::Native))
            .unwrap()
    };
    let (a, b, watcher) = (connect(), connect(), connect());
    let election = watcher.election("blocking").unwrap();
    let mut changes = election.observe().unwrap();
    assert_eq!(changes.next().unwrap().unwrap(), None);

    let first = a.election("blocking").unwrap().campaign("a").unwrap();
    let e = b.election("blocking").unwrap();
    assert!(
        e.try_campaign_for("b", Duration::from_millis(100))
            .unwrap()
            .is_none()
    );
    let waiting = std::thread::spawn(move || e.campaign("b").unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(until_queued(&server, "blocking", 1));
    assert!(first.is_leader());
    let lost = first.lost();
    first.proclaim("a2").unwrap();
    let first_term = first.term();
    first.resign().unwrap();
    assert!(lost.wait_timeout(Duration::from_secs(5)).unwrap());
    let second = waiting.join().unwrap();
    assert!(second.term() > first_term);
    assert_eq!(election.leader().unwrap().unwrap().value, "b");
    drop(second);
    assert!(!support::is_held(&server, Protocol::Native, "blocking"));

    let mut got = Vec::new();
    while got.len() < 5 {
        let change = changes
            .next_timeout(Duration::from_secs(5))
            .unwrap()
            .expect("a change within 5 s");
        got.push(change.map(|l| l.value));
    }
    let s = |v: &str| Some(v.to_owned());
    assert_eq!(got, vec![s("a"), s("a2"), None, s("b"), None]);
    assert_eq!(
        changes.next_timeout(Duration::from_millis(50)).unwrap(),
        None
    );
}

/// Changes made between `observe()` and the first `next()` are returned,
/// from the state `observe()` read on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_before_the_first_next_are_returned() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("late").unwrap();
    let mut changes = election.observe().await.unwrap();
    let leadership = election.campaign("a").await.unwrap();
    let term = leadership.term();
    leadership.resign().await.unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(seen(
            &next_within(&mut changes, Duration::from_secs(5)).await,
        ));
    }
    assert_eq!(got, vec![None, Some(("a".to_owned(), term)), None]);
}

/// The log keeps the last 16 changes: an observer that missed more returns
/// those 16, in order, and nothing older.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_keeps_the_last_16_changes() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("many").unwrap();
    // Reads happen in observe() and in next(): none while the changes are made.
    let mut changes = election.observe().await.unwrap();
    let mut terms = Vec::new();
    for _ in 0..10 {
        let leadership = election.campaign("v").await.unwrap();
        terms.push(leadership.term());
        leadership.resign().await.unwrap();
    }
    let len: i64 = server.cmd(&["LLEN", &log_key("many")]);
    assert_eq!(len, 16);
    let mut expected = vec![None];
    for &term in &terms[2..] {
        expected.push(Some(("v".to_owned(), term)));
        expected.push(None);
    }
    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.push(seen(
            &next_within(&mut changes, Duration::from_secs(5)).await,
        ));
    }
    assert_eq!(got, expected);
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), changes.next())
            .await
            .is_err(),
        "nothing more"
    );
}

/// A hostile client pushes a log entry of a term the lock never granted and
/// publishes on the changes channel: an observer must not report a leader
/// the lock does not name (a typed error is fine), before or after the
/// leader writes over it (the leader is not refused: a server clock that
/// stepped back makes such a log too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_entry_of_an_ungranted_term_is_never_reported() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("forged").unwrap();
    let leadership = election.campaign("real").await.unwrap();
    let term = leadership.term();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(
        seen(&next_within(&mut changes, Duration::from_secs(5)).await),
        Some(("real".to_owned(), term))
    );
    // A term an hour of server microseconds ahead: no grant has made it.
    let forged = format!("{}:1:l:evil\tforged", term + 3_600_000_000);
    let _: i64 = server.cmd(&["LPUSH", &log_key("forged"), &forged]);
    let _: i64 = server.cmd(&["PUBLISH", "fairlock:{forged}:elect:changes", "x"]);
    match tokio::time::timeout(Duration::from_secs(3), changes.next()).await {
        Err(_) | Ok(Err(Error::NotALock { .. })) => {}
        Ok(other) => panic!("the observer reported {other:?}"),
    }
    assert!(matches!(
        election.leader().await,
        Err(Error::NotALock { .. })
    ));
    leadership.proclaim("real2").await.unwrap();
    match tokio::time::timeout(Duration::from_secs(3), changes.next()).await {
        Err(_) | Ok(Err(Error::NotALock { .. })) => {}
        Ok(other) => panic!("the observer reported {other:?}"),
    }
    assert!(matches!(
        election.leader().await,
        Err(Error::NotALock { .. })
    ));
    leadership.resign().await.ok();
}

/// A failover to a lagging replica, the promoted master's data simulated by
/// restoring the lock and the log as they were under an earlier term (its
/// leader since resigned): the observer, which showed a later term, must
/// not go back to the earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_never_goes_back_to_an_earlier_term() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("back").unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(
        next_within(&mut changes, Duration::from_secs(5)).await,
        None
    );
    let first = election.campaign("a").await.unwrap();
    let lock_key = "fairlock:{back}:lock";
    let lock: redis::Value = server.cmd(&["DUMP", lock_key]);
    let log: redis::Value = server.cmd(&["DUMP", &log_key("back")]);
    let first_term = first.term();
    first.resign().await.unwrap();
    let second = election.campaign("b").await.unwrap();
    let mut got = Vec::new();
    while got.len() < 3 {
        got.push(seen(
            &next_within(&mut changes, Duration::from_secs(5)).await,
        ));
    }
    assert_eq!(
        got,
        vec![
            Some(("a".to_owned(), first_term)),
            None,
            Some(("b".to_owned(), second.term()))
        ]
    );
    // The promoted replica's state: the first leader holds, its entry heads the log.
    let bytes = |v: redis::Value| match v {
        redis::Value::BulkString(b) => b,
        other => panic!("{other:?}"),
    };
    for (key, dump) in [(lock_key.to_owned(), lock), (log_key("back"), log)] {
        let _: () = redis::cmd("RESTORE")
            .arg(&key)
            .arg(20_000)
            .arg(bytes(dump))
            .arg("REPLACE")
            .query(&mut server.conn())
            .unwrap();
    }
    let _: i64 = server.cmd(&["PUBLISH", "fairlock:{back}:elect:changes", "x"]);
    let until = Instant::now() + Duration::from_millis(2500);
    while let Ok(change) = tokio::time::timeout_at(until.into(), changes.next()).await {
        if let Some(leader) = change.unwrap() {
            assert!(
                leader.term >= second.term(),
                "term {} shown after term {}",
                leader.term,
                second.term()
            );
        }
    }
    drop(second);
}

/// A hostile entry of a term between two real ones, pushed over the newest:
/// an observer that last saw the older term must not report the forged one
/// after the newer (a term going back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_entry_out_of_order_is_never_reported() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("order2").unwrap();
    let first = election.campaign("a").await.unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(
        seen(&next_within(&mut changes, Duration::from_secs(5)).await),
        Some(("a".to_owned(), first.term()))
    );
    let first_term = first.term();
    // No read between these: the observer waits for a message.
    first.resign().await.unwrap();
    let second = election.campaign("b").await.unwrap();
    assert!(second.term() > first_term + 1);
    let forged = format!("{}:5:l:evil\tforged", second.term() - 1);
    let _: i64 = server.cmd(&["LPUSH", &log_key("order2"), &forged]);
    let _: i64 = server.cmd(&["PUBLISH", "fairlock:{order2}:elect:changes", "x"]);
    let until = Instant::now() + Duration::from_millis(2500);
    while let Ok(change) = tokio::time::timeout_at(until.into(), changes.next()).await {
        match change {
            Ok(Some(leader)) => assert_ne!(leader.value, "forged", "{leader:?}"),
            Ok(None) | Err(Error::NotALock { .. }) => {}
            Err(other) => panic!("{other:?}"),
        }
    }
    drop(second);
}

/// The log loses a leader's entries while it leads (a failover to a replica
/// that got the grant but not the entry, or an eviction): `leader()` names
/// nobody until the leader's keep-alive, a third of the log's life later
/// (20 s here), publishes its value again; an observer that showed the
/// leader returns no change meanwhile (not nobody, then the term again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_lost_under_a_leader_is_published_again() {
    let server = RedisServer::start();
    let c = client_with(&server, Protocol::Native, |c| {
        c.lease(Duration::from_secs(1))
    })
    .await;
    let election = c.election("relost").unwrap();
    let leadership = election.campaign("a").await.unwrap();
    leadership.proclaim("a2").await.unwrap();
    let term = leadership.term();
    let mut changes = election.observe().await.unwrap();
    let current = Some(("a2".to_owned(), term));
    assert_eq!(
        seen(&next_within(&mut changes, Duration::from_secs(5)).await),
        current
    );
    let _: i64 = server.cmd(&["DEL", &log_key("relost")]);
    let lost_at = Instant::now();
    assert_eq!(election.leader().await.unwrap(), None);
    let back = async {
        while election.leader().await.unwrap().is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    tokio::select! {
        () = back => {}
        change = changes.next() => panic!("the observer returned {change:?}"),
        () = tokio::time::sleep(Duration::from_secs(25)) => panic!("not published again"),
    }
    assert!(
        lost_at.elapsed() <= Duration::from_secs(22),
        "{:?}",
        lost_at.elapsed()
    );
    assert_eq!(seen(&election.leader().await.unwrap()), current);
    // The value published again is the state shown: nothing to return.
    assert!(
        tokio::time::timeout(Duration::from_millis(1500), changes.next())
            .await
            .is_err()
    );
    assert!(leadership.is_leader());
    leadership.resign().await.unwrap();
}

/// Another program's entry longer than any the election writes (a label of
/// 128 bytes and a value of 64 KiB): refused by the read script before it
/// is sent, so a read costs a client at most 16 entries of that size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_longer_than_the_election_writes_is_refused() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("huge").unwrap();
    // The longest entry a leader can write is read back.
    let label = "l".repeat(fairlock::MAX_LABEL_LEN);
    let longest = client_with(&server, Protocol::Native, |c| c.label(&label)).await;
    let value = "v".repeat(fairlock::MAX_LEADER_VALUE_LEN);
    let leadership = longest
        .election("huge")
        .unwrap()
        .campaign(&value)
        .await
        .unwrap();
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.label.len(), leader.value.len()),
        (label.len(), value.len())
    );
    let term = leadership.term();
    leadership.resign().await.unwrap();
    // In order after the resignation, in a granted term: only its length is wrong.
    let huge = format!("{term}:3:l:x\t{}", "v".repeat(1 << 20));
    let _: i64 = server.cmd(&["LPUSH", &log_key("huge"), &huge]);
    assert!(matches!(
        election.leader().await,
        Err(Error::NotALock { .. })
    ));
}

/// A leader's hold force-unlocked, then taken again by the same owner (a
/// plain acquisition naming the leadership's owner): a new token, so the
/// deposed leadership's proclaim is refused, its `lost()` resolves, and
/// dropping it does not release the hold taken again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leadership_force_unlocked_and_retaken_by_its_owner_is_lost() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("retaken").unwrap();
    let leadership = election.campaign("a").await.unwrap();
    let leadership_owner = leadership.owner().to_string();
    let lost = leadership.lost();
    assert!(election.lock().force_unlock().await.unwrap());
    let retaken = election
        .lock()
        .acquire(fairlock::AcquireOptions::new().owner(leadership.owner().clone()))
        .await
        .unwrap()
        .expect("free after the force-unlock");
    assert!(retaken.token().unwrap() > leadership.term());
    assert!(leadership.proclaim("b").await.unwrap_err().is_lock_lost());
    tokio::time::timeout(Duration::from_secs(5), lost)
        .await
        .expect("the deposed leadership's lost() resolves");
    assert!(!leadership.is_leader());
    assert!(leadership.resign().await.unwrap_err().is_lock_lost());
    c.flush().await;
    assert!(retaken.is_held());
    assert!(support::is_held(&server, Protocol::Native, "retaken"));
    assert_eq!(
        common::native_holder(&server, "retaken"),
        Some(leadership_owner)
    );
    assert_eq!(election.leader().await.unwrap(), None);
    retaken.unlock().await.unwrap();
}

/// The leader's owner enters the lock again (a plain acquisition naming the
/// leadership's owner): the same term; releasing that re-entry leaves the
/// leadership whole (still leading, proclaims written), and resigning
/// releases the leadership's hold only (nobody leads; the re-entry holds
/// until released, then the next candidate leads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_by_the_leaders_owner_keeps_the_term() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("again").unwrap();
    let leadership = election.campaign("a").await.unwrap();
    let again = || async {
        election
            .lock()
            .acquire(fairlock::AcquireOptions::new().owner(leadership.owner().clone()))
            .await
            .unwrap()
            .expect("a re-entry")
    };
    let reentry = again().await;
    assert_eq!(reentry.token(), Some(leadership.term()));
    reentry.unlock().await.unwrap();
    assert!(leadership.is_leader());
    leadership.proclaim("a2").await.unwrap();
    assert_eq!(
        seen(&election.leader().await.unwrap()),
        Some(("a2".to_owned(), leadership.term()))
    );
    let reentry = again().await;
    let term = leadership.term();
    leadership.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
    assert!(reentry.is_held());
    let next = c.election("again").unwrap();
    let waiting = tokio::spawn(async move { next.campaign("b").await });
    until_queued(&server, "again", 1).await;
    reentry.unlock().await.unwrap();
    let successor = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the next candidate leads")
        .unwrap()
        .unwrap();
    assert!(successor.term() > term);
    successor.resign().await.unwrap();
}

/// A leadership ended with no message on the election's channel (the lock
/// force-unlocked, a 30 s lease far off): an observer sees nobody within
/// its re-read bound, 1 s (here within 2 s, on a loaded machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_sees_an_unannounced_end_within_a_second() {
    let server = RedisServer::start();
    let c = client(&server, Protocol::Native).await;
    let election = c.election("quiet").unwrap();
    let leadership = election.campaign("a").await.unwrap();
    let mut changes = election.observe().await.unwrap();
    assert_eq!(
        seen(&next_within(&mut changes, Duration::from_secs(5)).await),
        Some(("a".to_owned(), leadership.term()))
    );
    assert!(election.lock().force_unlock().await.unwrap());
    let ended = Instant::now();
    assert_eq!(
        next_within(&mut changes, Duration::from_secs(5)).await,
        None
    );
    assert!(
        ended.elapsed() < Duration::from_secs(2),
        "{:?}",
        ended.elapsed()
    );
    drop(leadership);
}

/// A leader whose renewals run on the server but whose replies come late
/// stops believing at its lease (`lost()`), while the server still names
/// it: a proclaim after `lost()` is refused (`LockLost`), not written as if
/// it still led.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaim_after_lost_is_refused() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let lease = Duration::from_millis(1000);
    let c = connect(
        config(&proxy.url(), Protocol::Native)
            .lease(lease)
            .response_timeout(Duration::from_millis(300)),
    )
    .await;
    let election = c.election("late").unwrap();
    let leadership = election.campaign("a").await.unwrap();
    proxy.delay_replies(Duration::from_secs(3));
    tokio::time::timeout(lease * 5, leadership.lost())
        .await
        .expect("lost() at the lease's end");
    assert!(!leadership.is_leader());
    proxy.delay_replies(Duration::ZERO);
    let result = leadership.proclaim("after lost").await;
    let log: Vec<String> = server.cmd(&["LRANGE", &log_key("late"), "0", "0"]);
    assert!(
        matches!(&result, Err(e) if e.is_lock_lost()),
        "{result:?}; the log: {log:?}; held: {}",
        support::is_held(&server, Protocol::Native, "late")
    );
    assert!(!log[0].contains("after lost"), "{log:?}");
    drop(leadership);
}
