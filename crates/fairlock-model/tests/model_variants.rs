//! Every known hole (its fix switched off) and every safety mutant is
//! caught by the model: the checker finds a counterexample to the
//! expected property. If one of these fails, the model has gone vacuous
//! where that fix matters.

use fairlock_model::properties::{
    BELIEF_BACKED, COUNT_BACKED, FIFO, GRANT_BOUNDED, MUTUAL_EXCLUSION, NO_GHOST_WAITER,
    TOKENS_INCREASE,
};
use fairlock_model::{NativeModel, Scenario, Variant, check, format_path};

/// Check `variant` in `scenario`; assert `property` is violated and print
/// the counterexample.
fn caught(variant: &str, scenario: Scenario, property: &str) {
    let v = Variant::named(variant).expect("a variant name");
    let model = NativeModel::new(scenario, v);
    let outcome = check(model.clone(), None, true);
    let Some((_, path)) = outcome
        .violations
        .iter()
        .find(|(name, _)| *name == property)
    else {
        let found: Vec<_> = outcome.violations.iter().map(|(n, _)| *n).collect();
        panic!("{variant}: \"{property}\" not violated (found: {found:?})");
    };
    eprintln!("{variant}: \"{property}\":\n{}", format_path(&model, path));
}

#[test]
fn hole_1_renewal_cuts_a_longer_reentry() {
    caught("renew_may_shorten", Scenario::reentry(), MUTUAL_EXCLUSION);
}

#[test]
fn hole_2_revocation_read_with_a_grant() {
    caught(
        "revocation_before_registration_lost",
        Scenario::force_unlock(),
        MUTUAL_EXCLUSION,
    );
}

#[test]
fn hole_3_claim_not_waited_for_with_min_replicas() {
    caught(
        "claim_not_replica_acked",
        Scenario::replicas(),
        MUTUAL_EXCLUSION,
    );
}

#[test]
fn hole_4_one_owner_several_tasks() {
    caught(
        "concurrent_same_owner",
        Scenario::shared_owner(),
        MUTUAL_EXCLUSION,
    );
}

#[test]
fn mutant_fast_path_takes_held_lock() {
    caught(
        "fast_path_takes_held",
        Scenario::handoffs(),
        MUTUAL_EXCLUSION,
    );
}

#[test]
fn mutant_handoff_grant_lasts_the_lease() {
    caught("handoff_full_lease", Scenario::handoffs(), GRANT_BOUNDED);
}

/// A late claim of an expired grant extends a later acquisition of the
/// same owner. (Its counterexample in `force_unlock` went through a waiter
/// trusting a grant older than its last attempt: `stale_grant_trusted`.)
#[test]
fn mutant_renewal_ignores_token() {
    caught("renew_ignores_token", Scenario::lost_reply(), BELIEF_BACKED);
}

#[test]
fn mutant_renewal_shortens_lease() {
    caught("renewal_shortens", Scenario::reentry(), MUTUAL_EXCLUSION);
}

#[test]
fn mutant_grant_believed_too_long() {
    caught("grant_overtrusted", Scenario::handoffs(), BELIEF_BACKED);
}

#[test]
fn mutant_failed_claim_counts() {
    caught("failed_claim_succeeds", Scenario::handoffs(), BELIEF_BACKED);
}

#[test]
fn mutant_purge_drops_live_waiters() {
    caught("purge_drops_live", Scenario::reentry(), FIFO);
}

#[test]
fn mutant_release_ignores_owner() {
    caught("release_ignores_owner", Scenario::handoffs(), BELIEF_BACKED);
}

/// The 20-minute soak's shared-owner finding: the undo of a lost reply
/// that compares the owner's count with the base it read leaves a hold
/// nobody has a guard for when a release (or a fresh take) came between.
#[test]
fn finding_undo_by_count_leaves_a_hold_without_a_guard() {
    caught("undo_by_count", Scenario::lost_reply(), COUNT_BACKED);
}

/// The adversarial review of its fix: a re-entry that writes its secret
/// but leaves a handed-over hold unclaimed lets the undo's give-up pass
/// the lock on under the holder's guard.
#[test]
fn review_reentry_leaving_a_handoff_unclaimed_frees_a_held_lock() {
    caught(
        "reentry_leaves_unclaimed",
        Scenario::lost_reply(),
        BELIEF_BACKED,
    );
}

/// The 20-minute torture's shared-owner finding (commit beb9f95): a
/// waiter's refresh runs after a handoff to it and a force-unlock that
/// passed the lock on, and queues it again; the waiter then reads the
/// grant message and goes on, leaving its new place to be handed the lock
/// with nobody to take it.
#[test]
fn finding_stale_grant_trusted_leaves_a_ghost_waiter() {
    caught(
        "stale_grant_trusted",
        Scenario::force_unlock(),
        NO_GHOST_WAITER,
    );
}

/// Layout version 2: a value without w proves the line empty (invariant
/// W). A release that frees the lock though its value has w leaves the
/// waiter behind a newcomer, and the waiter later takes the free lock while
/// still in line.
#[test]
fn layout_2_release_ignoring_w_passes_over_the_line() {
    caught("release_ignores_w", Scenario::force_unlock(), FIFO);
    caught("release_ignores_w", Scenario::handoffs(), NO_GHOST_WAITER);
}

/// Layout version 2: a waiter that joins without setting w in the held
/// value is never handed the lock.
#[test]
fn layout_2_joining_without_w_passes_over_the_line() {
    caught("join_without_w", Scenario::shared_owner(), FIFO);
    caught("join_without_w", Scenario::nonfair(), NO_GHOST_WAITER);
}

/// Layout version 2: a handoff whose value drops w, with another waiter
/// behind the new holder.
#[test]
fn layout_2_handoff_dropping_w_passes_over_the_line() {
    caught("handoff_drops_w", Scenario::force_unlock(), FIFO);
}

/// Layout version 2, a non-fair take racing a wake-up: a waiter still in
/// line takes the free lock by the fast path (a marker with k) and keeps
/// its place.
#[test]
fn layout_2_nonfair_take_from_the_line_leaves_a_ghost_waiter() {
    caught("barge_from_line", Scenario::nonfair(), NO_GHOST_WAITER);
}

/// Layout version 2, a non-fair take racing a wake-up: the taker that goes
/// before the woken waiter writes no w, so its release wakes nobody, and
/// the waiter finds the free lock by the fast path, still in line.
#[test]
fn layout_2_nonfair_take_dropping_w_leaves_a_ghost_waiter() {
    caught("barge_drops_w", Scenario::nonfair(), NO_GHOST_WAITER);
}

/// Layout version 2: the uncontended take's token continues the free
/// marker's; without the clock term, a failover to a replica whose marker
/// is older than the last grant draws a token already used.
#[test]
fn layout_2_take_without_the_clock_regresses_tokens_after_a_failover() {
    caught("take_without_clock", Scenario::replicas(), TOKENS_INCREASE);
}

#[test]
fn every_variant_name_is_known() {
    for name in fairlock_model::VARIANT_NAMES {
        assert!(Variant::named(name).is_some(), "{name}");
    }
    assert_eq!(Variant::named("correct"), Some(Variant::default()));
    assert!(Variant::named("nonsense").is_none());
}
