// Types of cairn's JavaScript SDK (cairn.js).

export interface Start {
  runId: string;
  sessionId: string;
  workerId: string;
  generation: number;
  prompt: string;
  continues?: string;
  checkpoint?: Uint8Array;
  tools?: unknown;
}


export interface Controller {
  name?: string;
  version?: string;
  canPark?: boolean;
  run(start: Start): Outcome | Promise<Outcome>;
}

export declare class CairnError extends Error {
  constructor(code: string, message: string);
  readonly code: string;
}
export declare class EmitError extends Error {
  readonly kind: 'cancelled' | 'limit_exceeded' | 'invalid';
}
export declare class CallError extends Error {
  readonly kind: string;
}

export declare function emitText(text: string): number;
export declare function emitReasoning(text: string): number;
export declare function emitProgress(message: string, done: number, total?: number): number;
export declare function emitCustom(name: string, data: unknown): number;
export declare function emitToolCall(id: string, name: string, args: unknown): number;

export type DecisionKind = 'approval' | 'tool_result' | 'answer';
export interface Answer {
  kind: 'decided' | 'timed_out' | 'cancelled' | 'park';
  value?: unknown;
}
export declare function request(kind: DecisionKind, prompt: string, details?: unknown, timeoutMs?: number, defaultValue?: unknown): Answer;
export declare function requestApproval(prompt: string, details?: unknown): { approved: boolean; reason?: string; park: boolean };

export interface Turn {
  role: 'user' | 'assistant' | 'system' | 'tool';
  text: string;
  runId: string;
  seq: number;
  /** A tool turn's call id. */
  toolCallId?: string;
  /** An assistant turn's tool calls, as OpenAI's `tool_calls` JSON text. */
  toolCalls?: string;
}
export declare function history(limit?: number): Turn[];

export interface Message {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
  tool_calls?: { id: string; name: string; arguments: string | unknown }[];
  tool_call_id?: string;
}
export interface ToolSpec {
  name: string;
  description?: string;
  parameters?: unknown;
}
export declare const model: {
  chat(req: { messages: Message[]; tools?: ToolSpec[]; model?: string; maxTokens?: number; temperature?: number; stream?: boolean }): {
    text: string;
    toolCalls: { id: string; name: string; arguments: string }[];
    finishReason: string;
    usage: { inputTokens: number; outputTokens: number };
    model: string;
  };
};
export declare const tools: {
  list(): { server: string; name: string; description: string; inputSchema: unknown; readOnly: boolean; approve: boolean }[];
  call(name: string, args?: unknown): { text: string; content: unknown; structured?: unknown; isError: boolean };
};

export declare function question(text: string): { readonly kind: 'question' };
export declare function parked(checkpoint: Uint8Array | string): { readonly kind: 'parked' };
/** What `run` returns or resolves to. */
export type Outcome = string | ReturnType<typeof question> | ReturnType<typeof parked> | void;
export declare function controller(c: Controller): { describe(): unknown; run(start: unknown): unknown };

/** Tools the client offered, called mid-run (see `cairn.js`). */
export declare const clientTools: {
  offered(start: Start): { name: string; description?: string; parameters: unknown }[];
  results(start: Start): { toolCallId: string; content: string }[];
  callAll(calls: [name: string, args: unknown][]): string[];
  call(name: string, args: unknown): string;
};
