"""cairn's A2A seam driven by the official `a2a-sdk` client (1.x, JSON-RPC).
Run by tests/integration/clients.rs against a real `cairn serve`:

    python a2a_client.py before BASE_URL        # prints the pending task
    python a2a_client.py after BASE_URL TASK    # after a server restart

Each check asserts what an A2A client relies on; a failing check is named
on stderr and the script exits non-zero.
"""

import asyncio
import json
import sys
import uuid

from google.protobuf import json_format, struct_pb2

import httpx

from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.client.errors import A2AClientError
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

S = TaskState


def message(text=None, data=None, task_id="", context_id=""):
    parts = []
    if text is not None:
        parts.append(Part(text=text))
    if data is not None:
        parts.append(Part(data=json_format.ParseDict(data, struct_pb2.Value())))
    return SendMessageRequest(
        message=Message(
            message_id=str(uuid.uuid4()),
            role=Role.ROLE_USER,
            parts=parts,
            task_id=task_id,
            context_id=context_id,
        )
    )


async def collect(stream):
    return [e async for e in stream]


def text_of(events):
    """The artifact text a stream assembled, as a client does."""
    text = ""
    for e in events:
        if e.HasField("artifact_update"):
            chunk = "".join(p.text for p in e.artifact_update.artifact.parts)
            text = text + chunk if e.artifact_update.append else chunk
    return text


def states(events):
    out = []
    for e in events:
        if e.HasField("task"):
            out.append(e.task.status.state)
        elif e.HasField("status_update"):
            out.append(e.status_update.status.state)
    return out


def decision_of(status):
    for p in status.message.parts:
        if p.HasField("data"):
            return json_format.MessageToDict(p.data)
    raise AssertionError(f"no decision in {status}")


