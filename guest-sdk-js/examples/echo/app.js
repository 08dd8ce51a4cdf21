// Echo the prompt back, a word at a time, as a JavaScript controller.
import { controller, emitText, emitProgress, emitCustom, history } from 'cairn-sdk';

export const { describe, run } = controller({
  name: 'js-echo',
  version: '0.1.0',
  run(start) {
    emitCustom('history', { turns: history(16).length });
    const words = start.prompt.split(/\s+/).filter(Boolean);
    words.forEach((w, i) => {
      emitText(i === 0 ? w : ` ${w}`);
      emitProgress('echoing', i + 1, words.length);
    });
    return start.prompt;
  },
});
