//! Per-worker limits: host defaults, per-workspace ceilings, per-run
//! overrides under them. A violation ends that run `Failed` with
//! `limit_exceeded { limit, value, max }`; the host and every other worker go on.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The compiled-component cache's default budget.
pub const DEFAULT_CACHE_BYTES: u64 = 512 << 20;
/// The bytes (as journaled) a session's live window holds at most, beside
/// its entry count: a few huge entries cannot pin gigabytes of memory. The
/// newest entry is always held.
pub const DEFAULT_LIVE_WINDOW_BYTES: u64 = 8 << 20;
/// The bytes (as journaled) every session's live window holds together, by
/// default: past it the windows nobody follows are emptied, least recently
/// written first. In memory an entry takes about twice its line.
pub const DEFAULT_LIVE_TOTAL_BYTES: u64 = 256 << 20;

/// Every limit of one run. Sizes in bytes, durations in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Linear memory of the instance, all memories together.
    pub memory_bytes: u64,
    /// Table elements per table.
    pub table_elements: u64,
    /// Core instances, tables and memories the component may create.
    pub instances: u64,
    /// Wall-clock time of a run.
    pub wall_ms: u64,
    /// Time the guest spends running its own code (charged by epoch ticks
    /// while it runs; waiting in a host call costs nothing).
    pub cpu_ms: u64,
    /// Agent events one run may emit.
    pub events_per_run: u64,
    /// Bytes of one event, as journaled.
    pub event_bytes: u64,
    /// Bytes of the session's journal.
    pub journal_bytes: u64,
    /// Bytes under the generation's `artifacts/` (a file counts the larger
    /// of its length and its allocated blocks: see the runtime's `worktree`).
    pub artifact_bytes: u64,
    /// Entries (files, directories, links) under `artifacts/`.
    pub artifact_files: u64,
    /// Levels of nesting under `artifacts/`.
    pub artifact_depth: u64,
    /// Handles a run may hold at once in its WASI resource table (open
    /// files and directories, streams, pollables): each open file is a host
    /// descriptor.
    pub open_files: u64,
    /// Bytes of stdout and of stderr, each.
    pub log_bytes: u64,
    /// Bytes of a prompt.
    pub prompt_bytes: u64,
    /// Bytes of a park checkpoint.
    pub checkpoint_bytes: u64,
    /// Bytes of compiled components the host keeps ready (host-wide: only
    /// the `[limits]` value counts; least recently used evicted past it).
    pub component_cache_bytes: u64,
    /// Children one run may spawn (`workers.spawn`).
    pub children_per_run: u64,
    /// How deep delegation may nest: a worker with no parent is at depth 0,
    /// its children at 1; a spawn that would make a child deeper is refused.
    pub child_depth: u64,
    /// Workers in one delegation tree, its root included: a spawn that
    /// would make the tree larger ends the spawning run.
    pub tree_workers: u64,
    /// Bytes (as journaled) of a session's live window, the newest entries
    /// its subscribers read from memory (host-wide: only the `[limits]`
    /// value counts; the newest entry is always held).
    pub live_window_bytes: u64,
    /// Bytes (as journaled) of every session's live window together
    /// (host-wide: only the `[limits]` value counts). Past it the windows
    /// nobody follows are emptied, least recently written first; a later
    /// reader reads the store instead. In memory an entry takes about
    /// twice its line.
    pub live_total_bytes: u64,
    /// Model calls one run may make (`cairn:model` `chat`).
    pub model_calls: u64,
    /// Model tokens (input and output together) one run may use.
    pub model_tokens: u64,
    /// Wall time one run may spend waiting on model calls, all together.
    pub model_wall_ms: u64,
    /// Tool calls one run may make (`cairn:tools` `call`).
    pub tool_calls: u64,
    /// Outgoing HTTP requests one run may make (`wasi:http`).
    #[serde(alias = "http_requests_per_run")]
    pub http_requests: u64,
    /// Bytes of one outgoing request's body, and of one response's.
    pub http_body_bytes: u64,
    /// Time one outgoing request may take, its response's body read.
    pub http_timeout_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: 256 << 20,
            table_elements: 100_000,
            instances: 64,
            wall_ms: 3_600_000,
            cpu_ms: 600_000,
            events_per_run: 100_000,
            event_bytes: 1 << 20,
            journal_bytes: 1 << 30,
            artifact_bytes: 256 << 20,
            artifact_files: 100_000,
            artifact_depth: 128,
            open_files: 1024,
            log_bytes: 16 << 20,
            prompt_bytes: 1 << 20,
            checkpoint_bytes: 64 << 20,
            component_cache_bytes: DEFAULT_CACHE_BYTES,
            children_per_run: 16,
            child_depth: 4,
            tree_workers: 256,
            live_window_bytes: DEFAULT_LIVE_WINDOW_BYTES,
            live_total_bytes: DEFAULT_LIVE_TOTAL_BYTES,
            model_calls: 1_000,
            model_tokens: 10_000_000,
            model_wall_ms: 3_600_000,
            tool_calls: 1_000,
            http_requests: 1_000,
            http_body_bytes: 512 << 10,
            http_timeout_ms: 30_000,
        }
    }
}

