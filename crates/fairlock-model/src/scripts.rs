//! The Lua scripts of `crates/fairlock/src/protocol/native/` (the lock's
//! key layout version 2: `lock_prelude.lua`), each one atomic step on the
//! master (a script runs alone on the server).
//!
//! Abstractions: time is the tick (`TIME` is `State::now`); the lock is
//! absent once its expiry tick is reached (keys expire at tick boundaries);
//! the free marker and the line's own TTLs are not modelled (they outlive
//! every use); the release's answer (the request id in the marker, the
//! partial release's cache) is left out because replies are never lost
//! here (a script call and its reply are one step); the type checks are
//! left out (no other writer touches the keys); a waiter's record is
//! written on every attempt (the scripts skip the write while it is fresh,
//! which only ever keeps a deadline that has not passed); non-fair waiters
//! wait too long to be overtaken once they joined in an earlier tick (100 ms
//! in the scripts, shorter than any tick).

use crate::scenario::Scenario;
use crate::state::{Lock, Marker, Msg, Nonce, Owner, State, Token, Waiter, client_of, seen};
use crate::variant::Variant;

/// How many tokens fit in one tick of the clock term of `next_token`
/// (`max(last + 1, now in µs)`): more grants than this in one tick would
/// break the clock term's guarantee, as more than one per µs does. Arrival
/// numbers use the same clock.
const TOKENS_PER_TICK: Token = 16;

/// The reply of `acquire`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acquired {
    /// `{1, token}` (the fast path: the token alone): a new hold (or a
    /// claimed grant).
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
    /// The bounds (waiter ttl, fair or not).
    pub(crate) scenario: &'a Scenario,
}

/// Set the lock's expiry to `now + ms`: PEXPIRE GT (never shorter), or a
/// plain PEXPIRE when `plain`.
fn pexpire(lock: &mut Lock, now: u8, ms: u8, plain: bool) {
    let to = now.saturating_add(ms);
    lock.expires = if plain { to } else { lock.expires.max(to) };
}

/// `leave_line(owner)`.
fn leave_line(st: &mut State, owner: Owner) {
    st.master.queue.retain(|w| w.owner != owner);
}

/// Is `owner` in line?
fn in_line(st: &State, owner: Owner) -> bool {
    st.master.queue.iter().any(|w| w.owner == owner)
}

