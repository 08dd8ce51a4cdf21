//! A loaned scope, opened by handle. The parent guest runs while its child
//! starts and may rename or link anything in its `artifacts/`, so a scope
//! is never checked by path and opened later: each name is opened beneath
//! the one before with `O_NOFOLLOW | O_DIRECTORY`, and the child's `/loan`
//! is the directory that handle holds. No rename or link made after the
//! open can move it, and no link is ever followed on the way.

use cap_std::fs::Dir;
use rustix::fs::{Mode, OFlags};
use std::path::{Component, Path};

/// A scope as given: a relative path of plain names, normalised (`a/b`).
pub(crate) fn check_scope(scope: &str) -> Result<String, String> {
    let path = Path::new(scope);
    let mut parts = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => parts.push(
                n.to_str()
                    .ok_or_else(|| format!("scope {scope:?} is not UTF-8"))?
                    .to_string(),
            ),
            Component::CurDir => {}
            _ => {
                return Err(format!(
                    "scope {scope:?} must be a relative directory inside artifacts/ (no `..`, no absolute path)"
                ));
            }
        }
    }
    if parts.is_empty() {
        return Err(format!(
            "scope {scope:?} names no directory inside artifacts/"
        ));
    }
    Ok(parts.join("/"))
}

/// Open `scope` (a checked relative path, `a/b`) beneath `artifacts`, one
/// name at a time, following no link. The error names the scope relative
/// to `artifacts/`, never a host path.
pub(crate) fn open_scope(artifacts: &Dir, scope: &str) -> Result<Dir, String> {
    let scope = check_scope(scope)?;
    let mut at: Option<Dir> = None;
    let mut walked = String::new();
    for name in scope.split('/') {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(name);
        let parent = at.as_ref().unwrap_or(artifacts);
        let fd = rustix::fs::openat(
            parent,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => format!(
                "scope {scope:?} is not a directory of artifacts/ ({walked} is a link or a file)"
            ),
            rustix::io::Errno::NOENT => {
                format!("scope {scope:?}: artifacts/{walked} does not exist")
            }
            e => format!(
                "scope {scope:?}: cannot open artifacts/{walked}: {}",
                std::io::Error::from(e)
            ),
        })?;
        at = Some(Dir::from_std_file(std::fs::File::from(fd)));
    }
    at.ok_or_else(|| format!("scope {scope:?} names no directory inside artifacts/"))
}

/// Make `scope` beneath `artifacts` (cap-std: nothing outside it is
/// reached) and open it as [`open_scope`] does.
pub(crate) fn make_scope(artifacts: &Path, scope: &str) -> Result<Dir, String> {
    let dir = super::worktrees::open_artifacts(artifacts)
        .map_err(|e| format!("cannot open the caller's artifacts/: {}", e.kind()))?;
    match dir.create_dir_all(scope) {
        // A file or a link on the way: the open names which.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(format!(
                "cannot make scope {scope:?} in artifacts/: {}",
                e.kind()
            ));
        }
        Ok(()) => {}
    }
    open_scope(&dir, scope)
}

/// Move the loaned `scope` of `from` (a generation's `artifacts/`) to the
/// same place in `to` (a newer generation's), replacing what `to` holds
/// there: a rename, so a child that has the scope open as its `/loan`
/// keeps writing into it where it now is. Each name on the way is opened
/// as [`open_scope`] does (no link followed), and the scope itself must be
/// a directory.
pub(crate) fn move_scope(from: &Dir, to: &Dir, scope: &str) -> Result<(), String> {
    let scope = check_scope(scope)?;
    let (above, name) = match scope.rsplit_once('/') {
        Some((above, name)) => (Some(above), name),
        None => (None, scope.as_str()),
    };
    let src = match above {
        Some(a) => open_scope(from, a)?,
        None => from
            .try_clone()
            .map_err(|e| format!("cannot open artifacts/: {}", e.kind()))?,
    };
    // The scope itself: a directory, not a link to one.
    let kind = rustix::fs::statat(&src, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
        .map_err(|e| format!("scope {scope:?}: {}", std::io::Error::from(e)))?;
    if rustix::fs::FileType::from_raw_mode(kind.st_mode) != rustix::fs::FileType::Directory {
        return Err(format!("scope {scope:?} is not a directory of artifacts/"));
    }
    let dst = match above {
        Some(a) => {
            match to.create_dir_all(a) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(format!("cannot make artifacts/{a}: {}", e.kind()));
                }
                _ => {}
            }
            open_scope(to, a)?
        }
        None => to
            .try_clone()
            .map_err(|e| format!("cannot open artifacts/: {}", e.kind()))?,
    };
    if rustix::fs::statat(&dst, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok() {
        crate::fsutil::remove_tree(&dst, name)
            .map_err(|e| format!("cannot clear artifacts/{scope} for the loan: {}", e.kind()))?;
    }
    rustix::fs::renameat(&src, name, &dst, name)
        .map_err(|e| format!("cannot move scope {scope:?}: {}", std::io::Error::from(e)))
}

