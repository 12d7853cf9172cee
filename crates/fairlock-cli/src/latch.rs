//! `fairlock latch NAME set N | down [--party ID] | wait [--timeout D] |
//! inspect [--json] | delete`: a count-down latch (see the library's
//! `CountDownLatch`) under --protocol.

use std::time::Duration;

use clap::Subcommand;
use fairlock::{CountDownLatch, LatchInfo};
use serde_json::json;

use crate::{Cli, Failure, LockSettings, MisplacedSettings, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct LatchArgs {
    /// Latch name.
    name: String,
    #[command(subcommand)]
    action: Action,
    #[command(flatten)]
    pub(crate) misplaced: MisplacedSettings,
}

#[derive(Subcommand, Debug)]
enum Action {
    /// Set the count to N if the latch is open (Redisson's trySetCount);
    /// exit 1, nothing changed, when it is counting down already.
    Set {
        /// The count, 1 or more.
        #[arg(value_name = "N", value_parser = clap::value_parser!(u64).range(1..=fairlock::MAX_LATCH_COUNT))]
        count: u64,
        /// native: the latch's keys live this long after its last set or
        /// count-down (default 24h); an abandoned latch then opens.
        #[arg(long, value_name = "DUR", value_parser = duration::wait, allow_hyphen_values = true)]
        expiry: Option<Duration>,
    },
    /// Count down once; prints the count left. With --party (native),
    /// at most once per party: running it again counts nothing more.
    Down {
        /// The party id (1 to 256 bytes, no control characters).
        #[arg(long, value_name = "ID")]
        party: Option<String>,
    },
    /// Wait until the count is 0; exit 75 when --timeout ran out first.
    Wait {
        /// How long to wait at most, e.g. 30s, 5m (1ms to 365days).
        /// Default: until the count is 0.
        #[arg(long, value_name = "DUR", value_parser = duration::wait, allow_hyphen_values = true)]
        timeout: Option<Duration>,
    },
    /// Show the count, the parties that counted down (native) and when
    /// the latch expires (native).
    Inspect {
        /// Print one JSON object: {"name","protocol","count","open",
        /// "parties","expires_in_ms"} (parties null under redisson;
        /// expires_in_ms null when open or without an expiry, as a
        /// Redisson latch is).
        #[arg(long)]
        json: bool,
    },
    /// Delete the latch, which opens it (its waiters return).
    Delete,
}

pub(crate) async fn run(cli: &Cli, args: &LatchArgs) -> Result<u8, Failure> {
    let url = cli.url();
    let client = cli.connect(&url, &LockSettings::default()).await?;
    let result = match client.count_down_latch(&args.name) {
        Ok(latch) => act(&latch, &args.action).await,
        Err(err) => Err(err.into()),
    };
    client.shutdown().await;
    result
}

async fn act(latch: &CountDownLatch, action: &Action) -> Result<u8, Failure> {
    match action {
        Action::Set { count, expiry } => {
            let set = match expiry {
                Some(expiry) => latch.try_set_count_with_expiry(*count, *expiry).await?,
                None => latch.try_set_count(*count).await?,
            };
            if set {
                println!("{}: set to {count}", latch.name());
                Ok(0)
            } else {
                let now = latch.count().await?;
                eprintln!(
                    "fairlock: latch {:?} is counting down already ({now} left): not set",
                    latch.name()
                );
                Ok(exit::DECLINED_OR_FAILED)
            }
        }
        Action::Down { party } => {
            let left = match party {
                Some(party) => latch.count_down_as(party).await?,
                None => latch.count_down().await?,
            };
            println!("{left}");
            Ok(0)
        }
        Action::Wait { timeout } => {
            let opened = match timeout {
                Some(timeout) => latch.wait_for(*timeout).await?,
                None => {
                    latch.wait().await?;
                    true
                }
            };
            if opened {
                Ok(0)
            } else {
                let left = latch.count().await?;
                eprintln!(
                    "fairlock: latch {:?} still at {left} after {}",
                    latch.name(),
                    duration::format(timeout.unwrap_or_default())
                );
                Ok(exit::TIMEOUT)
            }
        }
        Action::Inspect { json } => {
            let info = latch.inspect().await?;
            if *json {
                println!("{}", to_json(&info));
            } else {
                print!("{}", to_text(&info));
            }
            Ok(0)
        }
        Action::Delete => {
            let deleted = latch.delete().await?;
            println!(
                "{}: {}",
                latch.name(),
                if deleted { "deleted" } else { "no latch" }
            );
            Ok(0)
        }
    }
}

fn to_json(info: &LatchInfo) -> serde_json::Value {
    json!({
        "name": info.name,
        "protocol": info.protocol.as_str(),
        "count": info.count,
        "open": info.count == 0,
        "parties": info.parties,
        "expires_in_ms": info.expires_in.map(|d| d.as_millis() as u64),
    })
}

fn to_text(info: &LatchInfo) -> String {
    let mut out = format!("latch {} ({})\n", info.name, info.protocol);
    if info.count == 0 {
        out += "  open (count 0)\n";
        return out;
    }
    out += &format!("  count: {}\n", info.count);
    if let Some(parties) = info.parties {
        out += &format!("  parties counted down: {parties}\n");
    }
    match info.expires_in {
        Some(left) => out += &format!("  expires in: {}\n", duration::format(left)),
        None => out += "  expires: never\n",
    }
    out
}
