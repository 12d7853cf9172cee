//! Clients that die: `fairlock exec` processes killed with SIGKILL while they
//! wait or hold, under both protocols.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, Protocol};
use fairlock_test_support as support;
use support::{RedisServer, queue_len};

fn exec(
    server: &RedisServer,
    protocol: Protocol,
    extra: &[&str],
    name: &str,
    cmd: &[&str],
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", &server.url(), "--protocol", protocol.as_str()])
        .args(extra)
        .args(["exec", name, "--"])
        .args(cmd)
        .env_remove("REDIS_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn fairlock")
}

fn kill9(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

fn wait_until(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn library(
    server: &RedisServer,
    protocol: Protocol,
    adjust: impl FnOnce(ClientConfig) -> ClientConfig,
) -> fairlock::blocking::LockClient {
    let config = adjust(
        ClientConfig::from_url(&server.url())
            .unwrap()
            .protocol(protocol),
    );
    fairlock::blocking::LockClient::with_config(config).unwrap()
}

/// Five waiters whose processes are killed sit ahead of a live one. Native:
/// after the release the live one acquires within waiter_ttl + one refresh
/// interval. Redisson: each dead waiter costs its slot.
#[test]
fn dead_waiters_are_skipped() {
    // Native.
    let server = RedisServer::start();
    let ttl = Duration::from_millis(600);
    let holder = library(&server, Protocol::Native, |c| c.waiter_ttl(ttl));
    let guard = holder.fair_lock("crowd").unwrap().lock().unwrap();
    let mut dead = Vec::new();
    for i in 0..5 {
        dead.push(exec(
            &server,
            Protocol::Native,
            &["--waiter-ttl", "600ms"],
            "crowd",
            &["true"],
        ));
        wait_until(Duration::from_secs(10), "queued", || {
            queue_len(&server, Protocol::Native, "crowd") == i + 1
        });
    }
    let live = std::thread::spawn({
        let client = library(&server, Protocol::Native, |c| c.waiter_ttl(ttl));
        move || {
            let guard = client.fair_lock("crowd").unwrap().lock().unwrap();
            let at = Instant::now();
            guard.unlock().unwrap();
            at
        }
    });
    wait_until(Duration::from_secs(10), "live queued", || {
        queue_len(&server, Protocol::Native, "crowd") == 6
    });
    for child in &mut dead {
        kill9(child);
    }
    let released = Instant::now();
    guard.unlock().unwrap();
    let acquired = live.join().unwrap();
    let waited = acquired - released;
    eprintln!("native: live waiter behind 5 dead ones acquired {waited:?} after the release");
    // waiter_ttl + refresh interval = 800 ms; five times anything would be 3 s.
    assert!(
        waited < Duration::from_millis(1600),
        "native: live waiter waited {waited:?}"
    );

    // Redisson: dead waiters hold the line for their slots.
    let server = RedisServer::start();
    let slot = Duration::from_millis(500);
    let holder = library(&server, Protocol::Redisson, |c| c.waiter_slot(slot));
    let guard = holder
        .fair_lock("crowd")
        .unwrap()
        .lock_with_lease(Duration::from_secs(1))
        .unwrap();
    let mut dead = Vec::new();
    for i in 0..5 {
        dead.push(exec(
            &server,
            Protocol::Redisson,
            &["--waiter-slot", "500ms"],
            "crowd",
            &["true"],
        ));
        wait_until(Duration::from_secs(10), "queued", || {
            queue_len(&server, Protocol::Redisson, "crowd") == i + 1
        });
    }
    let live = std::thread::spawn({
        let client = library(&server, Protocol::Redisson, |c| c.waiter_slot(slot));
        move || {
            let guard = client.fair_lock("crowd").unwrap().lock().unwrap();
            let at = Instant::now();
            guard.unlock().unwrap();
            at
        }
    });
    wait_until(Duration::from_secs(10), "live queued", || {
        queue_len(&server, Protocol::Redisson, "crowd") == 6
    });
    for child in &mut dead {
        kill9(child);
    }
    let released = Instant::now();
    guard.unlock().unwrap();
    let waited = live.join().unwrap() - released;
    assert!(
        waited >= slot * 3,
        "redisson: dead waiters cost a slot each, waited only {waited:?}"
    );
}

/// A holder process killed with SIGKILL: the next waiter acquires within
/// the lease + one refresh interval, under both protocols.
#[test]
fn dead_holder_passes_the_lock_on() {
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let mut holder = exec(
            &server,
            protocol,
            &["--lease", "1s", "--waiter-ttl", "600ms"],
            "held",
            &["sleep", "30"],
        );
        wait_until(Duration::from_secs(10), "held", || {
            support::is_held(&server, protocol, "held")
        });
        let waiter = library(&server, protocol, |c| {
            c.waiter_ttl(Duration::from_millis(600))
        });
        let lock = waiter.fair_lock("held").unwrap();
        let waiting = std::thread::spawn(move || {
            let guard = lock.lock().unwrap();
            let at = Instant::now();
            guard.unlock().unwrap();
            at
        });
        wait_until(Duration::from_secs(10), "queued", || {
            queue_len(&server, protocol, "held") == 1
        });
        kill9(&mut holder);
        let killed = Instant::now();
        let waited = waiting.join().unwrap() - killed;
        eprintln!("{protocol}: next waiter acquired {waited:?} after the holder was killed");
        // Lease 1 s + refresh 200 ms, with room for a slow machine.
        assert!(
            waited < Duration::from_millis(2500),
            "{protocol}: waited {waited:?}"
        );
    }
}

fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).expect("signal");
}

fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            kill9(child);
            panic!("fairlock did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A holder paused (SIGSTOP) past its lease: the lock passes on; when the
/// holder resumes, it learns at once that it lost the lock and stops its
/// command (exit 71); under native, the command's fencing token is lower than
/// the new holder's, so a resource checking tokens rejects its writes.
#[test]
fn paused_holder_loses_the_lock_and_its_token_is_stale() {
    use nix::sys::signal::Signal;
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        let script = format!(
            "echo \"$FAIRLOCK_TOKEN\" > {}; sleep 30",
            token_file.display()
        );
        let mut holder = exec(
            &server,
            protocol,
            &["--lease", "1s"],
            "paused",
            &["sh", "-c", &script],
        );
        wait_until(Duration::from_secs(10), "command started", || {
            std::fs::read_to_string(&token_file).is_ok_and(|t| t.ends_with('\n'))
        });
        signal(&holder, Signal::SIGSTOP);
        let stopped = Instant::now();
        // Another client gets the lock once the paused holder's lease ran out.
        let client = library(&server, protocol, |c| c);
        let guard = client.fair_lock("paused").unwrap().lock().unwrap();
        let waited = stopped.elapsed();
        assert!(waited < Duration::from_secs(4), "{protocol}: {waited:?}");
        signal(&holder, Signal::SIGCONT);
        let resumed = Instant::now();
        let status = wait_exit(&mut holder, Duration::from_secs(15));
        assert_eq!(
            status.code(),
            Some(71),
            "{protocol}: the resumed holder reports the loss"
        );
        assert!(
            resumed.elapsed() < Duration::from_secs(12),
            "{:?}",
            resumed.elapsed()
        );
        let stale = std::fs::read_to_string(&token_file).unwrap();
        match protocol {
            Protocol::Native => {
                let stale: u64 = stale.trim().parse().expect("a token");
                let current = guard.token().expect("a token");
                assert!(
                    stale < current,
                    "stale {stale} must be below current {current}"
                );
            }
            _ => assert_eq!(stale.trim(), "", "redisson has no token"),
        }
        guard.unlock().unwrap();
    }
}

