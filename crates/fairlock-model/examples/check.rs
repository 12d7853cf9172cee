//! Check the model of the native protocol for one variant.
//!
//! `cargo run --release -p fairlock-model --example check -- --variant NAME
//! [--depth N] [--scenario NAME] [--extra-time N]`: runs every scenario (or
//! the one named; `--extra-time` adds ticks to each one's time bound),
//! prints each counterexample one step a line, and ends with one verdict
//! line. Exit status: 0 when every property holds, 1 on a violation, 2 when
//! the check was inconclusive, 3 on a usage error.
//!
//! `--variant weighted:NAME` checks the model of the other kinds' engine
//! (`fairlock_model::weighted`: the read-write lock and the semaphore)
//! instead, `NAME` being `correct` or one of its mutants in snake case
//! (`admit_past_capacity`, ...), on its eight configurations (a semaphore,
//! a read-write lock, crashing holders, stale meta, records written by
//! another program, line records written over with other weights, grants
//! left unclaimed and granted again, a recount beside due holders).
//!
//! `--variant election:NAME` checks the model of the leader election
//! (`fairlock_model::election`), `NAME` being `correct` or one of its
//! mutants (`proclaim_unfenced`, ...), with two and with three candidates.

use std::process::ExitCode;
use std::time::Instant;

use fairlock_model::{NativeModel, Scenario, VARIANT_NAMES, Variant, check, format_path};

fn usage(problem: &str) -> ExitCode {
    eprintln!("{problem}");
    eprintln!(
        "usage: check [--variant NAME] [--depth N] [--scenario NAME] [--extra-time N]\nvariants: {}",
        VARIANT_NAMES.join(", ")
    );
    ExitCode::from(3)
}

fn main() -> ExitCode {
    let mut variant_name = "correct".to_owned();
    let mut depth = None;
    let mut only = None;
    let mut extra_time = 0u8;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next();
        match (arg.as_str(), value) {
            ("--variant", Some(v)) => variant_name = v,
            ("--depth", Some(v)) => match v.parse::<usize>() {
                Ok(n) => depth = Some(n),
                Err(_) => return usage("--depth takes a number"),
            },
            ("--scenario", Some(v)) => only = Some(v),
            ("--extra-time", Some(v)) => match v.parse::<u8>() {
                Ok(n) if n <= 10 => extra_time = n,
                _ => return usage("--extra-time takes a number up to 10"),
            },
            _ => return usage(&format!("unexpected argument {arg}")),
        }
    }
    if let Some(name) = variant_name.strip_prefix("weighted:") {
        return weighted(name);
    }
    if let Some(name) = variant_name.strip_prefix("election:") {
        return election(name);
    }
    let Some(variant) = Variant::named(&variant_name) else {
        return usage(&format!("unknown variant {variant_name}"));
    };
    let scenarios: Vec<Scenario> = match &only {
        Some(name) => match Scenario::named(name) {
            Some(s) => vec![s],
            None => return usage(&format!("unknown scenario {name}")),
        },
        None => Scenario::all(),
    };
    let mut total = 0;
    let mut witnessed = Vec::new();
    for mut scenario in scenarios {
        scenario.max_time += extra_time;
        let name = scenario.name;
        let model = NativeModel::new(scenario, variant);
        let started = Instant::now();
        let outcome = check(model.clone(), depth, true);
        total += outcome.states;
        println!(
            "scenario {name}: {} states, depth {}, {:.1?}",
            outcome.states,
            outcome.depth,
            started.elapsed()
        );
        if let Some((property, _)) = outcome.violations.first() {
            // The headline one last, nearest the verdict.
            for (name, path) in outcome.violations.iter().rev() {
                println!(
                    "counterexample to \"{name}\" ({} steps):",
                    path.clone().into_actions().len()
                );
                print!("{}", format_path(&model, path));
            }
            println!("verdict: violation of {property}");
            return ExitCode::from(1);
        }
        for w in outcome.witnessed {
            if !witnessed.contains(&w) {
                witnessed.push(w);
            }
        }
    }
    println!("witnessed: {}", witnessed.join(", "));
    if total < 2 || witnessed.is_empty() {
        println!("verdict: inconclusive");
        return ExitCode::from(2);
    }
    println!("verdict: holds ({total} states)");
    ExitCode::SUCCESS
}

