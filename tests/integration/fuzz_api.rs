//! schemathesis (PyPI) against `/openapi.json`: a bounded number of
//! generated requests per operation, and no 5xx allowed. The test provisions
//! its pinned schemathesis itself (`target/py-tools`).

use cairn_runtime::runtime::{Runtime, RuntimeConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error() {
    let tmp = tempfile::tempdir().unwrap();
    let rt = Runtime::open(RuntimeConfig::new(tmp.path().join("home")))
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/openapi.json", listener.local_addr().unwrap());
    tokio::spawn(async move { cairn_api::serve(listener, rt, std::future::pending()).await });
    // Through the Python module, not the `st` script: a fresh pyenv has no
    // shim for a script until `pyenv rehash`.
    let python = tokio::task::spawn_blocking(super::common::py_tools)
        .await
        .unwrap();
    let run = tokio::process::Command::new(python)
        .args([
            "-c",
            "import sys; from schemathesis.cli import schemathesis; sys.argv[0] = 'st'; sys.exit(schemathesis())",
            "run",
            &url,
            "--checks",
            "not_a_server_error",
            "--max-examples",
            "15",
            "--request-timeout",
            "10",
            // Event streams never end by design; they are covered by the API tests.
            "--exclude-path-regex",
            "/events$",
            "--seed",
            "20261130",
        ])
        .env("NO_COLOR", "1")
        // Its cache of findings goes with the test's own directory.
        .current_dir(tmp.path())
        .output()
        .await;
    let out = match run {
        Ok(out) => out,
        Err(e) => panic!("cannot run schemathesis from target/py-tools: {e}"),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tail: String = stdout
        .lines()
        .rev()
        .take(60)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{tail}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("passed"), "{tail}");
}
