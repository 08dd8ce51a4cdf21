//! Components: the wasmtime engine, validation against the world, and the
//! cache of compiled components and their `InstancePre`, per digest.
//!
//! ```
//! use cairn_component::{Components, precheck};
//!
//! // A core module is refused before any compile, saying what to do.
//! let core_module = b"\0asm\x01\0\0\0";
//! let why = precheck(core_module).unwrap_err().to_string();
//! assert!(why.contains("wasm32-wasip2"), "{why}");
//! // An engine with no pooled instances (memories allocated on demand)
//! // and no compiled-code cache on disk; nothing compiled yet.
//! let components = Components::new(0, 64 << 20, None)?;
//! assert_eq!(components.cache_usage(), (0, 0));
//! # Ok::<(), cairn_component::ComponentError>(())
//! ```

#![deny(missing_docs)]

mod bindings;
pub mod capability;
mod clock;
pub mod complexity;
pub mod cpu;
pub use cairn_worktree::fs;
mod host;
mod http;
pub use http::HTTP;
pub mod imports;
pub use imports::precheck;
mod limiter;
mod metered;
mod model;
mod pool;
mod run;
mod stable_fs;
pub mod timers;
mod tools;
pub use cairn_worktree as worktree;

pub use capability::{CallCtx, CallReply, CallSink, Capability, Grants};
pub use clock::JournalClock;
pub use host::{
    Answer, DecisionRequest, EmitDone, EmitRefusal, HostFailure, Outcome, RunHost, Turn, TurnRole,
    legacy,
};

use bindings::v2::ControllerPre as ControllerPreV2;
use bindings::{Controller, ControllerPre};
use cairn_types::ids::{Generation, RunId, SessionId, WorkerId};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::component::{Component, HasSelf, Linker, ResourceTable};
use wasmtime::{Config, Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// How often the epoch ticks: the granularity of CPU slices and of cancel.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);
/// The world every controller must implement.
pub const WORLD: &str = "cairn:controller/controller@0.2.1 (or @0.2.0, @0.1.0)";

/// What a controller says about itself.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Info {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Whether it can park.
    pub can_park: bool,
}

/// A component that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum ComponentError {
    /// Not a WebAssembly component at all.
    #[error("not a WebAssembly component: {0}")]
    NotAComponent(String),
    /// A component, but not of the controller world.
    #[error("the component does not implement {WORLD}: {0}")]
    WrongWorld(String),
    /// It trapped or failed while describing itself.
    #[error("the component failed in describe(): {0}")]
    DescribeFailed(String),
    /// The file could not be read.
    #[error("cannot read component {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The engine could not be set up.
    #[error("wasmtime engine: {0}")]
    Engine(String),
    /// Past the compile budget (see `complexity`).
    #[error("the component is too complex to compile: {0}")]
    TooComplex(String),
    /// It imports what this host does not provide (each import named, with
    /// what to do).
    #[error("the component imports what this host does not provide: {0}")]
    Unprovided(String),
    /// Every instance slot of the host is taken (the pooling allocator).
    #[error("the host has no instance free now (capacity: {0}); try again later")]
    Capacity(String),
}

/// Whether an instantiation failed for want of a pool slot, not because of
/// the component.
fn out_of_slots(e: &wasmtime::Error) -> bool {
    e.chain()
        .any(|cause| cause.is::<wasmtime::PoolConcurrencyLimitError>())
}

/// A compiled, linked, described component, shared by every run of it.
pub struct Prepared {
    digest: String,
    pre: Pre,
    info: Info,
    imports: Vec<String>,
}

/// A component's linked exports, by the world version it was built against:
/// the export records differ (0.2.0's `start` carries `tools`), so each is
/// called through its own bindings.
enum Pre {
    V1(ControllerPre<HostState>),
    V2(ControllerPreV2<HostState>),
}

