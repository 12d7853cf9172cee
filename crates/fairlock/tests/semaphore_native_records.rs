//! The native semaphore's records when another program, an eviction or a
//! failover lost or wrote over them: meta lost while permits are held, a
//! waiter's line record lost or written over, a holder's weight written
//! over, stale meta after every hold expired, and malformed numbers in
//! every field. Each is refused, counted again from what is left, or not
//! trusted: never more permits out than the total, none lost.
//!
//! Waiters here try again only every 20 s (a third of a 60 s waiter ttl)
//! unless a test says otherwise (see `semaphore_native.rs`).

mod common;

use common::semaphore::{ask, client, granted, left_clean, queued};
use fairlock::{Error, LockClient, PermitLease, Protocol};
use fairlock_test_support as support;
use std::time::Duration;
use support::RedisServer;

/// How the line's head is admitted on stale meta.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admitted {
    /// By a waiter behind it giving up.
    GiveUp,
    /// By an operator's `force_release`.
    ForceRelease,
}

/// Meta lost while permits are held (evicted under `maxmemory`, or
/// deleted): the next call counts the holders' weights again from their
/// keys, and a holder counted so gives its permits back when it releases,
/// while another still holds (the holders set lives on). Before the fix the
/// recount stored `used` but no `w:ID` weights, so the release gave back 0
/// permits and they stayed taken as long as anybody held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_counted_again_after_meta_was_lost_gives_its_permits_back() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("amnesia", 2).unwrap();
    let a = sem.acquire(1).await.unwrap();
    let b = sem.acquire(1).await.unwrap();
    // As an eviction would: meta (the total, `used`, the weights) goes,
    // the holds stay.
    server.cmd::<()>(&["DEL", "fairlock:{amnesia}:sem:meta"]);
    assert!(
        sem.try_acquire(1).await.unwrap().is_none(),
        "both permits are held, counted from the hold keys"
    );
    a.release().await.unwrap();
    let c = sem
        .try_acquire(1)
        .await
        .unwrap()
        .expect("the permit a gave back is free");
    assert!(b.is_held() && c.is_held());
    assert!(sem.try_acquire(1).await.unwrap().is_none(), "2 of 2 held");
    b.release().await.unwrap();
    c.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 2);
    left_clean(&server, "amnesia");
}

/// Meta and one hold key both lost (evicted under `maxmemory`, or deleted)
/// while the holders set still says that hold's lease runs: since 05266ed
/// its holder is told no earlier than its last confirmed lease (its
/// renewals answer 'unsure', not 'gone'), and the set keeps counting it
/// until then. The `used` counted again from the hold keys must count it
/// too: otherwise its permits are handed out again while it still
/// believes it holds them (3 of 2 out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_whose_key_and_meta_were_lost_is_counted_while_it_is_believed() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.lease(Duration::from_secs(3))
    })
    .await;
    let sem = client.semaphore("forgotten", 2).unwrap();
    let a = sem.acquire(1).await.unwrap();
    server.cmd::<()>(&[
        "DEL",
        &format!("fairlock:{{forgotten}}:sem:hold:{}", a.ids()[0]),
        "fairlock:{forgotten}:sem:meta",
    ]);
    let b = sem.try_acquire(2).await.unwrap();
    let out = if a.is_held() { 1 } else { 0 } + b.as_ref().map_or(0, |_| 2);
    assert!(out <= 2, "{out} of 2 permits believed held");
    if let Some(b) = b {
        b.release().await.unwrap();
    }
    // Counted no longer than its lease: both permits come back.
    tokio::time::timeout(Duration::from_secs(5), a.lost())
        .await
        .expect("told by the end of its lease");
    let both = sem
        .try_acquire_for(2, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("both permits, once its lease ended");
    both.release().await.unwrap();
    a.release().await.expect_err("lost");
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 2);
}

/// A waiter whose record (with its weight) was lost (the records hash
/// evicted under `maxmemory`, or deleted) is not granted a guess: admitted
/// as a request of 1 it would believe it holds all it asked for while the
/// server counts 1, and others would take the rest. It is granted what it
/// asked for, once its next attempt wrote its record again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_record_was_lost_is_not_granted_a_guessed_weight() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let sem = client.semaphore("weightless", 3).unwrap();
    let a = sem.acquire(3).await.unwrap();
    let waiter = ask(&sem, 3);
    queued(&server, "weightless", 1, "a request of 3 queued").await;
    server.cmd::<()>(&["DEL", "fairlock:{weightless}:sem:waiters"]);
    a.release().await.unwrap();
    let b = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("admitted once its record is back")
        .unwrap()
        .unwrap();
    assert!(b.is_held());
    assert!(
        sem.try_acquire(1).await.unwrap().is_none(),
        "3 of 3 are held: {:?}",
        sem.inspect().await.unwrap()
    );
    b.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 3);
    left_clean(&server, "weightless");
}