/// What a child left in the scope it was lent, recorded when its parent
/// hears it ended (a `workers` status or wait answer): the answer gains
/// `scope` and `snapshot` (the digest of the scope's contents, kept with
/// the parent's worktree snapshots), so an offline replay lays the scope
/// out at that point of the parent's run (issue 35). Not recorded (a
/// warning) when the scope cannot be read; the answer goes as it was.
pub(crate) async fn record_returned(
    rt: &super::Runtime,
    ctx: &super::RunCtx,
    scope: &str,
    status: &mut serde_json::Value,
) {
    let ended = matches!(
        status["state"].as_str(),
        Some("finished" | "failed" | "cancelled" | "stopped" | "pruned")
    ) && status["interrupted"] != true;
    let (Some(place), true) = (ctx.place(), ended) else {
        return;
    };
    let Ok(parent) = rt.workers().open_worker(place.worker_id) else {
        return;
    };
    let (artifacts, scope_name) = (place.artifacts.clone(), scope.to_string());
    let depth = ctx.limits.artifact_depth;
    let recorded = tokio::task::spawn_blocking(move || {
        let artifacts = Dir::open_ambient_dir(&artifacts, cap_std::ambient_authority())
            .map_err(|e| e.to_string())?;
        let tree = open_scope(&artifacts, &scope_name)?;
        parent
            .record_worktree(&tree, depth)
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|r| r);
    match recorded {
        Ok(Some(snapshot)) => {
            rt.share_snapshot(place.worker_id, &snapshot.digest).await;
            status["scope"] = scope.into();
            status["snapshot"] = snapshot.digest.into();
        }
        Ok(None) => status["scope"] = scope.into(),
        Err(e) => tracing::warn!(
            run_id = %ctx.run_id,
            "the scope {scope:?} a child returned is not recorded (an offline replay will not have it): {e}"
        ),
    }
}

/// In an offline replay, lay out what a `workers` answer says a child
/// left in its scope (`scope`, `snapshot`) in the replay's worktree,
/// before the controller hears the answer. A live run or a restore has the
/// scope itself: nothing is done.
pub(crate) async fn lay_out_returned(
    ctx: &super::RunCtx,
    answer: &serde_json::Value,
) -> Result<(), String> {
    let (Some(worker), Some(place)) = (ctx.replay_worker.get(), ctx.place()) else {
        return Ok(());
    };
    let (Some(scope), Some(digest)) = (answer["scope"].as_str(), answer["snapshot"].as_str())
    else {
        return Ok(());
    };
    let worker = worker.try_clone().map_err(|e| e.to_string())?;
    let (artifacts, scope, digest) = (
        place.artifacts.clone(),
        scope.to_string(),
        digest.to_string(),
    );
    tokio::task::spawn_blocking(move || {
        let tree = make_scope(&artifacts, &scope)?;
        worker
            .lay_out_worktree(&digest, &tree)
            .map(|_| ())
            .map_err(|e| format!("the scope {scope:?} a child returned: {e}"))
    })
    .await
    .map_err(|e| e.to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn ino(dir: &Dir) -> (u64, u64) {
        let m = dir.dir_metadata().unwrap();
        (
            cap_std::fs::MetadataExt::dev(&m),
            cap_std::fs::MetadataExt::ino(&m),
        )
    }

    #[test]
    fn a_moved_scope_keeps_its_open_handle_and_follows_no_link() {
        let tmp = tempfile::tempdir().unwrap();
        let (old, new) = (tmp.path().join("g1"), tmp.path().join("g2"));
        std::fs::create_dir_all(old.join("work/part")).unwrap();
        std::fs::create_dir_all(new.join("work/part")).unwrap();
        std::fs::write(new.join("work/part/stale.txt"), "from before").unwrap();
        let from = Dir::open_ambient_dir(&old, cap_std::ambient_authority()).unwrap();
        let to = Dir::open_ambient_dir(&new, cap_std::ambient_authority()).unwrap();
        // A child holds the scope open; it moves; writes follow it.
        let held = open_scope(&from, "work/part").unwrap();
        move_scope(&from, &to, "work/part").unwrap();
        held.write("out.txt", "written after the move").unwrap();
        assert_eq!(
            std::fs::read_to_string(new.join("work/part/out.txt")).unwrap(),
            "written after the move"
        );
        assert!(!new.join("work/part/stale.txt").exists());
        assert!(!old.join("work/part").exists());
        // A scope that is a link, or one reached through a link, is not
        // moved (nor is what the link names).
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(outside.join("x")).unwrap();
        std::os::unix::fs::symlink(&outside, old.join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.join("x"), old.join("scope-link")).unwrap();
        for scope in ["linked/x", "scope-link"] {
            let err = move_scope(&from, &to, scope).unwrap_err();
            assert!(!err.contains(tmp.path().to_str().unwrap()), "{err}");
        }
        assert!(outside.join("x").is_dir(), "the link's target stayed");
    }

    #[test]
    fn a_link_anywhere_on_the_way_is_refused_and_named_relatively() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("artifacts");
        std::fs::create_dir_all(root.join("real/inner")).unwrap();
        std::os::unix::fs::symlink("real", root.join("link")).unwrap();
        std::os::unix::fs::symlink("/", root.join("real/up")).unwrap();
        std::fs::write(root.join("file"), "x").unwrap();
        let dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority()).unwrap();
        assert!(open_scope(&dir, "real/inner").is_ok());
        for (scope, names) in [
            ("link", "link is a link"),
            ("link/inner", "link is a link"),
            ("real/up", "real/up is a link"),
            ("file", "file is a link or a file"),
            ("missing/x", "artifacts/missing does not exist"),
        ] {
            let err = open_scope(&dir, scope).unwrap_err();
            assert!(err.contains(names), "{scope}: {err}");
            assert!(
                !err.contains(tmp.path().to_str().unwrap()),
                "a host path in {err:?}"
            );
        }
        assert!(open_scope(&dir, "../x").is_err());
        assert!(open_scope(&dir, "/etc").is_err());
    }

    /// A generation laid out without `artifacts/` (its controller opens no
    /// file) gets one, owner-only, when a scope of it is loaned; a link
    /// put in its place leads nowhere.
    #[test]
    fn a_scope_of_a_generation_without_artifacts_makes_them() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let generation = tmp.path().join("w/runs/1");
        std::fs::create_dir_all(&generation).unwrap();
        let root = generation.join("artifacts");
        let scope = make_scope(&root, "lent/deep").unwrap();
        scope.write("out.txt", "x").unwrap();
        assert_eq!(
            std::fs::read_to_string(root.join("lent/deep/out.txt")).unwrap(),
            "x"
        );
        let mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);

        let other = tmp.path().join("w/runs/2");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, other.join("artifacts")).unwrap();
        let err = make_scope(&other.join("artifacts"), "s").unwrap_err();
        assert!(err.contains("artifacts/"), "{err}");
        assert!(!outside.join("s").exists(), "nothing made through the link");
    }

    /// The attack of the hostile round, in-process: one thread swaps the
    /// scope with a link to `/` as fast as it can while another opens the
    /// scope and hands the handle over by its path. Every open either
    /// fails or holds the real scope; none holds anything else.
    #[test]
    fn renames_and_links_racing_the_open_never_lead_out() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("w/runs/0/artifacts");
        std::fs::create_dir_all(root.join("s")).unwrap();
        std::fs::write(root.join("s/inside.txt"), "inside").unwrap();
        std::os::unix::fs::symlink("../../../../../../../../../../../../", root.join("L")).unwrap();
        let dir = Dir::open_ambient_dir(&root, cap_std::ambient_authority()).unwrap();
        let real = ino(&dir.open_dir("s").unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (root, stop) = (root.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::fs::rename(root.join("s"), root.join("t"));
                    let _ = std::fs::rename(root.join("L"), root.join("s"));
                    let _ = std::fs::rename(root.join("s"), root.join("L"));
                    let _ = std::fs::rename(root.join("t"), root.join("s"));
                    swaps += 1;
                }
                swaps
            })
        };
        let (mut held, mut refused) = (0u32, 0u32);
        for _ in 0..20_000 {
            match open_scope(&dir, "s") {
                Ok(loan) => {
                    // What a preopen of the handed-over path would open.
                    let path = crate::fsutil::handle_path(&loan).unwrap();
                    let opened =
                        Dir::open_ambient_dir(&path, cap_std::ambient_authority()).unwrap();
                    assert_eq!(ino(&loan), real, "the handle is not the scope");
                    assert_eq!(ino(&opened), real, "the handed-over path led elsewhere");
                    assert!(opened.exists("inside.txt"));
                    held += 1;
                }
                Err(_) => refused += 1,
            }
        }
        stop.store(true, Ordering::Relaxed);
        let swaps = swapper.join().unwrap();
        assert!(swaps > 100, "the race did not run ({swaps} swaps)");
        assert!(
            held > 0,
            "held {held}, refused {refused}: the scope was never opened"
        );
        tracing::info!(
            swaps,
            held,
            refused,
            "the loan race: opens that held the scope, and refusals"
        );
        let root_dev = std::fs::metadata("/").unwrap();
        assert_ne!(real, (root_dev.dev(), root_dev.ino()));
    }
}
