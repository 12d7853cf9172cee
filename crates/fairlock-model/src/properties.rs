//! The properties checked: safety (`always`) and the witnesses that keep
//! the model from being vacuous (`sometimes`).

use stateright::Property;

use crate::model::NativeModel;
use crate::state::{Phase, State, seen};

/// At no instant do two parties (distinct acquisitions: owner and token)
/// believe they hold the lock. Waived after a failover without
/// `min_replicas` (the documented window); a hold a force-unlock removed
/// is excused until its client reads the revocation.
pub const MUTUAL_EXCLUSION: &str = "mutual exclusion";
/// Every belief is backed by the master: the lock is held by that owner
/// under that token until at least the believed end. (Same waivers.)
pub const BELIEF_BACKED: &str = "belief backed by the server";
/// Every grant draws a token above every earlier one.
pub const TOKENS_INCREASE: &str = "tokens increase";
/// No grant passes over a waiter that arrived earlier and is live (the
/// fair lock).
pub const FIFO: &str = "FIFO among live waiters";
/// The lock is never free at two tick boundaries in a row while a live
/// waiter waits (bounded liveness: a free lock is taken within one refresh
/// interval).
pub const NO_IDLE_LOCK: &str = "no idle lock while a live waiter waits";
/// No live waiter waits past its budget and one response time (a tick).
pub const WAITS_END: &str = "every wait ends within its budget";
/// A handed-over grant not yet claimed lives at most the waiter ttl.
pub const GRANT_BOUNDED: &str = "unclaimed grant lives at most the waiter ttl";

/// Sometimes: a release hands the lock to a waiter.
pub const SOME_HANDOFF: &str = "sometimes a handoff";
/// Sometimes: an owner re-enters.
pub const SOME_REENTRY: &str = "sometimes a re-entry";
/// Sometimes: the watchdog renews.
pub const SOME_RENEWAL: &str = "sometimes a renewal";
/// Sometimes: a handed-over grant is claimed.
pub const SOME_CLAIM: &str = "sometimes a claim";
/// Sometimes: a waiter proceeds on a grant message.
pub const SOME_GRANT_TRUSTED: &str = "sometimes a grant message is trusted";
/// Sometimes: a client checks its holds after a revocation.
pub const SOME_REVOCATION: &str = "sometimes a revocation is checked";
/// Sometimes: the replica is promoted.
pub const SOME_FAILOVER: &str = "sometimes a failover";
/// Sometimes: a lease runs out on the server under a holder's guards.
pub const SOME_EXPIRY: &str = "sometimes a lease runs out";
/// Sometimes: a non-fair release wakes its first waiter.
pub const SOME_WAKE: &str = "sometimes a non-fair waiter is woken";
/// Sometimes: a non-fair taker goes before the woken waiter.
pub const SOME_BARGE: &str = "sometimes a non-fair taker barges";

/// Always: every hold the server counts for an owner has a guard, once
/// nothing of that owner is in flight (no hold nobody can release).
pub const COUNT_BACKED: &str = "every counted hold has a guard";

/// Always: every live place in the line belongs to an acquisition still in
/// flight (or to a crashed client): no ghost waiter, whom a release would
/// hand the lock with nobody to take it. (Waived after a failover: the
/// promoted replica may keep places its clients have left.)
pub const NO_GHOST_WAITER: &str = "no ghost waiter";

/// The names of the `always` properties.
pub const SAFETY: [&str; 9] = [
    MUTUAL_EXCLUSION,
    BELIEF_BACKED,
    COUNT_BACKED,
    NO_GHOST_WAITER,
    TOKENS_INCREASE,
    FIFO,
    NO_IDLE_LOCK,
    WAITS_END,
    GRANT_BOUNDED,
];

/// The names of the `sometimes` properties.
pub const WITNESSES: [&str; 10] = [
    SOME_HANDOFF,
    SOME_REENTRY,
    SOME_RENEWAL,
    SOME_CLAIM,
    SOME_GRANT_TRUSTED,
    SOME_REVOCATION,
    SOME_FAILOVER,
    SOME_EXPIRY,
    SOME_WAKE,
    SOME_BARGE,
];

fn mutual_exclusion(m: &NativeModel, st: &State) -> bool {
    m.exclusion_waived(st) || st.believers().len() <= 1
}

