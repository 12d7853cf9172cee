//! The blocking API: thread reentrancy, parity with the async API (the
//! same methods, names and arguments: `shutdown`, the guard's lost-lock
//! signal, `hold_count(&Owner)`, `is_held_by*` answered by the server), and
//! the types' auto traits.

use std::time::{Duration, Instant};

use fairlock::{AcquireOptions, ClientConfig, LockKind, Protocol, blocking};
use fairlock_test_support as support;
use support::{PROTOCOLS, RedisServer};

fn connect(server: &RedisServer, protocol: Protocol) -> blocking::LockClient {
    support::init_tracing();
    let config = ClientConfig::from_url(&server.url())
        .unwrap()
        .protocol(protocol);
    blocking::LockClient::with_config(config).unwrap()
}

#[test]
fn thread_reentrancy_and_exclusion() {
    let server = RedisServer::start();
    let client = blocking::LockClient::connect(&server.url()).unwrap();
    let lock = client.fair_lock("blocking").unwrap();
    let first = lock.lock().unwrap();
    let second = lock.lock().unwrap();
    assert_eq!(
        lock.hold_count_current_thread().unwrap(),
        2,
        "same thread re-enters"
    );
    assert_eq!(first.owner(), second.owner());

    // Another thread is a different owner: it cannot take the lock.
    let other = lock.clone();
    let stolen = std::thread::spawn(move || {
        let got = other
            .try_lock_for(Duration::from_millis(200))
            .unwrap()
            .is_some();
        (got, other.hold_count_current_thread().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(stolen, (false, 0));

    second.unlock().unwrap();
    assert_eq!(lock.hold_count_current_thread().unwrap(), 1);
    first.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn thread_handoff_and_unlock_by_thread() {
    let server = RedisServer::start();
    let client = blocking::LockClient::connect(&server.url()).unwrap();
    let lock = client.fair_lock("handoff").unwrap();
    lock.lock().unwrap().forget();
    assert_eq!(lock.hold_count_current_thread().unwrap(), 1);

    let waiter = {
        let lock = lock.clone();
        std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            guard.unlock().unwrap();
        })
    };
    // Redisson-style unlock from another thread is refused...
    let other = lock.clone();
    let err = std::thread::spawn(move || other.unlock().unwrap_err())
        .join()
        .unwrap();
    assert!(matches!(err, fairlock::Error::NotOwner { .. }), "{err}");
    // ...and from the holding thread releases, handing over to the waiter.
    lock.unlock().unwrap();
    waiter.join().unwrap();
    assert!(!lock.is_locked().unwrap());
}

/// `is_held_by_current_thread`, `is_held_by` and `hold_count(&Owner)` read
/// the server: a force-unlock by another client shows at once, before the
/// guard has noticed anything.
#[test]
fn held_by_answers_from_the_server() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(&server, protocol);
        let lock = client.fair_lock("held-by").unwrap();
        assert!(
            !lock.is_held_by_current_thread().unwrap(),
            "{protocol}: free"
        );
        let guard = lock.lock().unwrap();
        let owner = guard.owner().clone();
        assert_eq!(owner, client.thread_owner(), "{protocol}");
        assert!(lock.is_held_by_current_thread().unwrap(), "{protocol}");
        assert!(lock.is_held_by(&owner).unwrap(), "{protocol}");
        assert!(!lock.is_held_by(&client.new_owner()).unwrap(), "{protocol}");
        assert_eq!(lock.hold_count(&owner).unwrap(), 1, "{protocol}");
        assert_eq!(
            lock.hold_count(&client.new_owner()).unwrap(),
            0,
            "{protocol}"
        );

        // Another thread is another owner.
        let other = lock.clone();
        let seen = std::thread::spawn(move || {
            (
                other.is_held_by_current_thread().unwrap(),
                other.hold_count_current_thread().unwrap(),
            )
        })
        .join()
        .unwrap();
        assert_eq!(seen, (false, 0), "{protocol}: another thread");

        // Taken away by another client: the server says so at once.
        let rival = connect(&server, protocol);
        assert!(rival.fair_lock("held-by").unwrap().force_unlock().unwrap());
        assert!(!lock.is_held_by_current_thread().unwrap(), "{protocol}");
        assert!(!lock.is_held_by(&owner).unwrap(), "{protocol}");
        assert_eq!(lock.hold_count(&owner).unwrap(), 0, "{protocol}");
        drop(guard);
    }
}

