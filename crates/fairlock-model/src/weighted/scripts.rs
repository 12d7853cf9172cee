//! The scripts of the weighted engine, each one atomic step of the
//! model: `acquire` (which also refreshes and claims), `release`,
//! `give_up`, `renew` and an operator's `force_release`, with what they
//! share (the reclaim, `make_way`, the admission, meta's bookkeeping). See
//! the parent module for what is modelled.

use super::*;

impl WeightedModel {
    /// The faithful design.
    pub fn new(config: Config) -> WeightedModel {
        WeightedModel {
            config,
            mutant: None,
        }
    }

    /// The design with `mutant` put in.
    pub fn mutated(config: Config, mutant: Mutant) -> WeightedModel {
        WeightedModel {
            config,
            mutant: Some(mutant),
        }
    }

    pub(super) fn is(&self, mutant: Mutant) -> bool {
        self.mutant == Some(mutant)
    }

    /// The weight held: what the holders were granted.
    pub(super) fn used(st: &WState) -> u8 {
        st.holders.iter().map(|h| h.weight).sum()
    }

    /// What every script reads first (`sem_read`): when the holders set
    /// expired with the last hold keys (none of them reclaimed: meta still
    /// counts them), nothing is held, and meta is stale: `used` is 0 for
    /// this script, and meta's recorded weights are deleted at its first
    /// write of meta ([`Self::write_meta`]). Returns whether meta is stale.
    pub(super) fn begin(&self, st: &mut WState) -> bool {
        if self.config.stale_meta && !st.holders.is_empty() && st.set_until <= st.now {
            st.holders.clear();
            st.set_until = 0;
        }
        let stale = st.holders.is_empty() && st.meta_used > 0;
        if stale {
            st.meta_used = 0;
        }
        stale
    }

    /// A write of meta (`sem_write`): on stale meta, first every weight it
    /// records is deleted (those of the holds that expired unseen, and of
    /// any holder already recorded in this script).
    pub(super) fn write_meta(st: &mut WState, stale: &mut bool) {
        if *stale {
            for h in &mut st.holders {
                h.recorded = Record::Deleted;
            }
            *stale = false;
        }
    }

    /// A grant made (`kind.added`): `used` grows by its weight, meta is
    /// written, and its weight recorded, in that order (the mutant
    /// [`Mutant::StaleCleanupAfterAdded`]: recorded first).
    pub(super) fn added(&self, st: &mut WState, stale: &mut bool, mut holder: SHolder) {
        if *stale {
            st.stale_admit = true;
        }
        if holder.weight < 1 {
            st.weightless_hold = true;
        }
        st.meta_used += holder.weight;
        if self.config.stale_meta {
            st.set_until = st.set_until.max(holder.expires);
        }
        holder.recorded = Record::Kept(holder.weight);
        // One entry per id (a sorted set): a grant writes over an entry its
        // id still has (none but for the mutant
        // [`Mutant::RegrantOverEntry`]: `make_way` reclaims it first), whose
        // weight then stays counted in `used`.
        st.holders
            .retain(|h| !(h.client == holder.client && h.round == holder.round));
        if self.is(Mutant::StaleCleanupAfterAdded) {
            st.holders.push(holder);
            Self::write_meta(st, stale);
        } else {
            Self::write_meta(st, stale);
            st.holders.push(holder);
        }
    }

    /// A hold ended (`kind.removed`), its holder already out of the list:
    /// `key_weight` is its hold key's weight when the script read it (a
    /// release, a give-up, a force-release of a live hold), none when the
    /// key is gone (a reclaim). Without it, meta's record; that lost or
    /// written over, `used` is counted again from the holds.
    pub(super) fn removed(
        &self,
        st: &mut WState,
        stale: &mut bool,
        gone: &SHolder,
        key_weight: Option<u8>,
    ) {
        let recorded = match gone.recorded {
            Record::Kept(w) => Some(w),
            Record::Deleted | Record::Forged => None,
        };
        let weight = if self.is(Mutant::WeightReadAsZero) {
            Some(recorded.unwrap_or(0))
        } else {
            key_weight.or(recorded)
        };
        match weight {
            Some(weight) => st.meta_used = st.meta_used.saturating_sub(weight),
            None => {
                // count_holds: a holder whose key lives counts its key's
                // weight (stored in meta with it); one whose lease ended,
                // left for a later reclaim, the weight meta records, which
                // that reclaim gives back (none when that is lost; the
                // mutant [`Mutant::RecountSkipsDue`] leaves it out).
                let now = st.now;
                let skip_due = self.is(Mutant::RecountSkipsDue);
                let mut used = 0;
                let cap = self.config.capacity;
                for h in &mut st.holders {
                    if h.key_lives(now) {
                        used += h.weight;
                        h.recorded = Record::Kept(h.weight);
                    } else if h.expires > now {
                        // Its key lost while its lease runs: meta's weight,
                        // that lost too the whole capacity (stored).
                        let w = match h.recorded {
                            Record::Kept(w) => w,
                            Record::Deleted | Record::Forged => cap,
                        };
                        used += w;
                        h.recorded = Record::Kept(w);
                    } else if let Record::Kept(w) = h.recorded
                        && !skip_due
                    {
                        used += w;
                        st.recount_due = true;
                    }
                }
                st.meta_used = used;
            }
        }
        Self::write_meta(st, stale);
    }

