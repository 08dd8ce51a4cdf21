// cairn's JavaScript SDK: write a controller as an object with `run`,
// bundle it with this module, build it into a WebAssembly component with
// componentize-js (`node build.mjs app.js out.wasm`), run it with
// `cairn run`. Everything the controller receives was journaled first, so
// its runs restore after a crash and replay offline.
//
//   import { controller, emitText } from 'cairn-sdk';
//   export const { describe, run } = controller({
//     name: 'js-echo',
//     run(start) { emitText(start.prompt); return start.prompt; },
//   });

import { emit } from 'cairn:controller/journal@0.2.1';
import { wait } from 'cairn:controller/decisions@0.2.1';
import { turns } from 'cairn:controller/history@0.2.1';
import { chat as chatImport } from 'cairn:model/chat@0.1.0';
import { list as listImport, call as callImport } from 'cairn:tools/mcp@0.1.0';

/** A controller's own failure: the run ends `failed` with this code. */
export class CairnError extends Error {
  constructor(code, message) {
    super(`${code}: ${message}`);
    this.code = code;
    this.detail = message;
  }
}

/** An event that was not journaled (`cancelled`, `limit_exceeded`, `invalid`): stop soon. */
export class EmitError extends Error {
  constructor(kind, message = '') {
    super(message ? `${kind}: ${message}` : kind);
    this.kind = kind;
  }
}

/** Why a host call (model, tools) gave no answer; `kind` names it. */
export class CallError extends Error {
  constructor(kind, message = '') {
    super(message ? `${kind}: ${message}` : kind);
    this.kind = kind;
  }
}

const snake = (tag) => String(tag).replaceAll('-', '_');
const payload = (e) => (e && typeof e === 'object' && 'payload' in e ? e.payload : e);

function journal(event) {
  try {
    return Number(emit(event));
  } catch (e) {
    const p = payload(e);
    throw new EmitError(snake(p?.tag ?? 'invalid'), typeof p?.val === 'string' ? p.val : '');
  }
}

/** Journal a piece of the answer; its sequence number. */
export const emitText = (text) => journal({ tag: 'text-delta', val: String(text) });
/** Journal a piece of reasoning. */
export const emitReasoning = (text) => journal({ tag: 'reasoning-delta', val: String(text) });
/** Journal progress: `done` of `total` steps. */
export const emitProgress = (message, done, total) =>
  journal({ tag: 'progress', val: { message, done: BigInt(done), total: total === undefined ? undefined : BigInt(total) } });
/** Journal a custom event carrying `data` (any JSON value). */
export const emitCustom = (name, data) => journal({ tag: 'custom', val: { name, data: JSON.stringify(data) } });
/** Journal a tool call the controller makes. */
export const emitToolCall = (id, name, args) =>
  journal({ tag: 'tool-call', val: { id, name, arguments: typeof args === 'string' ? args : JSON.stringify(args) } });

const KINDS = { approval: 'approval', tool_result: 'tool-result', answer: 'answer' };

/**
 * Ask for a decision (`approval`, `tool_result` or `answer`) and wait:
 * `{ kind: 'decided', value }`, or `{ kind: 'timed_out' | 'cancelled' | 'park' }`.
 */
export function request(kind, prompt, details = {}, timeoutMs, defaultValue) {
  if (!(kind in KINDS)) throw new Error(`${kind} is not a decision kind: say approval, tool_result or answer`);
  let a;
  try {
    a = wait({
      kind: KINDS[kind],
      prompt,
      details: JSON.stringify(details ?? {}),
      timeoutMs: timeoutMs === undefined ? undefined : BigInt(timeoutMs),
      defaultValue: defaultValue === undefined ? undefined : JSON.stringify(defaultValue),
    });
  } catch (e) {
    throw new CairnError('refused', String(payload(e)?.val ?? e));
  }
  if (a.tag === 'decided') return { kind: 'decided', value: JSON.parse(a.val) };
  return { kind: snake(a.tag) };
}

