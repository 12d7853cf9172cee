//! The election scenario of `fairlock bench` (`bench election`, not part
//! of `all`): how long an election goes without a leader acting.
//!
//! Each round, a leader runs in a process of its own (`fairlock elect`,
//! lease [`LEASE`]) while a candidate of this process waits in line; the
//! leader is killed (SIGKILL: no resignation) and the figure is the time
//! until the candidate's `campaign` returns (it leads and has published its
//! value). Then the new leader resigns while another candidate waits: the
//! time from `resign` called to the next `campaign` returning. A dead
//! leader is succeeded when its lease runs out: the first figure is about
//! the lease left at its death (at most [`LEASE`]); the second a few round
//! trips.

use std::process::Stdio;
use std::time::{Duration, Instant};

use fairlock::{ClientConfig, Election, LockClient};
use serde_json::json;

use super::BenchArgs;
use crate::{Failure, exit};

/// The lease of every party.
pub(crate) const LEASE: Duration = Duration::from_secs(1);

/// How long any one step may take before the run fails.
const STEP_LIMIT: Duration = Duration::from_secs(30);

fn failed(what: impl Into<String>) -> Failure {
    Failure::new(exit::SOFTWARE, format!("bench election: {}", what.into()))
}

/// Poll `condition` every 5 ms for at most [`STEP_LIMIT`].
async fn until<F, Fut>(what: &str, mut condition: F) -> Result<(), Failure>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + STEP_LIMIT;
    while !condition().await {
        if Instant::now() > deadline {
            return Err(failed(format!("timed out waiting for {what}")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// Whether `election`'s line has `n` candidates.
async fn queued(election: &Election, n: usize) -> bool {
    matches!(election.lock().inspect().await, Ok(info) if info.queue.len() == n)
}

/// One round: (a dead leader's successor, a resigning leader's successor).
async fn round(
    url: &str,
    client: &LockClient,
    name: &str,
) -> Result<(Duration, Duration), Failure> {
    let election = client.election(name)?;
    let mut leader = tokio::process::Command::new(crate::exec::this_program())
        .args([
            "--redis", url, "--lease", "1s", "elect", name, "--value", "dies",
        ])
        .args(["--", "sleep", "3600"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| failed(format!("cannot start fairlock elect: {e}")))?;
    until("the leader to publish", || async {
        matches!(election.leader().await, Ok(Some(l)) if l.value == "dies")
    })
    .await?;
    let next = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("next").await })
    };
    until("the candidate to queue", || queued(&election, 1)).await?;
    let killed = Instant::now();
    leader
        .start_kill()
        .map_err(|e| failed(format!("cannot kill the leader: {e}")))?;
    let next = tokio::time::timeout(STEP_LIMIT, next)
        .await
        .map_err(|_| failed("no successor"))?
        .map_err(|e| failed(e.to_string()))??;
    let death = killed.elapsed();
    let _ = leader.wait().await;

    let after = {
        let election = election.clone();
        tokio::spawn(async move { election.campaign("after").await })
    };
    until("the second candidate to queue", || queued(&election, 1)).await?;
    let resigned = Instant::now();
    next.resign().await?;
    let after = tokio::time::timeout(STEP_LIMIT, after)
        .await
        .map_err(|_| failed("no successor after a resignation"))?
        .map_err(|e| failed(e.to_string()))??;
    let resignation = resigned.elapsed();
    after.resign().await?;
    Ok((death, resignation))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The median and the longest of `all`.
fn median_max(all: &[Duration]) -> (Duration, Duration) {
    let mut sorted = all.to_vec();
    sorted.sort();
    (
        sorted[sorted.len() / 2],
        sorted.last().copied().unwrap_or_default(),
    )
}

/// Run `args.rounds` rounds on the server at `url` and print the figures.
pub(crate) async fn run(url: &str, args: &BenchArgs) -> Result<u8, Failure> {
    let config = ClientConfig::from_url(url)?.lease(LEASE);
    let client = LockClient::with_config(config)
        .await
        .map_err(crate::failure::connect_failure)?;
    let (mut deaths, mut resignations) = (Vec::new(), Vec::new());
    for r in 0..args.rounds {
        let name = format!("bench-election-{}-{r}", std::process::id());
        let (death, resignation) = round(url, &client, &name).await?;
        deaths.push(death);
        resignations.push(resignation);
    }
    client.shutdown().await;
    let (death_p50, death_max) = median_max(&deaths);
    let (resign_p50, resign_max) = median_max(&resignations);
    if args.json {
        let list = |all: &[Duration]| all.iter().map(|d| ms(*d)).collect::<Vec<_>>();
        println!(
            "{}",
            json!({
                "scenario": "election",
                "lease_ms": ms(LEASE),
                "rounds": args.rounds,
                "death_to_next_leader_ms": list(&deaths),
                "resignation_to_next_leader_ms": list(&resignations),
            })
        );
    } else {
        println!(
            "election (lease {} ms, {} rounds): a leader's death (SIGKILL) to the next leader: \
             median {:.0} ms, longest {:.0} ms; a resignation to the next leader: median {:.1} \
             ms, longest {:.1} ms",
            ms(LEASE),
            args.rounds,
            ms(death_p50),
            ms(death_max),
            ms(resign_p50),
            ms(resign_max)
        );
    }
    Ok(0)
}
