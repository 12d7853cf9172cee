//! The crates as they are published: the `rust-version` both declare is
//! the true minimum, the highest `rust-version` among the locked
//! dependencies (`cargo metadata` reports each package's). Packaging itself
//! (`cargo package --workspace`) runs in `scripts/test`.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// `1.88` or `1.85.0` as comparable numbers (a missing patch is 0).
fn version(text: &str) -> (u64, u64, u64) {
    let mut parts = text.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn metadata() -> Value {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON")
}

#[test]
fn rust_version_is_the_highest_minimum_of_the_locked_dependencies() {
    let meta = metadata();
    let packages: BTreeMap<&str, &Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let members: BTreeSet<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let nodes: BTreeMap<&str, &Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();

    // What a user of the crates builds: normal and build dependencies,
    // followed from the workspace members (their dev-dependencies apart).
    let mut used: BTreeSet<&str> = BTreeSet::new();
    let mut next: Vec<&str> = members.iter().copied().collect();
    while let Some(id) = next.pop() {
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let for_users = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null() || k["kind"] == "build");
            let dep_id = dep["pkg"].as_str().unwrap();
            if for_users && !members.contains(dep_id) && used.insert(dep_id) {
                next.push(dep_id);
            }
        }
    }
    let minimum_of = |ids: &mut dyn Iterator<Item = &&str>| {
        ids.filter_map(|id| {
            let p = packages[*id];
            Some((version(p["rust_version"].as_str()?), p["name"].as_str()?))
        })
        .max()
        .unwrap()
    };
    let (needed, by) = minimum_of(&mut used.iter());
    for member in &members {
        let p = packages[member];
        let declared = p["rust_version"].as_str().expect("a rust-version");
        assert_eq!(
            version(declared),
            needed,
            "{} declares rust-version {declared}; {by} needs {needed:?}",
            p["name"]
        );
    }
    // The tests build with it too: no locked package needs more.
    let all: Vec<&str> = packages.keys().copied().collect();
    let (highest, by) = minimum_of(&mut all.iter());
    assert!(
        highest <= needed,
        "{by} needs {highest:?}, above {needed:?}"
    );
}
