//! Components: resolving one (a built-in, a file, bytes, a digest; stored
//! here or at another instance), storing one checked and uncompiled (an
//! upload), compiling and describing one, and warming them all at start.

use super::*;

impl Runtime {
    pub(crate) async fn resolve(
        &self,
        component: &ComponentRef,
    ) -> Result<(Arc<Prepared>, Option<Cow<'static, [u8]>>), RuntimeError> {
        match component {
            ComponentRef::BuiltIn(name) => {
                let unknown = || RuntimeError::UnknownExample {
                    name: name.clone(),
                    known: cairn_examples::names().join(", "),
                };
                let bytes = cairn_examples::built_in(name).ok_or_else(unknown)?;
                // A warm start hashes nothing: the digest is memoised.
                let digest = cairn_examples::built_in_digest(name).ok_or_else(unknown)?;
                let prepared = match self.inner.components.cached(digest) {
                    Some(p) => p,
                    None => self.inner.components.prepare(bytes).await?,
                };
                Ok((prepared, Some(Cow::Borrowed(bytes))))
            }
            ComponentRef::Path(path) => {
                let (p, bytes) = self.inner.components.prepare_file(path).await?;
                Ok((p, Some(Cow::Owned(bytes))))
            }
            ComponentRef::Bytes(bytes) => Ok((
                self.inner.components.prepare(bytes).await?,
                Some(Cow::Owned(bytes.to_vec())),
            )),
            ComponentRef::Digest(digest) => {
                if let Some(p) = self.inner.components.cached(digest) {
                    return Ok((p, None));
                }
                let bytes = match self.component_bytes(digest) {
                    Some(b) => b,
                    // Stored by another instance on the shared store.
                    None => {
                        let b = self
                            .shared_component(digest)
                            .await
                            .ok_or_else(|| RuntimeError::UnknownComponent(digest.clone()))?;
                        self.inner.bytes.put_component(digest, &b)?;
                        b
                    }
                };
                Ok((self.inner.components.prepare(&bytes).await?, None))
            }
        }
    }

    /// A component's bytes by digest: stored in this home, or built in.
    pub fn component_bytes(&self, digest: &str) -> Option<Vec<u8>> {
        self.inner.bytes.component(digest).or_else(|| {
            cairn_examples::BUILT_IN
                .iter()
                .find(|(_, b)| crate::component::digest_of(b) == digest)
                .map(|(_, b)| b.to_vec())
        })
    }

    /// Check a component as far as a parse can (a component, importing
    /// only what this host provides, within the compile budget) and keep
    /// its bytes in this home, compiling nothing: an upload answers at once
    /// and compiles after ([`Runtime::add_component`] by digest). Its
    /// digest.
    pub async fn store_component(&self, bytes: &[u8]) -> Result<String, RuntimeError> {
        crate::component::precheck(bytes)?;
        let digest = crate::component::digest_of(bytes);
        self.inner.bytes.put_component(&digest, bytes)?;
        self.share_component(&digest, bytes).await;
        Ok(digest)
    }

    /// What a compiled component said of itself, when it is compiled.
    pub fn compiled_info(&self, digest: &str) -> Option<Info> {
        self.inner
            .components
            .cached(digest)
            .map(|p| p.info().clone())
    }

    /// Compile, validate and describe a component, and keep it in this home.
    pub async fn add_component(
        &self,
        component: &ComponentRef,
    ) -> Result<(String, Info), RuntimeError> {
        let (p, bytes) = self.resolve(component).await?;
        if let Some(bytes) = bytes {
            self.inner.bytes.put_component(p.digest(), &bytes)?;
            self.share_component(p.digest(), &bytes).await;
        }
        Ok((p.digest().to_string(), p.info().clone()))
    }

    /// Compile every built-in component and every component the home
    /// stores (up to the compiled-component cache's budget), so the first
    /// run of each after start does not wait on compilation: `serve` calls
    /// it before it reports ready. Returns how many were compiled; one that
    /// does not compile is reported and skipped.
    pub async fn warm_components(&self, report: &mut dyn FnMut(String)) -> usize {
        let mut refs: Vec<ComponentRef> = cairn_examples::names()
            .into_iter()
            .map(|n| ComponentRef::BuiltIn(n.to_string()))
            .collect();
        let budget = self.inner.config.host.limits.component_cache_bytes;
        let mut stored = 0u64;
        for digest in self.inner.bytes.component_digests() {
            stored += self.inner.bytes.component_len(&digest).unwrap_or(0);
            if stored > budget {
                report(format!(
                    "not compiling the rest of the stored components before ready: \
                     they pass the compiled-component cache's budget ({budget} bytes)"
                ));
                break;
            }
            refs.push(ComponentRef::Digest(digest));
        }
        // Several at once (a restart loads each from the compiled cache:
        // reading, decompressing and mapping it keeps a core busy).
        use futures_util::StreamExt;
        let results: Vec<_> = futures_util::stream::iter(refs)
            .map(|component| async move {
                let r = self.resolve(&component).await;
                (component, r)
            })
            .buffer_unordered(crate::store::file::cores())
            .collect()
            .await;
        let mut compiled = 0;
        for (component, r) in results {
            match r {
                Ok(_) => compiled += 1,
                Err(e) => report(format!("component {component:?} not compiled: {e}")),
            }
        }
        compiled
    }
}