/// A run's requested limits: each, when given, must be at most the ceiling.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitsOverride {
    /// See [`Limits::memory_bytes`].
    pub memory_bytes: Option<u64>,
    /// See [`Limits::wall_ms`].
    pub wall_ms: Option<u64>,
    /// See [`Limits::cpu_ms`].
    pub cpu_ms: Option<u64>,
    /// See [`Limits::events_per_run`].
    pub events_per_run: Option<u64>,
    /// See [`Limits::event_bytes`].
    pub event_bytes: Option<u64>,
    /// See [`Limits::journal_bytes`].
    pub journal_bytes: Option<u64>,
    /// See [`Limits::artifact_bytes`].
    pub artifact_bytes: Option<u64>,
    /// See [`Limits::artifact_files`].
    pub artifact_files: Option<u64>,
    /// See [`Limits::artifact_depth`].
    pub artifact_depth: Option<u64>,
    /// See [`Limits::open_files`].
    pub open_files: Option<u64>,
    /// See [`Limits::log_bytes`].
    pub log_bytes: Option<u64>,
    /// See [`Limits::checkpoint_bytes`].
    pub checkpoint_bytes: Option<u64>,
    /// See [`Limits::model_calls`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// See [`Limits::model_tokens`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_tokens: Option<u64>,
    /// See [`Limits::model_wall_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_wall_ms: Option<u64>,
    /// See [`Limits::tool_calls`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// See [`Limits::http_requests`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_requests: Option<u64>,
    /// See [`Limits::http_body_bytes`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_body_bytes: Option<u64>,
    /// See [`Limits::http_timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_timeout_ms: Option<u64>,
}

/// An override above its ceiling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limit {limit} of {value} is above this workspace's ceiling of {max}")]
pub struct AboveCeiling {
    /// Which limit.
    pub limit: &'static str,
    /// The value asked for.
    pub value: u64,
    /// The ceiling.
    pub max: u64,
}

