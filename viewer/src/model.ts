// A session as the viewer shows it, folded from journal entries one at a
// time (from a page, a live stream, or an exported file): runs with their
// assembled text, reasoning, tool calls, progress and decisions; segments
// and fork lineage; observers; and one compact row per entry for the event
// list (a million-entry session keeps rows, not entries).

/** At most this much assembled text or reasoning is kept per run. */
const TEXT_CAP = 64 * 1024;

export interface Row {
  seq: number;
  run: string;
  type: string;
  summary: string;
}

export interface Decision {
  id: string;
  kind: string;
  prompt: string;
  details: unknown;
  route?: string;
  value?: unknown;
  by?: string;
  timedOut?: boolean;
  seq: number;
}

export class RunView {
  status = 'running';
  prompt = '';
  component = '';
  generation = 0;
  continues?: string;
  resumes?: string;
  text = '';
  textTruncated = false;
  reasoning = '';
  toolCalls: { id: string; name: string; arguments: unknown }[] = [];
  progress = new Map<string, { done: number; total?: number }>();
  decisions = new Map<string, Decision>();
  custom: { name: string; data: unknown }[] = [];
  ending = '';
  firstSeq = 0;
  lastSeq = 0;
  events = 0;
  constructor(readonly id: string) {}

  pending(): Decision[] {
    if (this.status !== 'running' && this.status !== 'waiting') return [];
    return [...this.decisions.values()].filter((d) => d.value === undefined && !d.timedOut && d.route !== 'parked');
  }
}

export interface Segment {
  id: string;
  seq: number;
  compactedFrom?: { segment_id: string; through_seq?: number };
  forkedFrom?: { session_id?: string; segment_id?: string; before_seq?: number };
}

function append(run: RunView, key: 'text' | 'reasoning', piece: string): void {
  if (run[key].length >= TEXT_CAP) {
    if (key === 'text') run.textTruncated = true;
    return;
  }
  run[key] += piece;
}

function short(v: unknown, n = 120): string {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > n ? `${s.slice(0, n)}…` : s;
}

/** One line of the event list for an entry. */
export function summarize(e: any): string {
  const x = e?.payload?.event ?? {};
  switch (x.type) {
    case 'text_delta':
    case 'reasoning_delta':
      return short(x.text);
    case 'tool_call':
      return `${x.name}(${short(x.arguments, 80)})`;
    case 'progress':
      return `${x.message} ${x.done}${x.total !== undefined ? `/${x.total}` : ''}`;
    case 'custom':
      return `${x.name} ${short(x.data, 100)}`;
    case 'started':
      return `prompt ${short(x.prompt, 80)}`;
    case 'component_updated':
      return `${x.from} → ${x.to} (${x.mode}, ${x.checked_runs} runs checked)`;
    case 'decision_requested':
      return `${x.request_kind}: ${short(x.prompt, 80)}`;
    case 'decision_recorded':
      return `${short(x.value, 80)} by ${x.by}`;
    case 'approval_routed':
      return `${x.route}: ${x.because ?? ''}`;
    case 'finished':
      return `${x.outcome}: ${short(x.text, 80)}`;
    case 'failed':
      return `${x.error?.code}: ${short(x.error?.message ?? '', 80)}`;
    case 'cancelled':
      return `${x.reason}: ${x.message ?? ''}`;
    case 'observer_attached':
    case 'observer_detached':
      return `${x.observer?.role ?? ''} ${x.observer?.id ?? ''}`;
    default:
      return e?.unknown !== undefined ? `unreadable: ${short(e.unknown, 80)}` : short(x, 100);
  }
}

export class SessionModel {
  rows: Row[] = [];
  runs = new Map<string, RunView>();
  segments: Segment[] = [];
  forkedFrom?: { session: string; beforeSeq: number; prompt: string };
  lastSeq = 0;
  /** Seqs that were never delivered and could not be read (compacted away). */
  holes: { from: number; to: number }[] = [];
  /** The worker's component switches (`component_updated`), in order. */
  updates: { seq: number; from: string; to: string; mode: string; checkedRuns: number }[] = [];
  version = 0;

  run(id: string): RunView {
    let r = this.runs.get(id);
    if (!r) {
      r = new RunView(id);
      this.runs.set(id, r);
    }
    return r;
  }

