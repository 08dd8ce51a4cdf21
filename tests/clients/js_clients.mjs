// cairn's seams driven by the official JavaScript clients, as their users
// write them: `openai` (chat's tool loop, the Responses API streamed and in
// the background) and `@a2a-js/sdk` (a client made from the agent's URL,
// ListTasks paged). Run by tests/integration/clients.rs against a real
// server:
//
//     node js_clients.mjs BASE_URL AGENTLOOP_DIGEST
//
// Prints one JSON object; a failing check is named on stderr and the
// script exits non-zero.
import { randomUUID } from 'node:crypto';
import OpenAI from 'openai';
import { ClientFactory } from '@a2a-js/sdk/client';
import { Role, TaskState } from '@a2a-js/sdk';

const [base, agent] = process.argv.slice(2);
const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'unused', maxRetries: 0 });
const out = {};

async function check(name, f) {
  try {
    await f();
  } catch (e) {
    console.error(`check '${name}' failed: ${e?.stack ?? e}`);
    process.exit(1);
  }
}

function assert(ok, what) {
  if (!ok) throw new Error(typeof what === 'string' ? what : JSON.stringify(what));
}

const tool = (name) => ({
  type: 'function',
  function: { name, parameters: { type: 'object', properties: { query: { type: 'string' } } } },
});

await check('chat: the tool loop goes on mid-run, streamed', async () => {
  const tools = [tool('lookup'), tool('weather')];
  const messages = [{ role: 'user', content: 'lima' }];
  const { data: stream, response } = await client.chat.completions
    .create({ model: agent, messages, tools, stream: true })
    .withResponse();
  const session = response.headers.get('x-cairn-session');
  const run = response.headers.get('x-cairn-run');
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    for (const tc of choice?.delta?.tool_calls ?? []) calls[tc.index] = tc;
    finish = choice?.finish_reason ?? finish;
  }
  assert(finish === 'tool_calls', { finish });
  assert(calls.map((c) => c.function.name).join() === 'lookup,weather', calls);
  messages.push({ role: 'assistant', content: null, tool_calls: calls.map(({ index, ...c }) => c) });
  for (const c of calls) {
    const q = JSON.parse(c.function.arguments).query;
    messages.push({ role: 'tool', tool_call_id: c.id, content: `${c.function.name}(${q})` });
  }
  const { data: again, response: r2 } = await client.chat.completions
    .create({ model: agent, messages, tools, stream: true }, { headers: { 'x-cairn-session': session } })
    .withResponse();
  assert(r2.headers.get('x-cairn-run') === run, 'the same run goes on');
  let text = '';
  for await (const chunk of again) text += chunk.choices[0]?.delta?.content ?? '';
  assert(text === 'answers: lookup=lookup(lima); weather=weather(lima)', text);
  out.chat_session = session;
});

await check('responses: streamed, then in the background', async () => {
  const stream = await client.responses.create({ model: 'echo', input: 'streamed by node', stream: true });
  const kinds = [];
  let text = '';
  for await (const event of stream) {
    kinds.push(event.type);
    if (event.type === 'response.output_text.delta') text += event.delta;
  }
  assert(kinds[0] === 'response.created' && kinds.at(-1) === 'response.completed', kinds);
  assert(text === 'streamed by node', text);
  let r = await client.responses.create({ model: 'echo', input: 'node background', background: true });
  for (let i = 0; i < 200 && r.status !== 'completed'; i++) {
    await new Promise((ok) => setTimeout(ok, 50));
    r = await client.responses.retrieve(r.id);
  }
  assert(r.status === 'completed' && r.output_text === 'node background', r);
});

const text = (t, contextId = '') => ({
  tenant: '',
  message: {
    messageId: randomUUID(),
    contextId,
    taskId: '',
    role: Role.ROLE_USER,
    parts: [{ content: { $case: 'text', value: t }, metadata: undefined, filename: '', mediaType: '' }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  },
  configuration: undefined,
  metadata: undefined,
});

await check('a2a: createFromUrl on the agent URL, ListTasks paged', async () => {
  // Without the trailing slash the SDK resolves the card beside the
  // agent's URL, not under it: a 404 that says which URL to give.
  const card = await fetch(`${base}/v1/a2a/.well-known/agent-card.json`);
  assert(card.status === 404, card.status);
  assert((await card.json()).error.message.includes('BASE/v1/a2a/{agent}/'), 'the 404 names the URL');
  // The agent's URL with its trailing slash: the card resolves.
  const a2a = await new ClientFactory().createFromUrl(`${base}/v1/a2a/echo/`);
  const first = await a2a.sendMessage(text('hello from node'));
  assert(first.status?.state === TaskState.TASK_STATE_COMPLETED, first);
  const context = first.contextId;
  const made = new Set([first.id]);
  for (let i = 0; i < 4; i++) made.add((await a2a.sendMessage(text(`paged ${i}`, context))).id);
  const seen = [];
  let token = '';
  let pages = 0;
  do {
    const page = await a2a.listTasks({ tenant: '', contextId: context, status: TaskState.TASK_STATE_UNSPECIFIED, pageSize: 2, pageToken: token });
    pages += 1;
    assert(page.totalSize === made.size, page);
    seen.push(...page.tasks.map((t) => t.id));
    token = page.nextPageToken;
  } while (token);
  assert(pages === 3, { pages });
  assert(seen.length === made.size && seen.every((id) => made.has(id)), { seen, made: [...made] });
  out.a2a_tasks = seen.length;
});

console.log(JSON.stringify(out));
