// Fetch each URL the prompt lists (one per line) with the ordinary
// `fetch`, and answer with what came back.
import { controller, emitCustom } from 'cairn-sdk';

export const { describe, run } = controller({
  name: 'js-fetch',
  version: '0.1.0',
  async run(start) {
    const answers = [];
    for (const url of start.prompt.split('\n').filter(Boolean)) {
      try {
        const response = await fetch(url, { headers: { 'x-from': 'js' } });
        const answer = { url, status: response.status, body: await response.text() };
        emitCustom('fetched', answer);
        answers.push(answer);
      } catch (e) {
        answers.push({ url, error: String(e?.message ?? e) });
      }
    }
    return JSON.stringify(answers);
  },
});
