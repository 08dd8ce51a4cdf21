// cairn's viewer: the sessions of a server, one session followed live, or an
// exported JSONL opened from disk (drag and drop, no server needed); any run
// replayed in the page. Routes: #/ (sessions), #/s/<id> (a session),
// #/open (a file).
import * as api from './api';
import { h, shortId, when, componentNames, componentLabel } from './dom';
import { parseExact } from './json';
import { parseJsonl, RunView } from './model';
import { SessionPage } from './session';

const app = document.getElementById('app')!;
let teardown: (() => void) | null = null;
const PAGE = 10_000;

function nav(): HTMLElement {
  return h('nav', {},
    h('a', { href: '#/', class: 'brand' }, 'cairn'),
    h('a', { href: '#/' }, 'Sessions'),
    h('a', { href: '#/open' }, 'Open a file'),
    api.token() ? h('button', { class: 'link', onclick: () => { api.setToken(null); route(); } }, 'Forget token') : null);
}

function show(...children: HTMLElement[]): void {
  app.replaceChildren(nav(), ...children);
}

function tokenPrompt(): void {
  const input = h('input', { type: 'password', placeholder: 'bearer token', 'aria-label': 'bearer token', id: 'token' }) as HTMLInputElement;
  const form = h('form', { class: 'token-form', onsubmit: (e: Event) => {
    e.preventDefault();
    api.setToken(input.value.trim());
    route();
  } },
    h('p', {}, 'This server has workspaces: give a workspace token to see its sessions.'),
    input, h('button', { type: 'submit' }, 'Use token'));
  show(h('main', {}, form));
  input.focus();
}

function failed(e: unknown): void {
  if (e instanceof api.Unauthorized) return tokenPrompt();
  show(h('main', {}, h('p', { class: 'error' }, e instanceof Error ? e.message : String(e))));
}

/** The components' names (once per page load; a server that cannot list
 * them leaves digests shown). */
let namesLoaded: Promise<void> | null = null;
function loadNames(): Promise<void> {
  namesLoaded ??= api
    .getJson('/v1/components')
    .then((list: any[]) => {
      for (const c of list) if (c?.digest && c?.name) componentNames.set(c.digest, c.version ? `${c.name} ${c.version}` : c.name);
    })
    .catch(() => {});
  return namesLoaded;
}

/** Every page of `/v1/sessions` (oldest first, 1,000 a page), following
 * `x-next-cursor`, so a home with more sessions still lists its newest. */
async function allSessions(): Promise<any[]> {
  const out: any[] = [];
  let cursor: string | null = null;
  for (let pages = 0; pages < 100; pages++) {
    const r = await api.request(`/v1/sessions${cursor ? `?cursor=${encodeURIComponent(cursor)}` : ''}`);
    out.push(...(await r.json()));
    cursor = r.headers.get('x-next-cursor');
    if (!cursor) break;
  }
  return out;
}

async function sessionsPage(): Promise<void> {
  const filter = h('input', { type: 'search', placeholder: 'filter: id, state, workspace, component', 'aria-label': 'filter', id: 'filter' }) as HTMLInputElement;
  filter.value = sessionStorage.getItem('cairn.filter') ?? '';
  const body = h('tbody');
  const table = h('table', { class: 'sessions', 'data-testid': 'sessions' },
    h('thead', {}, h('tr', {}, ...['Session', 'State', 'Workspace', 'Component', 'Live run', 'Last activity', 'Entries'].map((t) => h('th', {}, t)))),
    body);
  let all: any[] = [];
  const draw = () => {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    const rows = all.filter((s) => {
      const hay = `${s.session_id} ${s.state?.state} ${s.workspace} ${s.component} ${s.last_run?.status}`.toLowerCase();
      return words.every((w) => hay.includes(w));
    });
    body.replaceChildren(...rows.map((s) => {
      const live = s.last_run && !s.last_run.ended_at_ms ? s.last_run.run_id : '';
      const last = s.last_run?.ended_at_ms ?? s.last_run?.started_at_ms;
      return h('tr', { 'data-session': s.session_id },
        h('td', {}, h('a', { href: `#/s/${s.session_id}` }, s.session_id)),
        h('td', {}, h('span', { class: `badge state-${s.state?.state}` }, s.state?.state ?? '')),
        h('td', {}, s.workspace ?? ''),
        h('td', { title: s.component ?? '' }, componentLabel(s.component)),
        h('td', {}, live ? shortId(live, 12) : ''),
        h('td', {}, when(last)),
        h('td', {}, String(s.last_seq ?? '')));
    }));
  };
  filter.addEventListener('input', () => {
    sessionStorage.setItem('cairn.filter', filter.value);
    draw();
  });
  const load = async () => {
    await loadNames();
    all = await allSessions();
    all.sort((a, b) => (b.last_run?.started_at_ms ?? 0) - (a.last_run?.started_at_ms ?? 0));
    draw();
  };
  // Torn down from the start: a route change while the first load is in
  // flight leaves no timer behind.
  let stopped = false;
  let timer: ReturnType<typeof setInterval> | null = null;
  teardown = () => {
    stopped = true;
    if (timer) clearInterval(timer);
  };
  await load();
  if (stopped) return;
  show(h('main', {}, h('h1', {}, 'Sessions'), filter, table));
  timer = setInterval(() => load().catch(() => {}), 2000);
}

