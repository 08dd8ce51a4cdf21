"""cairn's chat seam driven by the official `openai` Python client and by
LangChain's ChatOpenAI, as their users write them. Run by
tests/integration/clients.rs against a real server:

    python chat_clients.py BASE_URL PANICKER_DIGEST TOOLCALLER_DIGEST

Each check asserts what a user of that client relies on; the script prints
one JSON object of ids for the Rust side to check the journal, and exits
non-zero (with the failing check named) when anything is off.
"""

import json
import sys
import time

import httpx
import openai
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

BASE, PANICKER, TOOLCALLER = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused")
out = {}


def check(name):
    def wrap(f):
        try:
            f()
        except Exception as e:  # name the check that failed, then fail
            print(f"check {name!r} failed: {type(e).__name__}: {e}", file=sys.stderr)
            raise
        return f

    return wrap


@check("models")
def _():
    ids = [m.id for m in client.models.list()]
    assert "echo" in ids and "approval" in ids, ids
    # models.retrieve: one of them by its id; an unknown one is a 404.
    echo = client.models.retrieve("echo")
    assert echo.id == "echo" and echo.owned_by == "cairn", echo
    try:
        client.models.retrieve("no-such-model")
        raise AssertionError("an unknown model was retrieved")
    except openai.NotFoundError as e:
        assert "no model no-such-model" in str(e), e


@check("once")
def _():
    r = client.chat.completions.with_raw_response.create(
        model="echo", messages=[{"role": "user", "content": "hello there"}]
    )
    c = r.parse()
    assert c.choices[0].message.content == "hello there", c
    assert c.choices[0].finish_reason == "stop", c
    out["once_session"] = r.headers["x-cairn-session"]
    # The answer passed back as the SDK dumps it, on the same session.
    history = [
        {"role": "user", "content": "hello there"},
        c.choices[0].message.model_dump(),
        {"role": "user", "content": "and again"},
    ]
    again = client.chat.completions.create(
        model="echo",
        messages=history,
        extra_headers={"x-cairn-session": out["once_session"]},
    )
    assert again.choices[0].message.content == "and again", again


@check("import")
def _():
    # No session header: the earlier messages become the new session's history.
    first = client.chat.completions.create(
        model="echo", messages=[{"role": "user", "content": "one"}]
    )
    r = client.chat.completions.with_raw_response.create(
        model="echo",
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "one"},
            first.choices[0].message.model_dump(),
            {"role": "user", "content": "two"},
        ],
    )
    assert r.parse().choices[0].message.content == "two"
    out["import_session"] = r.headers["x-cairn-session"]


@check("tools")
def _():
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "look a word up",
                "parameters": {
                    "type": "object",
                    "properties": {"word": {"type": "string"}},
                },
            },
        }
    ]
    r = client.chat.completions.with_raw_response.create(
        model="echo",
        messages=[
            {"role": "developer", "content": "use tools"},
            {"role": "user", "content": "define cairn", "name": "ann"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"word": "cairn"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "a pile of stones"},
        ],
        tools=tools,
        tool_choice="auto",
        parallel_tool_calls=False,
        response_format={"type": "text"},
        store=False,
        metadata={"k": "v"},
        logprobs=False,
        seed=7,
        user="ann",
        n=1,
        temperature=0.2,
    )
    c = r.parse()
    # The trailing tool result is what the run answers.
    assert c.choices[0].message.content == "a pile of stones", c
    out["tools_session"] = r.headers["x-cairn-session"]


@check("stream")
def _():
    stream = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "streamed words here"}],
        stream=True,
    )
    text = ""
    # The plain loop every tutorial shows.
    for chunk in stream:
        text += chunk.choices[0].delta.content or ""
    assert text == "streamed words here", text


