//! `cairn new NAME --lang rust|python|js`: a controller project that builds
//! with one command and runs with `cairn run`. Each carries its SDK and
//! cairn's WIT (vendored, so it needs no checkout of cairn), a README with
//! its three commands, and a Makefile (`make`, `make run`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `cairn new` arguments.
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The project's name (its directory, and the component's name).
    name: String,
    /// The language: rust, python or js.
    #[arg(long, value_parser = ["rust", "python", "js"], default_value = "rust")]
    lang: String,
    /// Where to make it (default: ./NAME).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// cairn's WIT, as the SDKs bind it.
const WIT: &[(&str, &str)] = &[
    (
        "wit/world.wit",
        include_str!("../../../guest-sdk/wit/world.wit"),
    ),
    (
        "wit/types.wit",
        include_str!("../../../guest-sdk/wit/types.wit"),
    ),
    (
        "wit/journal.wit",
        include_str!("../../../guest-sdk/wit/journal.wit"),
    ),
    (
        "wit/decisions.wit",
        include_str!("../../../guest-sdk/wit/decisions.wit"),
    ),
    (
        "wit/history.wit",
        include_str!("../../../guest-sdk/wit/history.wit"),
    ),
    (
        "wit/workers.wit",
        include_str!("../../../guest-sdk/wit/workers.wit"),
    ),
    (
        "wit/deps/model/chat.wit",
        include_str!("../../../guest-sdk/wit/deps/model/chat.wit"),
    ),
    (
        "wit/deps/tools/mcp.wit",
        include_str!("../../../guest-sdk/wit/deps/tools/mcp.wit"),
    ),
];

/// The Rust SDK (`cairn-guest`), vendored.
const RUST_SDK: &[(&str, &str)] = &[
    (
        "cairn-guest/Cargo.toml",
        include_str!("../../../guest-sdk/Cargo.toml"),
    ),
    (
        "cairn-guest/src/client_tools.rs",
        include_str!("../../../guest-sdk/src/client_tools.rs"),
    ),
    (
        "cairn-guest/src/decisions.rs",
        include_str!("../../../guest-sdk/src/decisions.rs"),
    ),
    (
        "cairn-guest/src/history.rs",
        include_str!("../../../guest-sdk/src/history.rs"),
    ),
    (
        "cairn-guest/src/journal.rs",
        include_str!("../../../guest-sdk/src/journal.rs"),
    ),
    (
        "cairn-guest/src/lib.rs",
        include_str!("../../../guest-sdk/src/lib.rs"),
    ),
    (
        "cairn-guest/src/model.rs",
        include_str!("../../../guest-sdk/src/model.rs"),
    ),
    (
        "cairn-guest/src/tools.rs",
        include_str!("../../../guest-sdk/src/tools.rs"),
    ),
    (
        "cairn-guest/src/types.rs",
        include_str!("../../../guest-sdk/src/types.rs"),
    ),
    (
        "cairn-guest/src/workers.rs",
        include_str!("../../../guest-sdk/src/workers.rs"),
    ),
    (
        "cairn-guest/wit/world.wit",
        include_str!("../../../guest-sdk/wit/world.wit"),
    ),
    (
        "cairn-guest/wit/types.wit",
        include_str!("../../../guest-sdk/wit/types.wit"),
    ),
    (
        "cairn-guest/wit/journal.wit",
        include_str!("../../../guest-sdk/wit/journal.wit"),
    ),
    (
        "cairn-guest/wit/decisions.wit",
        include_str!("../../../guest-sdk/wit/decisions.wit"),
    ),
    (
        "cairn-guest/wit/history.wit",
        include_str!("../../../guest-sdk/wit/history.wit"),
    ),
    (
        "cairn-guest/wit/workers.wit",
        include_str!("../../../guest-sdk/wit/workers.wit"),
    ),
    (
        "cairn-guest/wit/deps/model/chat.wit",
        include_str!("../../../guest-sdk/wit/deps/model/chat.wit"),
    ),
    (
        "cairn-guest/wit/deps/tools/mcp.wit",
        include_str!("../../../guest-sdk/wit/deps/tools/mcp.wit"),
    ),
];