/// A grant whose entry left the holders set before its waiter claimed it
/// (the set evicted under `maxmemory`, or deleted) is no hold: others may
/// have been admitted since (nothing is counted as held any more), so the
/// waiter's next call does not claim its orphaned key and believe it
/// holds beside them; it waits in line again. As the read-write lock's
/// acquisition. (A grant message read in time is believed without a call:
/// that hold is checked by its first renewal, which finds it gone, as
/// `a_hold_missing_from_the_holders_set_is_lost` in read_write_native.rs.
/// Here the message comes 2 s late, past half of the grant's 3 s, and the
/// waiter calls every second: every path is a call.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_missing_from_the_holders_set_is_not_claimed() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("orphan", 1).unwrap();
    let held = sem.acquire(1).await.unwrap();
    // The waiter hears of its grant 2 s late (through a proxy).
    let proxy = support::proxy::Proxy::start(server.port());
    let config = fairlock::ClientConfig::from_url(&proxy.url())
        .unwrap()
        .protocol(Protocol::Native)
        .waiter_ttl(Duration::from_secs(3));
    let slow = LockClient::with_config(config).await.unwrap();
    proxy.delay_pubsub(Duration::from_secs(2));
    let waiter = ask(&slow.semaphore("orphan", 1).unwrap(), 1);
    queued(&server, "orphan", 1, "the waiter queued").await;
    held.release().await.unwrap();
    // Granted, not claimed yet; then the set goes, as an eviction would.
    queued(&server, "orphan", 0, "the waiter was granted").await;
    server.cmd::<()>(&["DEL", "fairlock:{orphan}:sem:holders"]);
    let other = sem
        .try_acquire(1)
        .await
        .unwrap()
        .expect("nobody is registered as holding");
    tokio::time::sleep(Duration::from_secs(4)).await;
    if waiter.is_finished() {
        let outcome = waiter.await.unwrap();
        panic!("the waiter ended beside another holder of 1 of 1: {outcome:?}");
    }
    other.release().await.unwrap();
    let mine = granted(waiter, "after the other's release").await;
    mine.release().await.unwrap();
    client.flush().await;
    slow.flush().await;
    assert_eq!(sem.available().await.unwrap(), 1);
    left_clean(&server, "orphan");
}

/// A meta written again after it was lost (evicted, deleted) while permits
/// are held lives as long as every hold, plus its grace: the total is not
/// forgotten while a hold with a long lease lives (documented: it is
/// forgotten only once nobody held or waited for 20 s). Both ways of
/// writing it again: an acquisition that finds no room, and `set_permits`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_meta_written_again_outlives_the_holds() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("relived", 1).unwrap();
    let held = sem
        .acquire_with(1, None, PermitLease::Fixed(Duration::from_secs(300)))
        .await
        .unwrap()
        .unwrap();
    let hold_key = format!("fairlock:{{relived}}:sem:hold:{}", held.ids()[0]);
    for rewrite in ["an acquisition", "set_permits"] {
        server.cmd::<()>(&["DEL", "fairlock:{relived}:sem:meta"]);
        if rewrite == "set_permits" {
            sem.set_permits(1).await.unwrap();
        } else {
            assert!(sem.try_acquire(1).await.unwrap().is_none());
        }
        let meta: i64 = server.cmd(&["PTTL", "fairlock:{relived}:sem:meta"]);
        let hold: i64 = server.cmd(&["PTTL", &hold_key]);
        assert!(
            meta > hold + 15_000,
            "{rewrite}: meta lives {meta} ms, the hold {hold} ms"
        );
    }
    held.release().await.unwrap();
    left_clean(&server, "relived");
}

/// Meta outliving every hold (a waiter keeps it: its `used` and weights
/// stale, the hold keys and the holders set gone), then a script that
/// admits the head without a request's own call first (a give-up of a
/// waiter behind it, or a force-release): the admitted holder's weight is
/// kept in meta, and given back whole, whether it releases or its lease
/// ends beside another holder. Before the fix the stale meta's clean-up ran
/// after the admission had recorded the weight, and deleted it: its release
/// (or reclaim) gave back nothing, and a request that fits waited as long
/// as anybody held. (A weight meta lost is now counted again from the hold
/// keys when it is needed, see the next test: the record checked here is
/// what keeps that from being the rule.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_admitted_on_stale_meta_gives_its_permits_back() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let ends = [(Admitted::GiveUp, true), (Admitted::ForceRelease, false)];
    let rounds = ends
        .into_iter()
        .chain(ends.into_iter().map(|(how, released)| (how, !released)));
    for (round, (how, released)) in rounds.enumerate() {
        let name = format!("stale-{round}");
        let what = format!(
            "{how:?}, the admitted holder {}",
            if released { "released" } else { "died" }
        );
        let sem = client.semaphore(&name, 3).unwrap();
        // A holds every permit, and dies: its hold key and the holders
        // set expire together after its lease.
        let lease = Duration::from_millis(800);
        let dead = sem
            .acquire_with(3, None, PermitLease::Fixed(lease))
            .await
            .unwrap()
            .unwrap();
        std::mem::forget(dead);
        // H asks for 2 and queues; then it is not polled, so that its own
        // retry (due when A's lease ends) does not run first.
        let head = sem.acquire_with(2, None, PermitLease::Fixed(Duration::from_millis(1500)));
        let mut head = std::pin::pin!(head);
        tokio::select! {
            outcome = &mut head => panic!("{what}: H got in at once: {outcome:?}"),
            () = queued(&server, &name, 1, "H queued") => {}
        }
        match how {
            Admitted::GiveUp => {
                // X queues behind H and gives up once A's lease ended.
                let behind = sem.clone();
                let giving_up = tokio::spawn(async move {
                    behind.try_acquire_for(1, Duration::from_millis(1300)).await
                });
                queued(&server, &name, 2, "X queued behind H").await;
                let outcome = tokio::time::timeout(Duration::from_secs(5), giving_up)
                    .await
                    .expect("X's wait ends")
                    .unwrap()
                    .unwrap();
                assert!(outcome.is_none(), "{what}: X waited behind H");
            }
            Admitted::ForceRelease => {
                tokio::time::sleep(lease + Duration::from_millis(400)).await;
                assert_eq!(
                    sem.force_release().await.unwrap(),
                    0,
                    "{what}: A's lease ended"
                );
            }
        }
        queued(&server, &name, 0, "H admitted by that script").await;
        let head = tokio::time::timeout(Duration::from_secs(5), head)
            .await
            .unwrap_or_else(|_| panic!("{what}: H holds its grant"))
            .unwrap()
            .expect("granted");
        // Meta records its weight: what its reclaim gives back once its
        // key is gone (as below).
        let recorded: Option<String> = server.cmd(&[
            "HGET",
            &format!("fairlock:{{{name}}}:sem:meta"),
            &format!("w:{}", head.ids()[0]),
        ]);
        assert_eq!(recorded.as_deref(), Some("2"), "{what}: H's weight in meta");
        let beside = sem.try_acquire(1).await.unwrap().expect("1 of 3 is free");
        if released {
            head.release().await.unwrap();
        } else {
            // H dies too; beside it the holders set lives on, and H is
            // reclaimed from it once its lease ended.
            std::mem::forget(head);
            tokio::time::sleep(Duration::from_millis(1800)).await;
        }
        let two = sem
            .try_acquire_for(2, Duration::from_secs(3))
            .await
            .unwrap()
            .unwrap_or_else(|| {
                panic!(
                    "{what}: H's 2 permits came back: {:?}",
                    server
                        .cmd::<Vec<String>>(&["HGETALL", &format!("fairlock:{{{name}}}:sem:meta")])
                )
            });
        assert!(beside.is_held() && two.is_held());
        two.release().await.unwrap();
        beside.release().await.unwrap();
        client.flush().await;
        assert_eq!(sem.available().await.unwrap(), 3);
        left_clean(&server, &name);
    }
}

