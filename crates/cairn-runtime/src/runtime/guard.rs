//! The owner keeps checking that the home's lock file is still the one it
//! holds: `flock` is on the file's inode, so a lock file removed or
//! replaced (a tmp cleaner, an operator clearing "stale" locks) would let a
//! second owner in while this one goes on writing. Once it is gone this
//! process writes nothing more: runs end at their next write
//! (`lost_authority`) and the API answers `503 lost_authority`.

use super::Runtime;
use std::time::Duration;

/// How often the lock file is checked.
pub const LOCK_CHECK: Duration = Duration::from_millis(200);

impl Runtime {
    /// Why this process lost the home's lock, once it did.
    pub fn lock_lost(&self) -> Option<String> {
        self.inner.home.lost().map(str::to_string)
    }

    /// Watch the home's lock for as long as this runtime lives.
    pub(crate) fn watch_lock(&self) {
        let weak = std::sync::Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(LOCK_CHECK).await;
                let Some(inner) = weak.upgrade() else {
                    return;
                };
                // Checked and, while intact, beaten under one hold of the lock.
                let broken = inner
                    .lock
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .as_ref()
                    .map(|lock| lock.intact().inspect(|()| lock.beat()));
                match broken {
                    Some(Err(reason)) => {
                        tracing::error!(
                            home = %inner.home.path().display(),
                            "the home's lock is lost ({reason}): this process writes nothing more; restart it once no other owner runs"
                        );
                        inner.home.lose(reason);
                        return;
                    }
                    Some(Ok(())) => {}
                    // Released (a clean stop) or never held (a reader).
                    None => return,
                }
            }
        });
    }
}
