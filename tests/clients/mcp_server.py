"""A real MCP server (the official Python SDK, `mcp` 2.x) that the MCP
tests run as cairn's tool server, over stdio by default or streamable HTTP
(`--http PORT`).

Tools: `add` (read-only), `write_note` and `slow_write` (change a file),
`delete_notes` (the tests' config makes it need approval), `fail` (a tool
error), `whoami` (returns the TOKEN its environment got from a secret).
Each start appends a line to the file `$STARTS`, each call its tool's name
to `$CALLS`, so a test counts both from outside.
"""

import os
import sys
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations


def _append(var: str, line: str) -> None:
    path = os.environ.get(var)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())


server = MCPServer("notes")


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    _append("CALLS", "add")
    return a + b


@server.tool()
def write_note(text: str) -> str:
    """Append a line to the notes file."""
    _append("CALLS", "write_note")
    _append("NOTES", text)
    with open(os.environ["NOTES"], encoding="utf-8") as f:
        return f"noted ({len(f.readlines())} notes)"


@server.tool()
def slow_write(text: str, ms: int) -> str:
    """Append a line to the notes file after waiting `ms` milliseconds."""
    _append("CALLS", "slow_write")
    time.sleep(ms / 1000)
    _append("NOTES", text)
    return "written slowly"


@server.tool()
def delete_notes() -> str:
    """Delete the notes file."""
    _append("CALLS", "delete_notes")
    try:
        os.remove(os.environ["NOTES"])
    except FileNotFoundError:
        pass
    return "deleted"


@server.tool()
def fail(message: str) -> str:
    """Always fails, saying `message`."""
    _append("CALLS", "fail")
    raise ToolError(message)


@server.tool()
def whoami() -> str:
    """The token this server was started with."""
    _append("CALLS", "whoami")
    return "token=" + os.environ.get("TOKEN", "")


if __name__ == "__main__":
    _append("STARTS", str(os.getpid()))
    print(f"notes server {os.getpid()} starting", file=sys.stderr, flush=True)
    if len(sys.argv) > 2 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
