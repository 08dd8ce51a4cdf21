//! The runtime's metrics registry (prometheus-client): one per runtime,
//! never process-global. Gauges say what is live now; counters and
//! histograms count since the runtime opened. `GET /metrics` encodes it.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;
use std::time::Duration;

/// A run's end, as a label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabel {
    /// `finished`, `failed`, `cancelled`, `parked`.
    pub status: String,
}

/// A live state, as a label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    /// `preparing`, `running` (and, in the legacy family, the ended states).
    pub state: String,
}

/// An HTTP request, as labels: its route as matched (never the raw path).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// `GET`, `POST`, …
    pub method: String,
    /// The route template, such as `/v1/runs/{id}`.
    pub route: String,
    /// The status code.
    pub status: u16,
}

/// A model call, as labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelCallLabels {
    /// The workspace that called.
    pub workspace: String,
    /// The model entry (`[models.NAME]`), never a provider URL.
    pub model: String,
    /// `ok`, or the error's code (`refused`, `provider`, …).
    pub outcome: String,
}

/// Model tokens, as labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ModelTokenLabels {
    /// The workspace that called.
    pub workspace: String,
    /// The model entry.
    pub model: String,
    /// `input` or `output`.
    pub direction: String,
}

/// A route, as a label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabel {
    /// The route template.
    pub route: String,
}

fn seconds_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

fn run_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 20))
}

/// One runtime's metrics.
pub struct Telemetry {
    registry: Mutex<Registry>,
    pub(crate) runs_started: Counter,
    pub(crate) runs_ended: Family<StatusLabel, Counter>,
    pub(crate) run_seconds: Family<StatusLabel, Histogram, fn() -> Histogram>,
    pub(crate) commits: Counter,
    pub(crate) commit_seconds: Histogram,
    pub(crate) appended: Counter,
    requests: Family<RequestLabels, Counter>,
    request_seconds: Family<RouteLabel, Histogram, fn() -> Histogram>,
    pub(crate) live: Family<StateLabel, Gauge>,
    pub(crate) waiting: Gauge,
    /// Live runs out of memory now (evicted while they wait on a timer).
    pub(crate) evicted: Gauge,
    /// Evictions since the runtime opened.
    pub(crate) evictions: Counter,
    pub(crate) legacy_runs: Family<StateLabel, Gauge>,
    pub(crate) model_calls: Family<ModelCallLabels, Counter>,
    pub(crate) model_tokens: Family<ModelTokenLabels, Counter>,
    /// What the runtime knows elsewhere, copied in at each scrape.
    pub(crate) scraped: Scraped,
}

/// The gauges set from the runtime at each scrape, and the counters
/// brought up to totals kept elsewhere.
#[derive(Default)]
pub(crate) struct Scraped {
    pub(crate) subscribers: Gauge,
    pub(crate) decisions_pending: Gauge,
    pub(crate) open_journals: Gauge,
    pub(crate) live_window_bytes: Gauge,
    pub(crate) compiled_components: Gauge,
    pub(crate) compiled_component_bytes: Gauge,
    pub(crate) leases_held: Gauge,
    pub(crate) windows_evicted: Counter,
    pub(crate) relay_notifications: Counter,
    pub(crate) syncs: Counter,
}

impl Scraped {
    fn register(&self, registry: &mut Registry) {
        let gauges = [
            (
                "cairn_subscribers",
                "Journal subscribers now.",
                &self.subscribers,
            ),
            (
                "cairn_decisions_pending",
                "Decisions waiting for an answer.",
                &self.decisions_pending,
            ),
            (
                "cairn_open_journals",
                "Sessions whose journal and live window are held in memory.",
                &self.open_journals,
            ),
            (
                "cairn_live_window_bytes",
                "Bytes (as journaled) every session's live window holds together.",
                &self.live_window_bytes,
            ),
            (
                "cairn_compiled_components",
                "Compiled components held ready.",
                &self.compiled_components,
            ),
            (
                "cairn_compiled_component_bytes",
                "Bytes of the compiled components held ready.",
                &self.compiled_component_bytes,
            ),
            (
                "cairn_leases_held",
                "Session leases this instance holds on the shared store.",
                &self.leases_held,
            ),
        ];
        for (name, help, gauge) in gauges {
            registry.register(name, help, gauge.clone());
        }
        let counters = [
            (
                "cairn_live_windows_evicted",
                "Live windows nobody followed, emptied to stay under [limits] live_total_bytes.",
                &self.windows_evicted,
            ),
            (
                "cairn_relay_notifications",
                "Appends other writers announced (LISTEN cairn_journal).",
                &self.relay_notifications,
            ),
            (
                "cairn_syncs",
                "fsync and fdatasync calls of this process.",
                &self.syncs,
            ),
        ];
        for (name, help, counter) in counters {
            registry.register(name, help, counter.clone());
        }
    }
}

/// A gauge set to a count.
fn set(gauge: &Gauge, value: u64) {
    gauge.set(i64::try_from(value).unwrap_or(i64::MAX));
}