/// The Python SDK (`cairn_sdk`).
const PY_SDK: &[(&str, &str)] = &[
    (
        "cairn_sdk/__init__.py",
        include_str!("../../../guest-sdk-py/cairn_sdk/__init__.py"),
    ),
    (
        "cairn_sdk/client_tools.py",
        include_str!("../../../guest-sdk-py/cairn_sdk/client_tools.py"),
    ),
    (
        "cairn_sdk/model.py",
        include_str!("../../../guest-sdk-py/cairn_sdk/model.py"),
    ),
    (
        "cairn_sdk/tools.py",
        include_str!("../../../guest-sdk-py/cairn_sdk/tools.py"),
    ),
];

/// The JavaScript SDK and its build, pinned by its lockfile.
const JS_SDK: &[(&str, &str)] = &[
    ("cairn.js", include_str!("../../../guest-sdk-js/cairn.js")),
    (
        "cairn.d.ts",
        include_str!("../../../guest-sdk-js/cairn.d.ts"),
    ),
    ("build.mjs", include_str!("../../../guest-sdk-js/build.mjs")),
    (
        "package.json",
        include_str!("../../../guest-sdk-js/package.json"),
    ),
    (
        "package-lock.json",
        include_str!("../../../guest-sdk-js/package-lock.json"),
    ),
];

fn rust_files(name: &str) -> Vec<(String, String)> {
    let crate_name = name.replace('-', "_");
    vec![
        (
            "Cargo.toml".into(),
            format!(
                r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[dependencies]
cairn-guest = {{ path = "cairn-guest" }}

# A project of its own (not a member of an enclosing workspace).
[workspace]
"#
            ),
        ),
        (
            "src/lib.rs".into(),
            r#"//! A cairn controller: it greets, asks a person, and answers.
use cairn_guest::{Approval, Controller, Error, Outcome, Start};

struct Hello;

impl Controller for Hello {
    fn run(start: Start) -> Result<Outcome, Error> {
        cairn_guest::emit_text(&format!("hello, {}", start.prompt))?;
        match cairn_guest::request_approval("say goodbye too?") {
            Approval::Approved(_) => cairn_guest::emit_text(" and goodbye")?,
            _ => cairn_guest::emit_reasoning("keeping it short")?,
        };
        Ok(Outcome::Finished(format!("greeted {}", start.prompt)))
    }
}

cairn_guest::controller!(Hello);
"#
            .into(),
        ),
        (
            "Makefile".into(),
            format!(
                "build:\n\tcargo build --release --target wasm32-wasip2\n\nrun: build\n\tcairn run target/wasm32-wasip2/release/{crate_name}.wasm --prompt world --answer approval=approve\n"
            ),
        ),
        (
            "README.md".into(),
            format!(
                "# {name}\n\nA cairn controller in Rust (`cairn-guest`, vendored in `cairn-guest/`).\n\n```sh\nrustup target add wasm32-wasip2\ncargo build --release --target wasm32-wasip2\ncairn run target/wasm32-wasip2/release/{crate_name}.wasm --prompt world --answer approval=approve\n```\n"
            ),
        ),
    ]
}

