// The viewer's bench: a 1,000-event and a 1,000,000-event session opened
// side by side in Debian's Chromium; figures from the page's own timing.
//   node tests/bench.mjs <cairn binary> [chromium] [events...]
// (CAIRN_BENCH_HOME=<dir> keeps the filled home for the next run)
// It serves a fresh home (limits raised for the big run), fills the
// sessions with the built-in `bench-emit` controller, then for each:
//   first_row_ms   navigation → the first event row painted
//   fcp_ms         first-contentful-paint
//   all_loaded_ms  navigation → every entry folded in (background pages)
//   scroll         frame times while scrolling the whole list top to bottom
//                  in 300 steps (p50, p95, max; frames over 50 ms)
//   heap_mb        JS heap after loading
// and prints one JSON document.
import { chromium } from 'playwright-core';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const [cairn, exe = '/usr/bin/chromium', ...sizes] = process.argv.slice(2);
const counts = (sizes.length ? sizes : ['1000', '1000000']).map(Number);
// CAIRN_BENCH_HOME keeps the home (and reuses its sessions) between runs.
const kept = process.env.CAIRN_BENCH_HOME;
const home = kept ?? fs.mkdtempSync(path.join(os.tmpdir(), 'cairn-viewer-bench-'));
fs.mkdirSync(home, { recursive: true });
fs.writeFileSync(path.join(home, 'cairn.toml'),
  '[limits]\nevents_per_run = 2000000\njournal_bytes = 4000000000\nwall_ms = 3600000\n');
const server = spawn(cairn, ['serve', '--home', home, '--listen', '127.0.0.1:0', '--insecure-local'], { stdio: ['ignore', 'pipe', 'pipe'] });
const base = await new Promise((resolve, reject) => {
  let buf = '';
  const look = (d) => {
    buf += d;
    const m = buf.match(/http:\/\/127\.0\.0\.1:\d+/);
    if (m) resolve(m[0]);
  };
  server.stdout.on('data', look);
  server.stderr.on('data', look);
  server.on('exit', (c) => reject(new Error(`cairn serve exited ${c}: ${buf}`)));
});
const post = async (p, body) => (await fetch(base + p, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })).json();
const get = async (p) => (await fetch(base + p)).json();

const sessions = [];
const existing = await get('/v1/sessions?limit=1000');
for (const n of counts) {
  const reuse = existing.find((s) => s.last_run?.status === 'finished' && s.last_run?.usage?.events === n);
  if (reuse) {
    sessions.push({ n, session: reuse.session_id });
    continue;
  }
  const t = Date.now();
  const run = await post('/v1/runs', { component: 'bench-emit', prompt: String(n) });
  for (;;) {
    const r = await get(`/v1/runs/${run.run_id}`);
    const st = (r.facts ?? r).status;
    if (st && st !== 'running') break;
    process.stderr.write(`\rfilling a ${n.toLocaleString('en')}-event session: ${Math.round((Date.now() - t) / 1000)} s`);
    await new Promise((res) => setTimeout(res, 500));
  }
  process.stderr.write(`\rfilled a ${n.toLocaleString('en')}-event session in ${((Date.now() - t) / 1000).toFixed(1)} s\n`);
  sessions.push({ n, session: run.session_id });
}

const browser = await chromium.launch({
  executablePath: exe,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage', '--enable-precise-memory-info'],
});
const results = [];
for (const { n, session } of sessions) {
  const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
  await page.goto(`${base}/ui/#/s/${session}`);
  await page.waitForSelector('.vlist .row');
  const firstRow = await page.evaluate(() => performance.now());
  const resources = await page.evaluate(() => performance.getEntriesByType('resource')
    .filter((r) => r.name.includes('/v1/')).slice(0, 3)
    .map((r) => ({ url: r.name.replace(/^https?:\/\/[^/]+/, '').replace(/s-[0-9a-f-]+/, '{id}'), start_ms: Math.round(r.startTime), ms: Math.round(r.duration) })));
  const fcp = await page.evaluate(() => performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null);
  const total = (await get(`/v1/sessions/${session}`)).last_seq;
  await page.waitForFunction((t) => document.querySelector('[data-testid=event-count]')?.textContent === String(t), total, { timeout: 600_000, polling: 200 });
  const allLoaded = await page.evaluate(() => performance.now());
  const scroll = await page.evaluate(async () => {
    const list = document.querySelector('.vlist');
    const frames = [];
    let last = performance.now();
    const steps = 300;
    for (let i = 0; i <= steps; i++) {
      list.scrollTop = (list.scrollHeight - list.clientHeight) * (i / steps);
      await new Promise((r) => requestAnimationFrame(() => r()));
      const now = performance.now();
      frames.push(now - last);
      last = now;
    }
    const rows = list.querySelectorAll('.row');
    const lastSeq = rows[rows.length - 1]?.getAttribute('data-seq');
    frames.sort((a, b) => a - b);
    const q = (p) => frames[Math.min(frames.length - 1, Math.floor(p * frames.length))];
    return { frames: frames.length, p50_ms: q(0.5), p95_ms: q(0.95), max_ms: frames[frames.length - 1], over_50ms: frames.filter((f) => f > 50).length, rows_in_dom: rows.length, last_row_seq: Number(lastSeq) };
  });
  const heap = await page.evaluate(() => performance.memory?.usedJSHeapSize ?? null);
  results.push({
    events: total,
    first_row_ms: Math.round(firstRow),
    fcp_ms: fcp === null ? null : Math.round(fcp),
    first_requests: resources,
    all_loaded_ms: Math.round(allLoaded),
    scroll,
    heap_mb: heap === null ? null : Math.round(heap / 1048576),
  });
  await page.close();
}
await browser.close();
server.kill('SIGTERM');
console.log(JSON.stringify({ bench: 'viewer', chromium: execFileSync(exe, ['--version'], { encoding: 'utf8' }).trim(), results }, null, 2));
if (!kept) fs.rmSync(home, { recursive: true, force: true });
