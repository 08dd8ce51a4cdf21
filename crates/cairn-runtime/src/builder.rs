//! [`RuntimeBuilder`]: a runtime is opened with what its embedder
//! registers — the shared stores it may open (`[store] url`) and the
//! capabilities controllers may call — and the generation seams this crate
//! provides (`worker.sock`, when `config.sockets`); the runtime itself
//! names only traits.

use crate::runtime::{GenerationSeam, Runtime, RuntimeConfig, RuntimeError};
use crate::store::SharedStoreConnector;
use std::sync::Arc;

/// Opens a [`Runtime`] with registered parts.
///
/// ```no_run
/// # async fn f(home: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
/// use cairn_runtime::{Runtime, RuntimeConfig};
/// let config = RuntimeConfig::load(home, None)?;
/// let rt = Runtime::builder(config).open().await?;
/// # drop(rt); Ok(()) }
/// ```
pub struct RuntimeBuilder {
    config: RuntimeConfig,
    shared: Vec<Arc<dyn SharedStoreConnector>>,
    capabilities: Vec<Arc<dyn crate::component::Capability>>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("home", &self.config.home)
            .field("shared_stores", &self.shared.len())
            .field(
                "capabilities",
                &self
                    .capabilities
                    .iter()
                    .map(|c| c.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl RuntimeBuilder {
    /// A builder over `config`, with nothing registered.
    pub fn new(config: RuntimeConfig) -> RuntimeBuilder {
        RuntimeBuilder {
            config,
            shared: Vec::new(),
            capabilities: Vec::new(),
        }
    }

    /// A shared store this runtime may open when `[store] url` (or
    /// `--store`) names one it accepts (cairn-store-postgres for
    /// `postgres://`).
    pub fn shared_store(mut self, connector: impl SharedStoreConnector + 'static) -> Self {
        self.shared.push(Arc::new(connector));
        self
    }

    /// A capability controllers may call (`cairn:model` through
    /// cairn-capabilities' model capability, …): its calls are journaled and
    /// replayed by the runtime; the capability only does them live. A later
    /// registration of the same name replaces an earlier one.
    pub fn capability(mut self, capability: Arc<dyn crate::component::Capability>) -> Self {
        self.capabilities.retain(|c| c.name() != capability.name());
        self.capabilities.push(capability);
        self
    }

    /// The config the runtime will open with (what a capability is
    /// configured from).
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// Open the runtime on its home (see [`Runtime::open`]).
    pub async fn open(self) -> Result<Runtime, RuntimeError> {
        let seams: Vec<Arc<dyn GenerationSeam>> = match self.config.sockets {
            true => vec![Arc::new(crate::socket::WorkerSocket)],
            false => Vec::new(),
        };
        Runtime::open_with(self.config, &self.shared, self.capabilities, seams).await
    }
}

impl Runtime {
    /// Open a runtime on `config.home`. With `config.restore`, interrupted
    /// runs found there are restored by replay (see [`Runtime::restored`]).
    pub async fn open(config: RuntimeConfig) -> Result<Runtime, RuntimeError> {
        Self::builder(config).open().await
    }

    /// A builder for a runtime over `config`.
    pub fn builder(config: RuntimeConfig) -> RuntimeBuilder {
        RuntimeBuilder::new(config)
    }
}
