//! `fairlock latch NAME set N | down [--party ID] | wait [--timeout D] |
//! inspect [--json] | delete` under both protocols: the exit codes (1 for
//! a latch counting down already, 75 for a wait that ran out, 64 for bad
//! usage and for data that is not a latch), a wait that returns once a
//! library client's count-down takes the count to 0, and inspect's output.

use std::process::{Command, Output};
use std::time::Duration;

use fairlock::Protocol;
use fairlock_test_support as support;
use serde_json::Value;
use support::{PROTOCOLS, RedisServer};

fn fairlock(server: &RedisServer, protocol: Protocol) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis")
        .arg(server.url())
        .args(["--protocol", protocol.as_str()])
        .env_remove("REDIS_URL")
        .env_remove("FAIRLOCK_URL");
    cmd
}

fn latch(server: &RedisServer, protocol: Protocol, args: &[&str]) -> Output {
    fairlock(server, protocol)
        .arg("latch")
        .args(args)
        .output()
        .expect("run fairlock")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

#[test]
fn set_down_wait_inspect_and_delete() {
    let server = RedisServer::start();
    for protocol in PROTOCOLS {
        let name = format!("cli-{protocol}");
        let out = latch(&server, protocol, &[&name, "set", "2"]);
        assert_eq!(code(&out), 0, "{}", text(&out.stderr));
        let out = latch(&server, protocol, &[&name, "set", "5"]);
        assert_eq!(code(&out), 1, "counting already");
        assert!(
            text(&out.stderr).contains("2 left"),
            "{}",
            text(&out.stderr)
        );

        let out = latch(&server, protocol, &[&name, "wait", "--timeout", "200ms"]);
        assert_eq!(code(&out), 75, "{}", text(&out.stderr));
        assert!(text(&out.stderr).contains("still at 2"));

        let out = latch(&server, protocol, &[&name, "inspect", "--json"]);
        assert_eq!(code(&out), 0);
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(json["count"], 2);
        assert_eq!(json["open"], false);
        assert_eq!(json["protocol"], protocol.as_str());
        match protocol {
            Protocol::Native => {
                assert_eq!(json["parties"], 0);
                assert!(json["expires_in_ms"].as_u64().unwrap() > 86_000_000);
            }
            _ => {
                assert!(json["parties"].is_null());
                assert!(json["expires_in_ms"].is_null());
            }
        }
        let out = latch(&server, protocol, &[&name, "inspect"]);
        assert!(
            text(&out.stdout).contains("count: 2"),
            "{}",
            text(&out.stdout)
        );

        // A wait in the background; the CLI counts down to 0 and it exits 0.
        let mut waiter = fairlock(&server, protocol)
            .args(["latch", &name, "wait", "--timeout", "60s"])
            .spawn()
            .unwrap();
        let party: &[&str] = match protocol {
            Protocol::Native => &["--party", "p"],
            _ => &[],
        };
        let out = latch(
            &server,
            protocol,
            &[&[name.as_str(), "down"], party].concat(),
        );
        assert_eq!(text(&out.stdout).trim(), "1");
        if protocol == Protocol::Native {
            let again = latch(&server, protocol, &[&name, "down", "--party", "p"]);
            assert_eq!(text(&again.stdout).trim(), "1", "a party counts once");
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(waiter.try_wait().unwrap().is_none(), "returned before 0");
        let out = latch(&server, protocol, &[&name, "down"]);
        assert_eq!(text(&out.stdout).trim(), "0");
        assert_eq!(waiter.wait().unwrap().code(), Some(0));
        let out = latch(&server, protocol, &[&name, "wait"]);
        assert_eq!(code(&out), 0, "open: at once");
        let out = latch(&server, protocol, &[&name, "inspect", "--json"]);
        let json: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            (json["count"].clone(), json["open"].clone()),
            (0.into(), true.into())
        );

        assert_eq!(code(&latch(&server, protocol, &[&name, "set", "1"])), 0);
        let out = latch(&server, protocol, &[&name, "delete"]);
        assert!(text(&out.stdout).contains("deleted"));
        let keys: Vec<String> = server.cmd(&["KEYS", "*"]);
        assert!(keys.iter().all(|k| k.contains("labels")), "{keys:?}");
    }
}

#[test]
fn bad_usage_and_foreign_data_exit_64() {
    let server = RedisServer::start();
    let _: () = server.cmd(&["SET", "fairlock:{app}:latch", "data"]);
    let _: () = server.cmd(&["HSET", "app", "a", "b"]);
    for protocol in PROTOCOLS {
        for args in [
            &["app", "down"][..],
            &["app", "set", "2"],
            &["app", "wait"],
            &["app", "inspect"],
            &["x", "set", "0"],
            &["x", "set", "many"],
            &["x", "wait", "--timeout", "-1s"],
            &["", "inspect"],
        ] {
            let out = latch(&server, protocol, args);
            assert_eq!(code(&out), 64, "{protocol} {args:?}: {}", text(&out.stderr));
        }
    }
    let out = latch(&server, Protocol::Redisson, &["x", "down", "--party", "p"]);
    assert_eq!(code(&out), 64, "{}", text(&out.stderr));
    let data: String = server.cmd(&["GET", "fairlock:{app}:latch"]);
    assert_eq!(data, "data", "left alone");
}