/// A holder's weight in meta (`w:ID`) overwritten by another program with
/// something that is not a weight (`abc`, `0`): its release gives back the
/// weight its own hold key records (read and checked before any write), not
/// nothing; and a holder whose key is gone when it is reclaimed has its
/// weight counted again from the hold keys. Before the fix both gave back
/// 0 permits, and they stayed taken as long as anybody held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weight_overwritten_in_meta_is_not_read_as_nothing() {
    let server = RedisServer::start();
    let client = client(&server).await;
    for (round, junk) in ["abc", "0", "-2"].into_iter().enumerate() {
        for released in [true, false] {
            let name = format!("junk-{round}-{released}");
            let meta = format!("fairlock:{{{name}}}:sem:meta");
            let sem = client.semaphore(&name, 3).unwrap();
            let beside = sem.acquire(1).await.unwrap();
            let lease = Duration::from_millis(800);
            let two = sem
                .acquire_with(2, None, PermitLease::Fixed(lease))
                .await
                .unwrap()
                .unwrap();
            let field = format!("w:{}", two.ids()[0]);
            server.cmd::<()>(&["HSET", &meta, &field, junk]);
            if released {
                two.release().await.unwrap();
            } else {
                std::mem::forget(two);
                tokio::time::sleep(lease + Duration::from_millis(300)).await;
            }
            let again = sem
                .try_acquire_for(2, Duration::from_secs(3))
                .await
                .unwrap()
                .unwrap_or_else(|| {
                    panic!(
                        "{junk:?}, released {released}: the 2 permits came back: {:?}",
                        server.cmd::<Vec<String>>(&["HGETALL", &meta])
                    )
                });
            assert!(
                sem.try_acquire(1).await.unwrap().is_none(),
                "3 of 3 are held"
            );
            again.release().await.unwrap();
            beside.release().await.unwrap();
            client.flush().await;
            assert_eq!(sem.available().await.unwrap(), 3);
            left_clean(&server, &name);
        }
    }
}

/// A waiter's line record whose weight another program wrote over (`0`,
/// or something that is not a number) is a lost record, as one that is
/// gone: the waiter is not admitted with it (with a weight of 0 it would
/// believe it holds a permit nobody counts, and another request would take
/// the only one), and it gets in once its next attempt wrote its record
/// again. Before the fix a weight of 0 was admitted (two holders of a
/// semaphore of 1), and a malformed one kept the head waiting for good.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_record_without_a_weight_of_at_least_1_is_a_lost_record() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    for (round, weight) in ["0", "00", "x"].into_iter().enumerate() {
        let name = format!("zero-{round}");
        let records = format!("fairlock:{{{name}}}:sem:waiters");
        let sem = client.semaphore(&name, 1).unwrap();
        let held = sem.acquire(1).await.unwrap();
        let waiter = ask(&sem, 1);
        queued(&server, &name, 1, "the request of 1 queued").await;
        let line: Vec<String> = server.cmd(&[
            "ZRANGE",
            &format!("fairlock:{{{name}}}:sem:line"),
            "0",
            "-1",
        ]);
        let record: String = server.cmd(&["HGET", &records, &line[0]]);
        let forged = with_weight(&record, weight);
        assert_eq!(with_weight(&record, "1"), record, "a record of weight 1");
        server.cmd::<()>(&["HSET", &records, &line[0], &forged]);
        held.release().await.unwrap();
        let other = sem.try_acquire(1).await.unwrap();
        let admitted = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("weight {weight:?}: admitted once its record is back"))
            .unwrap()
            .unwrap();
        assert!(
            other.is_none(),
            "weight {weight:?}: another request took the only permit beside the waiter: {:?}",
            sem.inspect().await.unwrap()
        );
        assert!(admitted.is_held());
        assert!(
            sem.try_acquire(1).await.unwrap().is_none(),
            "weight {weight:?}: 1 of 1 is held"
        );
        admitted.release().await.unwrap();
        client.flush().await;
        assert_eq!(sem.available().await.unwrap(), 1);
        left_clean(&server, &name);
    }
}

// ---- Adversarial review of the native semaphore's safety fixes (issue 33,
// items 1, 3 and 4): records written over by another program, meta lost
// beside a `set_permits`, a force-release's count.

/// Write over the line record of the waiter at `index` of the line of
/// `name`, replacing its weight with `weight`. The waiter's next attempt
/// writes its own record again: a test that releases after this counts on
/// no refresh in between, so its waiters refresh every 10 s (a waiter ttl
/// of 30 s), not every second (a refresh between the two, under load, gave
/// the record back before the release read it).
fn forge_record(server: &RedisServer, name: &str, index: usize, weight: &str) {
    let records = format!("fairlock:{{{name}}}:sem:waiters");
    let line: Vec<String> = server.cmd(&[
        "ZRANGE",
        &format!("fairlock:{{{name}}}:sem:line"),
        "0",
        "-1",
    ]);
    let record: String = server.cmd(&["HGET", &records, &line[index]]);
    server.cmd::<()>(&[
        "HSET",
        &records,
        &line[index],
        &with_weight(&record, weight),
    ]);
}

