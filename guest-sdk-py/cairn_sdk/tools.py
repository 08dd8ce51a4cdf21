"""The tools of MCP servers through the host (``cairn:tools/mcp@0.1.0``):
the host runs the servers its ``cairn.toml`` names, keeps them open across
the session's runs, asks a person first for tools marked ``approve``, and
journals every list and call (a replay reaches no server)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, List, Optional

from componentize_py_types import Err
from wit_world.imports import mcp as _mcp

from .model import Tool


class ToolError(Exception):
    """Why a call gave no answer: ``kind`` is ``refused``, ``denied``,
    ``park`` (park the run: the approval waits), ``server``,
    ``limit_exceeded``, ``cancelled`` or ``interrupted``."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(f"{kind}: {message}" if message else kind)
        self.kind = kind
        self.message = message


@dataclass
class ToolInfo:
    """One tool of the session's servers."""

    server: str
    name: str
    description: str
    input_schema: Any
    read_only: bool
    approve: bool


@dataclass
class ToolResult:
    """A tool's answer; ``is_error``: the tool itself failed (``text`` says how)."""

    text: str
    content: Any
    structured: Optional[Any]
    is_error: bool


def _raise(e: Err) -> None:
    v = e.value
    kind = {
        _mcp.ToolError_Refused: "refused",
        _mcp.ToolError_Denied: "denied",
        _mcp.ToolError_Park: "park",
        _mcp.ToolError_Server: "server",
        _mcp.ToolError_LimitExceeded: "limit_exceeded",
        _mcp.ToolError_Cancelled: "cancelled",
        _mcp.ToolError_Interrupted: "interrupted",
    }.get(type(v), "server")
    raise ToolError(kind, getattr(v, "value", "") or "") from None


def list_tools() -> List[ToolInfo]:
    """The tools of every server the workspace is granted."""
    try:
        listed = _mcp.list()
    except Err as e:
        _raise(e)
    return [
        ToolInfo(t.server, t.name, t.description, json.loads(t.input_schema or "{}"), t.read_only, t.approve)
        for t in listed
    ]


def available() -> List[ToolInfo]:
    """The tools, or none when the workspace is granted no server."""
    try:
        return list_tools()
    except ToolError as e:
        if e.kind == "refused":
            return []
        raise


def call(name: str, arguments: Any = None) -> ToolResult:
    """Call a tool by the name ``list_tools`` gave."""
    try:
        r = _mcp.call(name, json.dumps(arguments if arguments is not None else {}))
    except Err as e:
        _raise(e)
    return ToolResult(
        r.text,
        json.loads(r.content or "[]"),
        None if r.structured is None else json.loads(r.structured),
        r.is_error,
    )


def for_model(listed: List[ToolInfo]) -> List[Tool]:
    """The tools as ``model.chat`` takes them."""
    return [Tool(t.name, t.description, t.input_schema) for t in listed]