/** Every journal entry of a session, parsed exactly (for a replay). */
async function exactJournal(session: string): Promise<any[]> {
  const out: any[] = [];
  let after = 0;
  for (;;) {
    const r = await api.request(`/v1/sessions/${encodeURIComponent(session)}/journal?after=${after}&limit=${PAGE}`);
    const page = parseExact(await r.text());
    out.push(...page.entries);
    if (page.next_after === undefined) return out;
    after = Number(page.next_after.text ?? page.next_after);
  }
}

/** The worktree snapshots a run's replay lays out, fetched from the
 * server (content-addressed: cached for good). */
async function snapshotsFor(session: string, entries: any[], run: string): Promise<Map<string, Uint8Array>> {
  const { snapshotsOf } = await import('./replay');
  const out = new Map<string, Uint8Array>();
  for (const digest of snapshotsOf(entries, run)) {
    out.set(digest, await api.getBytes(`/v1/sessions/${encodeURIComponent(session)}/worktrees/${encodeURIComponent(digest)}`));
  }
  return out;
}

async function livePage(session: string): Promise<void> {
  // Torn down from the start: a route change while this page is still
  // loading (the replay module, the journal's first pages) stops it before
  // it follows the stream or polls the session.
  let stopped = false;
  let stream: { stop(): void } | null = null;
  let info: ReturnType<typeof setInterval> | null = null;
  teardown = () => {
    stopped = true;
    stream?.stop();
    if (info) clearInterval(info);
  };
  const { replayRun } = await import('./replay');
  await loadNames();
  if (stopped) return;
  const page = new SessionPage(session, {
    live: true,
    decide: async (id, value) => {
      await api.postJson(`/v1/decisions/${encodeURIComponent(id)}`, { value });
    },
    replay: async (run: RunView) => {
      const entries = await exactJournal(session);
      const component = await api.getBytes(`/v1/components/${encodeURIComponent(run.component)}`);
      const checkpoint = run.resumes ? await api.getBytes(`/v1/runs/${encodeURIComponent(run.resumes)}/checkpoint`) : null;
      return replayRun(component, entries, run.id, checkpoint, await snapshotsFor(session, entries, run.id));
    },
    shadow: async (run: RunView, digest: string) => {
      const entries = await exactJournal(session);
      const component = await api.getBytes(`/v1/components/${encodeURIComponent(digest)}`);
      const checkpoint = run.resumes ? await api.getBytes(`/v1/runs/${encodeURIComponent(run.resumes)}/checkpoint`) : null;
      return replayRun(component, entries, run.id, checkpoint, await snapshotsFor(session, entries, run.id));
    },
    components: () => [...componentNames.entries()],
  });
  // The header's facts come when they come; the journal paints first.
  api.getJson(`/v1/sessions/${encodeURIComponent(session)}`).then(
    (i) => page.setInfo(i),
    (e) => (e instanceof api.Unauthorized ? failed(e) : page.setStreamState(`cannot read the session: ${e.message}`)),
  );
  show(h('main', {}, page.el));
  // Fill from the journal route: the first pages (the first paints at once),
  // then the rest in the background, then the live stream.
  const fill = async (upTo: number) => {
    while (!stopped && page.model.lastSeq < upTo) {
      const p = await api.journalPage(session, page.model.lastSeq, page.model.lastSeq === 0 ? 1000 : PAGE);
      if (!p.entries.length) {
        if (upTo !== Infinity && page.model.lastSeq < upTo) {
          page.model.holes.push({ from: page.model.lastSeq + 1, to: upTo });
          page.model.lastSeq = upTo;
        }
        break;
      }
      page.add(p.entries);
      if (p.next_after === undefined && upTo === Infinity) break;
      // Let a frame paint between pages.
      await new Promise((r) => requestAnimationFrame(() => setTimeout(r, 0)));
    }
  };
  await fill(Infinity);
  if (stopped) return;
  stream = api.follow(session, () => page.model.lastSeq, {
    onEvent: (data) => {
      try {
        page.add([JSON.parse(data)]);
      } catch {
        /* a line this viewer cannot read */
      }
    },
    onGap: async (resumedAt) => {
      page.setStreamState(`filling gap #${page.model.lastSeq + 1}–#${resumedAt - 1}`);
      await fill(resumedAt - 1);
      page.setStreamState('live');
    },
    onState: (s, detail) => page.setStreamState(detail ? `${s}: ${detail}` : s),
  });
  info = setInterval(() => {
    api.getJson(`/v1/sessions/${encodeURIComponent(session)}`).then((i) => page.setInfo(i)).catch(() => {});
  }, 1500);
  (window as any).cairnViewer = { page, stream };
}

