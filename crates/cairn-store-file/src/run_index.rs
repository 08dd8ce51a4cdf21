//! The embedded store's run index, kept across restarts:
//! `index/runs.jsonl`, one line per change (a run started, a run ended, a
//! session forgotten), appended unsynced as the runtime makes them — the
//! index is a cache of the journals, never their authority.
//!
//! A next owner loads it instead of reading every journal when the lines
//! are sure to be whole: the previous owner kept this log (its lock record
//! says so) and either stopped cleanly (its stop synced the filesystem) or
//! its process died in this boot of the kernel (the page cache kept every
//! write). Otherwise — a reboot after a crash, a log an older cairn left,
//! a line that does not parse — it starts empty, the runtime builds it
//! from the journals on first use and [`RunIndex::built`] writes the log
//! anew (a temp file renamed over the old one). The two gaps a crash can
//! leave between a journal entry and its line are covered elsewhere: a run
//! whose start was not logged is in the live index and indexed again when
//! it is restored; a run whose end was not logged is answered from the
//! journal's facts.

use crate::fsutil;
use async_trait::async_trait;
use cairn_store::StoreError;
use cairn_store::run_index::{IndexedRun, MemoryRunIndex, RunIndex, RunPage};
use cairn_types::event::RunFacts;
use cairn_types::ids::{RunId, Seq, SessionId};
use cap_std::fs::Dir;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::sync::Mutex;

/// The log's name inside `index/`.
pub const RUNS_LOG: &str = "runs.jsonl";

/// One line of the log.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    /// A run started (or was restored).
    Started {
        run: RunId,
        #[serde(with = "cairn_types::ids::session_key")]
        session: SessionId,
        workspace: String,
        after: Option<Seq>,
    },
    /// A run's end is durable.
    Ended(Box<RunFacts>),
    /// A session and its runs are gone.
    Forgot {
        #[serde(with = "cairn_types::ids::session_key")]
        session: SessionId,
    },
}

/// The run index of a home (see the module).
pub struct FileRunIndex {
    mem: MemoryRunIndex,
    index: Dir,
    log: Mutex<Option<cap_std::fs::File>>,
    whole: bool,
}

impl std::fmt::Debug for FileRunIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileRunIndex")
            .field("whole", &self.whole)
            .finish()
    }
}

impl FileRunIndex {
    /// The run index of the home whose `index/` is `index`: loaded from
    /// its log when `trusted` (see the module) and the log reads whole,
    /// otherwise empty (and [`RunIndex::is_whole`] says so).
    pub fn open(index: Dir, trusted: bool) -> FileRunIndex {
        let mem = MemoryRunIndex::default();
        let whole = trusted && Self::load(&index, &mem).is_some();
        let mem = if whole {
            mem
        } else {
            MemoryRunIndex::default()
        };
        let log = match whole {
            true => fsutil::open_append(&index, RUNS_LOG).ok(),
            // Nothing is appended to a log that is not whole, and it goes
            // at once (a later owner must never load it): `built` writes
            // a new one.
            false => {
                if let Err(e) = index.remove_file(RUNS_LOG)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    tracing::warn!("cannot remove the stale index/{RUNS_LOG}: {e}");
                }
                None
            }
        };
        FileRunIndex {
            mem,
            index,
            log: Mutex::new(log),
            whole,
        }
    }

    /// Replay the log into `mem`; `None` when it is absent or a line does
    /// not parse.
    fn load(index: &Dir, mem: &MemoryRunIndex) -> Option<()> {
        let mut text = String::new();
        index.open(RUNS_LOG).ok()?.read_to_string(&mut text).ok()?;
        for line in text.lines().filter(|l| !l.is_empty()) {
            match serde_json::from_str::<Line>(line).ok()? {
                Line::Started {
                    run,
                    session,
                    workspace,
                    after,
                } => {
                    mem.record_started(run, &session, &workspace, after);
                }
                Line::Ended(facts) => mem.record_ended(&facts),
                Line::Forgot { session } => mem.record_forgotten(&session),
            }
        }
        Some(())
    }

    /// Append one line (one write; unsynced). A log that cannot be written
    /// is given up: the next start builds the index from the journals.
    fn append(&self, line: &Line) {
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = log.as_mut() else { return };
        let mut bytes = serde_json::to_vec(line).expect("a run index line serializes");
        bytes.push(b'\n');
        if let Err(e) = file.write_all(&bytes) {
            tracing::warn!("the run index's log is given up ({e}): the next start rebuilds it");
            *log = None;
            let _ = self.index.remove_file(RUNS_LOG);
        }
    }
}

#[async_trait]
impl RunIndex for FileRunIndex {
    async fn started(
        &self,
        run: RunId,
        session: &SessionId,
        workspace: &str,
        after: Seq,
    ) -> Result<(), StoreError> {
        if self
            .mem
            .record_started(run, session, workspace, Some(after))
        {
            self.append(&Line::Started {
                run,
                session: session.clone(),
                workspace: workspace.to_string(),
                after: Some(after),
            });
        }
        Ok(())
    }

    async fn ended(&self, facts: &RunFacts) -> Result<(), StoreError> {
        self.mem.record_ended(facts);
        self.append(&Line::Ended(Box::new(facts.clone())));
        Ok(())
    }

    async fn forget_session(&self, session: &SessionId) -> Result<(), StoreError> {
        self.mem.record_forgotten(session);
        self.append(&Line::Forgot {
            session: session.clone(),
        });
        Ok(())
    }

    async fn get(&self, run: RunId) -> Result<Option<IndexedRun>, StoreError> {
        self.mem.get(run).await
    }

    async fn page(
        &self,
        workspace: Option<&str>,
        before: Option<RunId>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        self.mem.page(workspace, before, limit).await
    }

    fn is_whole(&self) -> bool {
        self.whole
    }

    async fn built(&self) -> Result<(), StoreError> {
        // Held across the snapshot and the swap: a line appended meanwhile
        // goes to the new log (a run the snapshot holds already is logged
        // twice, which loads the same).
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let mut bytes = Vec::new();
        for (run, r) in self.mem.all() {
            let started = Line::Started {
                run,
                session: r.session.clone(),
                workspace: r.workspace.clone(),
                after: r.after,
            };
            serde_json::to_writer(&mut bytes, &started).expect("a run index line serializes");
            bytes.push(b'\n');
            if let Some(facts) = r.facts {
                serde_json::to_writer(&mut bytes, &Line::Ended(Box::new(facts)))
                    .expect("a run index line serializes");
                bytes.push(b'\n');
            }
        }
        let io = |source| StoreError::Io {
            context: format!("cannot write index/{RUNS_LOG}"),
            source,
        };
        fsutil::write_document_unsynced(&self.index, RUNS_LOG, &bytes).map_err(io)?;
        *log = Some(fsutil::open_append(&self.index, RUNS_LOG).map_err(io)?);
        Ok(())
    }
}
