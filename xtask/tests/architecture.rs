//! docs/ARCHITECTURE.md kept true: the crate graph it draws is the manifests' (`cargo
//! metadata`), every source file it names exists, the kernel's root stays small, and no source
//! file grows past 800 lines. Each check reads the workspace as it is; none needs a build.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

fn architecture() -> String {
    std::fs::read_to_string(workspace().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md")
}

type Graph = BTreeMap<String, BTreeSet<String>>;

/// Each workspace crate with the workspace crates among its normal dependencies.
fn manifest_graph() -> Graph {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let names: BTreeSet<&str> = packages.iter().filter_map(|p| p["name"].as_str()).collect();
    packages
        .iter()
        .map(|package| {
            let deps = package["dependencies"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|dep| dep["kind"].is_null())
                .filter_map(|dep| dep["name"].as_str())
                .filter(|name| names.contains(name))
                .map(str::to_owned)
                .collect();
            (
                package["name"].as_str().unwrap_or_default().to_owned(),
                deps,
            )
        })
        .collect()
}

/// The graph the page draws in its `crate-graph` block.
fn documented_graph(page: &str) -> Graph {
    let block = page
        .split("```crate-graph\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/ARCHITECTURE.md has a crate-graph block");
    block
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let (name, deps) = line.split_once("->").expect("`crate -> deps`");
            let deps = deps
                .split(',')
                .map(str::trim)
                .filter(|dep| !dep.is_empty())
                .map(str::to_owned)
                .collect();
            (name.trim().to_owned(), deps)
        })
        .collect()
}

#[test]
fn the_crate_graph_on_the_page_is_the_manifests() {
    assert_eq!(documented_graph(&architecture()), manifest_graph());
}

#[test]
fn the_kernel_depends_on_no_workspace_crate_and_nothing_depends_on_a_binary() {
    let graph = manifest_graph();
    assert!(
        graph["loom-kernel"].is_empty(),
        "{:?}",
        graph["loom-kernel"]
    );
    for binary in ["quickstart", "a2ui-callfunction", "xtask"] {
        let users: Vec<&String> = graph
            .iter()
            .filter(|(name, deps)| deps.contains(binary) && name.as_str() != "xtask")
            .map(|(name, _)| name)
            .collect();
        assert!(users.is_empty(), "{binary} is used by {users:?}");
    }
}

/// Every file under `dir` whose name ends with `.rs`, as paths relative to the workspace.
fn sources(dir: &Path, found: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if name == "target" || name == "node_modules" || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if path.is_dir() {
            sources(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let relative = path.strip_prefix(workspace()).unwrap_or(&path);
            found.push(relative.to_string_lossy().replace('\\', "/"));
        }
    }
}

fn workspace_sources() -> Vec<String> {
    let mut files = Vec::new();
    for dir in ["crates", "examples", "xtask"] {
        sources(&workspace().join(dir), &mut files);
    }
    files
}

#[test]
fn every_source_file_the_page_names_exists() {
    let files = workspace_sources();
    let page = architecture();
    let missing: BTreeSet<&str> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|quoted| quoted.ends_with(".rs") && quoted.len() > ".rs".len())
        // A pattern (`machine/{gate,child_end}.rs`, `tests/<binary>/main.rs`) names no one file.
        .filter(|quoted| !quoted.contains(|c: char| c.is_whitespace() || "{<*".contains(c)))
        .filter(|named| {
            let named = named.trim_start_matches("./");
            !files
                .iter()
                .any(|file| file == named || file.ends_with(&format!("/{named}")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "named in docs/ARCHITECTURE.md, not in the workspace: {missing:?}"
    );
}

/// The names the kernel's root exports: each name of its root `pub use` lists (a rename by its
/// new name), its `pub mod`s, and the public items `lib.rs` defines.
fn kernel_root_names() -> BTreeSet<String> {
    let lib = std::fs::read_to_string(workspace().join("crates/loom-kernel/src/lib.rs"))
        .expect("the kernel's lib.rs");
    let mut names = BTreeSet::new();
    let mut statement = String::new();
    for line in lib.lines() {
        if statement.is_empty() {
            if line.starts_with("pub use ") {
                statement.push_str(line);
            } else if let Some(rest) = line.strip_prefix("pub ") {
                let mut words = rest.split(|c: char| !(c.is_alphanumeric() || c == '_'));
                let kind = words.next().unwrap_or_default();
                let items = [
                    "mod", "fn", "struct", "enum", "trait", "type", "const", "static",
                ];
                if items.contains(&kind)
                    && let Some(name) = words.find(|word| !word.is_empty())
                {
                    names.insert(name.to_owned());
                }
                continue;
            } else {
                continue;
            }
        } else {
            statement.push(' ');
            statement.push_str(line.trim());
        }
        if statement.ends_with(';') {
            let body = statement
                .trim_start_matches("pub use ")
                .trim_end_matches(';');
            let listed = match body.split_once('{') {
                Some((_, list)) => list.trim_end_matches('}').to_owned(),
                None => body.to_owned(),
            };
            for item in listed
                .split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
            {
                let name = item.rsplit(" as ").next().unwrap_or(item);
                names.insert(name.rsplit("::").next().unwrap_or(name).trim().to_owned());
            }
            statement.clear();
        }
    }
    names
}

#[test]
fn the_kernel_root_exports_at_most_120_names() {
    let names = kernel_root_names();
    assert!(
        names.contains("Runtime") && names.contains("kit"),
        "{names:?}"
    );
    assert!(
        names.len() <= 120,
        "{} names at the kernel's root: {names:?}",
        names.len()
    );
}

#[test]
fn no_source_file_is_over_800_lines() {
    let long: Vec<(String, usize)> = workspace_sources()
        .into_iter()
        .filter(|file| file.contains("/src/"))
        .filter_map(|file| {
            let text = std::fs::read_to_string(workspace().join(&file)).ok()?;
            let lines = text.lines().count();
            (lines > 800).then_some((file, lines))
        })
        .collect();
    assert!(long.is_empty(), "source files over 800 lines: {long:?}");
}
