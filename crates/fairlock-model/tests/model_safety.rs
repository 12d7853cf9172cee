//! The correct model: every safety property holds in every scenario
//! (exhaustive BFS within each scenario's bounds), and every `sometimes`
//! witness is seen, so the check is not vacuous.

use std::time::Instant;

use fairlock_model::properties::WITNESSES;
use fairlock_model::{NativeModel, Scenario, Variant, check, format_path};

#[test]
fn correct_model_holds_and_is_not_vacuous() {
    let started = Instant::now();
    let mut witnessed = Vec::new();
    let mut states = 0;
    for scenario in Scenario::all() {
        let name = scenario.name;
        let model = NativeModel::new(scenario, Variant::default());
        let outcome = check(model.clone(), None, false);
        if let Some((property, path)) = outcome.violations.first() {
            panic!(
                "scenario {name}: \"{property}\" violated:\n{}",
                format_path(&model, path)
            );
        }
        // A scenario that explores little is a bound gone wrong.
        assert!(
            outcome.states > 1000,
            "scenario {name}: only {} states",
            outcome.states
        );
        eprintln!(
            "scenario {name}: {} states, depth {}",
            outcome.states, outcome.depth
        );
        states += outcome.states;
        witnessed.extend(outcome.witnessed);
    }
    for w in WITNESSES {
        assert!(witnessed.contains(&w), "never witnessed: {w}");
    }
    eprintln!("{states} states in {:.1?}", started.elapsed());
}

#[test]
fn min_replicas_keeps_exclusion_across_a_failover() {
    // The replicas scenario must actually fail over with beliefs at stake:
    // its exclusion is not waived (min_replicas is on).
    let scenario = Scenario::replicas();
    assert!(scenario.min_replicas && scenario.failovers == 1);
    let outcome = check(NativeModel::new(scenario, Variant::default()), None, false);
    assert!(outcome.violations.is_empty());
    assert!(
        outcome
            .witnessed
            .contains(&fairlock_model::properties::SOME_FAILOVER)
    );
}