fn python_files(name: &str) -> Vec<(String, String)> {
    vec![
        (
            "app.py".into(),
            format!(
                r#""""A cairn controller: it greets, asks a person, and answers."""

import cairn_sdk as cairn


class Hello(cairn.Controller):
    name = "{name}"
    version = "0.1.0"

    def run(self, start: cairn.Start) -> str:
        cairn.emit_text(f"hello, {{start.prompt}}")
        if cairn.request_approval("say goodbye too?").approved:
            cairn.emit_text(" and goodbye")
        return f"greeted {{start.prompt}}"


WitWorld = cairn.export(Hello)
"#
            ),
        ),
        (
            "Makefile".into(),
            format!(
                "build:\n\tcomponentize-py -d wit -w agent componentize app -p . -o {name}.wasm\n\nrun: build\n\tcairn run {name}.wasm --prompt world --answer approval=approve\n"
            ),
        ),
        (
            "README.md".into(),
            format!(
                "# {name}\n\nA cairn controller in Python (`cairn_sdk`, vendored; cairn's WIT in `wit/`).\n\n```sh\npip install componentize-py==0.25.1\ncomponentize-py -d wit -w agent componentize app -p . -o {name}.wasm\ncairn run {name}.wasm --prompt world --answer approval=approve\n```\n"
            ),
        ),
    ]
}

fn js_files(name: &str) -> Vec<(String, String)> {
    vec![
        (
            "app.js".into(),
            format!(
                r#"// A cairn controller: it greets, asks a person, and answers.
import {{ controller, emitText, requestApproval }} from 'cairn-sdk';

export const {{ describe, run }} = controller({{
  name: '{name}',
  version: '0.1.0',
  run(start) {{
    emitText(`hello, ${{start.prompt}}`);
    if (requestApproval('say goodbye too?').approved) emitText(' and goodbye');
    return `greeted ${{start.prompt}}`;
  }},
}});
"#
            ),
        ),
        (
            "Makefile".into(),
            format!(
                "build:\n\tnpm ci\n\tnode build.mjs app.js {name}.wasm --wit wit\n\nrun: build\n\tcairn run {name}.wasm --prompt world --answer approval=approve\n"
            ),
        ),
        (
            "README.md".into(),
            format!(
                "# {name}\n\nA cairn controller in JavaScript (`cairn.js`, vendored; cairn's WIT in `wit/`).\n\n```sh\nnpm ci\nnode build.mjs app.js {name}.wasm --wit wit\ncairn run {name}.wasm --prompt world --answer approval=approve\n```\n"
            ),
        ),
    ]
}

fn write(dir: &Path, rel: &str, text: &str) -> anyhow::Result<()> {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| anyhow::anyhow!("cannot make {}: {e}", parent.display()))?;
    }
    std::fs::write(&path, text).map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
}

pub fn new(args: NewArgs) -> anyhow::Result<ExitCode> {
    let name = args.name.trim();
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        || name.starts_with(|c: char| !c.is_ascii_alphabetic())
    {
        anyhow::bail!(
            "{name:?} cannot name a project: use letters, digits, - and _, starting with a letter"
        );
    }
    let dir = args.dir.unwrap_or_else(|| PathBuf::from(name));
    if dir.exists()
        && std::fs::read_dir(&dir)
            .map(|mut d| d.next().is_some())
            .unwrap_or(true)
    {
        anyhow::bail!(
            "{} exists and is not empty: nothing was written",
            dir.display()
        );
    }
    // The project's own files, its SDK, and whether cairn's WIT goes at
    // its root (the Rust SDK carries its own).
    let (files, sdk, with_wit) = match args.lang.as_str() {
        "rust" => (rust_files(name), RUST_SDK, false),
        "python" => (python_files(name), PY_SDK, true),
        _ => (js_files(name), JS_SDK, true),
    };
    for (rel, text) in &files {
        write(&dir, rel, text)?;
    }
    for (rel, text) in sdk {
        write(&dir, rel, text)?;
    }
    if with_wit {
        for (rel, text) in WIT {
            write(&dir, rel, text)?;
        }
    }
    println!("made {} ({}): a cairn controller", dir.display(), args.lang);
    let readme = files
        .iter()
        .find(|(r, _)| r == "README.md")
        .map(|(_, t)| t.as_str())
        .unwrap_or_default();
    let commands: Vec<&str> = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|s| s.split("```").next())
        .unwrap_or_default()
        .lines()
        .collect();
    println!("build and run it (in {}):", dir.display());
    for c in commands {
        println!("  {c}");
    }
    Ok(ExitCode::SUCCESS)
}