@check("include_usage")
def _():
    stream = client.chat.completions.create(
        model="echo",
        messages=[{"role": "user", "content": "count me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None, last
    assert last.usage.completion_tokens > 0, last.usage
    assert all(c.usage is None for c in chunks[:-1])


@check("approval_stream")
def _():
    stream = client.chat.completions.create(
        model="approval",
        messages=[{"role": "user", "content": "may I deploy?"}],
        stream=True,
    )
    text, finish, asked = "", None, 0
    for chunk in stream:
        choice = chunk.choices[0]  # must not raise on the decision chunk
        text += choice.delta.content or ""
        finish = choice.finish_reason or finish
        decision = (chunk.model_extra or {}).get("cairn_decision")
        if decision:
            asked += 1
            assert decision["request_kind"] == "approval", decision
            r = httpx.post(
                f"{BASE}{decision['answer_url']}",
                json={"value": {"approved": True}},
            )
            assert r.status_code == 200, r.text
    assert asked == 1 and finish == "stop", (asked, finish)
    assert "approved" in text, text


@check("approval_once")
def _():
    t0 = time.monotonic()
    r = client.chat.completions.with_raw_response.create(
        model="approval", messages=[{"role": "user", "content": "may I?"}]
    )
    c = r.parse()
    assert time.monotonic() - t0 < 20, "a waiting run answers at once"
    assert c.choices[0].finish_reason == "decision_requested", c
    decision = c.model_extra["cairn_decision"]
    run = r.headers["x-cairn-run"]
    assert decision["run_id"] == run
    a = httpx.post(f"{BASE}{decision['answer_url']}", json={"value": {"approved": False}})
    assert a.status_code == 200, a.text
    for _ in range(200):
        summary = httpx.get(f"{BASE}/v1/runs/{run}").json()
        if "facts" in summary:
            break
        time.sleep(0.05)
    assert summary["facts"]["status"] == "finished", summary
    out["approval_once_session"] = r.headers["x-cairn-session"]


@check("trap_is_one_run")
def _():
    try:
        client.chat.completions.create(
            model=PANICKER, messages=[{"role": "user", "content": "boom"}]
        )
    except openai.APIStatusError as e:
        assert e.response.headers.get("x-should-retry") == "false", e.response.headers
        assert e.status_code == 424, e.status_code
        out["trap_session"] = e.response.headers["x-cairn-session"]
    else:
        raise AssertionError("a trapping controller answered")


@check("langchain")
def _():
    @tool
    def lookup(word: str) -> str:
        """Look a word up."""
        return word

    llm = ChatOpenAI(model="echo", base_url=f"{BASE}/v1", api_key="unused")
    answer = llm.bind_tools([lookup]).invoke("langchain says hi")
    assert answer.content == "langchain says hi", answer
    streamed = "".join(c.content for c in llm.stream("streaming through langchain"))
    assert streamed == "streaming through langchain", streamed


LOOKUP = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "look a word up",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
    },
}


@check("client_tool_call")
def _():
    # A controller calling a tool the client offered: OpenAI tool_calls.
    c = client.chat.completions.create(
        model=TOOLCALLER, messages=[{"role": "user", "content": "define cairn"}], tools=[LOOKUP]
    )
    choice = c.choices[0]
    assert choice.finish_reason == "tool_calls", c
    [call] = choice.message.tool_calls
    assert call.function.name == "lookup" and call.type == "function", call
    assert json.loads(call.function.arguments) == {"query": "define cairn"}, call
    stream = client.chat.completions.create(
        model=TOOLCALLER, messages=[{"role": "user", "content": "streamed"}], tools=[LOOKUP], stream=True
    )
    names, args, finish = [], "", None
    for chunk in stream:
        choice = chunk.choices[0]
        for tc in choice.delta.tool_calls or []:
            if tc.function.name:
                names.append(tc.function.name)
            args += tc.function.arguments or ""
        finish = choice.finish_reason or finish
    assert names == ["lookup"] and json.loads(args) == {"query": "streamed"}, (names, args)
    assert finish == "tool_calls", finish


@check("langchain_tool_call")
def _():
    @tool
    def lookup(query: str) -> str:
        """Look a word up."""
        return query

    llm = ChatOpenAI(model=TOOLCALLER, base_url=f"{BASE}/v1", api_key="unused")
    answer = llm.bind_tools([lookup]).invoke("find cairns")
    assert [t["name"] for t in answer.tool_calls] == ["lookup"], answer
    assert answer.tool_calls[0]["args"] == {"query": "find cairns"}, answer


print(json.dumps(out))
