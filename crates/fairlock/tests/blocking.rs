//! The blocking API, and the types' auto traits.

use std::time::Duration;

use fairlock::blocking;
use fairlock_test_support as support;
use support::RedisServer;

#[test]
fn thread_reentrancy_and_exclusion() {
    let server = RedisServer::start();
    let client = blocking::LockClient::connect(&server.url()).unwrap();
    let lock = client.fair_lock("blocking").unwrap();
    let first = lock.lock().unwrap();
    let second = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2, "same thread re-enters");
    assert_eq!(first.owner(), second.owner());

    // Another thread is a different owner: it cannot take the lock.
    let other = lock.clone();
    let stolen = std::thread::spawn(move || {
        let got = other
            .try_lock_for(Duration::from_millis(200))
            .unwrap()
            .is_some();
        (got, other.hold_count().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!(stolen, (false, 0));

    second.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    first.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn thread_handoff_and_unlock_by_thread() {
    let server = RedisServer::start();
    let client = blocking::LockClient::connect(&server.url()).unwrap();
    let lock = client.fair_lock("handoff").unwrap();
    lock.lock().unwrap().forget();
    assert_eq!(lock.hold_count().unwrap(), 1);

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
