"""Echo the prompt back, a word at a time, as a Python controller."""

import cairn_sdk as cairn


class Echo(cairn.Controller):
    name = "py-echo"
    version = "0.1.0"

    def run(self, start: cairn.Start) -> str:
        words = start.prompt.split()
        earlier = cairn.history(16)
        cairn.emit_custom("history", {"turns": len(earlier)})
        for i, word in enumerate(words):
            cairn.emit_text(word if i == 0 else " " + word)
            cairn.emit_progress("echoing", i + 1, len(words))
        return start.prompt


WitWorld = cairn.export(Echo)
