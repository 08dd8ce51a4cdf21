//! The documents of a worker aggregate and the index: versioned JSON,
//! written atomically, probed for their version before the full parse.

use cairn_types::ids::{Generation, SegmentId, SessionId, WorkerId};
use serde::{Deserialize, Serialize};

/// The on-disk format of a worker aggregate, recorded in `session.json`.
pub const FORMAT: &str = "worker-aggregate-v1";
/// The work queue's worktree identity of the key a worker serves.
pub const WORKTREE: &str = "worktree.json";
/// The version of the documents that have had one format so far.
pub const DOC_VERSION: u64 = 1;
/// `worker.json`'s format: version 2 adds the limits its last run ran
/// under (`limits`); a version 1 record reads as before (no limits) and is
/// written back as version 2.
pub const WORKER_VERSION: u64 = 2;
/// `metadata.json`'s format: version 2 adds the bound controller's resolved
/// manifest (`manifest`); a version 1 document reads as before and is
/// written back as version 2.
pub const METADATA_VERSION: u64 = 2;

/// Whether a worker's record may go on running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerStatus {
    /// Normal.
    Active,
    /// A replay diverged: never continued, never silently restarted.
    Stale,
}

/// `worker.json`: catalog authority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRecord {
    /// The format version ([`WORKER_VERSION`]; 1 before `limits`).
    pub version: u64,
    /// The worker.
    pub worker_id: WorkerId,
    /// Its one session (as stores key it: its workspace kept).
    #[serde(with = "cairn_types::ids::session_key")]
    pub session_id: SessionId,
    /// The workspace it is attributed to.
    pub workspace: String,
    /// Its execution binding: the component digest, `sha256:<hex>`; absent
    /// until the first run binds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// When it was created (ms since the epoch).
    pub created_at_ms: u64,
    /// The last durably reserved run generation (0: none yet).
    pub last_generation: Generation,
    /// Active or stale.
    pub status: WorkerStatus,
    /// The worker that spawned this one, when it is a child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<ParentRef>,
    /// What made the worker, or last restored it (seed 000's create/restore
    /// request); absent in documents written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<WorkerRequest>,
    /// The limits its last run ran under (the workspace's, lowered by the
    /// run's request); absent until a run, and in older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<cairn_types::limits::Limits>,
}

/// What made a worker, or last restored it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerRequest {
    /// `create`, `restore` or `migrate`.
    pub kind: WorkerRequestKind,
    /// When (ms since the epoch).
    pub at_ms: u64,
    /// The run a restore took up again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<cairn_types::ids::RunId>,
}

/// Why a worker's `worker.json` was (re)written by the runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkerRequestKind {
    /// A session was created (or forked, or spawned as a child).
    Create,
    /// An interrupted run was restored by replay at a host's start.
    Restore,
    /// A legacy migration brought it in.
    Migrate,
}

impl WorkerRecord {
    /// The parent's session in this worker's workspace (documents name
    /// other sessions by name; a parent is always of the child's workspace).
    pub fn scoped(mut self) -> Self {
        if let Some(p) = &mut self.parent {
            p.session_id = self.session_id.sibling(&p.session_id);
        }
        self
    }
}

/// A child's link to its parent (`worker.json` `parent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParentRef {
    /// The parent worker.
    pub worker_id: WorkerId,
    /// Its session.
    pub session_id: SessionId,
    /// The parent's generation that spawned this child.
    pub generation: Generation,
    /// The parent's run that spawned it.
    pub run_id: cairn_types::ids::RunId,
    /// The loaned scope: a directory of the parent's `artifacts/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The run of this child that holds the loan (its first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loan_run: Option<cairn_types::ids::RunId>,
    /// The loan ended: no later run or restore of this child gets `/loan`.
    #[serde(default)]
    pub loan_reclaimed: bool,
    /// How deep this child is (the parent's depth + 1).
    pub depth: u64,
}

/// How a child stands, as its parent's `metadata.json` records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChildStatus {
    /// Its run is live.
    Running,
    /// Its run finished.
    Finished,
    /// Its run failed.
    Failed,
    /// Its run was cancelled.
    Cancelled,
    /// Its run parked or was stopped by its host: it can be resumed.
    Stopped,
    /// It was pruned: loan reclaimed, run stopped.
    Pruned,
}

