//! `cairn new NAME --lang rust|python|js`: each scaffold builds with the
//! commands its README gives and its controller runs with `cairn run`.

use crate::common::cairn_bin;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

fn make(dir: &Path, name: &str, lang: &str) -> std::path::PathBuf {
    let out = cairn_bin()
        .args(["new", name, "--lang", lang])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("build and run it"), "{said}");
    dir.join(name)
}

/// The README's commands, in order (the scaffold's own promise).
fn readme_commands(project: &Path) -> Vec<String> {
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    readme
        .split("```sh\n")
        .nth(1)
        .unwrap()
        .split("```")
        .next()
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn check(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `cairn run WASM --prompt world --answer approval=approve --json` in a
/// fresh home: the controller greeted.
fn runs(wasm: &Path, home: &Path) {
    let out = cairn_bin()
        .arg("run")
        .arg(wasm)
        .args([
            "--prompt",
            "world",
            "--answer",
            "approval=approve",
            "--json",
            "--home",
        ])
        .arg(home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let end = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["payload"]["event"]["type"] == "finished")
        .expect("finished");
    assert_eq!(end["payload"]["event"]["text"], "greeted world");
}

#[test]
fn each_scaffold_builds_with_its_readme_commands_and_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");

    // Rust: `cargo build --release --target wasm32-wasip2` (sharing the
    // guests' target dir, so its dependencies build once).
    let rust = make(tmp.path(), "hello-rs", "rust");
    let commands = readme_commands(&rust);
    assert!(commands.contains(&"cargo build --release --target wasm32-wasip2".to_string()));
    let target = crate::common::target_dir().join("wasm-guests");
    check(
        Command::new(env!("CARGO"))
            .args(["build", "--release", "--target", "wasm32-wasip2", "--quiet"])
            .current_dir(&rust)
            .env("CARGO_TARGET_DIR", &target)
            .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
            .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS"),
        "building the Rust scaffold",
    );
    runs(&target.join("wasm32-wasip2/release/hello_rs.wasm"), &home);

    // Python: the README's componentize-py line, as written.
    let py = make(tmp.path(), "hello-py", "python");
    let line = readme_commands(&py)
        .into_iter()
        .find(|c| c.starts_with("componentize-py "))
        .unwrap();
    let componentize = crate::common::py_tools().with_file_name("componentize-py");
    check(
        Command::new(componentize)
            .args(line.split_whitespace().skip(1))
            .current_dir(&py),
        "building the Python scaffold",
    );
    runs(&py.join("hello-py.wasm"), &home);

    // JavaScript: its lockfile is the SDK's (so `npm ci` installs what the
    // tests provisioned), then the README's build line.
    let js = make(tmp.path(), "hello-js", "js");
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../guest-sdk-js");
    assert_eq!(
        std::fs::read(js.join("package-lock.json")).unwrap(),
        std::fs::read(sdk.join("package-lock.json")).unwrap()
    );
    let bin = super::browser::node_bin();
    let modules = super::browser::locked_node_modules(&bin, "js-sdk-tools", &sdk);
    std::os::unix::fs::symlink(&modules, js.join("node_modules")).unwrap();
    let line = readme_commands(&js)
        .into_iter()
        .find(|c| c.starts_with("node build.mjs"))
        .unwrap();
    check(
        super::browser::with_node(&mut Command::new(bin.join("node")), &bin)
            .args(line.split_whitespace().skip(1))
            .current_dir(&js),
        "building the JavaScript scaffold",
    );
    runs(&js.join("hello-js.wasm"), &home);

    // A project is never made over something, nor under a name that cannot be one.
    let again = cairn_bin()
        .args(["new", "hello-rs"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty"));
    let bad = cairn_bin()
        .args(["new", "../escape"])
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("cannot name a project"));
}
