//! `sandbox-probe`: tries to reach outside its directory and reports, one event
//! per attempt, whether it was allowed or denied; then writes `probe.txt` into
//! its own directory.
use cairn_guest::{Controller, Error, Outcome, Start};
use serde_json::json;

struct Probe;

fn report(attempt: &str, target: &str, result: std::io::Result<String>) -> Result<bool, Error> {
    let (allowed, detail) = match result {
        Ok(what) => (true, what),
        Err(e) => (false, e.to_string()),
    };
    cairn_guest::emit_custom(
        "probe",
        &json!({ "attempt": attempt, "target": target, "allowed": allowed, "detail": detail }),
    )?;
    Ok(allowed)
}

impl Controller for Probe {
    fn run(start: Start) -> Result<Outcome, Error> {
        let mut escaped = Vec::new();
        let home = if start.prompt.is_empty() {
            "/root".to_string()
        } else {
            start.prompt.clone()
        };
        let reads = [
            ("read", "/etc/passwd".to_string()),
            ("read", "../worker.json".to_string()),
            ("read", "../../../../worker.json".to_string()),
            ("read", format!("{home}/.bashrc")),
        ];
        for (attempt, target) in &reads {
            let result = std::fs::read(target).map(|b| format!("read {} bytes", b.len()));
            if report(attempt, target, result)? {
                escaped.push(target.clone());
            }
        }
        for target in ["../../../../", "..", &home] {
            let result = std::fs::read_dir(target).map(|d| format!("listed {} entries", d.count()));
            if report("list", target, result)? {
                escaped.push(target.to_string());
            }
        }
        let wrote = std::fs::write("probe.txt", b"written by sandbox-probe\n")
            .map(|()| "wrote probe.txt".to_string());
        report("write", "probe.txt", wrote)?;
        let outside = std::fs::write("../escaped.txt", b"should never exist\n")
            .map(|()| "wrote ../escaped.txt".to_string());
        if report("write", "../escaped.txt", outside)? {
            escaped.push("../escaped.txt".to_string());
        }
        if escaped.is_empty() {
            Ok(Outcome::Finished(
                "every attempt outside the sandbox was denied".to_string(),
            ))
        } else {
            Err(Error::new(
                "escaped",
                format!("reached outside: {}", escaped.join(", ")),
            ))
        }
    }
}

cairn_guest::controller!(Probe);