/** Ask a person to approve `prompt`: `{ approved, reason?, park }`. */
export function requestApproval(prompt, details = {}) {
  const a = request('approval', prompt, details);
  if (a.kind === 'park') return { approved: false, park: true };
  if (a.kind !== 'decided') return { approved: false, reason: a.kind, park: false };
  const v = a.value;
  if (typeof v === 'boolean') return { approved: v, park: false };
  return { approved: v?.approved === true, reason: v?.reason, park: false };
}

/**
 * The session's latest turns before this run, oldest first:
 * `{ role, text, runId, seq, toolCallId?, toolCalls? }` — `role` is `user`,
 * `assistant`, `system` (imported instructions) or `tool` (a tool's result).
 */
export function history(limit = 16) {
  return turns(limit).map((t) => ({
    role: t.role,
    text: t.text,
    runId: t.runId,
    seq: Number(t.seq),
    ...(t.toolCallId != null ? { toolCallId: t.toolCallId } : {}),
    ...(t.toolCalls != null ? { toolCalls: t.toolCalls } : {}),
  }));
}

/** A language model through the host (`cairn:model`). */
export const model = {
  /**
   * `messages`: OpenAI-style `{ role, content, tool_calls?, tool_call_id? }`;
   * `tools`: `{ name, description, parameters }`. Returns `{ text, toolCalls, finishReason, usage, model }`.
   */
  chat({ messages, tools = [], model = '', maxTokens, temperature, stream = false }) {
    let r;
    try {
      r = chatImport({
        model,
        messages: messages.map((m) => ({
          role: m.role,
          content: m.content ?? '',
          toolCalls: (m.tool_calls ?? []).map((c) => ({ id: c.id, name: c.name, arguments: typeof c.arguments === 'string' ? c.arguments : JSON.stringify(c.arguments) })),
          toolCallId: m.tool_call_id,
        })),
        tools: tools.map((t) => ({ name: t.name, description: t.description ?? '', parameters: JSON.stringify(t.parameters ?? { type: 'object', properties: {} }) })),
        toolChoice: undefined,
        maxTokens,
        temperature,
        stream,
      });
    } catch (e) {
      const p = payload(e);
      throw new CallError(snake(p?.tag ?? 'provider'), typeof p?.val === 'string' ? p.val : '');
    }
    return {
      text: r.text,
      toolCalls: r.toolCalls.map((c) => ({ id: c.id, name: c.name, arguments: c.arguments })),
      finishReason: snake(r.finishReason),
      usage: { inputTokens: Number(r.usage.inputTokens), outputTokens: Number(r.usage.outputTokens) },
      model: r.model,
    };
  },
};

/** The tools of MCP servers through the host (`cairn:tools`). */
export const tools = {
  /** `[{ server, name, description, inputSchema, readOnly, approve }]`. */
  list() {
    try {
      return listImport().map((t) => ({ ...t, inputSchema: JSON.parse(t.inputSchema || '{}') }));
    } catch (e) {
      const p = payload(e);
      throw new CallError(snake(p?.tag ?? 'server'), typeof p?.val === 'string' ? p.val : '');
    }
  },
  /** `{ text, content, structured?, isError }`. */
  call(name, args = {}) {
    try {
      const r = callImport(name, JSON.stringify(args));
      return { text: r.text, content: JSON.parse(r.content || '[]'), structured: r.structured === undefined ? undefined : JSON.parse(r.structured), isError: r.isError };
    } catch (e) {
      const p = payload(e);
      throw new CallError(snake(p?.tag ?? 'server'), typeof p?.val === 'string' ? p.val : '');
    }
  },
};

/** Call ids are `call_<run>_<n>`: the run's, counted from its start. */
const calls = { run: '', next: 0 };

/**
 * Tools the *client* offered (an OpenAI chat request's `tools`, a Responses
 * request's function tools), called mid-run: the client runs them and sends
 * the results back, and the run goes on with them. A call is a `tool_call`
 * and a `tool_result` wait naming it (both journaled); a run that continues
 * one that ended with tool calls gets the client's results in `results`.
 */