/// A waiter's line record (`DEADLINE:LEASE:TTL:NONCE:WEIGHT:LABEL`) with
/// `weight` in place of its own.
fn with_weight(record: &str, weight: &str) -> String {
    let fields: Vec<&str> = record.splitn(6, ':').collect();
    let [deadline, lease, ttl, nonce, _, label] = fields[..] else {
        panic!("a record with a weight: {record}");
    };
    format!("{deadline}:{lease}:{ttl}:{nonce}:{weight}:{label}")
}

/// A waiter's line record written over with a smaller weight that is still
/// a weight (`1` for a request of 3): the admission grants the record's
/// weight, but its grant message is signed over that weight, so the waiter
/// (which asked for 3) does not trust it; its next attempt finds the hold
/// weighing 1 and raises it to 3, which fits. Before the fix the waiter
/// held "3 permits" at once while meta counted 1, and another request took
/// 2 more: 5 of 3 out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_record_written_over_with_a_smaller_weight_gives_out_no_more_than_the_total() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(30))
    })
    .await;
    let sem = client.semaphore("lowered", 3).unwrap();
    let all = sem.acquire(3).await.unwrap();
    let waiter = ask(&sem, 3);
    queued(&server, "lowered", 1, "the request of 3 queued").await;
    forge_record(&server, "lowered", 0, "1");
    all.release().await.unwrap();
    // Whenever it gets in (at once by the grant, or after its next attempt
    // wrote its record again), the 3 permits it believes it holds are the
    // semaphore's 3.
    let three = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the request of 3 admitted")
        .unwrap()
        .unwrap();
    let other = sem.try_acquire(2).await.unwrap();
    let out = if three.is_held() { 3 } else { 0 } + other.as_ref().map_or(0, |_| 2);
    assert!(
        out <= 3,
        "{out} of 3 permits believed held: {:?}",
        server.cmd::<Vec<String>>(&["HGETALL", "fairlock:{lowered}:sem:meta"])
    );
}

/// A waiter's line record written over with a weight above the total: the
/// waiter keeps its place at the head, nobody passes it, and its next
/// attempt writes its record again. (Before the fix the admission dropped
/// it from the line, told 'refused', and its next attempt queued it at the
/// back: a request that arrived later was served first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_record_written_over_above_the_total_keeps_the_waiters_place() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(30))
    })
    .await;
    let sem = client.semaphore("place", 2).unwrap();
    let all = sem.acquire(2).await.unwrap();
    let first = ask(&sem, 2);
    queued(&server, "place", 1, "the first request of 2 queued").await;
    let second = ask(&sem, 2);
    queued(&server, "place", 2, "the second request of 2 queued").await;
    forge_record(&server, "place", 0, "5");
    all.release().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !first.is_finished() && !second.is_finished() {
        assert!(tokio::time::Instant::now() < deadline, "nobody served");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !second.is_finished(),
        "the second request was served before the first: {:?}",
        sem.inspect().await.unwrap()
    );
    let first = granted(first, "the first request").await;
    first.release().await.unwrap();
    let second = granted(second, "the second request, after the first").await;
    second.release().await.unwrap();
}

/// A lowered record's grant that cannot be raised: a request of 3 whose
/// record says 1 is admitted at 1 together with the request of 2 behind it
/// (3 of 3 counted); the first waiter's attempt finds its hold weighing 1
/// and 2 more do not fit, so it gives the 1 back and goes back to the head
/// of the line, in front of a request of 1 that came later: it is served
/// next, and the permits believed held never pass 3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_grant_that_cannot_be_raised_goes_back_to_the_head_of_the_line() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(30))
    })
    .await;
    let sem = client.semaphore("requeued", 3).unwrap();
    let all = sem.acquire(3).await.unwrap();
    let first = ask(&sem, 3);
    queued(&server, "requeued", 1, "the request of 3 queued").await;
    let second = ask(&sem, 2);
    queued(&server, "requeued", 2, "the request of 2 queued").await;
    forge_record(&server, "requeued", 0, "1");
    all.release().await.unwrap();
    let second = granted(
        second,
        "the request of 2, admitted beside the lowered record",
    )
    .await;
    // The first request's attempt gave its grant of 1 back and queued it
    // again, at the head.
    queued(&server, "requeued", 1, "the request of 3 back in line").await;
    assert!(!first.is_finished(), "3 + 2 permits believed held of 3");
    let third = ask(&sem, 1);
    queued(&server, "requeued", 2, "a request of 1 behind it").await;
    let line: Vec<String> = server.cmd(&["ZRANGE", "fairlock:{requeued}:sem:line", "0", "-1"]);
    second.release().await.unwrap();
    let first = granted(first, "the request of 3, first in line").await;
    assert!(
        !third.is_finished(),
        "the later request of 1 passed the head: line {line:?}"
    );
    first.release().await.unwrap();
    granted(third, "the request of 1, last")
        .await
        .release()
        .await
        .unwrap();
    left_clean(&server, "requeued");
}

/// Meta and a live hold's key both lost (evicted), then `set_permits`: the
/// `used` it counts again from the hold keys must count the hold whose
/// lease runs (its holder still believes in it) as the whole total, as an
/// acquisition's recount does
/// (`a_hold_whose_key_and_meta_were_lost_is_counted_while_it_is_believed`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_permits_on_lost_meta_counts_a_hold_whose_key_was_lost() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.lease(Duration::from_secs(3))
    })
    .await;
    let sem = client.semaphore("reset", 1).unwrap();
    let a = sem.acquire(1).await.unwrap();
    server.cmd::<()>(&[
        "DEL",
        &format!("fairlock:{{reset}}:sem:hold:{}", a.ids()[0]),
        "fairlock:{reset}:sem:meta",
    ]);
    sem.set_permits(1).await.unwrap();
    let b = sem.try_acquire(1).await.unwrap();
    let out = if a.is_held() { 1 } else { 0 } + b.as_ref().map_or(0, |_| 1);
    assert!(
        out <= 1,
        "{out} of 1 permit believed held: {:?}",
        server.cmd::<Vec<String>>(&["HGETALL", "fairlock:{reset}:sem:meta"])
    );
    if let Some(b) = b {
        b.release().await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(5), a.lost())
        .await
        .expect("told by the end of its lease");
    let one = sem
        .try_acquire_for(1, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the permit, once its lease ended");
    one.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 1);
}

