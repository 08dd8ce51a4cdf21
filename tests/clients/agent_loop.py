"""The agent loop of an OpenAI client on cairn's chat seam: the model asks
for the client's tools, the client runs them and sends the results back as
`tool` messages, the model answers. Driven by the official `openai` Python
client against a real server by tests/integration/clients.rs:

    python agent_loop.py BASE_URL AGENTLOOP_DIGEST [mid-run]

The controller (tests/guests/agentloop) calls every offered tool with
`{"query": <prompt>}` mid-run and answers `answers: <name>=<result>; …`, or,
with a prompt `end …`, ends its run with the calls and answers a
continuing run `results: <id>=<content>; …`. Prints one JSON object of ids
for the Rust side to check the journal.
"""

import json
import sys

import openai

BASE, AGENT = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0)
out = {}


def tool(name):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }


TOOLS = [tool("lookup"), tool("weather")]


def run_tool(call):
    """What the client's tools answer."""
    query = json.loads(call.function.arguments)["query"]
    return f"{call.function.name}({query})"


# `mid-run` as a third argument: only the mid-run checks (what a controller
# built with an SDK's `client_tools` is tried with).
MID_RUN_ONLY = sys.argv[3:] == ["mid-run"]


def check(name, mid_run=False):
    def wrap(f):
        if MID_RUN_ONLY and not mid_run:
            return f
        try:
            f()
        except Exception as e:
            print(f"check {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)
            raise
        return f

    return wrap


def results_of(calls):
    return [
        {"role": "tool", "tool_call_id": c.id, "content": run_tool(c)} for c in calls
    ]


@check("mid-run, streamed, on the named session", mid_run=True)
def _():
    messages = [{"role": "user", "content": "oslo"}]
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT, messages=messages, tools=TOOLS, stream=True
    )
    session, run = raw.headers["x-cairn-session"], raw.headers["x-cairn-run"]
    calls, finish = {}, None
    for chunk in raw.parse():
        choice = chunk.choices[0]
        for tc in choice.delta.tool_calls or []:
            calls.setdefault(tc.index, tc)
        finish = choice.finish_reason or finish
    # Both calls (parallel), then the answer ends: the client's turn.
    assert finish == "tool_calls", finish
    calls = [calls[i] for i in sorted(calls)]
    assert [c.function.name for c in calls] == ["lookup", "weather"], calls
    assert all(c.id.startswith("call_") for c in calls), calls
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": c.function.model_dump()}
                for c in calls
            ],
        }
    )
    messages += results_of(calls)
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT,
        messages=messages,
        tools=TOOLS,
        stream=True,
        extra_headers={"x-cairn-session": session},
    )
    # The same run goes on: no 409, no new run.
    assert raw.headers["x-cairn-run"] == run, (raw.headers["x-cairn-run"], run)
    text, finish = "", None
    for chunk in raw.parse():
        choice = chunk.choices[0]
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
    assert text == "answers: lookup=lookup(oslo); weather=weather(oslo)", text
    assert finish == "stop", finish
    out["streamed_session"], out["streamed_run"] = session, run


@check("mid-run, not streamed, no session header", mid_run=True)
def _():
    messages = [{"role": "user", "content": "bergen"}]
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT, messages=messages, tools=TOOLS
    )
    c = raw.parse()
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls", c
    calls = choice.message.tool_calls
    assert [t.function.name for t in calls] == ["lookup", "weather"], calls
    assert choice.message.content is None, c
    # The SDK's plain loop: the whole conversation back, no cairn header —
    # the call ids find the run that waits on them.
    messages.append(choice.message.model_dump(exclude_none=True))
    messages += results_of(calls)
    raw2 = client.chat.completions.with_raw_response.create(
        model=AGENT, messages=messages, tools=TOOLS
    )
    c2 = raw2.parse()
    assert raw2.headers["x-cairn-run"] == raw.headers["x-cairn-run"], raw2.headers
    assert raw2.headers["x-cairn-session"] == raw.headers["x-cairn-session"]
    assert c2.choices[0].message.content == (
        "answers: lookup=lookup(bergen); weather=weather(bergen)"
    ), c2
    assert c2.choices[0].finish_reason == "stop", c2
    out["once_session"] = raw.headers["x-cairn-session"]


