"""A language model through the host (``cairn:model/chat@0.1.0``): the host
holds the provider and its key; the controller names a model entry of the
host's ``cairn.toml``. Every call is journaled before its answer comes back,
so a replay gets the same answer without calling anyone."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from componentize_py_types import Err
from wit_world.imports import chat as _chat

_ROLES = {
    "system": _chat.Role.SYSTEM,
    "user": _chat.Role.USER,
    "assistant": _chat.Role.ASSISTANT,
    "tool": _chat.Role.TOOL,
}


class ModelError(Exception):
    """Why a call gave no answer: ``kind`` is ``refused``,
    ``limit_exceeded``, ``provider``, ``cancelled`` or ``interrupted``."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


@dataclass
class ToolCall:
    """A tool call the model asked for."""

    id: str
    name: str
    arguments: str

    def args(self) -> Any:
        """The arguments, parsed (``{}`` when the model wrote no JSON)."""
        try:
            return json.loads(self.arguments)
        except ValueError:
            return {}


@dataclass
class Response:
    """The model's answer."""

    text: str
    tool_calls: List[ToolCall]
    finish_reason: str
    input_tokens: int
    output_tokens: int
    model: str


@dataclass
class Tool:
    """A tool the model may call: ``parameters`` is a JSON Schema."""

    name: str
    description: str
    parameters: Dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})


def _message(m: Dict[str, Any]) -> Any:
    calls = [
        _chat.ToolCall(c["id"], c["name"], c["arguments"] if isinstance(c["arguments"], str) else json.dumps(c["arguments"]))
        for c in m.get("tool_calls", [])
    ]
    return _chat.Message(_ROLES[m["role"]], m.get("content", ""), calls, m.get("tool_call_id"))


def chat(
    messages: List[Dict[str, Any]],
    tools: Optional[List[Tool]] = None,
    model: str = "",
    max_tokens: Optional[int] = None,
    temperature: Optional[float] = None,
    stream: bool = False,
) -> Response:
    """Call the model with OpenAI-style messages (``{"role", "content",
    "tool_calls"?, "tool_call_id"?}``). With ``stream``, its tokens reach
    the run's observers as it writes; the whole answer returns once."""
    req = _chat.Request(
        model,
        [_message(m) for m in messages],
        [_chat.Tool(t.name, t.description, json.dumps(t.parameters)) for t in (tools or [])],
        None,
        max_tokens,
        temperature,
        stream,
    )
    try:
        r = _chat.chat(req)
    except Err as e:
        v = e.value
        kind = {
            _chat.ModelError_Refused: "refused",
            _chat.ModelError_LimitExceeded: "limit_exceeded",
            _chat.ModelError_Provider: "provider",
            _chat.ModelError_Cancelled: "cancelled",
            _chat.ModelError_Interrupted: "interrupted",
        }.get(type(v), "provider")
        raise ModelError(kind, getattr(v, "value", "") or "") from None
    return Response(
        r.text,
        [ToolCall(c.id, c.name, c.arguments) for c in r.tool_calls],
        r.finish_reason.name.lower(),
        r.usage.input_tokens,
        r.usage.output_tokens,
        r.model,
    )


def assistant_message(r: Response) -> Dict[str, Any]:
    """The model's answer as the next message of the conversation."""
    return {
        "role": "assistant",
        "content": r.text,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in r.tool_calls],
    }
