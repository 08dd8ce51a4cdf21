// Replay of one run in the page: the run's component, transpiled here by
// jco, runs again with `cairn:controller` answered from the journal and WASI
// from ./wasi.ts, exactly as docs/replay.md specifies; every emit is
// compared with its journal entry. The result is "matches" or the first
// divergence (seq, expected, got).
import { canon, canonText, big, parseExact } from './json';
import { ReplayClock, httpImports, wasiImports } from './wasi';

/** What a replay found. */
export interface ReplayResult {
  matches: boolean;
  /** Journal entries the replay checked (emits, requests, answers). */
  checked: number;
  /** How the run ended in the replay: its outcome's tag and text. */
  outcome?: string;
  divergence?: { seq: number | null; expected: string; got: string };
  /** A note when the journal ends before the run did (it is still live). */
  note?: string;
}

// The host's one list of replayed kinds (cairn-types `event::REPLAYED`),
// written by `cairn schema replayed`; a test keeps the copy current.
import replayed from './replayed.json';

const SCRIPT = new Set<string>(replayed.kinds);
const AGENT = new Set<string>(replayed.agent);
const TERMINAL = new Set(['finished', 'failed', 'cancelled', 'parked']);

const ev = (e: any) => e?.payload?.event ?? {};
const typeOf = (e: any) => ev(e).type as string;
const seqOf = (e: any) => Number(big(e.seq));

let transpiler: Promise<any> | null = null;
function loadTranspiler(): Promise<any> {
  transpiler ??= import('@bytecodealliance/jco-transpile/component').then(async (m) => {
    await m.$init;
    return m;
  });
  return transpiler;
}

/**
 * Loads jco's transpiler (and its 3.5 MB core wasm) now, so a replay later
 * needs no network: the offline page warms it as it opens. Resolves `true`
 * once it is ready.
 */
export async function warm(): Promise<boolean> {
  try {
    await loadTranspiler();
    return true;
  } catch {
    transpiler = null;
    return false;
  }
}

/** Transpiles a component and returns its `instantiate(imports)`. */
export async function transpile(bytes: Uint8Array): Promise<(imports: any) => Promise<any>> {
  const jco = await loadTranspiler();
  const out = jco.generate(bytes, {
    name: 'guest',
    instantiation: { tag: 'async' },
    noTypescript: true,
    noNodejsCompat: true,
    base64Cutoff: 0,
  });
  const files = new Map<string, Uint8Array>(out.files);
  const js = files.get('guest.js');
  if (!js) throw new Error('jco produced no guest.js');
  const url = URL.createObjectURL(new Blob([js as BlobPart], { type: 'text/javascript' }));
  try {
    const mod = await import(/* @vite-ignore */ url);
    const instantiate = (imports: any) =>
      mod.instantiate((name: string) => {
        const b = files.get(name);
        if (!b) throw new Error(`jco output has no ${name}`);
        return WebAssembly.compile(b as BufferSource);
      }, imports);
    return instantiate;
  } finally {
    URL.revokeObjectURL(url);
  }
}

/** The journal form of an emitted `agent-event` (jco's JS shape), canonical. */
function emittedEntry(e: any): string {
  const v = e.val;
  // A field that must hold JSON and does not is compared as the string.
  const json = (t: string) => canonText(t) ?? JSON.stringify(t);
  switch (e.tag) {
    case 'text-delta': return `{"text":${JSON.stringify(v)},"type":"text_delta"}`;
    case 'reasoning-delta': return `{"text":${JSON.stringify(v)},"type":"reasoning_delta"}`;
    case 'tool-call':
      return `{"arguments":${json(v.arguments)},"id":${JSON.stringify(v.id)},"name":${JSON.stringify(v.name)},"type":"tool_call"}`;
    case 'progress':
      return canon({ type: 'progress', message: v.message, done: v.done, total: v.total });
    case 'retrying':
      return canon({ type: 'retrying', attempt: BigInt(v.attempt), after_ms: v.afterMs, reason: v.reason });
    case 'custom':
      return `{"data":${json(v.data)},"name":${JSON.stringify(v.name)},"type":"custom"}`;
    default: return JSON.stringify({ unknown: e.tag });
  }
}

