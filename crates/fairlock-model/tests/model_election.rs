//! The leader election (`docs/election.md`): the faithful model holds every
//! property and shows each witness, and every deliberate bug (a proclaim
//! that does not check its term among them) is caught by the property it
//! breaks.

use std::collections::HashSet;

use fairlock_model::election::{
    E_SAFETY, E_WITNESSES, ElectionModel, LOG_ORDER, Mutant, OBSERVED, ONE_LEADER, TERMS,
};
use stateright::{Checker, Model};

/// Run the checker to the end; the properties it found a path for.
fn discovered(model: ElectionModel) -> (HashSet<&'static str>, usize) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let checker = model.checker().threads(threads).spawn_bfs().join();
    let found = checker.discoveries().keys().copied().collect();
    (found, checker.unique_state_count())
}

#[test]
fn the_election_holds_every_property() {
    for model in [
        ElectionModel::new(),
        ElectionModel {
            clients: 3,
            max_time: 5,
            mutant: None,
        },
    ] {
        let (found, states) = discovered(model.clone());
        let broken: Vec<_> = E_SAFETY.iter().filter(|p| found.contains(*p)).collect();
        assert!(broken.is_empty(), "{model:?}: {broken:?} ({states} states)");
        for witness in E_WITNESSES {
            assert!(
                found.contains(witness),
                "{model:?}: never \"{witness}\" ({states} states): the model went vacuous"
            );
        }
        eprintln!("{model:?}: {states} states, every property holds");
    }
}

#[test]
fn every_mutant_is_caught() {
    for (mutant, property) in [
        (Mutant::ProclaimUnfenced, LOG_ORDER),
        (Mutant::BeliefPastLease, ONE_LEADER),
        (Mutant::TermReused, TERMS),
        (Mutant::ObserverSkipsHistory, OBSERVED),
    ] {
        let (found, states) = discovered(ElectionModel::mutated(mutant));
        assert!(
            found.contains(property),
            "{mutant:?} not caught by \"{property}\" ({states} states): {found:?}"
        );
        assert_eq!(Mutant::named(mutant.name()), Some(mutant));
    }
}
