//! `<home>/worker-counts.json`: the workers each workspace held at a clean
//! stop (`{"version": 1, "workers": {"<workspace>": N}}`), written just
//! before the stop's marker and taken (read and removed) by the next
//! owner, which trusts it only when that marker vouched for the home — so
//! the first creation after a clean restart need not open every worker to
//! count them against `[quota] workers`.

use super::*;
use std::collections::HashMap;

const COUNTS: &str = "worker-counts.json";

#[derive(serde::Serialize, serde::Deserialize)]
struct Counts {
    version: u64,
    workers: HashMap<String, usize>,
}

impl Home {
    /// Keep `counts` for the next owner (made durable before the clean
    /// stop's marker is); `None` removes a copy an earlier stop left.
    pub fn save_worker_counts(&self, counts: Option<&HashMap<String, usize>>) -> io::Result<()> {
        match counts {
            Some(workers) => {
                let doc = Counts {
                    version: 1,
                    workers: workers.clone(),
                };
                let bytes = serde_json::to_vec(&doc).map_err(io::Error::other)?;
                fsutil::write_document(&self.inner.root, COUNTS, &bytes)
            }
            None => match self.inner.root.remove_file(COUNTS) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        }
    }

    /// The counts a clean stop kept, when `vouched` (its marker held for
    /// this home); the copy is removed either way, so a crash of this
    /// owner never leaves counts its changes made stale.
    pub fn take_worker_counts(&self, vouched: bool) -> Option<HashMap<String, usize>> {
        let bytes = self.inner.root.read(COUNTS).ok()?;
        let removed = self
            .inner
            .root
            .remove_file(COUNTS)
            .and_then(|()| fsutil::sync_dir(&self.inner.root));
        if let Err(e) = removed {
            tracing::warn!("cannot remove {COUNTS}: {e}; the workers are counted anew");
            return None;
        }
        let doc: Counts = serde_json::from_slice(&bytes).ok()?;
        (vouched && doc.version == 1).then_some(doc.workers)
    }
}