impl Prepared {
    /// `sha256:<hex>` of the component's bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What it said about itself.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The interfaces it imports (`cairn:tools/mcp@0.1.0`, …).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// Whether it imports an interface of `package` (`cairn:tools`): what
    /// a run of it may need prepared before it starts.
    pub fn imports_package(&self, package: &str) -> bool {
        (self.imports.iter()).any(|i| i.strip_prefix(package).is_some_and(|r| r.starts_with('/')))
    }

    /// Whether it can open files (imports `wasi:filesystem`): only then
    /// does it see a `/` (its generation's `artifacts/`, preopened).
    pub fn opens_files(&self) -> bool {
        self.imports_package("wasi:filesystem")
    }
}

/// The digest cairn uses for component bytes.
pub fn digest_of(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// The engine and its cache.
pub struct Components {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Mutex<Cache>,
    /// Compilations at once (they run on blocking threads, never on the
    /// async ones that serve requests).
    compiling: tokio::sync::Semaphore,
    /// One compilation per digest at a time: identical bytes uploaded
    /// together are compiled once.
    inflight: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Long-running guests' turns on the runtime's threads.
    cpu: Arc<cpu::CpuGate>,
    _ticker: Ticker,
}

/// Compiled components by digest, least recently used evicted past a byte
/// budget (the compiled images' size), so uploads cannot grow the host
/// without bound. Runs hold their `Prepared` alive; eviction only means the
/// next use compiles again.
#[derive(Default)]
struct Cache {
    entries: HashMap<String, (Arc<Prepared>, u64, u64)>,
    bytes: u64,
    tick: u64,
    budget: u64,
}

impl Cache {
    fn get(&mut self, digest: &str) -> Option<Arc<Prepared>> {
        self.tick += 1;
        let tick = self.tick;
        self.entries.get_mut(digest).map(|(p, _, used)| {
            *used = tick;
            p.clone()
        })
    }

    fn insert(&mut self, digest: String, prepared: Arc<Prepared>, size: u64) {
        self.tick += 1;
        if let Some((_, old, _)) = self
            .entries
            .insert(digest.clone(), (prepared, size, self.tick))
        {
            self.bytes -= old;
        }
        self.bytes += size;
        while self.bytes > self.budget && self.entries.len() > 1 {
            let Some(oldest) = self
                .entries
                .iter()
                .filter(|(d, _)| **d != digest)
                .min_by_key(|(_, (_, _, used))| *used)
                .map(|(d, _)| d.clone())
            else {
                break;
            };
            if let Some((_, size, _)) = self.entries.remove(&oldest) {
                self.bytes -= size;
            }
        }
    }
}

pub use cairn_types::limits::DEFAULT_CACHE_BYTES;

/// How long `describe()` may take, wall clock (it may wait on nothing).
pub const DESCRIBE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);
/// The longest name a controller may give itself, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// The longest version string, in bytes.
pub const MAX_VERSION_BYTES: usize = 64;

/// Drops a digest's in-flight entry however its compilation ended.
struct InflightEntry<'a>(
    &'a Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    &'a str,
);

impl Drop for InflightEntry<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(self.1);
    }
}