/// `force_release` returns the permits given back, "an acquisition of `n`
/// counts `n`": also a hold whose key is gone while its lease runs and
/// whose weight in meta was written over (the script counts `used` again
/// then; what it drops is what `used` loses).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_counts_a_hold_whose_key_and_weight_were_lost() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("counted", 3).unwrap();
    let two = sem
        .acquire_with(2, None, PermitLease::Fixed(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap();
    let one = sem.acquire(1).await.unwrap();
    let id = two.ids()[0].clone();
    server.cmd::<()>(&[
        "HSET",
        "fairlock:{counted}:sem:meta",
        &format!("w:{id}"),
        "abc",
    ]);
    server.cmd::<()>(&["DEL", &format!("fairlock:{{counted}}:sem:hold:{id}")]);
    assert_eq!(
        sem.force_release().await.unwrap(),
        3,
        "2 + 1 permits given back"
    );
    assert_eq!(sem.available().await.unwrap(), 3);
    drop((two, one));
    client.flush().await;
}

/// Values another program may write that are not decimal integers (a
/// space, an exponent, hex, empty, a sign, a fraction, too many digits) in
/// a hold key's weight, meta's `capacity`/`used`/`token`: every call
/// answers `NotALock` and writes nothing; in a holder's meta weight and a
/// waiter's record: not read as a weight (the release gives back the
/// key's; the waiter waits for its own record).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_numbers_anywhere_are_refused_or_not_trusted() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(3))
    })
    .await;
    let junk = [
        " 2",
        "1e3",
        "0x10",
        "",
        "-1",
        "1.5",
        "99999999999999999999",
        "2 ",
    ];
    for (round, value) in junk.into_iter().enumerate() {
        for field in ["capacity", "used", "token"] {
            let name = format!("meta-{round}-{field}");
            let meta = format!("fairlock:{{{name}}}:sem:meta");
            let sem = client.semaphore(&name, 2).unwrap();
            let held = sem.acquire(1).await.unwrap();
            server.cmd::<()>(&["HSET", &meta, field, value]);
            let before: Vec<String> = server.cmd(&["HGETALL", &meta]);
            let what = format!("{field} = {value:?}");
            for outcome in [
                sem.try_acquire(1).await.map(|_| ()),
                sem.force_release().await.map(|_| ()),
                sem.set_permits(3).await,
            ] {
                assert!(
                    matches!(outcome, Err(Error::NotALock { .. })),
                    "{what}: {outcome:?}"
                );
            }
            if field == "capacity" {
                // (`available` counts the live holds, not `used`.)
                assert!(
                    matches!(sem.available().await, Err(Error::NotALock { .. })),
                    "{what}: available"
                );
            }
            if field == "capacity" || field == "used" {
                let released = held.release().await;
                assert!(
                    matches!(released, Err(Error::NotALock { .. })),
                    "{what}: {released:?}"
                );
            } else {
                drop(held);
            }
            let after: Vec<String> = server.cmd(&["HGETALL", &meta]);
            assert_eq!(before, after, "{what}: meta unchanged");
            server.cmd::<()>(&["DEL", &meta]);
        }
        // A hold key's weight.
        let name = format!("hold-{round}");
        let sem = client.semaphore(&name, 2).unwrap();
        let held = sem.acquire(1).await.unwrap();
        let key = format!("fairlock:{{{name}}}:sem:hold:{}", held.ids()[0]);
        server.cmd::<()>(&["HSET", &key, "weight", value]);
        let released = held.release().await;
        assert!(
            matches!(released, Err(Error::NotALock { .. })),
            "hold weight {value:?}: {released:?}"
        );
        assert!(
            matches!(sem.force_release().await, Err(Error::NotALock { .. })),
            "hold weight {value:?}: force_release"
        );
        let weight: String = server.cmd(&["HGET", &key, "weight"]);
        assert_eq!(weight, value, "nothing written");
        server.cmd::<()>(&["DEL", &key]);
        // A holder's weight in meta: its release gives back its key's.
        let name = format!("w-{round}");
        let meta = format!("fairlock:{{{name}}}:sem:meta");
        let sem = client.semaphore(&name, 2).unwrap();
        let held = sem.acquire(2).await.unwrap();
        server.cmd::<()>(&["HSET", &meta, &format!("w:{}", held.ids()[0]), value]);
        let beside = sem.acquire(1);
        held.release().await.unwrap();
        let beside = tokio::time::timeout(Duration::from_secs(5), beside)
            .await
            .expect("its 2 permits came back")
            .unwrap();
        assert_eq!(sem.available().await.unwrap(), 1, "meta w {value:?}");
        // A waiter's line record.
        let waiter = ask(&sem, 2);
        queued(&server, &name, 1, "a request of 2 queued").await;
        forge_record(&server, &name, 0, value);
        beside.release().await.unwrap();
        let two = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("record w{value:?}: admitted once its record is back"))
            .unwrap()
            .unwrap();
        assert!(sem.try_acquire(1).await.unwrap().is_none(), "2 of 2 held");
        two.release().await.unwrap();
        client.flush().await;
        assert_eq!(sem.available().await.unwrap(), 2);
        left_clean(&server, &name);
    }
    // A token that leaves no next one below 2^53 (2^53 - 1): refused as
    // well, never drawn from (the next grant would write 2^53, which every
    // script then refuses).
    let name = "meta-exhausted-token";
    let meta = format!("fairlock:{{{name}}}:sem:meta");
    let sem = client.semaphore(name, 2).unwrap();
    let held = sem.acquire(1).await.unwrap();
    server.cmd::<()>(&["HSET", &meta, "token", "9007199254740991"]);
    let before: Vec<String> = server.cmd(&["HGETALL", &meta]);
    for outcome in [
        sem.try_acquire(1).await.map(|_| ()),
        sem.force_release().await.map(|_| ()),
        sem.set_permits(3).await,
    ] {
        assert!(
            matches!(outcome, Err(Error::NotALock { .. })),
            "token 2^53 - 1: {outcome:?}"
        );
    }
    let after: Vec<String> = server.cmd(&["HGETALL", &meta]);
    assert_eq!(before, after, "token 2^53 - 1: meta unchanged");
    drop(held);
}

