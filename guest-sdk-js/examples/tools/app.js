// The client's tools, called mid-run from JavaScript: every tool the client
// offered is called with {"query": <prompt>} (in parallel), and the run
// answers `answers: <name>=<result>; …` once the client sent the results.
import { controller, emitText, clientTools } from 'cairn-sdk';

export const { describe, run } = controller({
  name: 'js-tools',
  version: '0.1.0',
  run(start) {
    const offered = clientTools.offered(start);
    if (offered.length === 0) return start.prompt;
    const got = clientTools.callAll(offered.map((t) => [t.name, { query: start.prompt }]));
    const answer = `answers: ${offered.map((t, i) => `${t.name}=${got[i]}`).join('; ')}`;
    emitText(answer);
    return answer;
  },
});
