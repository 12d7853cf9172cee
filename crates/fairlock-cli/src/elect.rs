//! `fairlock elect`: run a command only while leading an election, and
//! `fairlock leader`: who leads, and (`--watch`) its changes.
//!
//! `elect` campaigns in the election NAME (the fair lock NAME, see
//! `docs/election.md`), then runs CMD exactly as `exec` runs it under a
//! lock (`exec.rs`): in a process group of its own, stopped when the
//! leadership is lost, killed if fairlock dies. CMD gets FAIRLOCK_TERM.

use std::time::Duration;

use fairlock::{Leader, LockClient};
use serde_json::{Value, json};

use crate::exec::{Held, OnLost, Run, Signals, run_locked};
use crate::{Cli, Failure, LockSettings, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct ElectArgs {
    /// Election name (the fair lock of the same name).
    name: String,

    /// The value to publish while leading (what `fairlock leader` shows),
    /// e.g. this instance's address. Default: empty.
    #[arg(long, value_name = "V", default_value = "")]
    value: String,

    /// Give up after DUR and exit 75 (the candidate leaves the line), e.g.
    /// 30s (1ms to 365days). Default: wait until leading.
    #[arg(long, value_name = "DUR", value_parser = duration::wait, allow_hyphen_values = true)]
    wait: Option<Duration>,

    /// After a lost leadership, the most time CMD's process group gets
    /// between SIGTERM and SIGKILL, 0s to 365days.
    #[arg(long, value_name = "DUR", default_value = "10s", value_parser = duration::grace, allow_hyphen_values = true)]
    grace: Duration,

    /// The command to run while leading, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,

    #[command(flatten)]
    settings: LockSettings,
}

#[derive(clap::Args, Debug)]
pub(crate) struct LeaderArgs {
    /// Election name.
    name: String,

    /// Print each change of leader as it happens, until SIGINT or SIGTERM.
    #[arg(long)]
    watch: bool,

    /// One JSON object per line: {"name", "leader": {"value", "label",
    /// "term"} or null}.
    #[arg(long)]
    json: bool,

    #[command(flatten)]
    pub(crate) misplaced: crate::MisplacedSettings,
}

/// `fairlock elect`.
pub(crate) async fn elect(cli: &Cli, args: &ElectArgs) -> Result<u8, Failure> {
    let settings = cli.settings(&args.settings);
    let url = cli.url();
    let client = cli.connect(&url, &settings).await?;
    let result = elect_with(&client, args).await;
    // Resign whatever is still held and let the background work finish.
    client.shutdown().await;
    result
}

async fn elect_with(client: &LockClient, args: &ElectArgs) -> Result<u8, Failure> {
    let election = client.election(&args.name)?;
    let mut signals = Signals::install()?;
    let campaign = async {
        match args.wait {
            Some(wait) => election.try_campaign_for(&args.value, wait).await,
            None => election.campaign(&args.value).await.map(Some),
        }
    };
    let leadership = tokio::select! {
        result = campaign => result?,
        sig = signals.recv() => {
            // Dropping the campaign takes the candidate out of the line.
            eprintln!("fairlock: {sig} while campaigning for {}; leaving the line", args.name);
            return Ok(128 + sig as u8);
        }
    };
    let Some(leadership) = leadership else {
        eprintln!(
            "fairlock: not leading {} within {}",
            args.name,
            duration::format(args.wait.unwrap_or_default())
        );
        return Ok(exit::TIMEOUT);
    };
    let run = Run {
        name: &args.name,
        what: "leadership of",
        command: &args.command,
        on_lost: OnLost::Kill,
        grace: args.grace,
    };
    run_locked(Held::Leader(leadership), &run, &mut signals).await
}

/// `fairlock leader`.
pub(crate) async fn leader(cli: &Cli, args: &LeaderArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let client = cli.connect(&url, &LockSettings::default()).await?;
    let result = leader_with(&client, args).await;
    client.shutdown().await;
    result
}

async fn leader_with(client: &LockClient, args: &LeaderArgs) -> Result<u8, Failure> {
    let election = client.election(&args.name)?;
    if !args.watch {
        let leader = election.leader().await?;
        println!("{}", show(&args.name, leader.as_ref(), args.json));
        return Ok(0);
    }
    let mut signals = Signals::install()?;
    let mut changes = election.observe().await?;
    loop {
        tokio::select! {
            change = changes.next() => {
                println!("{}", show(&args.name, change?.as_ref(), args.json));
            }
            _ = signals.recv() => return Ok(0),
        }
    }
}

/// One line: the leader of `name`, or nobody.
fn show(name: &str, leader: Option<&Leader>, json: bool) -> String {
    if json {
        return to_json(name, leader).to_string();
    }
    match leader {
        Some(l) => format!(
            "{name}: led by {} (term {}): {}",
            l.label,
            l.term,
            printable(&l.value)
        ),
        None => format!("{name}: no leader"),
    }
}

fn to_json(name: &str, leader: Option<&Leader>) -> Value {
    json!({
        "name": name,
        "leader": leader.map(|l| json!({"value": l.value, "label": l.label, "term": l.term})),
    })
}

/// A value as one line of text: control characters escaped.
fn printable(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{printable, show};

    #[test]
    fn a_leader_is_one_line() {
        assert_eq!(show("jobs", None, false), "jobs: no leader");
        assert_eq!(show("jobs", None, true), r#"{"name":"jobs","leader":null}"#);
        assert_eq!(printable("a\nb\tcé"), "a\\nb\\tcé");
    }
}
