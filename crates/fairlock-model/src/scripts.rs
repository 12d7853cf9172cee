//! The Lua scripts of `crates/fairlock/src/protocol/native/`, each one
//! atomic step on the master (a script runs alone on the server).
//!
//! Abstractions: time is the tick (`TIME` is `State::now`); the lock is
//! absent once its expiry tick is reached (keys expire at tick boundaries);
//! `meta`'s and the line's own TTLs are not modelled (they outlive every
//! use); the release result cache is left out because replies are never
//! lost here (a script call and its reply are one step); the type checks
//! are left out (no other writer touches the keys); the non-fair lock is
//! not modelled (`fair` everywhere).

use crate::scenario::Scenario;
use crate::state::{Lock, Msg, Nonce, Owner, State, Token, Waiter, client_of, seen};
use crate::variant::Variant;

/// How many tokens fit in one tick of the clock term of `next counter`
/// (`max(last + 1, now in µs)`): more grants than this in one tick would
/// break the clock term's guarantee, as more than one per µs does.
const TOKENS_PER_TICK: Token = 16;

/// The reply of `acquire`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// `{1, token}`: a new hold (or a claimed grant).
    Took(Token),
    /// `{2, count, token}`: a re-entry, or the claim of a re-entry whose
    /// reply was (deemed) lost.
    Reentered(Token),
    /// `{3, ...}`: queued, with its arrival number and liveness deadline.
    Queued(u32, u8),
}

/// Everything a script needs besides the state.
#[derive(Clone, Copy)]
pub(crate) struct Env<'a> {
    /// The switched-off fixes and the mutants.
    pub(crate) variant: &'a Variant,
    /// The bounds (waiter ttl).
    pub(crate) scenario: &'a Scenario,
}

/// Set the lock's expiry to `now + ms`: PEXPIRE GT (never shorter), or a
/// plain PEXPIRE when `plain`.
fn pexpire(lock: &mut Lock, now: u8, ms: u8, plain: bool) {
    let to = now.saturating_add(ms);
    lock.expires = if plain { to } else { lock.expires.max(to) };
}

/// `leave_queue(owner)`.
fn leave_queue(st: &mut State, owner: Owner) {
    st.master.queue.retain(|w| w.owner != owner);
}

/// `purge_dead(now)`: drop waiters whose liveness passed. (The 64 limit
/// per call is not reached with three clients.)
fn purge_dead(st: &mut State, env: Env<'_>) {
    let now = st.now;
    let slack = u8::from(env.variant.purge_drops_live);
    st.master
        .queue
        .retain(|w| w.alive > now.saturating_add(slack));
}

/// `first_live(now)`: the first waiter whose liveness has not passed; dead
/// ones ahead of it are dropped.
fn first_live(st: &mut State) -> Option<Waiter> {
    while let Some(head) = st.master.queue.first() {
        if head.alive > st.now {
            return Some(head.clone());
        }
        st.master.queue.remove(0);
    }
    None
}

/// `take(owner, expire, claimed, nonce)`: a new token (`next counter`, its
/// clock term included) and the lock hash. Ghost: token order and FIFO are
/// checked here, where every grant is made. `arrival` is the taker's place
/// in line (None: it was not queued).
fn take(
    st: &mut State,
    owner: Owner,
    expire: u8,
    claimed: bool,
    nonce: Nonce,
    arrival: Option<u32>,
) -> Token {
    let token = (st.master.token + 1).max(Token::from(st.now) * TOKENS_PER_TICK);
    st.master.token = token;
    if token <= st.ghost.max_token {
        st.ghost.token_regressed = true;
    }
    st.ghost.max_token = st.ghost.max_token.max(token);
    if st.epoch == 0 && passes_over_live_waiter(st, owner, arrival) {
        st.ghost.fifo_broken = true;
    }
    st.master.lock = Some(Lock {
        owner,
        count: 1,
        token,
        claimed,
        nonce,
        expires: st.now.saturating_add(expire),
        granted_at: st.now,
    });
    token
}

