//! The design of the read-write lock and the semaphore (`docs/kinds.md`):
//! the faithful model holds every property and shows each witness, and
//! every deliberate bug is caught by the property it breaks.

use std::collections::HashSet;

use fairlock_model::weighted::{
    CAPACITY, Config, Mutant, SOME_ABOVE_ADMITTED, SOME_ENTRY_WAIT, SOME_LOWERED, SOME_RAISED,
    SOME_RECOUNT_DUE, SOME_REGRANT, SOME_REQUEUED, SOME_REWRITTEN, SOME_STALE_ADMIT,
    W_BELIEF_BACKED, W_FIFO, W_HOLD_WEIGHT, W_META, W_NO_IDLE, W_PLACE_KEPT, W_SAFETY, W_TOKENS,
    W_WITNESSES, WeightedModel,
};
use stateright::{Checker, Model};

/// Run the checker to the end; the properties it found a path for.
fn discovered(model: WeightedModel) -> (HashSet<&'static str>, usize) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let checker = model.checker().threads(threads).spawn_bfs().join();
    let found = checker.discoveries().keys().copied().collect();
    (found, checker.unique_state_count())
}

fn holds(config: Config, witnesses: &[&str]) {
    let (found, states) = discovered(WeightedModel::new(config.clone()));
    let broken: Vec<_> = W_SAFETY.iter().filter(|p| found.contains(*p)).collect();
    assert!(
        broken.is_empty(),
        "{config:?}: {broken:?} ({states} states)"
    );
    for witness in witnesses {
        assert!(W_WITNESSES.contains(witness));
        assert!(
            found.contains(witness),
            "{config:?}: never \"{witness}\" ({states} states): the model went vacuous"
        );
    }
    eprintln!("{config:?}: {states} states, every property holds");
}

#[test]
fn a_semaphore_shares_within_its_permits_in_order() {
    holds(
        Config::semaphore(),
        &[
            "sometimes two holders at once",
            "sometimes a group is admitted at once",
        ],
    );
}

#[test]
fn a_read_write_lock_admits_readers_together_and_writers_alone() {
    holds(
        Config::read_write(),
        &[
            "sometimes two holders at once",
            "sometimes a group is admitted at once",
        ],
    );
}

#[test]
fn a_dead_holders_permit_comes_back() {
    holds(
        Config::crashes(),
        &["sometimes a dead holder's weight comes back"],
    );
}

/// Stale meta (the holders set expired with the last hold keys while a
/// waiter kept meta): a give-up or a force-release admitting the head
/// keeps its weight recorded, and meta counts what is held.
#[test]
fn a_head_admitted_on_stale_meta_is_counted() {
    holds(Config::stale_meta(), &[SOME_STALE_ADMIT]);
}

/// Records written over by another program: a waiter's line record of
/// weight 0 is a lost record (the waiter gets in once its next attempt
/// wrote it again), a holder's weight in meta that is not a weight gives
/// back the hold key's (or `used` counted again).
#[test]
fn records_written_over_by_another_program_are_lost_records() {
    holds(Config::foreign_data(), &[SOME_REWRITTEN]);
}

/// Line records written over with another weight than the request: a
/// grant made at it is only a wake-up to its waiter, whose claim corrects
/// the hold (lowered; raised when it fits; else given back, the waiter
/// back at the head of the line); a record above the capacity waits at
/// the head until its waiter's next attempt writes it again.
#[test]
fn records_written_over_with_another_weight_are_corrected_in_place() {
    holds(
        Config::forged_weights(),
        &[
            SOME_RAISED,
            SOME_REQUEUED,
            SOME_LOWERED,
            SOME_ABOVE_ADMITTED,
        ],
    );
}

/// Grants left unclaimed past their expiry while more holders are due
/// than one reclaim takes: a waiter granted again under its own id has its
/// old entry in the holders set reclaimed first (`make_way`), so its
/// permits are counted once; its hold key lost before its lease ended, it
/// is not granted again before that entry is due.
#[test]
fn a_waiter_granted_again_under_its_own_id_is_counted_once() {
    holds(Config::regrant(), &[SOME_REGRANT, SOME_ENTRY_WAIT]);
}

/// A recount of `used` (a reclaimed holder's weight in meta written over)
/// while another holder is due and left for a later reclaim counts that
/// one with the weight meta records, which its reclaim gives back once.
#[test]
fn a_recount_beside_a_due_holder_gives_nothing_back_twice() {
    holds(Config::recount(), &[SOME_RECOUNT_DUE]);
}

fn caught(mutant: Mutant, config: Config, property: &str) {
    let (found, states) = discovered(WeightedModel::mutated(config, mutant));
    assert!(
        found.contains(property),
        "{mutant:?}: \"{property}\" not violated ({states} states; found {found:?})"
    );
}

#[test]
fn every_mutant_is_caught() {
    caught(Mutant::AdmitPastCapacity, Config::read_write(), CAPACITY);
    caught(Mutant::Overtake, Config::semaphore(), W_FIFO);
    caught(Mutant::FastPathIgnoresLine, Config::semaphore(), W_FIFO);
    caught(Mutant::ReclaimLive, Config::crashes(), W_BELIEF_BACKED);
    caught(Mutant::TokenReused, Config::semaphore(), W_TOKENS);
    caught(Mutant::NoAdmitOnRelease, Config::semaphore(), W_NO_IDLE);
    caught(Mutant::StaleCleanupAfterAdded, Config::stale_meta(), W_META);
    // The force-release alone: no waiter's budget ends within the run.
    let forced_only = Config {
        budget: 6,
        ..Config::stale_meta()
    };
    caught(Mutant::StaleCleanupAfterAdded, forced_only, W_META);
    // A grant at a record of weight 0 is only a wake-up to its waiter,
    // whose claim corrects the hold as a lowered record's: what is wrong
    // is the hold of weight 0 it wrote.
    caught(
        Mutant::AdmitWeightZero,
        Config::foreign_data(),
        W_HOLD_WEIGHT,
    );
    caught(Mutant::WeightReadAsZero, Config::foreign_data(), W_META);
    caught(
        Mutant::GrantIgnoresWeight,
        Config::forged_weights(),
        CAPACITY,
    );
    caught(
        Mutant::RefuseNeverFits,
        Config::forged_weights(),
        W_PLACE_KEPT,
    );
    // A grant over its own old entry: its old weight stays in `used` (and,
    // over an entry whose key was lost early, the waiter may trust the old
    // grant's message: "belief backed" too).
    caught(Mutant::RegrantOverEntry, Config::regrant(), W_META);
    // A recount leaving the due holder out: `used` below what is held.
    caught(Mutant::RecountSkipsDue, Config::recount(), W_META);
    assert_eq!(
        Mutant::ALL.len(),
        13,
        "a new mutant needs its line above (or its reason there)"
    );
}