@check("results that answer nothing the live run waits on")
def _():
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT, messages=[{"role": "user", "content": "tromso"}], tools=TOOLS
    )
    session = raw.headers["x-cairn-session"]
    wrong = [{"role": "tool", "tool_call_id": "call_nobody", "content": "x"}]
    try:
        client.chat.completions.create(
            model=AGENT,
            messages=[{"role": "user", "content": "tromso"}] + wrong,
            tools=TOOLS,
            extra_headers={"x-cairn-session": session},
        )
        raise AssertionError("a result for no call was taken")
    except openai.ConflictError as e:
        assert "waits on the results of call_" in str(e), e
        assert "answer call_nobody" in str(e), e
    # The right ones still answer it.
    calls = raw.parse().choices[0].message.tool_calls
    done = client.chat.completions.create(
        model=AGENT,
        messages=[{"role": "user", "content": "tromso"}] + results_of(calls),
        tools=TOOLS,
        extra_headers={"x-cairn-session": session},
    )
    assert done.choices[0].message.content.startswith("answers: lookup=lookup(tromso)"), done


@check("a new message instead of the results: the waiting run is cancelled, the next one runs")
def _():
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT, messages=[{"role": "user", "content": "narvik"}], tools=TOOLS
    )
    assert raw.parse().choices[0].finish_reason == "tool_calls", raw.parse()
    session = raw.headers["x-cairn-session"]
    went_on = client.chat.completions.with_raw_response.create(
        model=AGENT,
        messages=[{"role": "user", "content": "never mind"}],
        extra_headers={"x-cairn-session": session},
    )
    assert went_on.parse().choices[0].message.content == "never mind", went_on.parse()
    assert went_on.headers["x-cairn-run"] != raw.headers["x-cairn-run"]
    out["abandoned_session"] = session


@check("end of run: the results start a run that continues it")
def _():
    messages = [{"role": "user", "content": "end stavanger"}]
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT, messages=messages, tools=TOOLS
    )
    c = raw.parse()
    assert c.choices[0].finish_reason == "tool_calls", c
    calls = c.choices[0].message.tool_calls
    assert [t.id for t in calls] == ["end_1", "end_2"], calls
    session = raw.headers["x-cairn-session"]
    messages.append(c.choices[0].message.model_dump(exclude_none=True))
    messages += results_of(calls)
    raw2 = client.chat.completions.with_raw_response.create(
        model=AGENT,
        messages=messages,
        tools=TOOLS,
        extra_headers={"x-cairn-session": session},
    )
    assert raw2.headers["x-cairn-run"] != raw.headers["x-cairn-run"]
    assert raw2.parse().choices[0].message.content == (
        "results: end_1=lookup(stavanger); end_2=weather(stavanger)"
    ), raw2.parse()
    out["end_session"] = session
    out["end_first_run"] = raw.headers["x-cairn-run"]
    out["end_second_run"] = raw2.headers["x-cairn-run"]


@check("history holds system, tool and assistant turns as they were said")
def _():
    # The session the end-of-run check left: its results are tool turns.
    raw = client.chat.completions.with_raw_response.create(
        model=AGENT,
        messages=[{"role": "user", "content": "history"}],
        extra_headers={"x-cairn-session": out["end_session"]},
    )
    said = raw.parse().choices[0].message.content
    assert said == (
        "history: user=end stavanger; assistant=; tool[end_1]=lookup(stavanger); "
        "tool[end_2]=weather(stavanger); "
        "assistant=results: end_1=lookup(stavanger); end_2=weather(stavanger)"
    ), said
    # A conversation brought by the client: imported as it was said.
    call = {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    r = client.chat.completions.create(
        model=AGENT,
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_9", "content": "r"},
            {"role": "assistant", "content": "a"},
            {"role": "user", "content": "history"},
        ],
    )
    said = r.choices[0].message.content
    assert said == (
        f"history: system=be brief; user=q; assistant={{{json.dumps([call], separators=(',', ':'), sort_keys=True)}}}; "
        "tool[call_9]=r; assistant=a"
    ), said


print(json.dumps(out))