/** Keys of a journaled decision request a replayed `wait` must match. */
function requestCanon(r: { kind: string; prompt: string; details: string; timeoutMs?: bigint; defaultValue?: string }) {
  return canon({
    request_kind: r.kind.replace('-', '_'),
    prompt: r.prompt,
    details: parseExact(r.details || '{}'),
    timeout_ms: r.timeoutMs,
    default_value: r.defaultValue === undefined ? undefined : parseExact(r.defaultValue),
  });
}

/** The shortest decimal that reads back as the same f32 (serde_json writes an f32 so). */
function f32(v: number | undefined): number | undefined {
  if (v === undefined || !Number.isFinite(v)) return undefined;
  for (let p = 1; p <= 9; p++) {
    const t = Number(v.toPrecision(p));
    if (Math.fround(t) === Math.fround(v)) return t;
  }
  return v;
}

/** A `cairn:model` request (jco's JS shape) as the host journals it. */
function modelRequest(r: any): string {
  const call = (c: any) => ({ id: c.id, name: c.name, arguments: c.arguments });
  const choice = r.toolChoice === undefined ? undefined
    : r.toolChoice.tag === 'named' ? { named: r.toolChoice.val } : r.toolChoice.tag;
  return canon({
    model: r.model === '' ? 'default' : r.model,
    messages: (r.messages ?? []).map((m: any) => ({
      role: m.role,
      content: m.content,
      tool_calls: m.toolCalls?.length ? m.toolCalls.map(call) : undefined,
      tool_call_id: m.toolCallId,
    })),
    tools: r.tools?.length
      ? r.tools.map((t: any) => ({
        name: t.name,
        description: t.description,
        parameters: t.parameters.trim() ? parseExact(t.parameters) : { type: 'object', properties: {} },
      }))
      : undefined,
    tool_choice: choice,
    max_tokens: r.maxTokens,
    temperature: f32(r.temperature),
    stream: r.stream,
  });
}

/** A journaled `cairn:model` response as jco's JS shape. */
function modelResponse(x: any): any {
  return {
    text: x.text ?? '',
    toolCalls: (x.tool_calls ?? []).map((c: any) => ({ id: c.id, name: c.name, arguments: c.arguments })),
    finishReason: String(x.finish_reason ?? 'stop').replace('_', '-'),
    usage: { inputTokens: big(x.input_tokens), outputTokens: big(x.output_tokens) },
    model: x.model ?? '',
  };
}

/** A journaled `workers` child as jco's JS shape. */
const child = (c: any) => ({ workerId: c?.worker_id ?? '', sessionId: c?.session_id ?? '' });
/** A journaled child status as jco's JS shape (as the host reads it). */
function childStatus(v: any): any {
  const known = ['running', 'finished', 'failed', 'cancelled', 'pruned'];
  return {
    state: known.includes(v?.state) ? v.state : 'stopped',
    text: typeof v?.text === 'string' ? v.text : undefined,
    error: typeof v?.error === 'string' ? v.error : undefined,
  };
}

/** The worktree snapshots a run's replay lays out (docs/replay.md): the
 * one its generation started from, and each scope a child returned. */
export function snapshotsOf(entries: any[], runId: string): string[] {
  const out = new Set<string>();
  for (const e of entries) {
    if (e.run_id !== runId) continue;
    const x = ev(e);
    if (x.type === 'worktree_recorded' && typeof x.digest === 'string') out.add(x.digest);
    if (x.type === 'host_call_finished' && typeof x.response?.snapshot === 'string') out.add(x.response.snapshot);
  }
  return [...out];
}

const PACK_MAGIC = 'cairn-worktree 1\n';

/** Lay a packed snapshot (`GET /v1/sessions/{id}/worktrees/{digest}`) out
 * in `into`, an in-memory directory of the page's WASI filesystem. */