// ---- Adversarial review of the line records written over with another
// weight (issue 33's newest fix: grants signed over their weight, the claim
// correcting the hold, a record above the total keeping its place), where
// it meets `set_permits`, cancellation and a force-release.

/// `set_permits` lowers the total beneath the head's request while a
/// smaller request behind it would fit: the head is refused and leaves the
/// line with `InvalidConfig`, and the request behind it gets the free
/// permit at once, as the line's head that now fits (the engine's invariant
/// 3: after every script the first live waiter does not fit). Waiters here
/// poll every 20 s: a grant later than a few seconds waited for its poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_behind_one_refused_by_a_lowered_total_is_admitted_at_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let sem = client.semaphore("lowered-total", 3).unwrap();
    let one = sem.acquire(1).await.unwrap();
    let big = ask(&sem, 3);
    queued(&server, "lowered-total", 1, "the request of 3 queued").await;
    let small = ask(&sem, 1);
    queued(&server, "lowered-total", 2, "a request of 1 behind it").await;
    sem.set_permits(2).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), big)
        .await
        .expect("the request of 3 is refused at once")
        .unwrap()
        .expect_err("3 permits of 2");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    let small = tokio::time::timeout(Duration::from_secs(3), small)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the request of 1 (1 + 1 of 2 permits: it fits) still waits after its head \
                 left; line {:?}, meta {:?}",
                server.cmd::<Vec<String>>(&[
                    "ZRANGE",
                    "fairlock:{lowered-total}:sem:line",
                    "0",
                    "-1"
                ]),
                server.cmd::<Vec<String>>(&["HGETALL", "fairlock:{lowered-total}:sem:meta"]),
            )
        })
        .unwrap()
        .unwrap();
    small.release().await.unwrap();
    one.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 2);
    left_clean(&server, "lowered-total");
}

/// A line record written over with a smaller weight (`1` for a request of
/// 3) is granted by a `set_permits` that lowers the total beneath the
/// request (1 + 1 of 2 fit): the waiter does not trust the grant, and its
/// attempt finds its request above the new total. It must leave the line
/// with `InvalidConfig` then, and the request of 1 behind it get the free
/// permit, as when the total is lowered beneath a waiter that was not
/// granted (`set_permits_up_and_down`). Waiters here poll every 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lowered_grant_whose_request_is_above_a_lowered_total_is_refused_at_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "lowered-both";
    let sem = client.semaphore(name, 3).unwrap();
    let one = sem.acquire(1).await.unwrap();
    let big = ask(&sem, 3);
    queued(&server, name, 1, "the request of 3 queued").await;
    let small = ask(&sem, 1);
    queued(&server, name, 2, "a request of 1 behind it").await;
    forge_record(&server, name, 0, "1");
    sem.set_permits(2).await.unwrap();
    let line =
        || server.cmd::<Vec<String>>(&["ZRANGE", "fairlock:{lowered-both}:sem:line", "0", "-1"]);
    let err = tokio::time::timeout(Duration::from_secs(3), big)
        .await
        .unwrap_or_else(|_| panic!("the request of 3 of 2 still waits: line {:?}", line()))
        .unwrap()
        .expect_err("3 permits of 2");
    assert!(matches!(err, Error::InvalidConfig(_)), "{err:?}");
    let small = tokio::time::timeout(Duration::from_secs(3), small)
        .await
        .unwrap_or_else(|_| panic!("the request of 1 still waits: line {:?}", line()))
        .unwrap()
        .unwrap();
    assert_eq!(sem.available().await.unwrap(), 0, "1 + 1 of 2 held");
    small.release().await.unwrap();
    one.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 2);
    left_clean(&server, name);
}

/// After a correction, everything reads the corrected hold: a request of
/// 3 granted at a record lowered to 1 (beside a request of 2) gives its 1
/// back and goes back to the head; once admitted at 3, `inspect` and
/// `available()` count its 3, its token is above every token drawn before
/// (the grant it gave back, the request of 2's), and its release gives
/// back 3. A raised hold (its record lowered, then 2 more taken at its
/// claim) counts 3 and gives back 3 too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrected_hold_is_counted_shown_and_given_back_at_its_request() {
    let server = RedisServer::start();
    let client = support::client_with(&server, Protocol::Native, |c| {
        c.waiter_ttl(Duration::from_secs(30))
    })
    .await;
    let name = "corrected";
    let sem = client.semaphore(name, 3).unwrap();
    let all = sem.acquire(3).await.unwrap();
    let before = all.token().unwrap();
    let first = ask(&sem, 3);
    queued(&server, name, 1, "the request of 3 queued").await;
    let second = ask(&sem, 2);
    queued(&server, name, 2, "the request of 2 queued").await;
    forge_record(&server, name, 0, "1");
    all.release().await.unwrap();
    let second = granted(second, "the request of 2").await;
    queued(&server, name, 1, "the request of 3 back in line").await;
    let token: String = server.cmd(&["HGET", "fairlock:{corrected}:sem:meta", "token"]);
    let drawn: u64 = token.parse().unwrap();
    // Drawn in line order: the grant given back, then the request of 2's.
    assert_eq!(Some(drawn), second.token());
    assert!(drawn > before);
    assert_eq!(
        sem.available().await.unwrap(),
        1,
        "the request of 2 holds 2 of 3"
    );
    second.release().await.unwrap();
    let first = granted(first, "the request of 3").await;
    assert!(
        first.token().unwrap() > drawn,
        "token {:?} not above the {drawn} drawn for the grant it gave back",
        first.token()
    );
    let info = sem.inspect().await.unwrap();
    assert_eq!(info.available, 0, "{info:?}");
    assert_eq!(info.taken.len(), 1, "{info:?}");
    assert_eq!(info.taken[0].permits, 3, "{info:?}");
    first.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 3, "the 3 given back");

    // Raised at its claim.
    let all = sem.acquire(3).await.unwrap();
    let raised = ask(&sem, 3);
    queued(&server, name, 1, "a request of 3 queued").await;
    forge_record(&server, name, 0, "1");
    all.release().await.unwrap();
    let raised = granted(raised, "the request of 3, raised").await;
    let info = sem.inspect().await.unwrap();
    assert_eq!(info.available, 0, "{info:?}");
    assert_eq!(info.taken[0].permits, 3, "{info:?}");
    let weight: String = server.cmd(&[
        "HGET",
        "fairlock:{corrected}:sem:meta",
        &format!("w:{}", raised.ids()[0]),
    ]);
    assert_eq!(weight, "3", "meta records the raised weight");
    raised.release().await.unwrap();
    assert_eq!(sem.available().await.unwrap(), 3, "the 3 given back");
    client.flush().await;
    left_clean(&server, name);
}

