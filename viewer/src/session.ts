// The session page: a header, the segments and fork lineage as a small
// graph, the runs as sections (assembled text, reasoning, tool calls,
// progress, decisions with buttons while pending, a replay action), and
// every entry in a virtualised list. The same page shows a live session
// (journal pages, then SSE with reconnects, gaps filled from the journal
// route) and an exported file (no server at all).
import { h, svg, shortId, componentLabel } from './dom';
import { VirtualList } from './list';
import { Row, RunView, SessionModel } from './model';

export interface Source {
  live: boolean;
  decide?(decisionId: string, value: unknown): Promise<void>;
  replay(run: RunView): Promise<import('./replay').ReplayResult>;
  /** The run replayed by another component (a shadow replay, as an
   * update checks it), by digest. */
  shadow?(run: RunView, digest: string): Promise<import('./replay').ReplayResult>;
  /** The components a shadow replay may name: (digest, label). */
  components?(): [string, string][];
}

export class SessionPage {
  readonly el: HTMLElement;
  readonly model = new SessionModel();
  private readonly header = h('div', { class: 'session-header' });
  private readonly lineage = h('div', { class: 'lineage', 'data-testid': 'lineage' });
  private readonly runsEl = h('div', { class: 'runs', 'data-testid': 'runs' });
  private readonly status = h('span', { class: 'stream-state', 'data-testid': 'stream-state' }, '');
  private readonly list: VirtualList<Row>;
  private readonly replays = new Map<string, HTMLElement>();
  private drawnVersion = -1;
  /** The shadow-replay control, made once (`null`: none offered). */
  private shadowEl: HTMLElement | null | undefined;
  private frame = 0;
  info: any = null;

  constructor(readonly sessionId: string, private readonly source: Source) {
    this.list = new VirtualList<Row>(
      (r) =>
        h('div', { class: `row t-${r.type}`, role: 'listitem', 'data-seq': String(r.seq) },
          h('span', { class: 'seq' }, String(r.seq)),
          h('span', { class: 'type' }, r.type),
          h('span', { class: 'run' }, shortId(r.run, 6)),
          h('span', { class: 'sum' }, r.summary)),
      'journal entries',
    );
    this.list.set(this.model.rows);
    this.el = h('div', { class: 'session-page', 'data-session': sessionId },
      this.header,
      h('section', {}, h('h2', {}, 'Segments and lineage'), this.lineage),
      h('section', {}, h('h2', {}, 'Runs'), this.runsEl),
      h('section', {}, h('h2', {}, 'Events ', h('span', { class: 'count', 'data-testid': 'event-count' }, '0')), this.list.el),
    );
    this.drawHeader();
  }

  setInfo(info: any): void {
    this.info = info;
    this.drawHeader();
  }

  setStreamState(s: string): void {
    this.status.textContent = s;
    this.status.dataset.state = s.split(' ')[0];
  }

  /** Folds entries in and schedules a redraw. */
  add(entries: any[]): void {
    for (const e of entries) this.model.add(e);
    this.schedule();
  }

  schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private drawHeader(): void {
    const i = this.info ?? {};
    const obs = i.observers ?? {};
    this.header.replaceChildren(
      h('h1', {}, 'Session ', h('code', { 'data-testid': 'session-id' }, this.sessionId)),
      h('div', { class: 'facts' },
        i.state ? h('span', { class: `badge state-${i.state.state}`, 'data-testid': 'session-state' }, i.state.state) : null,
        i.workspace ? h('span', {}, `workspace ${i.workspace}`) : null,
        i.component ? h('span', { title: i.component }, `component ${componentLabel(i.component)}`) : null,
        this.source.live
          ? h('span', { 'data-testid': 'presence' }, `observers: ${obs.collecting ?? 0} collecting, ${obs.claiming ?? 0} claiming, ${obs.present ?? 0} present`)
          : h('span', { class: 'badge' }, 'from a file'),
        i.parent ? h('a', { href: `#/s/${i.parent.session_id}` }, 'parent session') : null,
        this.source.live ? this.status : null),
      ...(this.shadowEl ??= this.drawShadow()) ? [this.shadowEl] : [],
    );
  }

