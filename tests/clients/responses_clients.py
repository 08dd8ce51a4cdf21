"""cairn's Responses API driven by the official `openai` Python client's
`responses` resource and by the OpenAI Agents SDK, as their users write
them. Run by tests/integration/clients.rs against a real server:

    python responses_clients.py BASE_URL AGENTLOOP_DIGEST

Prints one JSON object of ids for the Rust side to check the journal, and
exits non-zero (naming the failing check) when anything is off.
"""

import asyncio
import json
import sys
import time

import openai

BASE, AGENT = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
out = {}


def check(name):
    def wrap(f):
        try:
            f()
        except Exception as e:
            print(f"check {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)
            raise
        return f

    return wrap


def tool(name):
    return {
        "type": "function",
        "name": name,
        "description": f"the {name} tool",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    }


@check("create, once")
def _():
    raw = client.responses.with_raw_response.create(model="echo", input="hello there")
    r = raw.parse()
    assert r.status == "completed", r
    assert r.output_text == "hello there", r
    assert r.output[0].type == "message" and r.output[0].role == "assistant", r
    assert r.id.startswith("resp_"), r.id
    # previous_response_id continues the session: a second run in it.
    r2 = client.responses.create(
        model="echo", input="and again", previous_response_id=r.id
    )
    assert r2.output_text == "and again", r2
    assert r2.id != r.id
    out["chained_session"] = raw.headers["x-cairn-session"]
    # GET rebuilds it from the journal.
    got = client.responses.retrieve(r.id)
    assert got.output_text == "hello there" and got.status == "completed", got


@check("instructions and input items become the new session's history")
def _():
    raw = client.responses.with_raw_response.create(
        model="echo",
        instructions="be brief",
        input=[
            {"role": "user", "content": "one"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "one"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "two"}]},
        ],
    )
    assert raw.parse().output_text == "two", raw.parse()
    out["imported_session"] = raw.headers["x-cairn-session"]


@check("streamed events, raw and through the SDK's accumulating stream")
def _():
    kinds, text = [], ""
    for event in client.responses.create(model="echo", input="streamed words here", stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed", kinds
    assert "response.output_item.added" in kinds and "response.output_text.done" in kinds, kinds
    assert text == "streamed words here", text
    with client.responses.stream(model="echo", input="managed stream") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == "managed stream", deltas
    assert final.output_text == "managed stream", final


@check("background: returns at once, polled, cancelled")
def _():
    r = client.responses.create(model="echo", input="in the background", background=True)
    assert r.status in ("queued", "in_progress"), r
    for _ in range(200):
        r = client.responses.retrieve(r.id)
        if r.status == "completed":
            break
        time.sleep(0.05)
    assert r.status == "completed" and r.output_text == "in the background", r
    # Cancelling a response that ended leaves it as it ended.
    again = client.responses.cancel(r.id)
    assert again.status == "completed" and again.output_text == "in the background", again
    waiting = client.responses.create(
        model="approval", input="wait for me", background=True
    )
    assert client.responses.retrieve(waiting.id).status == "in_progress"
    cancelled = client.responses.cancel(waiting.id)
    assert cancelled.status == "cancelled", cancelled
    out["cancelled_run"] = waiting.id


@check("a retried call (the same Idempotency-Key) joins the run its first attempt started")
def _():
    key = {"Idempotency-Key": f"responses-{time.time_ns()}"}
    a = client.responses.with_raw_response.create(model="echo", input="once only", extra_headers=key)
    b = client.responses.with_raw_response.create(model="echo", input="once only", extra_headers=key)
    assert a.headers["x-cairn-run"] == b.headers["x-cairn-run"], (a.headers, b.headers)
    assert a.parse().id == b.parse().id and b.parse().output_text == "once only", b.parse()
    out["retried_session"] = a.headers["x-cairn-session"]


@check("function tools: the calls end the response, function_call_output goes on")
def _():
    tools = [tool("lookup"), tool("weather")]
    r = client.responses.create(model=AGENT, input="oslo", tools=tools)
    calls = [i for i in r.output if i.type == "function_call"]
    assert [c.name for c in calls] == ["lookup", "weather"], r.output
    assert r.status == "completed", r
    outputs = [
        {
            "type": "function_call_output",
            "call_id": c.call_id,
            "output": f"{c.name}({json.loads(c.arguments)['query']})",
        }
        for c in calls
    ]
    r2 = client.responses.create(
        model=AGENT, input=outputs, tools=tools, previous_response_id=r.id
    )
    assert r2.output_text == "answers: lookup=lookup(oslo); weather=weather(oslo)", r2
    out["tools_response"] = r.id
    out["tools_followup"] = r2.id


@check("the OpenAI Agents SDK runs an agent whose model is a cairn controller")
def _():
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

    set_tracing_disabled(True)
    ran = []

    @function_tool
    def lookup(query: str) -> str:
        """Look a word up."""
        ran.append(("lookup", query))
        return f"looked up {query}"

    @function_tool
    def weather(query: str) -> str:
        """The weather of a city."""
        ran.append(("weather", query))
        return f"sunny in {query}"

    model = OpenAIResponsesModel(
        model=AGENT,
        openai_client=openai.AsyncOpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0),
    )
    agent = Agent(name="cairn", instructions="use the tools", model=model, tools=[lookup, weather])
    async def both():
        result = await Runner.run(agent, "bergen")
        run = Runner.run_streamed(agent, "trondheim")
        async for _ in run.stream_events():
            pass
        return result.final_output, run.final_output

    once, streamed = asyncio.run(both())
    assert once == "answers: lookup=looked up bergen; weather=sunny in bergen", once
    assert streamed == (
        "answers: lookup=looked up trondheim; weather=sunny in trondheim"
    ), streamed
    assert ran == [
        ("lookup", "bergen"),
        ("weather", "bergen"),
        ("lookup", "trondheim"),
        ("weather", "trondheim"),
    ], ran
    out["agents_runs"] = len(ran)


print(json.dumps(out))