/// One child in its parent's `metadata.json` `children`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChildRef {
    /// The child worker.
    pub worker_id: WorkerId,
    /// Its session.
    pub session_id: SessionId,
    /// Its component, `sha256:<hex>`.
    pub component: String,
    /// The scope loaned to it, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// The parent's generation that spawned it.
    pub generation: Generation,
    /// Where it stands.
    pub status: ChildStatus,
    /// Its loan ended.
    #[serde(default)]
    pub loan_reclaimed: bool,
}

/// One segment in `metadata.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentRef {
    /// The segment.
    pub segment_id: SegmentId,
    /// Its parent, when it compacts or branches one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SegmentId>,
}

/// `metadata.json`: the current projection of the worker (not a transcript).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerMetadata {
    /// The format version ([`METADATA_VERSION`]; 1 before
    /// `manifest`).
    pub version: u64,
    /// The segment appends go to.
    pub active_segment: SegmentId,
    /// A segment being prepared (compaction), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_segment: Option<SegmentId>,
    /// Every segment of the session, in creation order.
    pub segments: Vec<SegmentRef>,
    /// Child workers delegated by this one.
    #[serde(default)]
    pub children: Vec<ChildRef>,
    /// The session this one was forked from, and before which message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkParent>,
    /// Registered peers.
    #[serde(default)]
    pub peers: Vec<PeerRef>,
    /// The controller the worker is bound to, as it resolved at its last
    /// run (seed 000's resolved manifest state); absent until a run, and in
    /// older documents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<ResolvedManifest>,
}

/// `metadata.json`'s resolved manifest: what the bound component is, as the
/// host resolved it for a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResolvedManifest {
    /// Its digest, `sha256:<hex>` (the execution binding).
    pub component: String,
    /// Its name, as it describes itself.
    pub name: String,
    /// Its version, as it describes itself.
    pub version: String,
    /// Whether it can park.
    pub can_park: bool,
    /// The interfaces it imports (`cairn:agent/history@0.2.1`, …): the
    /// capabilities its runs are given.
    pub imports: Vec<String>,
    /// When it was resolved (ms since the epoch).
    pub resolved_at_ms: u64,
}

impl WorkerMetadata {
    /// The sessions it names (children, peers, a fork's source), read by
    /// name, in the workspace of `own`: they are never another workspace's.
    pub fn scoped(mut self, own: &SessionId) -> Self {
        for c in &mut self.children {
            c.session_id = own.sibling(&c.session_id);
        }
        for p in &mut self.peers {
            p.session_id = own.sibling(&p.session_id);
        }
        if let Some(f) = &mut self.forked_from {
            f.session_id = own.sibling(&f.session_id);
        }
        self
    }
}

/// Where a forked worker came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkParent {
    /// The source session.
    pub session_id: SessionId,
    /// The source worker.
    pub worker_id: WorkerId,
    /// The source `Started` entry the fork was taken before.
    pub before_seq: cairn_types::ids::Seq,
}

/// `session/session.json`: fixes the aggregate's one session id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionDoc {
    /// Always 1.
    pub version: u64,
    /// Always [`FORMAT`].
    pub format: String,
    /// The session (as stores key it).
    #[serde(with = "cairn_types::ids::session_key")]
    pub session_id: SessionId,
    /// The worker holding it.
    pub worker_id: WorkerId,
    /// When it was created.
    pub created_at_ms: u64,
    /// The workspace it was created in (as `worker.json` says; kept here
    /// too, in a document written once, so a damaged `worker.json` still
    /// leaves the session attributable to its tenant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
}

/// `index/sessions/<key>.json`: session id → worker id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    /// Always 1.
    pub version: u64,
    /// The session (as stores key it).
    #[serde(with = "cairn_types::ids::session_key")]
    pub session_id: SessionId,
    /// Its worker.
    pub worker_id: WorkerId,
}

/// A document as written: pretty JSON and a newline.
pub fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("documents serialize");
    bytes.push(b'\n');
    bytes
}

/// A registered peer: status only, no authority.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeerRef {
    /// The peer worker.
    pub worker_id: WorkerId,
    /// Its session.
    pub session_id: SessionId,
}