  /** "Replay against another component": every ended run of the session
   * re-run by the chosen component in the page, each run's result (the
   * first divergence, with its seq marked in the list) in its section. */
  private drawShadow(): HTMLElement | null {
    const choices = this.source.components?.() ?? [];
    if (!this.source.shadow || !choices.length) return null;
    const select = h('select', { 'data-testid': 'shadow-component' },
      ...choices.map(([digest, label]) => h('option', { value: digest }, label))) as HTMLSelectElement;
    const summary = h('span', { class: 'shadow-summary', 'data-testid': 'shadow-summary' });
    const go = async () => {
      const digest = select.value;
      const label = componentLabel(digest);
      const runs = [...this.model.runs.values()].filter((r) => r.status !== 'running' && r.status !== 'waiting' && r.status !== 'cancelled');
      let matched = 0;
      let first: string | null = null;
      summary.textContent = `replaying ${runs.length} runs against ${label}…`;
      summary.dataset.state = 'running';
      for (const r of runs) {
        const out = this.replays.get(r.id);
        try {
          const res = await this.source.shadow!(r, digest);
          if (res.matches) {
            matched++;
            if (out) out.textContent = `against ${label}: matches (${res.checked} entries)`;
          } else {
            const d = res.divergence!;
            first ??= `run ${shortId(r.id, 8)} at seq ${d.seq ?? '(end)'}: expected ${d.expected}, got ${d.got}`;
            if (out) {
              out.dataset.state = 'diverges';
              out.textContent = `against ${label}: diverges at seq ${d.seq ?? '(end)'}: expected ${d.expected}, got ${d.got}`;
            }
            if (d.seq !== null) this.el.querySelector(`[data-seq="${d.seq}"]`)?.classList.add('diverged');
          }
        } catch (e) {
          first ??= `run ${shortId(r.id, 8)}: ${e instanceof Error ? e.message : String(e)}`;
        }
      }
      summary.dataset.state = first ? 'diverges' : 'matches';
      summary.textContent = first
        ? `${matched} of ${runs.length} runs replay against ${label}; first divergence: ${first}`
        : `all ${runs.length} runs replay against ${label}: an update to it would be taken`;
    };
    return h('div', { class: 'shadow' },
      h('span', {}, 'Replay every run against '), select,
      h('button', { class: 'shadow-go', 'data-testid': 'shadow-go', onclick: () => void go() }, 'Check'),
      ' ', summary);
  }

  private draw(): void {
    if (this.drawnVersion === this.model.version) return;
    this.drawnVersion = this.model.version;
    (this.el.querySelector('[data-testid=event-count]') as HTMLElement).textContent = String(this.model.rows.length);
    this.list.update();
    this.drawLineage();
    // Runs and component switches on one timeline, by seq.
    const items: [number, HTMLElement][] = [...this.model.runs.values()].map((r) => [r.firstSeq, this.drawRun(r)]);
    for (const u of this.model.updates) {
      items.push([u.seq, h('div', { class: 'component-update', 'data-testid': 'component-update', 'data-seq-at': String(u.seq) },
        `component updated at #${u.seq}: ${componentLabel(u.from)} → ${componentLabel(u.to)} (${u.mode.replace('_', ' ')}, ${u.checkedRuns} runs checked)`)]);
    }
    items.sort((a, b) => a[0] - b[0]);
    this.runsEl.replaceChildren(...items.map(([, el]) => el));
    if (this.model.holes.length) {
      this.runsEl.prepend(h('p', { class: 'warn' }, `entries ${this.model.holes.map((x) => `${x.from}–${x.to}`).join(', ')} could not be read (compacted away)`));
    }
  }

  private drawLineage(): void {
    const segs = this.model.segments;
    const w = 170;
    const parts: SVGElement[] = [];
    const fork = this.model.forkedFrom;
    let x = 10;
    if (fork) {
      parts.push(svg('rect', { x, y: 10, width: 150, height: 36, rx: 6, class: 'node parent' }));
      parts.push(svg('text', { x: x + 8, y: 32 }, document.createTextNode(`fork of ${shortId(fork.session, 10)} @${fork.beforeSeq}`)));
      x += w;
    }
    segs.forEach((s, i) => {
      if (i > 0 || fork) parts.push(svg('line', { x1: x - 20, y1: 28, x2: x, y2: 28, class: s.compactedFrom ? 'edge compacted' : 'edge forked' }));
      parts.push(svg('rect', { x, y: 10, width: 150, height: 36, rx: 6, class: i === segs.length - 1 ? 'node active' : 'node' }));
      parts.push(svg('text', { x: x + 8, y: 26 }, document.createTextNode(`segment ${shortId(s.id, 8)}`)));
      parts.push(svg('text', { x: x + 8, y: 40, class: 'small' }, document.createTextNode(s.compactedFrom ? 'compacted' : s.forkedFrom ? 'forked' : `from #${s.seq}`)));
      x += w;
    });
    const graph = svg('svg', { width: Math.max(x, 200), height: 56, role: 'img', 'aria-label': `${segs.length} segments` }, ...parts);
    const links: HTMLElement[] = [];
    if (fork && this.source.live) links.push(h('a', { href: `#/s/${fork.session}` }, `parent session ${fork.session}`));
    for (const c of this.info?.children ?? []) {
      links.push(h('a', { href: `#/s/${c.session_id}`, class: 'child' }, `child ${shortId(c.worker_id)} (${c.status})`));
    }
    this.lineage.replaceChildren(graph, ...links);
  }

