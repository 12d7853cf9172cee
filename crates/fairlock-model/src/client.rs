//! The client side (`acquire/`, `hold.rs`, `watchdog.rs`, `wakeup.rs`):
//! what a reply or a message does to a task and to the registry of holds.
//!
//! Abstractions: a script call and its reply are one step (the belief is
//! computed from the time the call was sent, which is then the time the
//! script ran: the bound the implementation uses, `t0 + (g + e − s0)`,
//! with no clock error); a lost reply is modelled for a first attempt
//! (`AttemptLost`: the script ran, the acquisition fails and is undone),
//! not for refreshes (the script's handling of those is kept where it
//! changes behaviour: the secret, `count == base + 1`); a waiter that pauses is modelled as one that crashed (live waiters
//! refresh every tick); holders pause freely.

use crate::scenario::{Lease, Scenario, Step};
use crate::scripts::{self, Acquired, Env};
use crate::state::{Guard, Hold, Msg, OWNERS_PER_CLIENT, Owner, Phase, State, Token, seen};
use crate::variant::GRANT_OVERTRUST;

/// The program step task `t` of client `c` is at, if any.
pub(crate) fn step(sc: &Scenario, st: &State, c: usize, t: usize) -> Option<Step> {
    let pc = st.clients[c].tasks[t].pc;
    sc.clients[c][t].get(usize::from(pc)).copied()
}

/// The owner a `Lock` step of client `c` acquires with.
pub(crate) fn owner_of(c: usize, slot: u8) -> Owner {
    c as u8 * OWNERS_PER_CLIENT + slot
}

/// The lease of the `Lock` step the task is at: ticks and whether the
/// watchdog renews it.
pub(crate) fn lease_of(sc: &Scenario, st: &State, c: usize, t: usize) -> (u8, bool) {
    match step(sc, st, c, t) {
        Some(Step::Lock {
            lease: Lease::Explicit(n),
            ..
        }) => (n, false),
        _ => (sc.watchdog_lease, true),
    }
}

/// Is another task of client `c` in the middle of an acquisition with
/// `owner`? (The per-(lock, owner) turn of the fix for hole 4.)
pub(crate) fn owner_busy(st: &State, c: usize, t: usize, owner: Owner) -> bool {
    st.clients[c]
        .tasks
        .iter()
        .enumerate()
        .any(|(i, task)| i != t && task.owner == owner && task.phase.in_flight())
}

/// The hold count of `owner` as the client sees it: the guards of its
/// registry entry (not lost).
pub(crate) fn hold_count(st: &State, c: usize, owner: Owner) -> u8 {
    st.clients[c]
        .holds
        .iter()
        .find(|h| h.owner == owner && !h.lost)
        .map_or(0, |h| h.guards)
}

/// Call `acquire` for task `t` (a first attempt, a refresh, or the check of
/// a grant a revocation overrode) and act on the reply.
pub(crate) fn attempt(sc: &Scenario, env: Env<'_>, st: &mut State, c: usize, t: usize) {
    let (lease, _) = lease_of(sc, st, c, t);
    let task = &st.clients[c].tasks[t];
    let (owner, base) = (task.owner, task.base);
    let nonce = (c as u8, t as u8, task.pc);
    let epoch = st.epoch;
    let until = st.now.saturating_add(lease);
    let (token, reentry) = match scripts::acquire(st, env, owner, lease, base, nonce) {
        Acquired::Took(token) => (token, false),
        Acquired::Reentered(token) => (token, true),
        Acquired::Queued(arrival, alive) => {
            st.clients[c].tasks[t].phase = Phase::Waiting {
                arrival,
                alive,
                refreshed: true,
                served: false,
                queued_at: st.now,
            };
            return;
        }
    };
    if sc.min_replicas {
        st.clients[c].tasks[t].phase = Phase::Syncing {
            token,
            until,
            claimed: true,
            reentry,
            epoch,
        };
    } else {
        register(sc, env, st, c, t, token, until, true, reentry);
    }
}

/// Register the hold a task acquired: a guard, and the registry entry for
/// its owner (a new token retires the older entry).
#[allow(clippy::too_many_arguments)]
pub(crate) fn register(
    sc: &Scenario,
    env: Env<'_>,
    st: &mut State,
    c: usize,
    t: usize,
    token: Token,
    until: u8,
    claimed: bool,
    reentry: bool,
) {
    let (lease, watchdog) = lease_of(sc, st, c, t);
    let owner = st.clients[c].tasks[t].owner;
    let client = &mut st.clients[c];
    if let Some(h) = client
        .holds
        .iter_mut()
        .find(|h| h.owner == owner && !h.lost && h.token == token)
    {
        h.guards += 1;
        h.watch_guards += u8::from(watchdog);
        // The fix: the belief is the latest end any reply set (the server
        // never shortens it). Reverted: a re-entry "confirms" its own end.
        h.until = if env.variant.renew_may_shorten && reentry {
            until
        } else {
            h.until.max(until)
        };
        h.claimed |= claimed;
    } else {
        for h in client.holds.iter_mut().filter(|h| h.owner == owner) {
            h.lost = true;
        }
        client.holds.push(Hold {
            owner,
            token,
            until,
            guards: 1,
            watch_guards: u8::from(watchdog),
            lease,
            claimed,
            lost: false,
            pending: None,
        });
    }
    let task = &mut client.tasks[t];
    let pc = usize::from(task.pc);
    if task.guards.len() <= pc {
        task.guards.resize(pc + 1, None);
    }
    task.guards[pc] = Some(Guard { token, watchdog });
    task.pc += 1;
    task.phase = Phase::Ready;
}

