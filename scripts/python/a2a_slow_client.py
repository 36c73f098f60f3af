"""Drives an agora node whose answers take longer than the A2A Python SDK's default timeout.

Usage: python a2a_slow_client.py BASE_URL

Uses the official SDK's client exactly as a new user would, at its default settings
(`create_client(url)`: streaming, and a plain httpx client with its 5-second timeout): a streamed
message, then with `ClientConfig(polling=True)` a message whose task comes back at once and is
polled with GetTask until it asks for input. Prints one JSON object with what it saw; the Rust
test (`a2a_interop_python_sdk_default_client_gets_a_slow_answer`) checks it. Exits non-zero on any
error, a timeout included.
"""

import asyncio
import json
import sys
import uuid

from google.protobuf.json_format import MessageToDict

from a2a.client import ClientConfig, create_client
from a2a.types import GetTaskRequest, Message, Part, Role, SendMessageRequest

WAITING = ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")


def text_message(text):
    message = Message(
        message_id=str(uuid.uuid4()), role=Role.ROLE_USER, parts=[Part(text=text)]
    )
    return SendMessageRequest(message=message)


async def collect(client, request):
    return [MessageToDict(event) async for event in client.send_message(request)]


async def main(base_url):
    seen = {}
    streaming = await create_client(base_url)
    seen["stream"] = await collect(streaming, text_message("Rain in Lima?"))

    polling = await create_client(base_url, client_config=ClientConfig(polling=True))
    seen["poll_first"] = await collect(polling, text_message("Wind in Quito?"))
    task_id = seen["poll_first"][-1]["task"]["id"]
    states = []
    for _ in range(120):
        task = MessageToDict(await polling.get_task(GetTaskRequest(id=task_id)))
        states.append(task["status"]["state"])
        if task["status"]["state"] not in WAITING:
            break
        await asyncio.sleep(0.5)
    seen["poll_states"] = states
    seen["poll_final"] = task
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