    /// The first step of every script: expired holders go, at most
    /// [`RECLAIM_LIMIT`] of them, the soonest due first (ties by id, as a
    /// sorted set orders them); the others stay, counted, for a later
    /// script. (Dead waiters stay in line until they reach its head:
    /// [`Self::admit`] drops them there, as the scripts' `first_live` does,
    /// key layout version 2.)
    pub(super) fn reclaim(&self, st: &mut WState, stale: &mut bool) {
        let now = st.now;
        let early = u8::from(self.is(Mutant::ReclaimLive));
        for _ in 0..RECLAIM_LIMIT {
            let Some(i) = st
                .holders
                .iter()
                .enumerate()
                .filter(|(_, h)| h.expires <= now + early)
                .min_by_key(|(_, h)| (h.expires, h.client, h.round))
                .map(|(i, _)| i)
            else {
                break;
            };
            let h = st.holders.remove(i);
            if st.clients[usize::from(h.client)].crashed {
                st.reclaimed_dead = true;
            }
            self.removed(st, stale, &h, None);
        }
    }

    /// `make_way`, before a grant to client `c`'s acquisition `round` (its
    /// hold key gone): an entry it still has in the holders set (a grant
    /// it did not claim in time, left for a later reclaim) is reclaimed
    /// now, its weight given back, when due; not due (its key lost before
    /// its lease ends) it counts until then, and the grant waits. The
    /// mutant [`Mutant::RegrantOverEntry`] leaves the entry, which the grant
    /// then writes over. Returns whether it may be granted, and whether it
    /// reclaimed an entry.
    pub(super) fn make_way(
        &self,
        st: &mut WState,
        stale: &mut bool,
        c: u8,
        round: u8,
    ) -> (bool, bool) {
        if self.is(Mutant::RegrantOverEntry) {
            return (true, false);
        }
        let Some(i) = st
            .holders
            .iter()
            .position(|h| h.client == c && h.round == round)
        else {
            return (true, false);
        };
        if st.holders[i].expires > st.now {
            st.entry_waited = true;
            return (false, false);
        }
        let h = st.holders.remove(i);
        self.removed(st, stale, &h, None);
        (true, true)
    }

    /// Dead waiters at the head of the line go, however many (each once);
    /// the head is then live, or the line empty.
    pub(super) fn drop_dead_heads(st: &mut WState) {
        while st.line.first().is_some_and(|w| w.alive_until <= st.now) {
            st.line.remove(0);
        }
    }

    /// Remove the holders `which` selects, each ended with its key's
    /// weight when its key lives.
    pub(super) fn drop_holds(
        &self,
        st: &mut WState,
        stale: &mut bool,
        which: impl Fn(&SHolder) -> bool,
    ) {
        let now = st.now;
        let (gone, kept): (Vec<SHolder>, Vec<SHolder>) =
            std::mem::take(&mut st.holders).into_iter().partition(which);
        st.holders = kept;
        for h in &gone {
            let key_weight = h.key_lives(now).then_some(h.weight);
            self.removed(st, stale, h, key_weight);
        }
    }

    pub(super) fn next_token(&self, st: &mut WState) -> u16 {
        let token = if self.is(Mutant::TokenReused) && st.token > 0 {
            st.token
        } else {
            st.token + 1
        };
        if token <= st.token {
            st.token_regressed = true;
        }
        st.token = token;
        token
    }

    /// The weight a waiter's record names, as the admission reads it:
    /// none below 1 (a lost record; the mutant [`Mutant::AdmitWeightZero`]
    /// reads 0).
    pub(super) fn record_weight(&self, w: &SWaiter) -> Option<u8> {
        (w.record >= 1 || self.is(Mutant::AdmitWeightZero)).then_some(w.record)
    }

