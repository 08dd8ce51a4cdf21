//! `delegate`: splits its prompt at `|` into two parts, spawns a child
//! `delegate` for each with a scope of its own (`part-1/`, `part-2/`), waits
//! for both, merges the files they wrote into `merged.txt` and finishes with
//! a summary. A child (prompt `write: TEXT`) writes TEXT to `/loan/out.txt`,
//! its loaned scope, and finishes.
use cairn_guest::workers::{self, ChildState};
use cairn_guest::{Controller, Error, Outcome, Start};

struct Delegate;

fn child(text: &str) -> Result<Outcome, Error> {
    std::fs::write("/loan/out.txt", text)
        .map_err(|e| Error::new("no_loan", format!("cannot write /loan/out.txt: {e}")))?;
    cairn_guest::emit_text(&format!("wrote {} bytes", text.len()))?;
    Ok(Outcome::Finished(format!("wrote {text:?}")))
}

impl Controller for Delegate {
    fn run(start: Start) -> Result<Outcome, Error> {
        if let Some(text) = start.prompt.strip_prefix("write: ") {
            return child(text);
        }
        let (a, b) = start
            .prompt
            .split_once('|')
            .unwrap_or((start.prompt.as_str(), ""));
        let mut children = Vec::new();
        for (i, part) in [a.trim(), b.trim()].into_iter().enumerate() {
            let scope = format!("part-{}", i + 1);
            let c = workers::spawn("delegate", &format!("write: {part}"), Some(&scope))
                .map_err(|e| Error::new("spawn_refused", e))?;
            cairn_guest::emit_progress("spawned", i as u64 + 1, Some(2))?;
            children.push((scope, c));
        }
        let mut merged = String::new();
        for (scope, c) in &children {
            let status =
                workers::wait(&c.worker_id, 60_000).map_err(|e| Error::new("wait_failed", e))?;
            if status.state != ChildState::Finished {
                return Err(Error::new(
                    "child_failed",
                    format!(
                        "child {} ended {:?}: {}",
                        c.worker_id,
                        status.state,
                        status.error.unwrap_or_default()
                    ),
                ));
            }
            let text = std::fs::read_to_string(format!("{scope}/out.txt"))
                .map_err(|e| Error::new("no_output", format!("{scope}/out.txt: {e}")))?;
            merged.push_str(&text);
            merged.push('\n');
        }
        std::fs::write("merged.txt", &merged).map_err(|e| Error::new("io", e.to_string()))?;
        let summary = format!(
            "merged {} parts into merged.txt: {}",
            children.len(),
            merged.trim_end().replace('\n', " + ")
        );
        cairn_guest::emit_text(&summary)?;
        Ok(Outcome::Finished(summary))
    }
}

cairn_guest::controller!(Delegate);