/// The `purge_drops_live` mutant: waiters are dropped before their liveness
/// passed (a tick early), anywhere in the line. (The layout before version 2
/// also purged dead waiters from the middle of the line; version 2 drops
/// them at the head only, in `first_live`, each once.)
fn purge(st: &mut State, env: Env<'_>) {
    if env.variant.purge_drops_live {
        let now = st.now;
        st.master.queue.retain(|w| w.alive > now.saturating_add(1));
    }
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

/// A non-fair waiter that joined the line in an earlier tick has waited too
/// long to be overtaken (`starving`).
fn starving(st: &State, waiter: &Waiter) -> bool {
    waiter.arrival < Token::from(st.now) * TOKENS_PER_TICK
}

/// The last token the lock key remembers: the holder's, or the free
/// marker's; none once the key is gone.
fn last_token(st: &State) -> Token {
    match (&st.master.lock, &st.master.marker) {
        (Some(lock), _) => lock.token,
        (None, Some(marker)) => marker.token,
        (None, None) => 0,
    }
}

/// `next_token`: above the last token and not below the clock term. The
/// `take_without_clock` mutant (on the fast path only) skips the clock term
/// where a marker remembers a token.
fn next_token(st: &State, env: Env<'_>, fast: bool) -> Token {
    let last = last_token(st);
    if fast && env.variant.take_without_clock && st.master.marker.is_some() {
        return last + 1;
    }
    (last + 1).max(Token::from(st.now) * TOKENS_PER_TICK)
}

/// Write the lock's value for a new hold of `owner`: a new token, `waiting`
/// the flag w. Ghost: token order and FIFO are checked here, where every
/// grant is made. `arrival` is the taker's place in line (None: it was not
/// queued).
#[allow(clippy::too_many_arguments)]
fn take(
    st: &mut State,
    env: Env<'_>,
    fast: bool,
    owner: Owner,
    expire: u8,
    claimed: bool,
    (waiting, woken): (bool, bool),
    nonce: Nonce,
    arrival: Option<u32>,
) -> Token {
    let token = next_token(st, env, fast);
    if token <= st.ghost.max_token {
        st.ghost.token_regressed = true;
    }
    st.ghost.max_token = st.ghost.max_token.max(token);
    // Taken: whatever the lock was at the last tick, it is not idle now.
    st.ghost.idle_last_tick = false;
    if st.epoch == 0 && env.scenario.fair && passes_over_live_waiter(st, owner, arrival) {
        st.ghost.fifo_broken = true;
    }
    st.master.marker = None;
    st.master.lock = Some(Lock {
        owner,
        count: 1,
        token,
        claimed,
        waiting,
        woken,
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

/// `hand_off`: `head` takes the lock for min(its lease, its waiter ttl),
/// unclaimed, the value keeping w, and is told on its channel.
fn hand_off(st: &mut State, env: Env<'_>, head: Waiter) {
    let expire = if env.variant.handoff_full_lease {
        head.lease
    } else {
        head.lease.min(head.ttl)
    }
    .max(1);
    let waiting = !env.variant.handoff_drops_w;
    let token = take(
        st,
        env,
        false,
        head.owner,
        expire,
        false,
        (waiting, false),
        head.nonce,
        Some(head.arrival),
    );
    leave_line(st, head.owner);
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
}

/// Free the lock: the marker (with the flags given), the token kept.
fn free(st: &mut State, token: Token, waiting: bool, woken: bool) {
    st.master.lock = None;
    st.master.marker = Some(Marker {
        token,
        waiting,
        woken,
    });
}

/// `release_fully`: without w, the marker alone. Otherwise the first live
/// waiter gets the lock (fair, or a non-fair one that waited too long), or
/// (non-fair) it is woken with `free` and the marker says so (w and k).
fn release_fully(st: &mut State, env: Env<'_>, waiting: bool) {
    let token = last_token(st);
    if !waiting {
        free(st, token, false, false);
        return;
    }
    purge(st, env);
    match first_live(st) {
        None => free(st, token, false, false),
        Some(head) if env.scenario.fair || starving(st, &head) => hand_off(st, env, head),
        Some(head) => {
            free(st, token, true, true);
            st.ghost.seen |= seen::WOKEN;
            st.clients[client_of(head.owner)]
                .inbox
                .push(Msg::Free { owner: head.owner });
        }
    }
}

/// `acquire.lua` (with `acquire_fast.lua` in front), mode `queue`.
pub(crate) fn acquire(
    st: &mut State,
    env: Env<'_>,
    owner: Owner,
    lease: u8,
    base: u8,
    nonce: Nonce,
) -> Acquired {
    let fair = env.scenario.fair;
    // The fast path: free, and the lock key says nobody waits (a marker
    // without w, or no key and an empty line), or (non-fair) the marker
    // says the head was woken and the caller is not in line. The mutant
    // ignores the holder.
    if st.master.lock.is_none() || env.variant.fast_path_takes_held {
        let fast = match &st.master.marker {
            _ if st.master.lock.is_some() => st.master.queue.is_empty().then_some(false),
            None => st.master.queue.is_empty().then_some(false),
            Some(m) if !m.waiting => Some(false),
            // Taken past the woken waiter: the value keeps w and k (its
            // release wakes nobody while that waiter is on its way).
            Some(m) if !fair && m.woken && (env.variant.barge_from_line || !in_line(st, owner)) => {
                st.ghost.seen |= seen::BARGE;
                Some(!env.variant.barge_drops_w)
            }
            Some(_) => None,
        };
        if let Some(waiting) = fast {
            let flags = (waiting, waiting && !fair);
            return Acquired::Took(take(st, env, true, owner, lease, true, flags, nonce, None));
        }
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
            leave_line(st, owner);
            return if count == 1 {
                Acquired::Took(token)
            } else {
                Acquired::Reentered(token)
            };
        }
        // Re-entry: the value records this acquisition's secret, claimed.
        lock.count += 1;
        lock.nonce = nonce;
        lock.claimed |= !env.variant.reentry_leaves_unclaimed;
        pexpire(lock, now, lease, plain);
        st.ghost.seen |= seen::REENTRY;
        return Acquired::Reentered(token);
    }
    purge(st, env);
    if st.master.lock.is_none() {
        match first_live(st) {
            Some(head) if head.owner != owner && (fair || starving(st, &head)) => {
                // Free, but a live waiter is first (a fair one, or one that
                // waited too long to be overtaken): it gets the lock.
                hand_off(st, env, head);
            }
            _ => {
                let arrival = st
                    .master
                    .queue
                    .iter()
                    .find(|w| w.owner == owner)
                    .map(|w| w.arrival);
                let rest = st.master.queue.iter().any(|w| w.owner != owner);
                let token = take(
                    st,
                    env,
                    false,
                    owner,
                    lease,
                    true,
                    (rest, false),
                    nonce,
                    arrival,
                );
                leave_line(st, owner);
                return Acquired::Took(token);
            }
        }
    }
    // Held by another: queue (if absent) and refresh the liveness; the
    // held value gets w (invariant W) unless the mutant leaves it out, and
    // loses k (a waiter is back: the next release wakes the head again).
    if let Some(lock) = st.master.lock.as_mut() {
        lock.woken = false;
    }
    let ttl = env.scenario.waiter_ttl;
    let alive = now.saturating_add(ttl);
    if let Some(w) = st.master.queue.iter_mut().find(|w| w.owner == owner) {
        w.alive = alive;
        return Acquired::Queued(w.arrival, alive);
    }
    if !env.variant.join_without_w {
        if let Some(lock) = st.master.lock.as_mut() {
            lock.waiting = true;
        }
    }
    let tail = st.master.queue.last().map_or(0, |w| w.arrival);
    let arrival = (tail + 1).max(Token::from(now) * TOKENS_PER_TICK);
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
    // The fast path frees without looking at the line when the value has
    // no w (the mutant: whatever the value says), or (non-fair) w and k: the
    // marker keeps them, and nobody is woken (the woken waiter is on its
    // way).
    let waiting = lock.waiting && !env.variant.release_ignores_w;
    if waiting && lock.woken && !env.scenario.fair {
        let token = lock.token;
        free(st, token, true, true);
        return Released::Fully;
    }
    release_fully(st, env, waiting);
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
        let waiting = lock.waiting;
        release_fully(st, env, waiting);
    }
}

/// `give_up.lua`: leave the line; a grant that raced the give-up (this
/// acquisition's, unclaimed) is passed on; a non-fair waiter that leaves a
/// free lock wakes the next one (it may have been the one a release woke).
pub(crate) fn give_up(st: &mut State, env: Env<'_>, owner: Owner, nonce: Nonce) {
    let queued = in_line(st, owner);
    leave_line(st, owner);
    if let Some(lock) = st.master.lock.as_mut() {
        if lock.owner == owner && !lock.claimed && lock.nonce == nonce {
            let waiting = lock.waiting;
            release_fully(st, env, waiting);
        } else if queued {
            // The leaver may be the waiter a release woke: the holder's
            // release wakes the next one.
            lock.woken = false;
        }
        return;
    }
    let waiting = st.master.marker.as_ref().is_none_or(|m| m.waiting);
    if queued && !env.scenario.fair && waiting {
        if let Some(head) = first_live(st) {
            if starving(st, &head) {
                hand_off(st, env, head);
            } else {
                st.clients[client_of(head.owner)]
                    .inbox
                    .push(Msg::Free { owner: head.owner });
            }
        }
    }
}

/// `force_release.lua`: remove the holder, pass the lock on, publish the
/// revocation to the holder's client. Ghost: the removed hold's belief is
/// excused until its client reads the revocation.
pub(crate) fn force_release(st: &mut State, env: Env<'_>) -> bool {
    let Some(lock) = st.master.lock.clone() else {
        return false;
    };
    st.ghost.excused.push((lock.owner, lock.token));
    release_fully(st, env, lock.waiting);
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
