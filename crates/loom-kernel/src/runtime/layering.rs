//! Keeps docs/ARCHITECTURE.md's picture of `runtime/` true of the imports: the modules import
//! one another in layers, with no cycle; `machine/` imports no I/O module; only the façade's own
//! files name the façade.
//!
//! Read from the sources as text: a module's imports are its `crate::runtime::<module>` paths
//! (also inside `use crate::runtime::{...}` groups) and, in a file directly under `runtime/`,
//! its `super::<module>::` paths. A capitalised name after `crate::runtime::` is the façade
//! (`mod.rs`: `Runtime`, `RuntimeBuilder` and the re-exports).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The façade, as a node of the graph.
const FACADE: &str = "mod";

/// The files that add methods to the façade (`impl Runtime` blocks) and so name it.
const FACADE_FILES: &[&str] = &[
    "authorize",
    "builder",
    "catchup",
    "parked",
    "requests",
    "wait_ended",
];

/// What `machine/` may import: the log's and the effect's contracts and pure helpers.
const MACHINE_MAY_IMPORT: &[&str] = &["codes", "contain", "digest", "effect", "history", "markers"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("runtime/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module a file belongs to: its first path component under `runtime/`.
fn module_of(root: &Path, file: &Path) -> (String, bool) {
    let relative = file.strip_prefix(root).expect("under runtime/");
    let mut parts = relative.components();
    let first = parts.next().expect("a file").as_os_str().to_string_lossy();
    let top_level = parts.next().is_none();
    (first.trim_end_matches(".rs").to_owned(), top_level)
}

fn identifier_at(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The modules (or the façade) a source file imports, its comments and tests left out.
fn imports(source: &str, top_level: bool) -> BTreeSet<String> {
    let code: String = source
        .split("#[cfg(test)]\nmod tests")
        .next()
        .unwrap_or_default()
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = BTreeSet::new();
    let mut note = |name: &str| {
        if name.starts_with(|c: char| c.is_ascii_uppercase()) {
            found.insert(FACADE.to_owned());
        } else if !name.is_empty() && name != "self" {
            found.insert(name.to_owned());
        }
    };
    for (at, _) in code.match_indices("crate::runtime::") {
        let rest = &code[at + "crate::runtime::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                note(identifier_at(item.trim()));
            }
        } else {
            note(identifier_at(rest));
        }
    }
    if top_level {
        for (at, _) in code.match_indices("super::") {
            let rest = &code[at + "super::".len()..];
            let name = identifier_at(rest);
            if rest[name.len()..].starts_with("::") || name.starts_with(char::is_uppercase) {
                note(name);
            }
        }
    }
    found
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let (module, top_level) = module_of(&root, &file);
        let source = std::fs::read_to_string(&file).expect("a source file");
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(
            imports(&source, top_level)
                .into_iter()
                .filter(|m| *m != module),
        );
    }
    let known: BTreeSet<String> = graph.keys().cloned().collect();
    for targets in graph.values_mut() {
        targets.retain(|m| known.contains(m));
    }
    graph
}

/// The modules that lie on a cycle, found by removing, again and again, every module that
/// imports nothing left.
fn on_a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<String> {
    let mut left: BTreeMap<String, BTreeSet<String>> = graph
        .iter()
        .filter(|(module, _)| *module != FACADE)
        .map(|(module, targets)| {
            let targets = targets.iter().filter(|t| *t != FACADE).cloned().collect();
            (module.clone(), targets)
        })
        .collect();
    loop {
        let leaves: Vec<String> = left
            .iter()
            .filter(|(_, targets)| targets.iter().all(|t| !left.contains_key(t)))
            .map(|(module, _)| module.clone())
            .collect();
        if leaves.is_empty() {
            return left.into_keys().collect();
        }
        for leaf in leaves {
            left.remove(&leaf);
        }
    }
}

#[test]
fn the_runtime_s_modules_import_one_another_without_a_cycle() {
    let graph = graph();
    assert!(graph.contains_key("driver") && graph.contains_key("machine"));
    let cycle = on_a_cycle(&graph);
    assert!(cycle.is_empty(), "modules on an import cycle: {cycle:?}");
}

#[test]
fn only_the_facade_s_own_files_name_the_facade() {
    let graph = graph();
    let naming: Vec<&String> = graph
        .iter()
        .filter(|(module, targets)| {
            targets.contains(FACADE) && !FACADE_FILES.contains(&module.as_str())
        })
        .map(|(module, _)| module)
        .collect();
    assert!(
        naming.is_empty(),
        "lower modules that import the façade: {naming:?}"
    );
    let imported: Vec<&String> = graph
        .iter()
        .filter(|(_, targets)| targets.iter().any(|t| FACADE_FILES.contains(&t.as_str())))
        .map(|(module, _)| module)
        .collect();
    assert!(
        imported.is_empty(),
        "modules that import a façade file: {imported:?}"
    );
}

#[test]
fn the_machine_imports_no_io_module() {
    let graph = graph();
    let beyond: Vec<&String> = graph["machine"]
        .iter()
        .filter(|m| !MACHINE_MAY_IMPORT.contains(&m.as_str()))
        .collect();
    assert!(beyond.is_empty(), "machine/ imports {beyond:?}");
}

#[test]
fn a_cycle_is_found_when_there_is_one() {
    let mut graph = graph();
    graph
        .get_mut("markers")
        .expect("markers.rs")
        .insert("driver".to_owned());
    assert!(on_a_cycle(&graph).contains("driver"));
}