/// A waiter cancelled once its lowered grant was given back and it went
/// back to the head of the line: it leaves the line (no ghost at the head),
/// and the request behind it that fits is admitted at once. Waiters here
/// poll every 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cancelled_back_at_the_head_lets_the_line_in() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "requeued-cancel";
    let sem = client.semaphore(name, 3).unwrap();
    let all = sem.acquire(3).await.unwrap();
    let first = ask(&sem, 3);
    queued(&server, name, 1, "the request of 3 queued").await;
    let second = ask(&sem, 2);
    queued(&server, name, 2, "the request of 2 queued").await;
    forge_record(&server, name, 0, "1");
    all.release().await.unwrap();
    let second = granted(second, "the request of 2").await;
    queued(&server, name, 1, "the request of 3 back in line").await;
    let third = ask(&sem, 1);
    queued(&server, name, 2, "a request of 1 behind it").await;
    first.abort();
    let third = tokio::time::timeout(Duration::from_secs(3), third)
        .await
        .expect("the request of 1 admitted once the head left")
        .unwrap()
        .unwrap();
    queued(&server, name, 0, "nobody left in line").await;
    assert_eq!(sem.available().await.unwrap(), 0, "2 + 1 of 3");
    second.release().await.unwrap();
    third.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 3);
    left_clean(&server, name);
}

/// One call of the semaphore's acquire script as the library sends it, as
/// holder `id` (secret `nonce`) asking for `weight` of 100 permits for
/// `lease` ms, waiting in line (`queue`) or not; its reply.
fn raw_acquire(
    server: &RedisServer,
    name: &str,
    id: &str,
    nonce: &str,
    lease: &str,
    weight: &str,
    queue: bool,
) -> Vec<i64> {
    let channel = format!("fairlock:{{{name}}}:sem:wake");
    let mode = if queue { "queue" } else { "once" };
    let reply = common::scripts::eval(
        server,
        common::scripts::NEW_SEM_ACQUIRE,
        &common::scripts::sem_keys(name),
        &[
            id, lease, "60000", &channel, mode, "0", nonce, "raw", weight, "100", "",
        ],
    )
    .expect("the acquire script ran");
    redis::from_redis_value(reply).unwrap()
}

/// The semaphore's release script as the library sends it, for holder
/// `id`'s hold under `token`; its reply.
fn raw_release(server: &RedisServer, name: &str, id: &str, token: i64) -> i64 {
    let mut keys = common::scripts::sem_keys(name);
    keys.push(format!("fairlock:{{{name}}}:sem:release:{id}-{token}"));
    let channel = format!("fairlock:{{{name}}}:sem:wake");
    let token = token.to_string();
    let reply = common::scripts::eval(
        server,
        common::scripts::NEW_SEM_RELEASE,
        &keys,
        &[id, "60000", &channel, "10000", &token, ""],
    )
    .expect("the release script ran");
    redis::from_redis_value(reply).unwrap()
}

/// A waiter granted permits it did not claim in time (paused past the
/// grant), whose entry in the holders set outlived its hold key, is granted
/// again under the same id by its next call: its old entry's weight is
/// given back first, so the permits are counted once. The entry outlives
/// the key unreclaimed when more than a reclaim's 64 holders whose leases
/// ended before it are due in the same call (here 64 crashed holders), or
/// when the key was evicted. Before the fix the second grant wrote over the
/// entry and added its weight again: the release gave one weight back, and
/// the other stayed taken for as long as anybody held (2 of 100 permits
/// lost, each such grant losing more).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_granted_again_under_its_own_id_is_counted_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "regrant";
    let sem = client.semaphore(name, 100).unwrap();
    // B holds 34 throughout (its watchdog renews; no script reclaims).
    let b = sem.acquire(34).await.unwrap();
    // 64 holders of 1 that crash: their leases end before W's grant does.
    for i in 0..64 {
        let reply = raw_acquire(&server, name, &format!("dead:{i}"), "n", "2000", "1", false);
        assert_eq!(reply[0], 1, "dead:{i} holds");
    }
    // F holds the last 2; W queues for 2 behind it and is granted them by
    // F's release, for min(its lease, its waiter ttl) = 3 s, unclaimed.
    let f = raw_acquire(&server, name, "f", "nf", "30000", "2", false);
    assert_eq!(f[0], 1, "F holds");
    let w = raw_acquire(&server, name, "w", "nw", "3000", "2", true);
    assert_eq!(w[0], 3, "W queued");
    assert_eq!(raw_release(&server, name, "f", f[1]), 1);
    let hold = format!("fairlock:{{{name}}}:sem:hold:w");
    assert_eq!(server.cmd::<i64>(&["EXISTS", &hold]), 1, "W was granted");
    // W is paused past its grant: its key expires, unclaimed, as the dead
    // holders' did before it.
    support::eventually(Duration::from_secs(10), "W's grant expired", || {
        server.cmd::<i64>(&["EXISTS", &hold]) == 0
    })
    .await;
    // W's next call: granted again (2 of the 66 free).
    let again = raw_acquire(&server, name, "w", "nw", "3000", "2", true);
    assert_eq!(again[0], 1, "W granted again: {again:?}");
    assert_eq!(raw_release(&server, name, "w", again[1]), 1);
    let meta = format!("fairlock:{{{name}}}:sem:meta");
    let used: Option<String> = server.cmd(&["HGET", &meta, "used"]);
    assert_eq!(used.as_deref(), Some("34"), "only B's 34 are counted");
    let rest = sem
        .try_acquire(66)
        .await
        .unwrap()
        .expect("the 66 permits beside B's 34 are free");
    assert!(b.is_held() && rest.is_held());
    rest.release().await.unwrap();
    b.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 100);
}

