// Shared by the build scripts of cairn-examples and tests/programs
// (`include!`d): one cargo invocation builds guest packages of this
// workspace for wasm32-wasip2 into one target dir beside the host's.

/// The workspace root, from a crate two levels below it.
fn workspace_root() -> std::path::PathBuf {
    let manifest_dir = std::path::PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    manifest_dir.ancestors().nth(2).unwrap().to_path_buf()
}

/// Builds `packages` in release for wasm32-wasip2; returns the directory
/// their `.wasm` files are in.
fn build_guests(root: &std::path::Path, packages: &[&str]) -> std::path::PathBuf {
    use std::process::Command;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
    // OUT_DIR is <target>/[<triple>/]<profile>/build/<crate>-<hash>/out.
    let mut target_dir = out_dir.clone();
    for _ in 0..4 {
        target_dir.pop();
    }
    let target_dir = target_dir.join("wasm-guests");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .arg("build")
        .arg("--release")
        .arg("--target=wasm32-wasip2")
        .arg("--quiet")
        .env("CARGO_TARGET_DIR", &target_dir)
        // Shipped components carry no debug info (std's included): the
        // code is what a browser downloads and a host compiles.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
        .env("CARGO_PROFILE_RELEASE_STRIP", "debuginfo");
    for p in packages {
        cmd.arg(format!("--package={p}"));
    }
    // Flags meant for the host (coverage, sanitizers) must not reach guests.
    for var in [
        "RUSTFLAGS",
        "CARGO_ENCODED_RUSTFLAGS",
        "CARGO_BUILD_RUSTFLAGS",
        "CARGO_MAKEFLAGS",
        "RUSTC_WORKSPACE_WRAPPER",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .expect("cannot run cargo to build the guest controllers");
    if !status.success() {
        let installed = Command::new("rustup")
            .args(["target", "list", "--installed"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("wasm32-wasip2"))
            .unwrap_or(true);
        if !installed {
            panic!("the wasm32-wasip2 target is missing: run `rustup target add wasm32-wasip2`");
        }
        panic!("building the guest controllers for wasm32-wasip2 failed (see the errors above)");
    }
    target_dir.join("wasm32-wasip2").join("release")
}
