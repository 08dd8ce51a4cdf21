"""Ask a person before acting on the prompt; park while nobody answers."""

import cairn_sdk as cairn


class Approval(cairn.Controller):
    name = "py-approval"
    version = "0.1.0"
    can_park = True

    def run(self, start: cairn.Start) -> object:
        verdict = cairn.request_approval(f"may I {start.prompt}?", {"action": start.prompt})
        if verdict.park:
            return cairn.Parked(start.prompt.encode())
        if not verdict.approved:
            return f"not done: {verdict.reason or 'denied'}"
        cairn.emit_text(f"done: {start.prompt}")
        return f"done: {start.prompt}"


WitWorld = cairn.export(Approval)