/// The same with the waiter's hold key evicted (or deleted) while its
/// entry in the holders set still says its grant runs: its next call is
/// not granted before that entry is due (it counts until then), and then
/// its permits are counted once. Before the fix the call was granted at
/// once, over the entry: 2 permits counted twice, one weight lost for as
/// long as anybody held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_granted_key_was_evicted_is_counted_once() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "evicted-grant";
    let sem = client.semaphore(name, 100).unwrap();
    let b = sem.acquire(34).await.unwrap();
    let f = raw_acquire(&server, name, "f", "nf", "30000", "66", false);
    assert_eq!(f[0], 1, "F holds the rest");
    let w = raw_acquire(&server, name, "w", "nw", "1500", "2", true);
    assert_eq!(w[0], 3, "W queued");
    assert_eq!(raw_release(&server, name, "f", f[1]), 1);
    let hold = format!("fairlock:{{{name}}}:sem:hold:w");
    let meta = format!("fairlock:{{{name}}}:sem:meta");
    assert_eq!(server.cmd::<i64>(&["DEL", &hold]), 1, "W was granted");
    let early = raw_acquire(&server, name, "w", "nw", "1500", "2", true);
    assert_eq!(early[0], 3, "W waits while its old entry counts: {early:?}");
    let used: Option<String> = server.cmd(&["HGET", &meta, "used"]);
    assert_eq!(used.as_deref(), Some("36"), "B's 34 and W's old 2");
    // Another's call admits the line: W, at its head, is not granted
    // either, and nobody passes it.
    let other = raw_acquire(&server, name, "x", "nx", "1500", "1", false);
    assert_eq!(other[0], 4, "X does not pass W: {other:?}");
    assert_eq!(server.cmd::<i64>(&["EXISTS", &hold]), 0, "W not granted");
    let used: Option<String> = server.cmd(&["HGET", &meta, "used"]);
    assert_eq!(used.as_deref(), Some("36"), "B's 34 and W's old 2");
    let holders = format!("fairlock:{{{name}}}:sem:holders");
    let due: i64 = server
        .cmd::<Option<String>>(&["ZSCORE", &holders, "w"])
        .expect("W's old entry")
        .parse()
        .unwrap();
    support::eventually(Duration::from_secs(10), "W's old entry due", || {
        common::server_time(&server).0 as i64 > due
    })
    .await;
    let again = raw_acquire(&server, name, "w", "nw", "1500", "2", true);
    assert_eq!(
        again[0], 1,
        "W granted once its old entry was due: {again:?}"
    );
    assert_eq!(raw_release(&server, name, "w", again[1]), 1);
    let used: Option<String> = server.cmd(&["HGET", &meta, "used"]);
    assert_eq!(used.as_deref(), Some("34"), "only B's 34 are counted");
    b.release().await.unwrap();
    client.flush().await;
    assert_eq!(sem.available().await.unwrap(), 100);
}

/// `used` counted again from the hold keys (a holder's weight in meta
/// written over, found at its reclaim) while more holders whose leases
/// ended are due than one call reclaims (64): those it leaves for a later
/// call still count until then, as their weights in meta say. Before the
/// fix the count left them out while meta kept their weights, and the later
/// call gave those back a second time: `used` fell below what was held,
/// and more permits went out than the total (106 of 100 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_beside_more_due_holders_than_one_call_reclaims_gives_nothing_back_twice() {
    let server = RedisServer::start();
    let client = client(&server).await;
    let name = "twice";
    let sem = client.semaphore(name, 100).unwrap();
    let b = sem.acquire(10).await.unwrap();
    // 70 holders of 1 that crash.
    for i in 0..70 {
        let reply = raw_acquire(&server, name, &format!("dead:{i}"), "n", "1000", "1", false);
        assert_eq!(reply[0], 1, "dead:{i} holds");
    }
    let last = format!("fairlock:{{{name}}}:sem:hold:dead:69");
    support::eventually(
        Duration::from_secs(10),
        "the dead holders' keys expired",
        || server.cmd::<i64>(&["EXISTS", &last]) == 0,
    )
    .await;
    // Another program writes over the first one's weight in meta.
    let meta = format!("fairlock:{{{name}}}:sem:meta");
    let _: () = server.cmd(&["HSET", &meta, "w:dead:0", "abc"]);
    // Two calls: the first reclaims 64 (and counts `used` again at the
    // first), the second the other 6.
    for probe in ["p1", "p2"] {
        let reply = raw_acquire(&server, name, probe, "np", "30000", "1", false);
        assert_eq!(reply[0], 1, "{probe} holds");
    }
    let used: Option<String> = server.cmd(&["HGET", &meta, "used"]);
    assert_eq!(used.as_deref(), Some("12"), "B's 10 and the probes' 2");
    assert!(
        sem.try_acquire(89).await.unwrap().is_none(),
        "88 permits are free, not 89"
    );
    b.release().await.unwrap();
}