/// The weighted engine's model, correct or with the mutant `name`, on each
/// of its configurations: the first violated property, else whether every
/// witness was seen.
fn weighted(name: &str) -> ExitCode {
    use fairlock_model::weighted::{Config, Mutant, W_SAFETY, W_WITNESSES, WeightedModel};
    use stateright::{Checker, Model};
    let mutant = match name {
        "correct" => None,
        other => match Mutant::named(other) {
            Some(mutant) => Some(mutant),
            None => return usage(&format!("unknown weighted variant {other}")),
        },
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut witnessed: Vec<&str> = Vec::new();
    let mut total = 0;
    for (config_name, config) in [
        ("semaphore", Config::semaphore()),
        ("read_write", Config::read_write()),
        ("crashes", Config::crashes()),
        ("stale_meta", Config::stale_meta()),
        ("foreign_data", Config::foreign_data()),
        ("forged_weights", Config::forged_weights()),
        ("regrant", Config::regrant()),
        ("recount", Config::recount()),
    ] {
        let model = match mutant {
            Some(mutant) => WeightedModel::mutated(config, mutant),
            None => WeightedModel::new(config),
        };
        let started = Instant::now();
        let checker = model.checker().threads(threads).spawn_bfs().join();
        total += checker.unique_state_count();
        println!(
            "configuration {config_name}: {} states, {:.1?}",
            checker.unique_state_count(),
            started.elapsed()
        );
        let discoveries = checker.discoveries();
        if let Some(property) = W_SAFETY.iter().find(|p| discoveries.contains_key(*p)) {
            let path = &discoveries[property];
            println!(
                "counterexample to \"{property}\" ({} steps):",
                path.clone().into_actions().len()
            );
            for action in path.clone().into_actions() {
                println!("  {action:?}");
            }
            println!("verdict: violation of {property}");
            return ExitCode::from(1);
        }
        for witness in W_WITNESSES {
            if discoveries.contains_key(witness) && !witnessed.contains(&witness) {
                witnessed.push(witness);
            }
        }
    }
    println!("witnessed: {}", witnessed.join(", "));
    if witnessed.len() < W_WITNESSES.len() {
        println!("verdict: inconclusive");
        return ExitCode::from(2);
    }
    println!("verdict: holds ({total} states)");
    ExitCode::SUCCESS
}

/// The election's model, correct or with the mutant `name`, with two and
/// three candidates: the first violated property, else whether every
/// witness was seen.
fn election(name: &str) -> ExitCode {
    use fairlock_model::election::{E_SAFETY, E_WITNESSES, ElectionModel, Mutant};
    use stateright::{Checker, Model};
    let mutant = match name {
        "correct" => None,
        other => match Mutant::named(other) {
            Some(mutant) => Some(mutant),
            None => return usage(&format!("unknown election variant {other}")),
        },
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut witnessed: Vec<&str> = Vec::new();
    let mut total = 0;
    for (clients, max_time) in [(2, 6), (3, 5)] {
        let model = ElectionModel {
            clients,
            max_time,
            mutant,
        };
        let started = Instant::now();
        let checker = model.checker().threads(threads).spawn_bfs().join();
        total += checker.unique_state_count();
        println!(
            "{clients} candidates, {max_time} ticks: {} states, {:.1?}",
            checker.unique_state_count(),
            started.elapsed()
        );
        let discoveries = checker.discoveries();
        if let Some(property) = E_SAFETY.iter().find(|p| discoveries.contains_key(*p)) {
            let path = &discoveries[property];
            println!(
                "counterexample to \"{property}\" ({} steps):",
                path.clone().into_actions().len()
            );
            for action in path.clone().into_actions() {
                println!("  {action:?}");
            }
            println!("verdict: violation of {property}");
            return ExitCode::from(1);
        }
        for witness in E_WITNESSES {
            if discoveries.contains_key(witness) && !witnessed.contains(&witness) {
                witnessed.push(witness);
            }
        }
    }
    println!("witnessed: {}", witnessed.join(", "));
    if witnessed.len() < E_WITNESSES.len() {
        println!("verdict: inconclusive");
        return ExitCode::from(2);
    }
    println!("verdict: holds ({total} states)");
    ExitCode::SUCCESS
}