    /// Hand the object to the head of the line while it fits, then to the
    /// next head, each at the weight its record names; each grant is
    /// published to its waiter (with that weight) and lasts min(lease,
    /// waiter ttl) until claimed. A head whose record names no weight, or
    /// one that never fits (above the capacity), waits at the head as one
    /// that does not fit now (its next attempt writes its record again;
    /// the mutant [`Mutant::RefuseNeverFits`] refuses it: out of the line).
    pub(super) fn admit(&self, st: &mut WState, stale: &mut bool) {
        let mut granted = 0;
        loop {
            Self::drop_dead_heads(st);
            let used = st.meta_used;
            let cap = self.config.capacity;
            let fits = |w: &SWaiter| {
                self.record_weight(w)
                    .is_some_and(|weight| used + weight <= cap)
            };
            if self.is(Mutant::RefuseNeverFits)
                && st
                    .line
                    .first()
                    .and_then(|w| self.record_weight(w))
                    .is_some_and(|weight| weight > cap)
            {
                // Told 'refused' (a message the model leaves out: the
                // waiter's next attempt is its refresh, due every tick).
                st.line.remove(0);
                continue;
            }
            let pick = if self.is(Mutant::AdmitPastCapacity) {
                st.line
                    .first()
                    .filter(|w| self.record_weight(w).is_some())
                    .map(|_| 0)
            } else if self.is(Mutant::Overtake) {
                st.line.iter().position(fits)
            } else {
                st.line.first().filter(|w| fits(w)).map(|_| 0)
            };
            let Some(i) = pick else { break };
            if i > 0 {
                st.fifo_broken = true;
            }
            let now = st.now;
            let (wc, wr) = (st.line[i].client, st.line[i].round);
            if st
                .holders
                .iter()
                .any(|h| h.client == wc && h.round == wr && h.key_lives(now))
            {
                // Its hold key lives (never, in the model): it leaves the
                // line ungranted.
                st.line.remove(i);
                continue;
            }
            // Its own old entry reclaimed before the grant when due (fitting
            // was decided with it counted, as the scripts do); not due, it
            // keeps its place and nobody passes it.
            let (may, made) = self.make_way(st, stale, wc, wr);
            if !may {
                break;
            }
            if made {
                st.regranted = true;
            }
            let w = st.line.remove(i);
            match st.forged_record {
                Some((c, round, forged)) if c == w.client && round == w.round => {
                    if forged == 0 {
                        st.rewritten_admit = true;
                    }
                    if forged > cap {
                        st.above_admitted = true;
                    }
                    if st.requeued {
                        st.requeued_admit = true;
                    }
                }
                _ => {}
            }
            let token = self.next_token(st);
            let expires = st.now + self.config.lease.min(self.config.waiter_ttl);
            let holder = SHolder {
                client: w.client,
                round: w.round,
                weight: w.record,
                token,
                expires,
                claimed: false,
                recorded: Record::Deleted,
                key: true,
            };
            self.added(st, stale, holder);
            st.clients[usize::from(w.client)].inbox.push(Grant {
                round: w.round,
                token,
                expires,
                weight: w.record,
            });
            granted += 1;
        }
        if granted >= 2 {
            st.group = true;
        }
    }

    /// Observed after every script (not a step of it): a live head that
    /// fits left waiting is a bug (the ghost flag the property reads), but
    /// one whose record is not its request (lost or written over: it waits
    /// for its next attempt to write it again); so is meta not counting
    /// what is held. The holders set goes with its last holder.
    pub(super) fn end(&self, st: &mut WState) {
        let now = st.now;
        if st
            .line
            .iter()
            .find(|w| w.alive_until > now)
            .is_some_and(|w| {
                let weight = self.config.weights[usize::from(w.client)];
                // A head whose own old entry runs (its key lost) waits for
                // it (make_way).
                let own_entry = st
                    .holders
                    .iter()
                    .any(|h| h.client == w.client && h.round == w.round && h.expires > now);
                w.record == weight && !own_entry && Self::used(st) + weight <= self.config.capacity
            })
        {
            st.idle_head = true;
        }
        let lost = st
            .holders
            .iter()
            .any(|h| h.recorded != Record::Forged && h.recorded != Record::Kept(h.weight));
        if st.meta_used != Self::used(st) || lost {
            st.meta_off = true;
        }
        if st.holders.is_empty() {
            st.set_until = 0;
        }
    }

