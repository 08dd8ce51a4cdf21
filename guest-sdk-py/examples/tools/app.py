"""The client's tools, called mid-run from Python: every tool the client
offered is called with ``{"query": <prompt>}`` (in parallel), and the run
answers ``answers: <name>=<result>; …`` once the client sent the results."""

import cairn_sdk as cairn
from cairn_sdk import client_tools


class Tools(cairn.Controller):
    name = "py-tools"
    version = "0.1.0"

    def run(self, start: cairn.Start) -> str:
        offered = client_tools.offered(start)
        if not offered:
            return start.prompt
        names = [t["name"] for t in offered]
        got = client_tools.call_all([(n, {"query": start.prompt}) for n in names])
        answer = "answers: " + "; ".join(f"{n}={r}" for n, r in zip(names, got))
        cairn.emit_text(answer)
        return answer


WitWorld = cairn.export(Tools)
