"""cairn's Python SDK: write a controller as a class, build it into a
WebAssembly component with componentize-py, run it with ``cairn run``.

A controller sees nothing of the world but what the host provides and
journals: it emits events, waits for decisions, reads the session's
history, and calls a model or MCP tools through the host. Everything it
receives was journaled first, so its runs restore after a crash and replay
offline::

    import cairn_sdk as cairn

    class Echo(cairn.Controller):
        name = "py-echo"

        def run(self, start: cairn.Start) -> str:
            cairn.emit_text(start.prompt)
            return start.prompt

    WitWorld = cairn.export(Echo)

Build (``guest-sdk-py`` and the app's directory on the path; ``wit`` is
cairn's WIT directory)::

    componentize-py -d wit -w agent componentize app -p . -p guest-sdk-py -o echo.wasm
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Any, List, Optional, Type, Union

import wit_world
from componentize_py_types import Err
from wit_world.imports import decisions as _decisions
from wit_world.imports import history as _history
from wit_world.imports import journal as _journal
from wit_world.imports import types as _types

from . import model, tools  # noqa: F401  (re-exported)

__all__ = [
    "Controller", "Start", "Question", "Parked", "CairnError", "EmitError",
    "Answer", "Approval", "Turn", "emit_text", "emit_reasoning",
    "emit_progress", "emit_custom", "emit_tool_call", "request",
    "request_approval", "history", "export", "model", "tools",
]


class CairnError(Exception):
    """A controller's own failure: the run ends ``failed`` with this code
    and message (raise it from ``run``)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class EmitError(Exception):
    """An event was not journaled: the run was cancelled (``cancelled``),
    broke a limit (``limit_exceeded``), or the event was refused
    (``invalid``). Stop soon: the host ends the run either way."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


@dataclass
class Start:
    """What a run starts from."""

    run_id: str
    session_id: str
    worker_id: str
    generation: int
    prompt: str
    continues: Optional[str]
    checkpoint: Optional[bytes]
    tools: Optional[Any]


@dataclass
class Question:
    """Return this to end the run asking the user a clarifying question."""

    text: str


@dataclass
class Parked:
    """Return this to park the run; ``checkpoint`` comes back as
    ``start.checkpoint`` when it is resumed."""

    checkpoint: bytes


def _emit(event: Any) -> int:
    try:
        return _journal.emit(event)
    except Err as e:
        v = e.value
        if isinstance(v, _journal.EmitError_Cancelled):
            raise EmitError("cancelled") from None
        if isinstance(v, _journal.EmitError_LimitExceeded):
            raise EmitError("limit_exceeded", v.value) from None
        raise EmitError("invalid", getattr(v, "value", "")) from None


def emit_text(text: str) -> int:
    """Journal a piece of the answer; its sequence number."""
    return _emit(_journal.AgentEvent_TextDelta(text))


def emit_reasoning(text: str) -> int:
    """Journal a piece of reasoning."""
    return _emit(_journal.AgentEvent_ReasoningDelta(text))


def emit_progress(message: str, done: int, total: Optional[int] = None) -> int:
    """Journal progress: ``done`` of ``total`` steps."""
    return _emit(_journal.AgentEvent_Progress(_journal.Progress(message, done, total)))


def emit_custom(name: str, data: Any) -> int:
    """Journal a custom event carrying ``data`` (any JSON value)."""
    return _emit(_journal.AgentEvent_Custom(_journal.Custom(name, json.dumps(data))))


def emit_tool_call(call_id: str, name: str, arguments: Any) -> int:
    """Journal a tool call the controller makes (its arguments as JSON)."""
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments)
    return _emit(_journal.AgentEvent_ToolCall(_journal.ToolCall(call_id, name, arguments)))


@dataclass
class Answer:
    """How a decision wait ended: ``kind`` is ``decided`` (with ``value``,
    the JSON answer), ``timed_out``, ``cancelled`` or ``park``."""

    kind: str
    value: Any = None


_KINDS = {
    "approval": _decisions.RequestKind.APPROVAL,
    "tool_result": _decisions.RequestKind.TOOL_RESULT,
    "answer": _decisions.RequestKind.ANSWER,
}


def request(
    kind: str,
    prompt: str,
    details: Any = None,
    timeout_ms: Optional[int] = None,
    default: Any = None,
) -> Answer:
    """Ask for a decision (``approval``, ``tool_result`` or ``answer``) and
    wait for it. The request and its answer are journaled; a replay gets
    the same answer without asking."""
    if kind not in _KINDS:
        raise ValueError(f"{kind!r} is not a decision kind: say approval, tool_result or answer")
    req = _decisions.Request(
        _KINDS[kind],
        prompt,
        json.dumps(details if details is not None else {}),
        timeout_ms,
        None if default is None else json.dumps(default),
    )
    try:
        a = _decisions.wait(req)
    except Err as e:
        raise CairnError("refused", getattr(e.value, "value", str(e.value))) from None
    if isinstance(a, _decisions.Answer_Decided):
        return Answer("decided", json.loads(a.value))
    if isinstance(a, _decisions.Answer_TimedOut):
        return Answer("timed_out")
    if isinstance(a, _decisions.Answer_Park):
        return Answer("park")
    return Answer("cancelled")


@dataclass
class Approval:
    """A person's verdict: ``approved`` (with an optional ``reason``), or
    ``park`` when the run should park and ask again when resumed."""

    approved: bool
    reason: Optional[str] = None
    park: bool = False


def request_approval(prompt: str, details: Any = None) -> Approval:
    """Ask a person to approve ``prompt``."""
    a = request("approval", prompt, details)
    if a.kind == "park":
        return Approval(False, None, park=True)
    if a.kind != "decided":
        return Approval(False, a.kind)
    v = a.value
    if isinstance(v, bool):
        return Approval(v)
    if isinstance(v, dict):
        return Approval(bool(v.get("approved")), v.get("reason"))
    return Approval(False, "the answer was not an approval")


@dataclass
class Turn:
    """One turn of the session before this run: ``role`` is ``user``,
    ``assistant``, ``system`` (imported instructions) or ``tool`` (a tool's
    result, with its ``tool_call_id``); an assistant turn may carry
    ``tool_calls`` (OpenAI's JSON text)."""

    role: str
    text: str
    run_id: str
    seq: int
    tool_call_id: Optional[str] = None
    tool_calls: Optional[str] = None


_ROLES = {
    _history.Role.USER: "user",
    _history.Role.ASSISTANT: "assistant",
    _history.Role.SYSTEM: "system",
    _history.Role.TOOL: "tool",
}


def history(limit: int = 16) -> List[Turn]:
    """The session's latest turns before this run, oldest first."""
    return [
        Turn(_ROLES[t.role], t.text, t.run_id, t.seq, t.tool_call_id, t.tool_calls)
        for t in _history.turns(limit)
    ]


class Controller:
    """Subclass it: set ``name`` (and ``version``, ``can_park``), write
    ``run(start)``, and export it with ``WitWorld = export(YourClass)``.

    ``run`` returns the final answer (a ``str``), a ``Question``, or a
    ``Parked``; raising ``CairnError`` ends the run ``failed`` with its
    code (any other exception too, with code ``exception``)."""

    name: str = "python-controller"
    version: str = "0.1.0"
    can_park: bool = False

    def run(self, start: Start) -> Union[str, Question, Parked]:
        raise NotImplementedError


def _outcome(result: Any) -> Any:
    if isinstance(result, Question):
        return _types.Outcome_Question(result.text)
    if isinstance(result, Parked):
        return _types.Outcome_Parked(bytes(result.checkpoint))
    if result is None:
        result = ""
    return _types.Outcome_Finished(str(result))


def export(cls: Type[Controller]) -> type:
    """The class componentize-py calls (``WitWorld = export(MyController)``)."""

    class WitWorld(wit_world.WitWorld):
        def describe(self) -> Any:
            return _types.Info(cls.name, cls.version, cls.can_park)

        def run(self, start: Any) -> Any:
            s = Start(
                start.run_id,
                start.session_id,
                start.worker_id,
                start.generation,
                start.prompt,
                start.continues,
                start.checkpoint,
                json.loads(start.tools) if start.tools else None,
            )
            _client_tools._started(start.run_id)
            try:
                return _outcome(cls().run(s))
            except CairnError as e:
                return _types.Outcome_Failed(_types.ControllerError(e.code, e.message))
            except EmitError as e:
                return _types.Outcome_Failed(_types.ControllerError(e.kind, e.message or e.kind))
            except Exception as e:  # the controller's bug: name it, do not trap
                last = traceback.format_exception_only(type(e), e)[-1].strip()
                return _types.Outcome_Failed(_types.ControllerError("exception", last))

    return WitWorld


# Last: it uses what is defined above (and is bundled with the package).
from . import client_tools as _client_tools  # noqa: E402
