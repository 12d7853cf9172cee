//! The `fairlock` binary on a `redis+sentinel://` URL: `exec` finds the
//! master through the sentinel, and the sentinel's own password comes from
//! `$FAIRLOCK_SENTINEL_PASSWORD` (or `--sentinel-password`).

use std::process::Command;

use fairlock_test_support::Sentinel;

fn fairlock(url: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fairlock"));
    cmd.arg("--redis")
        .arg(url)
        .env_remove("REDIS_URL")
        .env_remove("FAIRLOCK_SENTINEL_USER")
        .env_remove("FAIRLOCK_SENTINEL_PASSWORD");
    cmd
}

#[test]
fn exec_through_a_sentinel_with_and_without_its_password() {
    let deployment = Sentinel::start_with(0, 1);
    let url = deployment.url();
    let exec = |cmd: &mut Command| {
        cmd.args([
            "exec",
            "sentinel-job",
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "echo \"token=$FAIRLOCK_TOKEN\"",
        ])
        .output()
        .expect("run fairlock")
    };
    let out = exec(&mut fairlock(&url));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let token = stdout.trim().strip_prefix("token=").unwrap_or_default();
    assert!(token.parse::<u64>().is_ok(), "{stdout}");
    let master = deployment.master();
    // Released: no key, or the free marker a release leaves (`TOKEN:0:...`).
    let value: Option<String> = master.cmd(&["GET", "fairlock:{sentinel-job}:lock"]);
    assert!(
        value.is_none_or(|v| v.split(':').nth(1) == Some("0")),
        "released on the master"
    );

    // inspect names the master serving the lock.
    let out = fairlock(&url)
        .args(["inspect", "sentinel-job", "--json"])
        .output()
        .expect("run fairlock inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains(&format!("\"node\":\"{}\"", master.addr())),
        "{shown}"
    );

    // The sentinel now wants a password; the data node does not.
    let sentinel = &deployment.sentinels()[0];
    let _: () = sentinel.cmd(&["ACL", "SETUSER", "default", "resetpass", ">sentinel-pw"]);
    let refused = exec(&mut fairlock(&url));
    assert_eq!(
        refused.status.code(),
        Some(69),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let out = exec(fairlock(&url).env("FAIRLOCK_SENTINEL_PASSWORD", "sentinel-pw"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = exec(fairlock(&url).args([
        "--sentinel-user",
        "default",
        "--sentinel-password",
        "sentinel-pw",
    ]));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `torture --topology sentinel`: its own deployment, failover faults, a
/// clean verdict; `--redis` is refused with it.
#[test]
fn torture_on_a_private_sentinel_deployment() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["torture", "--topology", "sentinel", "--duration", "15s"])
        .args(["--processes", "2", "--tasks", "3"])
        // A failover timed right after a handoff comes at most every
        // ~30 s: a 15 s run would draw it and end inconclusive. The other
        // combinations are drawn.
        .args([
            "--combinations",
            "reentry-lease,shared-owner,force-unlock-at-handoff,name-probe",
        ])
        .env_remove("REDIS_URL")
        .output()
        .expect("run fairlock torture");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("sentinel topology"), "{stdout}");
    assert!(stdout.contains("\nfailovers: "), "{stdout}");
    // Frozen sentinels are a fault kind of their own (drawn at random: a
    // short run may have none).
    assert!(stdout.contains(" sentinels frozen; "), "{stdout}");
    assert!(stdout.contains("\nviolations: 0"), "{stdout}");

    let refused = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .args(["--redis", "redis://127.0.0.1:1"])
        .args(["torture", "--topology", "sentinel", "--duration", "1s"])
        .env_remove("REDIS_URL")
        .output()
        .expect("run fairlock torture");
    assert_eq!(refused.status.code(), Some(64));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("drop --redis"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn help_lists_the_sentinel_url_form() {
    let out = Command::new(env!("CARGO_BIN_EXE_fairlock"))
        .arg("--help")
        .output()
        .expect("run fairlock --help");
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("redis+sentinel://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/SERVICE[/DB]"),
        "{help}"
    );
    assert!(help.contains("FAIRLOCK_SENTINEL_PASSWORD"), "{help}");
}