/// Ghost check: does a grant to `owner` pass over a waiter that is live
/// (its last refresh still counts) and arrived before it? Read from the
/// clients' side, so that a server that lost a live waiter is caught.
fn passes_over_live_waiter(st: &State, owner: Owner, arrival: Option<u32>) -> bool {
    st.clients.iter().any(|client| {
        client.tasks.iter().any(|task| match &task.phase {
            crate::state::Phase::Waiting {
                arrival: theirs,
                alive,
                served,
                ..
            } => {
                !served
                    && task.owner != owner
                    && *alive > st.now
                    && arrival.is_none_or(|mine| *theirs < mine)
            }
            _ => false,
        })
    })
}

/// `hand_off`: the first live waiter takes the lock for min(its lease, its
/// waiter ttl), unclaimed, and is told on its channel. Returns whether a
/// waiter was found.
fn hand_off(st: &mut State, env: Env<'_>) -> bool {
    let Some(head) = first_live(st) else {
        return false;
    };
    leave_queue(st, head.owner);
    let expire = if env.variant.handoff_full_lease {
        head.lease
    } else {
        head.lease.min(head.ttl)
    }
    .max(1);
    let token = take(
        st,
        head.owner,
        expire,
        false,
        head.nonce,
        Some(head.arrival),
    );
    st.ghost.seen |= seen::HANDOFF;
    for task in &mut st.clients[client_of(head.owner)].tasks {
        if let crate::state::Phase::Waiting { served, .. } = &mut task.phase {
            if task.owner == head.owner {
                *served = true;
            }
        }
    }
    let msg = Msg::Grant {
        owner: head.owner,
        token,
        at: st.now,
        expire,
        nonce: head.nonce,
        epoch: st.epoch,
    };
    st.clients[client_of(head.owner)].inbox.push(msg);
    true
}

/// `release_fully`: DEL the lock; if somebody waits, purge and hand off.
fn release_fully(st: &mut State, env: Env<'_>) {
    st.master.lock = None;
    if st.master.queue.is_empty() {
        return;
    }
    purge_dead(st, env);
    hand_off(st, env);
}

/// `acquire.lua` (with `acquire_fast.lua` in front), mode `queue`, fair.
pub(crate) fn acquire(
    st: &mut State,
    env: Env<'_>,
    owner: Owner,
    lease: u8,
    base: u8,
    nonce: Nonce,
) -> Acquired {
    let waiting = !st.master.queue.is_empty();
    // Fast path: free and nobody queued (the mutant ignores the holder).
    if (st.master.lock.is_none() || env.variant.fast_path_takes_held) && !waiting {
        return Acquired::Took(take(st, owner, lease, true, nonce, None));
    }
    let plain = env.variant.renew_may_shorten;
    let now = st.now;
    if let Some(lock) = st.master.lock.as_mut().filter(|l| l.owner == owner) {
        let token = lock.token;
        if lock.nonce == nonce || lock.count == base + 1 || base == 0 {
            // Handed to this waiter, or an earlier attempt's reply lost:
            // claim it.
            lock.claimed = true;
            pexpire(lock, now, lease, plain);
            let count = lock.count;
            leave_queue(st, owner);
            return if count == 1 {
                Acquired::Took(token)
            } else {
                Acquired::Reentered(token)
            };
        }
        // Re-entry: the lock records this acquisition's secret, claimed.
        lock.count += 1;
        lock.nonce = nonce;
        lock.claimed |= !env.variant.reentry_leaves_unclaimed;
        pexpire(lock, now, lease, plain);
        st.ghost.seen |= seen::REENTRY;
        return Acquired::Reentered(token);
    }
    if waiting {
        purge_dead(st, env);
    }
    if st.master.lock.is_none() {
        match first_live(st) {
            Some(head) if head.owner != owner => {
                // Free, but a live waiter is first: it gets the lock.
                hand_off(st, env);
            }
            _ => {
                let arrival = st
                    .master
                    .queue
                    .iter()
                    .find(|w| w.owner == owner)
                    .map(|w| w.arrival);
                leave_queue(st, owner);
                return Acquired::Took(take(st, owner, lease, true, nonce, arrival));
            }
        }
    }
    // Held by another: queue (if absent) and refresh the liveness.
    let ttl = env.scenario.waiter_ttl;
    let alive = now.saturating_add(ttl);
    if let Some(w) = st.master.queue.iter_mut().find(|w| w.owner == owner) {
        w.alive = alive;
        return Acquired::Queued(w.arrival, alive);
    }
    st.master.seq += 1;
    let arrival = st.master.seq;
    st.master.queue.push(Waiter {
        owner,
        arrival,
        alive,
        lease,
        ttl,
        nonce,
    });
    Acquired::Queued(arrival, alive)
}