async def before(base):
    out = {}
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        assert card.name == "echo" and card.capabilities.streaming, card
        [iface] = card.supported_interfaces
        assert iface.protocol_binding == "JSONRPC" and iface.url == f"{base}/v1/a2a/echo", iface
        approval_card = await A2ACardResolver(http, f"{base}/v1/a2a/approval").get_agent_card()
        assert approval_card.name == "approval", approval_card
        # A base URL written with a trailing slash resolves the same card.
        slashed = await A2ACardResolver(http, f"{base}/v1/a2a/approval/").get_agent_card()
        assert slashed.name == "approval", slashed
    echo = await create_client(base)  # the host's default agent
    once = await create_client(base, ClientConfig(streaming=False))

    # Send: the task comes back completed, its text in the artifact.
    [r] = await collect(once.send_message(message("hello a2a")))
    task = r.task
    assert task.status.state == S.TASK_STATE_COMPLETED, task
    assert task.artifacts[0].parts[0].text == "hello a2a", task
    context = task.context_id

    # Stream, continuing the context: the task first, then its updates.
    events = await collect(echo.send_message(message("streamed over a2a", context_id=context)))
    assert events[0].HasField("task"), events[0]
    streamed = events[0].task.id
    assert events[0].task.context_id == context
    assert text_of(events) == "streamed over a2a", events
    assert states(events)[-1] == S.TASK_STATE_COMPLETED, states(events)
    assert streamed != task.id

    got = await echo.get_task(GetTaskRequest(id=streamed))
    assert got.status.state == S.TASK_STATE_COMPLETED and got.context_id == context
    listed = await echo.list_tasks(ListTasksRequest(context_id=context))
    assert {t.id for t in listed.tasks} == {task.id, streamed}, listed
    # More tasks than a page: pages of 2 follow nextPageToken and lose
    # nothing, each task once, totalSize counting them all.
    made = {task.id, streamed}
    for i in range(5):
        [r] = await collect(once.send_message(message(f"paged {i}", context_id=context)))
        made.add(r.task.id)
    seen, token, pages = [], "", 0
    while True:
        page = await echo.list_tasks(ListTasksRequest(context_id=context, page_size=2, page_token=token))
        pages += 1
        assert page.total_size == len(made), page
        assert len(page.tasks) == 2 or not page.next_page_token, page
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    assert pages == 4 and sorted(seen) == sorted(made) and len(seen) == len(set(seen)), (pages, seen)
    done = await echo.list_tasks(
        ListTasksRequest(context_id=context, page_size=2, status=S.TASK_STATE_FAILED)
    )
    assert not done.tasks and done.total_size == 0 and not done.next_page_token, done
    try:
        await echo.get_task(GetTaskRequest(id=str(uuid.uuid4())))
        raise AssertionError("an unknown task was found")
    except TaskNotFoundError:
        pass

    # A decision: input-required with the request, a reply with a data part
    # records it, and the task completes.
    approval = await create_client(f"{base}/v1/a2a/approval")
    events = await collect(approval.send_message(message("may I deploy?")))
    assert states(events)[-1] == S.TASK_STATE_INPUT_REQUIRED, states(events)
    last = events[-1].status_update
    request = decision_of(last.status)
    assert request["request_kind"] == "approval" and request["prompt"] == "may I deploy?", request
    events = await collect(
        approval.send_message(message(data={"approved": True}, task_id=last.task_id))
    )
    assert states(events)[-1] == S.TASK_STATE_COMPLETED, states(events)
    assert text_of(events) == "approved", events

    # Cancel: a waiting task is canceled; a canceled one cannot be again.
    approval_once = await create_client(f"{base}/v1/a2a/approval", ClientConfig(streaming=False))
    [r] = await collect(approval_once.send_message(message("cancel me")))
    assert r.task.status.state == S.TASK_STATE_INPUT_REQUIRED, r.task
    canceled = await approval_once.cancel_task(CancelTaskRequest(id=r.task.id))
    assert canceled.status.state == S.TASK_STATE_CANCELED, canceled
    try:
        await approval_once.cancel_task(CancelTaskRequest(id=r.task.id))
        raise AssertionError("a canceled task was canceled again")
    except TaskNotCancelableError:
        pass

    # A task left waiting across the restart.
    events = await collect(approval.send_message(message("still there after a restart?")))
    assert states(events)[-1] == S.TASK_STATE_INPUT_REQUIRED, states(events)
    out["pending_task"] = events[0].task.id
    out["pending_context"] = events[0].task.context_id
    out["echo_context"] = context
    return out


async def after(base, task_id):
    approval = await create_client(f"{base}/v1/a2a/approval")
    seen = []
    first_seen = asyncio.Event()

    async def follow():
        async for e in approval.subscribe(SubscribeToTaskRequest(id=task_id)):
            seen.append(e)
            if states(seen)[-1:] == [S.TASK_STATE_INPUT_REQUIRED]:
                first_seen.set()

    follower = asyncio.create_task(follow())
    await asyncio.wait_for(first_seen.wait(), 30)
    # The subscription replayed the task from its start.
    assert seen[0].HasField("task") and seen[0].task.id == task_id, seen[0]
    once = await create_client(f"{base}/v1/a2a/approval", ClientConfig(streaming=False))
    [r] = await collect(once.send_message(message(data={"approved": True}, task_id=task_id)))
    assert r.task.status.state == S.TASK_STATE_COMPLETED, r.task
    await asyncio.wait_for(follower, 30)
    assert states(seen)[-1] == S.TASK_STATE_COMPLETED, states(seen)
    assert S.TASK_STATE_INPUT_REQUIRED in states(seen)
    assert text_of(seen) == "approved", seen
    return {"subscribed_events": len(seen)}


async def main():
    phase, base = sys.argv[1], sys.argv[2]
    try:
        out = await before(base) if phase == "before" else await after(base, sys.argv[3])
    except (AssertionError, A2AClientError) as e:
        print(f"a2a check failed in {phase!r}: {type(e).__name__}: {e}", file=sys.stderr)
        raise
    print(json.dumps(out))


asyncio.run(main())