  private drawRun(r: RunView): HTMLElement {
    const progress = [...r.progress.entries()].map(([message, p]) =>
      h('div', { class: 'progress' },
        h('span', {}, message),
        h('progress', { max: String(p.total ?? Math.max(Number(p.done), 1)), value: String(p.done) }),
        h('span', {}, `${p.done}${p.total !== undefined ? ` / ${p.total}` : ''}`)));
    const decisions = [...r.decisions.values()].map((d) => {
      const pending = r.pending().includes(d);
      const answer = d.value !== undefined ? `answered ${JSON.stringify(d.value)} by ${d.by}` : d.timedOut ? 'timed out' : d.route === 'parked' ? 'parked' : 'pending';
      const buttons: HTMLElement[] = [];
      if (pending && this.source.decide) {
        const decide = (value: unknown) => async (ev: Event) => {
          const b = ev.target as HTMLButtonElement;
          b.disabled = true;
          try {
            await this.source.decide!(d.id, value);
          } catch (e) {
            b.disabled = false;
            b.parentElement?.append(h('span', { class: 'error' }, String(e)));
          }
        };
        if (d.kind === 'approval') {
          buttons.push(h('button', { class: 'approve', onclick: decide({ approved: true }) }, 'Approve'));
          buttons.push(h('button', { class: 'deny', onclick: decide({ approved: false }) }, 'Deny'));
        } else {
          const input = h('input', { placeholder: 'answer (JSON or text)', class: 'answer-input' }) as HTMLInputElement;
          buttons.push(input, h('button', { class: 'answer', onclick: (ev: Event) => {
            let v: unknown = input.value;
            try { v = JSON.parse(input.value); } catch { /* text */ }
            return decide(v)(ev);
          } }, 'Answer'));
        }
      }
      return h('div', { class: `decision ${pending ? 'pending' : 'done'}`, 'data-decision': d.id },
        h('div', {}, h('strong', {}, d.kind), ' ', d.prompt),
        d.details && JSON.stringify(d.details) !== '{}' ? h('pre', { class: 'details' }, JSON.stringify(d.details, null, 2)) : null,
        h('div', { class: 'answer-state' }, answer, ...buttons));
    });
    let result = this.replays.get(r.id);
    if (!result) {
      result = h('span', { class: 'replay-result', 'data-testid': 'replay-result' });
      this.replays.set(r.id, result);
    }
    const replayButton = h('button', { class: 'replay', onclick: () => this.replay(r, result!) }, 'Replay in browser');
    return h('article', { class: `run status-${r.status}`, id: `run-${r.id}`, 'data-run': r.id, 'data-status': r.status },
      h('h3', {}, h('span', { class: 'badge' }, r.status), ' run ', h('code', {}, r.id),
        r.resumes ? h('span', { class: 'small' }, ` resumes ${shortId(r.resumes)}`) : null,
        r.continues ? h('span', { class: 'small' }, ` continues ${shortId(r.continues)}`) : null),
      h('div', { class: 'meta' }, `generation ${r.generation} · ${r.events} entries #${r.firstSeq}–#${r.lastSeq} · component ${componentLabel(r.component)}`),
      h('div', { class: 'prompt' }, h('strong', {}, 'prompt '), r.prompt),
      r.reasoning ? h('details', { class: 'reasoning' }, h('summary', {}, 'reasoning'), h('pre', {}, r.reasoning)) : null,
      h('div', { class: 'text', 'data-testid': 'run-text' }, r.text + (r.textTruncated ? ' …' : '')),
      ...progress,
      r.toolCalls.length ? h('ul', { class: 'tools' }, ...r.toolCalls.map((t) => h('li', {}, h('code', {}, t.name), ` ${JSON.stringify(t.arguments)}`))) : null,
      r.custom.length ? h('details', { class: 'custom' }, h('summary', {}, `${r.custom.length} custom events`), ...r.custom.map((c) => h('pre', {}, `${c.name} ${JSON.stringify(c.data)}`))) : null,
      ...decisions,
      r.ending ? h('div', { class: 'ending' }, r.ending) : null,
      h('div', { class: 'replay-bar' }, replayButton, result),
    );
  }

  private async replay(r: RunView, out: HTMLElement): Promise<void> {
    out.textContent = 'replaying…';
    out.dataset.state = 'running';
    try {
      const res = await this.source.replay(r);
      if (res.matches) {
        out.dataset.state = 'matches';
        out.textContent = `matches: ${res.checked} entries checked, outcome ${res.outcome}${res.note ? ` (${res.note})` : ''}`;
      } else {
        const d = res.divergence!;
        out.dataset.state = 'diverges';
        out.dataset.seq = d.seq === null ? '' : String(d.seq);
        out.textContent = `diverges at seq ${d.seq ?? '(end)'}: expected ${d.expected}, got ${d.got}`;
      }
    } catch (e) {
      out.dataset.state = 'error';
      out.textContent = `cannot replay: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
}