    pub(super) fn acquire(&self, st: &mut WState, c: u8) {
        let mut stale = self.begin(st);
        // sem_acquire writes meta first when it is stale.
        Self::write_meta(st, &mut stale);
        let now = st.now;
        let round = st.clients[usize::from(c)].round;
        let weight = self.config.weights[usize::from(c)];
        // Its record written again when it is not the one it wrote.
        for w in st.line.iter_mut().filter(|w| w.client == c) {
            w.record = weight;
        }
        // Its own hold key (a grant made to it) as read before the reclaim.
        let mine = |h: &SHolder| h.client == c && h.round == round && h.key_lives(now);
        let held = st.holders.iter().any(mine);
        self.reclaim(st, &mut stale);
        // Its own old entry (a grant it did not claim in time, or whose key
        // was lost), left by the reclaim: reclaimed before any grant to it
        // when due, else no grant before it is (make_way).
        let (clear, made_way) = if held {
            (true, false)
        } else {
            self.make_way(st, &mut stale, c, round)
        };
        self.admit(st, &mut stale);
        // Handed over (now or earlier) to this acquisition: claim it, at
        // its request's weight.
        if let Some(i) = st.holders.iter().position(mine) {
            let held = st.holders[i].weight;
            let cap = self.config.capacity;
            let correct = held != weight && !self.is(Mutant::GrantIgnoresWeight);
            if correct && held < weight && st.meta_used + (weight - held) > cap {
                // Granted at a record another program wrote below the
                // request, and too big to raise: given back, and the waiter
                // goes back to the head of the line with its record written
                // right, and waits on (below). It does not fit (that is why
                // it was given back): nobody is admitted.
                self.drop_holds(st, &mut stale, mine);
                st.line.insert(
                    0,
                    SWaiter {
                        client: c,
                        round,
                        record: weight,
                        alive_until: now + self.config.waiter_ttl,
                    },
                );
                st.requeued = true;
            } else {
                if correct {
                    // Granted at a record another program wrote over: the
                    // hold is corrected to the request (raised: it fits).
                    if held > weight {
                        st.meta_used = st.meta_used.saturating_sub(held - weight);
                        st.lowered = true;
                    } else {
                        st.meta_used += weight - held;
                        st.raised = true;
                    }
                    st.holders[i].weight = weight;
                    st.holders[i].recorded = Record::Kept(weight);
                }
                let h = &mut st.holders[i];
                h.claimed = true;
                h.expires = h.expires.max(now + self.config.lease);
                let (token, until) = (h.token, h.expires);
                if self.config.stale_meta {
                    st.set_until = st.set_until.max(until);
                }
                st.line.retain(|w| w.client != c);
                if correct && held > weight {
                    // Lowered: the weight given back makes room.
                    self.admit(st, &mut stale);
                }
                self.end(st);
                st.clients[usize::from(c)].phase = WPhase::Holding { token, until };
                return;
            }
        }
        // (The admission dropped the dead at the head: a waiter in line is
        // a live one ahead, unless it is this one.)
        let live_ahead = st.line.iter().any(|w| w.alive_until > now);
        if st.line.iter().any(|w| w.client == c && w.round == round) {
            for w in st.line.iter_mut().filter(|w| w.client == c) {
                w.alive_until = now + self.config.waiter_ttl;
            }
        } else if clear
            && (!live_ahead || self.is(Mutant::FastPathIgnoresLine))
            && st.meta_used + weight <= self.config.capacity
        {
            if live_ahead {
                st.fifo_broken = true;
            }
            if made_way {
                st.regranted = true;
            }
            let token = self.next_token(st);
            let until = now + self.config.lease;
            let holder = SHolder {
                client: c,
                round,
                weight,
                token,
                expires: until,
                claimed: true,
                recorded: Record::Deleted,
                key: true,
            };
            self.added(st, &mut stale, holder);
            self.end(st);
            st.clients[usize::from(c)].phase = WPhase::Holding { token, until };
            return;
        } else {
            st.line.push(SWaiter {
                client: c,
                round,
                record: weight,
                alive_until: now + self.config.waiter_ttl,
            });
        }
        self.end(st);
        let client = &mut st.clients[usize::from(c)];
        client.phase = match client.phase {
            WPhase::Waiting { deadline, .. } => WPhase::Waiting {
                deadline,
                refreshed: true,
            },
            _ => WPhase::Waiting {
                deadline: now + self.config.budget,
                refreshed: true,
            },
        };
    }

    pub(super) fn finish_round(&self, st: &mut WState, c: u8) {
        let client = &mut st.clients[usize::from(c)];
        client.round += 1;
        client.inbox.retain(|g| g.round >= client.round);
        client.phase = if client.round >= self.config.rounds {
            WPhase::Done
        } else {
            WPhase::Ready
        };
    }

