"""Tools the *client* offered — an OpenAI chat request's ``tools``, a
Responses request's function tools — called mid-run: the client runs them
and sends the results back, and the run goes on with them::

    from cairn_sdk import client_tools

    def run(self, start):
        offered = client_tools.offered(start)
        if not offered:
            return start.prompt
        weather = client_tools.call(offered[0]["name"], {"city": "Oslo"})
        return f"it is {weather}"

A call is a ``tool_call`` event (id ``call_<run>_<n>``) and a
``tool_result`` wait whose details name it: the chat seam answers the
client with the call (``finish_reason: "tool_calls"``), and the client's
follow-up (``tool`` messages with that ``tool_call_id``) answers the wait,
on the same run. Both are journaled: a replay gets the results without
asking. A run that continues one that ended with tool calls gets the
client's results in ``results(start)``."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

from . import CairnError, emit_tool_call, request

_run = {"id": "", "next": 0}


def _started(run_id: str) -> None:
    """Called as a run starts: call ids are this run's."""
    _run["id"], _run["next"] = run_id.replace("-", ""), 0


def offered(start: Any) -> List[Dict[str, Any]]:
    """The function tools the client offered: ``{"name", "description",
    "parameters"}`` each."""
    tools = (start.tools or {}).get("tools") or []
    out = []
    for t in tools:
        f = t.get("function") or {}
        if isinstance(f.get("name"), str):
            out.append(
                {
                    "name": f["name"],
                    "description": f.get("description"),
                    "parameters": f.get("parameters") or {},
                }
            )
    return out


def results(start: Any) -> List[Tuple[str, str]]:
    """The tool results this run was started with, ``(tool_call_id,
    content)``, in the client's order."""
    given = (start.tools or {}).get("tool_results") or []
    return [
        (r["tool_call_id"], r.get("content") or "")
        for r in given
        if isinstance(r.get("tool_call_id"), str)
    ]


def call_all(calls: Sequence[Tuple[str, Any]]) -> List[str]:
    """Call several client tools at once (OpenAI's parallel tool calls) and
    wait for each result, in order; raises ``CairnError`` when the client
    sends none (``tool_result_missing``)."""
    ids = []
    for name, arguments in calls:
        _run["next"] += 1
        call_id = f"call_{_run['id']}_{_run['next']}"
        emit_tool_call(call_id, name, arguments)
        ids.append((call_id, name))
    out = []
    for call_id, name in ids:
        a = request("tool_result", name, {"tool_call_id": call_id, "name": name})
        if a.kind != "decided":
            raise CairnError("tool_result_missing", f"the client sent no result ({a.kind})")
        out.append(a.value if isinstance(a.value, str) else str(a.value))
    return out


def call(name: str, arguments: Any) -> str:
    """Call one client tool and wait for its result (the tool's text)."""
    return call_all([(name, arguments)])[0]
