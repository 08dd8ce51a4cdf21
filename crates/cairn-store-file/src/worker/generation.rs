//! Run generations: reserved past every number the worker or its journal
//! names, laid out create-new (a collision is never reused), the worktree
//! carried from the generation before.

use super::*;

/// A reserved generation: its number and its empty directory (or, from
/// [`WorkerDir::reserve_generation_unmade`], the number no entry of `runs/`
/// had: its directory is made by [`WorkerDir::lay_out_generation`]).
#[derive(Debug)]
pub struct Reserved {
    /// The generation.
    pub generation: Generation,
    runs: Dir,
    dir: Option<Dir>,
}

/// A laid-out generation directory.
#[derive(Debug)]
pub struct GenerationDir {
    /// The generation.
    pub generation: Generation,
    /// `runs/<gen>/`.
    pub dir: Dir,
    /// The host path of `runs/<gen>/artifacts/`, the guest's one preopen.
    pub artifacts_path: PathBuf,
    /// The host path of `runs/<gen>/`.
    pub path: PathBuf,
    /// Bytes of the worktree carried over from the generation before (as
    /// `cairn_worktree` counts them; 0 when none was).
    pub carried_bytes: u64,
}

impl WorkerDir {
    /// Seed this (new) worker's worktree, `runs/0/artifacts/`, with a copy of
    /// `source`'s generation `generation` (symlinks are not followed).
    pub fn seed_worktree(
        &self,
        source: &WorkerDir,
        generation: Generation,
    ) -> Result<(), WorkerError> {
        let ctx = format!(
            "worker {}: cannot carry the worktree of worker {} over",
            self.id, source.id
        );
        let Ok(from) = source.generation_dir(generation).and_then(|d| {
            d.open_dir("artifacts").map_err(io_err(format!(
                "worker {}: no runs/{generation}/artifacts",
                source.id
            )))
        }) else {
            return Ok(());
        };
        let runs = self.dir.open_dir("runs").map_err(io_err(ctx.clone()))?;
        let zero = fsutil::create_dir_new(&runs, "0").map_err(io_err(ctx.clone()))?;
        let artifacts = fsutil::create_dir_new(&zero, "artifacts").map_err(io_err(ctx.clone()))?;
        cairn_worktree::copy(
            &from,
            &artifacts,
            cairn_types::limits::Limits::default().artifact_depth,
        )
        .map_err(io_err(ctx))
    }

    /// Reserve the next generation: past `worker.json`'s last one, past
    /// `floor` (the last one the journal names, when the caller read it),
    /// and past every number `runs/` holds an entry of already (left by a
    /// start whose first entries a crash lost, or made by hand): such a
    /// directory is never reused. `runs/<gen>/` is made here, create-new.
    /// Nothing is synced: the caller journals `GenerationReserved` next
    /// (committed with the run's first entries), and calls
    /// [`WorkerDir::record_generation`] and [`WorkerDir::lay_out_generation`]
    /// before anything is instantiated. A restore reserves past the
    /// journal's last reservation, so a `worker.json` a power loss rolled
    /// back never hands a number out twice.
    pub fn reserve_generation(&self, floor: Option<Generation>) -> Result<Reserved, WorkerError> {
        self.reserve(floor, true)
    }

    /// [`WorkerDir::reserve_generation`] for a start whose first entries
    /// are durable before anything runs in the generation: `runs/<gen>/` is
    /// only looked for here, and made by [`WorkerDir::lay_out_generation`]
    /// once the journal names the number. Made after the journal's sync,
    /// not before it, the directory's inode is not in that sync: a start's
    /// first entries are durable sooner (a `mkdir` before an `fdatasync`
    /// made it cost 1.8 times as much on an ext4 without a journal, 1.15
    /// times with one). The number is consumed all the same: a crash after
    /// the sync leaves it named in the journal, which a restore and the
    /// next start reserve past; a crash before leaves no trace of it —
    /// nothing ran in it, and nobody was told of it.
    pub fn reserve_generation_unmade(
        &self,
        floor: Option<Generation>,
    ) -> Result<Reserved, WorkerError> {
        self.reserve(floor, false)
    }

