// The server side of the viewer: the HTTP API with an optional bearer token
// (asked for when the server answers 401), and a Server-Sent Events reader
// over fetch (EventSource cannot send a token), with reconnects that go on
// from the last seq seen.

const TOKEN_KEY = 'cairn.token';

export class Unauthorized extends Error {}

export function token(): string | null {
  return localStorage.getItem(TOKEN_KEY);
}
export function setToken(t: string | null): void {
  if (t) localStorage.setItem(TOKEN_KEY, t);
  else localStorage.removeItem(TOKEN_KEY);
}

function headers(extra: Record<string, string> = {}): Record<string, string> {
  const t = token();
  return t ? { ...extra, authorization: `Bearer ${t}` } : extra;
}

/** A request to the API; JSON errors become `Error(code: message)`. */
export async function request(path: string, init: RequestInit = {}): Promise<Response> {
  const r = await fetch(path, { ...init, headers: headers((init.headers as any) ?? {}) });
  if (r.status === 401) throw new Unauthorized('this server needs a bearer token');
  if (!r.ok) {
    let msg = `${r.status} ${r.statusText}`;
    try {
      const body = await r.json();
      if (body?.error) msg = `${body.error.code}: ${body.error.message}`;
    } catch {
      /* not JSON */
    }
    throw new Error(msg);
  }
  return r;
}

export async function getJson(path: string): Promise<any> {
  return (await request(path)).json();
}

export async function postJson(path: string, body: unknown): Promise<any> {
  const r = await request(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return r.json();
}

export async function getBytes(path: string): Promise<Uint8Array> {
  return new Uint8Array(await (await request(path)).arrayBuffer());
}

/** One journal page as text (for exact parsing) or parsed. */
export async function journalPage(session: string, after: number, limit: number): Promise<any> {
  return getJson(`/v1/sessions/${encodeURIComponent(session)}/journal?after=${after}&limit=${limit}`);
}

export interface SseHandlers {
  onEvent(data: string, id: string | null): void;
  onGap(resumedAt: number): Promise<void>;
  onState(state: 'live' | 'reconnecting' | 'closed', detail?: string): void;
}

/**
 * Follows `/v1/sessions/{id}/events?after=` over fetch, reconnecting with
 * the last seq seen. `last()` says where to go on from; `stop()` ends it.
 */
export function follow(session: string, last: () => number, h: SseHandlers): { stop(): void } {
  let stopped = false;
  let ctl: AbortController | null = null;
  const run = async () => {
    let delay = 250;
    while (!stopped) {
      ctl = new AbortController();
      try {
        const r = await fetch(`/v1/sessions/${encodeURIComponent(session)}/events?after=${last()}`, {
          headers: headers({ accept: 'text/event-stream' }),
          signal: ctl.signal,
        });
        if (r.status === 401) throw new Unauthorized('token');
        if (!r.ok || !r.body) throw new Error(`${r.status}`);
        h.onState('live');
        delay = 250;
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = '';
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value;
          let cut: number;
          while ((cut = buf.indexOf('\n\n')) >= 0) {
            const frame = buf.slice(0, cut);
            buf = buf.slice(cut + 2);
            let event = 'message';
            let id: string | null = null;
            const data: string[] = [];
            for (const line of frame.split('\n')) {
              if (line.startsWith('event:')) event = line.slice(6).trim();
              else if (line.startsWith('id:')) id = line.slice(3).trim();
              else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
            }
            if (!data.length) continue;
            if (event === 'gap') await h.onGap(Number(JSON.parse(data.join('\n')).resumed_at));
            else if (event === 'shutdown') h.onState('reconnecting', 'the server is shutting down');
            else h.onEvent(data.join('\n'), id);
          }
        }
      } catch (e) {
        if (stopped) break;
        if (e instanceof Unauthorized) {
          h.onState('closed', 'unauthorized');
          return;
        }
      }
      if (stopped) break;
      h.onState('reconnecting');
      await new Promise((res) => setTimeout(res, delay));
      delay = Math.min(delay * 2, 5000);
    }
    h.onState('closed');
  };
  void run();
  return {
    stop() {
      stopped = true;
      ctl?.abort();
    },
  };
}
