//! `fairlock inspect` and `fairlock force-unlock`.

use std::io::{BufRead, IsTerminal, Write};

use fairlock::LockInfo;
use serde_json::{Value, json};

use crate::{Cli, Failure, duration, exit};

#[derive(clap::Args, Debug)]
pub(crate) struct InspectArgs {
    /// Lock name.
    name: String,
    /// Print one JSON object: {"name","protocol","locked","holders":[{"owner","count"}],
    /// "lease_ms","token","queue":[{"position","owner","expires_in_ms"}]}
    /// (null where not applicable).
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ForceUnlockArgs {
    /// Lock name.
    name: String,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
    /// The lock is a non-fair lock (Redisson's getLock): wake its waiters on
    /// its channel instead of the fair queue's head.
    #[arg(long)]
    nonfair: bool,
}

/// The JSON form of a lock's state.
pub(crate) fn to_json(info: &LockInfo) -> Value {
    json!({
        "name": info.name,
        "protocol": info.protocol.as_str(),
        "locked": info.is_locked(),
        "holders": info.holders.iter().map(|h| json!({"owner": h.owner, "count": h.count})).collect::<Vec<_>>(),
        "lease_ms": info.remaining_lease.map(|d| d.as_millis() as u64),
        "token": info.token,
        "queue": info.queue.iter().map(|w| json!({
            "position": w.position,
            "owner": w.owner,
            "expires_in_ms": w.expires_in.map(|d| d.as_millis() as u64),
        })).collect::<Vec<_>>(),
    })
}

fn to_text(info: &LockInfo) -> String {
    let mut out = format!(
        "{} ({}): {}\n",
        info.name,
        info.protocol,
        if info.is_locked() { "locked" } else { "free" }
    );
    for holder in &info.holders {
        out += &format!(
            "  holder   {}  (hold count {})\n",
            holder.owner, holder.count
        );
    }
    if let Some(lease) = info.remaining_lease {
        out += &format!("  lease    {} left\n", duration::format(lease));
    }
    if let Some(token) = info.token {
        out += &format!("  token    {token}\n");
    }
    if info.queue.is_empty() {
        out += "  queue    empty\n";
    } else {
        out += &format!("  queue    {} waiting\n", info.queue.len());
        for waiter in &info.queue {
            let expires = waiter
                .expires_in
                .map(|d| format!("entry expires in {}", duration::format(d)))
                .unwrap_or_else(|| "no deadline".to_owned());
            out += &format!(
                "    {:>3}. {}  ({expires})\n",
                waiter.position, waiter.owner
            );
        }
    }
    out
}

pub(crate) async fn inspect(cli: &Cli, args: &InspectArgs) -> Result<u8, Failure> {
    let client = cli.connect(&cli.url()).await?;
    let info = client.fair_lock(&args.name)?.inspect().await?;
    if args.json {
        println!("{}", to_json(&info));
    } else {
        print!("{}", to_text(&info));
    }
    Ok(0)
}

pub(crate) async fn force_unlock(cli: &Cli, args: &ForceUnlockArgs) -> Result<u8, Failure> {
    let client = cli.connect(&cli.url()).await?;
    let fair = client.fair_lock(&args.name)?;
    if !args.yes && std::io::stdin().is_terminal() {
        let info = fair.inspect().await?;
        if !info.is_locked() {
            println!("{} is not locked", args.name);
            return Ok(0);
        }
        let holders: Vec<&str> = info.holders.iter().map(|h| h.owner.as_str()).collect();
        eprint!(
            "force-unlock {} held by {}? The holder keeps running without the lock. [y/N] ",
            args.name,
            holders.join(", ")
        );
        let _ = std::io::stderr().flush();
        let mut answer = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut answer)
            .map_err(|e| Failure::new(exit::SOFTWARE, format!("reading the answer: {e}")))?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            eprintln!("not unlocked");
            return Ok(1);
        }
    }
    let released = if args.nonfair {
        client.lock(&args.name)?.force_unlock().await?
    } else {
        fair.force_unlock().await?
    };
    if released {
        println!("{} unlocked", args.name);
    } else {
        println!("{} was not locked", args.name);
    }
    Ok(0)
}
