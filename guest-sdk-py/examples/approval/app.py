"""Ask a person before acting on the prompt; park while nobody answers."""

import cairn_sdk as cairn


class Approval(cairn.Controller):
    name = "py-approval"
    version = "0.1.0"
    can_park = True

    def run(self, start: cairn.Start) -> object:
        # Resumed after parking: the action is in the checkpoint.
        action = start.prompt
        if start.checkpoint is not None:
            action = start.checkpoint.decode()
            cairn.emit_text(f"resuming after parking on: {action}")
        verdict = cairn.request_approval(f"may I {action}?", {"action": action})
        if verdict.park:
            return cairn.Parked(action.encode())
        if not verdict.approved:
            return f"not done: {verdict.reason or 'denied'}"
        cairn.emit_text(f"done: {action}")
        return f"done: {action}"


WitWorld = cairn.export(Approval)