/// A counter brought up to `total`, a count kept elsewhere.
fn catch_up(counter: &Counter, total: u64) {
    let now = counter.get();
    if total > now {
        counter.inc_by(total - now);
    }
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        let mut registry = Registry::default();
        let runs_started = Counter::default();
        registry.register(
            "cairn_runs_started",
            "Runs started since the runtime opened.",
            runs_started.clone(),
        );
        let runs_ended = Family::<StatusLabel, Counter>::default();
        registry.register(
            "cairn_runs_ended",
            "Runs ended since the runtime opened, by status.",
            runs_ended.clone(),
        );
        let run_seconds = Family::<StatusLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            run_buckets as fn() -> Histogram,
        );
        registry.register(
            "cairn_run_duration_seconds",
            "Wall time of ended runs, by status.",
            run_seconds.clone(),
        );
        let commits = Counter::default();
        registry.register(
            "cairn_journal_commits",
            "Journal batches made durable (one store append each).",
            commits.clone(),
        );
        let commit_seconds = seconds_buckets();
        registry.register(
            "cairn_journal_commit_seconds",
            "Latency of one journal batch's store append (write and sync).",
            commit_seconds.clone(),
        );
        let appended = Counter::default();
        registry.register(
            "cairn_events_appended",
            "Journal entries made durable by this runtime.",
            appended.clone(),
        );
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "cairn_http_requests",
            "HTTP requests answered, by method, route and status.",
            requests.clone(),
        );
        let request_seconds =
            Family::<RouteLabel, Histogram, fn() -> Histogram>::new_with_constructor(
                seconds_buckets as fn() -> Histogram,
            );
        registry.register(
            "cairn_http_request_duration_seconds",
            "Time to the response head, by route (a stream counts until it starts).",
            request_seconds.clone(),
        );
        let live = Family::<StateLabel, Gauge>::default();
        registry.register("cairn_runs_live", "Runs live now, by state.", live.clone());
        let waiting = Gauge::default();
        registry.register(
            "cairn_runs_waiting",
            "Live runs blocked on a decision now.",
            waiting.clone(),
        );
        let evicted = Gauge::default();
        registry.register(
            "cairn_runs_evicted",
            "Live runs out of memory now: evicted while their controller waits on a timer, restored by replay before it is due.",
            evicted.clone(),
        );
        let evictions = Counter::default();
        registry.register(
            "cairn_run_evictions",
            "Instances evicted since the runtime opened ([runs] evict_idle_ms).",
            evictions.clone(),
        );
        let legacy_runs = Family::<StateLabel, Gauge>::default();
        registry.register("cairn_runs", "Runs by state: live ones now, ended ones since start (kept for older dashboards; prefer cairn_runs_live and cairn_runs_ended_total).", legacy_runs.clone());
        let model_calls = Family::<ModelCallLabels, Counter>::default();
        registry.register(
            "cairn_model_calls",
            "Model calls sent live (replays send none), by workspace, model entry and outcome.",
            model_calls.clone(),
        );
        let model_tokens = Family::<ModelTokenLabels, Counter>::default();
        registry.register(
            "cairn_model_tokens",
            "Model tokens used by live calls, by workspace, model entry and direction.",
            model_tokens.clone(),
        );
        let scraped = Scraped::default();
        scraped.register(&mut registry);
        Telemetry {
            registry: Mutex::new(registry),
            runs_started,
            runs_ended,
            run_seconds,
            commits,
            commit_seconds,
            appended,
            requests,
            request_seconds,
            live,
            waiting,
            evicted,
            evictions,
            legacy_runs,
            model_calls,
            model_tokens,
            scraped,
        }
    }
}

impl Telemetry {
    /// A live model call ended.
    pub(crate) fn model_call(
        &self,
        workspace: &str,
        model: &str,
        outcome: &str,
        usage: Option<crate::journal::event::CallUsage>,
    ) {
        self.model_calls
            .get_or_create(&ModelCallLabels {
                workspace: workspace.to_string(),
                model: model.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
        if let Some(u) = usage {
            for (direction, n) in [("input", u.input_tokens), ("output", u.output_tokens)] {
                self.model_tokens
                    .get_or_create(&ModelTokenLabels {
                        workspace: workspace.to_string(),
                        model: model.to_string(),
                        direction: direction.to_string(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// One journal batch of `entries` made durable in `took`.
    pub(crate) fn committed(&self, took: Duration, entries: usize) {
        self.commits.inc();
        self.appended.inc_by(entries as u64);
        self.commit_seconds.observe(took.as_secs_f64());
    }

    /// One HTTP request answered.
    pub fn request(&self, method: &str, route: &str, status: u16, took: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_string(),
                route: route.to_string(),
                status,
            })
            .inc();
        self.request_seconds
            .get_or_create(&RouteLabel {
                route: route.to_string(),
            })
            .observe(took.as_secs_f64());
    }

    /// The registry in the Prometheus text format.
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

impl super::Runtime {
    /// This runtime's metrics registry (a seam records its requests in it).
    pub fn telemetry(&self) -> &Telemetry {
        &self.inner.telemetry
    }

    /// `GET /metrics`: the registry in the Prometheus text format, its
    /// gauges read now.
    pub fn render_metrics(&self) -> String {
        let t = &self.inner.telemetry;
        let m = self.metrics();
        for (state, n) in &m.runs {
            let name = serde_json::to_value(state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let label = StateLabel { state: name };
            let n = i64::try_from(*n).unwrap_or(i64::MAX);
            t.legacy_runs.get_or_create(&label).set(n);
            if matches!(state, super::RunState::Preparing | super::RunState::Running) {
                t.live.get_or_create(&label).set(n);
            }
        }
        t.waiting.set(m.runs_waiting as i64);
        let g = &t.scraped;
        set(&g.subscribers, m.subscribers as u64);
        set(&g.decisions_pending, m.decisions_pending as u64);
        set(&g.open_journals, m.open_journals as u64);
        set(&g.live_window_bytes, m.live_window_bytes);
        set(&g.compiled_components, m.compiled_components.0 as u64);
        set(&g.compiled_component_bytes, m.compiled_components.1);
        let (leases, heard) = m.shared.unwrap_or((0, 0));
        set(&g.leases_held, leases as u64);
        catch_up(&g.relay_notifications, heard);
        catch_up(&g.windows_evicted, m.live_windows_evicted);
        catch_up(&g.syncs, crate::fsutil::syncs());
        t.encode()
    }
}