fn belief_backed(m: &NativeModel, st: &State) -> bool {
    m.exclusion_waived(st)
        || st.believers().iter().all(|&(owner, token, until)| {
            st.master
                .lock
                .as_ref()
                .is_some_and(|l| l.owner == owner && l.token == token && l.expires >= until)
        })
}

fn count_backed(m: &NativeModel, st: &State) -> bool {
    if m.exclusion_waived(st) || st.epoch > 0 {
        return true;
    }
    let Some(lock) = &st.master.lock else {
        return true;
    };
    let client = &st.clients[crate::state::client_of(lock.owner)];
    let in_flight = client
        .tasks
        .iter()
        .any(|t| t.owner == lock.owner && t.phase.in_flight());
    let left_to_lapse = st.ghost.orphaned.contains(&(lock.owner, lock.token))
        || st.ghost.excused.contains(&(lock.owner, lock.token))
        || client.holds.iter().any(|h| h.owner == lock.owner && h.lost);
    if !lock.claimed || client.crashed || in_flight || left_to_lapse {
        return true;
    }
    let guards: u8 = client
        .holds
        .iter()
        .filter(|h| h.owner == lock.owner && h.token == lock.token)
        .map(|h| h.guards)
        .sum();
    lock.count <= guards
}

fn no_ghost_waiter(m: &NativeModel, st: &State) -> bool {
    if m.exclusion_waived(st) || st.epoch > 0 {
        return true;
    }
    st.master.queue.iter().all(|w| {
        let client = &st.clients[crate::state::client_of(w.owner)];
        let (_, t, pc) = w.nonce;
        w.alive <= st.now
            || client.crashed
            || client.tasks.get(usize::from(t)).is_some_and(|task| {
                task.owner == w.owner && task.pc == pc && task.phase.in_flight()
            })
    })
}

fn waits_end(_: &NativeModel, st: &State) -> bool {
    st.clients.iter().filter(|c| !c.crashed).all(|c| {
        c.tasks.iter().all(|t| {
            !matches!(t.phase, Phase::Waiting { .. }) || st.now <= t.deadline.saturating_add(1)
        })
    })
}

fn grant_bounded(m: &NativeModel, st: &State) -> bool {
    st.master.lock.as_ref().is_none_or(|l| {
        l.claimed || l.expires <= l.granted_at.saturating_add(m.scenario.waiter_ttl)
    })
}

/// Every property, safety first.
pub fn all() -> Vec<Property<NativeModel>> {
    vec![
        Property::always(MUTUAL_EXCLUSION, mutual_exclusion),
        Property::always(BELIEF_BACKED, belief_backed),
        Property::always(COUNT_BACKED, count_backed),
        Property::always(NO_GHOST_WAITER, no_ghost_waiter),
        Property::always(TOKENS_INCREASE, |_, st: &State| !st.ghost.token_regressed),
        Property::always(FIFO, |_, st: &State| !st.ghost.fifo_broken),
        Property::always(NO_IDLE_LOCK, |_, st: &State| !st.ghost.idle_with_waiter),
        Property::always(WAITS_END, waits_end),
        Property::always(GRANT_BOUNDED, grant_bounded),
        Property::sometimes(SOME_HANDOFF, |_, st: &State| {
            st.ghost.seen & seen::HANDOFF != 0
        }),
        Property::sometimes(SOME_REENTRY, |_, st: &State| {
            st.ghost.seen & seen::REENTRY != 0
        }),
        Property::sometimes(SOME_RENEWAL, |_, st: &State| {
            st.ghost.seen & seen::RENEWAL != 0
        }),
        Property::sometimes(SOME_CLAIM, |_, st: &State| st.ghost.seen & seen::CLAIM != 0),
        Property::sometimes(SOME_GRANT_TRUSTED, |_, st: &State| {
            st.ghost.seen & seen::GRANT_TRUSTED != 0
        }),
        Property::sometimes(SOME_REVOCATION, |_, st: &State| {
            st.ghost.seen & seen::REVOCATION != 0
        }),
        Property::sometimes(SOME_FAILOVER, |_, st: &State| {
            st.ghost.seen & seen::FAILOVER != 0
        }),
        Property::sometimes(SOME_EXPIRY, |_, st: &State| {
            st.ghost.seen & seen::EXPIRY != 0
        }),
        Property::sometimes(SOME_WAKE, |_, st: &State| st.ghost.seen & seen::WOKEN != 0),
        Property::sometimes(SOME_BARGE, |_, st: &State| st.ghost.seen & seen::BARGE != 0),
    ]
}