impl Limits {
    /// These limits with `o` applied; each override must be at most the ceiling.
    pub fn with(self, o: &LimitsOverride) -> Result<Limits, AboveCeiling> {
        let mut out = self;
        let pairs: [(&'static str, Option<u64>, &mut u64); 19] = [
            ("memory_bytes", o.memory_bytes, &mut out.memory_bytes),
            ("wall_ms", o.wall_ms, &mut out.wall_ms),
            ("cpu_ms", o.cpu_ms, &mut out.cpu_ms),
            ("events_per_run", o.events_per_run, &mut out.events_per_run),
            ("event_bytes", o.event_bytes, &mut out.event_bytes),
            ("journal_bytes", o.journal_bytes, &mut out.journal_bytes),
            ("artifact_bytes", o.artifact_bytes, &mut out.artifact_bytes),
            ("artifact_files", o.artifact_files, &mut out.artifact_files),
            ("artifact_depth", o.artifact_depth, &mut out.artifact_depth),
            ("open_files", o.open_files, &mut out.open_files),
            ("log_bytes", o.log_bytes, &mut out.log_bytes),
            (
                "checkpoint_bytes",
                o.checkpoint_bytes,
                &mut out.checkpoint_bytes,
            ),
            ("model_calls", o.model_calls, &mut out.model_calls),
            ("model_tokens", o.model_tokens, &mut out.model_tokens),
            ("model_wall_ms", o.model_wall_ms, &mut out.model_wall_ms),
            ("tool_calls", o.tool_calls, &mut out.tool_calls),
            ("http_requests", o.http_requests, &mut out.http_requests),
            (
                "http_body_bytes",
                o.http_body_bytes,
                &mut out.http_body_bytes,
            ),
            (
                "http_timeout_ms",
                o.http_timeout_ms,
                &mut out.http_timeout_ms,
            ),
        ];
        for (limit, asked, slot) in pairs {
            if let Some(value) = asked {
                if value > *slot {
                    return Err(AboveCeiling {
                        limit,
                        value,
                        max: *slot,
                    });
                }
                *slot = value;
            }
        }
        Ok(out)
    }

    /// The lower of each pair (a workspace's ceiling under the host's).
    pub fn min(self, other: Limits) -> Limits {
        Limits {
            memory_bytes: self.memory_bytes.min(other.memory_bytes),
            table_elements: self.table_elements.min(other.table_elements),
            instances: self.instances.min(other.instances),
            wall_ms: self.wall_ms.min(other.wall_ms),
            cpu_ms: self.cpu_ms.min(other.cpu_ms),
            events_per_run: self.events_per_run.min(other.events_per_run),
            event_bytes: self.event_bytes.min(other.event_bytes),
            journal_bytes: self.journal_bytes.min(other.journal_bytes),
            artifact_bytes: self.artifact_bytes.min(other.artifact_bytes),
            artifact_files: self.artifact_files.min(other.artifact_files),
            artifact_depth: self.artifact_depth.min(other.artifact_depth),
            open_files: self.open_files.min(other.open_files),
            log_bytes: self.log_bytes.min(other.log_bytes),
            prompt_bytes: self.prompt_bytes.min(other.prompt_bytes),
            checkpoint_bytes: self.checkpoint_bytes.min(other.checkpoint_bytes),
            component_cache_bytes: self.component_cache_bytes.min(other.component_cache_bytes),
            children_per_run: self.children_per_run.min(other.children_per_run),
            child_depth: self.child_depth.min(other.child_depth),
            tree_workers: self.tree_workers.min(other.tree_workers),
            live_window_bytes: self.live_window_bytes.min(other.live_window_bytes),
            live_total_bytes: self.live_total_bytes.min(other.live_total_bytes),
            model_calls: self.model_calls.min(other.model_calls),
            model_tokens: self.model_tokens.min(other.model_tokens),
            model_wall_ms: self.model_wall_ms.min(other.model_wall_ms),
            tool_calls: self.tool_calls.min(other.tool_calls),
            http_requests: self.http_requests.min(other.http_requests),
            http_body_bytes: self.http_body_bytes.min(other.http_body_bytes),
            http_timeout_ms: self.http_timeout_ms.min(other.http_timeout_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_stay_under_the_ceiling() {
        let ceiling = Limits::default();
        let lower = ceiling
            .with(&LimitsOverride {
                memory_bytes: Some(1 << 20),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(lower.memory_bytes, 1 << 20);
        let err = ceiling
            .with(&LimitsOverride {
                events_per_run: Some(u64::MAX),
                ..Default::default()
            })
            .unwrap_err();
        assert_eq!(err.limit, "events_per_run");
        assert!(err.to_string().contains("ceiling"));
    }
}
