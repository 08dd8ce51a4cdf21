//! The house's shape, checked: within each crate, the top-level modules
//! import one another without a cycle (the crate graph itself is acyclic
//! by construction; inside a crate only this test keeps it so).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Code without its `//` comments (doc links name modules freely).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| l.split_once("//").map_or(l, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The modules named after `prefix` (`crate::` or `super::`) in `text`.
fn named_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter(|(at, _)| {
            // A whole path segment: not `foo_crate::` or `self::super::`'s tail.
            !text[..*at].ends_with(|c: char| c.is_alphanumeric() || c == '_')
        })
        .map(|(at, _)| {
            let rest = &text[at + prefix.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            &rest[..end]
        })
        .filter(|m| !m.is_empty())
        .collect()
}

/// Top-level module → the top-level modules it names, for one crate.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let top_of = |file: &Path| -> Option<(String, usize)> {
        let rel = file.strip_prefix(src).ok()?;
        let parts: Vec<_> = rel
            .iter()
            .map(|p| p.to_string_lossy().to_string())
            .collect();
        let top = match parts.len() {
            1 => parts[0].trim_end_matches(".rs").to_string(),
            _ => parts[0].clone(),
        };
        (top != "lib" && top != "main").then_some((top, parts.len()))
    };
    let tops: BTreeSet<String> = files
        .iter()
        .filter_map(|f| top_of(f))
        .map(|t| t.0)
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some((top, depth)) = top_of(file) else {
            continue;
        };
        let text = code(&std::fs::read_to_string(file).unwrap());
        let mut named = named_after(&text, "crate::");
        // `super::` of a file at the crate's top is the crate root.
        if depth == 1 {
            named.extend(named_after(&text, "super::"));
        }
        for m in named {
            if m != top && tops.contains(m) {
                graph.entry(top.clone()).or_default().insert(m.to_string());
            }
        }
    }
    graph
}

/// A cycle in `graph`, if it has one (as the path that closes it).
fn a_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_crate_has_a_cycle_among_its_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut checked = 0;
    let mut cycles = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = module_graph(&src);
        checked += graph.len();
        if let Some(cycle) = a_cycle(&graph) {
            cycles.push(format!("{}: {}", src.display(), cycle.join(" → ")));
        }
    }
    // The walk saw the crates (a wrong root would pass vacuously).
    assert!(checked > 20, "only {checked} modules import others");
    assert!(cycles.is_empty(), "module cycles:\n{}", cycles.join("\n"));
}

#[test]
fn the_cycle_finder_finds_a_cycle_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "mod a; mod b; mod c;").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::X; // crate::c::Y").unwrap();
    std::fs::create_dir(src.join("b")).unwrap();
    std::fs::write(src.join("b/mod.rs"), "pub struct X;").unwrap();
    std::fs::write(src.join("b/inner.rs"), "use crate::c::Z;").unwrap();
    std::fs::write(src.join("c.rs"), "pub fn f() { super::a::g() }").unwrap();
    let graph = module_graph(src);
    assert_eq!(
        a_cycle(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    // The comment's edge a → c is not one: without c → a there is none.
    std::fs::write(src.join("c.rs"), "pub fn f() {}").unwrap();
    assert_eq!(a_cycle(&module_graph(src)), None);
}
