// Ask a person before acting on the prompt; park while nobody answers.
import { controller, emitText, requestApproval, parked } from 'cairn-sdk';

export const { describe, run } = controller({
  name: 'js-approval',
  version: '0.1.0',
  canPark: true,
  run(start) {
    // Resumed after parking: the action is in the checkpoint.
    let action = start.prompt;
    if (start.checkpoint) {
      action = new TextDecoder().decode(start.checkpoint);
      emitText(`resuming after parking on: ${action}`);
    }
    const verdict = requestApproval(`may I ${action}?`, { action });
    if (verdict.park) return parked(action);
    if (!verdict.approved) return `not done: ${verdict.reason ?? 'denied'}`;
    emitText(`done: ${action}`);
    return `done: ${action}`;
  },
});