/// Read the next message on client `c`'s pub/sub connection.
pub(crate) fn deliver(env: Env<'_>, st: &mut State, c: usize) {
    let msg = st.clients[c].inbox.remove(0);
    match msg {
        Msg::Grant {
            owner,
            token,
            at,
            expire,
            nonce,
            epoch,
        } => {
            let t = usize::from(nonce.1);
            let Some(task) = st.clients[c].tasks.get_mut(t) else {
                return;
            };
            let Phase::Waiting {
                queued_at,
                ref mut refreshed,
                ..
            } = task.phase
            else {
                return;
            };
            let ours = task.owner == owner && (c as u8, t as u8, task.pc) == nonce;
            // Fresh: more than half the grant left (else the next attempt
            // claims it, if still its own).
            let fresh = 2 * u16::from(st.now - at) < u16::from(expire);
            // Made after the waiter's last attempt ran: that attempt queued
            // it, so an older grant was gone by then (a force-unlock took
            // it), and the waiter's new place would be left behind. The
            // same tick is not known to be later (the implementation compares
            // server milliseconds). Reverted: any authentic fresh grant.
            let after_last_attempt = at > queued_at || env.variant.stale_grant_trusted;
            if ours && fresh && !after_last_attempt {
                // Only a wake-up: the waiter attempts again at once (the
                // attempt claims the grant if it is still its own).
                *refreshed = false;
            }
            if ours && fresh && after_last_attempt {
                let extra = if env.variant.grant_overtrusted {
                    GRANT_OVERTRUST
                } else {
                    0
                };
                task.phase = Phase::GrantRead {
                    token,
                    until: at.saturating_add(expire).saturating_add(extra),
                    verify: false,
                    epoch,
                };
            }
        }
        Msg::Free { owner } => {
            // A wake-up: the waiter of that owner attempts again at once.
            for task in &mut st.clients[c].tasks {
                if let Phase::Waiting { refreshed, .. } = &mut task.phase {
                    if task.owner == owner {
                        *refreshed = false;
                    }
                }
            }
        }
        Msg::Revoke => {
            // One `renew` without a lease for every hold of the client.
            for i in 0..st.clients[c].holds.len() {
                let h = &st.clients[c].holds[i];
                if h.lost {
                    continue;
                }
                let (owner, token) = (h.owner, h.token);
                if !scripts::renew(st, env, owner, token, None) {
                    st.clients[c].holds[i].lost = true;
                }
            }
            let client = &mut st.clients[c];
            st.ghost
                .excused
                .retain(|&(owner, _)| crate::state::client_of(owner) != c);
            st.ghost.seen |= seen::REVOCATION;
            if !env.variant.revocation_before_registration_lost {
                // The fix: a grant read with or before the revocation is
                // checked with the server, not trusted.
                for task in &mut client.tasks {
                    if let Phase::GrantRead { verify, .. } = &mut task.phase {
                        *verify = true;
                    }
                }
            }
        }
    }
}

/// The watchdog's renewal, or the claim of a handed-over grant, of hold
/// `h` of client `c`.
pub(crate) fn renew(sc: &Scenario, env: Env<'_>, st: &mut State, c: usize, h: usize) {
    let hold = st.clients[c].holds[h].clone();
    let claim = !hold.claimed;
    let lease = if hold.watch_guards > 0 {
        sc.watchdog_lease
    } else {
        hold.lease
    };
    let ok = scripts::renew(st, env, hold.owner, hold.token, Some(lease));
    let hold = &mut st.clients[c].holds[h];
    if !(ok || (claim && env.variant.failed_claim_succeeds)) {
        hold.lost = true;
        return;
    }
    let until = st.now.saturating_add(lease);
    hold.claimed = true;
    if sc.min_replicas && !env.variant.claim_not_replica_acked {
        hold.pending = Some((until, st.epoch));
    } else {
        hold.until = hold.until.max(until);
    }
    st.ghost.seen |= if claim { seen::CLAIM } else { seen::RENEWAL };
}
