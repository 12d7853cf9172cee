//! Running a check and printing what it found.

use std::fmt::Write as _;

use stateright::{Checker, HasDiscoveries, Model, Path};

use crate::model::{Action, NativeModel};
use crate::properties::{MUTUAL_EXCLUSION, SAFETY, WITNESSES};
use crate::state::{Msg, OWNERS_PER_CLIENT, Owner, Phase, Server, State};

/// What one check found.
#[derive(Debug)]
pub struct Outcome {
    /// The violated safety properties with a shortest counterexample each
    /// (BFS), the first found first.
    pub violations: Vec<(&'static str, Path<State, Action>)>,
    /// The `sometimes` properties witnessed.
    pub witnessed: Vec<&'static str>,
    /// Unique states explored.
    pub states: usize,
    /// The deepest level reached.
    pub depth: usize,
}

impl Outcome {
    /// The one-line verdict: a violation, or holds, or inconclusive (the
    /// check explored nothing meaningful: no handoff nor re-entry seen).
    pub fn verdict(&self) -> String {
        if let Some((name, _)) = self.violations.first() {
            format!("verdict: violation of {name}")
        } else if self.states < 2 || self.witnessed.is_empty() {
            "verdict: inconclusive".to_owned()
        } else {
            format!("verdict: holds ({} states)", self.states)
        }
    }
}

/// Check `model` exhaustively by BFS, down to `depth` steps (None: until
/// every reachable state is seen; the scenario's time bound keeps that
/// finite). With `stop_at_violation`, stops once mutual exclusion is
/// violated (other violations found by then are reported too).
pub fn check(model: NativeModel, depth: Option<usize>, stop_at_violation: bool) -> Outcome {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut builder = model.checker().threads(threads);
    if let Some(depth) = depth {
        builder = builder.target_max_depth(depth);
    }
    if stop_at_violation {
        // Go on past a first violation until two holders are found (the
        // headline property) or every state is seen.
        let wanted = [MUTUAL_EXCLUSION].into_iter().collect();
        builder = builder.finish_when(HasDiscoveries::AnyOf(wanted));
    }
    let checker = builder.spawn_bfs().join();
    let discoveries = checker.discoveries();
    let mut violations: Vec<_> = SAFETY
        .iter()
        .filter_map(|name| discoveries.get(name).map(|p| (*name, p.clone())))
        .collect();
    // Two holders first, then the shortest counterexample.
    violations.sort_by_key(|(name, p)| (*name != MUTUAL_EXCLUSION, p.clone().into_actions().len()));
    let witnessed = WITNESSES
        .iter()
        .copied()
        .filter(|name| discoveries.contains_key(name))
        .collect();
    Outcome {
        violations,
        witnessed,
        states: checker.unique_state_count(),
        depth: checker.max_depth(),
    }
}

/// An owner's name: the client's letter and the owner slot (`A0`).
pub fn owner_name(owner: Owner) -> String {
    let client = char::from(b'A' + owner / OWNERS_PER_CLIENT);
    format!("{client}{}", owner % OWNERS_PER_CLIENT)
}

fn server(out: &mut String, s: &Server) {
    match (&s.lock, &s.marker) {
        (Some(l), _) => {
            let _ = write!(
                out,
                "lock {}#{} n{} until {}{}{}{}",
                owner_name(l.owner),
                l.token,
                l.count,
                l.expires,
                if l.claimed { "" } else { " unclaimed" },
                if l.waiting { " w" } else { "" },
                if l.woken { "k" } else { "" }
            );
        }
        (None, Some(m)) => {
            let _ = write!(
                out,
                "free #{}{}{}",
                m.token,
                if m.waiting { " w" } else { "" },
                if m.woken { "k" } else { "" }
            );
        }
        (None, None) => out.push_str("free (no key)"),
    }
    if !s.queue.is_empty() {
        out.push_str(" | line");
        for w in &s.queue {
            let _ = write!(out, " {}(alive<{})", owner_name(w.owner), w.alive);
        }
    }
}

/// One line summing up a state: time, master, replica (when `replicas`
/// and it differs), every belief, pending messages.
pub fn summary(st: &State, replicas: bool) -> String {
    let mut out = format!("t={} master[", st.now);
    server(&mut out, &st.master);
    out.push(']');
    if replicas && st.replica != st.master {
        out.push_str(" replica[");
        server(&mut out, &st.replica);
        out.push(']');
    }
    out.push_str(" believes[");
    let mut first = true;
    for client in &st.clients {
        for h in &client.holds {
            if h.believes(st.now) {
                if !first {
                    out.push(' ');
                }
                first = false;
                let _ = write!(
                    out,
                    "{}#{} x{} until {}",
                    owner_name(h.owner),
                    h.token,
                    h.guards,
                    h.until
                );
            }
        }
    }
    out.push(']');
    for (c, client) in st.clients.iter().enumerate() {
        let name = char::from(b'A' + c as u8);
        if !client.inbox.is_empty() {
            let _ = write!(out, " inbox {name}[");
            for (i, m) in client.inbox.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                match m {
                    Msg::Grant {
                        owner,
                        token,
                        at,
                        expire,
                        ..
                    } => {
                        let _ =
                            write!(out, "grant {}#{token} at {at}+{expire}", owner_name(*owner));
                    }
                    Msg::Revoke => out.push_str("revoke"),
                    Msg::Free { owner } => {
                        let _ = write!(out, "free {}", owner_name(*owner));
                    }
                }
            }
            out.push(']');
        }
        for task in &client.tasks {
            if let Phase::GrantRead { token, verify, .. } = &task.phase {
                let _ = write!(
                    out,
                    " {}: grant #{token} read{}",
                    owner_name(task.owner),
                    if *verify { ", to verify" } else { "" }
                );
            }
        }
        if client.crashed {
            let _ = write!(out, " {name} crashed");
        }
    }
    out
}

