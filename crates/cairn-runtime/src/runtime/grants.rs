//! Uploaded components and their grants, on a shared store seen alike at
//! every instance: an upload's bytes and its workspace's grant go to the
//! store, and an instance brings in what others stored before it lists or
//! uses them.

use super::{Runtime, RuntimeError};

impl Runtime {
    /// The components `workspace` uploaded (`sha256:` digests). On a
    /// shared store, uploads made at other instances are brought here
    /// first (bytes and grant), so every instance offers the same ones.
    pub async fn granted(&self, workspace: &str) -> Vec<String> {
        let local = self.inner.bytes.granted(workspace);
        let Some(c) = &self.inner.cluster else {
            return local;
        };
        let prefix = format!("{}.", grant_prefix(workspace));
        let keys = match c.shared.keys("grant").await {
            Ok(k) => k,
            Err(e) => {
                tracing::warn!("cannot read the shared grants of {workspace}: {e}");
                return local;
            }
        };
        for key in keys {
            let name = key.rsplit('/').next().unwrap_or_default();
            let Some(hex) = name.strip_prefix(&prefix) else {
                continue;
            };
            let digest = format!("sha256:{hex}");
            if local.contains(&digest) {
                continue;
            }
            let Some(bytes) = self.shared_component(&digest).await else {
                continue;
            };
            // Checked as any upload is: the bytes must be what they claim.
            if crate::component::digest_of(&bytes) != digest {
                tracing::warn!("the shared component {digest} does not match its digest; not used");
                continue;
            }
            if let Err(e) = self
                .inner
                .bytes
                .put_component(&digest, &bytes)
                .and_then(|()| self.inner.bytes.grant_component(workspace, &digest))
            {
                tracing::warn!("cannot keep shared component {digest}: {e}");
            }
        }
        self.inner.bytes.granted(workspace)
    }

    /// Whether `workspace` uploaded `digest` (here first; then, on a
    /// shared store, at any instance).
    pub async fn may_use(&self, workspace: &str, digest: &str) -> bool {
        let has = |list: Vec<String>| list.iter().any(|d| d == digest);
        has(self.inner.bytes.granted(workspace))
            || (self.clustered() && has(self.granted(workspace).await))
    }

    /// Let `workspace` use a stored component (here, and on a shared
    /// store at every instance).
    pub async fn grant(&self, workspace: &str, digest: &str) -> Result<(), RuntimeError> {
        self.inner.bytes.grant_component(workspace, digest)?;
        if let Some(c) = &self.inner.cluster
            && let Some(hex) = digest.strip_prefix("sha256:")
        {
            c.shared
                .put(&format!("grant/{}.{hex}", grant_prefix(workspace)), b"")
                .await?;
        }
        Ok(())
    }

    /// The stored size of a component this home keeps.
    pub fn component_len(&self, digest: &str) -> Option<u64> {
        self.inner.bytes.component_len(digest)
    }
}

/// A workspace's part of a grant key (any workspace name fits a key).
fn grant_prefix(workspace: &str) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(workspace.as_bytes()))
}
