//! Check the model of the native protocol for one variant.
//!
//! `cargo run --release -p fairlock-model --example check -- --variant NAME
//! [--depth N] [--scenario NAME] [--extra-time N]`: runs every scenario (or
//! the one named; `--extra-time` adds ticks to each one's time bound),
//! prints each counterexample one step a line, and ends with one verdict
//! line. Exit status: 0 when every property holds, 1 on a violation, 2 when
//! the check was inconclusive, 3 on a usage error.

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