/// What an action is, in the protocol's words.
pub fn describe(model: &NativeModel, st: &State, action: &Action) -> String {
    let task = |c: usize, t: usize| {
        let name = char::from(b'A' + c as u8);
        let mut owner = owner_name(st.clients[c].tasks[t].owner);
        if model.scenario.clients[c].len() > 1 {
            owner = format!("{owner} (task{t})");
        }
        (name, owner)
    };
    match *action {
        Action::Tick => "tick".to_owned(),
        Action::Begin(c, t) => {
            let (name, _) = task(c, t);
            let step = model.scenario.clients[c][t][usize::from(st.clients[c].tasks[t].pc)];
            format!("{name}/task{t} begins {step:?} (reads the hold count)")
        }
        Action::Attempt(c, t) => format!("{} acquire.lua", task(c, t).1),
        Action::GiveUp(c, t) => format!("{} give_up.lua (budget spent)", task(c, t).1),
        Action::AttemptLost(c, t) => {
            format!("{} acquire.lua, its reply lost", task(c, t).1)
        }
        Action::Undo(c, t) => format!(
            "{} undoes the lost attempt: give_up.lua, release.lua",
            task(c, t).1
        ),
        Action::Unlock(c, t) => format!("{}/task{t} unlock: release.lua", task(c, t).0),
        Action::Deliver(c) => format!("{} reads its next pub/sub message", task(c, 0).0),
        Action::Drop(c) => format!("{}'s next wake-up message is lost", task(c, 0).0),
        Action::Duplicate(c) => format!("{}'s next wake-up message is duplicated", task(c, 0).0),
        Action::Proceed(c, t) => format!("{} proceeds on the grant it read", task(c, t).1),
        Action::Synced(c, t) => format!("{} WAIT acknowledged", task(c, t).1),
        Action::SyncFailed(c, t) => format!("{} WAIT failed (master replaced)", task(c, t).1),
        Action::Renew(c, h) => {
            let hold = &st.clients[c].holds[h];
            let what = if hold.claimed { "renewal" } else { "claim" };
            format!("{} renew.lua ({what})", owner_name(hold.owner))
        }
        Action::RenewSynced(c, h) => {
            format!(
                "{} renewal's WAIT ends",
                owner_name(st.clients[c].holds[h].owner)
            )
        }
        Action::Replicate => "replica catches up".to_owned(),
        Action::Failover => "failover: the replica becomes master (and a tick passes)".to_owned(),
        Action::ForceUnlock => "force_release.lua (force-unlock)".to_owned(),
        Action::Crash(c) => format!("{} crashes", task(c, 0).0),
    }
}

/// A counterexample, one line per step.
pub fn format_path(model: &NativeModel, path: &Path<State, Action>) -> String {
    let steps = path.clone().into_vec();
    let replicas = model.scenario.min_replicas || model.scenario.failovers > 0;
    let mut out = String::new();
    for (i, (state, action)) in steps.iter().enumerate() {
        if i == 0 {
            let _ = writeln!(out, "  0. init: {}", summary(state, replicas));
        }
        if let Some(action) = action {
            let next = model.next_state(state, action.clone());
            let shown = next.map_or_else(String::new, |s| summary(&s, replicas));
            let _ = writeln!(
                out,
                "{:3}. {}: {}",
                i + 1,
                describe(model, state, action),
                shown
            );
        }
    }
    out
}