    fn reserve(&self, floor: Option<Generation>, make: bool) -> Result<Reserved, WorkerError> {
        /// Entries in a row a reservation goes past before it gives up.
        const SKIPS: u32 = 64;
        let _guard = self.home.record_lock(self.id);
        let mut record = self.record()?;
        let mut generation = floor
            .map_or(record.last_generation, |f| f.max(record.last_generation))
            .next();
        let runs = self
            .dir
            .open_dir("runs")
            .map_err(io_err(format!("worker {}: cannot open runs/", self.id)))?;
        let mut skipped = 0;
        loop {
            let name = generation.to_string();
            let claimed = match make {
                true => fsutil::create_dir_new(&runs, &name).map(Some),
                false => match runs.symlink_metadata(&name) {
                    Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(e),
                    Ok(_) => Err(io::ErrorKind::AlreadyExists.into()),
                },
            };
            match claimed {
                Ok(dir) => {
                    return Ok(Reserved {
                        generation,
                        runs,
                        dir,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && skipped < SKIPS => {
                    skipped += 1;
                    generation = generation.next();
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    // The numbers are consumed all the same.
                    record.last_generation = generation;
                    let _ = self.write_record_unsynced(&record);
                    return Err(WorkerError::GenerationCollision {
                        worker: self.id,
                        generation,
                    });
                }
                Err(e) => {
                    return Err(io_err(format!(
                        "worker {}: cannot create runs/{generation}",
                        self.id
                    ))(e));
                }
            }
        }
    }

    /// Write a reserved generation to `worker.json` as its last one, and
    /// bind the worker to `bind` if it is unbound (one atomic replace, backed
    /// by the journal's `GenerationReserved` and `Started`; see
    /// [`WorkerDir::reserve_generation`]).
    pub fn record_generation(
        &self,
        generation: Generation,
        bind: Option<&str>,
    ) -> Result<(), WorkerError> {
        self.record_run(generation, bind, None)
    }

    /// [`Self::record_generation`], and the limits the run runs under.
    pub fn record_run(
        &self,
        generation: Generation,
        bind: Option<&str>,
        limits: Option<&cairn_types::limits::Limits>,
    ) -> Result<(), WorkerError> {
        let _guard = self.home.record_lock(self.id);
        let mut record = self.record()?;
        let mut changed = false;
        if let Some(limits) = limits
            && record.limits.as_ref() != Some(limits)
        {
            record.limits = Some(*limits);
            changed = true;
        }
        if record.last_generation < generation {
            record.last_generation = generation;
            changed = true;
        }
        if let Some(digest) = bind
            && record.component.is_none()
        {
            record.component = Some(digest.to_string());
            changed = true;
        }
        if changed {
            self.write_record_unsynced(&record)?;
        }
        Ok(())
    }

    /// Keep `manifest` as `metadata.json`'s resolved manifest unless it says
    /// the same already (written only when the component, or what it is,
    /// changed: a worker's first run, an update). Not synced: it describes
    /// the component the journal's `Started` entry names, so a power loss
    /// that keeps an older one is corrected by the next run.
    pub fn record_manifest(&self, manifest: super::ResolvedManifest) -> Result<(), String> {
        let same = |m: &super::ResolvedManifest| {
            (&m.component, &m.name, &m.version, m.can_park, &m.imports)
                == (
                    &manifest.component,
                    &manifest.name,
                    &manifest.version,
                    manifest.can_park,
                    &manifest.imports,
                )
        };
        let unchanged = |meta: &super::WorkerMetadata| meta.manifest.as_ref().is_some_and(same);
        let mut new = Some(manifest.clone());
        self.update_metadata_projection(|meta| {
            if unchanged(meta) {
                return Ok(false);
            }
            meta.manifest = new.take();
            Ok(true)
        })
    }

    /// Note in `worker.json` that `run` was restored (seed 000's restore
    /// request), read and written under the reservation lock like the
    /// generation it was reserved with, and unsynced like it: the journal
    /// is the authority, this is its projection.
    pub fn record_restore(&self, run: cairn_types::ids::RunId) -> Result<(), WorkerError> {
        let _guard = self.home.record_lock(self.id);
        let mut record = self.record()?;
        record.request = Some(super::WorkerRequest {
            kind: super::WorkerRequestKind::Restore,
            at_ms: fsutil::now_ms(),
            run: Some(run),
        });
        self.write_record_unsynced(&record)
    }

    /// Replace `worker.json` atomically without syncing (the journal backs
    /// what it records; see [`WorkerDir::reserve_generation`]).
    fn write_record_unsynced(&self, record: &WorkerRecord) -> Result<(), WorkerError> {
        // Every caller holds the worker's record lock.
        self.write_record_as(record, self.locked_write(super::documents::Write::Unsynced))
    }

    /// Lay out a reserved generation: `runs/<gen>/`, made create-new when
    /// the reservation did not make it (an entry there already is a
    /// [`WorkerError::GenerationCollision`]), and `artifacts/` (a copy of
    /// generation `from`'s, when there is one). `spawned/` and the two logs
    /// are made when first written to (a delegation, the guest's first
    /// output): a trivial run allocates no inode it leaves empty.
    /// `artifacts/` itself
    /// is made only when `worktree` says the run may use it (its controller
    /// can open files, or something is to be moved into it) or there is a
    /// worktree to carry over: a controller that can open no file gets none
    /// (a host path that writes into it later makes it).
    ///
    /// The previous worktree is carried only when it is within `budget`
    /// (the new run's limits): one over them — its run was ended for it,
    /// or the limits were lowered since — is left where it is as evidence,
    /// the new run starts with an empty worktree, and its `worker.err.log`
    /// says why (so a session is never stuck behind one oversized tree).
    pub fn lay_out_generation(
        &self,
        reserved: Reserved,
        from: Option<Generation>,
        budget: &cairn_worktree::Budget,
        worktree: bool,
    ) -> Result<GenerationDir, WorkerError> {
        let Reserved {
            generation,
            runs,
            dir,
        } = reserved;
        let name = generation.to_string();
        let ctx = format!("worker {}: cannot lay out runs/{name}", self.id);
        let dir = match dir {
            Some(dir) => dir,
            // Create-new: an entry made since the reservation looked (by
            // hand: the home is this process's) is never taken over.
            None => match fsutil::create_dir_new(&runs, &name) {
                Ok(dir) => dir,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    return Err(WorkerError::GenerationCollision {
                        worker: self.id,
                        generation,
                    });
                }
                Err(e) => return Err(io_err(ctx)(e)),
            },
        };
        let mut carried_bytes = 0;
        let previous = from.and_then(|previous| {
            let prev = runs
                .open_dir(previous.to_string())
                .and_then(|d| d.open_dir("artifacts"));
            prev.ok().map(|prev| (previous, prev))
        });
        let Some((previous, prev)) = previous else {
            // Nothing to carry over: made, not opened (or not made).
            if worktree {
                fsutil::make_dir(&dir, "artifacts").map_err(io_err(ctx.clone()))?;
            }
            return Ok(self.laid_out_dir(generation, dir, carried_bytes));
        };
        let artifacts = fsutil::create_dir_new(&dir, "artifacts").map_err(io_err(ctx.clone()))?;
        let ctx = format!(
            "worker {}: cannot carry runs/{previous}/artifacts over to runs/{name}",
            self.id
        );
        match cairn_worktree::usage(&prev, budget).map_err(io_err(ctx.clone()))? {
            (used, None) => {
                cairn_worktree::copy(&prev, &artifacts, budget.depth).map_err(io_err(ctx))?;
                carried_bytes = used.bytes;
            }
            (_, Some((limit, value, max))) => {
                let note = format!(
                    "cairn: the worktree of generation {previous} was not carried over: it is over {limit} ({value} > {max}); this generation starts empty\n"
                );
                if let Ok(mut log) = fsutil::open_append(&dir, "worker.err.log") {
                    use std::io::Write;
                    let _ = log.write_all(note.as_bytes());
                }
            }
        }
        Ok(self.laid_out_dir(generation, dir, carried_bytes))
    }

    /// Generation `generation`'s laid-out directory. No directory sync
    /// here: the reservation is durable in the journal; a generation
    /// directory a crash loses is only missing evidence, and the next
    /// start reserves past it either way.
    fn laid_out_dir(&self, generation: Generation, dir: Dir, carried_bytes: u64) -> GenerationDir {
        let path = self.path().join("runs").join(generation.to_string());
        GenerationDir {
            generation,
            dir,
            artifacts_path: path.join("artifacts"),
            path,
            carried_bytes,
        }
    }

    /// Remove `artifacts/` of every generation older than the newest
    /// `keep` up to `newest` (logs stay; `keep` 0 keeps everything). The
    /// generations pruned.
    pub fn prune_worktrees(&self, newest: Generation, keep: u64) -> io::Result<Vec<Generation>> {
        let mut pruned = Vec::new();
        if keep == 0 {
            return Ok(pruned);
        }
        let runs = self.dir.open_dir("runs")?;
        for entry in runs.entries()? {
            let entry = entry?;
            let Some(g) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            if g.saturating_add(keep) > newest.0 {
                continue;
            }
            let dir = entry.open_dir()?;
            if dir.exists("artifacts") {
                fsutil::remove_tree(&dir, "artifacts")?;
                pruned.push(Generation(g));
            }
        }
        Ok(pruned)
    }

    /// Remove one generation's worktree (`runs/<generation>/artifacts`;
    /// its logs stay): a generation its run left for a later one, as an
    /// evicted run does at its restore.
    pub fn drop_worktree(&self, generation: Generation) -> io::Result<()> {
        let dir = self
            .dir
            .open_dir("runs")?
            .open_dir(generation.to_string())?;
        match dir.exists("artifacts") {
            true => fsutil::remove_tree(&dir, "artifacts"),
            false => Ok(()),
        }
    }

    /// `runs/`.
    pub fn runs_dir(&self) -> io::Result<Dir> {
        self.dir.open_dir("runs")
    }

    /// Open an existing generation's directory.
    pub fn generation_dir(&self, generation: Generation) -> Result<Dir, WorkerError> {
        self.dir
            .open_dir("runs")
            .and_then(|runs| runs.open_dir(generation.to_string()))
            .map_err(io_err(format!(
                "worker {}: cannot open runs/{generation}",
                self.id
            )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reservation made unmade goes past every entry `runs/` holds, makes
    /// nothing, and its lay-out makes the directory create-new: an entry
    /// made there since the reservation looked is a collision, never taken
    /// over. A made reservation goes past entries the same way, and makes
    /// its directory at once.
    #[test]
    fn an_unmade_reservation_goes_past_what_is_there_and_never_takes_over_what_came_since() {
        let tmp = tempfile::tempdir().unwrap();
        let home = Home::open(tmp.path()).unwrap();
        let session: SessionId = "s-generations".parse().unwrap();
        let worker = home
            .create_worker_unsynced(&session, None, "default")
            .unwrap();
        let runs = tmp
            .path()
            .join("workers")
            .join(worker.id.to_string())
            .join("runs");
        let budget = cairn_worktree::Budget::of(&cairn_types::limits::Limits::default());
        // `runs/1` a directory and `runs/2` a file, there before: past both.
        std::fs::create_dir(runs.join("1")).unwrap();
        std::fs::write(runs.join("2"), b"").unwrap();
        let reserved = worker.reserve_generation_unmade(None).unwrap();
        assert_eq!(reserved.generation, Generation(3));
        assert!(
            !runs.join("3").exists(),
            "an unmade reservation makes nothing"
        );
        let laid = worker
            .lay_out_generation(reserved, None, &budget, false)
            .unwrap();
        assert_eq!(laid.generation, Generation(3));
        assert!(runs.join("3").is_dir());
        worker.record_generation(Generation(3), None).unwrap();

        // `runs/4` made between the reservation and its lay-out.
        let reserved = worker.reserve_generation_unmade(None).unwrap();
        assert_eq!(reserved.generation, Generation(4));
        std::fs::create_dir(runs.join("4")).unwrap();
        std::fs::write(runs.join("4").join("evidence"), b"kept").unwrap();
        let err = worker
            .lay_out_generation(reserved, None, &budget, false)
            .unwrap_err();
        assert!(
            matches!(err, WorkerError::GenerationCollision { generation, .. } if generation == Generation(4)),
            "{err}"
        );
        assert!(err.to_string().contains("runs/4"), "{err}");
        assert_eq!(
            std::fs::read(runs.join("4").join("evidence")).unwrap(),
            b"kept",
            "what was there is left as it was"
        );

        // A made reservation goes past it and makes its directory at once.
        let reserved = worker.reserve_generation(None).unwrap();
        assert_eq!(reserved.generation, Generation(5));
        assert!(runs.join("5").is_dir());
    }
}