/// A waiter paused (SIGSTOP) while queued. Native: it is skipped once its
/// waiter ttl ran out, and when resumed it queues again and gets the lock.
/// Redisson: it keeps its place until its slot runs out, so the waiter behind
/// it waits (documented weakness); once resumed it is served first.
#[test]
fn paused_waiter_is_skipped_then_rejoins() {
    use nix::sys::signal::Signal;
    for protocol in support::PROTOCOLS {
        let server = RedisServer::start();
        let ttl = Duration::from_millis(600);
        let holder = library(&server, protocol, |c| c.waiter_ttl(ttl));
        let guard = holder.fair_lock("nap").unwrap().lock().unwrap();
        let mut sleeper = exec(
            &server,
            protocol,
            &["--waiter-ttl", "600ms"],
            "nap",
            &["true"],
        );
        wait_until(Duration::from_secs(10), "queued", || {
            queue_len(&server, protocol, "nap") == 1
        });
        let live = std::thread::spawn({
            let client = library(&server, protocol, |c| c.waiter_ttl(ttl));
            move || {
                let guard = client.fair_lock("nap").unwrap().lock().unwrap();
                let at = Instant::now();
                std::thread::sleep(Duration::from_millis(200));
                guard.unlock().unwrap();
                at
            }
        });
        wait_until(Duration::from_secs(10), "live queued", || {
            queue_len(&server, protocol, "nap") == 2
        });
        signal(&sleeper, Signal::SIGSTOP);
        // Time passing is the point: longer than the waiter ttl.
        std::thread::sleep(ttl * 2);
        let released = Instant::now();
        guard.unlock().unwrap();
        if protocol == Protocol::Native {
            let acquired = live.join().unwrap();
            let waited = acquired - released;
            assert!(
                waited < Duration::from_millis(1500),
                "native: skipped the paused waiter, waited {waited:?}"
            );
            signal(&sleeper, Signal::SIGCONT);
        } else {
            std::thread::sleep(Duration::from_millis(800));
            assert!(
                !live.is_finished(),
                "redisson: the paused waiter still holds its place"
            );
            signal(&sleeper, Signal::SIGCONT);
            live.join().unwrap();
        }
        let status = wait_exit(&mut sleeper, Duration::from_secs(20));
        assert_eq!(
            status.code(),
            Some(0),
            "{protocol}: the resumed waiter got the lock and ran"
        );
        assert!(!support::is_held(&server, protocol, "nap"));
    }
}

/// Native: a waiter paused while the lock is handed to it reads the grant
/// late; by then the short handoff lease passed the lock on. It must confirm
/// instead of trusting the stale message: its command runs only after the
/// waiter that got the lock released it.
#[test]
fn late_handoff_is_not_trusted() {
    use nix::sys::signal::Signal;
    let server = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    let ttl = Duration::from_millis(600);
    let holder = library(&server, Protocol::Native, |c| c.waiter_ttl(ttl));
    let guard = holder.fair_lock("late").unwrap().lock().unwrap();
    let script = format!("echo ran >> {}", marks.display());
    let mut paused = exec(
        &server,
        Protocol::Native,
        &["--waiter-ttl", "600ms"],
        "late",
        &["sh", "-c", &script],
    );
    wait_until(Duration::from_secs(10), "queued", || {
        queue_len(&server, Protocol::Native, "late") == 1
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let behind = std::thread::spawn({
        let client = library(&server, Protocol::Native, |c| c.waiter_ttl(ttl));
        move || {
            let guard = client.fair_lock("late").unwrap().lock().unwrap();
            tx.send(()).unwrap();
            // Hold long enough for the paused waiter to resume and look.
            std::thread::sleep(Duration::from_millis(1500));
            guard.unlock().unwrap();
        }
    });
    wait_until(Duration::from_secs(10), "behind queued", || {
        queue_len(&server, Protocol::Native, "late") == 2
    });
    signal(&paused, Signal::SIGSTOP);
    // The handoff goes to the paused waiter and, unclaimed, passes on.
    guard.unlock().unwrap();
    rx.recv_timeout(Duration::from_secs(5))
        .expect("the waiter behind got the lock");
    signal(&paused, Signal::SIGCONT);
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap_or_default(),
        "",
        "ran while another held the lock"
    );
    behind.join().unwrap();
    let status = wait_exit(&mut paused, Duration::from_secs(15));
    assert_eq!(status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(&marks).unwrap(), "ran\n");
}