export function unpackInto(bytes: Uint8Array, into: Record<string, any>): void {
  const magic = new TextEncoder().encode(PACK_MAGIC);
  if (bytes.length < magic.length || magic.some((b, i) => bytes[i] !== b)) {
    throw new Error('not a cairn worktree snapshot');
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const text = new TextDecoder();
  let at = magic.length;
  const take = (n: number) => {
    if (at + n > bytes.length) throw new Error('the snapshot is truncated');
    const out = bytes.subarray(at, at + n);
    at += n;
    return out;
  };
  while (at < bytes.length) {
    const kind = take(1)[0];
    const len = view.getUint32(at);
    take(4);
    const path = text.decode(take(len)).split('/');
    if (path.some((p) => p === '' || p === '.' || p === '..')) throw new Error('the snapshot names a path outside the worktree');
    let dir = into;
    for (const name of path.slice(0, -1)) dir = ((dir[name] ??= { dir: {} }).dir ??= {});
    const name = path[path.length - 1];
    if (kind === 0x64) {
      (dir[name] ??= { dir: {} }).dir ??= {};
    } else if (kind === 0x66) {
      const size = Number(view.getBigUint64(at));
      take(8);
      dir[name] = { source: take(size).slice() };
    } else {
      throw new Error(`unknown entry kind ${kind} in the snapshot`);
    }
  }
}

/** Whether a component reads 0.2.1's history (system and tool turns,
 * call ids): its import's name is in its bytes. */
export function readsRichHistory(component: Uint8Array): boolean {
  const needle = new TextEncoder().encode('cairn:controller/history@0.2.1');
  outer: for (let i = 0; i + needle.length <= component.length; i++) {
    for (let j = 0; j < needle.length; j++) if (component[i + j] !== needle[j]) continue outer;
    return true;
  }
  return false;
}

const ROLES: Record<string, string> = {
  user: 'user', assistant: 'assistant', system: 'system', developer: 'system', tool: 'tool', function: 'tool',
};

/** The tool results a run was given (`Start.tools`'s `tool_results`). */
function toolResults(tools: unknown): { id: string; text: string }[] {
  if (typeof tools !== 'string') return [];
  try {
    const given = JSON.parse(tools)?.tool_results;
    return Array.isArray(given)
      ? given.filter((r) => typeof r?.tool_call_id === 'string')
        .map((r) => ({ id: r.tool_call_id, text: typeof r.content === 'string' ? r.content : '' }))
      : [];
  } catch {
    return [];
  }
}

/**
 * The turns `history.turns` answers: the session's turns before the run, as
 * the host derives them — every role for a controller built against 0.2.1
 * (`rich`), user and assistant only for one built before.
 */
function historyTurns(entries: any[], startedSeq: number, limit: number, rich: boolean) {
  const turns: any[] = [];
  for (const e of entries) {
    if (seqOf(e) >= startedSeq) break;
    const x = ev(e);
    const run = e.run_id ?? '';
    if (x.type === 'started' && !x.resumes) {
      const given = rich ? toolResults(x.tools) : [];
      if (given.length) {
        for (const g of given) turns.push({ seq: big(e.seq), runId: run, role: 'tool', text: g.text, toolCallId: g.id });
      } else {
        turns.push({ seq: big(e.seq), runId: run, role: 'user', text: x.prompt });
      }
    }
    if (x.type === 'finished') turns.push({ seq: big(e.seq), runId: run, role: 'assistant', text: x.text });
    if (x.type === 'history_imported') {
      for (const t of x.turns ?? []) {
        const role = ROLES[t.role];
        if (!role || (!rich && role !== 'user' && role !== 'assistant')) continue;
        const turn: any = { seq: big(e.seq), runId: '', role, text: t.text };
        if (rich && typeof t.tool_call_id === 'string') turn.toolCallId = t.tool_call_id;
        if (rich && t.tool_calls != null) turn.toolCalls = JSON.stringify(t.tool_calls);
        turns.push(turn);
      }
    }
    if (x.type === 'compaction_summary') turns.push({ seq: big(e.seq), runId: '', role: 'assistant', text: x.text });
  }
  return turns.slice(-Math.min(limit, 256));
}

/**
 * Replays run `runId` of a session's journal (`entries`, parsed with
 * `parseExact`) with `component`'s bytes; `checkpoint` is the parked run's
 * checkpoint when the run `resumes` one.
 */
export async function replayRun(
  component: Uint8Array,
  entries: any[],
  runId: string,
  checkpoint: Uint8Array | null,
  snapshots: Map<string, Uint8Array> = new Map(),
): Promise<ReplayResult> {
  const startedAt = entries.findIndex((e) => e.run_id === runId && typeOf(e) === 'started');
  if (startedAt < 0) throw new Error(`the journal has no started entry for run ${runId}`);
  const started = entries[startedAt];
  const s = ev(started);
  const rich = readsRichHistory(component);
  if (s.resumes && !checkpoint) {
    throw new Error(`run ${runId} resumes run ${s.resumes}: its park checkpoint is needed`);
  }
  const reserved = [...entries.slice(0, startedAt)].reverse().find((e) => typeOf(e) === 'generation_reserved');
  // Outgoing HTTP calls are found by id, not in order (docs/replay.md):
  // the browser does not replay them, so they are out of the script.
  const mine = entries.slice(startedAt + 1).filter((e) => e.run_id === runId);
  const httpCalls = new Set(mine
    .filter((e) => typeOf(e) === 'host_call_started' && ev(e).capability === 'http')
    .map((e) => String(ev(e).call_id)));
  const isHttp = (e: any) =>
    (typeOf(e) === 'host_call_started' || typeOf(e) === 'host_call_finished') && httpCalls.has(String(ev(e).call_id));
  const script = mine.filter((e) => SCRIPT.has(typeOf(e)) && !isHttp(e));
  const terminal = entries.slice(startedAt + 1).find((e) => e.run_id === runId && TERMINAL.has(typeOf(e)));
  const clock = new ReplayClock(big(started.at_ms));
  const seed = big(s.seed);

  let cursor = 0;
  let checked = 0;
  let divergence: ReplayResult['divergence'];
  let note: string | undefined;
  const diverge = (seq: number | null, expected: string, got: string) => {
    divergence ??= { seq, expected, got };
  };
  const endedCancelled = () => terminal && typeOf(terminal) === 'cancelled';
  const pastEnd = (got: string) => {
    if (!terminal) note ??= 'the journal ends here: the run is still live';
    else if (!endedCancelled()) diverge(null, 'the run to end (the journal has no more inputs)', got);
  };

  /**
   * A host call answered from the journal: its `host_call_started` must
   * carry `request`; the entries it journaled while it lasted are passed
   * over; `answer` reads its `host_call_finished`. A `workers` call of an
   * older journal is one `worker_call` entry instead.
   */
  const hostCall = (capability: string, request: string, answer: (end: any) => any, refused: any): any => {
    if (divergence || note) return refused;
    const entry = script[cursor];
    if (!entry) {
      pastEnd(`a ${capability} call ${request}`);
      return refused;
    }
    const x = ev(entry);
    if (x.type === 'worker_call' && capability === 'workers') {
      if (canon(x.call) !== request) {
        diverge(seqOf(entry), canon(x.call), request);
        return refused;
      }
      cursor++;
      checked++;
      const r = x.result ?? {};
      return answer(typeof r.error === 'string' ? { error: { code: 'refused', message: r.error } } : { response: r.ok ?? null });
    }
    const expected = x.type === 'host_call_started' && x.capability === capability ? canon(x.request) : canon(x);
    if (expected !== request) {
      diverge(seqOf(entry), expected, request);
      return refused;
    }
    cursor++;
    checked++;
    while (cursor < script.length) {
      const a = script[cursor];
      const y = ev(a);
      cursor++;
      if (AGENT.has(y.type)) continue;
      if (y.type !== 'host_call_finished' || String(y.call_id) !== String(x.call_id)) {
        diverge(seqOf(a), `the end of host call ${x.call_id}`, canon(y));
        return refused;
      }
      checked++;
      clock.advanceTo(big(a.at_ms));
      return answer(y);
    }
    pastEnd(`the end of host call ${x.call_id}`);
    return refused;
  };
  // The worktree the run started from; a child's returned scope is laid
  // out when its answer is (docs/replay.md, worktree snapshots).
  const root: Record<string, any> = {};
  const layOut = (digest: string, into: Record<string, any>) => {
    const bytes = snapshots.get(digest);
    if (bytes) unpackInto(bytes, into);
    else note ??= `worktree snapshot ${digest} is not at hand: the replay goes on without it`;
  };
  // Timers: ready at the look the journal says they fired at.
  const timers = new Map<number, { due: bigint; checks?: number }>();
  for (const e of mine) {
    const x = ev(e);
    if (x.type === 'timer_set') timers.set(Number(x.timer), { ...timers.get(Number(x.timer)), due: big(x.due_ms) });
    if (x.type === 'timer_fired') {
      const t = timers.get(Number(x.timer)) ?? { due: 0n };
      timers.set(Number(x.timer), { ...t, checks: Number(x.checks) });
    }
  }
  const timerLook = (timer: number, look: number): boolean => {
    const t = timers.get(timer);
    if (t?.checks === undefined || look < t.checks) return false;
    clock.advanceTo(t.due);
    return true;
  };
  const recorded = mine.find((e) => typeOf(e) === 'worktree_recorded');
  if (recorded) layOut(String(ev(recorded).digest), root);
  const returned = (r: any) => {
    if (typeof r?.scope !== 'string' || typeof r?.snapshot !== 'string') return;
    let dir = root;
    for (const name of r.scope.split('/')) dir = ((dir[name] ??= { dir: {} }).dir ??= {});
    layOut(r.snapshot, dir);
  };
  const workersCall = (call: any, ok: (v: any) => any): any =>
    hostCall('workers', canon(call), (y) => {
      if (y.error) return { tag: 'err', val: y.error.message };
      returned(y.response);
      return ok(y.response);
    }, { tag: 'err', val: 'not answered by the journal' });

  /** `cairn:tools` as the host does it: the list this run last got, an
   * approval asked as a decision before a marked tool, each call a host call. */
  let toolList: any[] | undefined;
  const toolErr = (e: any): any => {
    const code = String(e.code);
    const tag = code === 'provider' ? 'server' : code.replace('_', '-');
    return tag === 'cancelled' ? { tag } : { tag, val: e.message };
  };
  const cancelledTool = { tag: 'err', val: { tag: 'cancelled' } };
  const listTools = (): any => hostCall('tools', canon({}), (y) => {
    if (y.error) return { tag: 'err', val: toolErr(y.error) };
    toolList = Array.isArray(y.response) ? y.response : [];
    return { tag: 'ok', val: toolList };
  }, cancelledTool);
  const toolInfo = (t: any) => ({
    server: t.server, name: t.name, description: t.description,
    inputSchema: canon(t.input_schema), readOnly: !!t.read_only, approve: !!t.approve,
  });
  const callTool = (name: string, args: string): any => {
    let parsed: any;
    try {
      parsed = args.trim() === '' ? {} : parseExact(args);
    } catch (e) {
      return { tag: 'err', val: { tag: 'refused', val: `the arguments of ${name} are not a JSON document` } };
    }
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      return { tag: 'err', val: { tag: 'refused', val: `the arguments of ${name} must be a JSON object` } };
    }
    if (!toolList) {
      const r = listTools();
      if (r.tag !== 'ok') return r;
    }
    const tool = (toolList ?? []).find((t) => t.name === name);
    if (!tool) return { tag: 'err', val: { tag: 'refused', val: `there is no tool ${name} among the session's tools` } };
    if (tool.approve) {
      const a = decide(canon({
        request_kind: 'approval',
        prompt: `call ${tool.server}'s tool ${name}?`,
        details: { capability: 'tools', server: tool.server, tool: name, arguments: parsed },
        timeout_ms: undefined,
        default_value: undefined,
      })).val;
      if (a.tag === 'park') return { tag: 'err', val: { tag: 'park' } };
      if (a.tag === 'cancelled') return cancelledTool;
      if (a.tag === 'timed-out') return { tag: 'err', val: { tag: 'denied', val: 'no answer in time' } };
      const v = JSON.parse(a.val);
      const yes = v === true || (v !== null && typeof v === 'object' && v.approved === true);
      if (!yes) return { tag: 'err', val: { tag: 'denied', val: typeof v?.reason === 'string' ? v.reason : '' } };
    }
    const prefix = `${tool.server}__`;
    const own = name.startsWith(prefix) ? name.slice(prefix.length) : name;
    return hostCall('tools', canon({ server: tool.server, tool: own, arguments: parsed, read_only: !!tool.read_only }), (y) => {
      if (y.error) return { tag: 'err', val: toolErr(y.error) };
      const r = y.response ?? {};
      return {
        tag: 'ok',
        val: {
          text: r.text ?? '',
          content: canon(r.content ?? []),
          structured: r.structured === undefined || r.structured === null ? undefined : canon(r.structured),
          isError: !!r.is_error,
        },
      };
    }, cancelledTool);
  };

  /** A decision request (canonical JSON) answered from the journal. */
  const decide = (got: string): any => {
    const cancelled = { tag: 'ok', val: { tag: 'cancelled' } };
    if (divergence || note) return cancelled;
    const entry = script[cursor];
    if (!entry) {
      pastEnd(`a decision request ${got}`);
      return cancelled;
    }
    const x = ev(entry);
    const expected = x.type === 'decision_requested'
      ? canon({ request_kind: x.request_kind, prompt: x.prompt, details: x.details, timeout_ms: x.timeout_ms, default_value: x.default_value })
      : canon(x);
    if (x.type !== 'decision_requested' || expected !== got) {
      diverge(seqOf(entry), expected, got);
      return cancelled;
    }
    cursor++;
    checked++;
    while (cursor < script.length) {
      const a = script[cursor];
      const y = ev(a);
      if (y.decision_id !== x.decision_id) break;
      cursor++;
      checked++;
      if (y.type === 'approval_routed' && y.route === 'parked') return { tag: 'ok', val: { tag: 'park' } };
      if (y.type === 'decision_recorded') {
        clock.advanceTo(big(a.at_ms));
        return { tag: 'ok', val: { tag: 'decided', val: canon(y.value) } };
      }
      if (y.type === 'decision_timed_out') {
        clock.advanceTo(big(a.at_ms));
        return { tag: 'ok', val: { tag: 'timed-out' } };
      }
    }
    if (terminal && typeOf(terminal) === 'parked') return { tag: 'ok', val: { tag: 'park' } };
    if (!terminal) note ??= `the run waits on decision ${x.decision_id}: replayed up to the wait`;
    return cancelled;
  };

  const imports: any = {
    ...wasiImports(seed, clock, root, timerLook),
    ...httpImports(() => {
      note ??= 'this run sent HTTP requests (wasi:http), which the browser does not replay: `cairn replay` does';
    }),
    'cairn:controller/journal': {
      emit(e: any) {
        const got = emittedEntry(e);
        if (divergence || note) return { tag: 'err', val: { tag: 'cancelled' } };
        const entry = script[cursor];
        if (!entry) {
          pastEnd(`emit ${got}`);
          return { tag: 'err', val: { tag: 'cancelled' } };
        }
        const expected = canon(ev(entry));
        if (expected !== got) {
          diverge(seqOf(entry), expected, got);
          return { tag: 'err', val: { tag: 'cancelled' } };
        }
        cursor++;
        checked++;
        return { tag: 'ok', val: big(entry.seq) };
      },
    },
    'cairn:controller/decisions': {
      wait: (req: any) => decide(requestCanon(req)),
    },
    'cairn:controller/history': {
      turns: (limit: number) => historyTurns(entries, seqOf(started), limit, rich),
    },
    'cairn:controller/workers': {
      spawn: (req: any) => workersCall(
        { call: 'spawn', component: req.component, prompt: req.prompt, scope: req.scope ?? null, liveness: req.liveness },
        (ok) => ({ tag: 'ok', val: child(ok) })),
      status: (id: string) => workersCall({ call: 'status', worker_id: id }, (ok) => ({ tag: 'ok', val: childStatus(ok) })),
      wait: (id: string, timeoutMs: bigint) => workersCall(
        { call: 'wait', worker_id: id, timeout_ms: big(timeoutMs) }, (ok) => ({ tag: 'ok', val: childStatus(ok) })),
      cancel: (id: string) => workersCall({ call: 'cancel', worker_id: id }, () => ({ tag: 'ok', val: undefined })),
      registerPeer: (id: string) => workersCall({ call: 'register_peer', worker_id: id }, () => ({ tag: 'ok', val: undefined })),
      peers: () => {
        const r = workersCall({ call: 'peers' }, (ok) => ({ tag: 'ok', val: (Array.isArray(ok) ? ok : []).map(child) }));
        return r.tag === 'ok' ? r.val : [];
      },
    },
    'cairn:model/chat': {
      chat: (req: any) => hostCall('model', modelRequest(req), (y) => {
        if (y.error) {
          const tag = String(y.error.code).replace('_', '-');
          return { tag: 'err', val: tag === 'cancelled' ? { tag } : { tag, val: y.error.message } };
        }
        return { tag: 'ok', val: modelResponse(y.response ?? {}) };
      }, { tag: 'err', val: { tag: 'cancelled' } }),
    },
    'cairn:tools/mcp': {
      list: () => {
        const r = listTools();
        return r.tag === 'ok' ? { tag: 'ok', val: r.val.map(toolInfo) } : r;
      },
      call: (name: string, args: string) => callTool(name, args),
    },
  };

  const instantiate = await transpile(component);
  const instance = await instantiate(imports);
  const run = instance.run ?? instance['cairn:controller/run'];
  const start = {
    runId,
    sessionId: started.session_id,
    workerId: ev(reserved)?.worker_id ?? '',
    generation: big(s.generation),
    prompt: s.prompt,
    continues: s.continues ?? undefined,
    checkpoint: checkpoint ?? undefined,
    tools: s.tools ?? undefined,
  };
  let outcome: any;
  try {
    outcome = run(start);
  } catch (e) {
    outcome = { tag: 'trap', val: String(e) };
  }
  const shown = outcome.tag === 'parked' ? `parked (${outcome.val.length} bytes)` : `${outcome.tag}${typeof outcome.val === 'string' ? `: ${outcome.val}` : outcome.tag === 'failed' ? `: ${outcome.val.code}` : ''}`;
  if (!divergence && !note) {
    if (cursor < script.length) {
      const e = script[cursor];
      diverge(seqOf(e), canon(ev(e)), `the run ended (${shown})`);
    } else if (terminal) {
      const t = ev(terminal);
      const want =
        t.type === 'finished' ? `${t.outcome === 'question' ? 'question' : 'finished'}: ${t.text}` :
        t.type === 'parked' ? 'parked' :
        t.type === 'failed' ? `failed: ${t.error?.code}` : 'cancelled';
      const got = outcome.tag === 'parked' ? 'parked' : outcome.tag === 'failed' ? `failed: ${outcome.val.code}` : shown;
      // A cancelled run ends however the guest winds down; a failure the host
      // imposed (a limit, a trap) is not the guest's outcome either.
      const hostEnded = t.type === 'cancelled' || (t.type === 'failed' && outcome.tag !== 'failed');
      if (!hostEnded && want !== got) diverge(seqOf(terminal), want, got);
      checked++;
    }
  }
  return { matches: !divergence, checked, outcome: shown, divergence, note };
}
