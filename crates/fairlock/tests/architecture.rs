//! The library's layout rules, checked on its sources (see
//! `docs/architecture.md`):
//! - no import circle among the top-level modules of `src/`, nor among the
//!   modules inside `src/transport/`;
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
    paths_after(code, "crate::", |name| {
        modules.contains(name).then(|| name.to_owned())
    })
}

/// What `code` names right after `prefix` (`crate::`, `super::`): the
/// first name of each path, or of each part of a group (`prefix{a::X, b}`),
/// mapped by `resolve` (`None`: not counted).
fn paths_after(
    code: &str,
    prefix: &str,
    resolve: impl Fn(&str) -> Option<String>,
) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices(prefix) {
        let rest = &code[at + prefix.len()..];
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
            if let Some(target) = resolve(&ident) {
                found.insert(target);
            }
        }
    }
    found
}

/// Panic with the first import circle of `graph` (module -> the modules it
/// refers to), found by a depth-first search for a back edge.
fn assert_no_circle(graph: &BTreeMap<String, BTreeSet<String>>) {
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
        visit(node, graph, &mut Vec::new(), &mut done);
    }
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
    assert_no_circle(&graph);
}

/// The module of `src/transport/` a file belongs to (`None` for its
/// `mod.rs` and for files elsewhere).
fn transport_module_of(path: &Path) -> Option<String> {
    let rest = path.strip_prefix("transport").ok()?;
    let first = rest.components().next()?.as_os_str().to_string_lossy();
    let module = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (module != "mod").then_some(module)
}

/// The items `transport/mod.rs` re-exports (`pub(crate) use module::{A,
/// B};`), each with the module it comes from.
fn transport_reexports(mod_rs: &str) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    for statement in mod_rs.split(';') {
        let statement = statement.trim();
        let Some(at) = statement.find("use ") else {
            continue;
        };
        let path: String = statement[at + "use ".len()..]
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        let names = names.trim_start_matches('{').trim_end_matches('}');
        for name in names.split(',').filter(|n| !n.is_empty()) {
            let name = name.rsplit("::").next().unwrap_or(name);
            let name = name.split_once("as").map_or(name, |(_, alias)| alias);
            items.insert(name.to_owned(), module.to_owned());
        }
    }
    items
}

#[test]
fn no_import_circles_inside_the_transport() {
    let files = sources();
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|(p, _)| transport_module_of(p))
        .collect();
    let mod_rs = files
        .iter()
        .find(|(p, _)| p == Path::new("transport/mod.rs"))
        .map(|(_, text)| code(Path::new("transport/mod.rs"), text))
        .expect("src/transport/mod.rs");
    let reexports = transport_reexports(&mod_rs);
    // A name after `super::` or `crate::transport::`: a module of the
    // transport, or an item `mod.rs` re-exports from one.
    let resolve = |name: &str| {
        if modules.contains(name) {
            Some(name.to_owned())
        } else {
            reexports.get(name).cloned()
        }
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (path, text) in &files {
        let Some(module) = transport_module_of(path) else {
            continue;
        };
        let code = code(path, text);
        let mut uses = paths_after(&code, "super::", resolve);
        uses.extend(paths_after(&code, "crate::transport::", resolve));
        uses.remove(&module);
        graph.entry(module).or_default().extend(uses);
    }
    // The parsing must see real edges: the dispatcher uses the topologies.
    assert!(graph["connection"].contains("cluster"), "{graph:#?}");
    assert!(graph["connection"].contains("sentinel"), "{graph:#?}");
    assert!(graph["connection"].contains("pubsub"), "{graph:#?}");
    assert_eq!(
        reexports.get("Connection").map(String::as_str),
        Some("connection")
    );
    assert_no_circle(&graph);
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
