//! The switches that turn a fix off, or a safety mutant on.

/// Which fixes the model leaves out and which mutants it puts in. The
/// default is the protocol as it should be: every fix in, no mutant.
///
/// Each field is one known hole (its fix "reverted") or one safety mutant
/// of `scripts/mutants`; with any of them set the checker must find a
/// counterexample (the tests in `tests/` assert which property fails).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Variant {
    /// Hole 1: renewals and re-entries set the lease with a plain PEXPIRE
    /// (they may shorten it), and a re-entry's reply sets the client's
    /// belief to its own end even when shorter than what it had.
    pub renew_may_shorten: bool,
    /// Hole 2: a revocation read together with (after) a grant is checked
    /// against the registered holds before the grant's hold is registered;
    /// the grant is then trusted.
    pub revocation_before_registration_lost: bool,
    /// Hole 3: with `min_replicas`, the claim and the renewals extend the
    /// belief without waiting for the replica (only the acquisition is
    /// WAITed for).
    pub claim_not_replica_acked: bool,
    /// Hole 4: tasks of one client acquire and release with one owner
    /// concurrently (no per-owner serialization): each reads the hold count
    /// (base) before its script runs.
    pub concurrent_same_owner: bool,
    /// Mutant: the acquire fast path takes the lock when nobody is queued,
    /// even if it is held.
    pub fast_path_takes_held: bool,
    /// Mutant: a handoff grant lasts the waiter's lease, not
    /// min(lease, waiter ttl).
    pub handoff_full_lease: bool,
    /// Mutant: `renew` checks the owner only, not the token.
    pub renew_ignores_token: bool,
    /// Mutant: `renew` sets the lease with a plain PEXPIRE (it may shorten
    /// a longer lease a re-entry set).
    pub renewal_shortens: bool,
    /// Mutant: a waiter believes a grant much longer than the server keeps
    /// it (10 s in the implementation; [`GRANT_OVERTRUST`] ticks here).
    pub grant_overtrusted: bool,
    /// Mutant: a claim that finds the lock not its own counts as a success.
    pub failed_claim_succeeds: bool,
    /// Mutant: dead waiters are dropped a tick early: waiters whose
    /// liveness has not passed yet go too.
    pub purge_drops_live: bool,
    /// Mutant: `release` does not check the owner (nor its token).
    pub release_ignores_owner: bool,
    /// The shared-owner finding: the undo of a lost reply releases a hold
    /// when the owner's count is above the base it read (a release of
    /// another guard in between hides the attempt's hold).
    pub undo_by_count: bool,
    /// The review of its fix: a re-entry writes its secret but leaves a
    /// handed-over hold unclaimed (a give-up naming the secret then passes
    /// the lock on under the holder's guard).
    pub reentry_leaves_unclaimed: bool,
    /// The torture's ghost-waiter finding: a waiter trusts an authentic,
    /// fresh grant message even when it was made before the waiter's last
    /// attempt ran (that attempt found the grant gone and queued it again).
    pub stale_grant_trusted: bool,
    /// Layout version 2, mutant: the release's fast path frees the lock
    /// (the marker, no handoff) even when the held value has w.
    pub release_ignores_w: bool,
    /// Layout version 2, mutant: a waiter joins the line without setting w
    /// in the held value (invariant W broken).
    pub join_without_w: bool,
    /// Layout version 2, mutant: a handoff writes the new holder's value
    /// without w, while others may still wait.
    pub handoff_drops_w: bool,
    /// Layout version 2, mutant (a non-fair take racing a wake-up): the
    /// fast path lets a waiter still in line take a marker with k (it
    /// holds, and stays in line).
    pub barge_from_line: bool,
    /// Layout version 2, mutant (a non-fair take racing a wake-up): a
    /// taker of a marker with k writes its value without w, though the
    /// woken waiter is still in line.
    pub barge_drops_w: bool,
    /// Layout version 2, mutant: the fast path's token is the marker's + 1,
    /// without the clock term (no TIME call).
    pub take_without_clock: bool,
}

/// How many ticks longer than the server's grant the `grant_overtrusted`
/// mutant believes a grant.
pub const GRANT_OVERTRUST: u8 = 10;

/// The names of the variants (`--variant NAME`), `correct` first.
pub const VARIANT_NAMES: [&str; 22] = [
    "correct",
    "renew_may_shorten",
    "revocation_before_registration_lost",
    "claim_not_replica_acked",
    "concurrent_same_owner",
    "fast_path_takes_held",
    "handoff_full_lease",
    "renew_ignores_token",
    "renewal_shortens",
    "grant_overtrusted",
    "failed_claim_succeeds",
    "purge_drops_live",
    "release_ignores_owner",
    "undo_by_count",
    "reentry_leaves_unclaimed",
    "stale_grant_trusted",
    "release_ignores_w",
    "join_without_w",
    "handoff_drops_w",
    "barge_from_line",
    "barge_drops_w",
    "take_without_clock",
];

impl Variant {
    /// The variant named `name` (one of [`VARIANT_NAMES`]).
    pub fn named(name: &str) -> Option<Variant> {
        let mut v = Variant::default();
        match name {
            "correct" => {}
            "renew_may_shorten" => v.renew_may_shorten = true,
            "revocation_before_registration_lost" => v.revocation_before_registration_lost = true,
            "claim_not_replica_acked" => v.claim_not_replica_acked = true,
            "concurrent_same_owner" => v.concurrent_same_owner = true,
            "fast_path_takes_held" => v.fast_path_takes_held = true,
            "handoff_full_lease" => v.handoff_full_lease = true,
            "renew_ignores_token" => v.renew_ignores_token = true,
            "renewal_shortens" => v.renewal_shortens = true,
            "grant_overtrusted" => v.grant_overtrusted = true,
            "failed_claim_succeeds" => v.failed_claim_succeeds = true,
            "purge_drops_live" => v.purge_drops_live = true,
            "release_ignores_owner" => v.release_ignores_owner = true,
            "undo_by_count" => v.undo_by_count = true,
            "reentry_leaves_unclaimed" => v.reentry_leaves_unclaimed = true,
            "stale_grant_trusted" => v.stale_grant_trusted = true,
            "release_ignores_w" => v.release_ignores_w = true,
            "join_without_w" => v.join_without_w = true,
            "handoff_drops_w" => v.handoff_drops_w = true,
            "barge_from_line" => v.barge_from_line = true,
            "barge_drops_w" => v.barge_drops_w = true,
            "take_without_clock" => v.take_without_clock = true,
            _ => return None,
        }
        Some(v)
    }
}
