// The viewer in a real browser (Debian's Chromium, driven by playwright-core)
// against a real `cairn serve`. Run by tests/integration/browser.rs:
//   node browser.mjs <json config>
// config: { base, tokenBase, token, counter (a .wasm path), shots (a dir),
//           chromium (the executable), cairn (the binary, for `cairn export`) }.
// Every step asserts; a failure exits non-zero naming the step. The last
// line printed is a JSON report: { steps: [...], replays: {...} }.
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const cfg = JSON.parse(process.argv[2]);
const { base } = cfg;
fs.mkdirSync(cfg.shots, { recursive: true });
const report = { steps: [], replays: {}, screenshots: [] };
const TIMEOUT = 60_000;

async function api(method, p, body, headers = {}) {
  const r = await fetch(base + p, {
    method,
    headers: body === undefined ? headers : { 'content-type': 'application/json', ...headers },
    body: body === undefined ? undefined : typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  const text = await r.text();
  assert.ok(r.ok, `${method} ${p}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, f) {
  const t = Date.now();
  for (;;) {
    const v = await f();
    if (v) return v;
    assert.ok(Date.now() - t < TIMEOUT, `timed out waiting for ${what}`);
    await sleep(50);
  }
}
const runFacts = (id) => api('GET', `/v1/runs/${id}`).then((r) => r.facts ?? r);
const ended = (id, status) => until(`run ${id} ${status}`, async () => (await runFacts(id)).status === status);
/** The session as `cairn export` writes it: one exact JSON line per entry. */
function journalLines(session) {
  const out = execFileSync(cfg.cairn, ['export', session, '--server', base], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.trim());
}

const browser = await chromium.launch({
  executablePath: cfg.chromium,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking',
    '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const errors = [];
page.on('pageerror', (e) => errors.push(e.message));
// Requests the page is still waiting on, named when a step fails (a
// step once timed out with the viewer waiting on one: which, and since
// when, is what to look at).
const inflight = new Map();
page.on('request', (r) => inflight.set(r, Date.now()));
page.on('requestfinished', (r) => inflight.delete(r));
page.on('requestfailed', (r) => inflight.delete(r));
async function shot(name) {
  const file = path.join(cfg.shots, `${name}.png`);
  await page.screenshot({ path: file, fullPage: true });
  report.screenshots.push(file);
}
async function step(name, f) {
  const t = Date.now();
  try {
    await f();
  } catch (e) {
    await shot(`FAILED-${name}`).catch(() => {});
    console.error(`step "${name}" failed: ${e.stack ?? e}`);
    const waiting = [...inflight].map(([r, at]) => `${r.method()} ${r.url()} (${Date.now() - at} ms)`);
    console.error(`requests the page still waits on: ${waiting.length ? waiting.join('; ') : 'none'}`);
    console.log(JSON.stringify(report));
    process.exit(1);
  }
  report.steps.push({ name, ms: Date.now() - t });
}
async function replayIn(runId, key) {
  const result = page.locator(`article[data-run="${runId}"] .replay-result`);
  await page.locator(`article[data-run="${runId}"] button.replay`).click();
  await result.and(page.locator('[data-state=matches], [data-state=diverges], [data-state=error]')).waitFor({ timeout: TIMEOUT });
  const text = await result.textContent();
  report.replays[key] = text;
  return { state: await result.getAttribute('data-state'), text, seq: await result.getAttribute('data-seq') };
}

const counter = fs.readFileSync(cfg.counter);
const uploaded = await api('POST', '/v1/components', counter, { 'content-type': 'application/wasm' });

let echo;
await step('the sessions list', async () => {
  echo = await api('POST', '/v1/runs', { component: 'echo', prompt: 'hello from the browser test' });
  await ended(echo.run_id, 'finished');
  await page.goto(`${base}/ui/`);
  const row = page.locator(`tr[data-session="${echo.session_id}"]`);
  await row.waitFor({ timeout: TIMEOUT });
  assert.match(await row.textContent(), /done/);
  assert.match(await row.textContent(), /echo 0\.1\.0/, 'the component is named as it describes itself');
  await page.fill('#filter', 'no-such-session-anywhere');
  await row.waitFor({ state: 'detached' });
  await page.fill('#filter', echo.session_id.slice(2, 14));
  await row.waitFor();
  await shot('sessions');
  await page.fill('#filter', '');
});

let live;
await step('a session followed live, approved with the button', async () => {
  // The counter emits 1..6, asks after 3, and goes on when approved.
  live = await api('POST', '/v1/runs', { component: uploaded.digest, prompt: '6 3' });
  await page.goto(`${base}/ui/#/s/${live.session_id}`);
  const run = page.locator(`article[data-run="${live.run_id}"]`);
  await page.locator('[data-testid=stream-state][data-state=live]').waitFor({ timeout: TIMEOUT });
  const approve = run.locator('.decision.pending button.approve');
  await approve.waitFor({ timeout: TIMEOUT });
  assert.equal(await run.locator('[data-testid=run-text]').textContent(), '123');
  await shot('session-pending-decision');
  await approve.click();
  await page.locator(`article[data-run="${live.run_id}"][data-status=finished]`).waitFor({ timeout: TIMEOUT });
  assert.equal(await run.locator('[data-testid=run-text]').textContent(), '123456');
  assert.match(await run.locator('.decision').textContent(), /answered \{"approved":true\} by client/);
  const facts = await runFacts(live.run_id);
  assert.equal(facts.status, 'finished');
  await shot('session-finished');
});

await step('in-browser replay: counter (random, clocks, files, an approval)', async () => {
  const r = await replayIn(live.run_id, 'counter');
  assert.equal(r.state, 'matches', r.text);
});

await step('in-browser replay: echo', async () => {
  await page.goto(`${base}/ui/#/s/${echo.session_id}`);
  const r = await replayIn(echo.run_id, 'echo');
  assert.equal(r.state, 'matches', r.text);
  await shot('replay-echo');
});

await step('approval: approved and denied with the buttons, both replay', async () => {
  for (const [label, button] of [['approved', 'approve'], ['denied', 'deny']]) {
    const run = await api('POST', '/v1/runs', { component: 'approval', prompt: `deploy (${label})` });
    await page.goto(`${base}/ui/#/s/${run.session_id}`);
    await page.locator(`article[data-run="${run.run_id}"] .decision.pending button.${button}`).click({ timeout: TIMEOUT });
    await page.locator(`article[data-run="${run.run_id}"][data-status=finished]`).waitFor({ timeout: TIMEOUT });
    const r = await replayIn(run.run_id, `approval-${label}`);
    assert.equal(r.state, 'matches', r.text);
  }
  await shot('replay-approval-denied');
});

await step('approval parked and resumed: both runs replay', async () => {
  const parked = await api('POST', '/v1/runs', { component: 'approval', prompt: 'park then resume', liveness: 'park' });
  await ended(parked.run_id, 'parked');
  const resumed = await api('POST', `/v1/runs/${parked.run_id}/resume`, {});
  const pending = await until('the resumed run asks', async () =>
    (await api('GET', '/v1/decisions')).find((d) => d.run_id === resumed.run_id));
  await api('POST', `/v1/decisions/${pending.decision_id}`, { value: { approved: true } });
  await ended(resumed.run_id, 'finished');
  await page.goto(`${base}/ui/#/s/${parked.session_id}`);
  let r = await replayIn(parked.run_id, 'approval-parked');
  assert.equal(r.state, 'matches', r.text);
  r = await replayIn(resumed.run_id, 'approval-resumed');
  assert.equal(r.state, 'matches', r.text);
  await page.locator('[data-testid=lineage] svg').waitFor();
  await shot('replay-park-resume');
});

await step('a forced gap is filled from the journal route', async () => {
  const lines = journalLines(live.session_id);
  const entries = lines.map((l) => JSON.parse(l));
  const n = entries.length;
  assert.ok(n >= 10, `${n} entries`);
  // The first journal page comes back empty, so the page follows from seq
  // 0; the stream then delivers seq 1, a gap, and seqs n-2.. : seqs 2..n-3
  // must come from the journal route.
  // Only this session's requests: the page of the step before may still
  // ask for its own stream (a reconnect) while this one loads.
  const ours = (u) => u.pathname.includes(`/sessions/${live.session_id}/`);
  await page.route((u) => ours(u) && u.pathname.endsWith('/journal') && u.searchParams.get('after') === '0', (route) =>
    route.fulfill({ contentType: 'application/json', body: JSON.stringify({ entries: [], last_seq: n }) }), { times: 1 });
  let sse = '';
  sse += `id: 1\ndata: ${lines[0]}\n\n`;
  sse += `event: gap\ndata: {"resumed_at":${n - 2}}\n\n`;
  for (const l of lines.slice(n - 3)) sse += `id: ${JSON.parse(l).seq}\ndata: ${l}\n\n`;
  await page.route((u) => ours(u) && u.pathname.endsWith('/events') && u.searchParams.get('after') === '0', (route) => route.fulfill({ contentType: 'text/event-stream', body: sse }), { times: 1 });
  const journalCalls = [];
  page.on('request', (r) => r.url().includes('/journal?') && journalCalls.push(r.url()));
  await page.goto(`${base}/ui/#/s/${live.session_id}`);
  await until('all entries shown', async () => (await page.locator('[data-testid=event-count]').textContent()) === String(n));
  const seqs = await page.evaluate(() => window.cairnViewer.page.model.rows.map((r) => r.seq));
  assert.deepEqual(seqs, entries.map((e) => e.seq));
  assert.ok(journalCalls.some((u) => u.includes('after=1&')), `the gap was read from the journal: ${journalCalls}`);
  await shot('gap-filled');
  await page.unrouteAll();
});

await step('an exported JSONL opened with no server, replayed, and a tampered one diverges', async () => {
  const lines = journalLines(live.session_id);
  const dir = fs.mkdtempSync(path.join(cfg.shots, 'files-'));
  const good = path.join(dir, 'counter.jsonl');
  fs.writeFileSync(good, lines.join('\n') + '\n');
  const entries = lines.map((l) => JSON.parse(l));
  const victim = entries.find((e) => e.payload?.event?.type === 'text_delta' && e.payload.event.text === '5');
  assert.ok(victim);
  // Changed as a journal written before checksums could be (its line
  // without one): a divergence. Changed with its checksum kept: damage,
  // left out and named.
  const unsealed = (l) => l.replace(/,"crc":"[0-9a-f]{8}"\}$/, '}');
  const tampered = path.join(dir, 'tampered.jsonl');
  fs.writeFileSync(tampered, lines.map((l) => (JSON.parse(l).seq === victim.seq ? unsealed(l).replace('"text":"5"', '"text":"five"') : l)).join('\n') + '\n');
  const damaged = path.join(dir, 'damaged.jsonl');
  fs.writeFileSync(damaged, lines.map((l) => (JSON.parse(l).seq === victim.seq ? l.replace('"text":"5"', '"text":"6"') : l)).join('\n') + '\n');
  const wasm = path.join(dir, 'counter.wasm');
  fs.copyFileSync(cfg.counter, wasm);
  // No API call may leave the offline page: the live page before it is
  // gone first (a request it had in flight is not the offline page's).
  await page.goto('about:blank');
  let apiCalls = 0;
  await page.route('**/v1/**', (route) => {
    apiCalls++;
    return route.abort();
  });
  await page.goto(`${base}/ui/#/open`);
  // What a replay needs is fetched while the server is there; then every
  // request fails (API and assets alike), as with the network gone.
  await page.waitForSelector('body[data-replay-ready="yes"]', { timeout: TIMEOUT });
  let offlineRequests = 0;
  await page.route('**/*', (route) => {
    offlineRequests++;
    return route.abort();
  });
  await page.setInputFiles('#files', [good, wasm]);
  await page.locator(`article[data-run="${live.run_id}"]`).waitFor({ timeout: TIMEOUT });
  let r = await replayIn(live.run_id, 'counter-offline');
  assert.equal(r.state, 'matches', r.text);
  await shot('offline-file');
  await page.setInputFiles('#files', [tampered]);
  await until('the tampered file shown', async () => (await page.locator('[data-testid=run-text]').first().textContent()).includes('five'));
  r = await replayIn(live.run_id, 'counter-tampered');
  assert.equal(r.state, 'diverges', r.text);
  assert.equal(Number(r.seq), victim.seq, r.text);
  assert.match(r.text, /expected \{"text":"five","type":"text_delta"\}, got \{"text":"5","type":"text_delta"\}/);
  await shot('offline-tampered-diverges');
  await page.setInputFiles('#files', [damaged]);
  const line = lines.findIndex((l) => JSON.parse(l).seq === victim.seq) + 1;
  await until('the damaged line named', async () => (await page.locator('[data-testid=drop-note]').textContent()).includes(`lines ${line} fail their checksum`));
  assert.equal(apiCalls, 0, 'the offline page called the API');
  assert.equal(offlineRequests, 0, 'the offline replay needed the network');
  await page.unrouteAll();
});

await step('in-browser replay: a delegating parent, its workers calls answered from the journal', async () => {
  const parent = await api('POST', '/v1/components', fs.readFileSync(cfg.parent), { 'content-type': 'application/wasm' });
  const steps = [{ spawn: { component: 'echo', prompt: 'from a child' } }, { wait: 0, timeout_ms: 30000 }, { status: 0 }, 'peers'];
  const run = await api('POST', '/v1/runs', { component: parent.digest, prompt: JSON.stringify(steps) });
  await ended(run.run_id, 'finished');
  await page.goto(`${base}/ui/#/s/${run.session_id}`);
  await page.locator(`article[data-run="${run.run_id}"]`).waitFor({ timeout: TIMEOUT });
  const r = await replayIn(run.run_id, 'parent');
  assert.equal(r.state, 'matches', r.text);
});

await step('in-browser replay: worktree snapshots — a carried file, and the delegate example\'s children\'s writes', async () => {
  const parent = await api('POST', '/v1/components', fs.readFileSync(cfg.parent), { 'content-type': 'application/wasm' });
  const first = await api('POST', '/v1/runs', { component: parent.digest, prompt: JSON.stringify([{ write: ['notes/today.txt', 'carried over'] }]) });
  await ended(first.run_id, 'finished');
  const second = await api('POST', '/v1/runs', { session: first.session_id, prompt: JSON.stringify([{ read: 'notes/today.txt' }]) });
  await ended(second.run_id, 'finished');
  await page.goto(`${base}/ui/#/s/${first.session_id}`);
  await page.locator(`article[data-run="${second.run_id}"]`).waitFor({ timeout: TIMEOUT });
  let r = await replayIn(second.run_id, 'carried');
  assert.equal(r.state, 'matches', r.text);
  const merged = await api('POST', '/v1/runs', { component: 'delegate', prompt: 'alpha | beta' });
  await ended(merged.run_id, 'finished');
  await page.goto(`${base}/ui/#/s/${merged.session_id}`);
  await page.locator(`article[data-run="${merged.run_id}"]`).waitFor({ timeout: TIMEOUT });
  r = await replayIn(merged.run_id, 'delegate');
  assert.equal(r.state, 'matches', r.text);
});

await step('in-browser replay: a sleep and a polled timer, answered from their journaled firing', async () => {
  const parent = await api('POST', '/v1/components', fs.readFileSync(cfg.parent), { 'content-type': 'application/wasm' });
  const run = await api('POST', '/v1/runs', { component: parent.digest, prompt: JSON.stringify([{ sleep: 120 }, { poll_timer: 3 }, { poll_timer: 0 }]) });
  await ended(run.run_id, 'finished');
  await page.goto(`${base}/ui/#/s/${run.session_id}`);
  await page.locator(`article[data-run="${run.run_id}"]`).waitFor({ timeout: TIMEOUT });
  const r = await replayIn(run.run_id, 'timers');
  assert.equal(r.state, 'matches', r.text);
});

await step('in-browser replay: a directory listing, sorted by name as on the host', async () => {
  const lister = await api('POST', '/v1/components', fs.readFileSync(cfg.lister), { 'content-type': 'application/wasm' });
  const run = await api('POST', '/v1/runs', { component: lister.digest, prompt: 'zeta alpha mid beta omega gamma' });
  await ended(run.run_id, 'finished');
  await page.goto(`${base}/ui/#/s/${run.session_id}`);
  await page.locator(`article[data-run="${run.run_id}"]`).waitFor({ timeout: TIMEOUT });
  const r = await replayIn(run.run_id, 'lister');
  assert.equal(r.state, 'matches', r.text);
  assert.match(r.text, /alpha beta gamma mid omega zeta/);
});

await step('in-browser replay: an agent, its model calls answered from the journal', async () => {
  await page.goto(`${base}/ui/#/s/${cfg.agent.session_id}`);
  await page.locator(`article[data-run="${cfg.agent.run_id}"]`).waitFor({ timeout: TIMEOUT });
  const r = await replayIn(cfg.agent.run_id, 'agent');
  assert.equal(r.state, 'matches', r.text);
  await shot('agent-replayed');
});

await step('in-browser replay: history with system and tool turns, read by 0.2.1 and by 0.2.0', async () => {
  const call = { id: 'call_9', type: 'function', function: { name: 'lookup', arguments: '{}' } };
  const messages = [
    { role: 'system', content: 'be brief' },
    { role: 'user', content: 'q' },
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: 'call_9', content: 'r' },
    { role: 'assistant', content: 'a' },
    { role: 'user', content: 'history' },
  ];
  for (const [key, file, said] of [
    ['history-0.2.1', cfg.agentloop, /^history: system=be brief; user=q; assistant=\{.*call_9.*\}; tool\[call_9\]=r; assistant=a$/],
    ['history-0.2.0', cfg.legacyV2, /^user=q; assistant=; assistant=a$/],
  ]) {
    const c = await api('POST', '/v1/components', fs.readFileSync(file), { 'content-type': 'application/wasm' });
    const r = await fetch(`${base}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: c.digest, messages }),
    });
    const body = await r.json();
    assert.ok(r.ok, JSON.stringify(body));
    assert.match(body.choices[0].message.content, said);
    const session = r.headers.get('x-cairn-session');
    const run = r.headers.get('x-cairn-run');
    await page.goto(`${base}/ui/#/s/${session}`);
    await page.locator(`article[data-run="${run}"]`).waitFor({ timeout: TIMEOUT });
    const replayed = await replayIn(run, key);
    assert.equal(replayed.state, 'matches', replayed.text);
  }
});

await step('a component update on the timeline, and a shadow replay against another component in the page', async () => {
  const v2 = await api('POST', '/v1/components', fs.readFileSync(cfg.echoV2), { 'content-type': 'application/wasm' });
  const calm = await api('POST', '/v1/runs', { component: 'echo', prompt: 'calm words' });
  const loud = await api('POST', '/v1/runs', { component: 'echo', prompt: 'shout words' });
  await ended(calm.run_id, 'finished');
  await ended(loud.run_id, 'finished');
  const updated = await api('POST', `/v1/sessions/${calm.session_id}/update`, { component: v2.digest });
  assert.equal(updated.switched, true);
  // The session that shouted: v2 shouts where echo did not.
  // A page load lists the components (v2 is new since the last one).
  await page.goto(`${base}/ui/#/s/${loud.session_id}`);
  await page.reload();
  await page.locator('[data-testid=shadow-component]').waitFor({ timeout: TIMEOUT });
  await page.selectOption('[data-testid=shadow-component]', v2.digest);
  await page.click('[data-testid=shadow-go]');
  const summary = page.locator('[data-testid=shadow-summary]');
  await summary.and(page.locator('[data-state=matches], [data-state=diverges]')).waitFor({ timeout: TIMEOUT });
  assert.equal(await summary.getAttribute('data-state'), 'diverges', await summary.textContent());
  assert.match(await summary.textContent(), /0 of 1 runs replay against echo-v2 .*first divergence: run .* at seq \d+: expected .*WORDS|0 of 1 runs replay against echo-v2 .*first divergence/);
  report.replays['shadow-loud'] = await summary.textContent();
  // The calm one: its switch is on the timeline, and its run replays by v2.
  await page.goto(`${base}/ui/#/s/${calm.session_id}`);
  const mark = page.locator('[data-testid=component-update]');
  await mark.waitFor({ timeout: TIMEOUT });
  assert.match(await mark.textContent(), /echo 0\.1\.0 → echo-v2 .*replay, 1 runs checked/);
  await page.selectOption('[data-testid=shadow-component]', v2.digest);
  await page.click('[data-testid=shadow-go]');
  await summary.and(page.locator('[data-state=matches], [data-state=diverges]')).waitFor({ timeout: TIMEOUT });
  assert.equal(await summary.getAttribute('data-state'), 'matches', await summary.textContent());
  report.replays['shadow-calm'] = await summary.textContent();
  await shot('component-update');
});

await step('a home with more than 1,000 sessions lists its newest (x-next-cursor followed)', async () => {
  const before = (await api('GET', '/v1/sessions')).length;
  for (let made = before; made <= 1000; made += 50) {
    await Promise.all(Array.from({ length: 50 }, () => api('POST', '/v1/sessions', {})));
  }
  const newest = await api('POST', '/v1/runs', { component: 'echo', prompt: 'the newest of many' });
  await ended(newest.run_id, 'finished');
  await page.goto(`${base}/ui/`);
  const row = page.locator(`tr[data-session="${newest.session_id}"]`);
  await row.waitFor({ timeout: TIMEOUT });
  assert.ok((await page.locator('tr[data-session]').count()) > 1000);
});

await step('a bearer-token prompt when workspaces are configured', async () => {
  const page2 = await context.newPage();
  await page2.goto(`${cfg.tokenBase}/ui/`);
  await page2.locator('#token').waitFor({ timeout: TIMEOUT });
  await page2.screenshot({ path: path.join(cfg.shots, 'token-prompt.png'), fullPage: true });
  report.screenshots.push(path.join(cfg.shots, 'token-prompt.png'));
  await page2.fill('#token', cfg.token);
  await page2.click('form.token-form button');
  await page2.locator('[data-testid=sessions]').waitFor({ timeout: TIMEOUT });
  await page2.close();
});

assert.deepEqual(errors, [], 'no uncaught errors in the page');
await browser.close();
console.log(JSON.stringify(report));