/// The guard's lost-lock signal as a blocking wait, a non-blocking check,
/// and a `'static` handle another thread can wait on.
#[test]
fn guard_lost_is_a_blocking_wait() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(&server, protocol);
        let lock = client.fair_lock("lost").unwrap();
        let guard = lock.lock().unwrap();
        assert!(!guard.is_lost(), "{protocol}");
        assert!(guard.is_held(), "{protocol}");
        let started = Instant::now();
        assert!(
            !guard.wait_lost(Duration::from_millis(200)).unwrap(),
            "{protocol}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{protocol}"
        );

        let lost = guard.lost();
        assert!(!lost.is_lost().unwrap(), "{protocol}");
        let watcher = std::thread::spawn(move || {
            lost.wait().unwrap();
            Instant::now()
        });
        let rival = connect(&server, protocol);
        let forced = Instant::now();
        assert!(rival.fair_lock("lost").unwrap().force_unlock().unwrap());
        assert!(
            guard.wait_lost(Duration::from_secs(20)).unwrap(),
            "{protocol}"
        );
        assert!(guard.is_lost(), "{protocol}");
        assert!(!guard.is_held(), "{protocol}");
        assert!(guard.lost().is_lost().unwrap(), "{protocol}");
        let woke = watcher.join().unwrap();
        assert!(
            woke >= forced,
            "{protocol}: the watcher woke after the force-unlock"
        );
        assert!(guard.unlock().unwrap_err().is_lock_lost(), "{protocol}");
    }
}

/// `shutdown` releases what the client holds, and the client is closed
/// afterwards, as in the async API.
#[test]
fn shutdown_releases_and_closes() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(&server, protocol);
        let lock = client.fair_lock("shut").unwrap();
        let guard = lock.lock().unwrap();
        let again = lock.lock().unwrap();
        client.shutdown().unwrap();
        let observer = connect(&server, protocol);
        assert!(
            !observer.fair_lock("shut").unwrap().is_locked().unwrap(),
            "{protocol}: the live guard's hold was released"
        );
        assert!(!guard.is_held() && !again.is_held(), "{protocol}");
        let err = lock.try_lock().unwrap_err();
        assert!(matches!(err, fairlock::Error::Closed), "{protocol}: {err}");
        drop(guard);
        assert!(again.unlock().unwrap_err().is_lock_lost(), "{protocol}");
        support::assert_clean_for(&server, protocol, "shut");
    }
}

/// The rest of the async API, blocking: `acquire` with options (an owner
/// given explicitly wins over the thread's), `unlock_as`, `reenter`,
/// `queue_position`, `kind`, `flush`, `id`, `config`.
#[test]
fn the_async_methods_are_all_there() {
    for protocol in PROTOCOLS {
        let server = RedisServer::start();
        let client = connect(&server, protocol);
        assert_eq!(client.config().get_protocol(), protocol);
        assert!(!client.id().is_empty());
        let lock = client.fair_lock("parity").unwrap();
        assert_eq!(lock.kind(), LockKind::Fair);
        assert_eq!(client.lock("parity-nf").unwrap().kind(), LockKind::NonFair);

        let owner = client.new_owner();
        let guard = lock
            .acquire(AcquireOptions::new().owner(owner.clone()))
            .unwrap()
            .expect("free lock");
        assert_eq!(guard.owner(), &owner, "{protocol}");
        assert!(!lock.is_held_by_current_thread().unwrap(), "{protocol}");
        let again = guard.reenter().unwrap().expect("re-entry");
        assert_eq!(lock.hold_count(&owner).unwrap(), 2, "{protocol}");
        again.forget();
        lock.unlock_as(&owner).unwrap();
        assert_eq!(lock.hold_count(&owner).unwrap(), 1, "{protocol}");

        let (sender, waiting) = std::sync::mpsc::channel();
        let waiter = {
            let (lock, client) = (lock.clone(), client.clone());
            std::thread::spawn(move || {
                sender.send(client.thread_owner()).unwrap();
                lock.try_lock_for(Duration::from_secs(20)).unwrap()
            })
        };
        let waiting = waiting.recv().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while lock.queue_position(&waiting).unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{protocol}: the waiter never queued"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(
            lock.queue_position(&waiting).unwrap(),
            Some((1, 1)),
            "{protocol}"
        );
        assert_eq!(
            lock.queue_position(&owner).unwrap(),
            None,
            "{protocol}: the holder"
        );
        guard.unlock().unwrap();
        let got = waiter.join().unwrap().expect("handed over");
        drop(got);
        client.flush().unwrap();
        support::assert_clean_for(&server, protocol, "parity");
    }
}

#[tokio::test]
async fn refused_inside_an_async_runtime() {
    let server = RedisServer::start();
    let err = blocking::LockClient::connect(&server.url()).unwrap_err();
    assert!(matches!(err, fairlock::Error::InvalidConfig(_)), "{err}");
}

#[test]
fn bounds() {
    fn send_sync_static<T: Send + Sync + 'static>() {}
    send_sync_static::<fairlock::LockClient>();
    send_sync_static::<fairlock::FairLock>();
    send_sync_static::<fairlock::Lock>();
    send_sync_static::<fairlock::LockGuard>();
    send_sync_static::<fairlock::Error>();
    send_sync_static::<blocking::LockClient>();
    send_sync_static::<blocking::FairLock>();
    send_sync_static::<blocking::LockGuard>();
    send_sync_static::<blocking::Lost>();

    fn send_future<F: std::future::Future + Send>(_: F) {}
    fn futures_are_send(lock: fairlock::FairLock, guard: fairlock::LockGuard) {
        send_future(lock.lock());
        send_future(lock.try_lock_for(Duration::from_secs(1)));
        send_future(lock.inspect());
        send_future(guard.lost());
        send_future(guard.unlock());
    }
    let _ = futures_are_send;
}