/// The reply of `release`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Released {
    /// 1: the last hold; the lock is free or handed over.
    Fully,
    /// 0: still held (count − 1).
    Partly,
    /// -1 / -2: not this acquisition's hold.
    NotHeld,
}

/// `release.lua` (with `release_fast.lua` in front), with the hold's token.
pub(crate) fn release(st: &mut State, env: Env<'_>, owner: Owner, token: Token) -> Released {
    let Some(lock) = st.master.lock.as_mut() else {
        return Released::NotHeld;
    };
    if !env.variant.release_ignores_owner && (lock.owner != owner || lock.token != token) {
        return Released::NotHeld;
    }
    if lock.count > 1 {
        lock.count -= 1;
        return Released::Partly;
    }
    release_fully(st, env);
    Released::Fully
}

/// The undo of an attempt whose reply was lost, after its `give_up`
/// (`acquire/attempt.rs`): a release scoped to the acquisition's secret
/// (`release.lua` with the nonce: the hold that names it, if any). The
/// `undo_by_count` variant is the earlier undo: one release when the
/// owner's count is above the base the acquisition read.
pub(crate) fn undo_release(st: &mut State, env: Env<'_>, owner: Owner, base: u8, nonce: Nonce) {
    let Some(lock) = st.master.lock.as_mut() else {
        return;
    };
    let ours = if env.variant.undo_by_count {
        lock.owner == owner && lock.count > base
    } else {
        lock.owner == owner && lock.nonce == nonce
    };
    if !ours {
        return;
    }
    if lock.count > 1 {
        lock.count -= 1;
    } else {
        release_fully(st, env);
    }
}

/// `give_up.lua`: leave the line; a grant that raced the give-up (this
/// acquisition's, unclaimed) is passed on.
pub(crate) fn give_up(st: &mut State, env: Env<'_>, owner: Owner, nonce: Nonce) {
    leave_queue(st, owner);
    if let Some(lock) = &st.master.lock {
        if lock.owner == owner && !lock.claimed && lock.nonce == nonce {
            release_fully(st, env);
        }
    }
}

/// `force_release.lua`: remove the holder, hand the lock on, publish the
/// revocation to the holder's client. Ghost: the removed hold's belief is
/// excused until its client reads the revocation.
pub(crate) fn force_release(st: &mut State, env: Env<'_>) -> bool {
    let Some(lock) = st.master.lock.clone() else {
        return false;
    };
    st.ghost.excused.push((lock.owner, lock.token));
    release_fully(st, env);
    st.clients[client_of(lock.owner)].inbox.push(Msg::Revoke);
    true
}

/// `renew.lua` for one lock: held by `owner` under `token` → with a lease,
/// claimed and extended (PEXPIRE GT); true. Otherwise false (lost).
pub(crate) fn renew(
    st: &mut State,
    env: Env<'_>,
    owner: Owner,
    token: Token,
    lease: Option<u8>,
) -> bool {
    let now = st.now;
    let plain = env.variant.renew_may_shorten || env.variant.renewal_shortens;
    match st.master.lock.as_mut() {
        Some(lock)
            if lock.owner == owner && (lock.token == token || env.variant.renew_ignores_token) =>
        {
            if let Some(ms) = lease {
                lock.claimed = true;
                pexpire(lock, now, ms, plain);
            }
            true
        }
        _ => false,
    }
}
