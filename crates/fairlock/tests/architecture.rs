//! The library's layout rules, checked on its sources (see
//! `docs/architecture.md`):
//! - no import circle among the top-level modules of `src/`;
//! - only the transport layer (and the opaque error wrapper) names the
//!   Redis client library;
//! - lock events are recorded in one place (`events.rs`), not by ad-hoc
//!   `tracing` macros elsewhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn sources() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("read src") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read file");
                out.push((path, text));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &mut out);
    out.into_iter()
        .map(|(path, text)| (path.strip_prefix(&root).expect("in src").to_owned(), text))
        .collect()
}

/// The code of a file without comments and without its unit tests
/// (test-only code may reach anywhere).
fn code(path: &Path, text: &str) -> String {
    if path
        .file_name()
        .is_some_and(|n| n.to_string_lossy().ends_with("_tests.rs"))
    {
        return String::new();
    }
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level module a file belongs to (`None` for `lib.rs`).
fn module_of(path: &Path) -> Option<String> {
    let first = path
        .components()
        .next()?
        .as_os_str()
        .to_string_lossy()
        .into_owned();
    let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (module != "lib").then_some(module)
}

/// The top-level modules `code` refers to through `crate::`.
fn references(code: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let names: Vec<&str> = if let Some(group) = rest.strip_prefix('{') {
            // `use crate::{a::X, b, c::{..}}`: the first name of each part.
            let mut depth = 0;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => return true,
                        '}' => depth -= 1,
                        _ => {}
                    }
                    false
                })
                .map_or(group.len(), |(i, _)| i);
            let mut parts = Vec::new();
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in group[..end].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        parts.push(&group[start..i]);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            parts.push(&group[start..end]);
            parts
        } else {
            vec![rest]
        };
        for name in names {
            let ident: String = name
                .trim_start()
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&ident) {
                found.insert(ident);
            }
        }
    }
    found
}

#[test]
fn no_import_circles_among_modules() {
    let files = sources();
    let modules: BTreeSet<String> = files.iter().filter_map(|(p, _)| module_of(p)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in &files {
        let Some(module) = module_of(path) else {
            continue;
        };
        let mut uses = references(&code(path, text), &modules);
        uses.remove(&module);
        graph.entry(module).or_default().extend(uses);
    }
    // The layering the docs describe must be real: a few known edges.
    assert!(graph["acquire"].contains("hold"), "{graph:#?}");
    assert!(graph["guard"].contains("hold"), "{graph:#?}");
    // Depth-first search for a back edge.
    fn visit<'a>(
        node: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) {
        if let Some(at) = path.iter().position(|n| *n == node) {
            panic!("import circle: {} -> {node}", path[at..].join(" -> "));
        }
        if done.contains(node) {
            return;
        }
        path.push(node);
        for next in graph.get(node).into_iter().flatten() {
            visit(next, graph, path, done);
        }
        path.pop();
        done.insert(node);
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(node, &graph, &mut Vec::new(), &mut done);
    }
}

#[test]
fn only_the_transport_names_the_redis_client() {
    for (path, text) in sources() {
        let allowed = path.starts_with("transport") || path == Path::new("error.rs");
        if !allowed {
            assert!(
                !code(&path, &text).contains("redis::"),
                "{} names the Redis client library; only src/transport/ may",
                path.display()
            );
        }
    }
}

#[test]
fn events_are_recorded_in_one_place() {
    for (path, text) in sources() {
        if path == Path::new("events.rs") {
            continue;
        }
        let code = code(&path, &text);
        for mac in ["debug!(", "info!(", "warn!(", "error!(", "trace!("] {
            assert!(
                !code.contains(mac),
                "{} logs with {mac}; record an event in src/events.rs instead",
                path.display()
            );
        }
    }
}