  /** Folds in one entry; entries at or below `lastSeq` are ignored. */
  add(e: any): void {
    const seq = Number(e.seq);
    if (!(seq > this.lastSeq)) return;
    this.lastSeq = seq;
    this.version++;
    const x = e?.payload?.event ?? {};
    const type: string = x.type ?? (e.unknown !== undefined ? 'unknown' : '?');
    this.rows.push({ seq, run: e.run_id ?? '', type, summary: summarize(e) });
    if (type === 'segment_created') {
      this.segments.push({ id: x.segment_id, seq, compactedFrom: x.compacted_from, forkedFrom: x.forked_from });
    }
    if (type === 'component_updated') {
      this.updates.push({ seq, from: x.from, to: x.to, mode: x.mode, checkedRuns: Number(x.checked_runs ?? 0) });
    }
    if (type === 'forked_from') {
      this.forkedFrom = { session: x.parent_session_id, beforeSeq: x.before_seq, prompt: x.prompt };
    }
    if (!e.run_id) return;
    const r = this.run(e.run_id);
    r.events++;
    if (!r.firstSeq) r.firstSeq = seq;
    r.lastSeq = seq;
    switch (type) {
      case 'started':
        r.prompt = x.prompt;
        r.component = x.component;
        r.generation = x.generation;
        r.continues = x.continues;
        r.resumes = x.resumes;
        r.status = 'running';
        break;
      case 'text_delta':
        append(r, 'text', x.text);
        break;
      case 'reasoning_delta':
        append(r, 'reasoning', x.text);
        break;
      case 'tool_call':
        if (r.toolCalls.length < 1000) r.toolCalls.push({ id: x.id, name: x.name, arguments: x.arguments });
        break;
      case 'progress':
        r.progress.set(x.message, { done: x.done, total: x.total });
        break;
      case 'custom':
        if (r.custom.length < 100) r.custom.push({ name: x.name, data: x.data });
        break;
      case 'decision_requested':
        r.decisions.set(x.decision_id, { id: x.decision_id, kind: x.request_kind, prompt: x.prompt, details: x.details, seq });
        r.status = 'waiting';
        break;
      case 'approval_routed': {
        const d = r.decisions.get(x.decision_id);
        if (d) d.route = x.route;
        break;
      }
      case 'decision_recorded': {
        const d = r.decisions.get(x.decision_id);
        if (d) {
          d.value = x.value;
          d.by = x.by;
        }
        if (r.status === 'waiting') r.status = 'running';
        break;
      }
      case 'decision_timed_out': {
        const d = r.decisions.get(x.decision_id);
        if (d) d.timedOut = true;
        if (r.status === 'waiting') r.status = 'running';
        break;
      }
      case 'finished':
        r.status = x.outcome === 'question' ? 'question' : 'finished';
        r.ending = x.text;
        break;
      case 'failed':
        r.status = 'failed';
        r.ending = `${x.error?.code}: ${x.error?.message}`;
        break;
      case 'cancelled':
        r.status = 'cancelled';
        r.ending = `${x.reason}${x.message ? `: ${x.message}` : ''}`;
        break;
      case 'parked':
        r.status = 'parked';
        break;
    }
  }
}

const CRC32C = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC32C (Castagnoli) of `bytes`, as journal lines carry it. */
export function crc32c(bytes: Uint8Array): number {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC32C[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** Whether a journal line is whole: one ending in its checksum field
 * (`,"crc":"1a2b3c4d"}`, the CRC32C of every byte before it) must sum to
 * it; a line without one (written before checksums) is. */
export function lineIntact(line: string): boolean {
  const m = /,"crc":"([0-9a-f]{8})"\}$/.exec(line);
  if (!m) return true;
  const body = new TextEncoder().encode(line.slice(0, line.length - m[0].length));
  return crc32c(body) === parseInt(m[1], 16);
}

/** Parses an exported JSONL file: entries, the lines that were not JSON,
 * and those whose checksum does not match (a byte changed after cairn
 * wrote it): both kinds are left out, by line number. */
export function parseJsonl(text: string): { entries: any[]; lines: string[]; bad: number[]; damaged: number[] } {
  const entries: any[] = [];
  const lines: string[] = [];
  const bad: number[] = [];
  const damaged: number[] = [];
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let entry: any;
    try {
      entry = JSON.parse(line);
    } catch {
      bad.push(i + 1);
      return;
    }
    if (!lineIntact(line)) {
      damaged.push(i + 1);
      return;
    }
    entries.push(entry);
    lines.push(line);
  });
  return { entries, lines, bad, damaged };
}