function openPage(): void {
  const state: { lines: string[]; entries: any[]; component: Uint8Array | null; checkpoint: Uint8Array | null; name: string; skipped: string } = {
    lines: [], entries: [], component: null, checkpoint: null, name: '', skipped: '',
  };
  const out = h('div', { class: 'opened' });
  const note = h('p', { class: 'drop-note', 'data-testid': 'drop-note' }, 'Drop an exported journal (.jsonl), and for a replay its component (.wasm) and, for a resumed run, the park checkpoint (any other file).');
  const input = h('input', { type: 'file', multiple: true, id: 'files', 'aria-label': 'journal and component files' }) as HTMLInputElement;
  const take = async (files: FileList | File[]) => {
    for (const f of Array.from(files)) {
      const bytes = new Uint8Array(await f.arrayBuffer());
      if (f.name.endsWith('.wasm') || (bytes[0] === 0 && bytes[1] === 0x61 && bytes[2] === 0x73 && bytes[3] === 0x6d)) state.component = bytes;
      else if (f.name.endsWith('.jsonl') || f.name.endsWith('.json')) {
        const parsed = parseJsonl(new TextDecoder().decode(bytes));
        state.lines = parsed.lines;
        state.entries = parsed.entries;
        state.name = f.name;
        const skipped = [
          parsed.bad.length ? `lines ${parsed.bad.slice(0, 10).join(', ')} are not JSON` : '',
          parsed.damaged.length ? `lines ${parsed.damaged.slice(0, 10).join(', ')} fail their checksum (changed after cairn wrote them)` : '',
        ].filter(Boolean);
        state.skipped = skipped.length ? `; ${skipped.join('; ')} and were left out` : '';
        note.textContent = `${f.name}${state.skipped}`;
      } else state.checkpoint = bytes;
    }
    draw();
  };
  const draw = () => {
    if (!state.entries.length) return;
    const session = state.entries[0]?.session_id ?? state.name;
    const page = new SessionPage(session, {
      live: false,
      replay: async (run) => {
        if (!state.component) throw new Error('drop the run\'s component (.wasm) to replay it');
        const { replayRun } = await import('./replay');
        return replayRun(state.component, state.lines.map((l) => parseExact(l)), run.id, run.resumes ? state.checkpoint : null);
      },
    });
    page.add(state.entries);
    note.textContent = `${state.name}: ${state.entries.length} entries${state.component ? ', a component' : ''}${state.checkpoint ? ', a checkpoint' : ''}${state.skipped}`;
    out.replaceChildren(page.el);
  };
  const zone = h('div', { class: 'dropzone', 'data-testid': 'dropzone' }, note, input);
  zone.addEventListener('dragover', (e) => { e.preventDefault(); zone.classList.add('over'); });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    zone.classList.remove('over');
    if (e.dataTransfer?.files) void take(e.dataTransfer.files);
  });
  input.addEventListener('change', () => input.files && void take(input.files));
  show(h('main', {}, h('h1', {}, 'Open an exported journal'), zone, out));
}

/**
 * Everything a replay needs is fetched while the server is there: jco's
 * transpiler and its core wasm, loaded once the page is idle. The page says
 * when (`data-replay-ready` on <body>), so a replay works with the network
 * gone.
 */
function warmReplay(): void {
  const go = () =>
    void import('./replay')
      .then((m) => m.warm())
      .then((ok) => {
        document.body.dataset.replayReady = ok ? 'yes' : 'no';
      });
  if ('requestIdleCallback' in window) (window as any).requestIdleCallback(go, { timeout: 2000 });
  else setTimeout(go, 200);
}

function route(): void {
  teardown?.();
  teardown = null;
  const hash = location.hash.replace(/^#/, '') || '/';
  const go = hash.startsWith('/s/') ? livePage(decodeURIComponent(hash.slice(3))) : hash === '/open' ? Promise.resolve(openPage()) : sessionsPage();
  go.catch(failed);
}

window.addEventListener('hashchange', route);
route();
warmReplay();