    pub(super) fn give_up(&self, st: &mut WState, c: u8) {
        let mut stale = self.begin(st);
        self.reclaim(st, &mut stale);
        let round = st.clients[usize::from(c)].round;
        st.line.retain(|w| w.client != c);
        // Its grant, when its key lives (one whose lease ended waits for
        // a reclaim).
        let now = st.now;
        self.drop_holds(st, &mut stale, |h| {
            h.client == c && h.round == round && h.key_lives(now)
        });
        self.admit(st, &mut stale);
        self.end(st);
        self.finish_round(st, c);
    }

    /// Whether client `c`'s hold under `token` lives (its key has not
    /// expired).
    pub(super) fn holds(st: &WState, c: u8, token: u16) -> bool {
        st.holders
            .iter()
            .any(|h| h.client == c && h.token == token && h.key_lives(st.now))
    }

    pub(super) fn release(&self, st: &mut WState, c: u8, token: u16) {
        if !Self::holds(st, c, token) {
            // Its key gone: the script answers 'not held' before it reads
            // or writes anything else.
            self.finish_round(st, c);
            return;
        }
        let mut stale = self.begin(st);
        self.reclaim(st, &mut stale);
        self.drop_holds(st, &mut stale, |h| h.client == c && h.token == token);
        if !self.is(Mutant::NoAdmitOnRelease) {
            self.admit(st, &mut stale);
        }
        self.end(st);
        self.finish_round(st, c);
    }

    pub(super) fn renew(&self, st: &mut WState, c: u8, token: u16) {
        if !Self::holds(st, c, token) {
            // Lost (its key gone): the client is told and stops holding;
            // the renewal touches nothing else.
            self.finish_round(st, c);
            return;
        }
        let mut stale = self.begin(st);
        self.reclaim(st, &mut stale);
        let now = st.now;
        let lease = self.config.lease;
        let renewed = st
            .holders
            .iter_mut()
            .find(|h| h.client == c && h.token == token)
            .map(|h| {
                h.claimed = true;
                h.expires = h.expires.max(now + lease);
                h.expires
            });
        if let Some(until) = renewed
            && self.config.stale_meta
        {
            st.set_until = st.set_until.max(until);
        }
        self.admit(st, &mut stale);
        self.end(st);
        match renewed {
            Some(until) => st.clients[usize::from(c)].phase = WPhase::Holding { token, until },
            // Lost: the client is told and stops holding.
            None => self.finish_round(st, c),
        }
    }

    /// Every hold given back (a live one with its key's weight); each
    /// holder's client told at once (a grant message on its way is
    /// revoked with it); then the line admitted.
    pub(super) fn force_release(&self, st: &mut WState) {
        st.forced = true;
        let mut stale = self.begin(st);
        let revoked: Vec<(u8, u16)> = st.holders.iter().map(|h| (h.client, h.token)).collect();
        self.drop_holds(st, &mut stale, |_| true);
        for (c, token) in revoked {
            let client = &mut st.clients[usize::from(c)];
            client.inbox.retain(|g| g.token != token);
            if matches!(client.phase, WPhase::Holding { token: t, .. } if t == token) {
                self.finish_round(st, c);
            }
        }
        self.reclaim(st, &mut stale);
        self.admit(st, &mut stale);
        self.end(st);
    }

    /// Whether the step `action` from `last` to `st` took a live waiter
    /// out of the line otherwise than by a grant (its acquisition holds),
    /// its own give-up or its death (its place's ttl ran out). Its claim
    /// takes it out once it holds, i.e. by a grant.
    pub(super) fn place_lost(last: &WState, st: &WState, action: &WAction) -> bool {
        last.line.iter().any(|w| {
            let kept = |x: &SWaiter| x.client == w.client && x.round == w.round;
            let granted = st
                .holders
                .iter()
                .any(|h| h.client == w.client && h.round == w.round && h.key_lives(st.now));
            !st.line.iter().any(kept)
                && !granted
                && *action != WAction::GiveUp(w.client)
                && w.alive_until > st.now
        })
    }

    pub(super) fn believers(st: &WState) -> impl Iterator<Item = (u8, u16, u8)> + '_ {
        st.clients
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.crashed)
            .filter_map(move |(i, c)| match c.phase {
                WPhase::Holding { token, until } if until > st.now => Some((i as u8, token, until)),
                _ => None,
            })
    }
}