export const clientTools = {
  /** The function tools offered: `[{ name, description, parameters }]`. */
  offered(start) {
    return (start.tools?.tools ?? [])
      .map((t) => t?.function)
      .filter((f) => typeof f?.name === 'string')
      .map((f) => ({ name: f.name, description: f.description, parameters: f.parameters ?? {} }));
  },
  /** The results this run was started with: `[{ toolCallId, content }]`. */
  results(start) {
    return (start.tools?.tool_results ?? [])
      .filter((r) => typeof r?.tool_call_id === 'string')
      .map((r) => ({ toolCallId: r.tool_call_id, content: r.content ?? '' }));
  },
  /** Call several at once (parallel calls) and wait for each result, in order. */
  callAll(list) {
    const ids = list.map(([name, args]) => {
      calls.next += 1;
      const id = `call_${calls.run}_${calls.next}`;
      emitToolCall(id, name, args);
      return [id, name];
    });
    return ids.map(([id, name]) => {
      const a = request('tool_result', name, { tool_call_id: id, name });
      if (a.kind !== 'decided') throw new CairnError('tool_result_missing', `the client sent no result (${a.kind})`);
      return typeof a.value === 'string' ? a.value : JSON.stringify(a.value);
    });
  },
  /** Call one and wait for its result (the tool's text). */
  call(name, args) {
    return clientTools.callAll([[name, args]])[0];
  },
};

/** Return `question(text)` from `run` to end it asking a clarifying question. */
export const question = (text) => ({ [OUTCOME]: 'question', text });
/** Return `parked(bytes)` to park; `bytes` come back as `start.checkpoint`. */
export const parked = (checkpoint) => ({ [OUTCOME]: 'parked', checkpoint });
const OUTCOME = Symbol('cairn.outcome');

function outcome(result) {
  if (result && result[OUTCOME] === 'question') return { tag: 'question', val: result.text };
  if (result && result[OUTCOME] === 'parked') {
    const c = result.checkpoint;
    return { tag: 'parked', val: typeof c === 'string' ? new TextEncoder().encode(c) : new Uint8Array(c) };
  }
  return { tag: 'finished', val: result === undefined || result === null ? '' : String(result) };
}

/**
 * The component's exports from a controller `{ name, version?, canPark?, run(start) }`:
 * `export const { describe, run } = controller({...})`. `run` returns (or,
 * when async, resolves to) the final answer (a string), `question(text)`
 * or `parked(bytes)`; `fetch` reaches what the workspace's
 * `allowed_outbound_hosts` allow, through `wasi:http`; a thrown
 * `CairnError` ends the run `failed` with its code (anything else with
 * code `exception`).
 */
export function controller(c) {
  return {
    describe: () => ({ name: c.name ?? 'js-controller', version: c.version ?? '0.1.0', canPark: c.canPark === true }),
    run: (start) => {
      calls.run = start.runId.replace(/-/g, '');
      calls.next = 0;
      const s = {
        runId: start.runId,
        sessionId: start.sessionId,
        workerId: start.workerId,
        generation: Number(start.generation),
        prompt: start.prompt,
        continues: start.continues,
        checkpoint: start.checkpoint,
        tools: start.tools ? JSON.parse(start.tools) : undefined,
      };
      const failed = (e) => {
        if (e instanceof CairnError) return { tag: 'failed', val: { code: e.code, message: e.detail } };
        if (e instanceof EmitError) return { tag: 'failed', val: { code: e.kind, message: e.message } };
        return { tag: 'failed', val: { code: 'exception', message: String(e?.message ?? e) } };
      };
      try {
        const result = c.run(s);
        // An async `run` (one that awaits `fetch`): the event loop runs
        // until it settles.
        if (result && typeof result.then === 'function') return result.then(outcome, failed);
        return outcome(result);
      } catch (e) {
        return failed(e);
      }
    },
  };
}
