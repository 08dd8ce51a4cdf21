//! Writes the files its prompt names (space-separated, in that order) into
//! its worktree, then lists the worktree and answers with the names in the
//! order the listing gave them: what a replay on another filesystem must
//! see the same.
use cairn_guest::{Controller, Error, Outcome, Start};

struct Lister;

impl Controller for Lister {
    fn run(start: Start) -> Result<Outcome, Error> {
        for name in start.prompt.split_whitespace() {
            std::fs::write(name, name).map_err(|e| Error::new("io", format!("{name}: {e}")))?;
        }
        let names: Vec<String> = std::fs::read_dir(".")
            .map_err(|e| Error::new("io", e.to_string()))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        cairn_guest::emit_custom("listing", &serde_json::json!(names))?;
        Ok(Outcome::Finished(names.join(" ")))
    }
}

cairn_guest::controller!(Lister);