struct Ticker {
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Components {
    /// A new engine (async, epoch interruption) with its epoch ticker, and a
    /// pooling allocator for `pool_instances` live instances whose memories
    /// may grow to `max_memory` (0 instances: allocate on demand). When the
    /// pool cannot be reserved here, it falls back to on-demand, saying so.
    ///
    /// With `cache_dir`, compiled code is kept there (wasmtime's own cache,
    /// keyed by the component's bytes and the engine's settings), so a
    /// restart loads what it compiled before instead of compiling again.
    pub fn new(
        pool_instances: u32,
        max_memory: u64,
        cache_dir: Option<&std::path::Path>,
    ) -> Result<Self, ComponentError> {
        let cache = match cache_dir {
            Some(dir) => {
                let mut settings = wasmtime::CacheConfig::new();
                settings.with_directory(dir);
                match wasmtime::Cache::new(settings) {
                    Ok(cache) => Some(cache),
                    Err(e) => {
                        tracing::warn!(
                            dir = %dir.display(),
                            error = format!("{e:#}"),
                            "no compiled-code cache; components compile at every start"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let base = || {
            let mut config = Config::new();
            config.wasm_component_model(true);
            config.epoch_interruption(true);
            config.cache(cache.clone());
            config
        };
        let engine = if pool_instances > 0 {
            let pool = pool::config(pool_instances, max_memory);
            let mut config = base();
            config.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
            match Engine::new(&config) {
                Ok(e) => e,
                Err(e) => {
                    tracing::warn!(
                        error = format!("{e:#}"),
                        "the pooling allocator is not available; allocating on demand"
                    );
                    Engine::new(&base()).map_err(|e| ComponentError::Engine(format!("{e:#}")))?
                }
            }
        } else {
            Engine::new(&base()).map_err(|e| ComponentError::Engine(format!("{e:#}")))?
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        // wasi:filesystem/types again, over wasmtime-wasi's, with what a
        // replay would see differently made constant.
        linker.allow_shadowing(true);
        wasmtime_wasi::p2::bindings::filesystem::types::add_to_linker::<
            HostState,
            stable_fs::StableFsData,
        >(&mut linker, |s| {
            let (meter, listings) = (s.artifacts.clone(), s.listings.clone());
            stable_fs::StableFs(
                wasmtime_wasi::filesystem::WasiFilesystemView::filesystem(s),
                meter,
                listings,
            )
        })
        .map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        timers::add_to_linker(&mut linker).map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        linker.allow_shadowing(false);
        Controller::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        bindings::v2::Controller::add_to_linker::<HostState, HasSelf<HostState>>(
            &mut linker,
            |s| s,
        )
        .map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        bindings::v21::history::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |s| s)
            .map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        model::add_to_linker(&mut linker).map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        tools::add_to_linker(&mut linker).map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        http::add_to_linker(&mut linker).map_err(|e| ComponentError::Engine(format!("{e:#}")))?;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        {
            let engine = engine.weak();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("cairn-epoch".into())
                .spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        match engine.upgrade() {
                            Some(e) => e.increment_epoch(),
                            None => break,
                        }
                    }
                })
                .map_err(|e| {
                    ComponentError::Engine(format!("cannot start the epoch ticker: {e}"))
                })?;
        }
        Ok(Components {
            engine,
            linker,
            cache: Mutex::new(Cache {
                budget: DEFAULT_CACHE_BYTES,
                ..Cache::default()
            }),
            compiling: tokio::sync::Semaphore::new(
                std::thread::available_parallelism()
                    .map_or(1, |n| n.get() / 2)
                    .max(1),
            ),
            inflight: Mutex::new(HashMap::new()),
            cpu: Arc::new(cpu::CpuGate::new(
                tokio::runtime::Handle::try_current()
                    .map(|h| h.metrics().num_workers())
                    .unwrap_or_else(|_| {
                        std::thread::available_parallelism().map_or(1, |n| n.get())
                    }),
            )),
            _ticker: Ticker { stop },
        })
    }

    /// Compile (or fetch from the cache) and describe a component from bytes.
    pub async fn prepare(&self, bytes: &[u8]) -> Result<Arc<Prepared>, ComponentError> {
        let digest = digest_of(bytes);
        if let Some(p) = self.cached(&digest) {
            return Ok(p);
        }
        precheck(bytes)?;
        // Identical bytes compile once: wait for one in flight, then look
        // in the cache again.
        let slot = self
            .inflight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(digest.clone())
            .or_default()
            .clone();
        let _compiling_this = slot.lock().await;
        let _done = InflightEntry(&self.inflight, &digest);
        if let Some(p) = self.cached(&digest) {
            return Ok(p);
        }
        let component = {
            let _permit = self
                .compiling
                .acquire()
                .await
                .map_err(|_| ComponentError::Engine("the compiler is shut down".into()))?;
            let engine = self.engine.clone();
            let owned = bytes.to_vec();
            tokio::task::spawn_blocking(move || Component::new(&engine, &owned))
                .await
                .map_err(|e| ComponentError::Engine(format!("the compiler failed: {e}")))?
                .map_err(|e| ComponentError::NotAComponent(format!("{e:#}")))?
        };
        imports::check_exports(&self.engine, &component)?;
        let instance_pre = self
            .linker
            .instantiate_pre(&component)
            .map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?;
        let pre = match ControllerPreV2::new(instance_pre.clone()) {
            Ok(pre) => Pre::V2(pre),
            Err(_) => Pre::V1(
                ControllerPre::new(instance_pre)
                    .map_err(|e| ComponentError::WrongWorld(format!("{e:#}")))?,
            ),
        };
        let info = self.describe(&pre).await?;
        let imports = component
            .component_type()
            .imports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let prepared = Arc::new(Prepared {
            digest: digest.clone(),
            pre,
            info,
            imports,
        });
        let image = component.image_range();
        let size = (image.end as usize).saturating_sub(image.start as usize) as u64;
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).insert(
            digest.clone(),
            prepared.clone(),
            size.max(bytes.len() as u64),
        );
        Ok(prepared)
    }

    /// A prepared component from the cache, by digest.
    pub fn cached(&self, digest: &str) -> Option<Arc<Prepared>> {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(digest)
    }

    /// Set the compiled-component cache's byte budget.
    pub fn set_cache_budget(&self, bytes: u64) {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).budget = bytes;
    }

    /// Compiled components held, and their bytes.
    pub fn cache_usage(&self) -> (usize, u64) {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        (cache.entries.len(), cache.bytes)
    }

    /// Read and prepare a component file.
    pub async fn prepare_file(
        &self,
        path: &Path,
    ) -> Result<(Arc<Prepared>, Vec<u8>), ComponentError> {
        let bytes = std::fs::read(path).map_err(|source| ComponentError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Ok((self.prepare(&bytes).await?, bytes))
    }

    async fn describe(&self, pre: &Pre) -> Result<Info, ComponentError> {
        let mut store = Store::new(&self.engine, HostState::sealed());
        store.limiter(|s| &mut s.limits);
        store.set_epoch_deadline(100);
        store.epoch_deadline_trap();
        let fail = |e: wasmtime::Error| ComponentError::DescribeFailed(format!("{e:#}"));
        let described = tokio::time::timeout(DESCRIBE_DEADLINE, async {
            let slots = |e: wasmtime::Error| {
                if out_of_slots(&e) {
                    ComponentError::Capacity(format!("{e:#}"))
                } else {
                    fail(e)
                }
            };
            Ok::<_, ComponentError>(match pre {
                Pre::V1(pre) => {
                    let instance = pre.instantiate_async(&mut store).await.map_err(slots)?;
                    let i = instance.call_describe(&mut store).await.map_err(fail)?;
                    (i.name, i.version, i.can_park)
                }
                Pre::V2(pre) => {
                    let instance = pre.instantiate_async(&mut store).await.map_err(slots)?;
                    let i = instance.call_describe(&mut store).await.map_err(fail)?;
                    (i.name, i.version, i.can_park)
                }
            })
        })
        .await
        .map_err(|_| {
            ComponentError::DescribeFailed(format!(
                "describe() did not return within {} s",
                DESCRIBE_DEADLINE.as_secs()
            ))
        })??;
        let (name, version, can_park) = described;
        if name.len() > MAX_NAME_BYTES || version.len() > MAX_VERSION_BYTES {
            return Err(ComponentError::DescribeFailed(format!(
                "describe() gave a name of {} bytes and a version of {} bytes; at most {MAX_NAME_BYTES} and {MAX_VERSION_BYTES}",
                name.len(),
                version.len()
            )));
        }
        Ok(Info {
            name,
            version,
            can_park,
        })
    }
}

/// What a run's sandbox is made of.
pub struct Sandbox {
    /// `runs/<gen>/artifacts/`: the guest's `/`.
    pub artifacts: std::path::PathBuf,
    /// A scope of the parent's `artifacts/` loaned to a child, opened
    /// without following links: its `/loan`.
    pub loan: Option<cap_std::fs::Dir>,
    /// `worker.out.log` (opened to append on the guest's first write: a
    /// run that writes nothing holds no descriptor for it).
    pub stdout: std::path::PathBuf,
    /// `worker.err.log` (likewise).
    pub stderr: std::path::PathBuf,
    /// The guest's clocks.
    pub clock: JournalClock,
    /// The run's limits.
    pub limits: cairn_types::limits::Limits,
    /// The run's side of every import.
    pub host: Arc<dyn RunHost>,
    /// The worktree's bytes against `artifact_bytes`, charged at each
    /// write (none: only the walks count).
    pub meter: Option<Arc<crate::worktree::ArtifactMeter>>,
}

/// What `run(start)` receives.
pub struct RunStart {
    /// The run.
    pub run_id: RunId,
    /// Its session.
    pub session_id: SessionId,
    /// Its worker.
    pub worker_id: WorkerId,
    /// Its generation.
    pub generation: Generation,
    /// The prompt.
    pub prompt: String,
    /// The run it continues.
    pub continues: Option<RunId>,
    /// The checkpoint it resumes from.
    pub checkpoint: Option<Vec<u8>>,
    /// The seed of its randomness (journaled in `Started`).
    pub seed: u64,
    /// The tools its client offered, as JSON (journaled in `Started`).
    pub tools: Option<String>,
}

/// Why a run's instance stopped without an outcome.
#[derive(Debug, thiserror::Error)]
pub enum RunTrap {
    /// It could not be set up.
    #[error("cannot start the controller: {0}")]
    Setup(String),
    /// It trapped (or was interrupted, or a host call failed).
    #[error("{0}")]
    Trap(String),
    /// Its resource table refused a handle: it holds as many as it may
    /// (open files, streams).
    #[error("{0}")]
    TableFull(String),
}

/// The store's data: WASI, the resource table, limits and the run's host.
pub struct HostState {
    wasi: WasiCtx,
    table: ResourceTable,
    limits: limiter::Limiter,
    host: Option<Arc<dyn RunHost>>,
    /// The run's worktree bytes, charged at each write.
    artifacts: Option<Arc<crate::worktree::ArtifactMeter>>,
    /// The tool list this run's latest `cairn:tools` `list` answered (a
    /// call finds its tool there; journaled, so a replay finds the same).
    tools: Option<Vec<cairn_types::tools::ToolInfo>>,
    /// Outgoing HTTP (`wasi:http`).
    http: http::Http,
    /// Open directory streams, sorted (see `stable_fs`).
    listings: stable_fs::Listings,
    /// The run's clock (none in `describe()`), and its timers so far.
    clock: Option<clock::JournalClock>,
    timers: u64,
}

impl HostState {
    /// A state with no filesystem, no host: for describe().
    fn sealed() -> Self {
        HostState {
            wasi: wasmtime_wasi::WasiCtxBuilder::new().build(),
            table: ResourceTable::new(),
            limits: limiter::Limiter::new(
                cairn_types::limits::Limits {
                    memory_bytes: 64 << 20,
                    ..Default::default()
                },
                None,
            ),
            host: None,
            artifacts: None,
            tools: None,
            http: http::Http::new(None, 0),
            listings: Default::default(),
            clock: None,
            timers: 0,
        }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}
